//! One point of the cost-scaling sweep (an exact program or a training run), its records
//! and how they are computed.

use crate::backend::{BackendError, BackendKind, Cpu};
use crate::cost::{self, CostQuery, NormKind, Scope, SolveOptions};
use crate::sweep::{SweepPoint, SweepRecord};
use crate::train::embeddings::TrainedEmbeddings;
use crate::train::{self, TrainConfig};
use serde::{Deserialize, Serialize};
use std::io::Write as _;

/// One sweep point.
#[derive(Clone, Debug)]
pub enum Point {
    /// An exact program, solved with the options of its `[[exact]]` block; the third field is
    /// the block's setting ([`super::spec::ExactSpec::setting`]: its width and gap rules), what
    /// keeps records of two blocks in two fits.
    Exact(CostQuery, SolveOptions, String),
    /// A training run.
    Trained(TrainConfig),
}

/// The norms a trained point reports.
pub const TRAINED_NORMS: [&str; 3] = ["fro", "nuclear", "weight_decay"];

/// Version of what a point computes, hashed into every id: bump it when the solver, the
/// trained-embedding recipe or the training loop changes the records a point writes.
pub const COMPUTE_VERSION: u32 = 1;

/// Everything that can change the records of a point, as hashed into its id.
#[derive(Serialize)]
struct Identity<'a> {
    crate_version: &'static str,
    compute_version: u32,
    #[serde(flatten)]
    point: IdentityPoint<'a>,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum IdentityPoint<'a> {
    Exact {
        query: &'a CostQuery,
        rel_gap: f64,
        max_iter: usize,
        feas_iter: usize,
        /// The recipe of trained embeddings (only these use it).
        trained_embedding_steps: Option<usize>,
    },
    Trained {
        config: &'a TrainConfig,
    },
}

impl Point {
    /// Stable identifier (the resume key): a readable prefix and a hash of every parameter
    /// that can change the point's records ([`COMPUTE_VERSION`], the crate version, the whole
    /// query or training configuration and, for exact points, the solver options). The dense
    /// backend of trained points is not in it: the cpu and gpu paths agree within f32
    /// tolerance (BENCHMARKS.md), so a sweep may be resumed on either.
    pub fn id(&self) -> String {
        let readable = match self {
            Point::Exact(q, ..) => format!(
                "exact/{}/{}/{}/t{}/d{}/s{}/delta{}{}",
                q.pattern,
                q.norm,
                q.embedding,
                q.t,
                q.d,
                q.seed,
                q.delta,
                match q.scope {
                    Scope::Qk => String::new(),
                    Scope::Head => format!("/head{}", q.on_rate),
                }
            ),
            Point::Trained(c) => format!(
                "trained/{}/t{}/d{}/s{}/steps{}/wd{}/lr{}/b{}{}",
                if c.mask_bos_key { "masked" } else { "bos" },
                c.t,
                c.d,
                c.seed,
                c.steps,
                c.weight_decay,
                c.lr,
                c.batch,
                c.target_acc_on
                    .map_or(String::new(), |a| format!("/acc{a}"))
            ),
        };
        let point = match self {
            Point::Exact(q, o, _) => IdentityPoint::Exact {
                query: q,
                rel_gap: o.rel_gap,
                max_iter: o.max_iter,
                feas_iter: o.feas_iter,
                trained_embedding_steps: (q.embedding == cost::EmbeddingKind::Trained)
                    .then_some(crate::train::embeddings::STEPS),
            },
            Point::Trained(c) => IdentityPoint::Trained { config: c },
        };
        let identity = Identity {
            crate_version: env!("CARGO_PKG_VERSION"),
            compute_version: COMPUTE_VERSION,
            point,
        };
        // Serialising plain numbers, strings and enums cannot fail.
        let canonical = serde_json::to_string(&identity).unwrap_or_default();
        format!("{readable}#{}", crate::sweep::hash_hex(&canonical, 16))
    }

    /// Number of records the point writes.
    pub fn n_records(&self) -> usize {
        match self {
            Point::Exact(..) => 1,
            Point::Trained(_) => TRAINED_NORMS.len(),
        }
    }

    /// Relative cost (largest points start first).
    pub fn cost_weight(&self) -> f64 {
        match self {
            Point::Exact(q, ..) => {
                (q.t as f64).powi(3)
                    * if q.norm == NormKind::Nuclear {
                        20.0
                    } else {
                        1.0
                    }
            }
            Point::Trained(c) => (c.t * c.batch * c.steps * c.d) as f64 * 50.0,
        }
    }
}

