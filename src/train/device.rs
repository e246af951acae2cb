//! The model of [`super::model`] trained *device-resident* on any
//! [`Backend`]: parameters, AdamW moments, activations and gradients are
//! backend tensors allocated once in [`DeviceModel::new`] and overwritten
//! every step.
//!
//! Same model, same maths as `model.rs` (no normalisation; no $1/\sqrt d$):
//! $h^0 = E\[x\] + P$; per layer, with the causal mask (and key 0 hidden from
//! queries $i \ge 1$ under `mask_bos_key`),
//! $A = \mathrm{softmax}(Q K^\top)$, $h_2 = h + A V\thinspace[W_O^\top]$ where
//! $(Q, K, V) = (h W_{QK}, h, h W_{VO}^\top)$ (direct) or $(hW_Q, hW_K, hW_V)$
//! (factored); optionally $u = h_2 W_1 + \mathbf 1 b_1^\top$,
//! $h_3 = h_2 + \mathrm{relu}(u) W_2$; logits $h^L U$. Loss
//! $L = \sum_r c_r(\log\sum_j e^{z_{rj}} - z_{r,x_{r+1}})$ with
//! $c_r = w_r / \sum_{r'} w_{r'}$ on rows that have a next token (0 on the
//! last row of each sequence), exactly the weights of [`Model::loss`].
//! The backward pass is the one of [`Model::backward`], product by product:
//! $\partial U = (h^L)^\top \partial Z$, $\partial h = \partial Z\thinspace U^\top$; MLP
//! $\partial W_2 = \mathrm{relu}(u)^\top \partial h$,
//! $\partial u = (\partial h\thinspace W_2^\top)\odot\[u>0\]$, $\partial b_1 = \mathbf 1^\top\partial u$,
//! $\partial W_1 = h_2^\top \partial u$, $\partial h \mathrel{+}= \partial u\thinspace W_1^\top$;
//! attention $\partial A = \partial O\thinspace V^\top$, $\partial V = A^\top\partial O$,
//! $\partial S = A\odot(\partial A - \mathrm{rowsum}(A\odot\partial A))$,
//! $\partial Q = \partial S\thinspace K$, $\partial K = \partial S^\top Q$; embeddings by
//! scatter-add. Weight gradients $\sum_b X_b^\top G_b$ are one product over
//! the batch reshaped to `(B·T) × ·`; the bias is added and summed with
//! products against a ones column.
//! The explicit switches of [`Model`] ([`super::model::Switches`]) run their
//! softmax and element-wise parts on host copies (module `switch`; exact on any
//! backend, one round trip each on a GPU) and their products on the backend.
//!
//! Per step the host sends the token ids and the targets (the ids shifted by
//! one), `2·B·T` numbers, and reads back one number, the loss, only when asked
//! (log steps). The parameters come back once, with [`DeviceModel::store`],
//! into a [`Model`] that the host-side evaluation then uses unchanged.
//!
//! This is the one training model: [`super::train_on`] runs it on the backend
//! its caller passes (`Cpu<f32>` by default, a [`crate::backend::Wgpu`] for
//! `--backend gpu`); the host model of `model.rs` is the reference its
//! gradients and loss curves are checked against (`tests/train_device.rs`).

use faer::Mat;

use super::TrainError;
use super::model::{AttnForm, LayerIdx, Model, ModelConfig, ModelError};
use crate::backend::{self, AdamWHyper, Backend, Op, Real, Shape, SoftmaxMask};

/// Largest id a tensor value carries exactly in f32 ($2^{24}$).
const MAX_EXACT_ID: usize = 1 << 24;

/// Activations of one layer kept for the backward pass.
struct LayerActs<T> {
    q: T,
    /// `None` in direct form, where $K = h$.
    k: Option<T>,
    v: T,
    o: T,
    a: T,
    h_mid: T,
    /// MLP pre-activation $u$ and $\mathrm{relu}(u)$.
    mlp: Option<(T, T)>,
    /// Sink-logit mass $p_{i\varnothing}$ per row, on the host (empty without a sink logit).
    psink: Vec<f64>,
    /// Gate values $G$ and the gated output $G \odot O$ (gate only).
    gate: Option<(T, T)>,
}

