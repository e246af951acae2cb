//! Half-space geometry of sinks (docs/theory.md §3, claim A1), with certificates.
//!
//! * [`hull`] — distance from a point to a convex hull (Wolfe's minimum-norm
//!   point): a separating direction or convex weights, each with a `verify`.
//! * [`half_space`] — the half-space theorem: a bilinear head can put sink mass
//!   $\ge 1-\varepsilon$ on every query iff (a) $0\notin\mathrm{conv}(Q)$ and
//!   (b) $s\notin\mathrm{conv}(K)$; the verdict carries a witness $W = c\thinspace ab^\top$
//!   (checked by computing the attention) or convex weights (checked by arithmetic).
//!   Also the cosine corollary and the biased (homogenized) case.
//! * [`sample`] — seeded configurations built to satisfy or violate (a) and (b).
//! * [`check`] — the registered theorem checks and the report section/figure.

pub mod check;
pub mod half_space;
pub mod hull;
pub mod sample;

pub use half_space::{
    Obstruction, SinkWitness, Verdict, WitnessCheck, corollary_witness, half_space_verdict,
    half_space_verdict_biased, half_space_verdict_rows, homogenize, verify_sink_witness,
};
pub use hull::{ConvexWeights, HULL_TOL, HullVerdict, Separator, hull_verdict};

/// Errors of the geometry module (bad input or an inconclusive solve).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GeometryError {
    /// A point set that must be non-empty is empty.
    #[error("{what}: empty point set")]
    Empty {
        /// Which input.
        what: &'static str,
    },
    /// Points of dimension 0.
    #[error("{what}: points of dimension 0")]
    ZeroDimension {
        /// Which input.
        what: &'static str,
    },
    /// A row of the wrong length.
    #[error("{what}: row {row} has dimension {got}, expected {expected}")]
    Dimension {
        /// Which input.
        what: &'static str,
        /// Offending row.
        row: usize,
        /// Its length.
        got: usize,
        /// The expected length.
        expected: usize,
    },
    /// A NaN or infinite coordinate (`row == usize::MAX` for the target point).
    #[error("{what}: non-finite coordinate at row {row}, column {col}")]
    NonFinite {
        /// Which input.
        what: &'static str,
        /// Offending row.
        row: usize,
        /// Offending column.
        col: usize,
    },
    /// ε outside $(0, m/(m+1))$: $\Delta_\varepsilon(m) \le 0$, uniform
    /// attention already meets the target and no sink is needed.
    #[error("ε = {eps} out of range: need 0 < ε < m/(m+1) with m = {m} non-sink keys")]
    Epsilon {
        /// The ε given.
        eps: f64,
        /// Number of non-sink keys.
        m: usize,
    },
    /// Neither certificate could be verified (should not happen; reported
    /// rather than guessed).
    #[error(
        "solver inconclusive: distance {distance:e} at scale {scale:e} after {iterations} iterations"
    )]
    Inconclusive {
        /// Last distance estimate.
        distance: f64,
        /// Data scale.
        scale: f64,
        /// Major iterations run.
        iterations: usize,
    },
    /// A witness was built but failed its own attention check (should not happen).
    #[error("witness failed verification: worst sink mass {worst_mass} < 1 − ε = {target}")]
    WitnessFailed {
        /// Worst sink mass computed.
        worst_mass: f64,
        /// Required mass.
        target: f64,
    },
}
