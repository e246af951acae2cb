//! Per-layer statistics of paper A (THEORY.md §3, §9), reduced while the forward pass streams:
//! each layer's attention maps and hidden states are summarised when the layer is done and then
//! dropped.
//!
//! Per layer l (queries i ≥ 1, position 0 = the first token, BOS when present):
//! - `attn_to_first` = mean over heads and over i ≥ 1 of `A_{i,0}`;
//! - `bos_cos_*`: cosines `cos(h^l_i, h^l_0)`, i ≥ 1, of the residual stream after layer l;
//! - `hidden_norm_first` = ‖h^l_0‖, `hidden_norm_median` = median_{i≥1} ‖h^l_i‖;
//! - `sink_gu_eps03`, `sink_gu_eps08`: fraction of heads whose Gu importance of key 0,
//!   `α_0 = (1/T) Σ_i A_{i,0}`, exceeds ε (strict);
//! - per head: α_0, dominant column, its mass, routed fraction, min_a, value-norm ratio,
//!   NOP/broadcast class, mean normalised row entropy;
//! - massive activations (|h| > 100 and ≥ 1000 × the median |h| of that hidden state);
//! - mean pairwise token cosine after the layer (the A2 observable).

use crate::patterns::{self, ValueClass};
use crate::runtime::forward::{LayerObserver, LayerTensors};
use crate::runtime::model::Pretrained;
use faer::Mat;

/// Statistics of one head.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HeadStats {
    /// Gu et al.'s α_0 (key 0).
    pub alpha_first: f64,
    /// Dominant column `argmax_j mean_i A_ij`.
    pub dominant: usize,
    /// Its mean mass.
    pub dominant_mass: f64,
    /// Fraction of queries with `A_{i,s} ≥ 0.5`.
    pub routed_frac: f64,
    /// `min_i A_{i,s}`.
    pub min_a: f64,
    /// `‖v_s‖ / mean_{j≠s} ‖v_j‖` for the dominant column s (None without values).
    pub value_norm_ratio: Option<f64>,
    /// NOP-like (≤ 0.2), broadcast (≥ 0.5) or intermediate (None without values).
    pub class: Option<ValueClass>,
    /// Mean row entropy normalised by log(visible keys).
    pub row_entropy: Option<f64>,
}

/// Statistics of one layer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LayerStats {
    /// Layer index.
    pub layer: usize,
    /// Mean over heads and queries i ≥ 1 of A_{i,0} (None without attention maps).
    pub attn_to_first: Option<f64>,
    /// Mean of cos(h_i, h_0), i ≥ 1.
    pub bos_cos_mean: f64,
    /// Fraction of i ≥ 1 with cos(h_i, h_0) ≤ 0.
    pub bos_cos_frac_nonpos: f64,
    /// 10%, 50%, 90% quantiles of cos(h_i, h_0).
    pub bos_cos_q: [f64; 3],
    /// ‖h_0‖.
    pub hidden_norm_first: f64,
    /// median_{i≥1} ‖h_i‖.
    pub hidden_norm_median: f64,
    /// Fraction of heads with α_0 > 0.3.
    pub sink_gu_eps03: Option<f64>,
    /// Fraction of heads with α_0 > 0.8.
    pub sink_gu_eps08: Option<f64>,
    /// Massive activations: (position, dimension, value).
    pub massive: Vec<(usize, usize, f64)>,
    /// Mean pairwise cosine of the residual stream after the layer.
    pub mean_token_cos: f64,
    /// ‖k_0‖ / mean_{j≥1} ‖k_j‖ averaged over kv heads (None without keys).
    pub key_norm_ratio_first: Option<f64>,
    /// ‖v_0‖ / mean_{j≥1} ‖v_j‖ averaged over kv heads (None without values).
    pub value_norm_ratio_first: Option<f64>,
    /// Per head (empty without attention maps).
    pub heads: Vec<HeadStats>,
}

impl LayerStats {
    /// The seven summary columns of the per-layer tables, in order: `attn_to_first`,
    /// `bos_cos_mean`, `bos_cos_frac_nonpos`, `hidden_norm_first`, `hidden_norm_median`,
    /// `sink_gu_eps03`, `sink_gu_eps08`; an absent value (no attention maps) is NaN.
    pub fn summary_columns(&self) -> [f64; 7] {
        [
            self.attn_to_first.unwrap_or(f64::NAN),
            self.bos_cos_mean,
            self.bos_cos_frac_nonpos,
            self.hidden_norm_first,
            self.hidden_norm_median,
            self.sink_gu_eps03.unwrap_or(f64::NAN),
            self.sink_gu_eps08.unwrap_or(f64::NAN),
        ]
    }
}

/// Observer computing [`LayerStats`] per layer.
#[derive(Debug, Default)]
pub struct StatsObserver {
    /// Results, one per layer.
    pub layers: Vec<LayerStats>,
}

fn rows_f64(x: &[f32], t: usize, d: usize) -> Vec<Vec<f64>> {
    (0..t)
        .map(|i| x[i * d..(i + 1) * d].iter().map(|&v| v as f64).collect())
        .collect()
}

/// Mean pairwise cosine over distinct pairs of rows
/// ([`crate::oversmoothing::model::mean_pairwise_cosine_rows`]); NaN when undefined (fewer than
/// two rows, or a zero row).
pub fn mean_pairwise_cos(rows: &[Vec<f64>]) -> f64 {
    crate::oversmoothing::model::mean_pairwise_cosine_rows(rows.iter().cloned()).unwrap_or(f64::NAN)
}

