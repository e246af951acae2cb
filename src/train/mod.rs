//! Training small transformers on the §10 tasks with AdamW, and reading off
//! which pattern the off-queries learn (sink or diagonal) and what it costs.
//!
//! - [`device`]: the training model and its AdamW state resident on any
//!   [`crate::backend::Backend`] (parameters, moments, activations and
//!   gradients allocated once; per step only token ids go up and, on log
//!   steps, the loss comes back);
//! - [`model`]: the same 1–3 layer model on the host (faer), forward and
//!   hand-written backward, generic over the scalar: the f64 *reference*
//!   whose gradients are checked against finite differences, and the
//!   evaluation of a trained model;
//! - [`kernels`]: the host products of [`model`];
//! - [`adamw`]: host AdamW state for reference runs of [`model`] (the update is
//!   the backend's [`crate::backend::cpu::adamw_update`]);
//! - this module: the loop, the evaluation and the report of one run.
//!
//! One training loop, [`train_on`], with the backend an explicit argument
//! (as faer passes `Par`): the caller chooses it (`sinklab train --backend`,
//! a sweep spec's `backend`), [`train`] is [`train_on`] with the default
//! [`Cpu`]`<f32>`. The steps run in `f32` on the backend ([`device`]); the
//! parameters come back once at the end (and at each convergence probe), and
//! the evaluation runs on the host model.

pub mod adamw;
pub mod attn;
pub mod device;
pub mod embeddings;
pub mod kernels;
pub mod model;

pub use model::{
    AttnForm, GateForm, Model, ModelConfig, ModelError, SinkLogitInit, SinkLogitInitName, Switches,
};

use crate::backend::{AdamWHyper, Backend, Cpu};
use crate::linalg;
use crate::tasks::{BigramCopy, CopyPaste, Sequence, SourceFamily, TaskError};
use faer::{Mat, Par};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

/// Errors of a training run.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// Bad configuration.
    #[error("invalid training configuration: {0}")]
    Invalid(String),
    /// Task error.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// Model error.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The GPU backend failed (the run stops; nothing is silently recomputed).
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    /// The loss became NaN or infinite.
    #[error("training diverged at step {0} (loss {1})")]
    Diverged(usize, f64),
}

/// The task trained on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskSpec {
    /// Bigram-copy with `n` tokens, `k` triggers, Dirichlet(`alpha`) rows.
    BigramCopy {
        /// Vocabulary without BOS.
        n: usize,
        /// Triggers.
        k: usize,
        /// Dirichlet concentration.
        alpha: f64,
    },
    /// Copy-paste with a source family.
    CopyPaste {
        /// Vocabulary without BOS.
        n: usize,
        /// Triggers.
        k: usize,
        /// Source family.
        family: SourceFamily,
    },
}

/// One training run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Task.
    pub task: TaskSpec,
    /// Sequence length $T$ (BOS included).
    pub t: usize,
    /// Width $d$.
    pub d: usize,
    /// Layers (1–3).
    pub layers: usize,
    /// Attention form.
    pub attn: AttnForm,
    /// MLP hidden width (0: none).
    pub mlp_hidden: usize,
    /// Sequences start with BOS.
    pub bos: bool,
    /// Mask the BOS key for queries $i \ge 1$.
    pub mask_bos_key: bool,
    /// Sequences per step.
    pub batch: usize,
    /// Optimiser steps.
    pub steps: usize,
    /// Learning rate.
    pub lr: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// Seed of the task, the initialisation and the batches.
    pub seed: u64,
    /// Sequences in the evaluation set.
    pub eval_batch: usize,
    /// Convergence criterion: stop as soon as the on-query accuracy on a held-out probe
    /// set reaches this value (checked every [`PROBE_EVERY`] steps); `steps` is then the
    /// budget. `None`: run exactly `steps`.
    #[serde(default)]
    pub target_acc_on: Option<f64>,
    /// Explicit switches of every head (sink logit, output gate; docs/theory.md §11).
    #[serde(default, skip_serializing_if = "Switches::is_off")]
    pub switches: Switches,
    /// Control: keep the switch parameters ($s$, $W_g$, $b_g$) at their initial values.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub freeze_switches: bool,
}

