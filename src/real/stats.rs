//! Per-layer statistics of paper A (docs/theory.md §3, §9), reduced while the forward pass streams:
//! each layer's attention maps and hidden states are summarised when the layer is done and then
//! dropped.
//!
//! Per layer l (queries i ≥ 1, position 0 = the first token, BOS when present):
//! - `attn_to_first` = mean over heads and over i ≥ 1 of `A_{i,0}`;
//! - `learned_sink_mass` (models with learned sink logits, gpt-oss) = mean over heads and over
//!   i ≥ 1 of `1 − Σ_j A_{i,j}`, the mass the sink logit takes (the maps hold the visible keys);
//! - `bos_cos_*`: cosines `cos(h^l_i, h^l_0)`, i ≥ 1, of the residual stream after layer l;
//! - `hidden_norm_first` = ‖h^l_0‖, `hidden_norm_median` = median_{i≥1} ‖h^l_i‖;
//! - `sink_gu_eps03`, `sink_gu_eps08`: fraction of heads whose Gu importance of key 0,
//!   `α_0 = (1/T) Σ_i A_{i,0}`, exceeds ε (strict);
//! - per head: α_0, dominant column, its mass, routed fraction, min_a, value-norm ratio,
//!   NOP/broadcast class, mean normalised row entropy;
//! - massive activations (|h| > 100 and ≥ 1000 × the median |h| of that hidden state);
//! - mean pairwise token cosine after the layer (the A2 observable).

use crate::patterns::{self, ValueClass};
use crate::runtime::forward::{HeadMap, LayerObserver, LayerTensors};
use crate::runtime::pretrained::Pretrained;
use faer::{Mat, MatRef};

/// Statistics of one head.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HeadStats {
    /// Gu et al.'s $\alpha_0 = \frac1T\sum_{i=0}^{T-1} A_{i0}$ (key 0), over **every** query
    /// row, row 0 included (where $A_{00} = 1$ in a causal map): not the layer's
    /// [`LayerStats::attn_to_first`], which leaves row 0 out.
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
    /// With a learned sink logit (gpt-oss): mean over queries $i \ge 1$ (the rows of
    /// [`LayerStats::attn_to_first`]) of $1 - \sum_j A_{ij}$, the probability the sink takes;
    /// absent for models without learned sinks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned_sink_mass: Option<f64>,
}

/// Statistics of one layer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LayerStats {
    /// Layer index.
    pub layer: usize,
    /// Mean over heads and queries $i \ge 1$ of $A_{i0}$ (None without attention maps): query
    /// row 0 **excluded**, unlike the heads' [`HeadStats::alpha_first`] (Gu's $\alpha_0$, row 0
    /// included), so the two differ by $(1 - \bar\alpha_0)/T$-order terms on one input.
    pub attn_to_first: Option<f64>,
    /// Mean of cos(h_i, h_0), i ≥ 1.
    pub bos_cos_mean: f64,
    /// Fraction of i ≥ 1 with cos(h_i, h_0) ≤ 0.
    pub bos_cos_frac_nonpos: f64,
    /// 10%, 50%, 90% quantiles of cos(h_i, h_0).
    pub bos_cos_q: [f64; 3],
    /// $\lVert h^l_0\rVert$ of the raw residual stream after the layer, the last layer
    /// included (no final norm: the viewer's token curves, `view::TokenCurves`, show the
    /// final-normed state at the last layer, so the two differ there and only there).
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
    /// With learned sink logits: the mean over heads of [`HeadStats::learned_sink_mass`];
    /// absent for models without learned sinks (and without attention maps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned_sink_mass: Option<f64>,
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

/// Observer computing [`LayerStats`] per layer. It reads each attention map as the forward pass
/// shows it head by head ([`LayerObserver::head`]), so a pass observed by it alone never holds
/// a whole layer's maps.
#[derive(Debug, Default)]
pub struct StatsObserver {
    /// Results, one per layer.
    pub layers: Vec<LayerStats>,
    /// The current layer's heads so far.
    pending: Vec<(HeadStats, f64)>,
    /// Heads shown to [`LayerObserver::head`] in the current layer.
    shown: usize,
}

/// The shapes of `m`'s layer `layer` for an input of `t` rows after `pos0` cached ones.
fn dims_of(m: &Pretrained, layer: usize, t: usize, t_keys: usize, pos0: usize) -> Dims {
    let c = &m.cfg;
    Dims {
        t,
        t_keys,
        d: c.d_model,
        h: c.n_head,
        h_kv: c.n_kv_head,
        d_head: c.head_dim,
        causal: c.causal,
        window: m.layers[layer].window,
        pos0,
        learned_sink: m.layers[layer].sinks.is_some(),
    }
}

