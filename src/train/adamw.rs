//! AdamW (Loshchilov & Hutter, *Decoupled Weight Decay Regularization*,
//! arXiv:1711.05101): $m \leftarrow \beta_1 m + (1-\beta_1) g$,
//! $v \leftarrow \beta_2 v + (1-\beta_2) g^2$,
//! $\theta \leftarrow \theta - \eta\,(\hat m/(\sqrt{\hat v}+\epsilon) + \lambda\theta)$.

use super::kernels::Real;
use faer::Mat;

/// AdamW state and hyper-parameters.
#[derive(Clone, Debug)]
pub struct AdamW<F: Real> {
    /// Learning rate η.
    pub lr: f64,
    /// β₁.
    pub beta1: f64,
    /// β₂.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
    /// Decoupled weight decay λ.
    pub weight_decay: f64,
    m: Vec<Mat<F>>,
    v: Vec<Mat<F>>,
    step: u32,
}

impl<F: Real> AdamW<F> {
    /// Zero state for parameters shaped like `params`.
    pub fn new(params: &[Mat<F>], lr: f64, weight_decay: f64) -> Self {
        let z = |p: &Mat<F>| Mat::zeros(p.nrows(), p.ncols());
        Self {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
            m: params.iter().map(z).collect(),
            v: params.iter().map(z).collect(),
            step: 0,
        }
    }

    /// One update; `decay[k]` says whether parameter `k` is decayed.
    pub fn step(&mut self, params: &mut [Mat<F>], grads: &[Mat<F>], decay: &[bool]) {
        self.step += 1;
        let bc1 = 1.0 - self.beta1.powi(self.step as i32);
        let bc2 = 1.0 - self.beta2.powi(self.step as i32);
        let (b1, b2) = (F::from_f64(self.beta1), F::from_f64(self.beta2));
        let (ob1, ob2) = (F::from_f64(1.0 - self.beta1), F::from_f64(1.0 - self.beta2));
        let step_size = F::from_f64(self.lr / bc1);
        let inv_bc2 = F::from_f64(1.0 / bc2);
        let eps = F::from_f64(self.eps);
        for k in 0..params.len() {
            let wd = F::from_f64(if decay[k] {
                self.lr * self.weight_decay
            } else {
                0.0
            });
            let one = F::from_f64(1.0);
            let (p, g, m, v) = (&mut params[k], &grads[k], &mut self.m[k], &mut self.v[k]);
            for c in 0..p.ncols() {
                let (pc, gc) = (p.col_as_slice_mut(c), g.col_as_slice(c));
                let (mc, vc) = (m.col_as_slice_mut(c), v.col_as_slice_mut(c));
                for (((pi, &gi), mi), vi) in pc.iter_mut().zip(gc).zip(mc).zip(vc) {
                    let mn = b1 * *mi + ob1 * gi;
                    let vn = b2 * *vi + ob2 * gi * gi;
                    *mi = mn;
                    *vi = vn;
                    let upd = step_size * mn / ((vn * inv_bc2).sqrt() + eps);
                    *pi = *pi * (one - wd) - upd;
                }
            }
        }
    }
}
