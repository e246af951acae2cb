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

/// Refuses options given without the option they apply to: `main` = (its flag, whether it was
/// given), `given` = (each dependent flag, whether it was given). clap's `requires` is excused
/// whenever the required option conflicts with one that is present (`--a5` conflicts with
/// `--text`, so `--text … --a5-layers 1` would pass it and be ignored), so the dependent options
/// are checked here instead, never silently dropped.
pub(crate) fn only_with(main: (&str, bool), given: &[(&str, bool)]) -> anyhow::Result<()> {
    if main.1 {
        return Ok(());
    }
    if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
        anyhow::bail!(
            "{flag} applies only with {m}: add {m}, or drop {flag} (it would be ignored)",
            m = main.0
        );
    }
    Ok(())
}

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
#[command(
    name = "sinklab",
    version,
    about,
    long_about = "Attention sinks, checked: the theorems of docs/theory.md as seeded numerical \
checks, the experiments behind them (cost sweeps, training runs, secondary-sink detection) and \
the same statistics measured on real models, with figures and a self-contained viewer.\n\n\
Every subcommand has its own help: `sinklab <command> -h` lists the options, \
`sinklab <command> --help` explains them with examples.",
    max_term_width = 100,
    after_long_help = "EXAMPLES:
  sinklab check                           run every theorem check
  sinklab report --quick                  checks and small sims into out/report.md
  sinklab fetch smollm2                   download and verify a model
  sinklab real --model smollm2 --text \"The cat sat on the mat.\"
  sinklab sweep sims/cost_scaling.toml    the cost-scaling sweep, fits and figures"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the theorem checks (all, or one by name).
    ///
    /// Each theorem of docs/theory.md is checked on seeded random instances: a table (or a
    /// JSON array) of cases, passes, failures and the worst margin per theorem. The exit code
    /// is 1 when any case fails.
    Check(check::Args),
    /// List GPU adapters, resolve --backend, and train one attention head on it.
    ///
    /// A smoke test of the dense backend: the adapters wgpu finds, the one --backend selects,
    /// and a short training run of one attention head on it.
    Backend(backend::Args),
    /// Minimal cost of a sink or diagonal pattern (docs/theory.md §6).
    ///
    /// Solves the convex program of docs/theory.md §6: the smallest norm of W_QK (or of the
    /// whole head) for which every off-query's logit on its pattern's target exceeds its
    /// other logits by the gap Δ, with a certified lower bound beside the value.
    Cost(cost::Args),
    /// Half-space verdict (docs/theory.md §3) on an instance file: queries, keys, sink.
    ///
    /// Decides whether one bilinear head can make `sink` a sink for every query: yes iff the
    /// queries lie in an open half-space and the sink lies outside the hull of the other keys.
    /// Prints a witness W whose attention is checked, or the convex weights that certify the
    /// failed condition, each verified by arithmetic independently of the solver.
    HalfSpace(half_space::Args),
    /// Run or resume a sweep spec (sims/<name>.toml): results.jsonl, fit.json, figures.
    ///
    /// Every point of the spec is computed once (a rerun resumes where the last stopped) into
    /// OUT/results.jsonl; then the exponents are fitted (OUT/fit.json) and the figures drawn
    /// (OUT/figures/, each with the data file that `sinklab plot` redraws).
    Sweep(sweep::Args),
    /// Join sweep shards, then fit and plot.
    ///
    /// Reads the results of shards run with `sinklab sweep --shard i/N --no-analysis` and
    /// writes one sweep directory: results.jsonl (sorted by point id), fit.json and figures/.
    Merge(sweep::MergeArgs),
    /// Train one model on bigram-copy and report the pattern learned and its cost.
    ///
    /// A small transformer (1 to 3 layers) is trained on the bigram-copy task; the report
    /// gives the loss curve, the accuracies, the attention pattern its off-queries learned
    /// (sink or diagonal) and the costs of its weights.
    Train(train::Args),
    /// Run every check and default sim; write out/report.md and figures.
    ///
    /// The claims of the project in one run: the theorem checks and the default sims
    /// (smaller ones with --quick; with --full also paper B's long studies first), written
    /// as a Markdown report with its figures.
    Report(report::Args),
    /// Detect secondary attention sinks (paper B) in a real model or captured activations.
    ///
    /// The secondary-sink detector on a model's native forward pass (prompts, optionally
    /// with greedy generation) or on an activations file: tokens whose hidden state aligns
    /// with the BOS token's over several layers. With --out also the B1-B6 measurements, the
    /// patching experiment and figures; --long runs paper B's long-generation setting and
    /// --dose-response the causal intervention.
    Secondary(secondary::Args),
    /// Download and verify a model (smollm2, gemma3-270m, minilm, qwen2.5-coder-0.5b).
    ///
    /// Files are downloaded into the cache and checked against their SHA-256 hashes; a
    /// model already cached is checked by size and modification time (or re-hashed with
    /// --verify).
    Fetch(fetch::Args),
    /// Run a real model (or an activations file) and measure paper A's statistics.
    ///
    /// Loads a GGUF file or a Hugging Face directory, runs the input through its native
    /// forward pass and reports paper A's statistics per layer (attention to the first
    /// token and the related measurements of docs/theory.md). --a1, --a2, --a3 and --a5 add
    /// the heavier analyses; --json prints everything as one JSON object.
    Real(real::Args),
    /// Write a synthetic GGUF with a paper model's shapes
    ///
    /// Shapes: llama3.1-8b, qwen2-7b, gpt-oss-20b, qwen3-30b-a3b. The weights are seeded random numbers (same seed, same bytes), written streaming, so
    /// that the loader and kernels can be exercised at a real model's size without
    /// downloading it.
    Synth(synth::Args),
    /// One self-contained HTML page of a run: sink grid, maps, detector labels, curves.
    ///
    /// The page embeds its data and needs no network: a grid of every head's attention to
    /// the first token, the attention maps, the secondary-sink detector's labels and the
    /// per-token norm and cosine curves.
    View(view::Args),
    /// Redraw a figure from its data file (figures/<name>.json) in another style.
    ///
    /// Every figure is written with a data file beside it holding exactly what is drawn
    /// (schema in docs/figures.md); this redraws the SVG and PNG from that file alone, with
    /// another width, font size or axis scale, without recomputing anything.
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
