//! Per-sink records and the claim measurements B1–B6 (docs/theory.md §8) from
//! captured activations.
//!
//! The sink score of key $t$ at layer $l$ is Gu et al.'s importance
//! $\alpha^l_t = \frac{1}{T-t}\sum_{i \ge t} A^l_{it}$ averaged over heads; the
//! primary-sink strength is the same quantity for the BOS. (The authors' sink-score
//! notebook, `05.sink_score.ipynb`, could not be read here: its blob is missing from
//! the stored snapshot of their repository, so this definition is ours, not theirs.)
//!
//! B6 baseline: the authors' notebook `01.hidden_k_v_norm.ipynb` compares a sink's
//! norms with the **mean** over the positions outside their sink map (not the BOS, not
//! flagged); that is [`ClaimMeasures::b6_hidden_ratio`] etc. The median over the same
//! positions is kept as the named variant `b6_ratios_median_baseline`.

use super::activations::{Activations, HeadTensor};
use super::detector::{
    DetectError, Detection, DetectorParams, Label, LevelSummary, detect, level_summary,
};
use super::hidden::{HiddenStates, dot_and_sq};
use super::native::Extras;
use crate::stats::{Estimate, spearman_ci};
use serde::Serialize;

/// One JSON record per detected sink.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SinkRecord {
    /// Sequence index (when several are analysed together).
    pub sequence: usize,
    /// Position $t$.
    pub position: usize,
    /// Token id, if known.
    pub token: Option<i64>,
    /// Token text, if a tokenizer was available.
    pub token_text: Option<String>,
    /// First flagged layer.
    pub creation_layer: usize,
    /// Number of flagged layers.
    pub lifetime: usize,
    /// Label of the rule.
    pub label: Label,
    /// Flagged layers.
    pub layers: Vec<usize>,
    /// $\cos(h^l_t, h^l_b)$ at the flagged layers.
    pub cos_bos: Vec<f64>,
    /// Sink score $\alpha^l_t$ (mean over heads) at every layer, if attention was captured.
    pub sink_score: Option<Vec<f64>>,
    /// $\lVert h^l_t\rVert$ at every layer.
    pub hidden_norm: Vec<f64>,
    /// Mean over KV heads of $\lVert k^l_t\rVert$ at every layer, if keys were captured.
    pub key_norm: Option<Vec<f64>>,
    /// Mean over KV heads of $\lVert v^l_t\rVert$ at every layer, if values were captured.
    pub value_norm: Option<Vec<f64>>,
    /// Mean over KV heads of the key norm before the per-head k-norm (models with one).
    pub key_norm_pre_knorm: Option<Vec<f64>>,
    /// $\lVert m^{l_c}\_t\rVert$, the MLP-output norm at the creation layer.
    pub mlp_out_norm_at_creation: Option<f64>,
    /// $\cos(m^{l_c}\_t, h^{l_c}\_b)$: the MLP output against the BOS state.
    pub mlp_cos_bos_at_creation: Option<f64>,
    /// $\cos(h^{l_c}\_t - m^{l_c}\_t, h^{l_c}\_b)$: the state before the MLP against the BOS state.
    pub pre_mlp_cos_bos_at_creation: Option<f64>,
}

impl SinkRecord {
    /// Mean sink score over the flagged layers.
    pub fn mean_score(&self) -> Option<f64> {
        self.sink_score.as_ref().map(|s| {
            self.layers.iter().map(|&l| s[l]).sum::<f64>() / self.layers.len().max(1) as f64
        })
    }
}

