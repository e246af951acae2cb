//! What a report section is: its context ([`ReportCtx`]) and its result
//! ([`ReportSection`]).
//!
//! A leaf module (it imports nothing from the crate): sections in any layer
//! produce a [`ReportSection`] without depending on the list of sections in
//! [`crate::report`].

use std::path::PathBuf;

/// Where and how a report is produced.
#[derive(Clone, Debug)]
pub struct ReportCtx {
    /// Output directory (`out/` by default); figures go to `out/figures/`.
    pub out_dir: PathBuf,
    /// Master seed of every random draw in the report.
    pub seed: u64,
    /// Smaller sims (used by tests and `--quick`).
    pub quick: bool,
}

impl ReportCtx {
    /// Directory for figures.
    pub fn fig_dir(&self) -> PathBuf {
        self.out_dir.join("figures")
    }
}

/// One section of the report.
#[derive(Clone, Debug, Default)]
pub struct ReportSection {
    /// Section title (a `##` heading).
    pub title: String,
    /// Markdown body.
    pub markdown: String,
    /// Figure files written (paths relative to `out_dir` are shown in the report).
    pub figures: Vec<PathBuf>,
}

/// Error type of a section.
pub type SectionError = Box<dyn std::error::Error + Send + Sync>;

/// A report section producer.
pub type SectionFn = fn(&ReportCtx) -> Result<ReportSection, SectionError>;

/// Formats a margin for tables.
pub fn fmt_margin(m: f64) -> String {
    if m.is_infinite() {
        "—".into()
    } else {
        format!("{m:.3e}")
    }
}
