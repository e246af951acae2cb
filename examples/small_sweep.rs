//! A small sweep of your own: the minimal sink and diagonal costs over context lengths $T$
//! (exact programs on orthonormal and Gaussian embeddings, and a few tiny trained models), run
//! by the resumable sweep engine, then one power law $C \approx a T^b$ fitted per group.
//!
//! `cargo run --example small_sweep [-- DIR]` (core only: `--no-default-features` works too).
//! The records go to `DIR/results.jsonl` (a temporary directory by default); run it twice on
//! one `DIR` and the second run computes nothing: every point is already there.

use sinklab::sweep::cost_scaling::{SweepSpec, fit_all, read_results, run_on};
use std::path::PathBuf;

/// The spec, in the TOML of `sinklab sweep` (`sims/cost_scaling.toml` is the full one).
const SPEC: &str = r#"
name = "small_sweep"
bootstrap = 200

[[exact]]
patterns = ["sink", "diagonal"]
norms = ["fro"]
embeddings = ["orthonormal", "gaussian"]
t = [8, 16, 32]
d_factor = 2
seeds = [0, 1]
delta = 10.0

[trained]
t = [8, 16]
seeds = [0]
variants = ["bos", "masked"]
d = 16
r = 16
steps = 60
batch = 8
lr = 0.01
weight_decay = 0.01
n = 8
k = 2
alpha = 0.3
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let spec = SweepSpec::from_toml(SPEC)?;
    let tmp = tempfile::tempdir()?;
    let dir = std::env::args()
        .nth(1)
        .map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);

    // Points run in parallel on the current rayon pool; trained points on one thread each.
    let first = run_on(&spec, &dir, None, false, 1)?;
    println!(
        "{} points: {} computed, {} already done, {} failed",
        first.total, first.computed, first.skipped, first.failed
    );
    let again = run_on(&spec, &dir, None, false, 1)?;
    println!(
        "second run: {} computed (resumed from the records)",
        again.computed
    );
    assert_eq!(again.computed, 0);

    let records = read_results(&dir.join("results.jsonl"))?;
    println!(
        "\n{} records; fitted exponents b of C ≈ a·T^b (95% bootstrap CI):",
        records.len()
    );
    println!(
        "{:<8} {:<12} {:<13} {:<9} {:>6}  CI",
        "source", "embedding", "norm", "pattern", "b"
    );
    for g in fit_all(&records, spec.bootstrap, 0) {
        println!(
            "{:<8} {:<12} {:<13} {:<9} {:>6.3}  [{:.3}, {:.3}]  (T = {}..{})",
            g.source,
            g.embedding,
            g.norm,
            g.pattern,
            g.fit.exponent,
            g.fit.ci_low,
            g.fit.ci_high,
            g.t_min,
            g.t_max
        );
    }
    // On orthonormal embeddings the Frobenius cost is Δ·sqrt(T − H_T) for both patterns
    // (the closed form): its local exponent over T = 8..32 is a little above 1/2.
    println!("\nclosed form (orthonormal, Frobenius): Δ·sqrt(T − H_T), exponent → 1/2 as T grows");
    Ok(())
}
