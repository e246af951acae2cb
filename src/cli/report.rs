//! `sinklab report [--out DIR] [--seed S] [--quick | --full]`.
//!
//! `--full` first runs (or resumes) the long studies — paper B's long greedy traces in the
//! paper's setting (`sinklab secondary --long --chat --prompt-set math`: chat template,
//! competition-style problems; tens of minutes per model on 2 cores) — into `out/`,
//! then writes the same report, which includes their results when present.

use anyhow::{Result, anyhow};
use sinklab::report::{ReportCtx, write_report};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  Smaller checks and sims, in seconds, into out/:
    sinklab report --quick
  The full report into another directory with another seed:
    sinklab report --out /tmp/report --seed 1
  The long studies first (resumable; tens of minutes per model), then the report:
    sinklab report --full")]
pub struct Args {
    /// Output directory.
    #[arg(long, default_value = "out", value_name = "DIR")]
    out: PathBuf,
    /// Master seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Smaller checks and sims (minutes → seconds).
    #[arg(long)]
    quick: bool,
    /// Also run (or resume) the long studies first
    ///
    /// Paper B's long traces in the paper's setting (chat template, competition-style
    /// problems) on the models of `sinklab secondary --long` (SmolLM2 measured at about
    /// 29 min on 2 loaded cores; about 4× that for Qwen2.5-Coder-0.5B). Resumable: rerun
    /// after an interruption.
    #[arg(long, conflicts_with = "quick")]
    full: bool,
}

pub fn run(a: Args) -> Result<i32> {
    let ctx = ReportCtx {
        out_dir: a.out.clone(),
        seed: a.seed,
        quick: a.quick,
    };
    let t0 = std::time::Instant::now();
    if a.full {
        use sinklab::secondary::long;
        let root = long::long_dir(&ctx.out_dir);
        for m in long::LONG_MODELS {
            let r = long::run_model_in(
                m,
                &long::setting_dir(&root, m, long::PAPER_SETTING),
                long::LONG_PROMPTS,
                long::LONG_GENERATE,
                ctx.seed,
                long::PAPER_SETTING,
                &mut |l: &str| errln!("[{:>6.1}s] long {m}: {l}", t0.elapsed().as_secs_f64()),
            );
            if let Err(e) = r {
                errln!("long study {m}: {e:#} (the report says it is missing)");
            }
        }
        use sinklab::secondary::dose;
        for r in dose::REPORT_DOSE.iter().filter(|r| r.full_only) {
            let res = dose::report_run(
                r,
                &dose::report_dir(&ctx.out_dir, r),
                ctx.seed,
                &mut |l: &str| errln!("[{:>6.1}s] dose {l}", t0.elapsed().as_secs_f64()),
            );
            if let Err(e) = res {
                errln!(
                    "dose-response {}: {e:#} (the report says it is missing)",
                    r.model
                );
            }
        }
    }
    let (path, outs, errs) = write_report(&ctx, |s| {
        errln!("[{:>6.1}s] {s}", t0.elapsed().as_secs_f64())
    })
    .map_err(|e| anyhow!("writing the report: {e}"))?;
    let failed: Vec<_> = outs
        .iter()
        .filter(|o| !o.ok())
        .map(|o| o.theorem.clone())
        .collect();
    outln!("wrote {}", path.display());
    for e in &errs {
        errln!("section error: {e}");
    }
    if !failed.is_empty() {
        errln!("checks that failed: {}", failed.join(", "));
    }
    Ok(if failed.is_empty() && errs.is_empty() {
        0
    } else {
        1
    })
}
