//! A small causal transformer without normalisation, forward and hand-written
//! backward in dense matrix form (batch stacked: `B·T` rows).
//!
//! $h^0_t = E[x_t] + P_t$; per layer
//! $h \leftarrow h + \mathrm{Attn}(h)$, then optionally $h \leftarrow h + W_2^\top\mathrm{relu}(W_1^\top h + b_1)$;
//! logits $= h\,U$. Attention: logits $z_{ij} = h_i^\top W_{QK} h_j$ (no $1/\sqrt d$, as in
//! THEORY.md §1), causal softmax, output $o_i = \sum_j A_{ij} W_{VO} h_j$, with
//! $W_{QK} = W_Q W_K^\top$, $W_{VO} = W_O W_V^\top$ in factored form.
//! Every product goes through [`super::kernels::matmul`].

use super::kernels::{Real, matmul, matmul_into};
use faer::Mat;
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Attention parametrisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnForm {
    /// $W_{QK}, W_{VO} \in \mathbb R^{d\times d}$ trained directly.
    Direct,
    /// $W_Q, W_K, W_V, W_O \in \mathbb R^{d\times r}$.
    Factored {
        /// Head dimension $r$.
        r: usize,
    },
}

/// Model shape.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Vocabulary size (BOS included).
    pub vocab: usize,
    /// Width $d$.
    pub d: usize,
    /// Maximum context length (positional table size).
    pub max_len: usize,
    /// Number of layers (1–3).
    pub layers: usize,
    /// Attention parametrisation.
    pub attn: AttnForm,
    /// MLP hidden width (0 = no MLP).
    pub mlp_hidden: usize,
    /// Mask the key at position 0 for every query $i \ge 1$ (BOS unavailable as a sink).
    pub mask_bos_key: bool,
    /// Initial weight scale multiplier.
    pub init_scale: f64,
}

/// Named parameter slots (indices into [`Model::params`]): direct form
/// `a` = $W_{QK}$, `b` = $W_{VO}$; factored `a..d` = $W_Q, W_K, W_V, W_O$;
/// `mlp` = ($W_1$, $b_1$, $W_2$).
#[derive(Clone, Copy, Debug)]
pub(super) struct LayerIdx {
    pub(super) a: usize,
    pub(super) b: usize,
    pub(super) c: usize,
    pub(super) d: usize,
    pub(super) mlp: Option<(usize, usize, usize)>,
}

/// The model: parameter tensors and their layout.
#[derive(Clone, Debug)]
pub struct Model<F: Real> {
    /// Shape.
    pub cfg: ModelConfig,
    /// Every parameter tensor; see [`Model::names`].
    pub params: Vec<Mat<F>>,
    /// Names of the parameters (`emb`, `pos`, `l0.wq`, ...).
    pub names: Vec<String>,
    /// Whether weight decay applies to the parameter (all but biases).
    pub decay: Vec<bool>,
    layers: Vec<LayerIdx>,
    unemb: usize,
}

/// Errors of the model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// Bad shape or configuration.
    #[error("invalid model input: {0}")]
    Invalid(String),
}

/// Cached activations of one forward pass.
pub struct Cache<F: Real> {
    b: usize,
    t: usize,
    tokens: Vec<u32>,
    /// Residual stream entering each layer (and the final one): `layers + 1` entries.
    h_in: Vec<Mat<F>>,
    /// Residual after attention, before MLP, per layer.
    h_mid: Vec<Mat<F>>,
    q: Vec<Mat<F>>,
    k: Vec<Mat<F>>,
    v: Vec<Mat<F>>,
    /// Attention matrices per layer, `B` blocks of `T×T` stacked (`B·T × T`).
    pub attn: Vec<Mat<F>>,
    o: Vec<Mat<F>>,
    u: Vec<Mat<F>>,
    /// Softmax of the output logits (`B·T × V`).
    probs: Mat<F>,
}

fn randn<F: Real, R: Rng + ?Sized>(rows: usize, cols: usize, std: f64, rng: &mut R) -> Mat<F> {
    Mat::from_fn(rows, cols, |_, _| {
        let z: f64 = StandardNormal.sample(rng);
        F::from_f64(z * std)
    })
}