/// The model and its optimiser state, resident on a backend.
pub struct DeviceModel<B: Backend> {
    cfg: ModelConfig,
    b: usize,
    t: usize,
    layers: Vec<LayerIdx>,
    unemb: usize,
    shapes: Vec<(usize, usize)>,
    /// AdamW per parameter (weight decay 0 where the model does not decay).
    hyper: Vec<AdamWHyper>,
    steps: u64,
    params: Vec<B::Tensor>,
    grads: Vec<B::Tensor>,
    m: Vec<B::Tensor>,
    v: Vec<B::Tensor>,
    /// Ids, targets, loss coefficients, ones: `B×T×1`.
    ids: B::Tensor,
    targets: B::Tensor,
    coef: B::Tensor,
    ones: B::Tensor,
    /// Residual stream entering each layer, and the final one.
    h: Vec<B::Tensor>,
    acts: Vec<LayerActs<B::Tensor>>,
    /// Attention scores; reused for $\partial A$ in the backward pass.
    z: B::Tensor,
    dz: B::Tensor,
    logits: B::Tensor,
    dlogits: B::Tensor,
    loss_rows: B::Tensor,
    loss: B::Tensor,
    dh: B::Tensor,
    /// $\partial\thinspace\mathrm{relu}(u)$ and $\partial u$ (MLP only).
    dmlp: Option<(B::Tensor, B::Tensor)>,
    /// $\partial O$ (factored form; direct form uses $\partial h$).
    d_o: B::Tensor,
    dq: B::Tensor,
    dk: B::Tensor,
    dv: B::Tensor,
    /// $\partial$ of the gate pre-activation (gate only).
    dgate: Option<B::Tensor>,
    host_ids: Vec<B::Elem>,
    host_targets: Vec<B::Elem>,
}

/// Host part of the switches (docs/theory.md §11) of a device step: the sink-logit softmax
/// and the gate's element-wise products run on host copies of the tensors (read, computed
/// in f64, written back), the products around them on the backend. Exact on any backend;
/// on a GPU each is a round trip.
mod switch {
    use crate::backend::SoftmaxMask;

    /// Row softmax of `z` (`rows × t`, row `r` = query `r mod t`) with the sink logit `s`:
    /// $A_{ij} = e^{z_{ij}} / (e^{s} + \sum_{k\ \rm visible} e^{z_{ik}})$, masked entries 0;
    /// returns $p_{i\varnothing}$ per row.
    pub(super) fn softmax_sink(z: &mut [f64], t: usize, s: f64, mask: SoftmaxMask) -> Vec<f64> {
        z.chunks_exact_mut(t)
            .enumerate()
            .map(|(r, row)| {
                let (lo, hi) = mask.visible(r % t, t);
                let m = row[lo..hi].iter().fold(s, |a, &b| a.max(b));
                let mut sum = (s - m).exp();
                for x in &mut row[lo..hi] {
                    *x = (*x - m).exp();
                    sum += *x;
                }
                for (j, x) in row.iter_mut().enumerate() {
                    *x = if (lo..hi).contains(&j) { *x / sum } else { 0.0 };
                }
                (s - m).exp() / sum
            })
            .collect()
    }

    /// Gate column of output coordinate `c` (a scalar gate has one column).
    pub(super) fn gcol(gw: usize, c: usize) -> usize {
        if gw == 1 { 0 } else { c }
    }
}

fn elem<B: Backend>(x: f64) -> B::Elem {
    <B::Elem as Real>::from_f64(x)
}

/// $G \leftarrow \sum_b X_b^\top Z_b$: one product over the batch stacked as rows.
fn xt_z<B: Backend>(
    be: &B,
    x: &mut B::Tensor,
    z: &mut B::Tensor,
    g: &mut B::Tensor,
) -> backend::Result<()> {
    let (sx, sz) = (be.shape(x), be.shape(z));
    be.reshape(x, Shape::mat(sx.batch * sx.rows, sx.cols))?;
    be.reshape(z, Shape::mat(sz.batch * sz.rows, sz.cols))?;
    let r = be.matmul(1.0, x, Op::T, z, Op::N, 0.0, g);
    be.reshape(x, sx)?;
    be.reshape(z, sz)?;
    r
}