/// Steps between two probes of the convergence criterion.
pub const PROBE_EVERY: usize = 50;
/// Sequences in the probe set of the convergence criterion.
pub const PROBE_BATCH: usize = 16;

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            task: TaskSpec::BigramCopy {
                n: 16,
                k: 2,
                alpha: 0.3,
            },
            t: 32,
            d: 32,
            layers: 1,
            attn: AttnForm::Factored { r: 32 },
            mlp_hidden: 0,
            bos: true,
            mask_bos_key: false,
            batch: 16,
            steps: 400,
            lr: 1e-2,
            weight_decay: 1e-2,
            seed: 0,
            eval_batch: 64,
            target_acc_on: None,
            switches: Switches::OFF,
            freeze_switches: false,
        }
    }
}

/// What the off-queries attend to, averaged over off-queries $i \ge 2$ of the eval set.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PatternScores {
    /// Mean $A_{i0}$ (sink on position 0).
    pub sink: f64,
    /// Mean $A_{ii}$ (diagonal).
    pub diagonal: f64,
    /// Mean $A_{i,i-1}$ (previous token).
    pub previous: f64,
    /// Mean attention on the first key a query may see (position 1 when the BOS key is masked).
    pub first_visible: f64,
    /// `sink`, `diagonal`, `first_visible`, `previous` or `mixed` (largest score ≥ 0.5, else mixed).
    pub learned: String,
}

/// Threshold $\varepsilon$ of the switch predicates of [`SwitchUse`].
pub const SWITCH_EPS: f64 = 0.1;

/// Which switch the off-queries $i \ge 2$ of one layer use (docs/theory.md §2, §11), over the
/// eval set. Each off-query is assigned the first predicate it meets, in the order the
/// switches act on the head output: gate ($\max_c G_{ic} \le \varepsilon$), learned sink
/// ($p_{i\varnothing} \ge 1-\varepsilon$), BOS sink ($A_{i0} \ge 1-\varepsilon$,
/// [`crate::patterns::is_eps_sink`]), diagonal ($A_{ii} \ge 1-\varepsilon$,
/// [`crate::patterns::is_eps_diagonal`]); the layer's `switch` is the one that most
/// off-queries are assigned if that is at least half of them, else `mixed`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SwitchUse {
    /// $\varepsilon$ of the predicates.
    pub eps: f64,
    /// Fraction of off-queries assigned the gate.
    pub gate: f64,
    /// Fraction assigned the learned sink logit.
    pub sink_logit: f64,
    /// Fraction assigned the BOS sink.
    pub bos_sink: f64,
    /// Fraction assigned the diagonal.
    pub diagonal: f64,
    /// Mean sink-logit mass $p_{i\varnothing}$ of the off-queries (with a sink logit).
    pub mean_sink_mass: Option<f64>,
    /// Mean of $\max_c G_{ic}$ over the off-queries (with a gate).
    pub mean_gate: Option<f64>,
    /// The learned sink logit $s$ (with one).
    pub sink_logit_value: Option<f64>,
    /// `bos_sink`, `sink_logit`, `gate`, `diagonal` or `mixed`.
    pub switch: String,
}

/// Costs of one trained layer (§1 definitions).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LayerCosts {
    /// $\lVert W_{QK}\rVert_F$.
    pub qk_fro: f64,
    /// $\lVert W_{QK}\rVert_\ast$.
    pub qk_nuclear: f64,
    /// $\tfrac12(\lVert W_Q\rVert_F^2 + \lVert W_K\rVert_F^2)$ (factored form only).
    pub qk_weight_decay: Option<f64>,
    /// $\lVert W_{VO}\rVert_F$.
    pub vo_fro: f64,
    /// $\lVert W_{VO}\rVert_\ast$.
    pub vo_nuclear: f64,
    /// $|s|$, the learned sink logit's size (with one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_logit_abs: Option<f64>,
    /// $\lVert W_g\rVert_F$ and $\lVert b_g\rVert_2$ of the gate (with one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_fro: Option<(f64, f64)>,
}

