//! `sinklab half-space --file`: the half-space verdict (THEORY §3) on a user's own instance.
//! A planted representable instance comes back with a witness whose attention, computed here
//! in f64, puts at least 1 − ε on the sink for every query; an instance with the sink in the
//! hull of the keys comes back with convex weights μ, checked here (Σμ = 1, Σμ_k k = s within
//! 1e-9 of the data scale, the hull solver's stated tolerance is tighter); bad files are errors.

use safetensors::{Dtype, tensor::TensorView};
use std::path::Path;
use std::process::Command;

fn write(path: &Path, t: &[(&str, Vec<usize>, Vec<f64>)]) {
    let bytes: Vec<Vec<u8>> = t
        .iter()
        .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views: Vec<(String, TensorView<'_>)> = t
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| {
            (
                n.to_string(),
                TensorView::new(Dtype::F64, s.clone(), b).unwrap(),
            )
        })
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn run(path: &Path, eps: f64) -> (bool, serde_json::Value, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_sinklab"))
        .args(["half-space", "--json", "--eps", &eps.to_string(), "--file"])
        .arg(path)
        .output()
        .unwrap();
    let j = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
    (
        o.status.success(),
        j,
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

/// Queries with x₀ ≥ 0.5, keys with k₁ ≤ 0, sink 2e₁ (+ noise elsewhere): (a) and (b) hold.
fn planted(n: usize, m: usize, d: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    // A fixed linear congruential stream: the instance is the same on every run.
    let mut x = 12345u64;
    let mut r = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut q: Vec<f64> = (0..n * d).map(|_| 2.0 * r() - 1.0).collect();
    let mut k: Vec<f64> = (0..m * d).map(|_| 2.0 * r() - 1.0).collect();
    for i in 0..n {
        q[i * d] = 0.5 + r();
    }
    for j in 0..m {
        k[j * d + 1] = -r();
    }
    let mut s: Vec<f64> = (0..d).map(|_| 2.0 * r() - 1.0).collect();
    s[1] = 2.0;
    (q, k, s)
}

#[test]
fn a_planted_instance_gets_a_witness_checked_here() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("i.safetensors");
    let (n, m, d, eps) = (10, 7, 5, 0.05);
    let (q, k, s) = planted(n, m, d);
    write(
        &f,
        &[
            ("queries", vec![n, d], q.clone()),
            ("keys", vec![m, d], k.clone()),
            ("sink", vec![d], s.clone()),
        ],
    );
    let (ok, j, err) = run(&f, eps);
    assert!(ok, "{err}");
    assert_eq!(j["representable"], true);
    assert_eq!(j["verified"], true);
    let w: Vec<Vec<f64>> = serde_json::from_value(j["witness"]["w"].clone()).unwrap();
    let logit = |x: &[f64], y: &[f64]| -> f64 {
        (0..d)
            .map(|a| (0..d).map(|b| x[a] * w[a][b] * y[b]).sum::<f64>())
            .sum()
    };
    for x in q.chunks(d) {
        let zs = logit(x, &s);
        let z: f64 = k.chunks(d).map(|y| (logit(x, y) - zs).exp()).sum();
        assert!(
            1.0 / (1.0 + z) >= 1.0 - eps,
            "sink mass {}",
            1.0 / (1.0 + z)
        );
    }
}

#[test]
fn a_sink_in_the_hull_of_the_keys_gets_weights_checked_here() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("i.safetensors");
    let (n, m, d) = (10, 7, 5);
    let (q, k, _) = planted(n, m, d);
    let s: Vec<f64> = (0..d).map(|c| 0.25 * k[c] + 0.75 * k[3 * d + c]).collect();
    write(
        &f,
        &[
            ("queries", vec![n, d], q),
            ("keys", vec![m, d], k.clone()),
            ("sink", vec![d], s.clone()),
        ],
    );
    let (ok, j, err) = run(&f, 0.1);
    assert!(ok, "{err}");
    assert_eq!(j["representable"], false);
    assert_eq!(j["sink_fails"], true);
    assert_eq!(j["verified"], true);
    let mu: Vec<f64> = serde_json::from_value(j["weights"]["keys"].clone()).unwrap();
    assert!(mu.iter().all(|&v| v >= 0.0));
    assert!((mu.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    for c in 0..d {
        let v: f64 = (0..m).map(|i| mu[i] * k[i * d + c]).sum();
        assert!((v - s[c]).abs() < 1e-9, "coordinate {c}: {v} vs {}", s[c]);
    }
}

#[test]
fn bad_instances_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("i.safetensors");
    write(
        &f,
        &[
            ("queries", vec![2, 3], vec![1.0; 6]),
            ("keys", vec![2, 2], vec![1.0; 4]),
            ("sink", vec![3], vec![1.0; 3]),
        ],
    );
    let (ok, _, err) = run(&f, 0.1);
    assert!(!ok && err.contains("disagree"), "{err}");
    write(&f, &[("queries", vec![2, 3], vec![f64::NAN; 6])]);
    let (ok, _, err) = run(&f, 0.1);
    assert!(!ok && err.contains("queries"), "{err}");
    std::fs::write(&f, b"not a file").unwrap();
    let (ok, _, err) = run(&f, 0.1);
    assert!(!ok && err.contains("safetensors"), "{err}");
}
