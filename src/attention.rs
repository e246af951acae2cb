//! The synthetic attention block of docs/theory.md §1, in f64.
//!
//! One head with bilinear logits $z_{ij} = x_i^\top W_{QK} x_j$ (no bias, no
//! $1/\sqrt d$: scale lives in $W_{QK}$), $A = \mathrm{softmax}\_{\text{row}}(z)$
//! over the visible keys, values $v_j = W_{VO} x_j$, head output
//! $o_i = \sum_j A_{ij} v_j$. Block output, post-norm: $y_i = N(x_i + o_i)$;
//! pre-norm: $y_i = x_i + o_i(N(X))$. Weights are full or factored
//! ($W_{QK} = W_Q W_K^\top$, $W_{VO} = W_O W_V$, shapes $d\times r$ and $r \times d$).
//! Tokens are rows: $X \in \mathbb R^{T\times d}$, so $Z = X W_{QK} X^\top$,
//! $V = X W_{VO}^\top$, $O = AV$.
//!
//! The backward pass is written by hand and checked against finite
//! differences (`theorems/attention_gradients.rs`).

use faer::{Mat, MatRef};

/// Which keys a query sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// Key $j$ visible to query $i$ iff $j \le i$.
    Causal,
    /// Every key visible.
    Bidirectional,
}

impl Mask {
    /// Is key `j` visible to query `i`?
    #[inline]
    pub fn visible(self, i: usize, j: usize) -> bool {
        match self {
            Mask::Causal => j <= i,
            Mask::Bidirectional => true,
        }
    }

    /// Number of keys visible to query `i` in a context of `t` tokens.
    pub fn n_visible(self, i: usize, t: usize) -> usize {
        match self {
            Mask::Causal => i + 1,
            Mask::Bidirectional => t,
        }
    }
}

/// The token-wise normalisation $N$ (no learned gain or bias).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Norm {
    /// $N(u) = u$.
    Identity,
    /// $N(u) = u / \sqrt{\overline{u^2} + \epsilon}$.
    Rms {
        /// Stabiliser $\epsilon$.
        eps: f64,
    },
    /// $N(u) = (u - \bar u) / \sqrt{\overline{(u-\bar u)^2} + \epsilon}$.
    Layer {
        /// Stabiliser $\epsilon$.
        eps: f64,
    },
}

impl Norm {
    /// Applies $N$ to one token.
    pub fn apply(self, u: &[f64]) -> Vec<f64> {
        let d = u.len() as f64;
        match self {
            Norm::Identity => u.to_vec(),
            Norm::Rms { eps } => {
                let r = (u.iter().map(|x| x * x).sum::<f64>() / d + eps).sqrt();
                u.iter().map(|x| x / r).collect()
            }
            Norm::Layer { eps } => {
                let m = u.iter().sum::<f64>() / d;
                let s = (u.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / d + eps).sqrt();
                u.iter().map(|x| (x - m) / s).collect()
            }
        }
    }

    /// Vector–Jacobian product $J_N(u)^\top g$.
    ///
    /// RMS: $(g - u\thinspace(u\cdot g)/(d r^2))/r$; Layer: $(g - \bar g - y\thinspace(y\cdot g)/d)/\sigma$.
    pub fn vjp(self, u: &[f64], g: &[f64]) -> Vec<f64> {
        let d = u.len() as f64;
        match self {
            Norm::Identity => g.to_vec(),
            Norm::Rms { eps } => {
                let r2 = u.iter().map(|x| x * x).sum::<f64>() / d + eps;
                let r = r2.sqrt();
                let ug: f64 = u.iter().zip(g).map(|(a, b)| a * b).sum();
                u.iter()
                    .zip(g)
                    .map(|(ui, gi)| (gi - ui * ug / (d * r2)) / r)
                    .collect()
            }
            Norm::Layer { eps } => {
                let m = u.iter().sum::<f64>() / d;
                let s = (u.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / d + eps).sqrt();
                let y: Vec<f64> = u.iter().map(|x| (x - m) / s).collect();
                let gm = g.iter().sum::<f64>() / d;
                let yg: f64 = y.iter().zip(g).map(|(a, b)| a * b).sum();
                y.iter()
                    .zip(g)
                    .map(|(yi, gi)| (gi - gm - yi * yg / d) / s)
                    .collect()
            }
        }
    }

