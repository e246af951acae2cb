//! A3 on real heads (docs/theory.md §4, hard switch ⇒ sink): where a head whose output is ≈ 0 puts its
//! attention mass.
//!
//! Per head h (KV group g) of one forward pass over T tokens, with $A_{ij}$ the attention
//! probabilities, $v_j$ the values, $o_i = \sum_j A_{ij} v_j$ the head output before $W_O$ and
//! $V = \frac{1}{T}\sum_j \lVert v_j\rVert$ the head's mean value norm (as in
//! [`super::switch_real`]), a (head, query) pair with $i \ge 1$ is **off** (a hard switch) when
//! its relative size $z_i = \lVert o_i\rVert / V \le$ [`SMALL`] (the NOP-like threshold of
//! `switch_real`). A key $j \ge 1$ is **low-value** when $\lVert v_j\rVert / V \le$ SMALL. The
//! row's mass (renormalised to sum 1 over the keys it sees) is split into
//! - sink $= A_{i0}$ (position 0, whatever its value),
//! - learned sink $= 1 - \sum_j A_{ij}$ for heads with a learned sink logit (gpt-oss; their rows
//!   sum to less than 1 and are not renormalised: the sink logit is a destination of its own,
//!   one with no value), 0 for every other head,
//! - low-value $= \sum_{j \ge 1,\ \lVert v_j\rVert \le \text{SMALL}\cdot V} A_{ij}$,
//! - spread $= 1 - \text{sink} - \text{learned sink} - \text{low-value}$ (keys with an
//!   ordinary value);
//!
//! beside it the theorem's own quantities: the mass on ≈ 0-value keys including position 0 when
//! its value is low, and the learned sink's, $m^0_i = \sum_{j:\ \lVert v_j\rVert \le
//! \text{SMALL}\cdot V} A_{ij} + \text{learned sink}$, and the
//! attended value norm $a_i = \sum_j A_{ij}\lVert v_j\rVert / V \ge z_i$ (triangle inequality).
//! Under docs/theory.md §4's cone condition $u \cdot v_j \ge \gamma\lVert v_j\rVert$, $a_i \le z_i/\gamma$:
//! an off pair with a large $a_i$ is a zero reached by cancellation between values (the
//! theorem's counterexample $v_1 = -v_2$), not by routing to ≈ 0 values. The attention entropy
//! $H_i = -\sum_j A_{ij}\ln A_{ij}$ (nats, the learned sink one more destination) is reported
//! with $H_i / \ln n_i$, $n_i$ the destinations the query sees ($\min(i + 1, w)$ keys causal
//! with a sliding window $w$, T bidirectional; one more with a learned sink).
//!
//! Controls: a seeded uniform sample of [`RANDOM_PAIRS`] (head, query) pairs of the same run
//! (off or not), and a run of the same model with a first token on which no sink forms
//! ([`super::sink_control`]). Separation: the ROC AUC of a statistic between two groups of pairs,
//! with a seeded bootstrap interval ([`crate::stats::roc_auc_ci`]). Pairs of one head are not
//! independent, so the interval, which resamples pairs, is narrower than a resampling of heads
//! would give.

use super::sink_control::{LEVEL, RESAMPLES, Separation, label};
use crate::runtime::RealError;
use crate::runtime::forward::{LayerObserver, LayerTensors};
use crate::runtime::pretrained::Pretrained;
use crate::stats::{quantile_sorted, roc_auc_ci};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::index::sample;

/// The threshold of "≈ 0" relative to the head's mean value norm ([`super::switch_real::SMALL`]).
pub const SMALL: f64 = super::switch_real::SMALL;
/// Random (head, query) pairs per run in the control group.
pub const RANDOM_PAIRS: usize = 1000;

/// One (head, query) pair.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PairMass {
    /// Layer.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// Query position i.
    pub query: usize,
    /// $z_i = \lVert o_i\rVert / V$.
    pub size: f64,
    /// Mass on position 0.
    pub sink: f64,
    /// Mass on the learned sink logit, $1 - \sum_j A_{ij}$ (0 for heads without one).
    pub learned_sink: f64,
    /// Mass on low-value keys $j \ge 1$.
    pub low_value: f64,
    /// The rest: keys $j \ge 1$ with an ordinary value.
    pub spread: f64,
    /// $m^0_i$: mass on every key with a low value (position 0 included when its value is low)
    /// and on the learned sink.
    pub zero_value: f64,
    /// $a_i = \sum_j A_{ij}\lVert v_j\rVert / V$.
    pub attended_value: f64,
    /// $H_i$ (nats).
    pub entropy: f64,
    /// $H_i / \ln n_i$ (0 for a query that sees one key).
    pub entropy_norm: f64,
    /// The key with the largest attention (the first of equals).
    pub top_key: usize,
}

