//! Training-step benchmark, side by side with PyTorch (same model, same batch, f32, CPU):
//! d = 64, T = 64, batch 32, one layer, factored attention (r = 64) + ReLU MLP (256), vocab 64.
//! Runs our step (the one `train()` runs: `train::device::DeviceModel` on the
//! default backend `Cpu<f32>`), then `benches/train_step_torch.py` with the
//! venv's Python (`SINKLAB_PYTHON`, default /work/venv/bin/python), and prints
//! the ratio.
//!
//! FLOPs of a step: the forward's products (per sequence: Q, K, V $3\cdot 2Tdr$; $QK^\top$
//! and $AV$ $2\cdot 2T^2r$, full squares as computed; $W_O$ $2Trd$; MLP $2\cdot 2Tdm$ and the
//! bias $2Tm$; unembedding $2TdV$) times 3, since each product has two backward products of
//! its own size. The bench prints them with the machine's f32 GEMM rate (faer, 1024², same
//! threads) and the fraction of it the step reaches.
//!
//! The comparison is only valid on a quiet machine: PyTorch's threads spin and collapse when
//! another process shares the cores. Each side is preceded by a count of the other runnable
//! tasks; a side that saw any is labelled `"loaded": true` and no ratio is printed for it
//! (`BENCH_ALLOW_LOAD=1` prints it anyway, labelled).
//!
//! `cargo bench --bench train_step`

#[path = "support/limits.rs"]
mod limits;

use rand::{RngExt, SeedableRng};
use sinklab::backend::{AdamWHyper, Cpu};
use sinklab::train::device::DeviceModel;
use sinklab::train::{AttnForm, Model, ModelConfig};
use std::time::Instant;

fn main() {
    // As the `sinklab` binary does: the runtime is timed with the allocator settings it runs with.
    sinklab::runtime::keep_freed_memory();
    let (d, t, b, vocab) = (64, 64, 32, 64);
    let cfg = ModelConfig {
        vocab,
        d,
        max_len: t,
        layers: 1,
        attn: AttnForm::Factored { r: 64 },
        mlp_hidden: 256,
        mask_bos_key: false,
        init_scale: 1.0,
        switches: sinklab::train::Switches::OFF,
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let model: Model<f32> = Model::new(cfg, &mut rng).expect("model");
    let opt = AdamWHyper {
        lr: 1e-3,
        weight_decay: 1e-2,
        ..AdamWHyper::default()
    };
    let toks: Vec<u32> = (0..b * t)
        .map(|_| rng.random_range(0..vocab as u32))
        .collect();
    let w: Vec<f64> = (0..b * t)
        .map(|r| if r % t + 1 < t { 1.0 } else { 0.0 })
        .collect();
    let threads = 2;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    // Buffers allocated once and reused step after step, as in `train()`; the backend splits
    // its products over the pool's threads.
    let be = Cpu::<f32>::with_threads(threads);
    let mut dev = DeviceModel::new(&be, &model, &opt, b, t, &w).expect("device model");
    let mut step = || {
        dev.step(&be, &toks, false).expect("step");
    };
    let (warm, n) = (5, 100);
    let (r, m) = (64usize, 256usize);
    let per_seq = 3 * 2 * t * d * r
        + 2 * 2 * t * t * r
        + 2 * t * r * d
        + 2 * 2 * t * d * m
        + 2 * t * m
        + 2 * t * d * vocab;
    let step_flops = 3.0 * (b * per_seq) as f64;
    let gemm = pool.install(|| limits::gemm_gflops(1024, 2, 5));
    let busy_ours = limits::runnable_others();
    let ours = pool.install(|| {
        for _ in 0..warm {
            step();
        }
        let t0 = Instant::now();
        for _ in 0..n {
            step();
        }
        n as f64 / t0.elapsed().as_secs_f64()
    });
    let gflops = ours * step_flops / 1e9;
    println!(
        "{}",
        serde_json::json!({
            "impl": "sinklab", "threads": 2, "steps": n, "steps_per_s": ours,
            "step_mflop": step_flops / 1e6, "gflops": gflops,
            "machine_gemm_f32_gflops": gemm, "fraction_of_gemm": gflops / gemm,
            "runnable_others": busy_ours, "loaded": busy_ours.is_none_or(|r| r > 0),
        })
    );
    let allow = std::env::var("BENCH_ALLOW_LOAD").is_ok_and(|v| v == "1");
    let busy_theirs = limits::runnable_others();
    let py = std::env::var("SINKLAB_PYTHON").unwrap_or_else(|_| "/work/venv/bin/python".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/train_step_torch.py");
    match std::process::Command::new(&py)
        .args([script, "--steps", "50"])
        .output()
    {
        Ok(o) if o.status.success() => {
            let line = String::from_utf8_lossy(&o.stdout);
            println!("{}", line.trim());
            let v: serde_json::Value = serde_json::from_str(line.trim()).expect("baseline JSON");
            let theirs = v["steps_per_s"].as_f64().unwrap_or(f64::NAN);
            let loaded = [busy_ours, busy_theirs]
                .iter()
                .any(|b| b.is_none_or(|r| r > 0));
            println!(
                "{}",
                serde_json::json!({"impl": "pytorch", "runnable_others": busy_theirs,
                    "gflops": theirs * step_flops / 1e9, "fraction_of_gemm": theirs * step_flops / 1e9 / gemm})
            );
            if loaded && !allow {
                println!(
                    "no ratio: another process was runnable before a side ran \
                     ({busy_ours:?} / {busy_theirs:?} others); rerun on a quiet machine \
                     (BENCH_ALLOW_LOAD=1 prints it labelled)"
                );
            } else {
                println!(
                    "ratio sinklab / pytorch steps per second: {:.2}{}",
                    ours / theirs,
                    if loaded {
                        " (LOADED machine: not a result)"
                    } else {
                        ""
                    }
                );
            }
        }
        Ok(o) => println!("baseline failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => println!("baseline not run ({py}: {e}); sinklab alone: {ours:.2} steps/s"),
    }
}
