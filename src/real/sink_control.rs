//! The no-sink control of the real-model A1 verdict (issue 21): the pooled head-space analysis
//! ([`super::head_space`]) run twice on one model, once with a first token on which a sink forms
//! and once with one on which none does (the conditions are told apart by what the forward pass
//! computes, the mean attention to position 0). Per head statistic, its separation between the
//! conditions is the ROC AUC between the heads of the two runs,
//! $\text{AUC} = P(x_{\text{sink}} > x_{\text{no-sink}}) + \tfrac12 P(=)$, with a seeded bootstrap
//! interval ([`crate::stats::roc_auc_ci`]). A statistic is evidence of a sink only when its
//! interval lies above ½; one whose interval holds ½ is uninformative, one below ½ is reversed
//! (larger where no sink forms).

use super::head_space::{HeadA1, ModelA1, REALISED};
use crate::stats::{Estimate, roc_auc_ci};

/// Bootstrap resamples of the AUC interval.
pub const RESAMPLES: usize = 1000;
/// Level of the AUC interval.
pub const LEVEL: f64 = 0.95;

/// A head statistic of the A1 verdict, larger meaning "more sink-like" in paper A's reading.
pub struct Statistic {
    /// Short name (JSON key).
    pub name: &'static str,
    /// What it is, for the report.
    pub meaning: &'static str,
    /// Its value on one head.
    pub value: fn(&HeadA1) -> f64,
}

/// The statistics compared: realisation, the margin rank, the margins and the yes/no verdict.
pub const STATISTICS: [Statistic; 5] = [
    Statistic {
        name: "realised",
        meaning: "fraction of causal pairs on which the first token's logit is the larger",
        value: |h| h.realised,
    },
    Statistic {
        name: "margin_rank",
        meaning: "γ_b of the first token as a percentile of the ordinary keys' γ_b",
        value: |h| h.sep.gamma_b_percentile,
    },
    Statistic {
        name: "gamma_b",
        meaning: "normalised margin of (b), first token against the other keys",
        value: |h| h.sep.gamma_b,
    },
    Statistic {
        name: "gamma_a",
        meaning: "normalised margin of (a), the queries' half-space",
        value: |h| h.gamma_a,
    },
    Statistic {
        name: "representable",
        meaning: "(a) and (b) both hold (1) or not (0)",
        value: |h| f64::from(u8::from(h.representable())),
    },
];

/// One statistic's separation of sink from no-sink heads.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Separation {
    /// [`Statistic::name`].
    pub statistic: &'static str,
    /// AUC of the sink heads against the no-sink heads, with its interval.
    pub auc: Estimate,
    /// "separates" (interval above ½), "uninformative" (holds ½), "reversed" (below ½).
    pub label: &'static str,
    /// Median of the statistic on the sink heads and on the no-sink heads.
    pub median_sink: f64,
    /// Median on the no-sink heads.
    pub median_nosink: f64,
}

/// The label of an AUC interval.
pub fn label(e: &Estimate) -> &'static str {
    if e.lo > 0.5 {
        "separates"
    } else if e.hi < 0.5 {
        "reversed"
    } else {
        "uninformative"
    }
}

/// Both runs and the separations.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SinkControl {
    /// The first token of the sink run (as text).
    pub sink_first: String,
    /// The first token of the no-sink run.
    pub nosink_first: String,
    /// Mean over heads of the mean attention to position 0, per third of the layers (sink run).
    pub sink_attn_thirds: [f64; 3],
    /// The same for the no-sink run.
    pub nosink_attn_thirds: [f64; 3],
    /// Heads realising the first token (fraction ≥ [`REALISED`]) in the sink and no-sink runs.
    pub realised_counts: (usize, usize),
    /// Heads whose first-token margin ranks first, in the sink and no-sink runs.
    pub top_counts: (usize, usize),
    /// Heads per run.
    pub n_heads: usize,
    /// Per statistic of [`STATISTICS`].
    pub separations: Vec<Separation>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    crate::stats::quantile_sorted(&v, 0.5)
}