/// One line of `results.jsonl`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// Point id.
    pub id: String,
    /// `sink` or `diagonal` (for trained points: the pattern the variant makes available).
    pub pattern: String,
    /// Cost definition: `fro`, `nuclear`, `weight_decay`.
    pub norm: String,
    /// `exact` or `trained`.
    pub source: String,
    /// Embedding family (`trained` for learned embeddings).
    pub embedding: String,
    /// Context length.
    pub t: usize,
    /// Width.
    pub d: usize,
    /// Seed.
    pub seed: u64,
    /// The cost (None when infeasible or failed).
    pub value: Option<f64>,
    /// Certified lower bound (exact).
    #[serde(default)]
    pub lower: Option<f64>,
    /// Relative duality gap (exact).
    #[serde(default)]
    pub rel_gap: Option<f64>,
    /// Feasibility (exact).
    #[serde(default)]
    pub feasible: Option<bool>,
    /// Gap Δ (exact).
    #[serde(default)]
    pub delta: Option<f64>,
    /// Every parameter of the point's block that changes the math beyond T and the seed (exact:
    /// the width rule `d_factor`/`d`, the gap rule `delta`/`eps`, the head scope's `on_rate`;
    /// trained: the configuration): part of the fit group, so two settings are never pooled.
    /// Empty in records written before it existed.
    #[serde(default)]
    pub setting: String,
    /// Pattern the off-queries learned (trained).
    #[serde(default)]
    pub learned: Option<String>,
    /// Off-query sink score (trained).
    #[serde(default)]
    pub sink_score: Option<f64>,
    /// Off-query diagonal score (trained).
    #[serde(default)]
    pub diagonal_score: Option<f64>,
    /// On-query accuracy (trained).
    #[serde(default)]
    pub acc_on: Option<f64>,
    /// Off-query accuracy (trained).
    #[serde(default)]
    pub acc_off: Option<f64>,
    /// Whether the run met its convergence criterion (trained, with a criterion).
    #[serde(default)]
    pub converged: Option<bool>,
    /// Optimiser steps run (trained).
    #[serde(default)]
    pub steps_run: Option<usize>,
    /// Error message when the point failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Seconds spent.
    pub seconds: f64,
}

/// What the points of one run share, owned by the run and passed to every point.
#[derive(Debug)]
pub struct PointContext {
    /// The device of the trained points (`None`: the CPU).
    #[cfg(feature = "gpu")]
    pub gpu: Option<std::sync::Arc<crate::backend::Wgpu>>,
    /// Threads the CPU backend of a trained point splits its large products over
    /// ([`Cpu::with_threads`]).
    pub threads: usize,
    /// The trained embeddings of the exact points, trained once per run.
    pub trained: TrainedEmbeddings,
}

impl PointContext {
    /// Trained points on the CPU with `threads`, an empty embedding cache.
    pub fn cpu(threads: usize) -> Self {
        Self {
            #[cfg(feature = "gpu")]
            gpu: None,
            threads,
            trained: TrainedEmbeddings::new(threads),
        }
    }

    /// Trained points on the backend `kind` resolves to ([`crate::backend::select`]), with
    /// `threads` on the CPU; the selection's note goes to stderr when `show_progress`.
    #[cfg(feature = "gpu")]
    pub fn on(
        kind: BackendKind,
        threads: usize,
        show_progress: bool,
    ) -> Result<Self, BackendError> {
        let sel = crate::backend::select(kind, &crate::backend::GpuOptions::default())?;
        if show_progress {
            let _ = writeln!(std::io::stderr(), "{}", sel.note());
        }
        Ok(Self {
            gpu: sel.gpu(),
            ..Self::cpu(threads)
        })
    }

    /// Without the `gpu` feature: the CPU for `cpu` and `auto`, a refusal
    /// ([`BackendError::NotBuilt`]) for `gpu`.
    #[cfg(not(feature = "gpu"))]
    pub fn on(
        kind: BackendKind,
        threads: usize,
        show_progress: bool,
    ) -> Result<Self, BackendError> {
        let note = match kind {
            BackendKind::Gpu => return Err(BackendError::NotBuilt),
            BackendKind::Cpu => "backend: cpu (faer)",
            BackendKind::Auto => "backend: auto → cpu (faer): built without the `gpu` feature",
        };
        if show_progress {
            let _ = writeln!(std::io::stderr(), "{note}");
        }
        Ok(Self::cpu(threads))
    }

    /// Trains `c` on this context's device: its GPU when there is one, else the CPU.
    pub(crate) fn train(&self, c: &TrainConfig) -> Result<train::TrainReport, train::TrainError> {
        #[cfg(feature = "gpu")]
        if let Some(g) = &self.gpu {
            return train::train_on(&**g, c, |_, _| {});
        }
        train::train_on(&Cpu::<f32>::with_threads(self.threads), c, |_, _| {})
    }
}

