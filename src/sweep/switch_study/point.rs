//! One run of the switch study, its record and how it is computed.

use crate::sweep::cost_scaling::PointContext;
use crate::sweep::{SweepPoint, SweepRecord};
use crate::train::{GateForm, Switches, TrainConfig, TrainReport};
use serde::{Deserialize, Serialize};

/// The task a run trains on (docs/theory.md §10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Task {
    /// Bigram-copy: off-queries predict from a bigram table, on-queries copy.
    #[serde(rename = "bigram-copy")]
    BigramCopy,
    /// Copy-paste: uniform tokens, on-queries copy their source.
    #[serde(rename = "copy-paste")]
    CopyPaste,
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Task::BigramCopy => "bigram-copy",
            Task::CopyPaste => "copy-paste",
        })
    }
}

/// The switch mechanisms a run's head is offered (docs/theory.md §11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Variant {
    /// The BOS key visible: the BOS sink is available.
    #[serde(rename = "bos")]
    Bos,
    /// The BOS key masked for queries $i \ge 1$: no sink, the diagonal remains.
    #[serde(rename = "masked")]
    Masked,
    /// A learned sink logit $s$ per head, the BOS key visible.
    #[serde(rename = "sink-logit")]
    SinkLogit,
    /// An output gate, the BOS key visible.
    #[serde(rename = "gate")]
    Gate,
    /// Both, the BOS key visible.
    #[serde(rename = "sink-logit+gate")]
    SinkLogitGate,
}

impl Variant {
    /// Every variant, in the study's order.
    pub const ALL: [Variant; 5] = [
        Variant::Bos,
        Variant::Masked,
        Variant::SinkLogit,
        Variant::Gate,
        Variant::SinkLogitGate,
    ];

    /// Whether the variant adds a mechanism (a frozen control exists for it).
    pub fn has_mechanism(self) -> bool {
        !matches!(self, Variant::Bos | Variant::Masked)
    }

    /// The switches of the variant's head, the gate in `gate_form`.
    pub fn switches(self, gate_form: GateForm) -> Switches {
        match self {
            Variant::Bos | Variant::Masked => Switches::OFF,
            Variant::SinkLogit => Switches {
                sink_logit: true,
                ..Switches::OFF
            },
            Variant::Gate => Switches {
                gate: gate_form,
                ..Switches::OFF
            },
            Variant::SinkLogitGate => Switches {
                sink_logit: true,
                gate: gate_form,
                ..Switches::OFF
            },
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Variant::Bos => "bos",
            Variant::Masked => "masked",
            Variant::SinkLogit => "sink-logit",
            Variant::Gate => "gate",
            Variant::SinkLogitGate => "sink-logit+gate",
        })
    }
}

/// One run: a variant (trained or frozen) on a task at one (T, seed).
#[derive(Clone, Debug)]
pub struct StudyPoint {
    /// Task.
    pub task: Task,
    /// Variant.
    pub variant: Variant,
    /// The variant's mechanism kept at its initial value (the control).
    pub frozen: bool,
    /// The whole training configuration (what the id hashes).
    pub config: TrainConfig,
}

/// Version of what a point computes, hashed into every id: bump it when the training loop or
/// the classification changes the records a point writes.
pub const COMPUTE_VERSION: u32 = 1;

#[derive(Serialize)]
struct Identity<'a> {
    crate_version: &'static str,
    compute_version: u32,
    switch_eps: f64,
    config: &'a TrainConfig,
}

impl StudyPoint {
    /// Stable identifier: a readable prefix and a hash of everything that changes the record
    /// (the crate version, [`COMPUTE_VERSION`], the classification's ε, the whole training
    /// configuration, which holds the task, the variant's switches and the freeze).
    pub fn id(&self) -> String {
        let identity = Identity {
            crate_version: env!("CARGO_PKG_VERSION"),
            compute_version: COMPUTE_VERSION,
            switch_eps: crate::train::SWITCH_EPS,
            config: &self.config,
        };
        let canonical = serde_json::to_string(&identity).unwrap_or_default();
        let s0 = self.config.switches.sink_logit_init;
        format!(
            "switch/{}/{}{}{}/t{}/s{}#{}",
            self.task,
            self.variant,
            if self.frozen { "-frozen" } else { "" },
            if s0 != 0.0 {
                format!("@s0={s0:.3}")
            } else {
                String::new()
            },
            self.config.t,
            self.config.seed,
            crate::sweep::hash_hex(&canonical, 16)
        )
    }
}

impl SweepPoint for StudyPoint {
    fn id(&self) -> String {
        StudyPoint::id(self)
    }
    fn n_records(&self) -> usize {
        1
    }
    fn weight(&self) -> f64 {
        let c = &self.config;
        (c.t * c.t * c.batch * c.steps * c.d) as f64
    }
}

