//! Bench: the paper-B detector over captured states of SmolLM2-135M's shape,
//! 30 layers × 4096 tokens × d = 576 (f32, 283 MB), with the window from the
//! BOS-norm jumps and without (all 30 layers).
//!
//! `cargo bench --bench secondary`

use criterion::{Criterion, criterion_group, criterion_main};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sinklab::secondary::{DetectorParams, HiddenStates, WindowMode, detect};
use std::hint::black_box;

fn states(l: usize, t: usize, d: usize) -> HiddenStates<f32> {
    let mut rng = StdRng::seed_from_u64(1);
    let mut data: Vec<f32> = (0..l * t * d).map(|_| rng.random::<f32>() - 0.5).collect();
    // BOS along e_0 with a high-norm window on layers 3..26, and 40 planted sinks.
    for layer in 0..l {
        let n = if (3..26).contains(&layer) {
            500.0
        } else {
            50.0
        };
        data[layer * t * d] = n;
        for k in 0..40 {
            let pos = 100 * (k + 1);
            if (5 + k % 10..15 + k % 10).contains(&layer) {
                data[(layer * t + pos) * d] = if k % 2 == 0 { 80.0 } else { -80.0 };
            }
        }
    }
    HiddenStates::new(l, t, d, data).unwrap()
}

fn bench(c: &mut Criterion) {
    let h = states(30, 4096, 576);
    let w = DetectorParams::default();
    let all = DetectorParams {
        window: WindowMode::AllLayers,
        ..Default::default()
    };
    let found = detect(&h, &w).unwrap();
    assert_eq!(found.window, 3..26);
    assert_eq!(found.sinks.len(), 40);
    let mut g = c.benchmark_group("secondary_detector_30x4096x576");
    g.sample_size(10);
    g.bench_function("window", |b| b.iter(|| detect(black_box(&h), &w).unwrap()));
    g.bench_function("all_layers", |b| {
        b.iter(|| detect(black_box(&h), &all).unwrap())
    });
    g.finish();
}

criterion_group! {
    name = benches;
    // Criterion's plot backend panics on this machine (no font for its PDF/SVG plots).
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
