//! # sinklab — attention sinks, checked
//!
//! Theory of attention sinks (sink vs. diagonal patterns, hard/soft switches,
//! oversmoothing, cost of each pattern; secondary sinks) turned into checked
//! statements, sweeps, figures and real-model measurements.
//! See `docs/theory.md` for the statements, `theorems/README.md` for the
//! claim → check map, `ARCHITECTURE.md` for the code map, and `docs/library.md`
//! for using sinklab as a library.
//!
//! ## Module map
//!
//! With `default-features = false` the crate is its mathematical core, on faer, rand and
//! rayon (and serde, serde_json, toml, thiserror, sha2, bytemuck, rand_distr): every module
//! below marked "core". The features, all on by default, add the rest.
//!
//! | module | feature | what it is |
//! |---|---|---|
//! | [`attention`] | core | softmax attention, masks, heads and blocks |
//! | [`patterns`] | core | sink and diagonal patterns, the concentration gap $\Delta_\varepsilon(m)$ |
//! | [`geometry`] | core | the half-space theorem with verified certificates |
//! | [`switch`] | core | hard and soft switches |
//! | [`explicit_switch`] | core | a learned sink logit and an output gate as switches |
//! | [`oversmoothing`] | core | mixing, its prediction and checks |
//! | [`cost`] | core | minimal cost of a pattern: closed forms and the exact programs |
//! | [`tasks`] | core | the synthetic tasks (bigram copy, copy-paste) |
//! | [`train`] | core | one-layer training on any backend (the CPU in the core) |
//! | [`sweep`] | core | the resumable, sharded sweep engine and the cost-scaling sweep |
//! | [`linalg`], [`stats`], [`fit`], [`outcome`] | core | linear algebra, statistics, power-law fits, check outcomes |
//! | [`backend`] | core | dense kernels on the CPU (faer); `backend::gpu` needs `gpu` |
//! | [`atomic`], [`budget`], [`section`] | core | atomic file writes, resource budgets, report-section types |
//! | [`runtime`], [`quant`], [`synth`] | `runtime` | real-model files, tokenizers, forward with capture; quantized kernels; synthetic GGUF |
//! | [`plot`], [`claims`] | `plot` | figures (SVG, PNG); the claims' report sections |
//! | [`real`], [`secondary`], [`registry`] | `runtime` + `plot` | the studies on real models; the theorem-check registry |
//! | [`view`], [`report`] | `view` | the HTML viewer and the report |
//!
//! In [`sweep`], the figures and the report section of the cost-scaling sweep
//! (`sweep::cost_scaling::{figures, section}`) need `plot`. The `sinklab` binary needs `cli`
//! (which turns on every other feature).
//!
//! ## A first example
//!
//! Can one bilinear head make the first token a sink for every query? The half-space theorem
//! says yes iff the queries lie in an open half-space and the sink lies outside the hull of
//! the other keys; [`geometry::half_space_verdict_rows`] decides it and returns a verified
//! certificate.
//!
//! ```
//! use sinklab::geometry::{Verdict, half_space_verdict_rows};
//!
//! // Two queries on the same side of a hyperplane through 0, a sink outside the other keys.
//! let queries: [&[f64]; 2] = [&[1.0, 0.2], &[0.8, -0.3]];
//! let sink = [2.0, 0.0];
//! let keys: [&[f64]; 2] = [&[0.0, 1.0], &[0.0, -1.0]];
//! let eps = 0.05; // sink mass at least 1 − ε on every query
//! let verdict = half_space_verdict_rows(&queries, &sink, &keys, eps).unwrap();
//! match &verdict {
//!     Verdict::Representable(w) => {
//!         let check = w.verify(&queries, &sink, &keys);
//!         assert!(check.ok && check.worst_sink_mass >= 1.0 - eps);
//!     }
//!     Verdict::NotRepresentable(_) => unreachable!("both conditions hold here"),
//! }
//!
//! // Move the sink into the hull of the other keys: condition (b) fails, with weights.
//! let inside = [0.0, 0.0];
//! let verdict = half_space_verdict_rows(&queries, &inside, &keys, eps).unwrap();
//! assert!(verdict.sink_fails() && verdict.verify(&queries, &inside, &keys));
//! ```

pub mod atomic;
pub mod attention;
pub mod backend;
pub mod budget;
#[cfg(feature = "plot")]
pub mod claims;
pub mod cost;
pub mod explicit_switch;
pub mod fit;
pub mod geometry;
pub mod linalg;
pub mod outcome;
pub mod oversmoothing;
pub mod patterns;
#[cfg(feature = "plot")]
pub mod plot;
#[cfg(feature = "runtime")]
pub mod quant;
#[cfg(all(feature = "runtime", feature = "plot"))]
pub mod real;
#[cfg(all(feature = "runtime", feature = "plot"))]
pub mod registry;
#[cfg(feature = "view")]
pub mod report;
#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(all(feature = "runtime", feature = "plot"))]
pub mod secondary;
pub mod section;
pub mod stats;
pub mod sweep;
pub mod switch;
#[cfg(feature = "runtime")]
pub mod synth;
pub mod tasks;
pub mod train;
#[cfg(feature = "view")]
pub mod view;
