//! Secondary attention sinks (paper B, THEORY.md §8): the detector with its
//! labels, lifetimes and levels ([`detector`]) on plain hidden-state tensors
//! ([`hidden`]), per-sink records and the B1–B6 measurements from captured
//! activations ([`records`], [`activations`]), and the synthetic analogue of
//! claim B3 ([`synthetic`]).

pub mod activations;
pub mod detector;
pub mod figures;
pub mod hidden;
pub mod long;
pub mod native;
pub mod records;
pub mod report;
pub mod run;
pub mod synthetic;
pub mod verdict;

pub use detector::{
    DetectError, Detection, DetectorParams, Label, LabelRule, Level, LevelSummary, Sink,
    WindowMode, detect, level_summary, levels,
};
pub use hidden::{HiddenStates, Scalar, ShapeError};
