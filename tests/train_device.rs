//! The training model run device-resident (`train::device`) on every dense
//! backend — cpu-f64, cpu-f32, wgpu-f32 — against the host model of
//! `train::model`, whose hand-written gradients `tests/train.rs` checks
//! against finite differences.
//!
//! - Gradients: one forward/backward on the device equals `Model::backward`
//!   in f64 on the same parameters (rounded to the backend's precision, so
//!   only the computation's rounding differs), for direct and factored
//!   attention, with and without MLP, 1 and 2 layers, BOS key masked or not.
//! - Training: a short run gives the host path's loss curve; `train_on(be, …)`
//!   is that device loop on `be` (bit for bit) and stays within f32 noise of
//!   the default `train()` (on `Cpu<f32>`).
//! - Control: a wrong gradient (the BOS-key mask forgotten; one entry off by
//!   a little more than the tolerance) fails the same comparison.
//!
//! The backends and the per-backend instantiation come from the shared harness
//! `tests/support/devices.rs`. The wgpu instantiation pins Vulkan (llvmpipe in CI). With no adapter it
//! prints `SKIP: …` to stderr and returns; with `SINKLAB_REQUIRE_GPU=1` a
//! missing adapter is a failure instead.

#[macro_use]
mod support;

use faer::Mat;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sinklab::backend::{Backend, Cpu, GpuOptions, Real, Wgpu};
use sinklab::train::adamw::AdamW;
use sinklab::train::device::DeviceModel;
use sinklab::train::{AttnForm, Model, ModelConfig};
use support::devices::wgpu_f32;

const B: usize = 3;
const T: usize = 6;

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

/// Every combination the model supports at 1–2 layers.
fn configs() -> Vec<ModelConfig> {
    let mut v = Vec::new();
    for layers in [1, 2] {
        for attn in [AttnForm::Direct, AttnForm::Factored { r: 4 }] {
            for mlp in [0, 5] {
                for mask in [false, true] {
                    v.push(cfg(layers, attn, mlp, mask));
                }
            }
        }
    }
    v
}

/// BOS (0) first; afterwards the successor rule x ↦ x mod (V−1) + 1 with
/// probability 0.8, else a uniform token: a pattern a short run can learn.
fn tokens(rng: &mut StdRng, vocab: usize, b: usize, t: usize) -> Vec<u32> {
    let mut v = Vec::with_capacity(b * t);
    for r in 0..b * t {
        let x = if r % t == 0 {
            0
        } else if rng.random_range(0.0..1.0) < 0.8 {
            v[r - 1] % (vocab as u32 - 1) + 1
        } else {
            rng.random_range(1..vocab as u32)
        };
        v.push(x);
    }
    v
}

/// Unequal loss weights (as in `tests/train.rs`), 0 on the last row of each sequence.
fn weights(b: usize, t: usize) -> Vec<f64> {
    (0..b * t)
        .map(|r| {
            if r % t + 1 < t {
                1.0 + (r % 3) as f64
            } else {
                0.0
            }
        })
        .collect()
}

fn eps<Bk: Backend>() -> f64 {
    <Bk::Elem as Real>::EPS
}

/// A seeded f64 model whose parameters are exactly representable in the
/// backend's precision: the device and the reference then start from the
/// same numbers and differ only by the rounding of the computation.
fn model_for<Bk: Backend>(c: ModelConfig, seed: u64) -> Model<f64> {
    let mut m: Model<f64> = Model::new(c, &mut StdRng::seed_from_u64(seed)).unwrap();
    for p in &mut m.params {
        *p = Mat::from_fn(p.nrows(), p.ncols(), |i, j| {
            <Bk::Elem as Real>::from_f64(p[(i, j)]).to_f64()
        });
    }
    m
}

