//! Every byte the command line writes to stdout or stderr goes through [`write`] (the macros
//! `outln!`, `out!`, `errln!`, `err!`), so a closed pipe or a full disk is handled in one place
//! and never panics (`println!` panics on a write error).
//!
//! - **Broken pipe** (`sinklab check | true`, `sinklab real … | head`): the first failed write to
//!   stdout returns [`StreamError`] through `?`, the command stops, nothing more is printed and
//!   the process exits with status **141** (128 + SIGPIPE, what a shell reports for a process
//!   that the signal's default action ended, e.g. `yes | head`). SIGPIPE itself stays ignored
//!   (Rust's default): being killed by it could land between writing a temporary results file
//!   and renaming it; exiting through the normal return path cannot.
//! - **Any other write error** (`> /dev/full`: ENOSPC): one line on stderr, `error: writing to
//!   stdout: No space left on device (os error 28)`, and exit status 1.
//!
//! Writes to stderr (progress, notes) never stop a command: a failure there is remembered, later
//! stderr writes are skipped, and [`finish`] turns it into the exit status (141 for a broken pipe,
//! else 1) once the command's files are written.

use std::fmt;
use std::io::{self, Write};
use std::sync::Mutex;

/// Exit status after a broken pipe: 128 + SIGPIPE (13).
pub const BROKEN_PIPE_STATUS: i32 = 141;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
    fn slot(self) -> usize {
        self as usize
    }
}

/// A failed write to stdout or stderr.
#[derive(Debug, Clone)]
pub struct StreamError {
    pub stream: Stream,
    pub kind: io::ErrorKind,
    /// The OS error as `io::Error` displays it.
    message: String,
}

impl StreamError {
    pub fn is_broken_pipe(&self) -> bool {
        self.kind == io::ErrorKind::BrokenPipe
    }
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writing to {}: {}", self.stream.name(), self.message)
    }
}

impl std::error::Error for StreamError {}

/// The first failure on each stream; later writes to a failed stream are skipped.
static FAILED: Mutex<[Option<StreamError>; 2]> = Mutex::new([None, None]);

fn failed(stream: Stream) -> Option<StreamError> {
    FAILED.lock().unwrap_or_else(|p| p.into_inner())[stream.slot()].clone()
}

fn record(stream: Stream, e: &io::Error) -> StreamError {
    let se = StreamError {
        stream,
        kind: e.kind(),
        message: e.to_string(),
    };
    let mut f = FAILED.lock().unwrap_or_else(|p| p.into_inner());
    f[stream.slot()].get_or_insert(se).clone()
}

/// Writes `args` to `stream`; the first error is remembered and returned (and every later call
/// on that stream returns it without writing).
pub fn write(stream: Stream, args: fmt::Arguments<'_>) -> Result<(), StreamError> {
    if let Some(e) = failed(stream) {
        return Err(e);
    }
    let r = match stream {
        Stream::Stdout => io::stdout().lock().write_fmt(args),
        Stream::Stderr => io::stderr().lock().write_fmt(args),
    };
    r.map_err(|e| record(stream, &e))
}

/// Flushes stdout (its line buffer holds a `print!` without a newline).
pub fn flush() -> Result<(), StreamError> {
    if let Some(e) = failed(Stream::Stdout) {
        return Err(e);
    }
    io::stdout()
        .lock()
        .flush()
        .map_err(|e| record(Stream::Stdout, &e))
}

/// An error and its causes on one line, `a: b: c`, each cause left out when the text before it
/// already ends with it (error types that print their source would show it twice).
pub fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if out.is_empty() {
            out = c;
        } else if !out.ends_with(&c) {
            out.push_str(": ");
            out.push_str(&c);
        }
    }
    out
}

/// The exit status for a command that returned `r`: flushes stdout, reports an error once (a
/// broken pipe silently), and turns a remembered stream failure into 141 or 1.
pub fn finish(r: anyhow::Result<i32>) -> i32 {
    let r = r.and_then(|code| flush().map(|()| code).map_err(Into::into));
    let stream_error = |se: &StreamError| {
        if se.is_broken_pipe() {
            BROKEN_PIPE_STATUS
        } else {
            let _ = write(Stream::Stderr, format_args!("error: {se}\n"));
            1
        }
    };
    match r {
        Err(e) => match e.downcast_ref::<StreamError>() {
            Some(se) => stream_error(se),
            None => {
                let _ = write(Stream::Stderr, format_args!("error: {}\n", one_line(&e)));
                1
            }
        },
        Ok(code) => {
            let f = FAILED.lock().unwrap_or_else(|p| p.into_inner()).clone();
            match f.iter().flatten().next() {
                Some(se) if code == 0 || se.is_broken_pipe() => stream_error(se),
                _ => code,
            }
        }
    }
}

/// `println!` to stdout; a write error returns from the enclosing function through `?`.
macro_rules! outln {
    () => {
        $crate::cli::out::write($crate::cli::out::Stream::Stdout, format_args!("\n"))?
    };
    ($($arg:tt)*) => {
        $crate::cli::out::write(
            $crate::cli::out::Stream::Stdout,
            format_args!("{}\n", format_args!($($arg)*)),
        )?
    };
}

/// `print!` to stdout; a write error returns from the enclosing function through `?`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::write($crate::cli::out::Stream::Stdout, format_args!($($arg)*))?
    };
}

/// `eprintln!`: never stops the command (a failure is remembered for the exit status).
macro_rules! errln {
    ($($arg:tt)*) => {{
        let _ = $crate::cli::out::write(
            $crate::cli::out::Stream::Stderr,
            format_args!("{}\n", format_args!($($arg)*)),
        );
    }};
}

/// `eprint!`: never stops the command.
macro_rules! err {
    ($($arg:tt)*) => {{
        let _ = $crate::cli::out::write($crate::cli::out::Stream::Stderr, format_args!($($arg)*));
    }};
}