/// The report of one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainReport {
    /// The configuration.
    pub config: TrainConfig,
    /// (step, training loss) every few steps.
    pub loss_curve: Vec<(usize, f64)>,
    /// Final eval loss.
    pub eval_loss: f64,
    /// Argmax accuracy on on-queries (copy).
    pub acc_on: f64,
    /// Argmax accuracy on off-queries.
    pub acc_off: f64,
    /// Bayes-optimal accuracy on off-queries (argmax of the true next-token law), bigram-copy only.
    pub acc_off_bayes: Option<f64>,
    /// Pattern of the off-queries, per layer.
    pub patterns: Vec<PatternScores>,
    /// Pattern of the on-queries (should be `previous` on bigram-copy), per layer.
    pub on_patterns: Vec<PatternScores>,
    /// Costs per layer.
    pub costs: Vec<LayerCosts>,
    /// Which switch the off-queries use, per layer.
    #[serde(default)]
    pub switch_used: Vec<SwitchUse>,
    /// Optimiser steps actually run.
    #[serde(default)]
    pub steps_run: usize,
    /// Whether the convergence criterion was met (`None` without a criterion).
    #[serde(default)]
    pub converged: Option<bool>,
    /// Wall-clock seconds.
    pub seconds: f64,
}

enum Task {
    Bigram(BigramCopy),
    Copy(CopyPaste),
}

impl Task {
    fn sample(&self, t: usize, bos: bool, rng: &mut StdRng) -> Sequence {
        match self {
            Task::Bigram(b) => b.sample(t, bos, rng),
            Task::Copy(c) => c.sample(t, bos, rng),
        }
    }
    fn vocab(&self) -> usize {
        match self {
            Task::Bigram(b) => b.n + 1,
            Task::Copy(c) => c.n + 1,
        }
    }
}

fn batch(task: &Task, cfg: &TrainConfig, n: usize, rng: &mut StdRng) -> (Vec<u32>, Vec<Sequence>) {
    let seqs: Vec<Sequence> = (0..n).map(|_| task.sample(cfg.t, cfg.bos, rng)).collect();
    let toks = seqs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
    (toks, seqs)
}

fn weights(t: usize, n: usize) -> Vec<f64> {
    (0..n * t)
        .map(|r| if r % t + 1 < t { 1.0 } else { 0.0 })
        .collect()
}

fn scores(
    cache: &model::Cache<f32>,
    seqs: &[Sequence],
    l: usize,
    on: bool,
    first_visible: usize,
) -> PatternScores {
    let (mut s, mut dg, mut pv, mut fv, mut n) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (b, seq) in seqs.iter().enumerate() {
        for i in 2..seq.queries() {
            if seq.source[i].is_some() == on {
                s += cache.attention(l, b, i, 0);
                dg += cache.attention(l, b, i, i);
                pv += cache.attention(l, b, i, i - 1);
                fv += cache.attention(l, b, i, first_visible);
                n += 1.0;
            }
        }
    }
    let n = f64::max(n, 1.0);
    let (s, dg, pv, fv) = (s / n, dg / n, pv / n, fv / n);
    let mut best = [
        ("sink", s),
        ("diagonal", dg),
        ("previous", pv),
        ("first_visible", fv),
    ];
    if first_visible == 0 {
        best[3].1 = 0.0;
    }
    let (name, val) = best
        .iter()
        .copied()
        .fold(("mixed", 0.0), |a, b| if b.1 > a.1 { b } else { a });
    PatternScores {
        sink: s,
        diagonal: dg,
        previous: pv,
        first_visible: fv,
        learned: if val >= 0.5 {
            name.to_string()
        } else {
            "mixed".to_string()
        },
    }
}

