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
/// The trained points' products run on the spec's backend (one device shared by the workers).
pub fn run(
    spec: &SweepSpec,
    dir: &Path,
    shard: Option<Shard>,
    show_progress: bool,
) -> Result<RunSummary, SweepError> {
    let opts = spec.solve_options();
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
                eprintln!("{}", sel.note());
            }
            Ok(sel.gpu())
        },
        |gpu, p| {
            let _route = gpu.clone().map(crate::backend::route::install);
            compute(p, opts)
        },
    )
}
