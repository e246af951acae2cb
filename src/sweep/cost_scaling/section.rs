//! The verdict on A5 and the report section `cost_scaling`.

use super::fits::{GroupFit, MAX_FIT_GAP, usable};
use super::{SweepSpec, analyze, read_results, run};

/// Markdown table of fits with a plain verdict on A5 per cost definition.
pub fn verdict_markdown(fits: &[GroupFit]) -> String {
    let mut md = String::new();
    md.push_str("| source | embedding | cost | pattern | exponent (95% CI) | T range | points |\n|---|---|---|---|---|---|---|\n");
    for f in fits {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {:.3} [{:.3}, {:.3}] | {}–{} | {} |\n",
            f.source,
            f.embedding,
            f.norm,
            f.pattern,
            f.fit.exponent,
            f.fit.ci_low,
            f.fit.ci_high,
            f.t_min,
            f.t_max,
            f.fit.n
        ));
    }
    md.push_str("\nVerdict on A5 (sink cost ∝ T, diagonal ∝ T^{3/2}), per cost definition:\n\n");
    let mut keys: Vec<(String, String, String)> = fits
        .iter()
        .map(|f| (f.source.clone(), f.embedding.clone(), f.norm.clone()))
        .collect();
    keys.sort();
    keys.dedup();
    for (source, emb, norm) in keys {
        let get = |p: &str| {
            fits.iter().find(|f| {
                f.source == source && f.embedding == emb && f.norm == norm && f.pattern == p
            })
        };
        let (Some(s), Some(d)) = (get("sink"), get("diagonal")) else {
            continue;
        };
        let covers = |f: &GroupFit, x: f64| f.fit.ci_low <= x && x <= f.fit.ci_high;
        let reproduces = covers(s, 1.0) && covers(d, 1.5);
        let ratio = d.fit.exponent - s.fit.exponent;
        md.push_str(&format!(
            "- **{norm}, {source}, {emb}**: sink T^{:.3} [{:.3}, {:.3}], diagonal T^{:.3} [{:.3}, {:.3}]; diagonal/sink grows like T^{:.3}. {}\n",
            s.fit.exponent,
            s.fit.ci_low,
            s.fit.ci_high,
            d.fit.exponent,
            d.fit.ci_low,
            d.fit.ci_high,
            ratio,
            if reproduces {
                "Reproduces T vs T^{3/2}.".to_string()
            } else {
                format!(
                    "Does **not** reproduce T vs T^{{3/2}} (sink CI {} 1, diagonal CI {} 1.5); the diagonal is {} the sink here.",
                    if covers(s, 1.0) { "contains" } else { "excludes" },
                    if covers(d, 1.5) { "contains" } else { "excludes" },
                    if ratio > 0.05 { "increasingly costlier than" } else if ratio < -0.05 { "increasingly cheaper than" } else { "about as costly as" }
                )
            }
        ));
    }
    // Exact asymptotic exponents where closed forms exist (orthonormal, W_QK alone).
    let exact: Vec<(&str, &str, f64, &[usize])> = fits
        .iter()
        .filter(|f| f.source == "exact" && f.embedding == "orthonormal")
        .map(|f| {
            (
                f.pattern.as_str(),
                f.norm.as_str(),
                f.fit.exponent,
                f.ts.as_slice(),
            )
        })
        .collect();
    md.push_str(&format!("\n{}\n", crate::cost::exact::verdict_fits(&exact)));
    md
}

/// The default spec, `sims/cost_scaling.toml`, compiled in.
pub const DEFAULT_SPEC: &str = include_str!("../../../sims/cost_scaling.toml");

/// A small spec for `sinklab report --quick` and tests: exact T ≤ 32, trained T ≤ 16.
pub const QUICK_SPEC: &str = r#"
name = "cost_scaling_quick"
bootstrap = 500
[[exact]]
patterns = ["sink", "diagonal"]
norms = ["fro", "nuclear"]
embeddings = ["orthonormal", "gaussian"]
t = [8, 16, 32]
d_factor = 2
seeds = [0]
delta = 10.0
[[exact]]
scopes = ["head"]
patterns = ["sink", "diagonal"]
norms = ["fro"]
embeddings = ["orthonormal"]
t = [8, 16, 32]
seeds = [0]
delta = 10.0
[trained]
t = [8, 16]
seeds = [0]
variants = ["bos", "masked"]
d = 16
r = 16
steps = 100
batch = 8
lr = 0.01
weight_decay = 0.01
n = 8
k = 2
alpha = 0.3
"#;

/// Report section `cost_scaling`: runs (or resumes) the sweep under `out/sweeps/`,
/// writes the figures and a table of exponents with a verdict on A5.
pub fn report_section(
    ctx: &crate::section::ReportCtx,
) -> Result<crate::section::ReportSection, crate::section::SectionError> {
    let (text, name) = if ctx.quick {
        (QUICK_SPEC, "cost_scaling_quick")
    } else {
        (DEFAULT_SPEC, "cost_scaling")
    };
    let spec = SweepSpec::from_toml(text)?;
    let dir = ctx.out_dir.join("sweeps").join(name);
    let summary = run(&spec, &dir, None, true)?;
    let (fits, figures) = analyze(&dir, &ctx.fig_dir(), spec.bootstrap, ctx.seed)?;
    let records = read_results(&dir.join("results.jsonl"))?;
    let mut md = format!(
        "Minimal cost of a sink versus a diagonal pattern (docs/theory.md §6, claim A5), exact programs with a \
         certified duality gap and trained one-layer models (bigram-copy, AdamW with weight decay). \
         Spec `{name}` ({} points, {} computed now); results in `{}`.\n\n",
        summary.total,
        summary.computed,
        dir.strip_prefix(&ctx.out_dir).unwrap_or(&dir).display()
    );
    let worst_gap = records
        .iter()
        .filter(|r| usable(r))
        .filter_map(|r| r.rel_gap)
        .fold(0.0, f64::max);
    let infeasible = records.iter().filter(|r| r.feasible == Some(false)).count();
    let unresolved = records
        .iter()
        .filter(|r| r.rel_gap.is_some_and(|g| g > MAX_FIT_GAP))
        .count();
    let unconverged = records
        .iter()
        .filter(|r| r.converged == Some(false) && r.norm == "fro")
        .count();
    md.push_str(&format!(
        "Exact points: largest relative duality gap among fitted points {worst_gap:.2e}; \
         infeasible points (half-space conditions fail): {infeasible}; points left out because \
         the solver's certified bracket stayed wider than {:.0}% within its budget: {unresolved}. \
         Trained runs that missed their convergence criterion (left out): {unconverged}.\n\n",
        MAX_FIT_GAP * 100.0
    ));
    let learned: Vec<String> = records
        .iter()
        .filter(|r| r.source == "trained" && r.norm == "fro")
        .map(|r| format!("{}→{}", r.pattern, r.learned.as_deref().unwrap_or("?")))
        .collect();
    if !learned.is_empty() {
        let agree = learned.iter().filter(|s| {
            let (a, b) = s.split_once('→').unwrap_or(("", ""));
            a == b
        });
        md.push_str(&format!(
            "Trained runs whose off-queries learned the pattern their variant makes available \
             (bos → sink, masked → diagonal): {} of {}.\n\n",
            agree.count(),
            learned.len()
        ));
    }
    md.push_str(&verdict_markdown(&fits));
    Ok(crate::section::ReportSection {
        title: "Cost scaling: sink vs diagonal (A5)".into(),
        markdown: md,
        figures,
    })
}
