// y = max(x, 0) elementwise.

fn element(i: u32) {
    y[i] = max(x[i], 0.0);
}
