//! Hand-written gradients of the training model against central finite
//! differences (f64), for every parameter tensor, in direct and factored
//! form, 1–3 layers, with and without MLP and BOS-key mask; and AdamW.

use faer::Mat;
use rand::RngExt;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sinklab::train::adamw::AdamW;
use sinklab::train::model::Cache;
use sinklab::train::{AttnForm, Model, ModelConfig};

fn check(cfg: ModelConfig, seed: u64) {
    check_batch(cfg, seed, 2, 5);
}

fn check_batch(cfg: ModelConfig, seed: u64, b: usize, t: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let model: Model<f64> = Model::new(cfg, &mut rng).unwrap();
    let toks: Vec<u32> = (0..b * t)
        .map(|r| {
            if r % t == 0 {
                0
            } else {
                rng.random_range(1..cfg.vocab as u32)
            }
        })
        .collect();
    let w: Vec<f64> = (0..b * t)
        .map(|r| {
            if r % t + 1 < t {
                1.0 + (r % 3) as f64
            } else {
                0.0
            }
        })
        .collect();
    let cache = model.forward(&toks, b, t).unwrap();
    let grads = model.backward(&cache, &w);
    let h = 1e-5;
    let mut worst: f64 = 0.0;
    for (k, p) in model.params.iter().enumerate() {
        for _ in 0..6 {
            let (i, j) = (
                rng.random_range(0..p.nrows()),
                rng.random_range(0..p.ncols()),
            );
            let mut mp = model.clone();
            mp.params[k][(i, j)] += h;
            let lp = mp.loss(&mp.forward(&toks, b, t).unwrap(), &w);
            mp.params[k][(i, j)] -= 2.0 * h;
            let lm = mp.loss(&mp.forward(&toks, b, t).unwrap(), &w);
            let fd = (lp - lm) / (2.0 * h);
            let an = grads[k][(i, j)];
            // Central differences: truncation O(h²·|L'''|) ≈ 1e-10 and rounding ≈ ε/h ≈ 1e-11;
            // 1e-6 absolute + 1e-5 relative sits well above both and far below any real bug.
            let err = (fd - an).abs();
            worst = worst.max(err / (1e-6 + 1e-5 * an.abs().max(fd.abs())));
            assert!(
                err <= 1e-6 + 1e-5 * an.abs().max(fd.abs()),
                "{} ({i},{j}): fd {fd} vs analytic {an} [{cfg:?}]",
                model.names[k]
            );
        }
    }
    assert!(worst.is_finite());
}

fn cfg(layers: usize, attn: AttnForm, mlp: usize, mask: bool) -> ModelConfig {
    ModelConfig {
        vocab: 7,
        d: 6,
        max_len: 8,
        layers,
        attn,
        mlp_hidden: mlp,
        mask_bos_key: mask,
        init_scale: 1.0,
        switches: sinklab::train::Switches::OFF,
    }
}

#[test]
fn gradients_match_finite_differences() {
    check(cfg(1, AttnForm::Factored { r: 3 }, 0, false), 1);
    check(cfg(1, AttnForm::Direct, 5, false), 2);
    check(cfg(2, AttnForm::Factored { r: 4 }, 5, true), 3);
    check(cfg(3, AttnForm::Direct, 0, true), 4);
    check(cfg(3, AttnForm::Factored { r: 2 }, 4, false), 5);
}

/// A batch of `B·T` = 1280 rows runs as two chunks of 2 and 3 sequences
/// (model.rs, `CHUNK_ROWS` = 512) whose gradients are summed: the sum must
/// still be the gradient of the whole batch's loss.
#[test]
fn gradients_match_finite_differences_across_chunks() {
    let c = ModelConfig {
        max_len: 256,
        ..cfg(2, AttnForm::Factored { r: 3 }, 5, true)
    };
    check_batch(c, 6, 5, 256);
    let c = ModelConfig {
        max_len: 256,
        ..cfg(1, AttnForm::Direct, 4, false)
    };
    check_batch(c, 7, 5, 256);
}

