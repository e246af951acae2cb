//! Matmul throughput, CPU (faer) against GPU (wgpu), side by side in one run.
//!
//! `cargo bench --bench backend` (add `-- matmul/1024` to filter; groups:
//! `matmul`, `train_step`, `train_module_step`, `faer_seq_vs_par`). Throughput
//! is reported in elements/s with one element = one flop, so criterion's
//! `Gelem/s` reads as GFLOP/s (2n³ flops per n×n·n×n product). The GPU timing
//! includes the wait for completion (`sync`) but no transfer: operands stay on
//! the device, as in training. Without an adapter the GPU rows are skipped
//! with a printed reason. `SINKLAB_BENCH_SIZES=64,256` overrides the sizes.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sinklab::backend::{Backend, Cpu, GpuOptions, MatmulKernel, Op, Shape, Wgpu};

fn sizes() -> Vec<usize> {
    std::env::var("SINKLAB_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![64, 256, 1024])
}

fn bench_one<B: Backend>(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: &str,
    be: &B,
    n: usize,
) {
    let mut rng = StdRng::seed_from_u64(1);
    let s = Shape::mat(n, n);
    let a: Vec<f64> = (0..n * n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let b: Vec<f64> = (0..n * n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let ta = be.upload_f64(s, &a).expect("upload");
    let tb = be.upload_f64(s, &b).expect("upload");
    let mut tc = be.zeros(s).expect("alloc");
    // Warm-up (pipeline caches, first-touch of buffers).
    be.matmul(1.0, &ta, Op::N, &tb, Op::N, 0.0, &mut tc)
        .expect("matmul");
    be.sync().expect("sync");
    c.bench_with_input(BenchmarkId::new(id, n), &n, |bch, _| {
        bch.iter(|| {
            be.matmul(
                1.0,
                black_box(&ta),
                Op::N,
                black_box(&tb),
                Op::N,
                0.0,
                &mut tc,
            )
            .expect("matmul");
            be.sync().expect("sync");
        })
    });
}

fn matmul(c: &mut Criterion) {
    let gpu = match Wgpu::new(&GpuOptions::default()) {
        Ok(g) => {
            eprintln!("GPU: {}", g.describe());
            Some(g)
        }
        Err(e) => {
            eprintln!("SKIP: GPU rows of the matmul bench: {e}");
            None
        }
    };
    // On a software adapter `Auto` picks the direct kernel: bench the tiled one too.
    let tiled = gpu
        .as_ref()
        .filter(|g| g.describe().contains("direct"))
        .and_then(|_| {
            Wgpu::new(&GpuOptions {
                matmul: MatmulKernel::Tiled,
                ..GpuOptions::default()
            })
            .ok()
        });
    let mut g = c.benchmark_group("matmul");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in sizes() {
        g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
        bench_one(
            &mut g,
            "cpu-f64",
            &Cpu::<f64>::with_threads(rayon::current_num_threads()),
            n,
        );
        bench_one(
            &mut g,
            "cpu-f32",
            &Cpu::<f32>::with_threads(rayon::current_num_threads()),
            n,
        );
        if let Some(gpu) = &gpu {
            bench_one(&mut g, "wgpu-f32", gpu, n);
        }
        if let Some(t) = &tiled {
            bench_one(&mut g, "wgpu-f32-tiled", t, n);
        }
    }
    g.finish();
}

/// One training step (forward, backward, AdamW) of the device-resident
/// attention head (`train::attn`) at the cost-scaling sweep's trained sizes
/// (batch 16, d 16, T = 32, 64, 128), CPU f32 against GPU f32; the GPU step
/// ends with `sync` so its time is the device's, not the queue's.
fn train_step(c: &mut Criterion) {
    use sinklab::backend::AdamWHyper;
    use sinklab::train::attn::{AttnFit, AttnFitConfig};
    let gpu = Wgpu::new(&GpuOptions::default()).ok();
    let mut g = c.benchmark_group("train_step");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3));
    for t in [32usize, 64, 128] {
        let cfg = AttnFitConfig {
            batch: 16,
            t,
            d: 16,
            seed: 1,
            adamw: AdamWHyper {
                lr: 1e-3,
                ..AdamWHyper::default()
            },
        };
        let cpu = Cpu::<f32>::with_threads(rayon::current_num_threads());
        let mut fit = AttnFit::new(&cpu, cfg).expect("cpu fit");
        g.bench_with_input(BenchmarkId::new("cpu-f32", t), &t, |b, _| {
            b.iter(|| fit.step(&cpu).expect("step"))
        });
        if let Some(gpu) = &gpu {
            let mut fit = AttnFit::new(gpu, cfg).expect("gpu fit");
            g.bench_with_input(BenchmarkId::new("wgpu-f32", t), &t, |b, _| {
                b.iter(|| {
                    fit.step(gpu).expect("step");
                    gpu.sync().expect("sync")
                })
            });
        }
    }
    g.finish();
}

/// One step (forward, backward, AdamW) of the *train module's* model at the
/// trained sizes of `sims/cost_scaling.toml` (one layer, factored attention
/// d = r = 16, no MLP, vocabulary n + 1 = 9, batch 8; T = 32, 64, 128):
/// `host-cpu-f32` is the host reference model (model.rs + `train::adamw` on
/// faer), `device-cpu-f32` and `device-wgpu` the training model
/// `train::device::DeviceModel` that `train_on` runs (no read-back; the GPU
/// step ends with `sync`).
fn train_module_step(c: &mut Criterion) {
    use sinklab::train::adamw::AdamW;
    use sinklab::train::device::DeviceModel;
    use sinklab::train::{AttnForm, Model, ModelConfig};
    let gpu = Wgpu::new(&GpuOptions::default())
        .ok()
        .map(std::sync::Arc::new);
    if gpu.is_none() {
        eprintln!("SKIP: GPU rows of train_module_step: no adapter");
    }
    let mut g = c.benchmark_group("train_module_step");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let (batch, vocab) = (8usize, 9usize);
    for t in [32usize, 64, 128] {
        let cfg = ModelConfig {
            vocab,
            d: 16,
            max_len: t,
            layers: 1,
            attn: AttnForm::Factored { r: 16 },
            mlp_hidden: 0,
            mask_bos_key: false,
            init_scale: 1.0,
            switches: sinklab::train::Switches::OFF,
        };
        let mut rng = StdRng::seed_from_u64(2);
        let model: Model<f32> = Model::new(cfg, &mut rng).expect("model");
        let toks: Vec<u32> = (0..batch * t)
            .map(|r| {
                if r % t == 0 {
                    0
                } else {
                    rng.random_range(1..vocab as u32)
                }
            })
            .collect();
        let w: Vec<f64> = (0..batch * t)
            .map(|r| if r % t + 1 < t { 1.0 } else { 0.0 })
            .collect();
        let host_step = |m: &mut Model<f32>, opt: &mut AdamW<f32>| {
            let cache = m.forward(&toks, batch, t).expect("forward");
            let gr = m.backward(&cache, &w);
            opt.step(&mut m.params, &gr, &m.decay);
        };
        let mut m = model.clone();
        let mut opt = AdamW::new(&m.params, 1e-2, 1e-2);
        g.bench_with_input(BenchmarkId::new("host-cpu-f32", t), &t, |b, _| {
            b.iter(|| host_step(&mut m, &mut opt))
        });
        let cpu = Cpu::<f32>::with_threads(rayon::current_num_threads());
        let opt0 = AdamW::new(&model.params, 1e-2, 1e-2).hyper;
        let mut dev = DeviceModel::new(&cpu, &model, &opt0, batch, t, &w).expect("device");
        g.bench_with_input(BenchmarkId::new("device-cpu-f32", t), &t, |b, _| {
            b.iter(|| dev.step(&cpu, &toks, false).expect("step"))
        });
        if let Some(gpu) = &gpu {
            let be: &Wgpu = gpu;
            let mut dev = DeviceModel::new(be, &model, &opt0, batch, t, &w).expect("device");
            g.bench_with_input(BenchmarkId::new("device-wgpu", t), &t, |b, _| {
                b.iter(|| {
                    dev.step(be, &toks, false).expect("step");
                    be.sync().expect("sync")
                })
            });
        }
    }
    g.finish();
}

/// The measurement behind `cpu::PAR_MIN_MNK`: faer sequential against faer on
/// all cores, f64, square n (`SINKLAB_PAR_SIZES` overrides the sizes).
fn faer_seq_vs_par(c: &mut Criterion) {
    use faer::{Accum, Mat, Par};
    let sizes: Vec<usize> = std::env::var("SINKLAB_PAR_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![64, 128, 192, 256, 384]);
    let mut g = c.benchmark_group("faer_seq_vs_par");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for n in sizes {
        g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
        let a = Mat::<f64>::from_fn(n, n, |i, j| ((i * 7 + j * 3) % 11) as f64 - 5.0);
        let b = Mat::<f64>::from_fn(n, n, |i, j| ((i * 5 + j) % 13) as f64 - 6.0);
        let mut dst = Mat::<f64>::zeros(n, n);
        for (id, par) in [("seq", Par::Seq), ("rayon", Par::rayon(0))] {
            g.bench_with_input(BenchmarkId::new(id, n), &n, |bch, _| {
                bch.iter(|| {
                    faer::linalg::matmul::matmul(
                        dst.as_mut(),
                        Accum::Replace,
                        a.as_ref(),
                        b.as_ref(),
                        1.0,
                        par,
                    )
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    // No plots: criterion's plotters backend panics without a system font.
    config = Criterion::default().without_plots();
    targets = matmul, train_step, train_module_step, faer_seq_vs_par
}
criterion_main!(benches);