    /// Applies $N$ to every row of `x`.
    pub fn apply_rows(self, x: MatRef<'_, f64>) -> Mat<f64> {
        let mut out = Mat::zeros(x.nrows(), x.ncols());
        for i in 0..x.nrows() {
            let r = self.apply(&crate::linalg::row(x, i));
            for (j, v) in r.into_iter().enumerate() {
                out[(i, j)] = v;
            }
        }
        out
    }
}

/// Where the norm sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// $y_i = N(x_i + o_i(X))$.
    Post,
    /// $y_i = x_i + o_i(N(X))$.
    Pre,
}

/// A square weight, full or factored as $W = L R^\top$.
#[derive(Clone, Debug)]
pub enum Weight {
    /// The $d\times d$ matrix itself.
    Full(Mat<f64>),
    /// $W = L R^\top$ with $L, R \in \mathbb R^{d\times r}$ (for $W_{QK}$: $L = W_Q$,
    /// $R = W_K$; for $W_{VO} = W_O W_V$: $L = W_O$, $R = W_V^\top$).
    Factored {
        /// Left factor $L$ ($d\times r$).
        l: Mat<f64>,
        /// Right factor $R$ ($d\times r$).
        r: Mat<f64>,
    },
}

impl Weight {
    /// The dense $d\times d$ matrix.
    pub fn dense(&self) -> Mat<f64> {
        match self {
            Weight::Full(w) => w.clone(),
            Weight::Factored { l, r } => l * r.transpose(),
        }
    }

    /// Model dimension $d$.
    pub fn dim(&self) -> usize {
        match self {
            Weight::Full(w) => w.nrows(),
            Weight::Factored { l, .. } => l.nrows(),
        }
    }

    /// Factored weight decay $\tfrac12(\lVert L\rVert_F^2 + \lVert R\rVert_F^2)$, or $\lVert W\rVert_\ast$'s
    /// upper bound through it; for a full weight, $\lVert W\rVert_\ast$ (the minimum of the
    /// factored decay over all factorizations, Srebro et al. 2005).
    pub fn factored_decay(&self) -> f64 {
        match self {
            Weight::Full(w) => crate::linalg::nuclear_norm(w.as_ref(), faer::Par::Seq),
            Weight::Factored { l, r } => 0.5 * (l.squared_norm_l2() + r.squared_norm_l2()),
        }
    }

    /// Gradient with respect to the parameters, given $\partial L/\partial W$.
    fn param_grad(&self, dw: Mat<f64>) -> WeightGrad {
        match self {
            Weight::Full(_) => WeightGrad::Full(dw),
            Weight::Factored { l, r } => WeightGrad::Factored {
                l: &dw * r,
                r: dw.transpose() * l,
            },
        }
    }
}

/// Gradient of a [`Weight`] in its own parametrisation.
#[derive(Clone, Debug)]
pub enum WeightGrad {
    /// $\partial L/\partial W$.
    Full(Mat<f64>),
    /// $\partial L/\partial L = G R$ and $\partial L / \partial R = G^\top L$.
    Factored {
        /// Gradient of the left factor.
        l: Mat<f64>,
        /// Gradient of the right factor.
        r: Mat<f64>,
    },
}

/// One attention head.
#[derive(Clone, Debug)]
pub struct Head {
    /// $W_{QK}$.
    pub qk: Weight,
    /// $W_{VO}$.
    pub vo: Weight,
    /// Causal or bidirectional.
    pub mask: Mask,
}

