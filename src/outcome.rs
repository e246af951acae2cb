//! The outcome of one theorem check: a tally of seeded cases and the worst margin.
//!
//! A leaf module (it imports nothing from the crate), so math modules can return a
//! [`CheckOutcome`] from their checks without depending on the registry in
//! [`crate::check`]. The margin of a case is how far the instance is from
//! violating the statement (positive = holds, in the check's own unit, named in
//! `margin_unit`); the worst margin is the minimum over cases.

use serde::Serialize;

/// The outcome of running one theorem check.
#[derive(Clone, Debug, Serialize)]
pub struct CheckOutcome {
    /// Registry name of the theorem (`half_space`, `hard_switch`, ...).
    pub theorem: String,
    /// Number of random instances tried.
    pub cases: usize,
    /// Instances on which the statement held.
    pub passed: usize,
    /// Instances on which it failed.
    pub failed: usize,
    /// Minimum margin over all cases (positive = every case held).
    pub worst_margin: f64,
    /// What the margin measures.
    pub margin_unit: String,
    /// One-line human summary (e.g. the first failing case).
    pub detail: String,
}

impl CheckOutcome {
    /// Starts an empty tally.
    pub fn new(theorem: &str, margin_unit: &str) -> Self {
        Self {
            theorem: theorem.to_string(),
            cases: 0,
            passed: 0,
            failed: 0,
            worst_margin: f64::INFINITY,
            margin_unit: margin_unit.to_string(),
            detail: String::new(),
        }
    }

    /// Records one case: `ok` says whether it held, `margin` its margin.
    pub fn record(&mut self, ok: bool, margin: f64, what: impl FnOnce() -> String) {
        self.cases += 1;
        if ok {
            self.passed += 1;
        } else {
            if self.failed == 0 {
                self.detail = what();
            }
            self.failed += 1;
        }
        if margin < self.worst_margin || margin.is_nan() {
            self.worst_margin = margin;
        }
    }

    /// True when every case held and at least one ran.
    pub fn ok(&self) -> bool {
        self.failed == 0 && self.cases > 0
    }
}
