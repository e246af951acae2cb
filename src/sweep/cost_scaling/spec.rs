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
    /// Parses a TOML spec (errors name the spec as `<string>`).
    pub fn from_toml(text: &str) -> Result<Self, SweepError> {
        Self::from_toml_named(text, "<string>")
    }

    /// Parses and validates a TOML spec; `file` names it in errors. Every value that enters a
    /// point is checked for type and range here, so no point fails for a bad spec value.
    pub fn from_toml_named(text: &str, file: &str) -> Result<Self, SweepError> {
        let s: Self = toml::from_str(text).map_err(|e| SweepError::Spec(format!("{file}: {e}")))?;
        s.validate(&Check { file })?;
        Ok(s)
    }

    fn validate(&self, c: &Check<'_>) -> Result<(), SweepError> {
        // The name becomes the Slurm job name and figure titles, one line each.
        if self.name.is_empty() || self.name.chars().any(char::is_control) {
            return Err(c.err(
                "name",
                &format!("{:?}", self.name),
                "must be non-empty and hold no newline or other control character",
            ));
        }
        c.range(
            "bootstrap",
            self.bootstrap as f64,
            1.0,
            MAX_BOOTSTRAP as f64,
        )?;
        for (i, e) in self.exact.iter().enumerate() {
            let k = |n: &str| format!("exact[{i}].{n}");
            c.non_empty(&k("patterns"), e.patterns.len())?;
            c.non_empty(&k("norms"), e.norms.len())?;
            c.non_empty(&k("embeddings"), e.embeddings.len())?;
            c.non_empty(&k("t"), e.t.len())?;
            c.non_empty(&k("seeds"), e.seeds.len())?;
            c.non_empty(&k("scopes"), e.scopes.len())?;
            for &t in &e.t {
                c.range(&k("t"), t as f64, 2.0, f64::MAX)?;
            }
            if let Some(m) = e.max_t_nuclear {
                c.range(&k("max_t_nuclear"), m as f64, 2.0, f64::MAX)?;
            }
            c.range(&k("d_factor"), e.d_factor as f64, 1.0, f64::MAX)?;
            if let Some(d) = e.d {
                c.range(&k("d"), d as f64, 1.0, f64::MAX)?;
            } else if let Some(&t) = e.t.iter().find(|&&t| e.d_factor.checked_mul(t).is_none()) {
                return Err(c.err(
                    &k("d_factor"),
                    &e.d_factor.to_string(),
                    &format!("d = d_factor·T overflows at T = {t}"),
                ));
            }
            if let Some(x) = e.delta {
                // Δ is a logit gap: the routing constraints are margins of Δ, so the W_QK
                // cost scales with Δ and no exponent needs an extreme one, while the solver's
                // squared norms and absolute tolerances leave f64's range near its ends
                // (Δ = 1e-300 gives cost 0, Δ = 1e308 NaN). (1e-6, 1e6) keeps Δ² within
                // 1e±12 of the default Δ = 10 and covers every gap ε gives (ln of a ratio).
                c.open(&k("delta"), x, MIN_DELTA, MAX_DELTA)?;
            }
            if let Some(x) = e.eps {
                c.open(&k("eps"), x, 0.0, 1.0)?;
                // The gap ε implies at each T, Δ = ln((T−1)(1−ε)/ε), obeys Δ's range too
                // (ε near 1 makes it negative: no sink pattern to cost).
                for &t in &e.t {
                    let gap = crate::cost::delta_eps(t.saturating_sub(1), x).unwrap_or(f64::NAN);
                    if !(gap > MIN_DELTA && gap < MAX_DELTA) {
                        return Err(c.err(
                            &k("eps"),
                            &x.to_string(),
                            &format!(
                                "gives the gap Δ = ln((T−1)(1−ε)/ε) = {gap:.3e} at T = {t}, \
                                 outside ({MIN_DELTA}, {MAX_DELTA})"
                            ),
                        ));
                    }
                }
            }
            c.open(&k("tol"), e.tol, 0.0, 1.0)?;
            if let Some(m) = e.max_iter {
                c.range(&k("max_iter"), m as f64, 1.0, f64::MAX)?;
            }
            // A rate outside (0, 1) is refused in every block, not only where a whole-head
            // scope would read it.
            c.open(&k("on_rate"), e.on_rate, 0.0, 1.0)?;
            if e.scopes.contains(&Scope::Head) {
                // Copy-paste needs a source after BOS and a later query.
                for &t in &e.t {
                    c.range(&k("t"), t as f64, 3.0, f64::MAX)?;
                }
            }
            if e.embeddings.contains(&EmbeddingKind::Orthonormal) {
                for &t in &e.t {
                    let d = e.d.unwrap_or(e.d_factor.saturating_mul(t));
                    if d < t {
                        return Err(c.err(
                            &k("d"),
                            &d.to_string(),
                            &format!("orthonormal embeddings need d >= T (T = {t})"),
                        ));
                    }
                }
            }
        }
        self.check_one_gap_per_fit(c)?;
        if let Some(t) = &self.trained {
            let k = |n: &str| format!("trained.{n}");
            c.non_empty(&k("t"), t.t.len())?;
            c.non_empty(&k("seeds"), t.seeds.len())?;
            c.non_empty(&k("variants"), t.variants.len())?;
            for &x in &t.t {
                c.range(&k("t"), x as f64, 4.0, f64::MAX)?;
            }
            if let Some(v) = t.variants.iter().find(|v| *v != "bos" && *v != "masked") {
                return Err(c.err(
                    &k("variants"),
                    &format!("{v:?}"),
                    "unknown variant (bos|masked)",
                ));
            }
            c.range(&k("d"), t.d as f64, 1.0, f64::MAX)?;
            c.range(&k("r"), t.r as f64, 1.0, f64::MAX)?;
            c.range(&k("layers"), t.layers as f64, 1.0, 3.0)?;
            c.range(&k("steps"), t.steps as f64, 1.0, f64::MAX)?;
            c.range(&k("batch"), t.batch as f64, 1.0, f64::MAX)?;
            c.positive(&k("lr"), t.lr)?;
            c.range(&k("weight_decay"), t.weight_decay, 0.0, f64::MAX)?;
            c.range(&k("n"), t.n as f64, 2.0, f64::MAX)?;
            c.range(&k("k"), t.k as f64, 1.0, t.n as f64 - 1.0)?;
            c.positive(&k("alpha"), t.alpha)?;
            if let Some(a) = t.target_acc_on {
                c.range(&k("target_acc_on"), a, 0.0, 1.0)?;
            }
        }
        if self.points().is_empty() {
            return Err(SweepError::Spec(format!(
                "{}: the spec has no points (no [[exact]] block yields one \
                 (max_t_nuclear below every T?) and there is no [trained] part)",
                c.file
            )));
        }
        Ok(())
    }

    /// Refuses two `[[exact]]` blocks whose points fall into one fit group (embedding,
    /// recorded norm, pattern) with different settings ([`ExactSpec::setting`]: width rule,
    /// gap rule, `on_rate`): the fits keep the two apart, but the section's verdict and the
    /// figure's legend read one fit per group, so the spec says which it means.
    fn check_one_gap_per_fit(&self, c: &Check<'_>) -> Result<(), SweepError> {
        use std::collections::BTreeMap;
        let mut seen: BTreeMap<(String, String, String), (usize, String)> = BTreeMap::new();
        for (i, e) in self.exact.iter().enumerate() {
            for emb in &e.embeddings {
                for &scope in &e.scopes {
                    let setting = e.setting(scope);
                    for norm in &e.norms {
                        if !e.t.iter().any(|&t| {
                            *norm != NormKind::Nuclear || e.max_t_nuclear.is_none_or(|m| t <= m)
                        }) {
                            continue;
                        }
                        let norm = match scope {
                            Scope::Qk => norm.to_string(),
                            Scope::Head => format!("head_{norm}"),
                        };
                        for pattern in &e.patterns {
                            let key = (emb.to_string(), norm.clone(), pattern.to_string());
                            match seen.get(&key) {
                                Some((j, other)) if *other != setting => {
                                    return Err(SweepError::Spec(format!(
                                        "{}: `exact[{j}]` ({other}) and `exact[{i}]` ({setting}) \
                                         would share one fit ({} {} {}): one setting per fit; \
                                         put them in separate specs",
                                        c.file, key.0, key.1, key.2
                                    )));
                                }
                                Some(_) => {}
                                None => {
                                    seen.insert(key, (i, setting.clone()));
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads a spec file.
    pub fn load(path: &Path) -> Result<Self, SweepError> {
        Self::from_toml_named(
            &crate::budget::read_text(path, crate::budget::MAX_SPEC_BYTES).map_err(io(path))?,
            &path.display().to_string(),
        )
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
                                    v.push(Point::Exact(
                                        CostQuery {
                                            scope,
                                            on_rate: e.on_rate,
                                            pattern,
                                            norm,
                                            embedding: emb,
                                            t,
                                            d: e.d.unwrap_or(e.d_factor.saturating_mul(t)),
                                            delta: match e.eps {
                                                Some(eps) => {
                                                    cost::delta_eps(t - 1, eps).unwrap_or(f64::NAN)
                                                }
                                                None => e.delta.unwrap_or(10.0),
                                            },
                                            seed,
                                        },
                                        e.solve_options(),
                                        e.setting(scope),
                                    ));
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
                            switches: crate::train::Switches::OFF,
                            freeze_switches: false,
                        }));
                    }
                }
            }
        }
        v
    }
}