/// Computes the records of one point; a trained point runs on `ctx.gpu` when there is one,
/// else on the CPU (exact points, trained embeddings included, always run on the CPU, their
/// solver sequential: the points run in parallel).
pub fn compute(p: &Point, ctx: &PointContext) -> Vec<Record> {
    let start = std::time::Instant::now();
    match p {
        Point::Exact(q, opts, setting) => {
            let (sol, err) = match crate::train::embeddings::solve_query(q, *opts, &ctx.trained) {
                Ok(s) => (Some(s), None),
                Err(e) => (None, Some(e.to_string())),
            };
            let norm = match q.scope {
                Scope::Qk => q.norm.to_string(),
                Scope::Head => format!("head_{}", q.norm),
            };
            let (embedding, shape) = (q.embedding.to_string(), (q.t, q.d, q.seed));
            vec![Record {
                value: sol.as_ref().and_then(|s| s.value),
                lower: sol.as_ref().and_then(|s| s.lower),
                rel_gap: sol.as_ref().and_then(|s| s.rel_gap),
                feasible: sol.as_ref().map(|s| s.feasible),
                delta: Some(q.delta),
                setting: setting.clone(),
                error: err,
                seconds: start.elapsed().as_secs_f64(),
                ..blank(p, q.pattern.to_string(), norm, "exact", embedding, shape)
            }]
        }
        Point::Trained(c) => {
            let rep = ctx.train(c);
            let pattern = if c.mask_bos_key { "diagonal" } else { "sink" };
            TRAINED_NORMS
                .iter()
                .map(|&norm| {
                    let (value, learned, ss, ds, aon, aoff, err) = match &rep {
                        Ok(r) => {
                            let c0 = &r.costs[0];
                            let v = match norm {
                                "fro" => Some(c0.qk_fro),
                                "nuclear" => Some(c0.qk_nuclear),
                                _ => c0.qk_weight_decay,
                            };
                            let pt = &r.patterns[0];
                            if !r.eval_loss.is_finite() || v.is_some_and(|x| !x.is_finite()) {
                                // A diverged run is a failure (retried on resume), never a cost.
                                let msg = format!(
                                    "training produced a non-finite model (eval loss {}, {norm} cost {v:?})",
                                    r.eval_loss
                                );
                                return Record {
                                    error: Some(msg),
                                    seconds: start.elapsed().as_secs_f64(),
                                    ..failed_trained(p, c, pattern, norm)
                                };
                            }
                            (
                                v,
                                Some(pt.learned.clone()),
                                Some(pt.sink),
                                Some(pt.diagonal),
                                Some(r.acc_on),
                                Some(r.acc_off),
                                None,
                            )
                        }
                        Err(e) => (None, None, None, None, None, None, Some(e.to_string())),
                    };
                    Record {
                        value,
                        learned,
                        sink_score: ss,
                        diagonal_score: ds,
                        acc_on: aon,
                        acc_off: aoff,
                        converged: rep.as_ref().ok().and_then(|r| r.converged),
                        steps_run: rep.as_ref().ok().map(|r| r.steps_run),
                        error: err,
                        seconds: start.elapsed().as_secs_f64(),
                        ..failed_trained(p, c, pattern, norm)
                    }
                })
                .collect()
        }
    }
}

/// The record of a trained point with no result (yet): identity fields only.
fn failed_trained(p: &Point, c: &TrainConfig, pattern: &str, norm: &str) -> Record {
    let shape = (c.t, c.d, c.seed);
    Record {
        setting: trained_setting(c),
        ..blank(
            p,
            pattern.into(),
            norm.into(),
            "trained",
            "trained".into(),
            shape,
        )
    }
}

/// A record with the identity fields of point `p` (`(t, d, seed)` in `shape`) and no result.
fn blank(
    p: &Point,
    pattern: String,
    norm: String,
    source: &str,
    embedding: String,
    (t, d, seed): (usize, usize, u64),
) -> Record {
    Record {
        id: p.id(),
        pattern,
        norm,
        source: source.into(),
        embedding,
        t,
        d,
        seed,
        value: None,
        lower: None,
        rel_gap: None,
        feasible: None,
        delta: None,
        setting: String::new(),
        learned: None,
        sink_score: None,
        diagonal_score: None,
        acc_on: None,
        acc_off: None,
        converged: None,
        steps_run: None,
        error: None,
        seconds: 0.0,
    }
}

/// The setting of a trained point: its whole configuration except the two coordinates a fit
/// runs over (`t`, `seed`) and the variant (`mask_bos_key`, already the record's pattern), as
/// canonical JSON, so runs of different widths, ranks, steps or
/// learning rates never share a fit.
fn trained_setting(c: &TrainConfig) -> String {
    let mut v = serde_json::to_value(c).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.remove("t");
        m.remove("seed");
        m.remove("mask_bos_key");
    }
    v.to_string()
}

impl SweepPoint for Point {
    fn id(&self) -> String {
        Point::id(self)
    }
    fn n_records(&self) -> usize {
        Point::n_records(self)
    }
    fn weight(&self) -> f64 {
        self.cost_weight()
    }
}

impl SweepRecord for Record {
    fn point_id(&self) -> &str {
        &self.id
    }
    fn part(&self) -> &str {
        &self.norm
    }
    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}
