// y = a * x + b * y elementwise; with b == 0 the old y is not read.

fn element(i: u32) {
    var v = p.a * x[i];
    if (p.b != 0.0) {
        v += p.b * y[i];
    }
    y[i] = v;
}