/// Per-tensor bound on |device − reference| in a precision with machine
/// epsilon `eps`: every gradient entry is a chain of ≤ 4L + 3 products and
/// reductions (per layer: MLP 2, attention 4 each way; plus unembedding,
/// cross-entropy and embedding), each a sum of at most
/// n = B·T + V + d + T + h terms, and the first-order forward error of a
/// length-n sum is n·(eps/2)·Σ|terms| (Higham §3.1). With Σ|terms| taken as
/// the tensor's largest gradient entry and a factor 4 for the magnitude sums
/// and the softmax/exp conditioning at init scale 1, the bound is
/// 2·eps·(4L + 3)·n·max|g_ref|. A wrong gradient errs by O(max|g|), i.e.
/// 10³–10⁴× this for f32 (see `control_*`).
fn tol(eps: f64, c: &ModelConfig, max_g: f64) -> f64 {
    let n = (B * T + c.vocab + c.d + T + c.mlp_hidden) as f64;
    2.0 * eps * (4.0 * c.layers as f64 + 3.0) * n * max_g
}

/// `Ok(worst err/tol)` or `Err(the first entry over its tolerance)`.
fn compare(
    names: &[String],
    got: &[Mat<f64>],
    want: &[Mat<f64>],
    eps: f64,
    c: &ModelConfig,
) -> Result<f64, String> {
    let mut worst: f64 = 0.0;
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            (g.nrows(), g.ncols()),
            (w.nrows(), w.ncols()),
            "{}",
            names[k]
        );
        let mut max_g: f64 = 0.0;
        for j in 0..w.ncols() {
            for i in 0..w.nrows() {
                max_g = max_g.max(w[(i, j)].abs());
            }
        }
        let t = tol(eps, c, max_g) + f64::MIN_POSITIVE;
        for j in 0..w.ncols() {
            for i in 0..w.nrows() {
                let err = (g[(i, j)] - w[(i, j)]).abs();
                if err.is_nan() || err > t {
                    return Err(format!(
                        "{} ({i},{j}): device {} vs reference {}, |err| {err:.3e} > tol {t:.3e}",
                        names[k],
                        g[(i, j)],
                        w[(i, j)]
                    ));
                }
                worst = worst.max(err / t);
            }
        }
    }
    Ok(worst)
}

/// Device gradients of `m` (built on `be`) on one batch, and the reference.
fn both_grads<Bk: Backend>(
    be: &Bk,
    m: &Model<f64>,
    toks: &[u32],
    w: &[f64],
) -> (Vec<Mat<f64>>, Vec<Mat<f64>>, f64, f64) {
    let opt = AdamW::new(&m.params, 1e-2, 1e-2);
    let mut dev = DeviceModel::new(be, m, &opt.hyper, B, T, w).unwrap();
    dev.forward_backward(be, toks).unwrap();
    let got = dev.grads(be).unwrap();
    let loss = dev.loss(be).unwrap();
    let cache = m.forward(toks, B, T).unwrap();
    (got, m.backward(&cache, w), loss, m.loss(&cache, w))
}

fn gradients_match<Bk: Backend>(be: &Bk) {
    let w = weights(B, T);
    let mut worst: f64 = 0.0;
    for (i, c) in configs().into_iter().enumerate() {
        let seed = 100 + i as u64;
        let m = model_for::<Bk>(c, seed);
        let toks = tokens(&mut StdRng::seed_from_u64(seed), c.vocab, B, T);
        let (got, want, loss, loss_ref) = both_grads(be, &m, &toks, &w);
        let r = compare(&m.names, &got, &want, eps::<Bk>(), &c)
            .unwrap_or_else(|e| panic!("{}: {c:?}: {e}", be.describe()));
        worst = worst.max(r);
        // The loss is a sum of B·T·V-term log-sum-exps: same bound with n = B·T + V.
        let lt = 4.0 * eps::<Bk>() * (B * T + c.vocab) as f64 * loss_ref;
        assert!(
            (loss - loss_ref).abs() <= lt,
            "{}: {c:?}: loss {loss} vs {loss_ref} (tol {lt:.3e})",
            be.describe()
        );
    }
    eprintln!("{}: worst gradient err/tol {worst:.3e}", be.describe());
}