/// A cache and gradient buffers reused across batches of other shapes (more
/// chunks, then one) give exactly the gradients of fresh ones.
#[test]
fn reused_buffers_give_the_fresh_gradients() {
    let mut rng = StdRng::seed_from_u64(8);
    let c = ModelConfig {
        max_len: 300,
        ..cfg(2, AttnForm::Factored { r: 4 }, 5, false)
    };
    let model: Model<f64> = Model::new(c, &mut rng).unwrap();
    let mut cache = Cache::new();
    let mut grads = Vec::new();
    for (b, t) in [(6, 300), (3, 7), (2, 300), (4, 5)] {
        let toks: Vec<u32> = (0..b * t).map(|_| rng.random_range(0..7)).collect();
        let w: Vec<f64> = (0..b * t)
            .map(|r| {
                if r % t + 1 < t {
                    0.5 + (r % 4) as f64
                } else {
                    0.0
                }
            })
            .collect();
        model.forward_into(&toks, b, t, &mut cache).unwrap();
        model.backward_into(&mut cache, &w, &mut grads);
        let fresh = model.forward(&toks, b, t).unwrap();
        assert_eq!(model.loss(&cache, &w), model.loss(&fresh, &w));
        let want = model.backward(&fresh, &w);
        for (k, (g, h)) in grads.iter().zip(&want).enumerate() {
            assert_eq!(g, h, "{} at b = {b}, t = {t}", model.names[k]);
        }
        for r in 0..b * t {
            assert_eq!(model.predict(&cache, r), model.predict(&fresh, r));
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let mut rng = StdRng::seed_from_u64(0);
    assert!(Model::<f64>::new(cfg(4, AttnForm::Direct, 0, false), &mut rng).is_err());
    let m: Model<f64> = Model::new(cfg(1, AttnForm::Direct, 0, false), &mut rng).unwrap();
    assert!(m.forward(&[0, 1, 99], 1, 3).is_err());
    assert!(m.forward(&[0, 1, 2], 2, 3).is_err());
}

#[test]
fn adamw_decays_and_descends() {
    // On f(θ) = ½θ², Adam's first step moves by lr·sign(g); decay shrinks θ by lr·λ·θ.
    let mut p = vec![Mat::from_fn(1, 1, |_, _| 2.0f64)];
    let g = vec![Mat::from_fn(1, 1, |_, _| 2.0f64)];
    let mut opt = AdamW::new(&p, 0.1, 0.5);
    opt.step(&mut p, &g, &[true]);
    let expect = 2.0 * (1.0 - 0.1 * 0.5) - 0.1 * 1.0 / (1.0 + 1e-8 / 2.0);
    assert!((p[0][(0, 0)] - expect).abs() < 1e-9, "{}", p[0][(0, 0)]);
    let mut q = vec![Mat::from_fn(1, 1, |_, _| 2.0f64)];
    let mut opt2 = AdamW::new(&q, 0.1, 0.5);
    opt2.step(&mut q, &g, &[false]);
    assert!((q[0][(0, 0)] - 1.9).abs() < 1e-6);
}

/// Emergence (§10 bigram-copy): with the BOS key visible, the off-queries of a trained
/// one-layer model route to the sink while the on-queries attend to the previous token.
/// Measured with this seed: sink score 0.64, on-query accuracy 0.96 (Bayes-level off-accuracy).
#[test]
fn sink_emerges_with_bos() {
    use sinklab::train::{TaskSpec, TrainConfig, train};
    let cfg = TrainConfig {
        task: TaskSpec::BigramCopy {
            n: 8,
            k: 2,
            alpha: 0.3,
        },
        t: 24,
        d: 24,
        attn: AttnForm::Factored { r: 24 },
        batch: 32,
        steps: 800,
        lr: 5e-3,
        ..TrainConfig::default()
    };
    let r = train(&cfg, |_, _| {}).unwrap();
    let p = &r.patterns[0];
    assert!(r.acc_on > 0.9, "copy rule not learned: {}", r.acc_on);
    assert!(p.sink > 0.5 && p.learned == "sink", "{p:?}");
    assert!(r.on_patterns[0].previous > 0.5, "{:?}", r.on_patterns[0]);
    assert!(
        r.loss_curve.last().unwrap().1 < r.loss_curve[0].1,
        "loss must decrease"
    );
    // With the BOS key masked, no query i ≥ 1 can put mass on position 0.
    let masked = TrainConfig {
        mask_bos_key: true,
        steps: 50,
        ..cfg
    };
    let m = train(&masked, |_, _| {}).unwrap();
    assert!(
        m.patterns[0].sink < 1e-6 && m.patterns[0].learned != "sink",
        "{:?}",
        m.patterns[0]
    );
}

/// The convergence criterion stops a run at the first probe where the on-query accuracy
/// reaches the target (a multiple of the probe interval), and reports a run that never
/// reaches it as not converged after its full budget.
#[test]
fn convergence_criterion_stops_early_or_reports_failure() {
    use sinklab::train::{PROBE_EVERY, TaskSpec, TrainConfig, train};
    let cfg = TrainConfig {
        task: TaskSpec::BigramCopy {
            n: 8,
            k: 2,
            alpha: 0.3,
        },
        t: 12,
        d: 16,
        attn: AttnForm::Factored { r: 16 },
        batch: 16,
        steps: 3000,
        target_acc_on: Some(0.8),
        ..TrainConfig::default()
    };
    let r = train(&cfg, |_, _| {}).unwrap();
    assert_eq!(r.converged, Some(true), "steps run {}", r.steps_run);
    assert!(
        r.steps_run < cfg.steps && r.steps_run % PROBE_EVERY == 0,
        "{}",
        r.steps_run
    );
    // The probe set is held out: the evaluation set must confirm most of the skill.
    assert!(r.acc_on > 0.6, "eval on-accuracy {}", r.acc_on);
    // 20 steps cannot reach perfect accuracy: full budget, not converged.
    let short = TrainConfig {
        steps: 20,
        target_acc_on: Some(1.0),
        ..cfg.clone()
    };
    let s = train(&short, |_, _| {}).unwrap();
    assert_eq!((s.converged, s.steps_run), (Some(false), 20));
    let bad = TrainConfig {
        target_acc_on: Some(1.5),
        ..cfg
    };
    assert!(train(&bad, |_, _| {}).is_err());
}

/// Same seed, same output, whatever the threads: a run outside any pool, inside a 1-thread
/// pool and inside a 2-thread pool gives bit-identical losses and costs (the batch is split
/// into chunks by its size only, and each chunk's reductions run in a fixed order).
#[test]
fn training_does_not_depend_on_the_thread_count() {
    use sinklab::train::{TaskSpec, TrainConfig, train};
    let cfg = TrainConfig {
        task: TaskSpec::BigramCopy {
            n: 8,
            k: 2,
            alpha: 0.3,
        },
        t: 40,
        d: 16,
        attn: AttnForm::Factored { r: 16 },
        batch: 16,
        steps: 30,
        ..TrainConfig::default()
    };
    let run = || {
        let r = train(&cfg, |_, _| {}).unwrap();
        (r.loss_curve, r.costs[0].qk_fro, r.eval_loss)
    };
    let outside = run();
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        assert_eq!(pool.install(run), outside, "{threads} threads");
    }
}

/// The switch variants of the model: (sink logit, gate form).
fn switch_settings() -> Vec<sinklab::train::Switches> {
    use sinklab::train::{GateForm, Switches};
    let mut v = Vec::new();
    for sink_logit in [false, true] {
        for gate in [GateForm::Off, GateForm::Head, GateForm::Elementwise] {
            let s = Switches {
                sink_logit,
                gate,
                ..Switches::OFF
            };
            if !s.is_off() {
                v.push(s);
            }
        }
    }
    v
}

/// The explicit switches (docs/theory.md §11) in the training model: the host model's
/// gradients against finite differences (the same check as every other parameter).
#[test]
fn switch_gradients_match_finite_differences() {
    for (k, switches) in switch_settings().into_iter().enumerate() {
        for (attn, mask) in [
            (AttnForm::Direct, false),
            (AttnForm::Factored { r: 3 }, true),
        ] {
            let c = ModelConfig {
                switches,
                ..cfg(2, attn, 4, mask)
            };
            check(c, 40 + k as u64);
        }
    }
}

/// Device gradients and loss of every switch variant on `be` against the host model in
/// f64 (parameters rounded to the backend's precision first, so only the computation's
/// rounding differs); `rel` bounds |device − host| relative to a tensor's largest entry.
fn device_switch_grads<Bk: sinklab::backend::Backend>(be: &Bk, rel: f64) {
    use sinklab::backend::Real;
    use sinklab::train::device::DeviceModel;
    let (b, t) = (3, 6);
    for (k, switches) in switch_settings().into_iter().enumerate() {
        for (attn, mask, mlp) in [
            (AttnForm::Direct, true, 0),
            (AttnForm::Factored { r: 4 }, false, 5),
        ] {
            let c = ModelConfig {
                switches,
                ..cfg(2, attn, mlp, mask)
            };
            let mut rng = StdRng::seed_from_u64(70 + k as u64);
            let mut m: Model<f64> = Model::new(c, &mut rng).unwrap();
            // Switch parameters away from their initial zeros; every entry exact in Bk::Elem.
            for (p, name) in m.params.iter_mut().zip(&m.names) {
                let away = name.ends_with(".sink") || name.ends_with(".bg");
                *p = Mat::from_fn(p.nrows(), p.ncols(), |i, j| {
                    let x = if away {
                        rng.random_range(-1.5..1.5)
                    } else {
                        p[(i, j)]
                    };
                    <Bk::Elem as Real>::from_f64(x).to_f64()
                });
            }
            let toks: Vec<u32> = (0..b * t)
                .map(|r| {
                    if r % t == 0 {
                        0
                    } else {
                        rng.random_range(1..7)
                    }
                })
                .collect();
            let w: Vec<f64> = (0..b * t)
                .map(|r| {
                    if r % t + 1 < t {
                        1.0 + (r % 3) as f64
                    } else {
                        0.0
                    }
                })
                .collect();
            let opt = AdamW::new(&m.params, 1e-2, 1e-2);
            let mut dev = DeviceModel::new(be, &m, &opt.hyper, b, t, &w).unwrap();
            dev.forward_backward(be, &toks).unwrap();
            let got = dev.grads(be).unwrap();
            let cache = m.forward(&toks, b, t).unwrap();
            let want = m.backward(&cache, &w);
            let (dl, hl) = (dev.loss(be).unwrap(), m.loss(&cache, &w));
            assert!(
                (dl - hl).abs() <= rel * hl.abs(),
                "loss {dl} vs {hl} [{c:?}]"
            );
            for (n, (g, r)) in got.iter().zip(&want).enumerate() {
                let max = (0..r.ncols())
                    .flat_map(|j| (0..r.nrows()).map(move |i| (i, j)))
                    .fold(0.0f64, |a, (i, j)| a.max(r[(i, j)].abs()));
                assert!(max > 0.0, "{}: zero gradient [{c:?}]", m.names[n]);
                for j in 0..r.ncols() {
                    for i in 0..r.nrows() {
                        let err = (g[(i, j)] - r[(i, j)]).abs();
                        assert!(
                            err <= rel * max,
                            "{} ({i},{j}): device {} vs host {} [{c:?}]",
                            m.names[n],
                            g[(i, j)],
                            r[(i, j)]
                        );
                    }
                }
            }
        }
    }
}

/// The device model (`train::device`) on `Cpu<f64>` computes the same loss and gradients
/// as the host model with every switch: both in f64, they differ only by the order of the
/// sums (at most ~100 terms each at this size, so by a few hundred ulps of the largest
/// entry); 1e-10 relative to a tensor's largest gradient entry is far above that and far
/// below the O(1) relative error of a missing or wrong term.
#[test]
fn device_switch_gradients_match_the_host_model() {
    device_switch_grads(&sinklab::backend::Cpu::<f64>::new(), 1e-10);
}

/// The same on `Cpu<f32>` and on wgpu-f32 (Vulkan; SKIP without an adapter): the switch
/// parts run as host round trips, so they need no kernel of their own. Tolerance: the
/// bound of `tests/train_device.rs`, 2·eps·(c·L + 3)·n relative to the largest entry, with
/// n = B·T + V + d + T + h = 42 terms per sum and c = 6 products per layer (its 4 plus the
/// gate's and the sink's): 2·1.19e-7·15·42 ≈ 1.5e-4.
#[test]
fn device_switch_gradients_match_the_host_model_in_f32() {
    use sinklab::backend::{BackendError, GpuOptions, Wgpu};
    let rel = 2.0 * f32::EPSILON as f64 * 15.0 * 42.0;
    device_switch_grads(&sinklab::backend::Cpu::<f32>::new(), rel);
    match Wgpu::new(&GpuOptions::vulkan()) {
        Ok(g) => device_switch_grads(&g, rel),
        Err(BackendError::NoAdapter(why)) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIP: wgpu switch gradients: {why}");
        }
        Err(e) => panic!("a Vulkan adapter exists but the device failed: {e}"),
    }
}