/// Per-sequence quantities that are not attached to one sink.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SequenceSummary {
    /// Sequence index.
    pub sequence: usize,
    /// Positions.
    pub tokens: usize,
    /// Chosen BOS.
    pub bos: usize,
    /// Scanned window.
    pub window: (usize, usize),
    /// $\lVert h^l_b\rVert$ per layer.
    pub bos_hidden_norm: Vec<f64>,
    /// BOS key norm per layer.
    pub bos_key_norm: Option<Vec<f64>>,
    /// BOS value norm per layer.
    pub bos_value_norm: Option<Vec<f64>>,
    /// Median over ordinary positions (not BOS, not flagged anywhere) of the hidden norm, per layer.
    pub median_hidden_norm: Vec<f64>,
    /// Same for key norms.
    pub median_key_norm: Option<Vec<f64>>,
    /// Same for value norms.
    pub median_value_norm: Option<Vec<f64>>,
    /// Mean over the same ordinary positions of the hidden norm, per layer (the authors' baseline).
    pub mean_hidden_norm: Vec<f64>,
    /// Same for key norms.
    pub mean_key_norm: Option<Vec<f64>>,
    /// Same for value norms.
    pub mean_value_norm: Option<Vec<f64>>,
    /// Same for pre-k-norm key norms.
    pub mean_key_norm_pre_knorm: Option<Vec<f64>>,
    /// BOS pre-k-norm key norm per layer.
    pub bos_key_norm_pre_knorm: Option<Vec<f64>>,
    /// Primary-sink strength $\alpha^l_b$ (mean over heads) per layer.
    pub primary_strength: Option<Vec<f64>>,
    /// Number of secondary sinks flagged at each layer.
    pub secondary_per_layer: Vec<usize>,
    /// Sinks per label: (bos_sink, secondary, noise).
    pub label_counts: (usize, usize, usize),
}

/// Analysis of one sequence.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Analysis {
    /// The detector's output.
    pub detection: Detection,
    /// One record per detected sink.
    pub records: Vec<SinkRecord>,
    /// Sequence-level quantities.
    pub summary: SequenceSummary,
}

fn cos<S: super::hidden::Real>(a: &[S], b: &[S]) -> Option<f64> {
    let (d, sa) = dot_and_sq(a, b);
    let (_, sb) = dot_and_sq(b, b);
    (sa > 0.0 && sb > 0.0).then(|| (d / (sa.sqrt() * sb.sqrt())).clamp(-1.0, 1.0))
}

/// The median (type-7 quantile ½: the mean of the two middle values for even n; NaN when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    crate::stats::quantile_sorted(&v, 0.5)
}

/// Sink scores $\alpha^l_t$ averaged over heads, `[L][T]`.
pub fn sink_scores(attn: &[HeadTensor]) -> Vec<Vec<f64>> {
    attn.iter()
        .map(|a| {
            let mut acc = vec![0.0; a.tokens];
            for h in 0..a.heads {
                let m = a.head_mat(h);
                for (s, v) in acc.iter_mut().zip(crate::patterns::gu_alpha(m.as_ref())) {
                    *s += v / a.heads as f64;
                }
            }
            acc
        })
        .collect()
}