impl<B: Backend> DeviceModel<B> {
    /// Uploads `model`'s parameters and allocates every buffer of a step on
    /// `batch` sequences of length `t`, with loss weights `weight` (one per
    /// row, as for [`Model::loss`]) and the AdamW hyper-parameters `opt`
    /// (its weight decay applies to the parameters [`Model::decay`] marks;
    /// the others get none). The moments start at zero.
    pub fn new<F: Real>(
        be: &B,
        model: &Model<F>,
        opt: &AdamWHyper,
        batch: usize,
        t: usize,
        weight: &[f64],
    ) -> Result<Self, TrainError> {
        let cfg = model.cfg;
        let invalid = |m: String| TrainError::Model(ModelError::Invalid(m));
        if batch == 0 || t < 2 || t > cfg.max_len || weight.len() != batch * t {
            return Err(invalid(format!(
                "device model: batch {batch}, t {t} (max_len {}), {} weights",
                cfg.max_len,
                weight.len()
            )));
        }
        if cfg.vocab > MAX_EXACT_ID {
            return Err(invalid(format!(
                "vocabulary {} over {MAX_EXACT_ID}: ids would not be exact in f32",
                cfg.vocab
            )));
        }
        if weight.iter().any(|w| !(*w >= 0.0 && w.is_finite())) {
            return Err(invalid("loss weights must be finite and >= 0".into()));
        }
        let (layers, unemb) = model.layout();
        let (d, bt) = (cfg.d, batch * t);
        let hd = match cfg.attn {
            AttnForm::Direct => d,
            AttnForm::Factored { r } => r,
        };
        let act = |cols: usize| Shape::new(batch, t, cols);
        let z = |s: Shape| be.zeros(s);
        let mut params = Vec::new();
        let mut shapes = Vec::new();
        for p in &model.params {
            let s = Shape::mat(p.nrows(), p.ncols());
            let data: Vec<f64> = (0..s.len())
                .map(|i| p[(i / s.cols, i % s.cols)].to_f64())
                .collect();
            params.push(be.upload_f64(s, &data)?);
            shapes.push((s.rows, s.cols));
        }
        let zeros_like = |n: usize| -> backend::Result<Vec<B::Tensor>> {
            shapes
                .iter()
                .take(n)
                .map(|&(r, c)| be.zeros(Shape::mat(r, c)))
                .collect()
        };
        let n = shapes.len();
        let hyper = model
            .decay
            .iter()
            .map(|&dec| AdamWHyper {
                weight_decay: if dec { opt.weight_decay } else { 0.0 },
                ..*opt
            })
            .collect();
        // c_r = w_r / Σw over rows with a next token, 0 elsewhere (Model::backward).
        let wsum: f64 = (0..bt).filter(|r| r % t + 1 < t).map(|r| weight[r]).sum();
        let coef: Vec<f64> = (0..bt)
            .map(|r| {
                if r % t + 1 < t && wsum > 0.0 {
                    weight[r] / wsum
                } else {
                    0.0
                }
            })
            .collect();
        let col = act(1);
        let mut acts = Vec::new();
        for li in layers {
            acts.push(LayerActs {
                q: z(act(hd))?,
                k: match cfg.attn {
                    AttnForm::Direct => None,
                    AttnForm::Factored { .. } => Some(z(act(hd))?),
                },
                v: z(act(hd))?,
                o: z(act(hd))?,
                a: z(Shape::new(batch, t, t))?,
                h_mid: z(act(d))?,
                mlp: match li.mlp {
                    Some(_) => Some((z(act(cfg.mlp_hidden))?, z(act(cfg.mlp_hidden))?)),
                    None => None,
                },
                psink: Vec::new(),
                gate: match li.gate {
                    Some((_, bg)) => Some((z(act(shapes[bg].1))?, z(act(hd))?)),
                    None => None,
                },
            });
        }
        let dgate = match layers.iter().find_map(|li| li.gate) {
            Some((_, bg)) => Some(z(act(shapes[bg].1))?),
            None => None,
        };
        Ok(Self {
            cfg,
            b: batch,
            t,
            layers: layers.to_vec(),
            unemb,
            hyper,
            steps: 0,
            grads: zeros_like(n)?,
            m: zeros_like(n)?,
            v: zeros_like(n)?,
            params,
            shapes,
            ids: z(col)?,
            targets: z(col)?,
            coef: be.upload_f64(col, &coef)?,
            ones: be.upload_f64(col, &vec![1.0; bt])?,
            h: (0..=layers.len())
                .map(|_| z(act(d)))
                .collect::<backend::Result<_>>()?,
            acts,
            z: z(Shape::new(batch, t, t))?,
            dz: z(Shape::new(batch, t, t))?,
            logits: z(act(cfg.vocab))?,
            dlogits: z(act(cfg.vocab))?,
            loss_rows: z(col)?,
            loss: z(Shape::mat(1, 1))?,
            dh: z(act(d))?,
            dmlp: if cfg.mlp_hidden > 0 {
                Some((z(act(cfg.mlp_hidden))?, z(act(cfg.mlp_hidden))?))
            } else {
                None
            },
            d_o: z(act(hd))?,
            dq: z(act(hd))?,
            dk: z(act(hd))?,
            dv: z(act(hd))?,
            dgate,
            host_ids: vec![elem::<B>(0.0); bt],
            host_targets: vec![elem::<B>(0.0); bt],
        })
    }

