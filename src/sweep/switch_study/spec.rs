//! The spec of the switch study (`sims/switch_study.toml`) and its points.

use super::point::{StudyPoint, Task, Variant};
use crate::sweep::cost_scaling::spec::Check;
use crate::sweep::{SweepError, io};
use crate::tasks::SourceFamily;
use crate::train::{AttnForm, GateForm, SinkLogitInit, TaskSpec, TrainConfig};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The value of the `experiment` key that marks a switch-study spec.
pub const EXPERIMENT: &str = "switch_study";

/// A switch-study spec: the grid task × variant × frozen × T × seed, every run one
/// factored one-layer model trained with AdamW to a common on-query accuracy.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudySpec {
    /// Must be `"switch_study"` (what `sinklab sweep` dispatches on).
    pub experiment: String,
    /// Name (figure titles, the identity of the results).
    pub name: String,
    /// Dense backend of the runs: `cpu`, `gpu` or `auto` (default cpu).
    #[serde(default)]
    pub backend: crate::backend::BackendKind,
    /// Tasks: `bigram-copy`, `copy-paste`.
    pub tasks: Vec<Task>,
    /// Variants: `bos`, `masked`, `sink-logit`, `gate`, `sink-logit+gate`.
    pub variants: Vec<Variant>,
    /// Whether the variant's mechanism trains (`false`) or stays at its initial value (`true`,
    /// the control); `true` applies only to variants with a mechanism.
    #[serde(default = "default_frozen")]
    pub frozen: Vec<bool>,
    /// Gate form of the variants with a gate: `head` (default) or `elementwise`.
    #[serde(default = "default_gate_form")]
    pub gate_form: GateForm,
    /// Initial value of the sink logit of the variants with one: a number (default 0) or
    /// `"switching"`, $\ln(T(1-\varepsilon)/\varepsilon)$ at each T (the frozen controls keep it).
    #[serde(default)]
    pub sink_logit_init: SinkLogitInit,
    /// Context lengths.
    pub t: Vec<usize>,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Width.
    pub d: usize,
    /// Head dimension (factored form).
    pub r: usize,
    /// Step budget.
    pub steps: usize,
    /// Sequences per step.
    pub batch: usize,
    /// Learning rate.
    pub lr: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// Vocabulary (without BOS).
    pub n: usize,
    /// Triggers.
    pub k: usize,
    /// Dirichlet concentration of the bigram rows (bigram-copy).
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// Source family of copy-paste: `prev_after_trigger` (default) or `prev_occurrence`.
    #[serde(default = "default_family")]
    pub family: String,
    /// Stop a run once its on-query accuracy on the probe set reaches this value (the
    /// equal-accuracy criterion); runs that never reach it are recorded as not converged.
    pub target_acc_on: f64,
    /// Sequences of the evaluation set.
    #[serde(default = "default_eval_batch")]
    pub eval_batch: usize,
}

fn default_frozen() -> Vec<bool> {
    vec![false]
}
fn default_gate_form() -> GateForm {
    GateForm::Head
}
fn default_alpha() -> f64 {
    0.3
}
fn default_family() -> String {
    "prev_after_trigger".into()
}
fn default_eval_batch() -> usize {
    32
}

/// Whether `text` is a switch-study spec: a TOML table whose `experiment` key is
/// [`EXPERIMENT`] (a text that is no TOML is none; its own parser names the error).
pub fn is_switch_study(text: &str) -> bool {
    toml::from_str::<toml::Table>(text)
        .ok()
        .and_then(|t| {
            t.get("experiment")
                .and_then(|v| v.as_str().map(str::to_owned))
        })
        .is_some_and(|e| e == EXPERIMENT)
}

impl StudySpec {
    /// Parses and validates a TOML spec; `file` names it in errors. Every value that enters a
    /// point is checked here, so no point fails for a bad spec value.
    pub fn from_toml_named(text: &str, file: &str) -> Result<Self, SweepError> {
        let s: Self = toml::from_str(text).map_err(|e| SweepError::Spec(format!("{file}: {e}")))?;
        s.validate(&Check { file })?;
        Ok(s)
    }

    /// Reads a spec file.
    pub fn load(path: &Path) -> Result<Self, SweepError> {
        Self::from_toml_named(
            &crate::budget::read_text(path, crate::budget::MAX_SPEC_BYTES).map_err(io(path))?,
            &path.display().to_string(),
        )
    }