/// Mean over heads of [`HeadA1::attn_first`] in the early, middle and late third of the layers.
pub fn attn_thirds(r: &ModelA1) -> [f64; 3] {
    let nl = r.layers.len().max(1);
    let mut s = [(0.0, 0usize); 3];
    for h in &r.heads {
        let t = (3 * h.layer / nl).min(2);
        s[t].0 += h.attn_first;
        s[t].1 += 1;
    }
    s.map(|(a, n)| a / n.max(1) as f64)
}

/// Compares the heads of a sink run and a no-sink run of the same model (seeded intervals).
pub fn compare(
    sink: &ModelA1,
    nosink: &ModelA1,
    names: (&str, &str),
    seed: u64,
) -> Result<SinkControl, String> {
    for (r, n) in [(sink, names.0), (nosink, names.1)] {
        if let Some(e) = &r.heads_error {
            return Err(format!("first token {n}: head space untestable ({e})"));
        }
    }
    if sink.heads.len() != nosink.heads.len() || sink.heads.is_empty() {
        return Err("the two runs have different heads".into());
    }
    let mut separations = Vec::new();
    for (i, st) in STATISTICS.iter().enumerate() {
        let a: Vec<f64> = sink.heads.iter().map(st.value).collect();
        let b: Vec<f64> = nosink.heads.iter().map(st.value).collect();
        let auc = roc_auc_ci(&a, &b, RESAMPLES, LEVEL, seed ^ (i as u64 + 1) << 16)
            .map_err(|e| format!("{}: {e}", st.name))?;
        separations.push(Separation {
            statistic: st.name,
            label: label(&auc),
            auc,
            median_sink: median(a),
            median_nosink: median(b),
        });
    }
    let count = |r: &ModelA1, f: &dyn Fn(&HeadA1) -> bool| r.heads.iter().filter(|h| f(h)).count();
    let real = |h: &HeadA1| h.realised >= REALISED;
    let top = |h: &HeadA1| h.sep.gamma_b_percentile >= 1.0;
    Ok(SinkControl {
        sink_first: names.0.into(),
        nosink_first: names.1.into(),
        sink_attn_thirds: attn_thirds(sink),
        nosink_attn_thirds: attn_thirds(nosink),
        realised_counts: (count(sink, &real), count(nosink, &real)),
        top_counts: (count(sink, &top), count(nosink, &top)),
        n_heads: sink.heads.len(),
        separations,
    })
}

/// Heads with mean attention to position 0 above this are "high" in [`by_attention`] (Gu et
/// al.'s ε = 0.3, "When Attention Sink Emerges in Language Models", arXiv:2410.10781).
pub const ATTN_HIGH: f64 = 0.3;

/// Separations within one run: heads with [`HeadA1::attn_first`] > [`ATTN_HIGH`] against the
/// others (None when either group is empty).
pub fn by_attention(r: &ModelA1, seed: u64) -> Option<(usize, usize, Vec<Separation>)> {
    let (hi, lo): (Vec<&HeadA1>, Vec<&HeadA1>) =
        r.heads.iter().partition(|h| h.attn_first > ATTN_HIGH);
    if hi.is_empty() || lo.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for (i, st) in STATISTICS.iter().enumerate() {
        let a: Vec<f64> = hi.iter().map(|h| (st.value)(h)).collect();
        let b: Vec<f64> = lo.iter().map(|h| (st.value)(h)).collect();
        let auc = roc_auc_ci(&a, &b, RESAMPLES, LEVEL, seed ^ (i as u64 + 1) << 24).ok()?;
        out.push(Separation {
            statistic: st.name,
            label: label(&auc),
            auc,
            median_sink: median(a),
            median_nosink: median(b),
        });
    }
    Some((hi.len(), lo.len(), out))
}

