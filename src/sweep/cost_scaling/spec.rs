//! The spec of the cost-scaling sweep (`sims/cost_scaling.toml`) and its points.

use super::point::Point;
use crate::cost::{self, CostQuery, EmbeddingKind, NormKind, Pattern, Scope, SolveOptions};
use crate::sweep::{SweepError, io};
use crate::train::{AttnForm, TaskSpec, TrainConfig};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Exact-cost part of a spec.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExactSpec {
    /// Patterns.
    pub patterns: Vec<Pattern>,
    /// Cost definitions.
    pub norms: Vec<NormKind>,
    /// Embedding families.
    pub embeddings: Vec<EmbeddingKind>,
    /// Context lengths.
    pub t: Vec<usize>,
    /// Largest T for the nuclear norm (its prox needs an SVD per iteration).
    #[serde(default)]
    pub max_t_nuclear: Option<usize>,
    /// $d = $ `d_factor`·T (at least 1; orthonormal embeddings need ≥ 1).
    #[serde(default = "one")]
    pub d_factor: usize,
    /// A fixed width $d$ for every T (overrides `d_factor`).
    #[serde(default)]
    pub d: Option<usize>,
    /// Seeds (orthonormal embeddings use only the first: the costs are rotation invariant).
    pub seeds: Vec<u64>,
    /// Fixed gap Δ (default 10). Ignored when `eps` is set.
    #[serde(default)]
    pub delta: Option<f64>,
    /// Leak ε: Δ = ln((T−1)(1−ε)/ε) per T.
    #[serde(default)]
    pub eps: Option<f64>,
    /// Relative duality gap at which the solver stops.
    #[serde(default = "default_tol")]
    pub tol: f64,
    /// Iteration budget of the primal–dual solver (default 20 000).
    #[serde(default)]
    pub max_iter: Option<usize>,
    /// What is priced: `qk` ($W_{QK}$ alone, default) and/or `head` (the whole head on
    /// copy-paste, recorded as cost `head_fro` / `head_nuclear`).
    #[serde(default = "default_scopes")]
    pub scopes: Vec<Scope>,
    /// Fraction of on-queries of the whole-head programs.
    #[serde(default = "default_on_rate")]
    pub on_rate: f64,
}

fn default_scopes() -> Vec<Scope> {
    vec![Scope::Qk]
}
fn default_on_rate() -> f64 {
    cost::head::DEFAULT_ON_RATE
}

fn one() -> usize {
    1
}
fn default_tol() -> f64 {
    1e-3
}

/// Trained-model part of a spec (bigram-copy, one factored layer).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainedSpec {
    /// Context lengths.
    pub t: Vec<usize>,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Variants: `bos` (BOS key visible: a sink is available) and `masked` (BOS key masked).
    pub variants: Vec<String>,
    /// Width.
    pub d: usize,
    /// Head dimension (factored form).
    pub r: usize,
    /// Layers.
    #[serde(default = "one")]
    pub layers: usize,
    /// MLP hidden width.
    #[serde(default)]
    pub mlp_hidden: usize,
    /// Steps.
    pub steps: usize,
    /// Batch.
    pub batch: usize,
    /// Learning rate.
    pub lr: f64,
    /// Weight decay.
    pub weight_decay: f64,
    /// Vocabulary (without BOS).
    pub n: usize,
    /// Triggers.
    pub k: usize,
    /// Dirichlet concentration of the bigram rows.
    pub alpha: f64,
    /// Convergence criterion: stop a run once its on-query accuracy on a probe set reaches
    /// this value (`steps` is the budget); runs that never reach it are recorded with
    /// `converged = false` and left out of the fits.
    #[serde(default)]
    pub target_acc_on: Option<f64>,
}

/// A sweep spec (`sims/<name>.toml`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Name (used in figure titles).
    pub name: String,
    /// Bootstrap resamples of the fits.
    #[serde(default = "default_boot")]
    pub bootstrap: usize,
    /// Exact programs (`[[exact]]` blocks).
    #[serde(default)]
    pub exact: Vec<ExactSpec>,
    /// Trained models.
    pub trained: Option<TrainedSpec>,
    /// Dense backend of the trained part: `cpu`, `gpu` or `auto` (default cpu;
    /// `sinklab sweep --backend` overrides).
    #[serde(default)]
    pub backend: crate::backend::BackendKind,
}