impl ExactSpec {
    /// The block's setting as a fit sees it: the width rule (`d = D` or `d_factor = K`), the gap
    /// rule (`eps = E` or `delta = Δ`) and, for the whole-head scope, `on_rate`. Records of one
    /// (embedding, norm, pattern) with two settings are two fits.
    pub fn setting(&self, scope: Scope) -> String {
        let width = match self.d {
            Some(d) => format!("d = {d}"),
            None => format!("d_factor = {}", self.d_factor),
        };
        let gap = match self.eps {
            Some(eps) => format!("eps = {eps}"),
            None => format!("delta = {}", self.delta.unwrap_or(10.0)),
        };
        match scope {
            Scope::Qk => format!("{width}, {gap}"),
            Scope::Head => format!("{width}, {gap}, on_rate = {}", self.on_rate),
        }
    }

    /// Solver options of the block's points: its `tol` and `max_iter` as written.
    pub fn solve_options(&self) -> SolveOptions {
        SolveOptions {
            rel_gap: self.tol,
            max_iter: self.max_iter.unwrap_or(SolveOptions::default().max_iter),
            ..SolveOptions::default()
        }
    }
}

/// Smallest gap Δ a spec may give (exclusive; see the `delta` check).
pub const MIN_DELTA: f64 = 1e-6;
/// Largest gap Δ a spec may give (exclusive).
pub const MAX_DELTA: f64 = 1e6;

