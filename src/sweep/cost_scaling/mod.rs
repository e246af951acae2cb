//! The cost-scaling experiment (THEORY.md §6, claim A5): exact minimal costs and
//! trained-model costs over context lengths $T$, run by the sweep engine
//! ([`crate::sweep`]), with exponent fits, figures, a verdict and a report section.
//!
//! - [`spec`]: the TOML spec and its points;
//! - [`point`]: one point, its records and how they are computed;
//! - [`fits`]: power-law fits per (source, embedding, norm, pattern) group;
//! - [`figures`]: `fit.json` and the figures;
//! - [`section`]: the verdict on A5 and the report section `cost_scaling`.

pub mod figures;
pub mod fits;
pub mod point;
pub mod section;
pub mod spec;

pub use figures::analyze;
pub use fits::{GroupFit, MAX_FIT_GAP, fit_all, usable};
pub use point::{Point, Record, TRAINED_NORMS, compute};
pub use section::{DEFAULT_SPEC, QUICK_SPEC, report_section, verdict_markdown};
pub use spec::{ExactSpec, SweepSpec, TrainedSpec};

use crate::cost;
use crate::sweep::{self, RunOptions, RunSummary, Shard, SweepError};
use std::path::{Path, PathBuf};

/// Reads the cost-scaling records of a `results.jsonl` ([`sweep::read_records`]).
pub fn read_results(path: &Path) -> Result<Vec<Record>, SweepError> {
    sweep::read_records(path)
}

/// Joins the results of shard directories into `out/results.jsonl` ([`sweep::merge`]).
pub fn merge(inputs: &[PathBuf], out: &Path) -> Result<usize, SweepError> {
    sweep::merge::<Record>(inputs, out)
}

/// Runs (or resumes) the points of `shard` in `dir`, appending to `results.jsonl`.
/// The trained points run on the spec's backend (one device, passed to every worker).
pub fn run(
    spec: &SweepSpec,
    dir: &Path,
    shard: Option<Shard>,
    show_progress: bool,
) -> Result<RunSummary, SweepError> {
    sweep::run(
        &spec.points(),
        dir,
        RunOptions {
            shard,
            show_progress,
        },
        |todo| {
            if !todo.iter().any(|p| matches!(p, Point::Trained(_))) {
                return Ok(None);
            }
            let sel = crate::backend::select(spec.backend, &crate::backend::GpuOptions::default())?;
            if show_progress {
                let _ = std::io::Write::write_fmt(
                    &mut std::io::stderr(),
                    format_args!("{}\n", sel.note()),
                );
            }
            Ok(sel.gpu())
        },
        |gpu, p| point::compute_on(p, gpu.as_deref()),
    )
}

/// Refuses a spec (its points in `shard`, all when `None`) whose largest point (times the
/// `threads` that run at once), whose worst case of a raised `max_iter`, whose total (the
/// points' time lower bounds summed, over the `threads` that share them), or whose bootstrap
/// is over `budget` ([`crate::budget`]); `flags`: the override is a command-line flag (else an
/// environment variable).
pub fn check_budget(
    spec: &SweepSpec,
    name: &str,
    budget: &crate::budget::Budget,
    threads: usize,
    flags: bool,
    shard: Option<Shard>,
) -> Result<(), SweepError> {
    use crate::budget;
    let points: Vec<Point> = spec
        .points()
        .into_iter()
        .enumerate()
        .filter(|(k, _)| shard.is_none_or(|s| s.contains(*k)))
        .map(|(_, p)| p)
        .collect();
    let parallel = threads.clamp(1, points.len().max(1)) as f64;
    let mut total_seconds = 0.0;
    let default_iter = cost::SolveOptions::default().max_iter;
    for p in &points {
        let id = p.id();
        let readable = id.split('#').next().unwrap_or(&id);
        let e = match p {
            Point::Exact(q, o) => {
                if o.max_iter > default_iter {
                    let nuclear = q.norm == cost::NormKind::Nuclear;
                    let one = budget::cost_program_iterations(q.t, q.d, nuclear, o.max_iter);
                    let worst = if q.scope == cost::Scope::Head {
                        one.then(one)
                    } else {
                        one
                    };
                    budget.check(
                        &format!(
                            "{name}: point {readable}: max_iter = {} (its worst case)",
                            o.max_iter
                        ),
                        worst,
                        flags,
                    )?;
                }
                let one = budget::cost_program(q.t, q.d, q.norm == cost::NormKind::Nuclear);
                let e = if q.scope == cost::Scope::Head {
                    one.then(one)
                } else {
                    one
                };
                if q.embedding == cost::EmbeddingKind::Trained {
                    budget::training(q.t, q.d, q.d, 1, 0, 8, 8, crate::train::embeddings::STEPS)
                        .then(e)
                } else {
                    e
                }
            }
            Point::Trained(c) => {
                let (n, r) = match (c.task, c.attn) {
                    (
                        crate::train::TaskSpec::BigramCopy { n, .. }
                        | crate::train::TaskSpec::CopyPaste { n, .. },
                        crate::train::AttnForm::Factored { r },
                    ) => (n, r),
                    (
                        crate::train::TaskSpec::BigramCopy { n, .. }
                        | crate::train::TaskSpec::CopyPaste { n, .. },
                        crate::train::AttnForm::Direct,
                    ) => (n, c.d),
                };
                budget::training(c.t, c.d, r, c.layers, c.mlp_hidden, n, c.batch, c.steps)
            }
        };
        let at_once = budget::Estimate {
            bytes: e.bytes * parallel,
            seconds: e.seconds,
        };
        budget.check(&format!("{name}: point {readable}"), at_once, flags)?;
        total_seconds += e.seconds;
    }
    budget.check(
        &format!(
            "{name}: all {} points together on {parallel} threads",
            points.len()
        ),
        budget::Estimate {
            bytes: 0.0,
            seconds: total_seconds / parallel,
        },
        flags,
    )?;
    budget.check(
        &format!("{name}: bootstrap = {}", spec.bootstrap),
        budget::bootstrap(spec.bootstrap, points.len(), 16),
        flags,
    )?;
    Ok(())
}
