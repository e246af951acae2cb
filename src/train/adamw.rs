//! AdamW state for the host reference model ([`super::model::Model`]'s faer
//! matrices). The update itself is the backend's one definition,
//! [`crate::backend::cpu::adamw_update`] (Loshchilov & Hutter, *Decoupled
//! Weight Decay Regularization*, arXiv:1711.05101); training runs it through
//! [`crate::backend::Backend::adamw`] in [`super::device`]. This type only
//! keeps the moments of a host run, for the reference loss curves the device
//! runs are checked against.

use crate::backend::cpu::adamw_update;
use crate::backend::{AdamWHyper, Real};
use faer::Mat;

/// AdamW state and hyper-parameters.
#[derive(Clone, Debug)]
pub struct AdamW<F: Real> {
    /// Learning rate, $\beta_1$, $\beta_2$, $\epsilon$ and the decoupled
    /// weight decay $\lambda$ of decayed parameters.
    pub hyper: AdamWHyper,
    m: Vec<Mat<F>>,
    v: Vec<Mat<F>>,
    step: u64,
}

impl<F: Real> AdamW<F> {
    /// Zero state for parameters shaped like `params`
    /// ($\beta_1 = 0.9$, $\beta_2 = 0.999$, $\epsilon = 10^{-8}$).
    pub fn new(params: &[Mat<F>], lr: f64, weight_decay: f64) -> Self {
        let z = |p: &Mat<F>| Mat::zeros(p.nrows(), p.ncols());
        Self {
            hyper: AdamWHyper {
                lr,
                weight_decay,
                ..AdamWHyper::default()
            },
            m: params.iter().map(z).collect(),
            v: params.iter().map(z).collect(),
            step: 0,
        }
    }

    /// One update; `decay[k]` says whether parameter `k` is decayed.
    pub fn step(&mut self, params: &mut [Mat<F>], grads: &[Mat<F>], decay: &[bool]) {
        self.step += 1;
        for k in 0..params.len() {
            let h = AdamWHyper {
                weight_decay: if decay[k] {
                    self.hyper.weight_decay
                } else {
                    0.0
                },
                ..self.hyper
            };
            let (p, g, m, v) = (&mut params[k], &grads[k], &mut self.m[k], &mut self.v[k]);
            // Elementwise update, so column by column of the column-major matrices.
            for c in 0..p.ncols() {
                adamw_update(
                    &h,
                    self.step,
                    p.col_as_slice_mut(c),
                    g.col_as_slice(c),
                    m.col_as_slice_mut(c),
                    v.col_as_slice_mut(c),
                );
            }
        }
    }
}
