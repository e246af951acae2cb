//! `sinklab synth --shape llama3.1-8b|qwen2-7b|gpt-oss-20b|qwen3-30b-a3b --dtype q4k --seed S
//! --out F.gguf`: a synthetic GGUF with a paper model's shapes and seeded random weights,
//! written streaming.

use anyhow::{Result, bail};
use sinklab::synth::{SynthDtype, SynthShape, estimate_seconds, paper_size, write_paper_gguf};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  The planned size of a Llama-3.1-8B-shaped file, nothing written:
    sinklab synth --shape llama3.1-8b --out /tmp/llama.gguf --dry-run
  A small file for tests, 8-bit blocks, seed 7:
    sinklab synth --shape tiny-qwen2 --dtype q8_0 --seed 7 --out /tmp/tiny.gguf")]
pub struct Args {
    /// Shape: llama3.1-8b, qwen2-7b, gpt-oss-20b, qwen3-30b-a3b
    ///
    /// For tests: tiny-llama3, tiny-qwen2, tiny-gpt-oss, tiny-qwen3moe.
    #[arg(long, value_name = "SHAPE")]
    shape: String,
    /// Matrix storage: q4k, q4km, q8_0, f16, f32, mxfp4
    ///
    /// Default: the shape's published storage (q4k for llama3.1-8b and qwen2-7b, mxfp4 for
    /// gpt-oss-20b: MXFP4 experts and Q8_0 elsewhere, q4km for qwen3-30b-a3b: llama.cpp's
    /// Q4_K_M mix of block formats). A mixture's router is f32 in every case.
    #[arg(long, value_name = "DTYPE")]
    dtype: Option<String>,
    /// Seed of the weights (same seed, same bytes).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output file.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Print the planned size and exit.
    #[arg(long)]
    dry_run: bool,
    /// Threads that generate and quantize chunks
    ///
    /// Default: the worker pool's threads. The bytes written do not depend on it.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

pub fn run(a: Args) -> Result<i32> {
    let Some(mut shape) = SynthShape::by_name(&a.shape) else {
        bail!(
            "unknown --shape `{}` (known: {})",
            a.shape,
            SynthShape::NAMES.join(", ")
        );
    };
    let dt = match &a.dtype {
        None => shape.dtype,
        Some(d) => match SynthDtype::parse(d) {
            Some(dt) => dt,
            None => bail!("unknown --dtype `{d}` (known: q4k, q4km, q8_0, f16, f32, mxfp4)"),
        },
    };
    shape.dtype = dt;
    if let Some(k) = a.threads {
        sinklab::budget::check_threads(k)?;
    }
    let threads = a.threads.unwrap_or_else(rayon::current_num_threads);
    let size = paper_size(&shape, a.seed);
    let gb = |b: usize| b as f64 / 1e9;
    errln!(
        "synth {} ({:?}): {} tensors, {:.3} B parameters, {:.2} GB ({} bytes) → {}",
        shape.name,
        dt,
        size.tensors,
        size.params as f64 / 1e9,
        gb(size.total()),
        size.total(),
        a.out.display()
    );
    if a.dry_run {
        outln!("{}", size.total());
        return Ok(0);
    }
    let est = estimate_seconds(&shape, a.seed, threads);
    errln!("estimated time: {est:.0} s on {threads} threads");
    let t0 = Instant::now();
    let mut last = -1i64;
    let mut progress = |done: usize, total: usize| {
        let pct = (100 * done / total.max(1)) as i64;
        if pct != last {
            last = pct;
            let el = t0.elapsed().as_secs_f64();
            err!(
                "\r  {pct:3}%  {:.2} / {:.2} GB  {el:.0} s",
                gb(done),
                gb(total)
            );
        }
    };
    let mut write = || write_paper_gguf(&a.out, &shape, a.seed, threads, &mut progress);
    let s = match a.threads {
        Some(k) => rayon::ThreadPoolBuilder::new()
            .num_threads(k)
            .build()
            .map_err(|e| anyhow::anyhow!("building the thread pool of --threads {k}: {e}"))?
            .install(write)?,
        None => write()?,
    };
    errln!(
        "\nwrote {} ({} bytes) in {:.1} s",
        a.out.display(),
        s.total(),
        t0.elapsed().as_secs_f64()
    );
    outln!("{}", a.out.display());
    Ok(0)
}
