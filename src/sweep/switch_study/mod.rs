//! The switch study (docs/theory.md §11): which switch trained heads use to switch their
//! off-queries off when a cheaper switch than the BOS sink is on offer, and what the trained
//! parameters cost, run by the sweep engine ([`crate::sweep`]).
//!
//! The grid is task × variant × frozen × $T$ × seed: variants `bos` (the BOS key visible),
//! `masked` (the BOS key masked), `sink-logit`, `gate`, `sink-logit+gate` (the mechanism
//! beside a visible BOS key), each mechanism also *frozen* at its initial value (the control
//! that attributes a change to the mechanism's training). Every run stops at the same
//! on-query accuracy, as the cost sweep's trained part does.
//!
//! - [`spec`]: the TOML spec (`experiment = "switch_study"`) and its points;
//! - [`point`]: one run, its record and how it is computed;
//! - [`tally`]: counts of the switch used per (task, variant, frozen, T), and the verdicts;
//! - [`figures`]: the figure (feature `plot`);
//! - [`section`]: the report section `switch_study` (feature `plot`).

#[cfg(feature = "plot")]
pub mod figures;
pub mod point;
#[cfg(feature = "plot")]
pub mod section;
pub mod spec;
pub mod tally;

pub use point::{Outcome, Record, StudyPoint, Task, Variant, compute};
pub use spec::{EXPERIMENT, StudySpec, is_switch_study};

use crate::sweep::cost_scaling::PointContext;
use crate::sweep::{self, RunOptions, RunSummary, Shard, SweepError};
use std::path::Path;

/// Reads the study's records of a `results.jsonl` ([`sweep::read_records`]: sorted by id).
pub fn read_results(path: &Path) -> Result<Vec<Record>, SweepError> {
    sweep::read_records(path)
}

/// The identity of a spec: its name and the SHA-256 of its sorted point ids (which hold every
/// parameter that changes a record).
pub fn identity(spec: &StudySpec) -> String {
    let mut ids: Vec<String> = spec.points().iter().map(StudyPoint::id).collect();
    ids.sort();
    ids.dedup();
    format!(
        "{} {}",
        spec.name.escape_default(),
        sweep::hash_hex(&ids.join("\n"), 64)
    )
}

/// Runs (or resumes) the points of `shard` in `dir`, appending to `results.jsonl`, the points
/// in parallel on the current rayon pool, each on the spec's backend (on the CPU with
/// `threads` for its large products). Writes `dir/sweep.id` ([`identity`]).
pub fn run_on(
    spec: &StudySpec,
    dir: &Path,
    shard: Option<Shard>,
    show_progress: bool,
    threads: usize,
) -> Result<RunSummary, SweepError> {
    std::fs::create_dir_all(dir).map_err(sweep::io(dir))?;
    let id_path = dir.join(sweep::cost_scaling::IDENTITY_FILE);
    crate::atomic::write(&id_path, format!("{}\n", identity(spec))).map_err(sweep::io(&id_path))?;
    sweep::run(
        &spec.points(),
        dir,
        RunOptions {
            shard,
            show_progress,
        },
        |_| Ok(PointContext::on(spec.backend, threads, show_progress)?),
        |ctx, p| vec![compute(p, ctx)],
    )
}

/// Refuses a spec whose largest run, or all runs together over `threads`, is over `budget`
/// ([`crate::budget::training`] at the step budget: an upper bound, runs stop at the target
/// accuracy); `flags`: the override is a command-line flag (else an environment variable).
pub fn check_budget(
    spec: &StudySpec,
    name: &str,
    budget: &crate::budget::Budget,
    threads: usize,
    flags: bool,
) -> Result<(), SweepError> {
    let points = spec.points();
    let parallel = threads.clamp(1, points.len().max(1)) as f64;
    let mut total = 0.0;
    for p in &points {
        let c = &p.config;
        let e = crate::budget::training(c.t, c.d, spec.r, 1, 0, spec.n, c.batch, c.steps);
        budget.check(
            &format!("{name}: point {}", p.id().split('#').next().unwrap_or("")),
            crate::budget::Need {
                bytes: e.bytes * parallel,
                seconds: e.seconds,
            },
            flags,
        )?;
        total += e.seconds;
    }
    budget.check(
        &format!(
            "{name}: all {} points together on {parallel} threads",
            points.len()
        ),
        crate::budget::Need {
            bytes: 0.0,
            seconds: total / parallel,
        },
        flags,
    )?;
    Ok(())
}