fn mean(v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

/// Runs the detector on one sequence and builds its records.
pub fn analyse(
    act: &Activations,
    p: &DetectorParams,
    sequence: usize,
) -> Result<Analysis, DetectError> {
    analyse_with(act, p, sequence, &Extras::default())
}

/// [`analyse`] with quantities reduced during capture (sink scores, which then
/// replace those from `act.attn`; pre-k-norm key norms).
pub fn analyse_with(
    act: &Activations,
    p: &DetectorParams,
    sequence: usize,
    ex: &Extras,
) -> Result<Analysis, DetectError> {
    let h: &HiddenStates<f32> = &act.hidden;
    let det = detect(h, p)?;
    let (nl, nt) = (h.layers(), h.tokens());
    let b = det.bos;
    let scores = ex
        .sink_scores
        .clone()
        .or_else(|| act.attn.as_ref().map(|a| sink_scores(a)));
    let kpre = ex.key_norm_pre_knorm.as_ref();
    let norms_of = |x: &Option<Vec<HeadTensor>>, t: usize| {
        x.as_ref()
            .map(|v| v.iter().map(|ht| ht.mean_norm(t)).collect::<Vec<f64>>())
    };
    let records: Vec<SinkRecord> = det
        .sinks
        .iter()
        .map(|s| {
            let t = s.position;
            let lc = s.creation_layer;
            let mlp = act.mlp_out.as_ref().map(|m| m.state(lc, t));
            let pre: Option<Vec<f32>> =
                mlp.map(|m| h.state(lc, t).iter().zip(m).map(|(a, b)| a - b).collect());
            SinkRecord {
                sequence,
                position: t,
                token: act.tokens.as_ref().map(|tk| tk[t]),
                token_text: None,
                creation_layer: lc,
                lifetime: s.lifetime,
                label: s.label,
                layers: s.layers.clone(),
                cos_bos: s.cosines.clone(),
                sink_score: scores
                    .as_ref()
                    .map(|sc| sc.iter().map(|row| row[t]).collect()),
                hidden_norm: (0..nl).map(|l| h.norm(l, t)).collect(),
                key_norm: norms_of(&act.keys, t),
                value_norm: norms_of(&act.values, t),
                key_norm_pre_knorm: kpre.map(|k| k.iter().map(|row| row[t]).collect()),
                mlp_out_norm_at_creation: mlp.map(|m| {
                    m.iter()
                        .map(|&v| (v as f64) * (v as f64))
                        .sum::<f64>()
                        .sqrt()
                }),
                mlp_cos_bos_at_creation: mlp.and_then(|m| cos(m, h.state(lc, b))),
                pre_mlp_cos_bos_at_creation: pre.as_ref().and_then(|x| cos(x, h.state(lc, b))),
            }
        })
        .collect();
    let flagged: Vec<bool> = (0..nt)
        .map(|t| t == b || det.sinks.iter().any(|s| s.position == t))
        .collect();
    let ordinary: Vec<usize> = (0..nt).filter(|&t| !flagged[t]).collect();
    let med = |f: &dyn Fn(usize, usize) -> f64| {
        (0..nl)
            .map(|l| median(ordinary.iter().map(|&t| f(l, t)).collect()))
            .collect::<Vec<f64>>()
    };
    let med_heads =
        |x: &Option<Vec<HeadTensor>>| x.as_ref().map(|v| med(&|l, t| v[l].mean_norm(t)));
    let avg = |f: &dyn Fn(usize, usize) -> f64| {
        (0..nl)
            .map(|l| mean(ordinary.iter().map(|&t| f(l, t)).collect()))
            .collect::<Vec<f64>>()
    };
    let avg_heads =
        |x: &Option<Vec<HeadTensor>>| x.as_ref().map(|v| avg(&|l, t| v[l].mean_norm(t)));
    let count = |lab| det.sinks.iter().filter(|s| s.label == lab).count();
    let summary = SequenceSummary {
        sequence,
        tokens: nt,
        bos: b,
        window: (det.window.start, det.window.end),
        bos_hidden_norm: det.bos_norms.clone(),
        bos_key_norm: norms_of(&act.keys, b),
        bos_value_norm: norms_of(&act.values, b),
        median_hidden_norm: med(&|l, t| h.norm(l, t)),
        median_key_norm: med_heads(&act.keys),
        median_value_norm: med_heads(&act.values),
        mean_hidden_norm: avg(&|l, t| h.norm(l, t)),
        mean_key_norm: avg_heads(&act.keys),
        mean_value_norm: avg_heads(&act.values),
        mean_key_norm_pre_knorm: kpre.map(|k| avg(&|l, t| k[l][t])),
        bos_key_norm_pre_knorm: kpre.map(|k| k.iter().map(|row| row[b]).collect()),
        primary_strength: scores
            .as_ref()
            .map(|sc| sc.iter().map(|row| row[b]).collect()),
        secondary_per_layer: det.count_per_layer(Label::Secondary),
        label_counts: (
            count(Label::BosSink),
            count(Label::Secondary),
            count(Label::Noise),
        ),
    };
    Ok(Analysis {
        detection: det,
        records,
        summary,
    })
}

/// Claims B1–B6 measured over a set of analysed sequences.
#[derive(Clone, Debug, Serialize)]
pub struct ClaimMeasures {
    /// Layers of the model.
    pub layers: usize,
    /// Sequences analysed.
    pub sequences: usize,
    /// Sinks per label over all sequences: (bos_sink, secondary, noise).
    pub label_counts: (usize, usize, usize),
    /// B1: creation-layer histogram of secondary sinks (length L).
    pub b1_creation_hist: Vec<usize>,
    /// B1: fraction of secondary sinks created in the middle third of the layers.
    pub b1_frac_middle_third: Option<f64>,
    /// B2: median $|\cos(m, h_b)|$ at creation over secondary sinks.
    pub b2_median_abs_cos_mlp: Option<f64>,
    /// B2: median $|\cos(h - m, h_b)|$ (before the MLP) at creation.
    pub b2_median_abs_cos_pre: Option<f64>,
    /// B3: Spearman(MLP-output norm at creation, mean sink score) over the sinks used.
    pub b3_norm_vs_score: Option<Estimate>,
    /// B3: Spearman(MLP-output norm at creation, lifetime).
    pub b3_norm_vs_lifetime: Option<Estimate>,
    /// B3: which sinks entered the correlations ("secondary", or "all non-BOS" when fewer than 5 secondary).
    pub b3_population: String,
    /// B4: primary strength per layer (mean over sequences).
    pub b4_primary_strength: Option<Vec<f64>>,
    /// B4: secondary sinks flagged per layer (summed over sequences).
    pub b4_secondary_per_layer: Vec<usize>,
    /// B4: Spearman over layers of primary strength vs secondary count (negative = primary weakens where secondaries appear).
    pub b4_spearman: Option<f64>,
    /// B4: the same with a bootstrap CI over layers.
    pub b4_spearman_ci: Option<Estimate>,
    /// B5: level summary of the secondary sinks (levels = cells with ≥ 2 sinks).
    pub b5_levels: LevelSummary,
    /// B6: median over secondary sinks of hidden norm / mean ordinary hidden norm at creation
    /// (the authors' baseline: mean over the positions outside the sink map).
    pub b6_hidden_ratio: Option<f64>,
    /// B6: same for key norms (keys as the attention uses them: after k-norm and RoPE).
    pub b6_key_ratio: Option<f64>,
    /// B6: same for value norms.
    pub b6_value_ratio: Option<f64>,
    /// B6: key ratio before the per-head k-norm (models with one, e.g. Gemma 3).
    pub b6_key_ratio_pre_knorm: Option<f64>,
    /// B6 variant `median-baseline`: (hidden, key, value) ratios against the median ordinary norm.
    pub b6_ratios_median_baseline: (Option<f64>, Option<f64>, Option<f64>),
    /// B6: the BOS ratios (hidden, key, value), median over sequences and window layers (mean baseline).
    pub b6_bos_ratios: (Option<f64>, Option<f64>, Option<f64>),
    /// Validity of the detector over the run.
    pub validity: RunValidity,
}

/// Validity of the detector over a run (the per-sequence [`super::detector::Validity`] pooled).
#[derive(Clone, Debug, Serialize)]
pub struct RunValidity {
    /// Positions after the BOS, summed over sequences.
    pub positions: usize,
    /// Fraction of them flagged at some layer.
    pub frac_flagged: f64,
    /// Sequences that are saturated by the rule.
    pub saturated_sequences: usize,
    /// The run is saturated (anisotropy, not sinks) iff a majority of its sequences are,
    /// or the pooled fraction flagged exceeds [`super::detector::SATURATION_FRAC`].
    pub saturated: bool,
    /// Per layer: mean over sequences of the median $|\cos(h_t, h_b)|$ over $t > b$.
    pub median_abs_cos: Vec<f64>,
    /// Per layer: mean over sequences of the 90 % quantile.
    pub q90_abs_cos: Vec<f64>,
    /// Per layer: mean over sequences (with ordinary positions) of the ordinary-token median.
    pub ordinary_median_abs_cos: Vec<Option<f64>>,
    /// Per layer: fraction of the positions flagged there, pooled.
    pub frac_flagged_per_layer: Vec<f64>,
}

/// Pools the per-sequence validity.
pub fn run_validity(analyses: &[Analysis], layers: usize) -> RunValidity {
    let vs: Vec<&super::detector::Validity> =
        analyses.iter().map(|a| &a.detection.validity).collect();
    let positions: usize = vs.iter().map(|v| v.positions).sum();
    let flagged: f64 = vs.iter().map(|v| v.frac_flagged * v.positions as f64).sum();
    let per_layer = |f: &dyn Fn(&super::detector::Validity, usize) -> f64| -> Vec<f64> {
        (0..layers)
            .map(|l| {
                mean(
                    vs.iter()
                        .map(|v| f(v, l))
                        .filter(|x| x.is_finite())
                        .collect(),
                )
            })
            .collect()
    };
    let saturated_sequences = vs.iter().filter(|v| v.saturated).count();
    let frac_flagged = flagged / positions.max(1) as f64;
    RunValidity {
        positions,
        frac_flagged,
        saturated_sequences,
        saturated: 2 * saturated_sequences > vs.len()
            || frac_flagged > super::detector::SATURATION_FRAC,
        median_abs_cos: per_layer(&|v, l| v.abs_cos_quantiles[l][1]),
        q90_abs_cos: per_layer(&|v, l| v.abs_cos_quantiles[l][2]),
        ordinary_median_abs_cos: per_layer(&|v, l| v.ordinary_median[l])
            .into_iter()
            .map(|x| x.is_finite().then_some(x))
            .collect(),
        frac_flagged_per_layer: (0..layers)
            .map(|l| {
                vs.iter()
                    .map(|v| v.frac_flagged_per_layer[l] * v.positions as f64)
                    .sum::<f64>()
                    / positions.max(1) as f64
            })
            .collect(),
    }
}

/// Aggregates B1–B6 over analysed sequences (bootstrap with `boot` resamples, seeded).
pub fn claim_measures(
    analyses: &[Analysis],
    layers: usize,
    boot: usize,
    seed: u64,
) -> ClaimMeasures {
    let recs: Vec<&SinkRecord> = analyses.iter().flat_map(|a| &a.records).collect();
    let sec: Vec<&SinkRecord> = recs
        .iter()
        .copied()
        .filter(|r| r.label == Label::Secondary)
        .collect();
    let count = |lab| recs.iter().filter(|r| r.label == lab).count();
    let mut hist = vec![0; layers];
    for r in &sec {
        hist[r.creation_layer] += 1;
    }
    let (m0, m1) = (layers / 3, layers - layers / 3);
    let frac_mid = (!sec.is_empty()).then(|| {
        sec.iter()
            .filter(|r| (m0..m1).contains(&r.creation_layer))
            .count() as f64
            / sec.len() as f64
    });
    let med_opt = |v: Vec<f64>| (!v.is_empty()).then(|| median(v));
    let (pop, pop_name): (Vec<&SinkRecord>, &str) = if sec.len() >= 5 {
        (sec.clone(), "secondary")
    } else {
        (
            recs.iter()
                .copied()
                .filter(|r| r.label != Label::BosSink)
                .collect(),
            "all non-BOS (fewer than 5 secondary)",
        )
    };
    let pairs = |f: &dyn Fn(&SinkRecord) -> Option<f64>| -> (Vec<f64>, Vec<f64>) {
        pop.iter()
            .filter_map(|r| Some((r.mlp_out_norm_at_creation?, f(r)?)))
            .unzip()
    };
    let (xs, ys) = pairs(&|r| r.mean_score());
    let b3s = spearman_ci(&xs, &ys, boot, 0.95, seed).ok();
    let (xl, yl) = pairs(&|r| Some(r.lifetime as f64));
    let b3l = spearman_ci(&xl, &yl, boot, 0.95, seed.wrapping_add(1)).ok();
    let prim: Option<Vec<f64>> = {
        let v: Vec<&Vec<f64>> = analyses
            .iter()
            .filter_map(|a| a.summary.primary_strength.as_ref())
            .collect();
        (!v.is_empty()).then(|| {
            (0..layers)
                .map(|l| v.iter().map(|p| p[l]).sum::<f64>() / v.len() as f64)
                .collect()
        })
    };
    let mut per_layer = vec![0; layers];
    for a in analyses {
        for (c, &n) in per_layer.iter_mut().zip(&a.summary.secondary_per_layer) {
            *c += n;
        }
    }
    let c4: Vec<f64> = per_layer.iter().map(|&n| n as f64).collect();
    let b4 = prim
        .as_ref()
        .and_then(|p| crate::stats::spearman(p, &c4).ok());
    let b4_ci = prim
        .as_ref()
        .and_then(|p| spearman_ci(p, &c4, boot, 0.95, seed.wrapping_add(2)).ok());
    let ratio = |num: &dyn Fn(&SinkRecord) -> Option<f64>,
                 den: &dyn Fn(&Analysis, usize) -> Option<f64>| {
        let v: Vec<f64> = analyses
            .iter()
            .flat_map(|a| {
                a.records
                    .iter()
                    .filter(|r| r.label == Label::Secondary)
                    .filter_map(|r| Some(num(r)? / den(a, r.creation_layer)?))
                    .collect::<Vec<_>>()
            })
            .filter(|x| x.is_finite())
            .collect();
        med_opt(v)
    };
    let lc_of = |r: &SinkRecord| r.creation_layer;
    let b6h = ratio(&|r| Some(r.hidden_norm[lc_of(r)]), &|a, l| {
        Some(a.summary.mean_hidden_norm[l])
    });
    let b6k = ratio(&|r| r.key_norm.as_ref().map(|k| k[lc_of(r)]), &|a, l| {
        a.summary.mean_key_norm.as_ref().map(|k| k[l])
    });
    let b6v = ratio(&|r| r.value_norm.as_ref().map(|k| k[lc_of(r)]), &|a, l| {
        a.summary.mean_value_norm.as_ref().map(|k| k[l])
    });
    let b6kp = ratio(
        &|r| r.key_norm_pre_knorm.as_ref().map(|k| k[lc_of(r)]),
        &|a, l| a.summary.mean_key_norm_pre_knorm.as_ref().map(|k| k[l]),
    );
    let b6_med = (
        ratio(&|r| Some(r.hidden_norm[lc_of(r)]), &|a, l| {
            Some(a.summary.median_hidden_norm[l])
        }),
        ratio(&|r| r.key_norm.as_ref().map(|k| k[lc_of(r)]), &|a, l| {
            a.summary.median_key_norm.as_ref().map(|k| k[l])
        }),
        ratio(&|r| r.value_norm.as_ref().map(|k| k[lc_of(r)]), &|a, l| {
            a.summary.median_value_norm.as_ref().map(|k| k[l])
        }),
    );
    let bos_ratio = |num: &dyn Fn(&SequenceSummary) -> Option<&Vec<f64>>,
                     den: &dyn Fn(&SequenceSummary) -> Option<&Vec<f64>>| {
        let v: Vec<f64> = analyses
            .iter()
            .flat_map(|a| {
                let s = &a.summary;
                match (num(s), den(s)) {
                    (Some(n), Some(d)) => (s.window.0..s.window.1)
                        .map(|l| n[l] / d[l])
                        .filter(|x| x.is_finite())
                        .collect(),
                    _ => Vec::new(),
                }
            })
            .collect();
        med_opt(v)
    };
    ClaimMeasures {
        layers,
        sequences: analyses.len(),
        label_counts: (
            count(Label::BosSink),
            count(Label::Secondary),
            count(Label::Noise),
        ),
        b1_creation_hist: hist,
        b1_frac_middle_third: frac_mid,
        b2_median_abs_cos_mlp: med_opt(
            sec.iter()
                .filter_map(|r| r.mlp_cos_bos_at_creation.map(f64::abs))
                .collect(),
        ),
        b2_median_abs_cos_pre: med_opt(
            sec.iter()
                .filter_map(|r| r.pre_mlp_cos_bos_at_creation.map(f64::abs))
                .collect(),
        ),
        b3_norm_vs_score: b3s,
        b3_norm_vs_lifetime: b3l,
        b3_population: pop_name.to_string(),
        b4_primary_strength: prim,
        b4_secondary_per_layer: per_layer,
        b4_spearman: b4,
        b4_spearman_ci: b4_ci,
        b5_levels: level_summary(sec.iter().map(|r| (r.creation_layer, r.lifetime)), 2),
        b6_hidden_ratio: b6h,
        b6_key_ratio: b6k,
        b6_value_ratio: b6v,
        b6_key_ratio_pre_knorm: b6kp,
        b6_ratios_median_baseline: b6_med,
        b6_bos_ratios: (
            bos_ratio(&|s| Some(&s.bos_hidden_norm), &|s| {
                Some(&s.mean_hidden_norm)
            }),
            bos_ratio(&|s| s.bos_key_norm.as_ref(), &|s| s.mean_key_norm.as_ref()),
            bos_ratio(&|s| s.bos_value_norm.as_ref(), &|s| {
                s.mean_value_norm.as_ref()
            }),
        ),
        validity: run_validity(analyses, layers),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secondary::synthetic::{SyntheticConfig, SyntheticModel};

    #[test]
    fn planted_population_gives_the_planted_mechanism() {
        let cfg = SyntheticConfig {
            tokens: 128,
            cone_tokens: 40,
            seed: 3,
            ..Default::default()
        };
        let m = SyntheticModel::new(cfg.clone()).unwrap();
        // r_t increasing with t over [0, 12]: lifetimes from 0 to the whole window.
        let rs: Vec<f64> = (0..cfg.tokens)
            .map(|t| 12.0 * t as f64 / cfg.tokens as f64)
            .collect();
        let act = m.activations(&rs);
        let p = DetectorParams {
            labels: crate::secondary::LabelRule {
                bos_margin: 8,
                noise_max: 1,
            },
            ..Default::default()
        };
        let an = analyse(&act, &p, 0).unwrap();
        assert!(an.records.len() >= 20, "{}", an.records.len());
        for r in &an.records {
            // The MLP output is exactly ±r u and the BOS state is n u: |cos| = 1 up to f32 rounding.
            assert!((r.mlp_cos_bos_at_creation.unwrap().abs() - 1.0).abs() < 1e-6);
            // Before the MLP the token is orthogonal to u (cos = 0 up to f32 rounding of h - m).
            assert!(r.pre_mlp_cos_bos_at_creation.unwrap().abs() < 1e-4);
            assert_eq!(r.creation_layer, cfg.creation_layer);
        }
        let c = claim_measures(std::slice::from_ref(&an), cfg.layers, 500, 1);
        let e = c.b3_norm_vs_lifetime.unwrap();
        assert!(e.value > 0.7 && e.lo > 0.0, "{e:?}");
        assert_eq!(c.b1_creation_hist.iter().sum::<usize>(), c.label_counts.1);
        assert!(
            c.b2_median_abs_cos_mlp.unwrap() > 0.999 && c.b2_median_abs_cos_pre.unwrap() < 1e-3
        );
        // Sink hidden norms at creation exceed the ordinary median (r up to 12 vs ~1.4).
        assert!(c.b6_hidden_ratio.unwrap() > 1.0);
    }
}
