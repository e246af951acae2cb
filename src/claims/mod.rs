//! The presentation of the claims: one file per claim with its report section and
//! its figure, above the math.
//!
//! Every claim has the same shape:
//! - its math in a math module (`switch`, `geometry`, `oversmoothing`, `cost`, …),
//!   which imports no file system, plotting, report or training code;
//! - its checks next to the math (functions `fn(cases, seed) -> CheckOutcome`,
//!   [`crate::outcome::CheckOutcome`] being a leaf type), registered in
//!   [`crate::registry::registry`];
//! - its report section and figure here, `claims::<claim>::section`, registered in
//!   [`crate::report::sections`].
//!
//! Sections of the experiments (the cost-scaling sweep, real models, secondary
//! sinks) live with their experiment and are registered the same way.

/// Needs the real-model results (`runtime`).
#[cfg(feature = "runtime")]
pub mod cost_definitions;
pub mod half_space;
pub mod oversmoothing;
pub mod switch;
