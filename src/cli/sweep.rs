//! `sinklab sweep sims/<name>.toml [--out DIR] [--shard i/N] [--threads K]`,
//! `sinklab sweep sims/<name>.toml --emit manifest|slurm --shards N [--out DIR]` and
//! `sinklab merge --out DIR SHARD_DIR...`.

use anyhow::{Context, Result, bail};
use sinklab::sweep::cost_scaling::{self as sweep, SweepSpec};
use sinklab::sweep::{RunSummary as Summary, Shard, SweepError};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  Run (or resume) the default cost-scaling sweep into sweeps/cost_scaling:
    sinklab sweep sims/cost_scaling.toml
  Shard 3 of 8 without the analysis (e.g. one task of a job array), then join them:
    sinklab sweep sims/cost_scaling.toml --out sweeps/cs --shard 3/8 --no-analysis
    sinklab merge --out sweeps/cs sweeps/cs/shard0 sweeps/cs/shard1 ...
  Slurm job files for 8 shards and the merge (OUT/jobs/submit.sh submits them):
    sinklab sweep sims/cost_scaling.toml --out sweeps/cs --emit slurm --shards 8

The spec's keys are documented in the comments of sims/cost_scaling.toml.")]
pub struct Args {
    /// Sweep spec (TOML).
    #[arg(value_name = "SPEC")]
    spec: PathBuf,
    /// Output directory (default: sweeps/<spec stem>).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Run only shard i of N (0-based), e.g. 3/8
    ///
    /// In a job array, i is the task's index (Slurm: SLURM_ARRAY_TASK_ID); --emit writes
    /// such jobs.
    #[arg(long, value_name = "i/N")]
    shard: Option<Shard>,
    /// Worker threads (default: all cores).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Skip fit.json and figures (in shards; merge afterwards).
    #[arg(long)]
    no_analysis: bool,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Backend of the trained points: cpu, gpu or auto
    ///
    /// Overrides the spec's backend key.
    #[arg(long, value_name = "BACKEND")]
    backend: Option<sinklab::backend::BackendKind>,
    /// Memory limit of the run (e.g. 64G; default 80% of memory).
    #[arg(long, value_name = "SIZE")]
    max_mem: Option<String>,
    /// Time limit of the lower-bound estimates (e.g. 12h; default 1h)
    ///
    /// Of a single point's estimate, and of all points' together over the threads.
    #[arg(long, value_name = "TIME")]
    max_time: Option<String>,
    /// Write job files instead of computing: manifest or slurm
    ///
    /// manifest: OUT/jobs/shards.txt (one command a shard, for GNU parallel or any job
    /// array) and merge.sh. slurm: OUT/jobs/sweep.sbatch (an array job), merge.sbatch and
    /// submit.sh.
    #[arg(
        long,
        requires = "shards",
        conflicts_with = "shard",
        value_name = "KIND"
    )]
    emit: Option<sinklab::sweep::jobs::JobKind>,
    /// Number of shards of --emit.
    #[arg(long, value_name = "N")]
    shards: Option<usize>,
}

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  Join the shards of a sharded run, then fit and plot:
    sinklab merge --out sweeps/cs sweeps/cs/shard0 sweeps/cs/shard1 sweeps/cs/shard2
  Join results files, with more bootstrap resamples:
    sinklab merge --out sweeps/all a/results.jsonl b/results.jsonl --bootstrap 10000")]
