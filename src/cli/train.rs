//! `sinklab train [--t T] [--d D] [--switch S] ... [--json]`: one training run
//! on bigram-copy; prints the loss curve, accuracies, learned pattern, the switch
//! the off-queries use and costs.

use anyhow::{Result, bail};
use sinklab::backend::{Cpu, Selected};
use sinklab::train::{AttnForm, GateForm, Switches, TaskSpec, TrainConfig, train_on};

/// The switch mechanism a run offers its heads (docs/theory.md §11).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchArg {
    /// The BOS key visible (the default).
    Bos,
    /// The BOS key masked for queries i >= 1 (as --no-bos-key).
    Masked,
    /// A learned sink logit per head (BOS key visible).
    #[value(name = "sink-logit")]
    SinkLogit,
    /// An output gate per head (BOS key visible).
    Gate,
    /// Both a sink logit and a gate (BOS key visible).
    #[value(name = "sink-logit+gate")]
    SinkLogitGate,
}

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  One layer, T = 32, d = 32, 400 steps:
    sinklab train
  No sink available (the BOS key masked): which pattern is learned instead, as JSON:
    sinklab train --no-bos-key --json
  Two layers with an MLP, stopping at 95 % on-query accuracy:
    sinklab train --layers 2 --mlp 64 --steps 2000 --target-acc 0.95
  A learned sink logit per head: which switch do the off-queries use?
    sinklab train --switch sink-logit")]
pub struct Args {
    /// Sequence length (BOS included).
    #[arg(long, default_value_t = 32, value_name = "T")]
    t: usize,
    /// Width.
    #[arg(long, default_value_t = 32, value_name = "D")]
    d: usize,
    /// Head dimension (factored form); 0 = direct W_QK, W_VO.
    #[arg(long, default_value_t = 32, value_name = "R")]
    r: usize,
    /// Layers (1–3).
    #[arg(long, default_value_t = 1, value_name = "N")]
    layers: usize,
    /// MLP hidden width (0 = none).
    #[arg(long, default_value_t = 0, value_name = "W")]
    mlp: usize,
    /// Mask the BOS key for every query i ≥ 1 (no sink at position 0).
    #[arg(long)]
    no_bos_key: bool,
    /// Switch: bos|masked|sink-logit|gate|sink-logit+gate
    ///
    /// bos: the BOS key visible (default); masked: as --no-bos-key; sink-logit: a learned
    /// sink logit per head; gate: a sigmoid output gate per head; sink-logit+gate: both.
    /// The report says which switch the off-queries use (gate, sink logit, BOS sink,
    /// diagonal or mixed).
    #[arg(
        long,
        value_enum,
        hide_possible_values = true,
        default_value = "bos",
        value_name = "S"
    )]
    switch: SwitchArg,
    /// Gate form: head (a scalar per head) or elementwise
    ///
    /// head: one gate value per head; elementwise: one per output coordinate of the head.
    #[arg(long, default_value = "head", value_name = "FORM", value_parser = parse_gate_form)]
    gate_form: GateForm,
    /// Control: freeze the switch at its initial values
    ///
    /// Keeps the switch parameters (sink logit, gate) at their initial values while the rest
    /// trains: the control that attributes a change to the mechanism. Needs --switch.
    #[arg(long)]
    freeze_switch: bool,
    /// Initial value of the sink logit s: a number (default 0) or switching
    ///
    /// switching: ln(T(1−ε)/ε) with ε = 0.1, the value that switches off every row with
    /// W_QK = 0 (docs/theory.md §11). Needs --switch sink-logit or sink-logit+gate.
    #[arg(long, value_name = "S")]
    sink_logit_init: Option<String>,
    /// Drop BOS from the sequences altogether.
    #[arg(long)]
    no_bos: bool,
    /// Vocabulary size (without BOS).
    #[arg(long, default_value_t = 16)]
    n: usize,
    /// Trigger tokens.
    #[arg(long, default_value_t = 2)]
    k: usize,
    /// Dirichlet concentration of the bigram rows.
    #[arg(long, default_value_t = 0.3)]
    alpha: f64,
    /// Steps.
    #[arg(long, default_value_t = 400)]
    steps: usize,
    /// Stop at this on-query accuracy (--steps is then the budget)
    ///
    /// The accuracy on a held-out probe set, checked every 50 steps.
    #[arg(long, value_name = "ACC")]
    target_acc: Option<f64>,
    /// Batch.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 1e-2)]
    lr: f64,
    /// Weight decay.
    #[arg(long, default_value_t = 1e-2)]
    wd: f64,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Backend of the training steps: cpu, gpu or auto
    ///
    /// cpu; gpu (any adapter); auto (a hardware GPU, else cpu).
    #[arg(long, default_value = "cpu", value_name = "BACKEND")]
    backend: sinklab::backend::BackendKind,
    /// Memory limit (e.g. 64G; default 80% of memory).
    #[arg(long, value_name = "SIZE")]
    max_mem: Option<String>,
    /// Time limit of the lower-bound estimate (e.g. 12h; default 1h).
    #[arg(long, value_name = "TIME")]
    max_time: Option<String>,
}

