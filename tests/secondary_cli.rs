//! `sinklab secondary --activations F`: one JSON record per detected sink,
//! matching the library detector; bad input is an error, not a panic.

use sinklab::secondary::synthetic::{SyntheticConfig, SyntheticModel};
use sinklab::secondary::{DetectorParams, LabelRule, detect};
use std::process::Command;

fn sinklab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sinklab"))
}

#[test]
fn records_match_the_detector() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("act.safetensors");
    let cfg = SyntheticConfig {
        seed: 5,
        ..Default::default()
    };
    let model = SyntheticModel::new(cfg.clone()).unwrap();
    // Cone tokens get r from 0 to 15 by position: a mix of lifetimes.
    let rs: Vec<f64> = (0..cfg.tokens)
        .map(|t| 15.0 * t as f64 / cfg.tokens as f64)
        .collect();
    let act = model.activations(&rs);
    act.write(&path).unwrap();
    let out = sinklab()
        .args([
            "secondary",
            "--activations",
            path.to_str().unwrap(),
            "--json",
            "--bos-margin",
            "8",
            "--noise-max",
            "1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let p = DetectorParams {
        labels: LabelRule {
            bos_margin: 8,
            noise_max: 1,
        },
        ..Default::default()
    };
    let det = detect(&act.hidden, &p).unwrap();
    assert!(!det.sinks.is_empty());
    assert_eq!(recs.len(), det.sinks.len());
    for (r, s) in recs.iter().zip(&det.sinks) {
        assert_eq!(r["position"], s.position);
        assert_eq!(
            r["token"], s.position as i64,
            "synthetic token ids are positions"
        );
        assert_eq!(r["creation_layer"], s.creation_layer);
        assert_eq!(r["lifetime"], s.lifetime);
        assert_eq!(r["label"], s.label.as_str());
        assert_eq!(
            r["creation_layer"], cfg.creation_layer,
            "the planted MLP creates every sink"
        );
        // The MLP output at creation is r_t·u (f32 file): its norm is r_t.
        let norm = r["mlp_out_norm_at_creation"].as_f64().unwrap();
        assert!(
            (norm - rs[s.position]).abs() < 1e-5 * (1.0 + rs[s.position]),
            "{norm} vs {}",
            rs[s.position]
        );
        assert_eq!(r["sink_score"].as_array().unwrap().len(), cfg.layers);
        assert_eq!(r["hidden_norm"].as_array().unwrap().len(), cfg.layers);
        // B2 in the planted model: the MLP output is ±u, exactly the BOS direction.
        assert!((r["mlp_cos_bos_at_creation"].as_f64().unwrap().abs() - 1.0).abs() < 1e-6);
    }
    // Table output works too.
    let out = sinklab()
        .args(["secondary", "--activations", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("label"));
}

#[test]
fn bad_input_is_an_error() {
    let out = sinklab()
        .args(["secondary", "--activations", "/nonexistent.safetensors"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("reading activations"));
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a safetensors file").unwrap();
    let out = sinklab()
        .args(["secondary", "--activations", junk.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = sinklab()
        .args([
            "secondary",
            "--activations",
            junk.to_str().unwrap(),
            "--tau",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tau"));
}