    /// Freezes parameter `k` (an index into [`Model::params`]) at its current value:
    /// learning rate and weight decay 0 from now on, so AdamW leaves it exactly unchanged
    /// (the control of a mechanism present but untrained).
    pub fn freeze(&mut self, k: usize) {
        if let Some(h) = self.hyper.get_mut(k) {
            h.lr = 0.0;
            h.weight_decay = 0.0;
        }
    }

    /// Optimiser steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Sends a batch of `B·T` token ids (and their next-token targets) to the device.
    fn load(&mut self, be: &B, tokens: &[u32]) -> Result<(), TrainError> {
        let (bt, t) = (self.b * self.t, self.t);
        if tokens.len() != bt {
            return Err(TrainError::Model(ModelError::Invalid(format!(
                "{} tokens for b = {}, t = {t}",
                tokens.len(),
                self.b
            ))));
        }
        if let Some(&bad) = tokens.iter().find(|&&x| x as usize >= self.cfg.vocab) {
            return Err(TrainError::Model(ModelError::Invalid(format!(
                "token {bad} outside the vocabulary of {}",
                self.cfg.vocab
            ))));
        }
        for r in 0..bt {
            self.host_ids[r] = elem::<B>(tokens[r] as f64);
            let y = if r % t + 1 < t { tokens[r + 1] } else { 0 };
            self.host_targets[r] = elem::<B>(y as f64);
        }
        be.write(&mut self.ids, &self.host_ids)?;
        be.write(&mut self.targets, &self.host_targets)?;
        Ok(())
    }

