// One AdamW step (decoupled weight decay), elementwise over a parameter
// tensor: m = b1 m + (1 − b1) g, v = b2 v + (1 − b2) g²,
// p −= lr (m c1 / (sqrt(v c2) + eps) + wd p), with the bias corrections
// c1 = 1 / (1 − b1^t), c2 = 1 / (1 − b2^t) computed on the host in f64, and
// 1 − b1, 1 − b2 rounded from f64 on the host too: computing 1 − 0.999 in
// f32 errs by 1.3e-5 relative, a bias on every step.

fn element(i: u32) {
    let g = grad[i];
    let m = p.beta1 * m1[i] + p.one_minus_beta1 * g;
    let v = p.beta2 * m2[i] + p.one_minus_beta2 * g * g;
    m1[i] = m;
    m2[i] = v;
    param[i] -= p.lr * (m * p.c1 / (sqrt(v * p.c2) + p.eps) + p.wd * param[i]);
}
