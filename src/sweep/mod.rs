//! The sweep engine: a resumable, sharded runner over the points of an experiment.
//!
//! An experiment lists its points ([`SweepPoint`]: a stable id, how many records it writes and
//! a relative cost) and says how to compute one; the engine does the rest, the same way for any
//! experiment:
//!
//! - **Results file.** `DIR/results.jsonl`, one record ([`SweepRecord`]) per line. A finished
//!   point is appended with a single `write` of its complete line(s), so a SIGKILL leaves at
//!   most a partial last line; [`read_records`] skips such a line and a run truncates it before
//!   appending, so it is recomputed. A point is *done* when every record it produces is present.
//! - **Shards.** Points are numbered in spec order; shard `i/N` (0-based `i`) takes the points
//!   with index ≡ i (mod N). [`merge`] joins shard directories.
//!
//! - **Identity.** A point's id is a hash of every parameter that can change its records, so
//!   a spec edit recomputes exactly the points it changes; records of points the spec no longer
//!   has are moved to `results.stale.jsonl` (kept, never fitted). Failed records do not count as
//!   done: a rerun retries them.
//! - **One writer.** A run or merge holds [`lock::acquire`] on its directory; a second one is
//!   refused with the holder's pid. A write error (a full disk) stops the run with an error.
//! - **Order.** [`read_records`] returns records sorted by (point id, part), so everything
//!   computed from them is the same whatever the thread count, interruptions or merge order.
//!
//! - **Beyond one machine.** [`jobs`] writes the job files (a plain manifest or a Slurm
//!   array script) that run the `N` shards elsewhere and merge them.
//!
//! Two experiments run on it: the cost-scaling sweep of claim A5, [`cost_scaling`], and the
//! switch study of docs/theory.md §11, [`switch_study`] (a spec with
//! `experiment = "switch_study"`).

pub mod cost_scaling;
mod engine;
pub mod jobs;
pub mod lock;
mod progress;
mod results;
mod shard;
pub mod switch_study;

pub use engine::{RunOptions, RunSummary, run};
pub use results::{STALE_FILE, done_ids, merge, read_records};
pub use shard::Shard;

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// Errors of the sweep engine.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// File-system error.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Bad spec.
    #[error("sweep spec {0}")]
    Spec(String),
    /// A file that is not a sweep results file.
    #[error("{path}: {msg}")]
    Results {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// Another process writes the directory.
    #[error("{0}")]
    Locked(String),
    /// A resource budget would be exceeded.
    #[error(transparent)]
    Budget(#[from] crate::budget::BudgetError),
    /// Plot error.
    #[cfg(feature = "plot")]
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
    /// The requested dense backend is unavailable (`backend = "gpu"` without an adapter).
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SweepError + '_ {
    move |source| SweepError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One unit of work of a sweep.
pub trait SweepPoint: Sync {
    /// Stable identifier (the resume key).
    fn id(&self) -> String;
    /// Number of records the point writes.
    fn n_records(&self) -> usize;
    /// Relative cost, to start the longest points first.
    fn weight(&self) -> f64;
}

/// One line of `results.jsonl`.
pub trait SweepRecord: Serialize + DeserializeOwned + Send {
    /// Id of the point that wrote it.
    fn point_id(&self) -> &str;
    /// Which of the point's records it is (unique within the point).
    fn part(&self) -> &str;
    /// Why the point failed, if it did: failed records do not count as done and are
    /// recomputed on resume.
    fn error(&self) -> Option<&str>;
}

/// The first `n` hex digits of the SHA-256 of `text` (point ids).
pub fn hash_hex(text: &str, n: usize) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .chars()
        .take(n)
        .collect()
}

impl<P: SweepPoint> SweepPoint for &P {
    fn id(&self) -> String {
        (**self).id()
    }
    fn n_records(&self) -> usize {
        (**self).n_records()
    }
    fn weight(&self) -> f64 {
        (**self).weight()
    }
}