/// Markdown table of separations (columns: sink-like group / the other).
pub fn table(seps: &[Separation], groups: &str) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| statistic | meaning | median, {groups} | AUC [interval] | as evidence |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|");
    for (s, st) in seps.iter().zip(&STATISTICS) {
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} / {:.3} | {:.2} [{:.2}, {:.2}] | {} |",
            s.statistic,
            st.meaning,
            s.median_sink,
            s.median_nosink,
            s.auc.value,
            s.auc.lo,
            s.auc.hi,
            s.label
        );
    }
    md
}

/// Markdown: the two conditions, the table of separations and the sentence naming what
/// separates.
pub fn markdown(c: &SinkControl) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let th = |t: [f64; 3]| format!("{:.3} / {:.3} / {:.3}", t[0], t[1], t[2]);
    let _ = writeln!(
        md,
        "**No-sink control.** The same pooled analysis with `{}` at position 0 (mean attention to position 0, early / middle / late third of the layers: {}) and with `{}` (no sink: {}). Realised on {}/{n} heads against {}/{n}; the margin ranks the first token top on {}/{n} against {}/{n}. Separation of sink from no-sink heads per statistic (ROC AUC, {:.0} % bootstrap interval, {} resamples):\n",
        c.sink_first,
        th(c.sink_attn_thirds),
        c.nosink_first,
        th(c.nosink_attn_thirds),
        c.realised_counts.0,
        c.realised_counts.1,
        c.top_counts.0,
        c.top_counts.1,
        100.0 * LEVEL,
        RESAMPLES,
        n = c.n_heads,
    );
    md.push_str(&table(&c.separations, "sink / no-sink"));
    let _ = writeln!(md);
    let _ = writeln!(md, "{}\n", sentence(&c.separations));
    md
}

/// The verdict sentence: which statistics separate (quoted as evidence, with their AUC) and
/// which do not (uninformative or reversed, with theirs).
pub fn sentence(seps: &[Separation]) -> String {
    let list = |want: &dyn Fn(&str) -> bool| {
        seps.iter()
            .filter(|s| want(s.label))
            .map(|s| format!("{} (AUC {:.2})", s.statistic, s.auc.value))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sep = list(&|l| l == "separates");
    let not = list(&|l| l != "separates");
    format!(
        "*No-sink control:* evidence of a sink is {}; not evidence (its interval holds ½ or lies below it): {}.",
        if sep.is_empty() {
            "given by no statistic".to_string()
        } else {
            format!("given by {sep}")
        },
        if not.is_empty() {
            "none".to_string()
        } else {
            not
        }
    )
}

/// A4/A6 under the no-sink control: the output size $z$ of [`super::switch_real`] per head
/// (a sink with a NOP value makes $z$ small, so the sink-like direction is $-z$) in a run with
/// a sink and one without.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SwitchControl {
    /// Heads classed ≈ 0 with and without a sink.
    pub zero_counts: (usize, usize),
    /// Heads per run.
    pub n_heads: usize,
    /// AUC of $-z$, sink heads against no-sink heads.
    pub sep: Separation,
}

/// Compares the switch decompositions of a sink run and a no-sink run (seeded interval).
pub fn switch_compare(
    sink: &[super::switch_real::HeadSwitch],
    nosink: &[super::switch_real::HeadSwitch],
    seed: u64,
) -> Result<SwitchControl, String> {
    use super::switch_real::SwitchClass;
    if sink.len() != nosink.len() || sink.is_empty() {
        return Err("the two runs have different heads".into());
    }
    let a: Vec<f64> = sink.iter().map(|h| -h.size).collect();
    let b: Vec<f64> = nosink.iter().map(|h| -h.size).collect();
    let auc = roc_auc_ci(&a, &b, RESAMPLES, LEVEL, seed ^ 0x5717c4).map_err(|e| e.to_string())?;
    let zero = |v: &[super::switch_real::HeadSwitch]| {
        v.iter().filter(|h| h.class() == SwitchClass::Zero).count()
    };
    Ok(SwitchControl {
        zero_counts: (zero(sink), zero(nosink)),
        n_heads: sink.len(),
        sep: Separation {
            statistic: "neg_output_size",
            label: label(&auc),
            auc,
            median_sink: -median(a),
            median_nosink: -median(b),
        },
    })
}