/// [`SwitchUse`] of layer `l` on the eval set (`sink` the layer's learned sink logit).
fn switch_use(
    cache: &model::Cache<f32>,
    seqs: &[Sequence],
    t: usize,
    l: usize,
    sink: Option<f64>,
) -> SwitchUse {
    use crate::patterns::{is_eps_diagonal, is_eps_sink};
    let eps = SWITCH_EPS;
    let mut counts = [0.0f64; 4];
    let (mut n, mut psum, mut gsum) = (0.0f64, 0.0f64, 0.0f64);
    for (b, seq) in seqs.iter().enumerate() {
        let a = Mat::from_fn(t, t, |i, j| {
            if j <= i {
                cache.attention(l, b, i, j)
            } else {
                0.0
            }
        });
        for i in 2..seq.queries() {
            if seq.source[i].is_some() {
                continue;
            }
            let p = cache.sink_mass(l, b, i);
            let g = cache.gate(l, b, i);
            psum += p.unwrap_or(0.0);
            gsum += g.unwrap_or(0.0);
            n += 1.0;
            let hit = [
                g.is_some_and(|g| g <= eps),
                p.is_some_and(|p| p >= 1.0 - eps),
                is_eps_sink(a.as_ref(), &[i], eps),
                is_eps_diagonal(a.as_ref(), &[i], eps),
            ];
            if let Some(k) = hit.iter().position(|&h| h) {
                counts[k] += 1.0;
            }
        }
    }
    let n1 = n.max(1.0);
    let frac = counts.map(|c| c / n1);
    let names = ["gate", "sink_logit", "bos_sink", "diagonal"];
    let best = (0..4).fold(0, |a, k| if frac[k] > frac[a] { k } else { a });
    let has_gate = seqs.first().is_some_and(|_| cache.gate(l, 0, 0).is_some());
    SwitchUse {
        eps,
        gate: frac[0],
        sink_logit: frac[1],
        bos_sink: frac[2],
        diagonal: frac[3],
        mean_sink_mass: sink.map(|_| psum / n1),
        mean_gate: has_gate.then(|| gsum / n1),
        sink_logit_value: sink,
        switch: if n > 0.0 && frac[best] >= 0.5 {
            names[best].to_string()
        } else {
            "mixed".to_string()
        },
    }
}

/// Argmax accuracy on the on-queries of `seqs` (forward pass `cache`).
fn on_accuracy(model: &Model<f32>, cache: &model::Cache<f32>, seqs: &[Sequence], t: usize) -> f64 {
    let (mut ok, mut n) = (0.0f64, 0.0f64);
    for (b, s) in seqs.iter().enumerate() {
        for i in 1..s.queries() {
            if s.source[i].is_some() {
                ok += f64::from(model.predict(cache, b * t + i) == s.tokens[i + 1]);
                n += 1.0;
            }
        }
    }
    ok / n.max(1.0)
}

fn to_f64(m: &Mat<f32>) -> Mat<f64> {
    Mat::from_fn(m.nrows(), m.ncols(), |i, j| m[(i, j)] as f64)
}

/// The task of `cfg`, its tables drawn from `rng` (the run's generator, first).
fn make_task(cfg: &TrainConfig, rng: &mut StdRng) -> Result<Task, TrainError> {
    Ok(match cfg.task {
        TaskSpec::BigramCopy { n, k, alpha } => Task::Bigram(BigramCopy::new(n, k, alpha, rng)?),
        TaskSpec::CopyPaste { n, k, family } => Task::Copy(CopyPaste::new(n, k, family)?),
    })
}

/// The evaluation set of a run: `eval_batch` sequences from a seed derived from the run's.
fn eval_set(task: &Task, cfg: &TrainConfig) -> (Vec<u32>, Vec<Sequence>) {
    let mut erng = StdRng::seed_from_u64(cfg.seed ^ 0x9E37_79B9_7F4A_7C15);
    batch(task, cfg, cfg.eval_batch, &mut erng)
}

/// [`SwitchUse`] of every layer of `model` on the evaluation set of `cfg` (the classification
/// a [`TrainReport`] of this model and configuration carries), for any parameters: a planted
/// model is classified as a trained one is.
pub fn switch_use_of(model: &Model<f32>, cfg: &TrainConfig) -> Result<Vec<SwitchUse>, TrainError> {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let task = make_task(cfg, &mut rng)?;
    let (toks, seqs) = eval_set(&task, cfg);
    let cache = model.forward(&toks, cfg.eval_batch, cfg.t)?;
    Ok((0..cfg.layers)
        .map(|l| switch_use(&cache, &seqs, cfg.t, l, model.sink_logit(l)))
        .collect())
}

