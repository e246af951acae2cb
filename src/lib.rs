//! # sinklab — attention sinks, checked
//!
//! Theory of attention sinks (sink vs. diagonal patterns, hard/soft switches,
//! oversmoothing, cost of each pattern; secondary sinks) turned into checked
//! statements, sweeps, figures and real-model measurements.
//! See `docs/theory.md` for the statements, `theorems/README.md` for the
//! claim → check map, and `ARCHITECTURE.md` for the code map.

pub mod atomic;
pub mod attention;
pub mod backend;
pub mod budget;
pub mod claims;
pub mod cost;
pub mod explicit_switch;
pub mod fit;
pub mod geometry;
pub mod linalg;
pub mod outcome;
pub mod oversmoothing;
pub mod patterns;
pub mod plot;
pub mod quant;
pub mod real;
pub mod registry;
pub mod report;
pub mod runtime;
pub mod secondary;
pub mod section;
pub mod stats;
pub mod sweep;
pub mod switch;
pub mod synth;
pub mod tasks;
pub mod train;
pub mod view;