/// What a query sees: the number of keys in its window, and whether its head has a learned
/// sink logit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Keys visible to the query (≥ 1).
    pub keys: usize,
    /// The head has a learned sink logit: its row sums to $1 - p_{\mathrm{sink}}$.
    pub learned_sink: bool,
}

/// Tolerance on the row sum of a head with a learned sink: f32 probabilities summed over at
/// most a few thousand keys (each rounded by $2^{-24}$ relative).
const ROW_SUM_TOL: f64 = 1e-3;

/// The mass split of one attention row. `row` holds the probabilities of keys 0 to i (key 0
/// first; keys outside the query's window hold 0), `v_rel` their value norms over the head's
/// mean value norm, `size` the pair's $z_i$, `seen` what the query sees. Refuses rows of
/// unequal length, empty rows, rows with a negative or non-finite entry, rows with zero mass
/// (no learned sink) and rows summing to more than 1 (learned sink).
pub fn split_row(
    (layer, head, query): (usize, usize, usize),
    row: &[f64],
    v_rel: &[f64],
    size: f64,
    seen: Seen,
) -> Result<PairMass, String> {
    if row.is_empty() || row.len() != v_rel.len() {
        return Err(format!(
            "attention row of {} keys with {} value norms",
            row.len(),
            v_rel.len()
        ));
    }
    if row.iter().chain(v_rel).any(|x| !x.is_finite() || *x < 0.0) || !size.is_finite() {
        return Err("non-finite or negative attention or norm".into());
    }
    let total: f64 = row.iter().sum();
    let (total, learned_sink) = if seen.learned_sink {
        if total > 1.0 + ROW_SUM_TOL {
            return Err(format!(
                "attention row of a head with a learned sink sums to {total} > 1"
            ));
        }
        // The sink logit takes what the keys do not; the row is not renormalised.
        let learned = crate::patterns::learned_sink_mass(row.iter().copied());
        (total.max(1.0), learned.max(0.0))
    } else {
        if total <= 0.0 {
            return Err("attention row with zero mass".into());
        }
        (total, 0.0)
    };
    let p = |j: usize| row[j] / total;
    let sink = p(0);
    // `+ 0.0`: an empty f64 sum is −0.
    let low_value = (1..row.len())
        .filter(|&j| v_rel[j] <= SMALL)
        .map(p)
        .sum::<f64>()
        + 0.0;
    let spread = (1..row.len())
        .filter(|&j| v_rel[j] > SMALL)
        .map(p)
        .sum::<f64>()
        + 0.0;
    let top_key = (0..row.len()).fold(0, |b, j| if row[j] > row[b] { j } else { b });
    let zero_value = low_value + learned_sink + if v_rel[0] <= SMALL { sink } else { 0.0 };
    let attended_value = (0..row.len()).map(|j| p(j) * v_rel[j]).sum();
    let entropy: f64 = (0..row.len())
        .map(p)
        .chain([learned_sink])
        .filter(|&a| a > 0.0)
        .map(|a| -a * a.ln())
        .sum();
    // Destinations: the keys in the window, and the learned sink.
    let n = seen.keys.clamp(1, row.len()) + usize::from(seen.learned_sink);
    Ok(PairMass {
        layer,
        head,
        query,
        size,
        sink,
        learned_sink,
        low_value,
        spread,
        zero_value,
        attended_value,
        entropy,
        entropy_norm: if n > 1 {
            entropy / (n as f64).ln()
        } else {
            0.0
        },
        top_key,
    })
}

/// One head's value geometry.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HeadValues {
    /// Layer.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// $\lVert v_0\rVert / V$: the sink key's value relative to the mean.
    pub v0_rel: f64,
    /// Keys $j \ge 1$ with a low value.
    pub n_low_keys: usize,
}

/// Every pair of one forward pass.
#[derive(Debug, Clone, Default)]
struct Collector {
    pairs: Vec<PairMass>,
    heads: Vec<HeadValues>,
    error: Option<String>,
}