fn rows_f64(x: &[f32], t: usize, d: usize) -> Vec<Vec<f64>> {
    (0..t)
        .map(|i| x[i * d..(i + 1) * d].iter().map(|&v| v as f64).collect())
        .collect()
}

/// Mean pairwise cosine over distinct pairs of rows
/// ([`crate::oversmoothing::mixing::mean_pairwise_cosine_rows`]); NaN when undefined (fewer than
/// two rows, or a zero row).
pub fn mean_pairwise_cos(rows: &[Vec<f64>]) -> f64 {
    crate::oversmoothing::mixing::mean_pairwise_cosine_rows(rows.iter().cloned())
        .unwrap_or(f64::NAN)
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
    /// The heads have learned sink logits: a map's rows sum to $1 - p_{sink}$.
    pub learned_sink: bool,
}

/// The statistics of head `hh` from its attention map `a` `[T, T_k]` and, when present, the
/// values `v` `[T_k, H_kv·d_head]`, with the head's share of [`LayerStats::attn_to_first`]
/// (its mean attention of the rows $i \ge 1$ to key 0); `None` when the map has no dominant
/// column (the head then counts in neither).
pub fn head_stats(dm: Dims, hh: usize, a: &[f32], v: Option<&[f32]>) -> Option<(HeadStats, f64)> {
    let am = Mat::<f64>::from_fn(dm.t, dm.t_keys, |i, j| a[i * dm.t_keys + j] as f64);
    head_stats_of_map(dm, hh, am.as_ref(), v)
}

/// [`head_stats`] of a map already in f64, `am` `[T, T_k]` (the one definition, for maps from
/// anywhere: the Python package's `sinklab.patterns.metrics`).
pub fn head_stats_of_map(
    dm: Dims,
    hh: usize,
    am: MatRef<'_, f64>,
    v: Option<&[f32]>,
) -> Option<(HeadStats, f64)> {
    let Dims {
        t,
        t_keys: tk,
        h,
        h_kv: hk,
        d_head: dh,
        causal,
        window,
        pos0,
        learned_sink,
        ..
    } = dm;
    let visible = |i: usize| -> usize {
        if !causal {
            return tk;
        }
        let q = pos0 + i + 1;
        window.map_or(q, |w| q.min(w))
    };
    let g = hh / (h / hk);
    let dom = patterns::dominant_column(am, None)?;
    let ratio = v.and_then(|v| {
        let vn: Vec<f64> = (0..tk).map(|j| kv_head_norm(v, hk, dh, g, j)).collect();
        patterns::value_norm_ratio(&vn, dom.col)
    });
    // Gu's α_0 = (1/T) Σ_i A_{i0} (column 0 of the square causal map).
    let alpha_first = (0..t).map(|i| am[(i, 0)]).sum::<f64>() / t as f64;
    let alpha_first = if tk == t {
        patterns::gu_alpha(am)[0]
    } else {
        alpha_first
    };
    let stats = HeadStats {
        alpha_first,
        dominant: dom.col,
        dominant_mass: dom.mass,
        routed_frac: dom.routed_frac,
        min_a: dom.min_a,
        value_norm_ratio: ratio,
        class: ratio.map(patterns::value_class),
        row_entropy: patterns::mean_row_entropy(am, visible),
        learned_sink_mass: (learned_sink && t > 1).then(|| {
            (1..t)
                .map(|i| patterns::learned_sink_mass((0..tk).map(|j| am[(i, j)])))
                .sum::<f64>()
                / (t - 1) as f64
        }),
    };
    let to_first = if t > 1 {
        (1..t).map(|i| am[(i, 0)]).sum::<f64>() / (t - 1) as f64
    } else {
        0.0
    };
    Some((stats, to_first))
}

/// $\lVert x_j \rVert$ of kv head `g` at position `j` in `x` `[T_k, H_kv·d_head]`.
fn kv_head_norm(x: &[f32], hk: usize, dh: usize, g: usize, j: usize) -> f64 {
    x[j * hk * dh + g * dh..j * hk * dh + (g + 1) * dh]
        .iter()
        .map(|&v| (v as f64).powi(2))
        .sum::<f64>()
        .sqrt()
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
    let (t, tk) = (dm.t, dm.t_keys);
    let heads = attn.map(|attn| {
        (0..dm.h)
            .filter_map(|hh| head_stats(dm, hh, &attn[hh * t * tk..(hh + 1) * t * tk], v))
            .collect()
    });
    layer_stats_of_heads(layer, dm, x_out, heads, k, v)
}

/// A layer's attention summary from its heads' results ([`head_stats`], in head order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionSummary {
    /// [`LayerStats::attn_to_first`]: the heads' shares summed, over the layer's `h` heads.
    pub attn_to_first: f64,
    /// Gu's sink rate at ε = 0.3 ([`patterns::sink_rate`] of the heads' α_0).
    pub sink_gu_eps03: Option<f64>,
    /// The same at ε = 0.8.
    pub sink_gu_eps08: Option<f64>,
    /// [`LayerStats::learned_sink_mass`]: the mean of the heads' learned sink masses, `None`
    /// when no head has one.
    pub learned_sink_mass: Option<f64>,
}

