//! The `sinklab` command line: one file per subcommand.

use clap::{Parser, Subcommand};

mod check;
mod report;
mod secondary;

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
    /// Detect secondary attention sinks (paper B) in captured activations.
    Secondary(secondary::Args),
}

/// Parses the arguments and runs the subcommand; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Check(a) => check::run(a),
        Command::Report(a) => report::run(a),
        Command::Secondary(a) => secondary::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}