fn parse_gate_form(s: &str) -> Result<GateForm, String> {
    match s {
        "head" => Ok(GateForm::Head),
        "elementwise" => Ok(GateForm::Elementwise),
        _ => Err(format!("{s}: the gate form is head or elementwise")),
    }
}

pub fn run(a: Args) -> Result<i32> {
    if a.no_bos && a.no_bos_key {
        bail!(
            "--no-bos-key masks the BOS key, but --no-bos drops BOS from the sequences: there is \
             no BOS key to mask; give one of them"
        );
    }
    if !(a.lr > 0.0 && a.lr.is_finite()) {
        bail!(
            "--lr {}: the learning rate must be positive and finite",
            a.lr
        );
    }
    if !(a.wd >= 0.0 && a.wd.is_finite()) {
        bail!("--wd {}: the weight decay must be finite and >= 0", a.wd);
    }
    if !(a.alpha > 0.0 && a.alpha.is_finite()) {
        bail!("--alpha {}: must be positive and finite", a.alpha);
    }
    if a.k == 0 {
        // No trigger: no on-query, and an accuracy over no queries.
        bail!("--k 0: bigram-copy needs at least one trigger token (1 <= k < n)");
    }
    if !(1..=3).contains(&a.layers) {
        bail!("--layers {}: 1 to 3 layers", a.layers);
    }
    if a.d == 0 || a.t < 4 || a.batch == 0 || a.steps == 0 {
        bail!(
            "need --d >= 1, --t >= 4, --batch >= 1, --steps >= 1 (got d {}, t {}, batch {}, steps {})",
            a.d,
            a.t,
            a.batch,
            a.steps
        );
    }
    // Sizes before work: the estimate is checked before anything is allocated.
    let budget = sinklab::budget::Budget::with(a.max_mem.as_deref(), a.max_time.as_deref())?;
    let r = if a.r == 0 { a.d } else { a.r };
    budget.check(
        &format!(
            "train --t {} --d {} --r {} --layers {} --mlp {} --n {} --batch {} --steps {}",
            a.t, a.d, a.r, a.layers, a.mlp, a.n, a.batch, a.steps
        ),
        sinklab::budget::training(a.t, a.d, r, a.layers, a.mlp, a.n, a.batch, a.steps),
        true,
    )?;
    if a.freeze_switch && matches!(a.switch, SwitchArg::Bos | SwitchArg::Masked) {
        bail!("--freeze-switch needs --switch sink-logit, gate or sink-logit+gate");
    }
    let sink_logit_init = match &a.sink_logit_init {
        None => 0.0,
        Some(_) if !matches!(a.switch, SwitchArg::SinkLogit | SwitchArg::SinkLogitGate) => {
            bail!("--sink-logit-init needs --switch sink-logit or sink-logit+gate")
        }
        Some(v) => sinklab::train::SinkLogitInit::parse(v)
            .map_err(|e| anyhow::anyhow!("--sink-logit-init: {e}"))?
            .value(a.t),
    };
    if a.gate_form != GateForm::Head
        && !matches!(a.switch, SwitchArg::Gate | SwitchArg::SinkLogitGate)
    {
        bail!("--gate-form elementwise needs --switch gate or sink-logit+gate");
    }
    let gate = a.gate_form;
    let switches = match a.switch {
        SwitchArg::Bos | SwitchArg::Masked => Switches::OFF,
        SwitchArg::SinkLogit => Switches {
            sink_logit: true,
            sink_logit_init,
            ..Switches::OFF
        },
        SwitchArg::Gate => Switches {
            gate,
            ..Switches::OFF
        },
        SwitchArg::SinkLogitGate => Switches {
            sink_logit: true,
            gate,
            sink_logit_init,
        },
    };
    let cfg = TrainConfig {
        task: TaskSpec::BigramCopy {
            n: a.n,
            k: a.k,
            alpha: a.alpha,
        },
        t: a.t,
        d: a.d,
        layers: a.layers,
        attn: if a.r == 0 {
            AttnForm::Direct
        } else {
            AttnForm::Factored { r: a.r }
        },
        mlp_hidden: a.mlp,
        bos: !a.no_bos,
        mask_bos_key: a.no_bos_key || a.switch == SwitchArg::Masked,
        batch: a.batch,
        steps: a.steps,
        lr: a.lr,
        weight_decay: a.wd,
        seed: a.seed,
        eval_batch: 64,
        target_acc_on: a.target_acc,
        switches,
        freeze_switches: a.freeze_switch,
    };
    let bar = indicatif::ProgressBar::new(a.steps as u64);
    let sel = sinklab::backend::select(a.backend, &sinklab::backend::GpuOptions::default())?;
    errln!("{}", sel.note());
    let progress = |s: usize, l: f64| {
        bar.set_position(s as u64);
        bar.set_message(format!("loss {l:.4}"));
    };
    let rep = match &sel {
        Selected::Cpu { .. } => train_on(
            &Cpu::<f32>::with_threads(rayon::current_num_threads()),
            &cfg,
            progress,
        )?,
        Selected::Gpu { gpu, .. } => train_on(&**gpu, &cfg, progress)?,
    };
    bar.finish_and_clear();
    // A diverged model is an error, never a reported number.
    let costs_finite = rep.costs.iter().all(|c| {
        [c.qk_fro, c.qk_nuclear, c.vo_fro, c.vo_nuclear]
            .iter()
            .chain(c.qk_weight_decay.iter())
            .all(|x| x.is_finite())
    });
    if !rep.eval_loss.is_finite() || !costs_finite {
        bail!(
            "training diverged (eval loss {}, finite costs: {costs_finite}) with --lr {}; lower the learning rate",
            rep.eval_loss,
            a.lr
        );
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rep)?);
        return Ok(0);
    }
    outln!("loss curve (step, train loss):");
    for (s, l) in rep
        .loss_curve
        .iter()
        .step_by((rep.loss_curve.len() / 10).max(1))
    {
        outln!("  {s:>6}  {l:.4}");
    }
    outln!(
        "eval loss {:.4}; accuracy on-queries {:.3}, off-queries {:.3}{}",
        rep.eval_loss,
        rep.acc_on,
        rep.acc_off,
        rep.acc_off_bayes
            .map_or(String::new(), |b| format!(" (Bayes {b:.3})"))
    );
    for (l, (p, c)) in rep.patterns.iter().zip(&rep.costs).enumerate() {
        outln!(
            "layer {l}: off-queries learn {} (sink {:.3}, diagonal {:.3}, previous {:.3}, first visible {:.3}); on-queries: {} (previous {:.3})",
            p.learned,
            p.sink,
            p.diagonal,
            p.previous,
            p.first_visible,
            rep.on_patterns[l].learned,
            rep.on_patterns[l].previous
        );
        outln!(
            "         ‖W_QK‖_F {:.3}, ‖W_QK‖_* {:.3}{}, ‖W_VO‖_F {:.3}, ‖W_VO‖_* {:.3}",
            c.qk_fro,
            c.qk_nuclear,
            c.qk_weight_decay
                .map_or(String::new(), |w| format!(", ½(‖W_Q‖²+‖W_K‖²) {w:.3}")),
            c.vo_fro,
            c.vo_nuclear
        );
        let switch_costs: Vec<String> = c
            .sink_logit_abs
            .map(|s| format!("|s| {s:.3}"))
            .into_iter()
            .chain(
                c.gate_fro
                    .map(|(w, b)| format!("‖W_g‖_F {w:.3}, ‖b_g‖ {b:.3}")),
            )
            .collect();
        if !switch_costs.is_empty() {
            outln!("         {}", switch_costs.join(", "));
        }
        if let Some(u) = rep.switch_used.get(l) {
            outln!(
                "         off-queries switch by {} (ε = {}: gate {:.3}, sink logit {:.3}, BOS sink {:.3}, diagonal {:.3}){}{}{}",
                u.switch,
                u.eps,
                u.gate,
                u.sink_logit,
                u.bos_sink,
                u.diagonal,
                u.mean_sink_mass
                    .map_or(String::new(), |p| format!("; mean sink-logit mass {p:.3}")),
                u.sink_logit_value
                    .map_or(String::new(), |s| format!(", s = {s:.3}")),
                u.mean_gate
                    .map_or(String::new(), |g| format!("; mean gate {g:.3}"))
            );
        }
    }
    outln!("{:.1} s", rep.seconds);
    Ok(0)
}