    fn forward(&mut self, be: &B) -> backend::Result<()> {
        let mask = if self.cfg.mask_bos_key {
            SoftmaxMask::CausalNoFirstKey
        } else {
            SoftmaxMask::Causal
        };
        let p = &self.params;
        be.embed(&p[0], &p[1], &self.ids, &mut self.h[0])?;
        for (l, li) in self.layers.iter().enumerate() {
            let (done, rest) = self.h.split_at_mut(l + 1);
            let (h, h_next) = (&done[l], &mut rest[0]);
            let act = &mut self.acts[l];
            match self.cfg.attn {
                AttnForm::Direct => {
                    be.matmul(1.0, h, Op::N, &p[li.a], Op::N, 0.0, &mut act.q)?;
                    be.matmul(1.0, h, Op::N, &p[li.b], Op::T, 0.0, &mut act.v)?;
                }
                AttnForm::Factored { .. } => {
                    let k = act.k.as_mut().expect("factored keys");
                    be.matmul(1.0, h, Op::N, &p[li.a], Op::N, 0.0, &mut act.q)?;
                    be.matmul(1.0, h, Op::N, &p[li.b], Op::N, 0.0, k)?;
                    be.matmul(1.0, h, Op::N, &p[li.c], Op::N, 0.0, &mut act.v)?;
                }
            }
            let k = act.k.as_ref().unwrap_or(h);
            be.matmul(1.0, &act.q, Op::N, k, Op::T, 0.0, &mut self.z)?;
            match li.sink {
                None => be.softmax_rows(&self.z, 1.0, mask, &mut act.a)?,
                Some(si) => {
                    let s = be.read_f64(&p[si])?[0];
                    let mut zs = be.read_f64(&self.z)?;
                    act.psink = switch::softmax_sink(&mut zs, self.t, s, mask);
                    let a: Vec<B::Elem> = zs.iter().map(|&x| elem::<B>(x)).collect();
                    be.write(&mut act.a, &a)?;
                }
            }
            be.matmul(1.0, &act.a, Op::N, &act.v, Op::N, 0.0, &mut act.o)?;
            // Gate: G = σ(h W_g + 1 b_gᵀ), output G ⊙ O.
            if let (Some((wg, bg)), Some((gt, og))) = (li.gate, act.gate.as_mut()) {
                be.matmul(1.0, h, Op::N, &p[wg], Op::N, 0.0, gt)?;
                be.matmul(1.0, &self.ones, Op::N, &p[bg], Op::N, 1.0, gt)?;
                let gw = be.shape(gt).cols;
                let gv: Vec<f64> = be.read_f64(gt)?;
                let gv: Vec<f64> = gv.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect();
                let o = be.read_f64(&act.o)?;
                let w = be.shape(&act.o).cols;
                let prod: Vec<B::Elem> = o
                    .iter()
                    .enumerate()
                    .map(|(e, &x)| {
                        let (r, c) = (e / w, e % w);
                        elem::<B>(gv[r * gw + switch::gcol(gw, c)] * x)
                    })
                    .collect();
                let gs: Vec<B::Elem> = gv.iter().map(|&x| elem::<B>(x)).collect();
                be.write(gt, &gs)?;
                be.write(og, &prod)?;
            }
            let out = match &act.gate {
                Some((_, og)) => og,
                None => &act.o,
            };
            be.axpby(1.0, h, 0.0, &mut act.h_mid)?;
            match self.cfg.attn {
                AttnForm::Direct => be.axpby(1.0, out, 1.0, &mut act.h_mid)?,
                AttnForm::Factored { .. } => {
                    be.matmul(1.0, out, Op::N, &p[li.d], Op::T, 1.0, &mut act.h_mid)?
                }
            }
            be.axpby(1.0, &act.h_mid, 0.0, h_next)?;
            if let (Some((w1, b1, w2)), Some((u, g))) = (li.mlp, act.mlp.as_mut()) {
                be.matmul(1.0, &act.h_mid, Op::N, &p[w1], Op::N, 0.0, u)?;
                be.matmul(1.0, &self.ones, Op::N, &p[b1], Op::N, 1.0, u)?;
                be.relu(u, g)?;
                be.matmul(1.0, g, Op::N, &p[w2], Op::N, 1.0, h_next)?;
            }
        }
        let last = self.layers.len();
        be.matmul(
            1.0,
            &self.h[last],
            Op::N,
            &p[self.unemb],
            Op::N,
            0.0,
            &mut self.logits,
        )?;
        be.softmax_xent(
            &self.logits,
            &self.targets,
            &self.coef,
            &mut self.dlogits,
            &mut self.loss_rows,
        )
    }