/// Forgetting the BOS-key mask, or one entry off by 1.5× the tolerance, fails.
fn wrong_gradient_is_caught<Bk: Backend>(be: &Bk) {
    let w = weights(B, T);
    let masked = cfg(2, AttnForm::Factored { r: 4 }, 5, true);
    let m = model_for::<Bk>(masked, 7);
    let toks = tokens(&mut StdRng::seed_from_u64(7), masked.vocab, B, T);
    // The device computes the unmasked model's gradient; the reference is masked.
    let mut unmasked = m.clone();
    unmasked.cfg.mask_bos_key = false;
    let (got, _, _, _) = both_grads(be, &unmasked, &toks, &w);
    let (good, want, _, _) = both_grads(be, &m, &toks, &w);
    let e = compare(&m.names, &got, &want, eps::<Bk>(), &masked);
    assert!(e.is_err(), "{}: missing mask not caught", be.describe());
    assert!(compare(&m.names, &good, &want, eps::<Bk>(), &masked).is_ok());
    // One entry of W_Q's gradient moved by 1.5× its tolerance.
    let k = m.names.iter().position(|n| n == "l1.wq").unwrap();
    let max_g = (0..want[k].nrows())
        .flat_map(|i| (0..want[k].ncols()).map(move |j| (i, j)))
        .map(|(i, j)| want[k][(i, j)].abs())
        .fold(0.0, f64::max);
    let mut bad = good.clone();
    bad[k][(1, 2)] += 1.5 * tol(eps::<Bk>(), &masked, max_g);
    assert!(
        compare(&m.names, &bad, &want, eps::<Bk>(), &masked).is_err(),
        "{}: perturbed entry not caught",
        be.describe()
    );
}

const STEPS: usize = 20;

/// Host loss curve of `m` in precision F (model.rs forward/backward + the
/// backend's AdamW update on its matrices, `train::adamw`).
fn host_curve<F: Real>(m: &Model<f64>, batches: &[Vec<u32>], w: &[f64]) -> Vec<f64> {
    let mut m: Model<F> = m.cast();
    let mut opt = AdamW::new(&m.params, 2e-2, 1e-2);
    batches
        .iter()
        .map(|toks| {
            let cache = m.forward(toks, B, T).unwrap();
            let g = m.backward(&cache, w);
            let l = m.loss(&cache, w);
            opt.step(&mut m.params, &g, &m.decay);
            l
        })
        .collect()
}

fn training_curve_matches<Bk: Backend>(be: &Bk) {
    let w = weights(B, T);
    for (c, seed) in [
        (cfg(1, AttnForm::Factored { r: 4 }, 5, false), 11),
        (cfg(2, AttnForm::Direct, 0, true), 12),
    ] {
        let m = model_for::<Bk>(c, seed);
        let mut rng = StdRng::seed_from_u64(seed ^ 0xBA7C);
        let batches: Vec<Vec<u32>> = (0..STEPS)
            .map(|_| tokens(&mut rng, c.vocab, B, T))
            .collect();
        let c64 = host_curve::<f64>(&m, &batches, &w);
        let c32 = host_curve::<f32>(&m, &batches, &w);
        let opt = AdamW::new(&m.params, 2e-2, 1e-2);
        let mut dev = DeviceModel::new(be, &m, &opt.hyper, B, T, &w).unwrap();
        let got: Vec<f64> = batches
            .iter()
            .map(|toks| dev.step(be, toks, true).unwrap().unwrap())
            .collect();
        assert!(
            got[STEPS - 1] < 0.8 * got[0],
            "{}: did not train: {got:?}",
            be.describe()
        );
        // The f32-vs-f64 gap of the host path measures how rounding grows
        // along the run; the device may differ from f64 by that growth scaled
        // to its own precision (first order in eps), ×4, plus the rounding of
        // the loss itself (as tests/backend.rs's training curve).
        let scale = eps::<Bk>() / f32::EPSILON as f64;
        let mut noise: f64 = 0.0;
        for i in 0..STEPS {
            noise = noise.max((c32[i] - c64[i]).abs());
            let tol = 4.0 * noise * scale + 8.0 * eps::<Bk>() * (B * T + c.vocab) as f64 * c64[i];
            let err = (got[i] - c64[i]).abs();
            assert!(
                err <= tol,
                "{}: {c:?}: step {i}: loss {} vs f64 {} (|err| {err:.3e} > {tol:.3e}; f32 noise {noise:.3e})",
                be.describe(),
                got[i],
                c64[i]
            );
        }
        // Parameters come back into a host model that evaluates like the device.
        let mut back = m.clone();
        dev.store(be, &mut back).unwrap();
        assert!(back.params[0] != m.params[0], "store: parameters unchanged");
    }
}