/// [`train_on`] the default backend, [`Cpu`]`<f32>` (faer).
pub fn train(
    cfg: &TrainConfig,
    progress: impl FnMut(usize, f64),
) -> Result<TrainReport, TrainError> {
    train_on(&Cpu::<f32>::new(), cfg, progress)
}

/// [`train_model_on`] the default backend, [`Cpu`]`<f32>` (faer).
pub fn train_model(
    cfg: &TrainConfig,
    progress: impl FnMut(usize, f64),
) -> Result<(TrainReport, Model<f32>), TrainError> {
    train_model_on(&Cpu::<f32>::new(), cfg, progress)
}

/// Trains one model on the backend `be` and evaluates it; `progress(step, loss)`
/// is called every log step.
pub fn train_on<B: Backend>(
    be: &B,
    cfg: &TrainConfig,
    progress: impl FnMut(usize, f64),
) -> Result<TrainReport, TrainError> {
    train_model_on(be, cfg, progress).map(|(r, _)| r)
}

/// [`train_on`], also returning the trained model (read back to the host, f32).
pub fn train_model_on<B: Backend>(
    be: &B,
    cfg: &TrainConfig,
    mut progress: impl FnMut(usize, f64),
) -> Result<(TrainReport, Model<f32>), TrainError> {
    let start = std::time::Instant::now();
    if cfg.t < 4 || cfg.batch == 0 || cfg.steps == 0 || cfg.eval_batch == 0 {
        return Err(TrainError::Invalid(format!(
            "need t >= 4, batch, steps, eval_batch >= 1: {cfg:?}"
        )));
    }
    if !(cfg.lr > 0.0 && cfg.weight_decay >= 0.0) {
        return Err(TrainError::Invalid(
            "lr must be > 0 and weight_decay >= 0".into(),
        ));
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let task = make_task(cfg, &mut rng)?;
    let mcfg = ModelConfig {
        vocab: task.vocab(),
        d: cfg.d,
        max_len: cfg.t,
        layers: cfg.layers,
        attn: cfg.attn,
        mlp_hidden: cfg.mlp_hidden,
        mask_bos_key: cfg.mask_bos_key,
        init_scale: 1.0,
        switches: cfg.switches,
    };
    let mut model: Model<f32> = Model::new(mcfg, &mut rng)?;
    let w = weights(cfg.t, cfg.batch);
    let log_every = (cfg.steps / 50).max(1);
    let mut curve = Vec::new();
    if let Some(a) = cfg.target_acc_on
        && !(0.0..=1.0).contains(&a)
    {
        return Err(TrainError::Invalid(format!(
            "target on-query accuracy must lie in [0, 1], got {a}"
        )));
    }
    // The probe set of the convergence criterion: its own seed, disjoint from the
    // batches and from the evaluation set.
    let probe = cfg.target_acc_on.map(|_| {
        let mut prng = StdRng::seed_from_u64(cfg.seed ^ 0x5EED_F09E_0BE5_E7A1);
        batch(&task, cfg, PROBE_BATCH, &mut prng)
    });
    let mut steps_run = 0;
    let mut converged = cfg.target_acc_on.map(|_| false);
    let opt = AdamWHyper {
        lr: cfg.lr,
        weight_decay: cfg.weight_decay,
        ..AdamWHyper::default()
    };
    let mut dev = device::DeviceModel::new(be, &model, &opt, cfg.batch, cfg.t, &w)?;
    if cfg.freeze_switches {
        if cfg.switches.is_off() {
            return Err(TrainError::Invalid(
                "freeze_switches without a switch: nothing to freeze".into(),
            ));
        }
        for k in model.switch_params() {
            dev.freeze(k);
        }
    }
    for step in 0..cfg.steps {
        if let (Some(target), Some((ptoks, pseqs))) = (cfg.target_acc_on, &probe)
            && step > 0
            && step % PROBE_EVERY == 0
        {
            // The probe needs the current parameters on the host: the one
            // read-back the criterion truly needs, every PROBE_EVERY steps.
            dev.store(be, &mut model)?;
            let pc = model.forward(ptoks, PROBE_BATCH, cfg.t)?;
            if on_accuracy(&model, &pc, pseqs, cfg.t) >= target {
                converged = Some(true);
                break;
            }
        }
        steps_run = step + 1;
        let (toks, _) = batch(&task, cfg, cfg.batch, &mut rng);
        let log = step % log_every == 0 || step + 1 == cfg.steps;
        if let Some(loss) = dev.step(be, &toks, log)? {
            if !loss.is_finite() {
                return Err(TrainError::Diverged(step, loss));
            }
            curve.push((step, loss));
            progress(step, loss);
        }
    }
    dev.store(be, &mut model)?;
    if converged == Some(false)
        && let (Some(target), Some((ptoks, pseqs))) = (cfg.target_acc_on, &probe)
    {
        let pc = model.forward(ptoks, PROBE_BATCH, cfg.t)?;
        converged = Some(on_accuracy(&model, &pc, pseqs, cfg.t) >= target);
    }
    let (toks, seqs) = eval_set(&task, cfg);
    let cache = model.forward(&toks, cfg.eval_batch, cfg.t)?;
    let eval_loss = model.loss(&cache, &weights(cfg.t, cfg.eval_batch));
    let (mut on_ok, mut on_n, mut off_ok, mut off_n, mut bayes_ok) =
        (0.0f64, 0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (b, s) in seqs.iter().enumerate() {
        for i in 1..s.queries() {
            let r = b * cfg.t + i;
            let hit = f64::from(model.predict(&cache, r) == s.tokens[i + 1]);
            if s.source[i].is_some() {
                on_ok += hit;
                on_n += 1.0;
            } else {
                off_ok += hit;
                off_n += 1.0;
                if let Task::Bigram(bg) = &task
                    && s.tokens[i] != crate::tasks::BOS
                {
                    let row = &bg.p[s.tokens[i] as usize - 1];
                    let arg = (0..row.len()).fold(0, |a, c| if row[c] > row[a] { c } else { a });
                    bayes_ok += f64::from(arg as u32 + 1 == s.tokens[i + 1]);
                }
            }
        }
    }
    let first_visible = usize::from(cfg.mask_bos_key);
    let patterns = (0..cfg.layers)
        .map(|l| scores(&cache, &seqs, l, false, first_visible))
        .collect();
    let on_patterns = (0..cfg.layers)
        .map(|l| scores(&cache, &seqs, l, true, first_visible))
        .collect();
    let switch_used = (0..cfg.layers)
        .map(|l| switch_use(&cache, &seqs, cfg.t, l, model.sink_logit(l)))
        .collect();
    let costs = (0..cfg.layers)
        .map(|l| {
            let qk = to_f64(&model.w_qk(l));
            let vo = to_f64(&model.w_vo(l));
            LayerCosts {
                qk_fro: linalg::fro_norm(qk.as_ref()),
                qk_nuclear: linalg::nuclear_norm(qk.as_ref(), Par::Seq),
                qk_weight_decay: model.qk_weight_decay(l),
                vo_fro: linalg::fro_norm(vo.as_ref()),
                vo_nuclear: linalg::nuclear_norm(vo.as_ref(), Par::Seq),
                sink_logit_abs: model.sink_logit(l).map(f64::abs),
                gate_fro: model.gate_params(l).map(|(w, b)| {
                    (
                        linalg::fro_norm(to_f64(w).as_ref()),
                        linalg::fro_norm(to_f64(b).as_ref()),
                    )
                }),
            }
        })
        .collect();
    let report = TrainReport {
        config: cfg.clone(),
        loss_curve: curve,
        eval_loss,
        acc_on: on_ok / on_n.max(1.0),
        acc_off: off_ok / off_n.max(1.0),
        acc_off_bayes: matches!(task, Task::Bigram(_)).then(|| bayes_ok / off_n.max(1.0)),
        patterns,
        on_patterns,
        costs,
        switch_used,
        steps_run,
        converged,
        seconds: start.elapsed().as_secs_f64(),
    };
    Ok((report, model))
}