/// Everything the forward pass computes (needed by the backward pass).
#[derive(Clone, Debug)]
pub struct HeadForward {
    /// Head input $H$ (= $X$ post-norm, $N(X)$ pre-norm).
    pub input: Mat<f64>,
    /// Logits $Z$ (masked entries are $-\infty$).
    pub logits: Mat<f64>,
    /// Attention $A$.
    pub attn: Mat<f64>,
    /// Values $V$ (row $j$ is $v_j$).
    pub values: Mat<f64>,
    /// Head output $O = AV$.
    pub output: Mat<f64>,
}

impl Head {
    /// Attention and output of the head on input rows `h`.
    pub fn forward(&self, h: MatRef<'_, f64>) -> HeadForward {
        let t = h.nrows();
        let wqk = self.qk.dense();
        let wvo = self.vo.dense();
        let mut logits = h * &wqk * h.transpose();
        let mut attn = Mat::zeros(t, t);
        for i in 0..t {
            let mut z: Vec<f64> = (0..t)
                .map(|j| {
                    if self.mask.visible(i, j) {
                        logits[(i, j)]
                    } else {
                        f64::NEG_INFINITY
                    }
                })
                .collect();
            for (j, zj) in z.iter().enumerate() {
                logits[(i, j)] = *zj;
            }
            crate::linalg::softmax_in_place(&mut z);
            for (j, p) in z.into_iter().enumerate() {
                attn[(i, j)] = p;
            }
        }
        let values = h * wvo.transpose();
        let output = &attn * &values;
        HeadForward {
            input: h.to_owned(),
            logits,
            attn,
            values,
            output,
        }
    }

    /// Backward through the head: given $\partial L/\partial O$, returns
    /// $(\partial L/\partial H, \nabla W_{QK}, \nabla W_{VO})$.
    ///
    /// $dA = dO\thinspace V^\top$, $dV = A^\top dO$, $dZ_{ij} = A_{ij}(dA_{ij} - \sum_k A_{ik} dA_{ik})$,
    /// $dW_{QK} = H^\top dZ\thinspace H$, $dW_{VO} = dV^\top H$,
    /// $dH = dZ\thinspace H W_{QK}^\top + dZ^\top H W_{QK} + dV\thinspace W_{VO}$.
    pub fn backward(
        &self,
        f: &HeadForward,
        d_out: MatRef<'_, f64>,
    ) -> (Mat<f64>, WeightGrad, WeightGrad) {
        let t = f.attn.nrows();
        let wqk = self.qk.dense();
        let wvo = self.vo.dense();
        let h = f.input.as_ref();
        let d_attn = d_out * f.values.transpose();
        let d_values = f.attn.transpose() * d_out;
        let mut dz = Mat::zeros(t, t);
        for i in 0..t {
            let s: f64 = (0..t).map(|k| f.attn[(i, k)] * d_attn[(i, k)]).sum();
            for j in 0..t {
                dz[(i, j)] = f.attn[(i, j)] * (d_attn[(i, j)] - s);
            }
        }
        let dwqk = h.transpose() * &dz * h;
        let dwvo = d_values.transpose() * h;
        let dh = &dz * h * wqk.transpose() + dz.transpose() * h * &wqk + &d_values * &wvo;
        (dh, self.qk.param_grad(dwqk), self.vo.param_grad(dwvo))
    }
}

/// A block: head, residual and norm.
#[derive(Clone, Debug)]
pub struct Block {
    /// The head.
    pub head: Head,
    /// The norm $N$.
    pub norm: Norm,
    /// Pre- or post-norm.
    pub placement: Placement,
    /// Whether the residual $x_i$ is added.
    pub residual: bool,
}

/// Forward results of a block.
#[derive(Clone, Debug)]
pub struct BlockForward {
    /// The head's forward pass.
    pub head: HeadForward,
    /// Pre-norm input of $N$ for post-norm ($X + O$); $X$ for pre-norm.
    pub norm_input: Mat<f64>,
    /// Block output $Y$.
    pub output: Mat<f64>,
}