/// The [`AttentionSummary`] of `heads` in a layer of `h` heads.
pub fn attention_summary(heads: &[(HeadStats, f64)], h: usize) -> AttentionSummary {
    let to_first: f64 = heads.iter().map(|(_, f)| f).sum();
    let alphas: Vec<f64> = heads.iter().map(|(s, _)| s.alpha_first).collect();
    let masses: Vec<f64> = heads
        .iter()
        .filter_map(|(s, _)| s.learned_sink_mass)
        .collect();
    AttentionSummary {
        attn_to_first: to_first / h as f64,
        sink_gu_eps03: patterns::sink_rate(&alphas, 0.3),
        sink_gu_eps08: patterns::sink_rate(&alphas, 0.8),
        learned_sink_mass: (!masses.is_empty())
            .then(|| masses.iter().sum::<f64>() / masses.len() as f64),
    }
}

/// [`layer_stats`] with the heads' results already computed (`None`: no attention maps), as
/// [`head_stats`] gives them in head order.
pub fn layer_stats_of_heads(
    layer: usize,
    dm: Dims,
    x_out: &[f32],
    heads: Option<Vec<(HeadStats, f64)>>,
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
        ..
    } = dm;
    let hid = rows_f64(x_out, t, d);
    let hm = Mat::<f64>::from_fn(t, d, |i, j| hid[i][j]);
    let norms: Vec<f64> = hid.iter().map(|r| crate::linalg::norm(r)).collect();
    let cs = patterns::bos_cosine_summary(hm.as_ref(), 0);
    let mut rest: Vec<f64> = norms[1.min(t)..].to_vec();
    rest.sort_by(f64::total_cmp);
    let first_ratio = |x: &[f32]| -> f64 {
        (0..hk)
            .map(|g| {
                let rest = (1..tk).map(|j| kv_head_norm(x, hk, dh, g, j)).sum::<f64>()
                    / (tk - 1).max(1) as f64;
                kv_head_norm(x, hk, dh, g, 0) / rest
            })
            .sum::<f64>()
            / hk as f64
    };
    let (heads, summary) = match heads {
        Some(hs) => {
            let summary = attention_summary(&hs, h);
            (hs.into_iter().map(|(s, _)| s).collect(), Some(summary))
        }
        None => (Vec::new(), None),
    };
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
        attn_to_first: summary.map(|s| s.attn_to_first),
        bos_cos_mean: cs.map_or(f64::NAN, |c| c.mean),
        bos_cos_frac_nonpos: cs.map_or(f64::NAN, |c| c.frac_nonpos),
        bos_cos_q: cs.map_or([f64::NAN; 3], |c| [c.q10, c.q50, c.q90]),
        hidden_norm_first: norms[0],
        hidden_norm_median: patterns::quantile_sorted(&rest, 0.5),
        sink_gu_eps03: summary.and_then(|s| s.sink_gu_eps03),
        sink_gu_eps08: summary.and_then(|s| s.sink_gu_eps08),
        massive,
        mean_token_cos: mean_pairwise_cos(&hid),
        key_norm_ratio_first: k.map(first_ratio),
        value_norm_ratio_first: v.map(first_ratio),
        learned_sink_mass: summary.and_then(|s| s.learned_sink_mass),
        heads,
    }
}

impl LayerObserver for StatsObserver {
    fn layer(&mut self, m: &Pretrained, lt: &LayerTensors<'_>) {
        let dm = dims_of(m, lt.layer, lt.t, lt.t_keys, lt.pos0);
        let heads = std::mem::take(&mut self.pending);
        let shown = std::mem::take(&mut self.shown);
        // Inside an observer that does not pass the heads on, the layer's maps are there.
        let stats = if shown == 0 && !lt.attn.is_empty() {
            layer_stats(
                lt.layer,
                dm,
                lt.x_out,
                Some(lt.attn),
                Some(lt.k),
                Some(lt.v),
            )
        } else {
            layer_stats_of_heads(lt.layer, dm, lt.x_out, Some(heads), Some(lt.k), Some(lt.v))
        };
        self.layers.push(stats);
    }

    fn wants_layer_maps(&self) -> bool {
        false
    }

    fn head(&mut self, m: &Pretrained, hm: &HeadMap<'_>) {
        let dm = dims_of(m, hm.layer, hm.t, hm.t_keys, hm.pos0);
        self.shown += 1;
        if let Some(r) = head_stats(dm, hm.head, hm.map, Some(hm.v)) {
            self.pending.push(r);
        }
    }
}
