//! Secondary attention sinks (paper B, docs/theory.md §8): the detector with its
//! labels, lifetimes and levels ([`detector`]) on plain hidden-state tensors
//! ([`hidden`]), per-sink records and the B1–B6 measurements from captured
//! activations ([`records`], [`activations`]), and the synthetic analogue of
//! claim B3 ([`synthetic`]).

/// The activation-file reader lives in [`crate::runtime::activation_file`] (paper A's
/// `real --activations` reads the same files); re-exported here under its old path.
pub use crate::runtime::activation_file as activations;
pub mod detector;
pub mod dose;
pub mod figures;
pub mod findings;
/// Hidden-state tensors, in [`crate::runtime::hidden`]; re-exported under the old path.
pub use crate::runtime::hidden;
pub mod long;
pub mod native;
pub mod records;
pub mod run;
pub mod section;
pub mod synthetic;
pub mod verdict;

pub use detector::{
    DetectError, Detection, DetectorParams, Label, LabelRule, Level, LevelSummary, Sink,
    WindowMode, detect, level_summary, levels,
};
pub use hidden::{HiddenStates, ShapeError};