/// Most bootstrap resamples a spec may ask for (each costs one least-squares fit per group;
/// the default is 2000).
pub const MAX_BOOTSTRAP: usize = 1_000_000;

/// Range checks of spec values; errors name the file, the key and the value (shared with
/// the other experiments' specs).
pub(crate) struct Check<'a> {
    pub(crate) file: &'a str,
}

impl Check<'_> {
    pub(crate) fn err(&self, key: &str, value: &str, why: &str) -> SweepError {
        SweepError::Spec(format!("{}: `{key}` = {value}: {why}", self.file))
    }
    pub(crate) fn range(&self, key: &str, v: f64, lo: f64, hi: f64) -> Result<(), SweepError> {
        if !(v >= lo && v <= hi) {
            let why = if hi == f64::MAX {
                format!("must be at least {lo}")
            } else {
                format!("must lie in [{lo}, {hi}]")
            };
            return Err(self.err(key, &v.to_string(), &why));
        }
        Ok(())
    }
    pub(crate) fn open(&self, key: &str, v: f64, lo: f64, hi: f64) -> Result<(), SweepError> {
        if !(v > lo && v < hi) {
            return Err(self.err(key, &v.to_string(), &format!("must lie in ({lo}, {hi})")));
        }
        Ok(())
    }
    pub(crate) fn positive(&self, key: &str, v: f64) -> Result<(), SweepError> {
        if !(v > 0.0 && v.is_finite()) {
            return Err(self.err(key, &v.to_string(), "must be positive and finite"));
        }
        Ok(())
    }
    pub(crate) fn distinct<T: PartialEq + std::fmt::Debug>(
        &self,
        key: &str,
        values: &[T],
    ) -> Result<(), SweepError> {
        for (i, v) in values.iter().enumerate() {
            if values[..i].contains(v) {
                return Err(self.err(key, &format!("{values:?}"), &format!("{v:?} is repeated")));
            }
        }
        Ok(())
    }
    pub(crate) fn non_empty(&self, key: &str, len: usize) -> Result<(), SweepError> {
        if len == 0 {
            return Err(self.err(key, "[]", "must not be empty"));
        }
        Ok(())
    }
}
