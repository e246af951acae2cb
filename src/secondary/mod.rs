//! Secondary attention sinks (paper B, THEORY.md §8): the detector with its
//! labels, lifetimes and levels ([`detector`]) on plain hidden-state tensors
//! ([`hidden`]), per-sink records and the B1–B6 measurements from captured
//! activations ([`records`], [`activations`]), and the synthetic analogue of
//! claim B3 ([`synthetic`]).

pub mod activations;
pub mod detector;
pub mod figures;
pub mod hidden;
pub mod records;
pub mod report;
pub mod synthetic;

pub use detector::{
    DetectError, Detection, DetectorParams, Label, LabelRule, Level, LevelSummary, Sink, WindowMode, detect, level_summary,
    levels,
};
pub use hidden::{HiddenStates, Scalar, ShapeError};

/// Gu et al.'s importance $\alpha_k = \frac{1}{T-k}\sum_{i \ge k} A_{ik}$ of every key
/// (0-based, causal).
// Temporary: replaced by `crate::patterns` (one definition per metric) when it lands on main.
pub(crate) fn gu_alpha(a: faer::MatRef<'_, f64>) -> Vec<f64> {
    let t = a.nrows();
    (0..t).map(|k| (k..t).map(|i| a[(i, k)]).sum::<f64>() / (t - k) as f64).collect()
}
