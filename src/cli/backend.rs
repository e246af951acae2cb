//! `sinklab backend [--backend cpu|gpu|auto] [--steps N] [--t T] [--batch B] [--d D]`:
//! lists the GPU adapters, says which backend the choice resolves to, and
//! trains the device-resident attention head (`train::attn`) on it,
//! printing the loss curve and the time per step.

use std::time::Instant;

use anyhow::{Context, Result};
use sinklab::backend::gpu::{adapters, describe_adapter};
use sinklab::backend::{AdamWHyper, Backend, BackendKind, Cpu, GpuOptions, Selected, select};
use sinklab::train::attn::{AttnFit, AttnFitConfig};

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  The adapters found, and 100 training steps on the backend auto selects:
    sinklab backend
  The same run forced onto the CPU, longer sequences:
    sinklab backend --backend cpu --t 128 --steps 50")]
pub struct Args {
    /// Backend: cpu, gpu or auto
    ///
    /// cpu; gpu (any adapter, llvmpipe included); auto (a hardware GPU, else the CPU).
    #[arg(long, default_value = "auto")]
    backend: BackendKind,
    /// Optimiser steps.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    steps: u64,
    /// Sequence length.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    t: u64,
    /// Sequences per step.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    batch: u64,
    /// Width.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    d: u64,
    /// Seed of inputs, teacher and student.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Memory limit (e.g. 64G; default 80% of memory).
    #[arg(long, value_name = "SIZE")]
    max_mem: Option<String>,
    /// Time limit of the lower-bound estimate (e.g. 12h; default 1h).
    #[arg(long, value_name = "TIME")]
    max_time: Option<String>,
}

fn fit<B: Backend>(be: &B, a: &Args) -> Result<()> {
    let cfg = AttnFitConfig {
        batch: a.batch as usize,
        t: a.t as usize,
        d: a.d as usize,
        seed: a.seed,
        adamw: AdamWHyper {
            lr: 0.02,
            weight_decay: 0.01,
            ..AdamWHyper::default()
        },
    };
    let mut f = AttnFit::new(be, cfg).context("setting up the attention fit")?;
    let log_every = (a.steps / 10).max(1);
    let start = Instant::now();
    outln!("step  loss");
    for s in 0..a.steps {
        if s % log_every == 0 {
            outln!("{s:>4}  {:.6e}", f.loss(be)?);
        }
        f.step(be)?;
    }
    let loss = f.loss(be)?;
    let secs = start.elapsed().as_secs_f64();
    outln!("{:>4}  {loss:.6e}", a.steps);
    outln!(
        "{:.3} ms/step on {}",
        1e3 * secs / a.steps as f64,
        be.describe()
    );
    Ok(())
}

pub fn run(a: Args) -> Result<i32> {
    // Sizes before any allocation (--max-mem / --max-time, else SINKLAB_MAX_MEM /
    // SINKLAB_MAX_TIME, else the defaults).
    let need = sinklab::budget::attn_fit(a.t as usize, a.batch as usize, a.d as usize, a.steps);
    sinklab::budget::Budget::with(a.max_mem.as_deref(), a.max_time.as_deref())?.check(
        &format!(
            "backend --t {} --batch {} --d {} --steps {}",
            a.t, a.batch, a.d, a.steps
        ),
        need,
        true,
    )?;
    errln!("backend: estimated {need} (memory, time lower bound)");
    let found = adapters(GpuOptions::default().backends);
    if found.is_empty() {
        outln!("GPU adapters: none");
    }
    for i in &found {
        outln!("GPU adapter: {}", describe_adapter(i));
    }
    let sel = select(a.backend, &GpuOptions::default())?;
    outln!("{}", sel.note());
    match &sel {
        Selected::Cpu { .. } => fit(&Cpu::<f32>::with_threads(rayon::current_num_threads()), &a)?,
        Selected::Gpu { gpu, .. } => fit(gpu.as_ref(), &a)?,
    }
    Ok(0)
}