impl LayerObserver for Collector {
    fn layer(&mut self, m: &Pretrained, t: &LayerTensors<'_>) {
        if self.error.is_some() {
            return;
        }
        let c = &m.cfg;
        let (h, hk, dh, tk) = (c.n_head, c.n_kv_head, c.head_dim, t.t_keys);
        let ly = &m.layers[t.layer];
        let learned_sink = ly.sinks.is_some();
        if t.pos0 != 0 || t.t != tk {
            self.error = Some("A3 needs one forward pass without a cache".into());
            return;
        }
        let norm = |a: &[f32]| a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        for hh in 0..h {
            let g = hh / (h / hk);
            let vn: Vec<f64> = (0..tk)
                .map(|j| norm(&t.v[j * hk * dh + g * dh..j * hk * dh + (g + 1) * dh]))
                .collect();
            let vmean = (vn.iter().sum::<f64>() / tk as f64).max(f64::MIN_POSITIVE);
            let v_rel: Vec<f64> = vn.iter().map(|x| x / vmean).collect();
            self.heads.push(HeadValues {
                layer: t.layer,
                head: hh,
                v0_rel: v_rel[0],
                n_low_keys: v_rel[1..].iter().filter(|&&x| x <= SMALL).count(),
            });
            for i in 1..t.t {
                let o = &t.head_out[i * h * dh + hh * dh..i * h * dh + (hh + 1) * dh];
                let upto = if c.causal { i + 1 } else { tk };
                let seen = Seen {
                    keys: if c.causal {
                        ly.window.map_or(upto, |w| upto.min(w))
                    } else {
                        tk
                    },
                    learned_sink,
                };
                let a = &t.attn[(hh * t.t + i) * tk..(hh * t.t + i) * tk + upto];
                let row: Vec<f64> = a.iter().map(|&x| x as f64).collect();
                let size = norm(o) / vmean;
                match split_row((t.layer, hh, i), &row, &v_rel[..upto], size, seen) {
                    Ok(p) => self.pairs.push(p),
                    Err(e) => {
                        self.error = Some(format!("layer {} head {hh} query {i}: {e}", t.layer));
                        return;
                    }
                }
            }
        }
    }
}

/// Means over a group of pairs.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    /// Pairs.
    pub n: usize,
    /// Mean sink fraction.
    pub sink: f64,
    /// Mean learned-sink fraction (0 without learned sinks).
    pub learned_sink: f64,
    /// Mean low-value fraction.
    pub low_value: f64,
    /// Mean spread fraction (the four means sum to 1).
    pub spread: f64,
    /// Mean $m^0_i$.
    pub zero_value: f64,
    /// Mean $a_i$.
    pub attended_value: f64,
    /// Median $a_i$.
    pub attended_value_median: f64,
    /// Mean $H_i$ (nats).
    pub entropy: f64,
    /// Mean $H_i / \ln n_i$.
    pub entropy_norm: f64,
    /// Pairs whose largest share is the sink, the learned sink, low-value keys, spread (ties to
    /// the first).
    pub dominant: [usize; 4],
    /// The most frequent [`PairMass::top_key`] and its count (the smaller key of equals).
    pub top_key_mode: (usize, usize),
}

/// Summary of a group (all means 0 and `n = 0` for an empty group).
pub fn summarise(ps: &[&PairMass]) -> Summary {
    let n = ps.len();
    if n == 0 {
        return Summary::default();
    }
    let mean = |f: fn(&PairMass) -> f64| ps.iter().map(|p| f(p)).sum::<f64>() / n as f64;
    let mut dominant = [0usize; 4];
    for p in ps {
        let shares = [p.sink, p.learned_sink, p.low_value, p.spread];
        let k = (0..4).fold(0, |b, k| if shares[k] > shares[b] { k } else { b });
        dominant[k] += 1;
    }
    let mut keys: Vec<usize> = ps.iter().map(|p| p.top_key).collect();
    keys.sort_unstable();
    let mut top_key_mode = (0, 0);
    for c in keys.chunk_by(|a, b| a == b) {
        if c.len() > top_key_mode.1 {
            top_key_mode = (c[0], c.len());
        }
    }
    let mut av: Vec<f64> = ps.iter().map(|p| p.attended_value).collect();
    av.sort_by(f64::total_cmp);
    Summary {
        n,
        sink: mean(|p| p.sink),
        learned_sink: mean(|p| p.learned_sink),
        low_value: mean(|p| p.low_value),
        spread: mean(|p| p.spread),
        zero_value: mean(|p| p.zero_value),
        attended_value: mean(|p| p.attended_value),
        attended_value_median: quantile_sorted(&av, 0.5),
        entropy: mean(|p| p.entropy),
        entropy_norm: mean(|p| p.entropy_norm),
        dominant,
        top_key_mode,
    }
}

/// One run: its off pairs against a random sample of its pairs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    /// Token at position 0.
    pub first_token: u32,
    /// Tokens.
    pub n_tokens: usize,
    /// Per head.
    pub heads: Vec<HeadValues>,
    /// (head, query) pairs in all.
    pub n_pairs: usize,
    /// Off pairs ($z_i \le$ SMALL).
    pub off: Summary,
    /// The seeded random sample of pairs.
    pub random: Summary,
    /// Off pairs whose head's position-0 value is low ($\lVert v_0\rVert / V \le$ SMALL).
    pub off_sink_value_low: usize,
    /// Every off pair.
    pub off_pairs: Vec<PairMass>,
    /// The seeded random sample (not serialised: its summary is `random`).
    #[serde(skip)]
    pub random_pairs: Vec<PairMass>,
}

