//! `learned_sink_mass` in `sinklab real --json`: for a model with learned sink logits (gpt-oss)
//! each layer and each head reports the mean over queries $i \ge 1$ of $1 - \sum_j A_{ij}$, the
//! probability the sink logit takes, checked against transformers' attention rows of the tiny
//! fixtures (`scripts/make_moe_fixtures.py`); models without learned sinks report none.
//!
//! Tolerance: each attention entry agrees with transformers within the parity bound
//! $\tau = (L+1) K N u A$ of `tests/real_arch_parity.rs` (same constants); a row sum adds at
//! most $T$ such errors, and the means over rows and heads do not grow it, so $T\tau$ bounds
//! the difference of the masses ($\approx 3\cdot10^{-3}$ for L = 2, T = 12; the fixtures'
//! masses are 0.2–0.6 with strong sinks, so a wrong convention — the sink's column kept, or
//! no sink — is far outside it).

use sinklab::runtime::safetensors::StFile;
use std::path::PathBuf;
use std::process::Command;

const U: f64 = 5.960_464_477_539_063e-8;
const K: f64 = 8.0;
const N: f64 = 48.0;
const A: f64 = 4.0;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/tiny/{name}"))
}

/// `sinklab real --json` on the fixture's own token ids (no BOS added).
fn real_json(name: &str) -> (serde_json::Value, StFile) {
    let fx = StFile::open(&dir(name).join("expected.safetensors")).unwrap();
    let toks: Vec<String> = fx
        .tensor("tokens")
        .unwrap()
        .0
        .iter()
        .map(|&v| (v as u32).to_string())
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_sinklab"))
        .args(["real", "--model"])
        .arg(dir(name))
        .args(["--tokens", &toks.join(","), "--bos", "no", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_slice(&out.stdout).unwrap(), fx)
}

/// The sink mass of each layer and head from transformers' attention rows `[L, H, T, T]`.
fn reference(fx: &StFile) -> Vec<Vec<f64>> {
    let (attn, s) = fx.tensor("attn").unwrap();
    let (l, h, t) = (s[0], s[1], s[2]);
    (0..l)
        .map(|ly| {
            (0..h)
                .map(|hh| {
                    let map = &attn[(ly * h + hh) * t * t..(ly * h + hh + 1) * t * t];
                    (1..t)
                        .map(|i| {
                            1.0 - map[i * t..(i + 1) * t]
                                .iter()
                                .map(|&x| x as f64)
                                .sum::<f64>()
                        })
                        .sum::<f64>()
                        / (t - 1) as f64
                })
                .collect()
        })
        .collect()
}

fn check(name: &str, min_mass: f64) {
    let (v, fx) = real_json(name);
    let want = reference(&fx);
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), want.len(), "{name}: layers");
    let t = fx.tensor("tokens").unwrap().0.len() as f64;
    let tol = t * (want.len() as f64 + 1.0) * K * N * U * A;
    // The script's own reduction of the same rows agrees with ours of its rows.
    let (stored, _) = fx.tensor("sink_mass").unwrap();
    for (l, (ly, w)) in layers.iter().zip(&want).enumerate() {
        let heads = ly["heads"].as_array().unwrap();
        assert_eq!(heads.len(), w.len(), "{name}: layer {l}: heads");
        for (hh, (hv, &wm)) in heads.iter().zip(w).enumerate() {
            let got = hv["learned_sink_mass"]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}: layer {l} head {hh}: no learned_sink_mass"));
            assert!(
                (got - wm).abs() <= tol,
                "{name}: layer {l} head {hh}: {got} vs transformers' {wm} (tol {tol:.1e})"
            );
            assert!((stored[l * w.len() + hh] as f64 - wm).abs() < 1e-6);
        }
        let mean = w.iter().sum::<f64>() / w.len() as f64;
        let got = ly["learned_sink_mass"].as_f64().unwrap();
        assert!(
            (got - mean).abs() <= tol,
            "{name}: layer {l}: {got} vs {mean}"
        );
        assert!(
            got >= min_mass,
            "{name}: layer {l}: mass {got} < {min_mass}"
        );
    }
}

#[test]
fn strong_learned_sinks_take_their_mass_as_transformers_says() {
    // Sink logits 2 ± 0.5: the sink takes a fifth or more of every layer's mass.
    check("gpt_oss_strong_sink", 0.2);
    check("gpt_oss_shapes_clamp", 0.0);
}

#[test]
fn an_absent_learned_sink_takes_no_mass() {
    // Sink logits −10⁴: the rows sum to 1, the mass is 0 within the rounding of a row sum.
    let (v, _) = real_json("gpt_oss_no_sink");
    for ly in v["layers"].as_array().unwrap() {
        let m = ly["learned_sink_mass"].as_f64().unwrap();
        assert!(m.abs() < 1e-5, "{m}");
    }
}

#[test]
fn models_without_learned_sinks_report_none() {
    let (v, _) = real_json("qwen3_moe_norm_topk");
    for ly in v["layers"].as_array().unwrap() {
        assert!(ly.get("learned_sink_mass").is_none(), "{ly}");
        for h in ly["heads"].as_array().unwrap() {
            assert!(h.get("learned_sink_mass").is_none(), "{h}");
        }
    }
}
