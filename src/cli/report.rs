//! `sinklab report [--out DIR] [--seed S] [--quick]`.

use anyhow::{Result, anyhow};
use sinklab::report::{ReportCtx, write_report};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output directory.
    #[arg(long, default_value = "out")]
    out: PathBuf,
    /// Master seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Smaller checks and sims (minutes → seconds).
    #[arg(long)]
    quick: bool,
}

pub fn run(a: Args) -> Result<i32> {
    let ctx = ReportCtx {
        out_dir: a.out,
        seed: a.seed,
        quick: a.quick,
    };
    let t0 = std::time::Instant::now();
    let (path, outs, errs) = write_report(&ctx, |s| {
        eprintln!("[{:>6.1}s] {s}", t0.elapsed().as_secs_f64())
    })
    .map_err(|e| anyhow!("writing the report: {e}"))?;
    let failed: Vec<_> = outs
        .iter()
        .filter(|o| !o.ok())
        .map(|o| o.theorem.clone())
        .collect();
    println!("wrote {}", path.display());
    for e in &errs {
        eprintln!("section error: {e}");
    }
    if !failed.is_empty() {
        eprintln!("checks that failed: {}", failed.join(", "));
    }
    Ok(if failed.is_empty() && errs.is_empty() {
        0
    } else {
        1
    })
}