/// Runs the forward pass on `tokens` and splits every pair (seeded random sample).
pub fn analyze(m: &Pretrained, tokens: &[u32], seed: u64) -> Result<Run, RealError> {
    if tokens.len() < 3 {
        return Err(RealError::Input("A3 needs at least 3 tokens".into()));
    }
    let mut col = Collector::default();
    m.forward(tokens, &mut col, None)?;
    if let Some(e) = col.error {
        return Err(RealError::Input(format!("A3: {e}")));
    }
    Ok(run_from(tokens, col.pairs, col.heads, seed))
}

fn run_from(tokens: &[u32], pairs: Vec<PairMass>, heads: Vec<HeadValues>, seed: u64) -> Run {
    let mut rng = StdRng::seed_from_u64(seed);
    let k = RANDOM_PAIRS.min(pairs.len());
    let mut idx = sample(&mut rng, pairs.len(), k).into_vec();
    idx.sort_unstable();
    let random_pairs: Vec<PairMass> = idx.iter().map(|&i| pairs[i].clone()).collect();
    let low0 = |p: &PairMass| {
        heads
            .iter()
            .find(|h| h.layer == p.layer && h.head == p.head)
            .is_some_and(|h| h.v0_rel <= SMALL)
    };
    let off_pairs: Vec<PairMass> = pairs.iter().filter(|p| p.size <= SMALL).cloned().collect();
    Run {
        first_token: tokens[0],
        n_tokens: tokens.len(),
        n_pairs: pairs.len(),
        off: summarise(&off_pairs.iter().collect::<Vec<_>>()),
        random: summarise(&random_pairs.iter().collect::<Vec<_>>()),
        off_sink_value_low: off_pairs.iter().filter(|p| low0(p)).count(),
        heads,
        off_pairs,
        random_pairs,
    }
}

/// A named statistic of one pair.
pub type PairStatistic = (&'static str, fn(&PairMass) -> f64);

/// The pair statistics compared, larger meaning "routed to ≈ 0 values" in docs/theory.md §4's reading:
/// (JSON name, value).
pub const STATISTICS: [PairStatistic; 3] = [
    ("sink", |p| p.sink),
    ("zero_value", |p| p.zero_value),
    ("neg_attended_value", |p| -p.attended_value),
];

/// The separations of one comparison.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Comparison {
    /// "off_vs_random" (sink run), "off_vs_random_nosink", "off_sink_vs_off_nosink".
    pub name: &'static str,
    /// Per statistic of [`STATISTICS`]; empty when a group has no pair.
    pub separations: Vec<Separation>,
}

fn compare(name: &'static str, a: &[PairMass], b: &[PairMass], seed: u64) -> Comparison {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        quantile_sorted(&v, 0.5)
    };
    let mut separations = Vec::new();
    for (k, (sname, f)) in STATISTICS.iter().enumerate() {
        let x: Vec<f64> = a.iter().map(f).collect();
        let y: Vec<f64> = b.iter().map(f).collect();
        if let Ok(auc) = roc_auc_ci(&x, &y, RESAMPLES, LEVEL, seed ^ ((k as u64 + 1) << 20)) {
            separations.push(Separation {
                statistic: sname,
                label: label(&auc),
                auc,
                median_sink: median(x),
                median_nosink: median(y),
            });
        }
    }
    Comparison { name, separations }
}

/// The study: a run with a sink, optionally a run without, and the comparisons.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HardSwitch {
    /// [`SMALL`].
    pub threshold: f64,
    /// Some head of the model has a learned sink logit (its mass is a destination of its own).
    pub learned_sinks: bool,
    /// The run with the input as given.
    pub sink: Run,
    /// The run with the no-sink first token (absent when none was given).
    pub nosink: Option<Run>,
    /// Off pairs against random pairs (each run), and off pairs of the two runs.
    pub comparisons: Vec<Comparison>,
    /// Wall time of [`study`] (forward passes and intervals), seconds.
    pub seconds: f64,
}

/// The no-sink input: `tokens` without its BOS (when it starts with `bos`), `first` prepended,
/// cut to the same length (the report's construction for Gemma and Qwen).
pub fn control_tokens(tokens: &[u32], bos: Option<u32>, first: u32) -> Vec<u32> {
    let rest = match (tokens.first(), bos) {
        (Some(t), Some(b)) if *t == b => &tokens[1..],
        _ => tokens,
    };
    let mut out = vec![first];
    out.extend_from_slice(rest);
    out.truncate(tokens.len());
    out
}

