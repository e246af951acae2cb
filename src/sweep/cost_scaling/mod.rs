//! The cost-scaling experiment (docs/theory.md §6, claim A5): exact minimal costs and
//! trained-model costs over context lengths $T$, run by the sweep engine
//! ([`crate::sweep`]), with exponent fits, figures, a verdict and a report section.
//!
//! - [`spec`]: the TOML spec and its points;
//! - [`point`]: one point, its records and how they are computed;
//! - [`fits`]: power-law fits per (source, embedding, norm, pattern) group;
//! - [`figures`]: `fit.json` and the figures (feature `plot`);
//! - [`section`]: the verdict on A5 and the report section `cost_scaling` (feature `plot`).

#[cfg(feature = "plot")]
pub mod figures;
pub mod fits;
pub mod point;
#[cfg(feature = "plot")]
pub mod section;
pub mod spec;

#[cfg(feature = "plot")]
pub use figures::analyze;
pub use fits::{GroupFit, MAX_FIT_GAP, fit_all, usable};
pub use point::{Point, PointContext, Record, TRAINED_NORMS, compute};
#[cfg(feature = "plot")]
pub use section::{DEFAULT_SPEC, QUICK_SPEC, report_section, verdict_markdown};
pub use spec::{ExactSpec, SweepSpec, TrainedSpec};

use crate::cost;
use crate::sweep::{self, RunOptions, RunSummary, Shard, SweepError};
use std::path::{Path, PathBuf};

/// Reads the cost-scaling records of a `results.jsonl` ([`sweep::read_records`]).
pub fn read_results(path: &Path) -> Result<Vec<Record>, SweepError> {
    sweep::read_records(path)
}

/// File in a sweep's output directory naming the spec its records come from (one line,
/// [`identity`]); every shard of one spec writes the same line.
pub const IDENTITY_FILE: &str = "sweep.id";

/// The identity of a spec: its name and the SHA-256 of its sorted point ids (which hold every
/// parameter that changes a result), so shards of one spec agree and two specs do not.
pub fn identity(spec: &SweepSpec) -> String {
    use sha2::{Digest, Sha256};
    let mut ids: Vec<String> = spec.points().iter().map(Point::id).collect();
    ids.sort();
    ids.dedup();
    let h = Sha256::digest(ids.join("\n").as_bytes());
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!("{} {hex}", spec.name.escape_default())
}

/// Writes `dir/sweep.id` through [`crate::atomic::write`] (a crash leaves the old file or
/// the new one, never a cut line).
fn write_identity(dir: &Path, id: &str) -> Result<(), SweepError> {
    let dst = dir.join(IDENTITY_FILE);
    crate::atomic::write(&dst, format!("{id}\n"))
        .map_err(|source| SweepError::Io { path: dst, source })
}

fn read_identity(dir: &Path) -> Result<Option<String>, SweepError> {
    let p = dir.join(IDENTITY_FILE);
    match std::fs::read_to_string(&p) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SweepError::Io { path: p, source }),
    }
}

/// Joins the results of shard directories into `out/results.jsonl` ([`sweep::merge`]),
/// refusing inputs of different specs: every input directory, and `out` when it already holds
/// results, carries its spec's [`IDENTITY_FILE`], and two different ones are refused naming
/// both (a plain results file, or a directory from before the file existed, carries none and
/// is not checked). The merged directory gets the common identity.
pub fn merge(inputs: &[PathBuf], out: &Path) -> Result<usize, SweepError> {
    let mut seen: Option<(String, PathBuf)> = None;
    let mut dirs: Vec<PathBuf> = inputs.iter().filter(|d| d.is_dir()).cloned().collect();
    if out.join("results.jsonl").exists() {
        dirs.insert(0, out.to_path_buf());
    }
    for d in &dirs {
        let Some(id) = read_identity(d)? else {
            continue;
        };
        match &seen {
            Some((first, from)) if *first != id => {
                return Err(SweepError::Results {
                    path: d.join(IDENTITY_FILE),
                    msg: format!(
                        "records of spec `{id}` cannot be merged with those of spec `{first}` \
                         ({}): different specs would be pooled into one fit",
                        from.join(IDENTITY_FILE).display()
                    ),
                });
            }
            Some(_) => {}
            None => seen = Some((id, d.clone())),
        }
    }
    let n = sweep::merge::<Record>(inputs, out)?;
    if let Some((id, _)) = seen {
        write_identity(out, &id)?;
    }
    Ok(n)
}

/// [`run_on`] with a CPU backend on one thread per trained point (the points themselves run in
/// parallel on the current rayon pool).
pub fn run(
    spec: &SweepSpec,
    dir: &Path,
    shard: Option<Shard>,
    show_progress: bool,
) -> Result<RunSummary, SweepError> {
    run_on(spec, dir, shard, show_progress, 1)
}

/// Runs (or resumes) the points of `shard` in `dir`, appending to `results.jsonl`, the points
/// in parallel on the current rayon pool. The trained points run on the spec's backend (one
/// device, passed to every worker); on the CPU it splits large products over `threads` (the
/// caller's `--threads`). One cache of trained embeddings serves the whole run.
pub fn run_on(
    spec: &SweepSpec,
    dir: &Path,
    shard: Option<Shard>,
    show_progress: bool,
    threads: usize,
) -> Result<RunSummary, SweepError> {
    // The directory's records are this spec's from now on (records of an edited spec's
    // removed points are moved aside by the engine), so its identity is this spec's.
    std::fs::create_dir_all(dir).map_err(|source| SweepError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    write_identity(dir, &identity(spec))?;
    sweep::run(
        &spec.points(),
        dir,
        RunOptions {
            shard,
            show_progress,
        },
        |todo| {
            if !todo.iter().any(|p| matches!(p, Point::Trained(_))) {
                return Ok(PointContext::cpu(threads));
            }
            Ok(PointContext::on(spec.backend, threads, show_progress)?)
        },
        |ctx, p| point::compute(p, ctx),
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
            Point::Exact(q, o, _) => {
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
        let at_once = budget::Need {
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
        budget::Need {
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
