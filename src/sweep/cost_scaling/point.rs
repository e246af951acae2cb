//! One point of the cost-scaling sweep (an exact program or a training run), its records
//! and how they are computed.

use crate::cost::{self, CostQuery, NormKind, Scope, SolveOptions};
use crate::sweep::{SweepPoint, SweepRecord};
use crate::train::{self, TrainConfig};
use serde::{Deserialize, Serialize};

/// One sweep point.
#[derive(Clone, Debug)]
pub enum Point {
    /// An exact program.
    Exact(CostQuery),
    /// A training run.
    Trained(TrainConfig),
}

/// The norms a trained point reports.
pub const TRAINED_NORMS: [&str; 3] = ["fro", "nuclear", "weight_decay"];

impl Point {
    /// Stable identifier (the resume key).
    pub fn id(&self) -> String {
        match self {
            Point::Exact(q) => format!(
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
        }
    }

    /// Number of records the point writes.
    pub fn n_records(&self) -> usize {
        match self {
            Point::Exact(_) => 1,
            Point::Trained(_) => TRAINED_NORMS.len(),
        }
    }

    /// Relative cost (largest points start first).
    pub fn cost_weight(&self) -> f64 {
        match self {
            Point::Exact(q) => {
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

/// Computes the records of one point.
pub fn compute(p: &Point, opts: SolveOptions) -> Vec<Record> {
    let start = std::time::Instant::now();
    match p {
        Point::Exact(q) => {
            let (sol, err) = match cost::solve_query(q, opts) {
                Ok(s) => (Some(s), None),
                Err(e) => (None, Some(e.to_string())),
            };
            vec![Record {
                id: p.id(),
                pattern: q.pattern.to_string(),
                norm: match q.scope {
                    Scope::Qk => q.norm.to_string(),
                    Scope::Head => format!("head_{}", q.norm),
                },
                source: "exact".into(),
                embedding: q.embedding.to_string(),
                t: q.t,
                d: q.d,
                seed: q.seed,
                value: sol.as_ref().and_then(|s| s.value),
                lower: sol.as_ref().and_then(|s| s.lower),
                rel_gap: sol.as_ref().and_then(|s| s.rel_gap),
                feasible: sol.as_ref().map(|s| s.feasible),
                delta: Some(q.delta),
                learned: None,
                sink_score: None,
                diagonal_score: None,
                acc_on: None,
                acc_off: None,
                converged: None,
                steps_run: None,
                error: err,
                seconds: start.elapsed().as_secs_f64(),
            }]
        }
        Point::Trained(c) => {
            let rep = train::train(c, |_, _| {});
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
                        id: p.id(),
                        pattern: pattern.into(),
                        norm: norm.into(),
                        source: "trained".into(),
                        embedding: "trained".into(),
                        t: c.t,
                        d: c.d,
                        seed: c.seed,
                        value,
                        lower: None,
                        rel_gap: None,
                        feasible: None,
                        delta: None,
                        learned,
                        sink_score: ss,
                        diagonal_score: ds,
                        acc_on: aon,
                        acc_off: aoff,
                        converged: rep.as_ref().ok().and_then(|r| r.converged),
                        steps_run: rep.as_ref().ok().map(|r| r.steps_run),
                        error: err,
                        seconds: start.elapsed().as_secs_f64(),
                    }
                })
                .collect()
        }
    }
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
}