device_suite!([cpu_f64, cpu_f32, wgpu_f32, wgpu_f32_tiled]; {
    gradients_match_the_host_model => gradients_match,
    wrong_gradients_are_caught => wrong_gradient_is_caught,
    short_run_same_loss_curve => training_curve_matches,
});

/// The steady-state training step on wgpu reuses its wgpu objects: after a
/// warm-up step no bind group is created, each step is one submit (two when the
/// loss is read back: the read submits the forward/backward, the update goes
/// in the step's own submit), and every step records the same dispatches.
/// Its losses equal those of the same steps on the shared device (same
/// kernels, same order), so the batching changed nothing but the submits.
#[test]
fn wgpu_training_step_is_one_submit_without_new_bind_groups() {
    let Some(shared) = wgpu_f32() else { return };
    // A private device: other tests use the shared one concurrently, and the
    // counters must see this model's steps only.
    let g = Wgpu::new(&GpuOptions::vulkan()).unwrap();
    let c = cfg(2, AttnForm::Factored { r: 4 }, 5, true);
    let m = model_for::<Wgpu>(c, 11);
    let mut rng = StdRng::seed_from_u64(12);
    let batches: Vec<Vec<u32>> = (0..8).map(|_| tokens(&mut rng, c.vocab, B, T)).collect();
    let w = weights(B, T);
    let opt = AdamW::<f64>::new(&m.params, 1e-2, 1e-2);
    let mut dev = DeviceModel::new(&g, &m, &opt.hyper, B, T, &w).unwrap();
    let mut twin = DeviceModel::new(shared, &m, &opt.hyper, B, T, &w).unwrap();
    // Warm-up step, with the loss read so its reduction is bound too.
    dev.step(&g, &batches[0], true).unwrap();
    twin.step(shared, &batches[0], true).unwrap();
    let mut last = g.stats();
    let mut per_step = None;
    for (i, toks) in batches[1..].iter().enumerate() {
        let want_loss = i % 3 == 2;
        let loss = dev.step(&g, toks, want_loss).unwrap();
        let twin_loss = twin.step(shared, toks, want_loss).unwrap();
        assert_eq!(loss, twin_loss, "step {}", i + 2);
        let now = g.stats();
        assert_eq!(now.bind_groups, last.bind_groups, "step {}", i + 2);
        let submits = now.submits - last.submits;
        assert_eq!(submits, 1 + u64::from(want_loss), "step {}", i + 2);
        // The loss read adds its reduction (one product) to the step.
        let d = now.dispatches - last.dispatches - u64::from(want_loss);
        assert_eq!(*per_step.get_or_insert(d), d, "step {}", i + 2);
        last = now;
    }
    assert!(per_step.unwrap() > 20, "{per_step:?} dispatches per step");
}