/// Gradients of a block.
#[derive(Clone, Debug)]
pub struct BlockGrad {
    /// $\partial L/\partial X$.
    pub x: Mat<f64>,
    /// Gradient of $W_{QK}$ (in its parametrisation).
    pub qk: WeightGrad,
    /// Gradient of $W_{VO}$ (in its parametrisation).
    pub vo: WeightGrad,
}

fn rows_map(
    a: MatRef<'_, f64>,
    b: MatRef<'_, f64>,
    f: impl Fn(&[f64], &[f64]) -> Vec<f64>,
) -> Mat<f64> {
    let mut out = Mat::zeros(a.nrows(), a.ncols());
    for i in 0..a.nrows() {
        let r = f(&crate::linalg::row(a, i), &crate::linalg::row(b, i));
        for (j, v) in r.into_iter().enumerate() {
            out[(i, j)] = v;
        }
    }
    out
}

impl Block {
    /// Forward pass on token rows `x` ($T\times d$).
    pub fn forward(&self, x: MatRef<'_, f64>) -> BlockForward {
        match self.placement {
            Placement::Post => {
                let head = self.head.forward(x);
                let u = if self.residual {
                    x + &head.output
                } else {
                    head.output.clone()
                };
                let output = self.norm.apply_rows(u.as_ref());
                BlockForward {
                    head,
                    norm_input: u,
                    output,
                }
            }
            Placement::Pre => {
                let hn = self.norm.apply_rows(x);
                let head = self.head.forward(hn.as_ref());
                let output = if self.residual {
                    x + &head.output
                } else {
                    head.output.clone()
                };
                BlockForward {
                    head,
                    norm_input: x.to_owned(),
                    output,
                }
            }
        }
    }

    /// Backward pass given $\partial L/\partial Y$.
    pub fn backward(&self, f: &BlockForward, d_y: MatRef<'_, f64>) -> BlockGrad {
        let norm = self.norm;
        match self.placement {
            Placement::Post => {
                let du = rows_map(f.norm_input.as_ref(), d_y, |u, g| norm.vjp(u, g));
                let (dh, qk, vo) = self.head.backward(&f.head, du.as_ref());
                let x = if self.residual { du + dh } else { dh };
                BlockGrad { x, qk, vo }
            }
            Placement::Pre => {
                let (dh, qk, vo) = self.head.backward(&f.head, d_y);
                let dx_norm = rows_map(f.norm_input.as_ref(), dh.as_ref(), |u, g| norm.vjp(u, g));
                let x = if self.residual {
                    d_y.to_owned() + dx_norm
                } else {
                    dx_norm
                };
                BlockGrad { x, qk, vo }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_rows_sum_to_one_and_mask() {
        let x = Mat::from_fn(4, 3, |i, j| (i as f64 - 1.5) * 0.3 + j as f64 * 0.1);
        let head = Head {
            qk: Weight::Full(Mat::from_fn(3, 3, |i, j| if i == j { 1.0 } else { 0.2 })),
            vo: Weight::Full(Mat::identity(3, 3)),
            mask: Mask::Causal,
        };
        let f = head.forward(x.as_ref());
        for i in 0..4 {
            let s: f64 = (0..4).map(|j| f.attn[(i, j)]).sum();
            assert!((s - 1.0).abs() < 1e-14);
            for j in (i + 1)..4 {
                assert_eq!(f.attn[(i, j)], 0.0);
            }
        }
        assert_eq!(f.attn[(0, 0)], 1.0);
    }

    #[test]
    fn norms_have_unit_scale() {
        let u = [1.0, 2.0, 3.0, -4.0];
        let y = Norm::Rms { eps: 0.0 }.apply(&u);
        let ms: f64 = y.iter().map(|v| v * v).sum::<f64>() / 4.0;
        assert!((ms - 1.0).abs() < 1e-14);
        let y = Norm::Layer { eps: 0.0 }.apply(&u);
        assert!(y.iter().sum::<f64>().abs() < 1e-14);
        let var: f64 = y.iter().map(|v| v * v).sum::<f64>() / 4.0;
        assert!((var - 1.0).abs() < 1e-14);
    }
}
