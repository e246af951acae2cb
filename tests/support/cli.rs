//! The command-line harness of the CLI tests: the `sinklab` binary, a run's output as text, and
//! the assertions every such test makes (a success shows its stderr when it fails; a refusal
//! has its exit code, says each expected phrase, and never panics). A target includes it with
//! `#[path = "support/cli.rs"] mod cli;`.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::process::{Command, Output};

/// The `sinklab` binary of this build.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sinklab"))
}

/// A finished run's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A finished run's stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `sinklab ARGS` to the end.
pub fn run<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    bin().args(args).output().expect("sinklab starts")
}

/// Asserts the run succeeded (its stderr in the message otherwise) and returns its stdout.
pub fn ok(o: &Output) -> String {
    assert!(o.status.success(), "sinklab failed: {}", stderr(o));
    stdout(o)
}

/// Asserts the run was refused with exit `code`, without a panic, saying every phrase of
/// `needles` on stderr; returns the stderr.
pub fn refused(o: &Output, code: i32, needles: &[&str]) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "exit status of a refusal: {e}");
    assert!(!e.contains("panicked"), "{e}");
    for n in needles {
        assert!(e.contains(n), "`{e}` does not say `{n}`");
    }
    e
}