/// The measurements of one finished run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The switch the off-queries use ([`crate::train::SwitchUse::switch`]): `bos_sink`,
    /// `sink_logit`, `gate`, `diagonal` or `mixed`.
    pub switch: String,
    /// Fractions of off-queries assigned each switch (gate, sink logit, BOS sink, diagonal).
    pub frac_gate: f64,
    /// See `frac_gate`.
    pub frac_sink_logit: f64,
    /// See `frac_gate`.
    pub frac_bos_sink: f64,
    /// See `frac_gate`.
    pub frac_diagonal: f64,
    /// Mean sink-logit mass $p_{i\varnothing}$ of the off-queries (with a sink logit).
    pub sink_mass: Option<f64>,
    /// Mean $\max_c G_{ic}$ of the off-queries (with a gate).
    pub gate_mean: Option<f64>,
    /// The sink logit $s$ (with one).
    pub sink_logit: Option<f64>,
    /// Mean off-query attention on BOS, $A_{i0}$.
    pub bos_score: f64,
    /// Mean off-query attention on the diagonal, $A_{ii}$.
    pub diagonal_score: f64,
    /// $\lVert W_{QK}\rVert_F$.
    pub qk_fro: f64,
    /// $\lVert W_{QK}\rVert_\ast$.
    pub qk_nuclear: f64,
    /// $\lVert W_{VO}\rVert_F$.
    pub vo_fro: f64,
    /// $\lVert W_{VO}\rVert_\ast$.
    pub vo_nuclear: f64,
    /// $\lVert W_g\rVert_F$ (with a gate).
    pub gate_w_fro: Option<f64>,
    /// $\lVert b_g\rVert_2$ (with a gate).
    pub gate_b_norm: Option<f64>,
    /// On-query accuracy on the evaluation set.
    pub acc_on: f64,
    /// Off-query accuracy on the evaluation set.
    pub acc_off: f64,
    /// Evaluation loss.
    pub eval_loss: f64,
    /// Optimiser steps run.
    pub steps_run: usize,
    /// Whether the run reached the spec's on-query accuracy.
    pub converged: bool,
}

/// One line of the study's `results.jsonl`: the point's coordinates and its outcome (or the
/// error). No wall-clock time: a seeded study writes the same bytes on every machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Point id.
    pub id: String,
    /// Task.
    pub task: Task,
    /// Variant.
    pub variant: Variant,
    /// The control: the mechanism frozen at its initial value.
    pub frozen: bool,
    /// Context length.
    pub t: usize,
    /// Seed.
    pub seed: u64,
    /// The sink logit's initial value when it is not 0 (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_logit_init: Option<f64>,
    /// The measurements (`None` when the run failed).
    pub outcome: Option<Outcome>,
    /// Why the run failed.
    #[serde(default)]
    pub error: Option<String>,
}

impl SweepRecord for Record {
    fn point_id(&self) -> &str {
        &self.id
    }
    fn part(&self) -> &str {
        ""
    }
    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

/// The outcome of a finished run (its first layer: the study trains one).
pub fn outcome(r: &TrainReport) -> Result<Outcome, String> {
    let (Some(u), Some(c), Some(p)) = (r.switch_used.first(), r.costs.first(), r.patterns.first())
    else {
        return Err("the training report has no layer".into());
    };
    let o = Outcome {
        switch: u.switch.clone(),
        frac_gate: u.gate,
        frac_sink_logit: u.sink_logit,
        frac_bos_sink: u.bos_sink,
        frac_diagonal: u.diagonal,
        sink_mass: u.mean_sink_mass,
        gate_mean: u.mean_gate,
        sink_logit: u.sink_logit_value,
        bos_score: p.sink,
        diagonal_score: p.diagonal,
        qk_fro: c.qk_fro,
        qk_nuclear: c.qk_nuclear,
        vo_fro: c.vo_fro,
        vo_nuclear: c.vo_nuclear,
        gate_w_fro: c.gate_fro.map(|g| g.0),
        gate_b_norm: c.gate_fro.map(|g| g.1),
        acc_on: r.acc_on,
        acc_off: r.acc_off,
        eval_loss: r.eval_loss,
        steps_run: r.steps_run,
        converged: r.converged == Some(true),
    };
    let finite = [o.qk_fro, o.qk_nuclear, o.vo_fro, o.vo_nuclear, o.eval_loss]
        .iter()
        .chain(o.sink_logit.iter())
        .chain(o.gate_w_fro.iter())
        .all(|x| x.is_finite());
    if !finite {
        // A diverged run is a failure (retried on resume), never a cost.
        return Err(format!(
            "training produced a non-finite model (eval loss {}, ‖W_QK‖_F {})",
            o.eval_loss, o.qk_fro
        ));
    }
    Ok(o)
}

/// Trains the point on `ctx`'s device and returns its record.
pub fn compute(p: &StudyPoint, ctx: &PointContext) -> Record {
    let result = ctx
        .train(&p.config)
        .map_err(|e| e.to_string())
        .and_then(|r| outcome(&r));
    let (outcome, error) = match result {
        Ok(o) => (Some(o), None),
        Err(e) => (None, Some(e)),
    };
    let s0 = p.config.switches.sink_logit_init;
    Record {
        id: p.id(),
        task: p.task,
        variant: p.variant,
        sink_logit_init: (s0 != 0.0).then_some(s0),
        frozen: p.frozen,
        t: p.config.t,
        seed: p.config.seed,
        outcome,
        error,
    }
}