/// One sentence for [`SwitchControl`].
pub fn switch_sentence(c: &SwitchControl, nosink_first: &str) -> String {
    let s = &c.sep;
    format!(
        "*A4/A6 no-sink control* (`{nosink_first}` at position 0, same text): heads with output ≈ 0 {}/{n} with a sink against {}/{n} without; median output size z {:.3} against {:.3}; AUC of −z {:.2} [{:.2}, {:.2}]: {}.",
        c.zero_counts.0,
        c.zero_counts.1,
        s.median_sink,
        s.median_nosink,
        s.auc.value,
        s.auc.lo,
        s.auc.hi,
        match s.label {
            "separates" => "the ≈ 0 reading separates sink from no-sink heads",
            "reversed" => "reversed (outputs are smaller without a sink): not evidence",
            _ => "uninformative",
        },
        n = c.n_heads
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::real::head_space::SeparationTest;

    fn head(layer: usize, realised: f64, pct: f64) -> HeadA1 {
        HeadA1 {
            layer,
            head: 0,
            n_points: 10,
            d_head: 4,
            queries_in_half_space: true,
            gamma_a: 0.1,
            sep: SeparationTest {
                sink_separable: true,
                gamma_b: 0.2,
                verified: true,
                null_n: 12,
                null_pass: 1.0,
                gamma_b_percentile: pct,
                null_gamma_b_median: 0.2,
            },
            verified: true,
            realised,
            null_realised: 0.5,
            attn_first: realised,
        }
    }

    fn model(heads: Vec<HeadA1>) -> ModelA1 {
        ModelA1 {
            n_texts: 1,
            n_tokens: 11,
            layers: Vec::new(),
            heads,
            heads_error: None,
            d_head: 4,
            seconds: 0.0,
        }
    }

    /// Realisation higher on every sink head separates (AUC 1); a margin rank higher on the
    /// no-sink heads is reversed (AUC 0); a constant statistic is uninformative (AUC ½).
    #[test]
    fn labels_follow_the_auc_interval() {
        let sink = model((0..20).map(|i| head(i, 0.99, 0.1)).collect());
        let nosink = model((0..20).map(|i| head(i, 0.4, 1.0)).collect());
        let c = compare(&sink, &nosink, ("s", "n"), 1).unwrap();
        let get = |n: &str| c.separations.iter().find(|s| s.statistic == n).unwrap();
        assert_eq!(
            (get("realised").auc.value, get("realised").label),
            (1.0, "separates")
        );
        assert_eq!(
            (get("margin_rank").auc.value, get("margin_rank").label),
            (0.0, "reversed")
        );
        let r = get("representable");
        assert_eq!((r.auc.value, r.label), (0.5, "uninformative"));
        assert_eq!(c.realised_counts, (20, 0));
        let s = sentence(&c.separations);
        assert!(s.contains("given by realised (AUC 1.00)"), "{s}");
        assert!(s.contains("margin_rank (AUC 0.00)"), "{s}");
        // Outputs ≈ 0 on the sink run only: −z separates; equal sizes: uninformative.
        let sw = |layer: usize, size: f64| crate::real::switch_real::HeadSwitch {
            layer,
            head: 0,
            size,
            diag_residual: 1.0,
            null_residual: 1.0,
        };
        let a: Vec<_> = (0..10).map(|l| sw(l, 0.05)).collect();
        let b: Vec<_> = (0..10).map(|l| sw(l, 0.8)).collect();
        let sc = switch_compare(&a, &b, 2).unwrap();
        assert_eq!((sc.zero_counts, sc.sep.label), ((10, 0), "separates"));
        assert_eq!(
            switch_compare(&b, &b, 2).unwrap().sep.label,
            "uninformative"
        );
        // A run whose heads were untestable is refused, not compared.
        let mut bad = model(Vec::new());
        bad.heads_error = Some("x".into());
        assert!(compare(&sink, &bad, ("s", "n"), 1).is_err());
    }
}