    fn backward(&mut self, be: &B) -> backend::Result<()> {
        let last = self.layers.len();
        let (p, g) = (&self.params, &mut self.grads);
        xt_z(be, &mut self.h[last], &mut self.dlogits, &mut g[self.unemb])?;
        be.matmul(
            1.0,
            &self.dlogits,
            Op::N,
            &p[self.unemb],
            Op::T,
            0.0,
            &mut self.dh,
        )?;
        for (l, li) in self.layers.iter().enumerate().rev() {
            let act = &mut self.acts[l];
            if let (Some((w1, b1, w2)), Some((u, relu_u)), Some((d_relu, du))) =
                (li.mlp, act.mlp.as_mut(), self.dmlp.as_mut())
            {
                xt_z(be, relu_u, &mut self.dh, &mut g[w2])?;
                be.matmul(1.0, &self.dh, Op::N, &p[w2], Op::T, 0.0, d_relu)?;
                be.relu_backward(u, d_relu, du)?;
                xt_z(be, &mut self.ones, du, &mut g[b1])?;
                xt_z(be, &mut act.h_mid, du, &mut g[w1])?;
                be.matmul(1.0, du, Op::N, &p[w1], Op::T, 1.0, &mut self.dh)?;
            }
            if let AttnForm::Factored { .. } = self.cfg.attn {
                let out = match act.gate.as_mut() {
                    Some((_, og)) => og,
                    None => &mut act.o,
                };
                xt_z(be, &mut self.dh, out, &mut g[li.d])?;
                be.matmul(1.0, &self.dh, Op::N, &p[li.d], Op::N, 0.0, &mut self.d_o)?;
            }
            // Gate: ∂G = Σ_coords O ⊙ ∂(GO), ∂O = G ⊙ ∂(GO), ∂pre = ∂G ⊙ G(1 − G);
            // ∂W_g = hᵀ ∂pre, ∂b_g = 1ᵀ ∂pre, ∂h += ∂pre W_gᵀ.
            if let (Some((wg, bg)), Some((gt, _)), Some(dpre)) =
                (li.gate, act.gate.as_ref(), self.dgate.as_mut())
            {
                if let AttnForm::Direct = self.cfg.attn {
                    be.axpby(1.0, &self.dh, 0.0, &mut self.d_o)?;
                }
                let gw = be.shape(gt).cols;
                let w = be.shape(&act.o).cols;
                let (gv, o) = (be.read_f64(gt)?, be.read_f64(&act.o)?);
                let mut dov = be.read_f64(&self.d_o)?;
                let mut dg = vec![0.0; gv.len()];
                for (e, x) in dov.iter_mut().enumerate() {
                    let k = (e / w) * gw + switch::gcol(gw, e % w);
                    dg[k] += o[e] * *x;
                    *x *= gv[k];
                }
                for (x, &gk) in dg.iter_mut().zip(&gv) {
                    *x *= gk * (1.0 - gk);
                }
                let to = |v: &[f64]| -> Vec<B::Elem> { v.iter().map(|&x| elem::<B>(x)).collect() };
                be.write(&mut self.d_o, &to(&dov))?;
                be.write(dpre, &to(&dg))?;
                xt_z(be, &mut self.h[l], dpre, &mut g[wg])?;
                xt_z(be, &mut self.ones, dpre, &mut g[bg])?;
                be.matmul(1.0, dpre, Op::N, &p[wg], Op::T, 1.0, &mut self.dh)?;
            }
            let d_o = match (self.cfg.attn, li.gate) {
                (AttnForm::Direct, None) => &self.dh,
                _ => &self.d_o,
            };
            // ∂A (into the score buffer) and ∂V; ∂S; ∂Q = ∂S K, ∂K = ∂Sᵀ Q.
            be.matmul(1.0, d_o, Op::N, &act.v, Op::T, 0.0, &mut self.z)?;
            // Sink logit: ∂s = −Σ_i p_{i∅} Σ_j A_ij ∂A_ij (its column carries no value).
            if let Some(si) = li.sink {
                let (a, da) = (be.read_f64(&act.a)?, be.read_f64(&self.z)?);
                let t = self.t;
                let ds: f64 = a
                    .chunks_exact(t)
                    .zip(da.chunks_exact(t))
                    .zip(&act.psink)
                    .map(|((ar, dr), p)| -p * ar.iter().zip(dr).map(|(x, y)| x * y).sum::<f64>())
                    .sum();
                be.write(&mut g[si], &[elem::<B>(ds)])?;
            }
            be.matmul(1.0, &act.a, Op::T, d_o, Op::N, 0.0, &mut self.dv)?;
            be.softmax_rows_backward(&act.a, &self.z, 1.0, &mut self.dz)?;
            let k = act.k.as_ref().unwrap_or(&self.h[l]);
            be.matmul(1.0, &self.dz, Op::N, k, Op::N, 0.0, &mut self.dq)?;
            be.matmul(1.0, &self.dz, Op::T, &act.q, Op::N, 0.0, &mut self.dk)?;
            let h = &mut self.h[l];
            match self.cfg.attn {
                AttnForm::Direct => {
                    // q = h W_QK, k = h, v = h W_VOᵀ.
                    xt_z(be, h, &mut self.dq, &mut g[li.a])?;
                    xt_z(be, &mut self.dv, h, &mut g[li.b])?;
                    be.matmul(1.0, &self.dq, Op::N, &p[li.a], Op::T, 1.0, &mut self.dh)?;
                    be.axpby(1.0, &self.dk, 1.0, &mut self.dh)?;
                    be.matmul(1.0, &self.dv, Op::N, &p[li.b], Op::N, 1.0, &mut self.dh)?;
                }
                AttnForm::Factored { .. } => {
                    xt_z(be, h, &mut self.dq, &mut g[li.a])?;
                    xt_z(be, h, &mut self.dk, &mut g[li.b])?;
                    xt_z(be, h, &mut self.dv, &mut g[li.c])?;
                    be.matmul(1.0, &self.dq, Op::N, &p[li.a], Op::T, 1.0, &mut self.dh)?;
                    be.matmul(1.0, &self.dk, Op::N, &p[li.b], Op::T, 1.0, &mut self.dh)?;
                    be.matmul(1.0, &self.dv, Op::N, &p[li.c], Op::T, 1.0, &mut self.dh)?;
                }
            }
        }
        let (g_emb, g_rest) = g.split_at_mut(1);
        be.embed_backward(&self.dh, &self.ids, &mut g_emb[0], &mut g_rest[0])
    }

