//! The progress of a run on stderr: indicatif's bar with the `cli` feature (the binary's
//! terminal); without it, a plain `k/n points` count rewritten in place, so the core pulls no
//! terminal crate.

/// A run's progress display; hidden when built with `show = false`.
#[cfg(feature = "cli")]
pub(super) struct Progress(indicatif::ProgressBar);

#[cfg(feature = "cli")]
impl Progress {
    /// A bar over `len` points, drawn when `show`.
    pub(super) fn new(show: bool, len: usize) -> Self {
        let bar = if show {
            indicatif::ProgressBar::new(len as u64)
        } else {
            indicatif::ProgressBar::hidden()
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} points ({eta}) {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Self(bar)
    }

    /// Shows `msg` (the last point's id) beside the bar.
    pub(super) fn set_message(&self, msg: String) {
        self.0.set_message(msg);
    }

    /// Counts `n` more points done.
    pub(super) fn inc(&self, n: u64) {
        self.0.inc(n);
    }

    /// Removes the bar.
    pub(super) fn finish_and_clear(&self) {
        self.0.finish_and_clear();
    }
}

/// A run's progress display; silent when built with `show = false`.
#[cfg(not(feature = "cli"))]
pub(super) struct Progress {
    show: bool,
    len: usize,
    done: std::sync::atomic::AtomicUsize,
}

#[cfg(not(feature = "cli"))]
impl Progress {
    /// A count over `len` points, written when `show`.
    pub(super) fn new(show: bool, len: usize) -> Self {
        Self {
            show,
            len,
            done: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The point ids are not shown by the plain count.
    pub(super) fn set_message(&self, _msg: String) {}

    /// Counts `n` more points done and rewrites the count.
    pub(super) fn inc(&self, n: u64) {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let done = self
            .done
            .fetch_add(n, std::sync::atomic::Ordering::SeqCst)
            .saturating_add(n);
        if self.show {
            eprint!("\r{done}/{} points", self.len);
        }
    }

    /// Ends the count's line.
    pub(super) fn finish_and_clear(&self) {
        if self.show && self.done.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            eprintln!();
        }
    }
}