/// Runs the study on `tokens`, and on [`control_tokens`] when `nosink_first` is given.
pub fn study(
    m: &Pretrained,
    tokens: &[u32],
    nosink_first: Option<u32>,
    seed: u64,
) -> Result<HardSwitch, RealError> {
    let t0 = std::time::Instant::now();
    let sink = analyze(m, tokens, seed)?;
    let nosink = match nosink_first {
        Some(f) => Some(analyze(
            m,
            &control_tokens(tokens, m.cfg.bos_id, f),
            seed ^ 0xa3,
        )?),
        None => None,
    };
    let mut s = assemble(sink, nosink, seed);
    s.learned_sinks = m.layers.iter().any(|l| l.sinks.is_some());
    s.seconds = t0.elapsed().as_secs_f64();
    Ok(s)
}

fn assemble(sink: Run, nosink: Option<Run>, seed: u64) -> HardSwitch {
    let mut comparisons = vec![compare(
        "off_vs_random",
        &sink.off_pairs,
        &sink.random_pairs,
        seed,
    )];
    if let Some(n) = &nosink {
        comparisons.push(compare(
            "off_vs_random_nosink",
            &n.off_pairs,
            &n.random_pairs,
            seed ^ 1,
        ));
        comparisons.push(compare(
            "off_sink_vs_off_nosink",
            &sink.off_pairs,
            &n.off_pairs,
            seed ^ 2,
        ));
    }
    HardSwitch {
        threshold: SMALL,
        learned_sinks: false,
        sink,
        nosink,
        comparisons,
        seconds: 0.0,
    }
}

/// Markdown: one table row per group of pairs, then the AUCs and the sentence.
pub fn markdown(s: &HardSwitch, names: (&str, Option<&str>)) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "**A3 (hard switch ⇒ sink, docs/theory.md §4).** (Head, query) pairs whose output is ≈ 0 (‖o_i‖ ≤ {SMALL} × the head's mean value norm: off) against {RANDOM_PAIRS} seeded random pairs of the same run (T = {}); where the attention mass goes (position 0 /{} keys j ≥ 1 with a value norm ≤ {SMALL} × the mean / the rest), the mass on all ≈ 0-value {}m⁰, the attended value norm a = Σ_j A_ij‖v_j‖ / mean (≥ z; large a with z ≈ 0 is a zero by cancellation), and the entropy normalised by ln(destinations seen):\n",
        s.sink.n_tokens,
        if s.learned_sinks {
            " the learned sink logit, a destination with no value, 1 − Σ_j A_ij /"
        } else {
            ""
        },
        if s.learned_sinks {
            "destinations (the learned sink included) "
        } else {
            "keys "
        }
    );
    // The learned-sink column only for models that have one.
    let ls = s.learned_sinks;
    let _ = writeln!(
        md,
        "| pairs | n | sink |{} low-value | spread | m⁰ | a (median) | H / ln n | dominant sink /{} low / spread | most frequent top key (pairs) |",
        if ls { " learned sink |" } else { "" },
        if ls { " learned /" } else { "" }
    );
    let _ = writeln!(
        md,
        "|---|---|---|{}---|---|---|---|---|---|---|",
        if ls { "---|" } else { "" }
    );
    let row = |md: &mut String, what: String, x: &Summary| {
        let (learned, learned_dom) = if ls {
            (
                format!(" {:.3} |", x.learned_sink),
                format!(" {} /", x.dominant[1]),
            )
        } else {
            (String::new(), String::new())
        };
        let _ = writeln!(
            md,
            "| {what} | {} | {:.3} |{learned} {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} /{learned_dom} {} / {} | {} ({}) |",
            x.n,
            x.sink,
            x.low_value,
            x.spread,
            x.zero_value,
            x.attended_value_median,
            x.entropy_norm,
            x.dominant[0],
            x.dominant[2],
            x.dominant[3],
            x.top_key_mode.0,
            x.top_key_mode.1
        );
    };
    row(&mut md, format!("off, `{}` first", names.0), &s.sink.off);
    row(
        &mut md,
        format!("random, `{}` first", names.0),
        &s.sink.random,
    );
    if let (Some(n), Some(nn)) = (&s.nosink, names.1) {
        row(&mut md, format!("off, `{nn}` first (no sink)"), &n.off);
        row(
            &mut md,
            format!("random, `{nn}` first (no sink)"),
            &n.random,
        );
    }
    md.push('\n');
    let aucs: Vec<String> = s
        .comparisons
        .iter()
        .map(|c| {
            let parts: Vec<String> = c
                .separations
                .iter()
                .map(|x| {
                    format!(
                        "{} {:.2} [{:.2}, {:.2}]",
                        x.statistic, x.auc.value, x.auc.lo, x.auc.hi
                    )
                })
                .collect();
            format!(
                "{}: {}",
                c.name,
                if parts.is_empty() {
                    "— (a group is empty)".to_string()
                } else {
                    parts.join(", ")
                }
            )
        })
        .collect();
    let _ = writeln!(
        md,
        "ROC AUC ({:.0} % bootstrap interval over pairs, {RESAMPLES} resamples; pairs of one head are not independent, so the intervals are optimistic): {}.\n",
        100.0 * LEVEL,
        aucs.join("; ")
    );
    let _ = writeln!(md, "*A3 verdict:* {}\n", verdict(s));
    if let (Some(n), Some(nn)) = (&s.nosink, names.1) {
        let _ = writeln!(md, "*A3 no-sink control:* {}\n", nosink_sentence(n, nn));
    }
    md
}