/// A short seeded run with each switch trains (the loss decreases), trains the switch's
/// own parameters (the sink logit leaves its initial 0; the gate leaves σ(·) ≈ ½ somewhere),
/// and reports which switch the off-queries use.
#[test]
fn each_switch_trains_and_is_classified() {
    use sinklab::train::{GateForm, Switches, TaskSpec, TrainConfig, train_model};
    let base = TrainConfig {
        task: TaskSpec::BigramCopy {
            n: 8,
            k: 2,
            alpha: 0.3,
        },
        t: 12,
        d: 16,
        attn: AttnForm::Factored { r: 16 },
        batch: 16,
        steps: 150,
        lr: 1e-2,
        eval_batch: 16,
        ..TrainConfig::default()
    };
    let on = |sink_logit, gate| Switches {
        sink_logit,
        gate,
        ..Switches::OFF
    };
    let variants = [
        ("bos", Switches::OFF, false),
        ("masked", Switches::OFF, true),
        ("sink-logit", on(true, GateForm::Off), false),
        ("gate", on(false, GateForm::Head), false),
        ("elementwise gate", on(false, GateForm::Elementwise), false),
        ("sink-logit+gate", on(true, GateForm::Head), false),
    ];
    let names = ["bos_sink", "sink_logit", "gate", "diagonal", "mixed"];
    for (what, switches, mask) in variants {
        let cfg = TrainConfig {
            switches,
            mask_bos_key: mask,
            ..base.clone()
        };
        let (r, model) = train_model(&cfg, |_, _| {}).unwrap();
        let (first, last) = (r.loss_curve[0].1, r.loss_curve.last().unwrap().1);
        assert!(last < first, "{what}: loss {first} -> {last}");
        assert_eq!(r.switch_used.len(), 1, "{what}");
        let u = &r.switch_used[0];
        assert!(names.contains(&u.switch.as_str()), "{what}: {u:?}");
        let fr = u.gate + u.sink_logit + u.bos_sink + u.diagonal;
        assert!((0.0..=1.0 + 1e-12).contains(&fr), "{what}: {u:?}");
        assert_eq!(u.mean_sink_mass.is_some(), switches.sink_logit, "{what}");
        assert_eq!(
            u.mean_gate.is_some(),
            switches.gate != GateForm::Off,
            "{what}"
        );
        if switches.sink_logit {
            let s = model.sink_logit(0).unwrap();
            assert!(s != 0.0 && u.sink_logit_value == Some(s), "{what}: s = {s}");
        } else {
            assert_eq!(u.sink_logit, 0.0, "{what}");
        }
        if switches.gate == GateForm::Off {
            assert_eq!(u.gate, 0.0, "{what}");
        } else {
            let g = u.mean_gate.unwrap();
            assert!(
                (0.0..=1.0).contains(&g) && (g - 0.5).abs() > 1e-3,
                "{what}: gate {g}"
            );
        }
        if mask {
            assert_eq!(u.bos_sink, 0.0, "{what}: {u:?}");
        }
    }
}