pub struct MergeArgs {
    /// Shard directories (or results.jsonl files) to join.
    #[arg(required = true, value_name = "SHARD")]
    inputs: Vec<PathBuf>,
    /// Output directory: results.jsonl, fit.json, figures/.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 2000, value_name = "N")]
    bootstrap: usize,
    /// Memory limit (e.g. 64G; default 80% of memory).
    #[arg(long, value_name = "SIZE")]
    max_mem: Option<String>,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn run(a: Args) -> Result<i32> {
    super::only_with(
        ("--emit", a.emit.is_some()),
        &[("--shards", a.shards.is_some())],
    )?;
    let text = sinklab::budget::read_text(&a.spec, sinklab::budget::MAX_SPEC_BYTES)
        .with_context(|| format!("reading {}", a.spec.display()))?;
    if sinklab::sweep::switch_study::is_switch_study(&text) {
        return run_switch_study(a, &text);
    }
    let mut spec = SweepSpec::from_toml_named(&text, &a.spec.display().to_string())?;
    if let Some(b) = a.backend {
        spec.backend = b;
    }
    let out = a.out.clone().unwrap_or_else(|| {
        PathBuf::from("sweeps").join(
            a.spec
                .file_stem()
                .map_or_else(|| spec.name.clone().into(), |s| s.to_os_string()),
        )
    });
    if let Some(k) = a.threads {
        sinklab::budget::check_threads(k)?;
    }
    if let (Some(kind), Some(shards)) = (a.emit, a.shards) {
        let plan = sinklab::sweep::jobs::JobPlan {
            exe: std::env::current_exe().context("locating the sinklab executable")?,
            spec: a.spec.clone(),
            out: out.clone(),
            shards,
            threads: a.threads,
            bootstrap: spec.bootstrap,
            seed: a.seed,
            name: spec.name.clone(),
        }
        .normalised()?;
        for p in plan.write(kind)? {
            outln!("wrote {}", p.display());
        }
        let jobs = plan.out.join("jobs");
        match kind {
            sinklab::sweep::jobs::JobKind::Manifest => errln!(
                "run: parallel < {0}/shards.txt && sh {0}/merge.sh  ({shards} shards, each into {1}/shard<i>)",
                jobs.display(),
                plan.out.display()
            ),
            sinklab::sweep::jobs::JobKind::Slurm => errln!(
                "run: sh {}/submit.sh  (array of {shards} tasks, then the merge once all succeeded)",
                jobs.display()
            ),
        }
        return Ok(0);
    }
    let budget = sinklab::budget::Budget::with(a.max_mem.as_deref(), a.max_time.as_deref())?;
    let threads = a.threads.unwrap_or_else(rayon::current_num_threads);
    sweep::check_budget(
        &spec,
        &a.spec.display().to_string(),
        &budget,
        threads,
        true,
        a.shard,
    )?;
    let go = || sweep::run_on(&spec, &out, a.shard, true, threads);
    let summary = in_pool(a.threads, go)?;
    print_summary(&spec.name, &summary, a.shard, &out);
    if !a.no_analysis {
        let (fits, figs) = sweep::analyze(&out, &out.join("figures"), spec.bootstrap, a.seed)?;
        outln!("{}", sweep::verdict_markdown(&fits));
        for f in figs {
            errln!("wrote {}", f.display());
        }
        errln!("wrote {}", out.join("fit.json").display());
    }
    Ok(exit_code(&summary))
}

/// `sinklab sweep` on a switch-study spec (`experiment = "switch_study"`): runs or resumes
/// the grid, then prints the counts, verdicts and costs and writes the figures.
fn run_switch_study(a: Args, text: &str) -> Result<i32> {
    use sinklab::sweep::switch_study::{self as study, StudySpec, section, tally};
    if a.emit.is_some() {
        bail!(
            "--emit: job files are written for cost-scaling specs only (a switch-study spec runs \
             its shards with --shard i/N)"
        );
    }
    let mut spec = StudySpec::from_toml_named(text, &a.spec.display().to_string())?;
    if let Some(b) = a.backend {
        spec.backend = b;
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("sweeps").join(&spec.name));
    if let Some(k) = a.threads {
        sinklab::budget::check_threads(k)?;
    }
    let budget = sinklab::budget::Budget::with(a.max_mem.as_deref(), a.max_time.as_deref())?;
    let threads = a.threads.unwrap_or_else(rayon::current_num_threads);
    study::check_budget(&spec, &a.spec.display().to_string(), &budget, threads, true)?;
    let go = || study::run_on(&spec, &out, a.shard, true, 1);
    let summary = in_pool(a.threads, go)?;
    print_summary(&spec.name, &summary, a.shard, &out);
    if !a.no_analysis {
        let records = study::read_results(&out.join("results.jsonl"))?;
        outln!("{}", section::counts_table(&records));
        let mut tasks: Vec<_> = records.iter().map(|r| r.task).collect();
        tasks.sort();
        tasks.dedup();
        for &t in &tasks {
            for v in tally::verdicts(&records, t) {
                outln!("- {v}");
            }
            outln!(
                "{}",
                section::costs_table(&records, t, spec.k as f64 / spec.n as f64)
            );
        }
        for f in study::figures::write(&records, &out.join("figures"))? {
            errln!("wrote {}", f.display());
        }
    }
    Ok(exit_code(&summary))
}

/// Runs `go` on a pool of `threads` workers (the global pool without `--threads`).
fn in_pool<T>(
    threads: Option<usize>,
    go: impl FnOnce() -> Result<T, SweepError> + Send,
) -> Result<T>
where
    T: Send,
{
    Ok(match threads {
        Some(k) => rayon::ThreadPoolBuilder::new()
            .num_threads(k)
            .build()
            .context("building the thread pool")?
            .install(go)?,
        None => go()?,
    })
}

/// The run's counts on stderr, and the stale records moved aside.
fn print_summary(name: &str, summary: &Summary, shard: Option<Shard>, out: &Path) {
    errln!(
        "{}: {} points{}, {} already done, {} computed → {}",
        name,
        summary.total,
        shard.map_or(String::new(), |s| format!(
            " in shard {}/{}",
            s.index, s.count
        )),
        summary.skipped,
        summary.computed,
        out.join("results.jsonl").display()
    );
    if summary.stale > 0 {
        errln!(
            "{} records of points this spec no longer has moved to {}",
            summary.stale,
            out.join(sinklab::sweep::STALE_FILE).display()
        );
    }
}

/// 1 (with the first failure on stderr) when points computed now failed, else 0.
fn exit_code(summary: &Summary) -> i32 {
    match &summary.first_failure {
        Some((id, e)) => {
            errln!(
                "error: {} of {} points computed now failed (rerun to retry them); first: {id}: {e}",
                summary.failed,
                summary.computed
            );
            1
        }
        None => 0,
    }
}

pub fn merge(a: MergeArgs) -> Result<i32> {
    if a.bootstrap == 0 {
        // No resample: the "95 % CI" would be the point estimate twice.
        bail!("--bootstrap 0: the confidence intervals need at least 1 resample (default 2000)");
    }
    sinklab::budget::check_bootstrap_flag(
        a.max_mem.as_deref(),
        "--bootstrap",
        a.bootstrap,
        1000,
        16,
    )?;
    let n = sweep::merge(&a.inputs, &a.out)?;
    errln!(
        "merged {n} records into {}",
        a.out.join("results.jsonl").display()
    );
    let (fits, figs) = sweep::analyze(&a.out, &a.out.join("figures"), a.bootstrap, a.seed)?;
    outln!("{}", sweep::verdict_markdown(&fits));
    for f in figs {
        errln!("wrote {}", f.display());
    }
    Ok(0)
}