/// The verdict sentence: docs/theory.md §4 predicts off pairs put their mass on ≈ 0-value keys, i.e. a
/// high m⁰ and a small a; the sentence says whether the sink run's off pairs do so more than
/// random pairs (AUC interval of `zero_value` above ½) and what the dominant share is.
pub fn verdict(s: &HardSwitch) -> String {
    let off = &s.sink.off;
    if off.n == 0 {
        return "no (head, query) pair is off at this threshold: untestable on this input".into();
    }
    let get = |c: &str, st: &str| {
        s.comparisons
            .iter()
            .find(|x| x.name == c)
            .and_then(|x| x.separations.iter().find(|y| y.statistic == st))
    };
    let zv = get("off_vs_random", "zero_value").map_or("untested", |x| x.label);
    let dom = [
        "the sink",
        "the learned sink",
        "low-value keys",
        "ordinary (spread) keys",
    ];
    // The first of equal counts.
    let k = (0..4).fold(0, |b, k| {
        if off.dominant[k] > off.dominant[b] {
            k
        } else {
            b
        }
    });
    format!(
        "{} off pairs; their mass on ≈ 0-value keys m⁰ = {:.3} against {:.3} on random pairs ({}); the largest share is on {} for {}/{} of them. docs/theory.md §4 predicts m⁰ → 1 as the output → 0 under its cone condition on the values: {}.",
        off.n,
        off.zero_value,
        s.sink.random.zero_value,
        match zv {
            "separates" => "separates",
            "reversed" => "reversed: lower than random",
            "uninformative" => "does not separate",
            other => other,
        },
        dom[k],
        off.dominant[k],
        off.n,
        if off.zero_value >= 0.5 && zv == "separates" {
            "consistent with it (most of the off mass, m⁰ ≥ ½, is on ≈ 0-value keys, more than on random pairs; at this threshold the theorem's bound z/(γη) is loose, so this checks the direction, not the constant)"
        } else if zv == "separates" {
            "in the predicted direction but most of the off mass is on keys with an ordinary value (zero by cancellation: the cone condition does not hold on these heads)"
        } else {
            "not reproduced on these heads (the zeros are not reached by routing to ≈ 0 values)"
        }
    )
}