    fn validate(&self, c: &Check<'_>) -> Result<(), SweepError> {
        if self.experiment != EXPERIMENT {
            return Err(c.err(
                "experiment",
                &format!("{:?}", self.experiment),
                &format!("a switch-study spec has experiment = \"{EXPERIMENT}\""),
            ));
        }
        if self.name.is_empty() || self.name.chars().any(char::is_control) {
            return Err(c.err(
                "name",
                &format!("{:?}", self.name),
                "must be non-empty and hold no newline or other control character",
            ));
        }
        c.non_empty("tasks", self.tasks.len())?;
        c.non_empty("variants", self.variants.len())?;
        c.non_empty("frozen", self.frozen.len())?;
        c.non_empty("t", self.t.len())?;
        c.non_empty("seeds", self.seeds.len())?;
        for &t in &self.t {
            c.range("t", t as f64, 4.0, 4096.0)?;
        }
        // A repeated value would be one point twice (one id, computed twice).
        c.distinct("tasks", &self.tasks)?;
        c.distinct("variants", &self.variants)?;
        c.distinct("frozen", &self.frozen)?;
        c.distinct("t", &self.t)?;
        c.distinct("seeds", &self.seeds)?;
        if self.gate_form == GateForm::Off {
            return Err(c.err(
                "gate_form",
                "\"off\"",
                "the gate form is head or elementwise",
            ));
        }
        if let SinkLogitInit::Value(v) = self.sink_logit_init
            && !v.is_finite()
        {
            return Err(c.err("sink_logit_init", &v.to_string(), "a finite number"));
        }
        c.range("d", self.d as f64, 1.0, 1024.0)?;
        c.range("r", self.r as f64, 1.0, 1024.0)?;
        c.range("steps", self.steps as f64, 1.0, 1e7)?;
        c.range("batch", self.batch as f64, 1.0, 4096.0)?;
        c.positive("lr", self.lr)?;
        c.range("weight_decay", self.weight_decay, 0.0, f64::MAX)?;
        c.range("n", self.n as f64, 2.0, 65536.0)?;
        c.range("k", self.k as f64, 1.0, self.n as f64 - 1.0)?;
        c.positive("alpha", self.alpha)?;
        if self.source_family().is_none() {
            return Err(c.err(
                "family",
                &format!("{:?}", self.family),
                "unknown source family (prev_after_trigger|prev_occurrence)",
            ));
        }
        c.open("target_acc_on", self.target_acc_on, 0.0, 1.0 + 1e-12)?;
        c.range("eval_batch", self.eval_batch as f64, 1.0, 4096.0)?;
        if self.frozen.iter().all(|&f| f) && self.variants.iter().all(|v| !v.has_mechanism()) {
            return Err(c.err(
                "frozen",
                "[true]",
                "only frozen controls, but no variant has a mechanism to freeze \
                 (bos and masked have none)",
            ));
        }
        Ok(())
    }

    /// The copy-paste source family the spec names.
    fn source_family(&self) -> Option<SourceFamily> {
        match self.family.as_str() {
            "prev_after_trigger" => Some(SourceFamily::PrevAfterTrigger),
            "prev_occurrence" => Some(SourceFamily::PrevOccurrence),
            _ => None,
        }
    }

    /// Every point, in a fixed order (task, variant, frozen, T, seed); a frozen control exists
    /// only for a variant with a mechanism.
    pub fn points(&self) -> Vec<StudyPoint> {
        let family = self
            .source_family()
            .unwrap_or(SourceFamily::PrevAfterTrigger);
        let mut v = Vec::new();
        for &task in &self.tasks {
            let spec = match task {
                Task::BigramCopy => TaskSpec::BigramCopy {
                    n: self.n,
                    k: self.k,
                    alpha: self.alpha,
                },
                Task::CopyPaste => TaskSpec::CopyPaste {
                    n: self.n,
                    k: self.k,
                    family,
                },
            };
            for &variant in &self.variants {
                for &frozen in &self.frozen {
                    if frozen && !variant.has_mechanism() {
                        continue;
                    }
                    for &t in &self.t {
                        for &seed in &self.seeds {
                            v.push(StudyPoint {
                                task,
                                variant,
                                frozen,
                                config: TrainConfig {
                                    task: spec,
                                    t,
                                    d: self.d,
                                    layers: 1,
                                    attn: AttnForm::Factored { r: self.r },
                                    mlp_hidden: 0,
                                    bos: true,
                                    mask_bos_key: variant == Variant::Masked,
                                    batch: self.batch,
                                    steps: self.steps,
                                    lr: self.lr,
                                    weight_decay: self.weight_decay,
                                    seed,
                                    eval_batch: self.eval_batch,
                                    target_acc_on: Some(self.target_acc_on),
                                    switches: variant
                                        .switches(self.gate_form)
                                        .with_sink_logit_init(self.sink_logit_init.value(t)),
                                    freeze_switches: frozen,
                                },
                            });
                        }
                    }
                }
            }
        }
        v
    }
}