/// The control of a mechanism present but untrained: with `freeze_switches` the switch
/// parameters keep their initial values exactly (s = 0, b_g = 0, W_g as drawn) while
/// the rest trains; without a switch the option is refused.
#[test]
fn frozen_switches_keep_their_initial_values() {
    use sinklab::train::{GateForm, Switches, TaskSpec, TrainConfig, train_model};
    let cfg = TrainConfig {
        task: TaskSpec::BigramCopy {
            n: 8,
            k: 2,
            alpha: 0.3,
        },
        t: 10,
        d: 12,
        attn: AttnForm::Factored { r: 12 },
        batch: 8,
        steps: 60,
        eval_batch: 8,
        switches: Switches {
            sink_logit: true,
            gate: GateForm::Head,
            ..Switches::OFF
        },
        freeze_switches: true,
        ..TrainConfig::default()
    };
    let (r, m) = train_model(&cfg, |_, _| {}).unwrap();
    let (_, m1) = train_model(
        &TrainConfig {
            steps: 1,
            ..cfg.clone()
        },
        |_, _| {},
    )
    .unwrap();
    let (_, live) = train_model(
        &TrainConfig {
            freeze_switches: false,
            ..cfg.clone()
        },
        |_, _| {},
    )
    .unwrap();
    assert!(r.loss_curve.last().unwrap().1 < r.loss_curve[0].1);
    assert_eq!(m.sink_logit(0), Some(0.0));
    assert_ne!(
        live.sink_logit(0),
        Some(0.0),
        "an unfrozen sink logit trains"
    );
    let ((w, b), (w1, _)) = (m.gate_params(0).unwrap(), m1.gate_params(0).unwrap());
    assert!(b.col_iter().all(|c| c.iter().all(|&x| x == 0.0)));
    assert_eq!(w, w1, "W_g moved although frozen");
    assert_ne!(live.gate_params(0).unwrap().0, w1, "an unfrozen W_g trains");
    // A sink logit started elsewhere: frozen, it stays at its start exactly; the start at
    // the switching value ln(T(1−ε)/ε) is ln(10 · 9) at T = 10, ε = 0.1.
    let s0 = sinklab::train::SinkLogitInit::parse("switching")
        .unwrap()
        .value(cfg.t);
    assert!((s0 - 90f64.ln()).abs() < 1e-12, "{s0}");
    let (_, started) = train_model(
        &TrainConfig {
            switches: cfg.switches.with_sink_logit_init(s0),
            ..cfg.clone()
        },
        |_, _| {},
    )
    .unwrap();
    // Training runs in f32: the start is s0 rounded to f32, kept exactly.
    assert_eq!(started.sink_logit(0), Some(s0 as f32 as f64));
    // The start is written only when set: a configuration without it serialises as before.
    let text = serde_json::to_string(&cfg.switches).unwrap();
    assert!(!text.contains("sink_logit_init"), "{text}");
    let moved = serde_json::to_string(&cfg.switches.with_sink_logit_init(s0)).unwrap();
    assert!(moved.contains("sink_logit_init"), "{moved}");
    assert!(sinklab::train::SinkLogitInit::parse("inf").is_err());
    let bad = TrainConfig {
        switches: Switches::OFF,
        ..cfg
    };
    assert!(train_model(&bad, |_, _| {}).is_err());
}