/// Where the off pairs of the no-sink run put their mass: their sink share, their mass on
/// ≈ 0-value keys and the key they attend most (with a first token on which no sink forms at
/// position 0, a hard switch can still route to a ≈ 0-value key elsewhere).
pub fn nosink_sentence(n: &Run, first: &str) -> String {
    let o = &n.off;
    if o.n == 0 {
        return format!("with `{first}` at position 0 no pair is off at this threshold");
    }
    format!(
        "with `{first}` at position 0, {} off pairs put {:.3} of their mass on position 0 and {:.3} on ≈ 0-value keys j ≥ 1; the most attended key is position {} for {}/{} of them{}",
        o.n,
        o.sink,
        o.low_value,
        o.top_key_mode.0,
        o.top_key_mode.1,
        o.n,
        if o.low_value >= 0.5 && o.top_key_mode.0 != 0 {
            ": the hard switch routes to a ≈ 0-value key that is not position 0 (the mass moves with the ≈ 0 value, as docs/theory.md §4 predicts; the condition has no sink at position 0, not no ≈ 0-value key)"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of the row visible, no learned sink.
    fn all_keys(keys: usize) -> Seen {
        Seen {
            keys,
            learned_sink: false,
        }
    }

    /// A head that attends (almost) only to a zero-value key at position 0: its output is ≈ 0
    /// and the split says "sink"; with the zero-value key at j = 2 it says "low-value".
    #[test]
    fn routing_to_a_zero_value_is_sink_or_low_value() {
        // Values: v_0 = 0, v_1 = v_3 = (1, 0), v_2 = 0; attention 0.97 on key 0.
        let v: [[f64; 2]; 4] = [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0]];
        let vn: Vec<f64> = v
            .iter()
            .map(|x| (x[0] * x[0] + x[1] * x[1]).sqrt())
            .collect();
        let vmean = vn.iter().sum::<f64>() / 4.0;
        let v_rel: Vec<f64> = vn.iter().map(|x| x / vmean).collect();
        let row = [0.97, 0.01, 0.01, 0.01];
        let o: f64 = row.iter().zip(&v).map(|(a, x)| a * x[0]).sum();
        let p = split_row((0, 0, 3), &row, &v_rel, o / vmean, all_keys(4)).unwrap();
        assert!(p.size <= SMALL, "{}", p.size);
        assert!((p.sink - 0.97).abs() < 1e-12 && (p.low_value - 0.01).abs() < 1e-12);
        assert!((p.sink + p.low_value + p.spread - 1.0).abs() < 1e-12);
        // Key 0 has a zero value: m⁰ counts it; a = 0.02 · ‖v‖ / V.
        assert!((p.zero_value - 0.98).abs() < 1e-12);
        assert!((p.attended_value - 0.02 * 1.0 / vmean).abs() < 1e-12);
        assert!(p.attended_value >= p.size - 1e-12);
        // The same mass on the zero value at j = 2: low-value, not sink.
        let row2 = [0.01, 0.01, 0.97, 0.01];
        let o2: f64 = row2.iter().zip(&v).map(|(a, x)| a * x[0]).sum();
        let q = split_row((0, 0, 3), &row2, &v_rel, o2 / vmean, all_keys(4)).unwrap();
        assert!(q.size <= SMALL, "{}", q.size);
        assert!((q.low_value - 0.97).abs() < 1e-12 && (q.sink - 0.01).abs() < 1e-12);
        assert!((q.zero_value - 0.98).abs() < 1e-12);
        assert!(q.entropy_norm < 0.2, "{}", q.entropy_norm);
        assert_eq!((p.top_key, q.top_key), (0, 2));
    }

    /// docs/theory.md §4's counterexample (no cone): v_1 = −v_2, uniform attention on them gives
    /// o = 0 with every unit of mass on keys of ordinary value: "spread", a = ‖v‖ / V, and the
    /// entropy is maximal over those keys.
    #[test]
    fn cancellation_is_spread() {
        let v_rel = [1.0, 1.0, 1.0];
        let p = split_row((1, 2, 2), &[0.0, 0.5, 0.5], &v_rel, 0.0, all_keys(3)).unwrap();
        assert_eq!((p.sink, p.low_value, p.zero_value), (0.0, 0.0, 0.0));
        assert!((p.spread - 1.0).abs() < 1e-15);
        assert!((p.attended_value - 1.0).abs() < 1e-15);
        assert!((p.entropy - 2f64.ln()).abs() < 1e-15);
        // Uniform on all three keys: normalised entropy 1.
        let u = split_row((1, 2, 2), &[1.0, 1.0, 1.0], &v_rel, 0.0, all_keys(3)).unwrap();
        assert!((u.entropy_norm - 1.0).abs() < 1e-12 && (u.sink - 1.0 / 3.0).abs() < 1e-15);
        // Refusals.
        assert!(split_row((0, 0, 0), &[], &[], 0.0, all_keys(0)).is_err());
        assert!(split_row((0, 0, 0), &[1.0], &[1.0, 2.0], 0.0, all_keys(1)).is_err());
        assert!(split_row((0, 0, 0), &[0.0, 0.0], &[1.0, 1.0], 0.0, all_keys(2)).is_err());
        assert!(split_row((0, 0, 0), &[f64::NAN, 1.0], &[1.0, 1.0], 0.0, all_keys(2)).is_err());
    }

    /// A head with a learned sink that sends 0.9 of a row to it: the split names the learned
    /// sink (not renormalised onto the keys), m⁰ counts it, and the entropy counts it as one
    /// more destination. Read as a head without one (the assumption dropped), the same row is
    /// renormalised and credits position 0 with half the mass, the BOS sink it is not.
    #[test]
    fn a_learned_sink_is_its_own_destination() {
        let v_rel = [1.0, 1.0, 1.0];
        let row = [0.05, 0.02, 0.03];
        let learned = Seen {
            keys: 3,
            learned_sink: true,
        };
        let p = split_row((0, 0, 2), &row, &v_rel, 0.1, learned).unwrap();
        assert!((p.learned_sink - 0.9).abs() < 1e-12, "{}", p.learned_sink);
        assert!((p.sink - 0.05).abs() < 1e-12 && (p.spread - 0.05).abs() < 1e-12);
        assert!((p.sink + p.learned_sink + p.low_value + p.spread - 1.0).abs() < 1e-12);
        assert!((p.zero_value - 0.9).abs() < 1e-12);
        let h: f64 = [0.05, 0.02, 0.03, 0.9]
            .iter()
            .map(|a: &f64| -a * a.ln())
            .sum();
        assert!((p.entropy - h).abs() < 1e-12 && (p.entropy_norm - h / 4f64.ln()).abs() < 1e-12);
        let s = summarise(&[&p]);
        assert_eq!(s.dominant, [0, 1, 0, 0]);
        let q = split_row((0, 0, 2), &row, &v_rel, 0.1, all_keys(3)).unwrap();
        assert!((q.sink - 0.5).abs() < 1e-12 && q.learned_sink == 0.0);
        assert_eq!(summarise(&[&q]).dominant, [1, 0, 0, 0]);
        // All of a row on the learned sink is a valid row; more than 1 in all is not.
        let z = split_row((0, 0, 2), &[0.0; 3], &v_rel, 0.0, learned).unwrap();
        assert_eq!((z.learned_sink, z.entropy), (1.0, 0.0));
        assert!(split_row((0, 0, 2), &[0.5, 0.4, 0.2], &v_rel, 0.0, learned).is_err());
        // A window of 2 keys: the entropy is normalised by ln 2 (+ the learned sink: ln 3).
        let w = split_row(
            (0, 0, 2),
            &[0.0, 0.5, 0.5],
            &v_rel,
            1.0,
            Seen {
                keys: 2,
                learned_sink: false,
            },
        )
        .unwrap();
        assert!((w.entropy_norm - 1.0).abs() < 1e-12, "{}", w.entropy_norm);
    }

    fn pair(head: usize, query: usize, size: f64, sink: f64) -> PairMass {
        PairMass {
            layer: 0,
            head,
            query,
            size,
            sink,
            learned_sink: 0.0,
            low_value: 0.0,
            spread: 1.0 - sink,
            zero_value: sink,
            attended_value: 1.0 - sink,
            entropy: 0.0,
            entropy_norm: 0.0,
            top_key: usize::from(sink < 0.5),
        }
    }

    /// Off pairs routed to the sink against random pairs that spread: the AUC of the sink
    /// fraction separates and the verdict says reproduced; when the off pairs spread as much as
    /// the rest, it does not separate and the verdict says not reproduced.
    #[test]
    fn comparisons_and_verdict_follow_the_pairs() {
        let heads = vec![HeadValues {
            layer: 0,
            head: 0,
            v0_rel: 0.0,
            n_low_keys: 0,
        }];
        let mut ps: Vec<PairMass> = (1..41).map(|i| pair(0, i, 0.05, 0.95)).collect();
        ps.extend((41..2041).map(|i| pair(0, i, 0.9, 0.1)));
        let r = run_from(&[1, 2, 3], ps, heads.clone(), 7);
        assert_eq!((r.off.n, r.random.n, r.n_pairs), (40, RANDOM_PAIRS, 2040));
        assert_eq!(r.off_sink_value_low, 40);
        assert_eq!(r.off.dominant, [40, 0, 0, 0]);
        assert_eq!(r.off.top_key_mode, (0, 40));
        assert_eq!(r.random.top_key_mode.0, 1);
        let s = assemble(r, None, 3);
        let sep = &s.comparisons[0].separations;
        assert_eq!(sep.len(), STATISTICS.len());
        assert!(sep.iter().all(|x| x.label == "separates"), "{sep:?}");
        assert!(
            verdict(&s).contains(": consistent with it"),
            "{}",
            verdict(&s)
        );
        // Every pair alike: nothing separates.
        let flat: Vec<PairMass> = (1..200).map(|i| pair(0, i, 0.1, 0.2)).collect();
        let f = assemble(run_from(&[1, 2, 3], flat, heads, 7), None, 3);
        assert_eq!(f.comparisons[0].separations[0].label, "uninformative");
        assert!(verdict(&f).contains("not reproduced"), "{}", verdict(&f));
        // The no-sink input: BOS replaced, or the token prepended and the last dropped.
        assert_eq!(control_tokens(&[5, 6, 7], Some(5), 9), vec![9, 6, 7]);
        assert_eq!(control_tokens(&[5, 6, 7], Some(2), 9), vec![9, 5, 6]);
        assert_eq!(control_tokens(&[5, 6, 7], None, 9), vec![9, 5, 6]);
    }
}