    /// Forward and backward on `tokens` (`B·T` ids): afterwards the device
    /// holds the gradient of the loss (read with [`DeviceModel::grads`]) and
    /// the per-row loss terms (summed by [`DeviceModel::loss`]).
    pub fn forward_backward(&mut self, be: &B, tokens: &[u32]) -> Result<(), TrainError> {
        self.load(be, tokens)?;
        self.forward(be)?;
        self.backward(be)?;
        Ok(())
    }

    /// The loss of the last forward pass: $\sum_r \ell_r$ reduced on the
    /// device ($\mathbf 1^\top \ell$), one number read back.
    pub fn loss(&mut self, be: &B) -> Result<f64, TrainError> {
        xt_z(be, &mut self.ones, &mut self.loss_rows, &mut self.loss)?;
        Ok(be.read_f64(&self.loss)?[0])
    }

    /// One AdamW update of every parameter from the current gradients.
    pub fn update(&mut self, be: &B) -> Result<(), TrainError> {
        self.steps += 1;
        let hyper = &self.hyper;
        let (p, g) = (&mut self.params, &self.grads);
        backend::adamw_each(be, |k| hyper[k], self.steps, p, g, &mut self.m, &mut self.v)?;
        Ok(())
    }

    /// One training step: forward, backward, AdamW. Returns the loss (before
    /// the update, as `train()` logs it) when `want_loss`; otherwise nothing
    /// is read back.
    pub fn step(
        &mut self,
        be: &B,
        tokens: &[u32],
        want_loss: bool,
    ) -> Result<Option<f64>, TrainError> {
        self.forward_backward(be, tokens)?;
        let loss = if want_loss {
            Some(self.loss(be)?)
        } else {
            None
        };
        self.update(be)?;
        // One submit per step: the device runs this step while the host
        // prepares the next batch.
        be.flush()?;
        Ok(loss)
    }

    fn read_mats(&self, be: &B, ts: &[B::Tensor]) -> Result<Vec<Mat<f64>>, TrainError> {
        ts.iter()
            .zip(&self.shapes)
            .map(|(t, &(r, c))| {
                let x = be.read_f64(t)?;
                Ok(Mat::from_fn(r, c, |i, j| x[i * c + j]))
            })
            .collect()
    }

    /// The gradients of the last [`DeviceModel::forward_backward`], in the
    /// order of [`Model::params`], widened to f64.
    pub fn grads(&self, be: &B) -> Result<Vec<Mat<f64>>, TrainError> {
        self.read_mats(be, &self.grads)
    }

    /// Reads the parameters back into `model` (the one this was built from, or
    /// one of the same configuration).
    pub fn store<F: Real>(&self, be: &B, model: &mut Model<F>) -> Result<(), TrainError> {
        let same = model.cfg == self.cfg
            && model.params.len() == self.shapes.len()
            && model
                .params
                .iter()
                .zip(&self.shapes)
                .all(|(p, &s)| (p.nrows(), p.ncols()) == s);
        if !same {
            return Err(TrainError::Invalid(
                "device model stored into a model of another shape".into(),
            ));
        }
        for (dst, src) in model
            .params
            .iter_mut()
            .zip(self.read_mats(be, &self.params)?)
        {
            *dst = Mat::from_fn(src.nrows(), src.ncols(), |i, j| F::from_f64(src[(i, j)]));
        }
        Ok(())
    }
}