/// `train_on(be, …)` runs the device loop on `be`: its loss curve is bit for
/// bit the one of a `DeviceModel` driven by hand on `be` with `train()`'s
/// seed, task, initialisation and batches, and it stays within f32 noise of
/// the default run (`train()`, on `Cpu<f32>`).
fn train_on_is_the_device_loop<Bk: Backend>(be: &Bk) {
    use sinklab::backend::AdamWHyper;
    use sinklab::tasks::BigramCopy;
    use sinklab::train::{TaskSpec, TrainConfig, train, train_on};
    let cfg = TrainConfig {
        task: TaskSpec::BigramCopy {
            n: 6,
            k: 2,
            alpha: 0.3,
        },
        t: 8,
        d: 8,
        attn: AttnForm::Factored { r: 8 },
        mask_bos_key: true,
        batch: 4,
        steps: 12,
        seed: 3,
        eval_batch: 8,
        ..TrainConfig::default()
    };
    let on_be = train_on(be, &cfg, |_, _| {}).unwrap();
    let host = train(&cfg, |_, _| {}).unwrap();

    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let task = BigramCopy::new(6, 2, 0.3, &mut rng).unwrap();
    let mcfg = ModelConfig {
        vocab: 7,
        d: cfg.d,
        max_len: cfg.t,
        layers: cfg.layers,
        attn: cfg.attn,
        mlp_hidden: cfg.mlp_hidden,
        mask_bos_key: cfg.mask_bos_key,
        init_scale: 1.0,
        switches: sinklab::train::Switches::OFF,
    };
    let model: Model<f32> = Model::new(mcfg, &mut rng).unwrap();
    let opt = AdamWHyper {
        lr: cfg.lr,
        weight_decay: cfg.weight_decay,
        ..AdamWHyper::default()
    };
    let w: Vec<f64> = (0..cfg.batch * cfg.t)
        .map(|r| if r % cfg.t + 1 < cfg.t { 1.0 } else { 0.0 })
        .collect();
    let mut dev = DeviceModel::new(be, &model, &opt, cfg.batch, cfg.t, &w).unwrap();
    let by_hand: Vec<f64> = (0..cfg.steps)
        .map(|_| {
            let toks: Vec<u32> = (0..cfg.batch)
                .flat_map(|_| task.sample(cfg.t, cfg.bos, &mut rng).tokens)
                .collect();
            dev.step(be, &toks, true).unwrap().unwrap()
        })
        .collect();
    let got: Vec<f64> = on_be.loss_curve.iter().map(|&(_, l)| l).collect();
    assert_eq!(
        got,
        by_hand,
        "{}: train_on() is not the device loop",
        be.describe()
    );
    let mut worst: f64 = 0.0;
    for ((_, a), (_, b)) in on_be.loss_curve.iter().zip(&host.loss_curve) {
        worst = worst.max((a - b).abs() / b);
    }
    // The same bound as the loss's own rounding in `gradients_match`
    // (8·eps·(B·T + V) relative, f32: the coarser of the two runs).
    let tol = 8.0 * f32::EPSILON as f64 * (cfg.batch * cfg.t + 7) as f64;
    assert!(
        worst <= tol,
        "{}: relative loss gap {worst:.3e} to the default run > {tol:.3e}",
        be.describe()
    );
}

/// The convergence criterion on the device loop: the probe reads the parameters back
/// every `PROBE_EVERY` steps, so a run on `be` stops at the same probe as the default
/// run (the probe accuracy is an argmax count, robust to f32 reordering at this clear
/// a margin), and both report convergence.
fn convergence_criterion_runs_on_the_backend<Bk: Backend>(be: &Bk) {
    use sinklab::train::{PROBE_EVERY, TaskSpec, TrainConfig, train, train_on};
    let cfg = TrainConfig {
        task: TaskSpec::BigramCopy {
            n: 6,
            k: 2,
            alpha: 0.3,
        },
        t: 8,
        d: 8,
        attn: AttnForm::Factored { r: 8 },
        batch: 8,
        steps: 1000,
        seed: 1,
        eval_batch: 8,
        target_acc_on: Some(0.75),
        ..TrainConfig::default()
    };
    let host = train(&cfg, |_, _| {}).unwrap();
    let on_be = train_on(be, &cfg, |_, _| {}).unwrap();
    assert_eq!(host.converged, Some(true), "host run: {}", host.steps_run);
    assert!(host.steps_run < cfg.steps && host.steps_run % PROBE_EVERY == 0);
    assert_eq!(
        (on_be.converged, on_be.steps_run),
        (host.converged, host.steps_run),
        "{}",
        be.describe()
    );
}

// Not in the suite above: training runs on the default f32 path and on the GPU
// only (the cpu-f64 and tiled-kernel instantiations add run time, not coverage).
#[test]
fn train_on_cpu_f32_runs_the_device_loop() {
    train_on_is_the_device_loop(&Cpu::<f32>::new());
}

#[test]
fn train_on_wgpu_runs_the_device_loop() {
    let Some(g) = wgpu_f32() else { return };
    train_on_is_the_device_loop(g);
}

#[test]
fn convergence_criterion_runs_on_cpu_f32() {
    convergence_criterion_runs_on_the_backend(&Cpu::<f32>::new());
}

#[test]
fn convergence_criterion_runs_on_wgpu() {
    let Some(g) = wgpu_f32() else { return };
    convergence_criterion_runs_on_the_backend(g);
}
