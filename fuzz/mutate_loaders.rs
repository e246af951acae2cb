//! A seeded mutation fuzzer for the model-file loaders, for machines without cargo-fuzz (the
//! cargo-fuzz target is `fuzz/fuzz_targets/loaders.rs`). Seeds: a tiny valid GGUF (llama and
//! gemma3) and a tiny activations file; mutations: byte flips, random overwrites of 1/2/4/8-byte
//! fields with extreme values, truncation, insertion. Every input goes through `runtime::load` and
//! `activations::analyze_file` inside `catch_unwind`; a panic is reported with its input saved.
//!
//! `cargo bench --bench fuzz_loaders -- SECONDS [SEED]` (default 60 s, seed 0; registered as a
//! bench of the main crate, `harness = false`, so it builds in release with the crate's own
//! dependencies; flags such as the `--bench` that cargo passes are ignored).

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sinklab::synth::{SynthShape, write_gguf};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let secs: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(60);
    let seed: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let dir = tempfile::tempdir().unwrap();
    let mut seeds = Vec::new();
    for gemma in [false, true] {
        let p = dir.path().join("seed.gguf");
        write_gguf(
            &p,
            &SynthShape {
                arch: if gemma { "gemma3" } else { "llama" },
                n_layer: 1,
                vocab: 12,
                ..SynthShape::default()
            },
            1,
        )
        .unwrap();
        seeds.push(std::fs::read(&p).unwrap());
    }
    let h: Vec<u8> = (0..3 * 4).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let a: Vec<u8> = (0..3 * 3)
        .flat_map(|_| (1.0f32 / 3.0).to_le_bytes())
        .collect();
    seeds.push(
        safetensors::serialize(
            [
                (
                    "hidden.0",
                    safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![3, 4], &h)
                        .unwrap(),
                ),
                (
                    "attn.0",
                    safetensors::tensor::TensorView::new(
                        safetensors::Dtype::F32,
                        vec![1, 3, 3],
                        &a,
                    )
                    .unwrap(),
                ),
            ],
            None,
        )
        .unwrap(),
    );
    if std::env::var_os("FUZZ_SHOW_PANICS").is_none() {
        std::panic::set_hook(Box::new(|_| {}));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let (t0, mut n, mut panics) = (Instant::now(), 0u64, 0u64);
    let g = dir.path().join("m.gguf");
    let st = dir.path().join("a.safetensors");
    while t0.elapsed() < Duration::from_secs(secs) {
        let mut b = seeds[rng.random_range(0..seeds.len())].clone();
        for _ in 0..rng.random_range(1..6usize) {
            if b.is_empty() {
                break;
            }
            let k = rng.random_range(0..b.len());
            match rng.random_range(0..5u32) {
                0 => b[k] ^= 1 << rng.random_range(0..8u32),
                1 => {
                    let w = [1usize, 2, 4, 8][rng.random_range(0..4usize)];
                    let v: u64 = [0, 1, u64::MAX, u32::MAX as u64, 1 << 40, rng.random()]
                        [rng.random_range(0..6usize)];
                    for (j, byte) in v.to_le_bytes().iter().take(w).enumerate() {
                        if k + j < b.len() {
                            b[k + j] = *byte;
                        }
                    }
                }
                2 => b.truncate(k),
                3 => b.insert(k, rng.random()),
                _ => b[k] = rng.random(),
            }
        }
        std::fs::write(&g, &b).unwrap();
        std::fs::write(&st, &b).unwrap();
        let r = std::panic::catch_unwind(|| {
            let _ = sinklab::runtime::load(&g);
            let _ = sinklab::real::activations::analyze_file(&st);
        });
        n += 1;
        if r.is_err() {
            panics += 1;
            let keep = std::path::PathBuf::from(format!("fuzz-panic-{seed}-{n}.bin"));
            std::fs::write(&keep, &b).unwrap();
            eprintln!("PANIC on input saved to {}", keep.display());
        }
    }
    println!(
        "fuzz_loaders: {n} inputs in {:.0} s, {panics} panics (seed {seed})",
        t0.elapsed().as_secs_f64()
    );
    if panics > 0 {
        std::process::exit(1);
    }
}
