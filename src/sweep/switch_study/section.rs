//! The report section `switch_study`: the study's counts, figures, costs beside the theory's
//! minima and verdicts.
//!
//! The full grid is `sims/switch_study.toml`; its results are committed as
//! `sims/switch_study.results.jsonl` and compiled in. The section uses them when they hold a
//! finished record of every point of the spec (point ids hash the whole configuration and the
//! crate version, so an edited spec or a new version no longer matches), and otherwise runs
//! the small grid [`SMALL_SPEC`] (also under `--quick`), which fits the report's time budget.

use super::point::{Record, Task, Variant};
use super::tally::{cells, median, verdicts};
use super::{StudySpec, read_results, run_on};
use crate::section::{ReportCtx, ReportSection, SectionError};
use std::collections::HashSet;

/// The full study's spec, `sims/switch_study.toml`.
pub const DEFAULT_SPEC: &str = include_str!("../../../sims/switch_study.toml");

/// The full study's committed results (`sinklab sweep sims/switch_study.toml`).
pub const COMMITTED_RESULTS: &str = include_str!("../../../sims/switch_study.results.jsonl");

/// The grid the report runs when the committed results do not cover the spec: both tasks,
/// every variant and control, T ∈ {8, 16}, one seed, a short step budget.
pub const SMALL_SPEC: &str = r#"
experiment = "switch_study"
name = "switch_study_small"
tasks = ["bigram-copy", "copy-paste"]
variants = ["bos", "masked", "sink-logit", "gate", "sink-logit+gate"]
frozen = [false, true]
t = [8, 16]
seeds = [0]
d = 16
r = 16
steps = 600
batch = 16
lr = 0.01
weight_decay = 0.01
n = 8
k = 2
target_acc_on = 0.9
"#;

/// The committed records that belong to `spec`'s points, when they cover every point with a
/// finished record (else `None`).
pub fn committed_for(spec: &StudySpec, text: &str) -> Option<Vec<Record>> {
    let ids: HashSet<String> = spec.points().iter().map(|p| p.id()).collect();
    let recs: Vec<Record> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter(|r| ids.contains(&r.id) && r.error.is_none())
        .collect();
    let have: HashSet<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    (have.len() == ids.len()).then_some(recs)
}

/// Report section `switch_study`.
pub fn report_section(ctx: &ReportCtx) -> Result<ReportSection, SectionError> {
    let full = StudySpec::from_toml_named(DEFAULT_SPEC, "sims/switch_study.toml")?;
    let small = StudySpec::from_toml_named(SMALL_SPEC, "switch_study_small")?;
    let committed = if ctx.quick {
        None
    } else {
        committed_for(&full, COMMITTED_RESULTS)
    };
    let used = if committed.is_some() { &full } else { &small };
    let on_rate = used.k as f64 / used.n as f64;
    let (records, provenance) = match committed {
        Some(r) => {
            let n = r.len();
            (
                r,
                format!(
                    "the full grid `sims/switch_study.toml` ({n} runs), read from the committed \
                     `sims/switch_study.results.jsonl` (reproduce: `sinklab sweep \
                     sims/switch_study.toml`)"
                ),
            )
        }
        None => {
            let spec = &small;
            let dir = ctx.out_dir.join("sweeps").join(&spec.name);
            let s = run_on(spec, &dir, None, true, 1)?;
            (
                read_results(&dir.join("results.jsonl"))?,
                format!(
                    "the small grid of the report ({} runs, {} computed now, in `{}`; T ∈ {{8, \
                     16}}, one seed, 600 steps): the committed results of the full grid do not \
                     cover `sims/switch_study.toml`{}",
                    s.total,
                    s.computed,
                    dir.strip_prefix(&ctx.out_dir).unwrap_or(&dir).display(),
                    if ctx.quick {
                        " or `--quick` was given"
                    } else {
                        ""
                    }
                ),
            )
        }
    };
    let figures = super::figures::write(&records, &ctx.fig_dir())?;
    let mut md = format!(
        "Which switch trained one-layer heads use for their off-queries when a learned sink \
         logit or an output gate is on offer beside the BOS sink (docs/theory.md §11). Every run \
         is a factored one-layer model trained with AdamW and weight decay until its on-query \
         accuracy reaches the spec's target (the equal-accuracy stop of the cost sweep); a run's \
         switch is the class most of its off-queries meet at ε = {} (gate g ≤ ε, sink-logit mass \
         ≥ 1 − ε, BOS sink A_i0 ≥ 1 − ε, diagonal A_ii ≥ 1 − ε, in that order; `mixed` when no \
         class has half of them). Frozen: the mechanism present but kept at its initial value (s = \
         0; W_g as drawn, b_g = 0). Results: {provenance}.\n\n",
        crate::train::SWITCH_EPS
    );
    md.push_str(&counts_table(&records));
    md.push_str("\nVerdicts (computed from the counts above):\n\n");
    let mut tasks: Vec<Task> = records.iter().map(|r| r.task).collect();
    tasks.sort();
    tasks.dedup();
    for &task in &tasks {
        for v in verdicts(&records, task) {
            md.push_str(&format!("- {v}\n"));
        }
    }
    md.push('\n');
    for &task in &tasks {
        md.push_str(&costs_table(&records, task, on_rate));
    }
    Ok(ReportSection {
        title: "Switch study: sink logit and gate beside the BOS sink (§11)".into(),
        markdown: md,
        figures,
    })
}

