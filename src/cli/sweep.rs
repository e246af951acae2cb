//! `sinklab sweep sims/<name>.toml [--out DIR] [--shard i/N] [--threads K]`,
//! `sinklab sweep sims/<name>.toml --emit manifest|slurm --shards N [--out DIR]` and
//! `sinklab merge --out DIR SHARD_DIR...`.

use anyhow::{Context, Result, bail};
use sinklab::sweep::Shard;
use sinklab::sweep::cost_scaling::{self as sweep, SweepSpec};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Sweep spec (TOML).
    spec: PathBuf,
    /// Output directory (default: sweeps/<spec stem>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run only shard i of N (0-based), e.g. `--shard $SLURM_ARRAY_TASK_ID/8`.
    #[arg(long)]
    shard: Option<Shard>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Skip fit.json and figures (e.g. in shards; run `sinklab merge` afterwards).
    #[arg(long)]
    no_analysis: bool,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Dense backend of the trained points: cpu, gpu or auto (overrides the spec's `backend`).
    #[arg(long)]
    backend: Option<sinklab::backend::BackendKind>,
    /// Memory limit of the run (e.g. 64G; default 80% of the machine's memory).
    #[arg(long)]
    max_mem: Option<String>,
    /// Time limit of a single point's lower-bound estimate and of all points' together over
    /// the threads (e.g. 12h; default 1h).
    #[arg(long)]
    max_time: Option<String>,
    /// Write job files instead of computing: `manifest` (OUT/jobs/shards.txt, one command a
    /// shard, for GNU parallel or any job array, + merge.sh) or `slurm` (OUT/jobs/sweep.sbatch
    /// array job, merge.sbatch, submit.sh).
    #[arg(long, requires = "shards", conflicts_with = "shard")]
    emit: Option<sinklab::sweep::jobs::JobKind>,
    /// Number of shards of --emit.
    #[arg(long, requires = "emit")]
    shards: Option<usize>,
}

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Shard directories (or results.jsonl files) to join.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Output directory: results.jsonl, fit.json, figures/.
    #[arg(long)]
    out: PathBuf,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 2000)]
    bootstrap: usize,
    /// Memory limit (e.g. 64G; default 80% of the machine's memory).
    #[arg(long)]
    max_mem: Option<String>,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn run(a: Args) -> Result<i32> {
    let mut spec = SweepSpec::load(&a.spec)?;
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
    let summary = match a.threads {
        Some(k) => rayon::ThreadPoolBuilder::new()
            .num_threads(k)
            .build()
            .context("building the thread pool")?
            .install(go)?,
        None => go()?,
    };
    errln!(
        "{}: {} points{}, {} already done, {} computed → {}",
        spec.name,
        summary.total,
        a.shard.map_or(String::new(), |s| format!(
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
    if !a.no_analysis {
        let (fits, figs) = sweep::analyze(&out, &out.join("figures"), spec.bootstrap, a.seed)?;
        outln!("{}", sweep::verdict_markdown(&fits));
        for f in figs {
            errln!("wrote {}", f.display());
        }
        errln!("wrote {}", out.join("fit.json").display());
    }
    if let Some((id, e)) = &summary.first_failure {
        errln!(
            "error: {} of {} points computed now failed (rerun to retry them); first: {id}: {e}",
            summary.failed,
            summary.computed
        );
        return Ok(1);
    }
    Ok(0)
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