impl<F: Real> Model<F> {
    /// Random initialisation: $\mathcal N(0, s^2/\text{fan-in})$.
    pub fn new<R: Rng + ?Sized>(cfg: ModelConfig, rng: &mut R) -> Result<Self, ModelError> {
        if !(1..=3).contains(&cfg.layers) || cfg.d == 0 || cfg.vocab < 2 || cfg.max_len < 2 {
            return Err(ModelError::Invalid(format!("{cfg:?}")));
        }
        if let AttnForm::Factored { r } = cfg.attn
            && r == 0
        {
            return Err(ModelError::Invalid("head dimension r must be >= 1".into()));
        }
        let d = cfg.d;
        let s = cfg.init_scale;
        let mut params = Vec::new();
        let mut names = Vec::new();
        let mut decay = Vec::new();
        let mut push = |name: String, m: Mat<F>, dec: bool, params: &mut Vec<Mat<F>>| {
            names.push(name);
            decay.push(dec);
            params.push(m);
            params.len() - 1
        };
        push("emb".into(), randn(cfg.vocab, d, s, rng), true, &mut params);
        push(
            "pos".into(),
            randn(cfg.max_len, d, s, rng),
            true,
            &mut params,
        );
        let fan = 1.0 / (d as f64).sqrt();
        let mut layers = Vec::new();
        for l in 0..cfg.layers {
            let idx = match cfg.attn {
                AttnForm::Direct => LayerIdx {
                    a: push(
                        format!("l{l}.wqk"),
                        randn(d, d, s * fan * fan, rng),
                        true,
                        &mut params,
                    ),
                    b: push(
                        format!("l{l}.wvo"),
                        randn(d, d, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    c: usize::MAX,
                    d: usize::MAX,
                    mlp: None,
                },
                AttnForm::Factored { r } => LayerIdx {
                    a: push(
                        format!("l{l}.wq"),
                        randn(d, r, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    b: push(
                        format!("l{l}.wk"),
                        randn(d, r, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    c: push(
                        format!("l{l}.wv"),
                        randn(d, r, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    d: push(
                        format!("l{l}.wo"),
                        randn(d, r, s / (r as f64).sqrt(), rng),
                        true,
                        &mut params,
                    ),
                    mlp: None,
                },
            };
            let mlp = (cfg.mlp_hidden > 0).then(|| {
                let h = cfg.mlp_hidden;
                (
                    push(
                        format!("l{l}.w1"),
                        randn(d, h, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    push(format!("l{l}.b1"), Mat::zeros(1, h), false, &mut params),
                    push(
                        format!("l{l}.w2"),
                        randn(h, d, s / (h as f64).sqrt(), rng),
                        true,
                        &mut params,
                    ),
                )
            });
            layers.push(LayerIdx { mlp, ..idx });
        }
        let unemb = push(
            "unemb".into(),
            randn(d, cfg.vocab, s * fan, rng),
            true,
            &mut params,
        );
        Ok(Self {
            cfg,
            params,
            names,
            decay,
            layers,
            unemb,
        })
    }

    /// Converts the parameters to another scalar type.
    pub fn cast<G: Real>(&self) -> Model<G> {
        Model {
            cfg: self.cfg,
            params: self
                .params
                .iter()
                .map(|m| Mat::from_fn(m.nrows(), m.ncols(), |i, j| G::from_f64(m[(i, j)].to_f64())))
                .collect(),
            names: self.names.clone(),
            decay: self.decay.clone(),
            layers: self.layers.clone(),
            unemb: self.unemb,
        }
    }

    /// Parameter slots of every layer and of the unembedding (for `train::device`).
    pub(super) fn layout(&self) -> (&[LayerIdx], usize) {
        (&self.layers, self.unemb)
    }

    /// $W_{QK}$ of layer `l` ($d\times d$).
    pub fn w_qk(&self, l: usize) -> Mat<F> {
        let li = self.layers[l];
        match self.cfg.attn {
            AttnForm::Direct => self.params[li.a].clone(),
            AttnForm::Factored { .. } => matmul(
                self.params[li.a].as_ref(),
                self.params[li.b].as_ref(),
                false,
                true,
            ),
        }
    }

    /// $W_{VO}$ of layer `l` ($d\times d$, $v = W_{VO} h$).
    pub fn w_vo(&self, l: usize) -> Mat<F> {
        let li = self.layers[l];
        match self.cfg.attn {
            AttnForm::Direct => self.params[li.b].clone(),
            AttnForm::Factored { .. } => matmul(
                self.params[li.d].as_ref(),
                self.params[li.c].as_ref(),
                false,
                true,
            ),
        }
    }

    /// Factored weight decay $\tfrac12(\|W_Q\|_F^2 + \|W_K\|_F^2)$ of layer `l` (`None` in direct form).
    pub fn qk_weight_decay(&self, l: usize) -> Option<f64> {
        let li = self.layers[l];
        match self.cfg.attn {
            AttnForm::Direct => None,
            AttnForm::Factored { .. } => {
                let n = |m: &Mat<F>| m.as_ref().norm_l2().to_f64().powi(2);
                Some(0.5 * (n(&self.params[li.a]) + n(&self.params[li.b])))
            }
        }
    }

    /// The rows the first attention layer reads, $h_i = E_{\rm tok}[w_i] + E_{\rm pos}[i]$,
    /// for one sequence ($T \times d$).
    pub fn layer_input(&self, tokens: &[u32]) -> Result<Mat<F>, ModelError> {
        let t = tokens.len();
        if t == 0 || t > self.cfg.max_len {
            return Err(ModelError::Invalid(format!(
                "{t} tokens for max_len {}",
                self.cfg.max_len
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&x| x as usize >= self.cfg.vocab) {
            return Err(ModelError::Invalid(format!(
                "token {bad} outside the vocabulary of {}",
                self.cfg.vocab
            )));
        }
        let (emb, pos) = (&self.params[0], &self.params[1]);
        Ok(Mat::from_fn(t, self.cfg.d, |i, c| {
            emb[(tokens[i] as usize, c)] + pos[(i, c)]
        }))
    }

    /// Forward pass on `b` sequences of equal length `t` (`tokens.len() == b·t`).
    pub fn forward(&self, tokens: &[u32], b: usize, t: usize) -> Result<Cache<F>, ModelError> {
        let cfg = &self.cfg;
        if b == 0 || t < 2 || tokens.len() != b * t || t > cfg.max_len {
            return Err(ModelError::Invalid(format!(
                "{} tokens for b = {b}, t = {t} (max_len {})",
                tokens.len(),
                cfg.max_len
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&x| x as usize >= cfg.vocab) {
            return Err(ModelError::Invalid(format!(
                "token {bad} outside the vocabulary of {}",
                cfg.vocab
            )));
        }
        let d = cfg.d;
        let emb = &self.params[0];
        let pos = &self.params[1];
        let mut h = Mat::from_fn(b * t, d, |r, c| {
            emb[(tokens[r] as usize, c)] + pos[(r % t, c)]
        });
        let mut cache = Cache {
            b,
            t,
            tokens: tokens.to_vec(),
            h_in: Vec::new(),
            h_mid: Vec::new(),
            q: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            attn: Vec::new(),
            o: Vec::new(),
            u: Vec::new(),
            probs: Mat::zeros(0, 0),
        };
        for li in &self.layers {
            let (q, k, v) = match cfg.attn {
                AttnForm::Direct => (
                    matmul(h.as_ref(), self.params[li.a].as_ref(), false, false),
                    h.clone(),
                    matmul(h.as_ref(), self.params[li.b].as_ref(), false, true),
                ),
                AttnForm::Factored { .. } => (
                    matmul(h.as_ref(), self.params[li.a].as_ref(), false, false),
                    matmul(h.as_ref(), self.params[li.b].as_ref(), false, false),
                    matmul(h.as_ref(), self.params[li.c].as_ref(), false, false),
                ),
            };
            let (attn, o) = self.attend(&q, &k, &v, b, t);
            let mut h2 = h.clone();
            match cfg.attn {
                AttnForm::Direct => h2 += &o,
                AttnForm::Factored { .. } => matmul_into(
                    &mut h2,
                    true,
                    o.as_ref(),
                    self.params[li.d].as_ref(),
                    false,
                    true,
                ),
            }
            let mut h3 = h2.clone();
            let u = if let Some((w1, b1, w2)) = li.mlp {
                let mut u = matmul(h2.as_ref(), self.params[w1].as_ref(), false, false);
                let bias = &self.params[b1];
                for c in 0..u.ncols() {
                    let bc = bias[(0, c)];
                    for r in 0..u.nrows() {
                        u[(r, c)] += bc;
                    }
                }
                let g = Mat::from_fn(u.nrows(), u.ncols(), |r, c| relu(u[(r, c)]));
                matmul_into(
                    &mut h3,
                    true,
                    g.as_ref(),
                    self.params[w2].as_ref(),
                    false,
                    false,
                );
                u
            } else {
                Mat::zeros(0, 0)
            };
            cache.h_in.push(h);
            cache.h_mid.push(h2);
            cache.q.push(q);
            cache.k.push(k);
            cache.v.push(v);
            cache.attn.push(attn);
            cache.o.push(o);
            cache.u.push(u);
            h = h3;
        }
        let logits = matmul(h.as_ref(), self.params[self.unemb].as_ref(), false, false);
        cache.h_in.push(h);
        let mut probs = logits;
        for r in 0..probs.nrows() {
            let mut m = probs[(r, 0)];
            for c in 1..probs.ncols() {
                if probs[(r, c)] > m {
                    m = probs[(r, c)];
                }
            }
            let mut s = F::from_f64(0.0);
            for c in 0..probs.ncols() {
                let e = (probs[(r, c)] - m).exp();
                probs[(r, c)] = e;
                s += e;
            }
            for c in 0..probs.ncols() {
                probs[(r, c)] /= s;
            }
        }
        cache.probs = probs;
        Ok(cache)
    }

    fn masked(&self, i: usize, j: usize) -> bool {
        j > i || (self.cfg.mask_bos_key && j == 0 && i >= 1)
    }

    /// Per-sequence causal attention: returns (A stacked `B·T × T`, O = A V stacked).
    fn attend(&self, q: &Mat<F>, k: &Mat<F>, v: &Mat<F>, b: usize, t: usize) -> (Mat<F>, Mat<F>) {
        let blocks: Vec<(Mat<F>, Mat<F>)> = (0..b)
            .into_par_iter()
            .map(|s| {
                let rows = s * t..(s + 1) * t;
                let qs = q.as_ref().subrows(rows.start, t);
                let ks = k.as_ref().subrows(rows.start, t);
                let vs = v.as_ref().subrows(rows.start, t);
                let mut z = matmul(qs, ks, false, true);
                for i in 0..t {
                    let mut m = F::from_f64(f64::NEG_INFINITY);
                    for j in 0..t {
                        if !self.masked(i, j) && z[(i, j)] > m {
                            m = z[(i, j)];
                        }
                    }
                    let mut sum = F::from_f64(0.0);
                    for j in 0..t {
                        let e = if self.masked(i, j) {
                            F::from_f64(0.0)
                        } else {
                            (z[(i, j)] - m).exp()
                        };
                        z[(i, j)] = e;
                        sum += e;
                    }
                    for j in 0..t {
                        z[(i, j)] /= sum;
                    }
                }
                let o = matmul(z.as_ref(), vs, false, false);
                (z, o)
            })
            .collect();
        let mut a = Mat::zeros(b * t, t);
        let mut o = Mat::zeros(b * t, v.ncols());
        for (s, (z, os)) in blocks.into_iter().enumerate() {
            a.as_mut().subrows_mut(s * t, t).copy_from(z.as_ref());
            o.as_mut().subrows_mut(s * t, t).copy_from(os.as_ref());
        }
        (a, o)
    }

    /// Mean next-token cross-entropy over the query positions selected by `weight`
    /// (`weight[r]` for row `r = s·T + i`, predicting token `i+1`; the last position
    /// of each sequence has no target and must have weight 0).
    pub fn loss(&self, cache: &Cache<F>, weight: &[f64]) -> f64 {
        let (b, t) = (cache.b, cache.t);
        let mut tot = 0.0;
        let mut wsum = 0.0;
        for s in 0..b {
            for i in 0..t - 1 {
                let r = s * t + i;
                if weight[r] > 0.0 {
                    let y = cache.tokens[r + 1] as usize;
                    tot -= weight[r] * cache.probs[(r, y)].to_f64().max(1e-300).ln();
                    wsum += weight[r];
                }
            }
        }
        if wsum > 0.0 { tot / wsum } else { 0.0 }
    }

    /// Argmax prediction of row `r`.
    pub fn predict(&self, cache: &Cache<F>, r: usize) -> u32 {
        let p = &cache.probs;
        let mut best = 0;
        for c in 1..p.ncols() {
            if p[(r, c)] > p[(r, best)] {
                best = c;
            }
        }
        best as u32
    }

    /// Gradient of [`Model::loss`] with respect to every parameter.
    pub fn backward(&self, cache: &Cache<F>, weight: &[f64]) -> Vec<Mat<F>> {
        let (b, t) = (cache.b, cache.t);
        let cfg = &self.cfg;
        let wsum: f64 = (0..b)
            .flat_map(|s| (0..t - 1).map(move |i| s * t + i))
            .map(|r| weight[r])
            .sum();
        let mut grads: Vec<Mat<F>> = self
            .params
            .iter()
            .map(|p| Mat::zeros(p.nrows(), p.ncols()))
            .collect();
        if wsum <= 0.0 {
            return grads;
        }
        // dL/dlogits = w_r (p − onehot) / Σw.
        let mut dlog = cache.probs.clone();
        for r in 0..b * t {
            let i = r % t;
            let w = if i + 1 < t { weight[r] / wsum } else { 0.0 };
            let wf = F::from_f64(w);
            if w == 0.0 {
                for c in 0..dlog.ncols() {
                    dlog[(r, c)] = F::from_f64(0.0);
                }
                continue;
            }
            let y = cache.tokens[r + 1] as usize;
            dlog[(r, y)] -= F::from_f64(1.0);
            for c in 0..dlog.ncols() {
                dlog[(r, c)] *= wf;
            }
        }
        let h_last = &cache.h_in[self.layers.len()];
        matmul_into(
            &mut grads[self.unemb],
            false,
            h_last.as_ref(),
            dlog.as_ref(),
            true,
            false,
        );
        let mut dh = matmul(dlog.as_ref(), self.params[self.unemb].as_ref(), false, true);
        for (l, li) in self.layers.iter().enumerate().rev() {
            // MLP: h3 = h2 + relu(h2 W1 + b1) W2.
            if let Some((w1, b1, w2)) = li.mlp {
                let u = &cache.u[l];
                let g = Mat::from_fn(u.nrows(), u.ncols(), |r, c| relu(u[(r, c)]));
                matmul_into(&mut grads[w2], false, g.as_ref(), dh.as_ref(), true, false);
                let mut du = matmul(dh.as_ref(), self.params[w2].as_ref(), false, true);
                for c in 0..du.ncols() {
                    let mut sb = F::from_f64(0.0);
                    for r in 0..du.nrows() {
                        if u[(r, c)] <= F::from_f64(0.0) {
                            du[(r, c)] = F::from_f64(0.0);
                        }
                        sb += du[(r, c)];
                    }
                    grads[b1][(0, c)] = sb;
                }
                matmul_into(
                    &mut grads[w1],
                    false,
                    cache.h_mid[l].as_ref(),
                    du.as_ref(),
                    true,
                    false,
                );
                matmul_into(
                    &mut dh,
                    true,
                    du.as_ref(),
                    self.params[w1].as_ref(),
                    false,
                    true,
                );
            }
            // Attention: h2 = h + (A V) [W_O^T].
            let h = &cache.h_in[l];
            let d_o = match cfg.attn {
                AttnForm::Direct => dh.clone(),
                AttnForm::Factored { .. } => {
                    matmul_into(
                        &mut grads[li.d],
                        false,
                        dh.as_ref(),
                        cache.o[l].as_ref(),
                        true,
                        false,
                    );
                    matmul(dh.as_ref(), self.params[li.d].as_ref(), false, false)
                }
            };
            let (dq, dk, dv) = self.attend_backward(
                &cache.attn[l],
                &cache.q[l],
                &cache.k[l],
                &cache.v[l],
                &d_o,
                b,
                t,
            );
            match cfg.attn {
                AttnForm::Direct => {
                    // q = h W_QK, k = h, v = h W_VO^T.
                    matmul_into(
                        &mut grads[li.a],
                        false,
                        h.as_ref(),
                        dq.as_ref(),
                        true,
                        false,
                    );
                    matmul_into(
                        &mut grads[li.b],
                        false,
                        dv.as_ref(),
                        h.as_ref(),
                        true,
                        false,
                    );
                    matmul_into(
                        &mut dh,
                        true,
                        dq.as_ref(),
                        self.params[li.a].as_ref(),
                        false,
                        true,
                    );
                    dh += &dk;
                    matmul_into(
                        &mut dh,
                        true,
                        dv.as_ref(),
                        self.params[li.b].as_ref(),
                        false,
                        false,
                    );
                }
                AttnForm::Factored { .. } => {
                    matmul_into(
                        &mut grads[li.a],
                        false,
                        h.as_ref(),
                        dq.as_ref(),
                        true,
                        false,
                    );
                    matmul_into(
                        &mut grads[li.b],
                        false,
                        h.as_ref(),
                        dk.as_ref(),
                        true,
                        false,
                    );
                    matmul_into(
                        &mut grads[li.c],
                        false,
                        h.as_ref(),
                        dv.as_ref(),
                        true,
                        false,
                    );
                    matmul_into(
                        &mut dh,
                        true,
                        dq.as_ref(),
                        self.params[li.a].as_ref(),
                        false,
                        true,
                    );
                    matmul_into(
                        &mut dh,
                        true,
                        dk.as_ref(),
                        self.params[li.b].as_ref(),
                        false,
                        true,
                    );
                    matmul_into(
                        &mut dh,
                        true,
                        dv.as_ref(),
                        self.params[li.c].as_ref(),
                        false,
                        true,
                    );
                }
            }
        }
        // Embeddings.
        for r in 0..b * t {
            let tok = cache.tokens[r] as usize;
            let p = r % t;
            for c in 0..cfg.d {
                let g = dh[(r, c)];
                grads[0][(tok, c)] += g;
                grads[1][(p, c)] += g;
            }
        }
        grads
    }

    #[allow(clippy::too_many_arguments)]
    fn attend_backward(
        &self,
        a: &Mat<F>,
        q: &Mat<F>,
        k: &Mat<F>,
        v: &Mat<F>,
        d_o: &Mat<F>,
        b: usize,
        t: usize,
    ) -> (Mat<F>, Mat<F>, Mat<F>) {
        let blocks: Vec<(Mat<F>, Mat<F>, Mat<F>)> = (0..b)
            .into_par_iter()
            .map(|s| {
                let r0 = s * t;
                let a_s = a.as_ref().subrows(r0, t);
                let q_s = q.as_ref().subrows(r0, t);
                let k_s = k.as_ref().subrows(r0, t);
                let v_s = v.as_ref().subrows(r0, t);
                let do_s = d_o.as_ref().subrows(r0, t);
                let da = matmul(do_s, v_s, false, true);
                let dv = matmul(a_s, do_s, true, false);
                // dZ = A ⊙ (dA − rowsum(A ⊙ dA)).
                let mut dz = Mat::zeros(t, t);
                for i in 0..t {
                    let mut dot = F::from_f64(0.0);
                    for j in 0..=i {
                        dot += a_s[(i, j)] * da[(i, j)];
                    }
                    for j in 0..=i {
                        dz[(i, j)] = a_s[(i, j)] * (da[(i, j)] - dot);
                    }
                }
                let dq = matmul(dz.as_ref(), k_s, false, false);
                let dk = matmul(dz.as_ref(), q_s, true, false);
                (dq, dk, dv)
            })
            .collect();
        let mut dq = Mat::zeros(b * t, q.ncols());
        let mut dk = Mat::zeros(b * t, k.ncols());
        let mut dv = Mat::zeros(b * t, v.ncols());
        for (s, (x, y, z)) in blocks.into_iter().enumerate() {
            dq.as_mut().subrows_mut(s * t, t).copy_from(x.as_ref());
            dk.as_mut().subrows_mut(s * t, t).copy_from(y.as_ref());
            dv.as_mut().subrows_mut(s * t, t).copy_from(z.as_ref());
        }
        (dq, dk, dv)
    }
}

fn relu<F: Real>(x: F) -> F {
    if x > F::from_f64(0.0) {
        x
    } else {
        F::from_f64(0.0)
    }
}

impl<F: Real> Cache<F> {
    /// Attention weight $A_{ij}$ of layer `l`, sequence `s`.
    pub fn attention(&self, l: usize, s: usize, i: usize, j: usize) -> f64 {
        self.attn[l][(s * self.t + i, j)].to_f64()
    }
}