fn default_boot() -> usize {
    2000
}

impl SweepSpec {
    /// Parses a TOML spec.
    pub fn from_toml(text: &str) -> Result<Self, SweepError> {
        let s: Self = toml::from_str(text).map_err(|e| SweepError::Spec(e.to_string()))?;
        for e in &s.exact {
            if e.t.iter().any(|&t| t < 2) || e.seeds.is_empty() || e.d_factor == 0 {
                return Err(SweepError::Spec(
                    "exact: need T >= 2, a seed, d_factor >= 1".into(),
                ));
            }
        }
        if let Some(t) = &s.trained {
            if t.t.iter().any(|&x| x < 4) || t.seeds.is_empty() {
                return Err(SweepError::Spec("trained: need T >= 4 and a seed".into()));
            }
            if let Some(v) = t.variants.iter().find(|v| *v != "bos" && *v != "masked") {
                return Err(SweepError::Spec(format!(
                    "trained: unknown variant '{v}' (bos|masked)"
                )));
            }
        }
        Ok(s)
    }

    /// Reads a spec file.
    pub fn load(path: &Path) -> Result<Self, SweepError> {
        Self::from_toml(&std::fs::read_to_string(path).map_err(io(path))?)
    }

    /// Every point, in a fixed order.
    pub fn points(&self) -> Vec<Point> {
        let mut v = Vec::new();
        for e in &self.exact {
            for &emb in &e.embeddings {
                for &scope in &e.scopes {
                    // Orthonormal W_QK costs are rotation invariant: one seed. The whole head
                    // also draws its copy-paste sources from the seed, so it keeps them all.
                    let seeds: &[u64] = if emb == EmbeddingKind::Orthonormal && scope == Scope::Qk {
                        &e.seeds[..1]
                    } else {
                        &e.seeds
                    };
                    for &t in &e.t {
                        for &norm in &e.norms {
                            if norm == NormKind::Nuclear && e.max_t_nuclear.is_some_and(|m| t > m) {
                                continue;
                            }
                            for &pattern in &e.patterns {
                                for &seed in seeds {
                                    v.push(Point::Exact(CostQuery {
                                        scope,
                                        on_rate: e.on_rate,
                                        pattern,
                                        norm,
                                        embedding: emb,
                                        t,
                                        d: e.d.unwrap_or(e.d_factor * t),
                                        delta: match e.eps {
                                            Some(eps) => {
                                                cost::delta_eps(t - 1, eps).unwrap_or(f64::NAN)
                                            }
                                            None => e.delta.unwrap_or(10.0),
                                        },
                                        seed,
                                    }));
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Some(tr) = &self.trained {
            for &t in &tr.t {
                for variant in &tr.variants {
                    for &seed in &tr.seeds {
                        v.push(Point::Trained(TrainConfig {
                            task: TaskSpec::BigramCopy {
                                n: tr.n,
                                k: tr.k,
                                alpha: tr.alpha,
                            },
                            t,
                            d: tr.d,
                            layers: tr.layers,
                            attn: AttnForm::Factored { r: tr.r },
                            mlp_hidden: tr.mlp_hidden,
                            bos: true,
                            mask_bos_key: variant == "masked",
                            batch: tr.batch,
                            steps: tr.steps,
                            lr: tr.lr,
                            weight_decay: tr.weight_decay,
                            seed,
                            eval_batch: 32,
                            target_acc_on: tr.target_acc_on,
                        }));
                    }
                }
            }
        }
        v
    }

    /// Solver options of the exact points: the smallest `tol` (at most 1e-3) and the
    /// largest `max_iter` of the exact blocks.
    pub fn solve_options(&self) -> SolveOptions {
        SolveOptions {
            rel_gap: self
                .exact
                .iter()
                .map(|e| e.tol)
                .fold(f64::INFINITY, f64::min)
                .min(1e-3),
            max_iter: self
                .exact
                .iter()
                .filter_map(|e| e.max_iter)
                .fold(SolveOptions::default().max_iter, usize::max),
            ..SolveOptions::default()
        }
    }
}