/// Shapes of one layer's tensors for [`layer_stats`].
#[derive(Debug, Clone, Copy)]
pub struct Dims {
    /// Query positions T.
    pub t: usize,
    /// Key positions T_k (= T without a cache).
    pub t_keys: usize,
    /// Residual width.
    pub d: usize,
    /// Query heads.
    pub h: usize,
    /// Key/value heads.
    pub h_kv: usize,
    /// Head dimension.
    pub d_head: usize,
    /// Causal attention (else bidirectional).
    pub causal: bool,
    /// Sliding window of the layer, if any.
    pub window: Option<usize>,
    /// Absolute position of the first query row.
    pub pos0: usize,
}

/// Statistics of one layer from its residual stream after the layer `x_out` `[T, d]`, and when
/// present the attention maps `[H, T, T_k]`, keys and values `[T_k, H_kv·d_head]`.
pub fn layer_stats(
    layer: usize,
    dm: Dims,
    x_out: &[f32],
    attn: Option<&[f32]>,
    k: Option<&[f32]>,
    v: Option<&[f32]>,
) -> LayerStats {
    let Dims {
        t,
        t_keys: tk,
        d,
        h,
        h_kv: hk,
        d_head: dh,
        causal,
        window,
        pos0,
    } = dm;
    let hid = rows_f64(x_out, t, d);
    let hm = Mat::<f64>::from_fn(t, d, |i, j| hid[i][j]);
    let norms: Vec<f64> = hid.iter().map(|r| crate::linalg::norm(r)).collect();
    let cs = patterns::bos_cosine_summary(hm.as_ref(), 0);
    let mut rest: Vec<f64> = norms[1.min(t)..].to_vec();
    rest.sort_by(f64::total_cmp);
    let visible = |i: usize| -> usize {
        if !causal {
            return tk;
        }
        let q = pos0 + i + 1;
        window.map_or(q, |w| q.min(w))
    };
    let head_norm = |x: &[f32], g: usize, j: usize| -> f64 {
        x[j * hk * dh + g * dh..j * hk * dh + (g + 1) * dh]
            .iter()
            .map(|&v| (v as f64).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let first_ratio = |x: &[f32]| -> f64 {
        (0..hk)
            .map(|g| {
                let rest =
                    (1..tk).map(|j| head_norm(x, g, j)).sum::<f64>() / (tk - 1).max(1) as f64;
                head_norm(x, g, 0) / rest
            })
            .sum::<f64>()
            / hk as f64
    };
    let mut heads = Vec::new();
    let mut to_first = 0.0;
    if let Some(attn) = attn {
        for hh in 0..h {
            let a = &attn[hh * t * tk..(hh + 1) * t * tk];
            let am = Mat::<f64>::from_fn(t, tk, |i, j| a[i * tk + j] as f64);
            let g = hh / (h / hk);
            let Some(dom) = patterns::dominant_column(am.as_ref(), None) else {
                continue;
            };
            let ratio = v.and_then(|v| {
                let vn: Vec<f64> = (0..tk).map(|j| head_norm(v, g, j)).collect();
                patterns::value_norm_ratio(&vn, dom.col)
            });
            // Gu's α_0 = (1/T) Σ_i A_{i0} (column 0 of the square causal map).
            let alpha_first = (0..t).map(|i| am[(i, 0)]).sum::<f64>() / t as f64;
            let alpha_first = if tk == t {
                patterns::gu_alpha(am.as_ref())[0]
            } else {
                alpha_first
            };
            heads.push(HeadStats {
                alpha_first,
                dominant: dom.col,
                dominant_mass: dom.mass,
                routed_frac: dom.routed_frac,
                min_a: dom.min_a,
                value_norm_ratio: ratio,
                class: ratio.map(patterns::value_class),
                row_entropy: patterns::mean_row_entropy(am.as_ref(), visible),
            });
            if t > 1 {
                to_first += (1..t).map(|i| a[i * tk] as f64).sum::<f64>() / (t - 1) as f64;
            }
        }
    }
    let alphas: Vec<f64> = heads.iter().map(|s| s.alpha_first).collect();
    let sink = |eps: f64| attn.and_then(|_| patterns::sink_rate(&alphas, eps));
    let massive = hid
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            patterns::massive_activations(r)
                .into_iter()
                .map(move |(k, v)| (i, k, v))
        })
        .collect();
    LayerStats {
        layer,
        attn_to_first: attn.map(|_| to_first / h as f64),
        bos_cos_mean: cs.map_or(f64::NAN, |c| c.mean),
        bos_cos_frac_nonpos: cs.map_or(f64::NAN, |c| c.frac_nonpos),
        bos_cos_q: cs.map_or([f64::NAN; 3], |c| [c.q10, c.q50, c.q90]),
        hidden_norm_first: norms[0],
        hidden_norm_median: patterns::quantile_sorted(&rest, 0.5),
        sink_gu_eps03: sink(0.3),
        sink_gu_eps08: sink(0.8),
        massive,
        mean_token_cos: mean_pairwise_cos(&hid),
        key_norm_ratio_first: k.map(first_ratio),
        value_norm_ratio_first: v.map(first_ratio),
        heads,
    }
}

impl LayerObserver for StatsObserver {
    fn layer(&mut self, m: &Pretrained, lt: &LayerTensors<'_>) {
        let c = &m.cfg;
        let dm = Dims {
            t: lt.t,
            t_keys: lt.t_keys,
            d: c.d_model,
            h: c.n_head,
            h_kv: c.n_kv_head,
            d_head: c.head_dim,
            causal: c.causal,
            window: m.layers[lt.layer].window,
            pos0: lt.pos0,
        };
        self.layers.push(layer_stats(
            lt.layer,
            dm,
            lt.x_out,
            Some(lt.attn),
            Some(lt.k),
            Some(lt.v),
        ));
    }
}