/// The switch used, per (task, variant, frozen), summed over T: converged runs per class and
/// the runs left out.
pub fn counts_table(records: &[Record]) -> String {
    let mut md = String::from(
        "| task | variant | runs | BOS sink | sink logit | gate | diagonal | mixed | not converged |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    let mut groups: Vec<(Task, Variant, bool)> = records
        .iter()
        .map(|r| (r.task, r.variant, r.frozen))
        .collect();
    groups.sort();
    groups.dedup();
    let cells = cells(records);
    for g in groups {
        let (mut n, mut counts, mut left) = (0, [0usize; 5], 0);
        for ((gg, _), c) in &cells {
            if *gg == g {
                n += c.n;
                left += c.left_out;
                for (sum, k) in counts.iter_mut().zip(c.counts) {
                    *sum += k;
                }
            }
        }
        md.push_str(&format!(
            "| {} | {}{} | {n} | {} | {} | {} | {} | {} | {left} |\n",
            g.0,
            g.1,
            if g.2 { " (frozen)" } else { "" },
            counts[0],
            counts[1],
            counts[2],
            counts[3],
            counts[4]
        ));
    }
    md
}

/// Median trained costs per T beside the theory's minima on orthonormal embeddings (§6,
/// §11): the BOS sink's $\min\lVert W_{QK}\rVert_\ast = \Delta(T-1)/\sqrt T$ and the diagonal's
/// $\Delta\sum_i\sqrt{i/(i+1)}$ with $\Delta = \ln((T-1)(1-\varepsilon)/\varepsilon)$, the sink
/// logit's $s = \ln(T(1-\varepsilon)/\varepsilon)$ at $W_{QK} = 0$, and a selective gate's
/// $\min\lVert w\rVert = 2L\sqrt{n_{\rm on}n_{\rm off}/N}$ on the $T - 1$ queries at the task's
/// on-rate `on_rate` (about $k/n$: a query is on when it follows one of the $k$ triggers).
pub fn costs_table(records: &[Record], task: Task, on_rate: f64) -> String {
    use crate::cost::{Pattern, exact::nuclear_orthonormal};
    use crate::explicit_switch::{gate_cost_orthonormal, sink_logit_for_context, switch_logit};
    let eps = crate::train::SWITCH_EPS;
    let mut ts: Vec<usize> = records
        .iter()
        .filter(|r| r.task == task)
        .map(|r| r.t)
        .collect();
    ts.sort_unstable();
    ts.dedup();
    let med = |v: Variant, f: &dyn Fn(&super::Outcome) -> Option<f64>, t: usize| {
        median(
            records
                .iter()
                .filter(|r| r.t == t)
                .filter_map(|r| {
                    let o = r.outcome.as_ref()?;
                    (r.task == task && r.variant == v && !r.frozen && o.converged).then_some(o)
                })
                .filter_map(f)
                .collect(),
        )
    };
    let fmt = |x: Option<f64>| x.map_or("—".to_string(), |x| format!("{x:.2}"));
    let nuc = |o: &super::Outcome| Some(o.qk_nuclear);
    let mut md = format!(
        "\nCosts on {task} (medians over converged trained runs; the minima are the theory's on \
         orthonormal embeddings at ε = {eps}, which trained width-16 embeddings are not, so they \
         compare orders, not values):\n\n\
         | T | bos ‖W_QK‖_* | BOS sink min | masked ‖W_QK‖_* | diagonal min | sink-logit \\|s\\| | \
         min s | sink-logit ‖W_QK‖_* | gate ‖W_g‖_F | selective gate min | gate ‖W_QK‖_* |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for &t in &ts {
        let delta = crate::cost::delta_eps(t - 1, eps).unwrap_or(f64::NAN);
        let queries = t - 1;
        let n_on = ((queries as f64 * on_rate).round() as usize).clamp(1, queries - 1);
        md.push_str(&format!(
            "| {t} | {} | {:.2} | {} | {:.2} | {} | {:.2} | {} | {} | {:.2} | {} |\n",
            fmt(med(Variant::Bos, &nuc, t)),
            nuclear_orthonormal(Pattern::Sink, t, delta),
            fmt(med(Variant::Masked, &nuc, t)),
            nuclear_orthonormal(Pattern::Diagonal, t, delta),
            fmt(med(Variant::SinkLogit, &|o| o.sink_logit.map(f64::abs), t)),
            sink_logit_for_context(t, eps),
            fmt(med(Variant::SinkLogit, &nuc, t)),
            fmt(med(Variant::Gate, &|o| o.gate_w_fro, t)),
            gate_cost_orthonormal(n_on, queries - n_on, switch_logit(eps)),
            fmt(med(Variant::Gate, &nuc, t)),
        ));
    }
    md
}
