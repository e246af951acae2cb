//! A native run's tensors (`sinklab::runtime::tensors`) and `sinklab real --dump`: the dump is
//! the run, in the activation schema.
//!
//! - `run_tensors` returns what the forward computed: `hidden[l+1]` is the residual stream the
//!   capture machinery keeps after block l, `hidden[L]` the forward's output, `hidden[0]` the
//!   embedding; attention rows are probability vectors; queries and keys give back the
//!   attention maps through $\mathrm{softmax}(s\thinspace q_i^\top k_j)$ on a model without soft caps;
//! - `sinklab real --dump F` read back with `sinklab real --activations F` gives the native
//!   run's per-layer statistics. Both sides hold the same f32 tensors and compute the statistics
//!   by the same function (`real::stats::layer_stats`), so they agree to the f64 rounding of
//!   the reductions (1e-9 relative, far below any statistic's meaningful digits). This holds
//!   for models with sliding windows that bind and with learned sinks because the dump states
//!   how the model attends in its metadata (`causal`, `sliding_window`, `learned_sinks`);
//!   without it the same tensors read back give other statistics (the control below);
//! - a run over the memory budget is refused, with the size named, before allocation.

use sinklab::budget::Budget;
use sinklab::runtime::capture::{Capture, Captured};
use sinklab::runtime::tensors::{TensorRequest, run_tensors};
use std::path::PathBuf;
use std::process::Command;

fn tiny(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/tiny/{name}"))
}

const TOKENS: [u32; 10] = [1, 5, 9, 13, 2, 7, 33, 60, 4, 11];

#[test]
fn run_tensors_are_the_forward_tensors() {
    let lm = sinklab::runtime::load(&tiny("llama_default")).unwrap();
    let m = &lm.model;
    let c = &m.cfg;
    let (l, t, d, h, hk, dh) = (
        c.n_layer,
        TOKENS.len(),
        c.d_model,
        c.n_head,
        c.n_kv_head,
        c.head_dim,
    );
    let x = run_tensors(m, &TOKENS, TensorRequest::all(), &Budget::default()).unwrap();
    let mut cap = Captured::new(Capture {
        hidden: true,
        mlp_out: true,
        ..Capture::default()
    });
    let out = m.forward(&TOKENS, &mut cap, None).unwrap();
    let hid = x.hidden.as_ref().unwrap();
    assert_eq!(hid.len(), (l + 1) * t * d);
    assert_eq!(&hid[..t * d], &m.embed(&TOKENS, 0).unwrap()[..]);
    for ly in 0..l {
        assert_eq!(
            &hid[(ly + 1) * t * d..(ly + 2) * t * d],
            cap.hidden(ly).unwrap()
        );
        assert_eq!(
            &x.mlp_out.as_ref().unwrap()[ly * t * d..(ly + 1) * t * d],
            cap.mlp_out(ly).unwrap()
        );
    }
    assert_eq!(&hid[l * t * d..], &out.hidden[..]);
    // Each attention row is a causal probability vector, and the queries and keys give it back.
    let (a, q, k) = (
        x.attention.as_ref().unwrap(),
        x.queries.as_ref().unwrap(),
        x.keys.as_ref().unwrap(),
    );
    assert_eq!(a.len(), l * h * t * t);
    assert_eq!(k.len(), l * hk * t * dh);
    let s = c.attn_scale as f64;
    let mut worst = 0f64;
    for ly in 0..l {
        for hh in 0..h {
            let g = hh / (h / hk);
            for i in 0..t {
                let row = &a[((ly * h + hh) * t + i) * t..((ly * h + hh) * t + i + 1) * t];
                let sum: f64 = row.iter().map(|&p| p as f64).sum();
                assert!((sum - 1.0).abs() < 1e-5, "row sum {sum}");
                assert!(row[i + 1..].iter().all(|&p| p == 0.0), "causal");
                let qi = &q[((ly * h + hh) * t + i) * dh..((ly * h + hh) * t + i + 1) * dh];
                let logits: Vec<f64> = (0..=i)
                    .map(|j| {
                        let kj = &k[((ly * hk + g) * t + j) * dh..((ly * hk + g) * t + j + 1) * dh];
                        s * qi
                            .iter()
                            .zip(kj)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                    })
                    .collect();
                let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = logits.iter().map(|v| (v - mx).exp()).sum();
                for j in 0..=i {
                    worst = worst.max(((logits[j] - mx).exp() / z - row[j] as f64).abs());
                }
            }
        }
    }
    // f32 logits of length d_h = 8 against f64 ones: errors of order 1e-7.
    assert!(worst < 1e-5, "softmax(q k) vs attention: {worst:.2e}");
    let nll = x.nll.as_ref().unwrap();
    assert_eq!(nll.len(), t - 1);
    assert_eq!(nll, &m.next_token_nll(&out.normed, &TOKENS).unwrap());
}

#[test]
fn a_run_over_the_budget_is_refused_with_its_size() {
    let lm = sinklab::runtime::load(&tiny("llama_default")).unwrap();
    let b = Budget {
        max_bytes: 1000.0,
        max_seconds: 3600.0,
    };
    let e = run_tensors(&lm.model, &TOKENS, TensorRequest::all(), &b)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("needs about") && e.contains("SINKLAB_MAX_MEM"),
        "{e}"
    );
}

fn sinklab(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_sinklab"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sinklab {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn close(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    use serde_json::Value::*;
    match (a, b) {
        (Number(x), Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
                "{at}: {x} vs {y}"
            );
        }
        (Array(x), Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths");
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                close(u, v, &format!("{at}[{i}]"));
            }
        }
        (Object(x), Object(y)) => {
            for (k, u) in x {
                if let Some(v) = y.get(k) {
                    close(u, v, &format!("{at}.{k}"));
                }
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

#[test]
fn a_dump_read_back_gives_the_native_statistics() {
    let dir = tempfile::tempdir().unwrap();
    // Windows of 5 and 4 keys bind at T = 10; gpt-oss's rows sum to 1 − p_sink.
    for model in [
        "llama_default",
        "qwen2",
        "qwen3",
        "mistral_window",
        "gpt_oss_strong_sink",
    ] {
        let f = dir.path().join(format!("{model}.safetensors"));
        let toks = "1,5,9,13,2,7,33,60,4,11";
        let m = tiny(model);
        let native = sinklab(&[
            "real",
            "--model",
            m.to_str().unwrap(),
            "--tokens",
            toks,
            "--bos",
            "no",
            "--json",
            "--dump",
            f.to_str().unwrap(),
        ]);
        let back = sinklab(&["real", "--activations", f.to_str().unwrap(), "--json"]);
        let (nl, bl) = (
            native["layers"].as_array().unwrap(),
            back["layers"].as_array().unwrap(),
        );
        assert!(!nl.is_empty());
        assert_eq!(nl.len(), bl.len(), "{model}: layers");
        // Every statistic the native report has is in the read-back one (none became null).
        for (a, b) in nl.iter().zip(bl) {
            for (k, v) in a.as_object().unwrap() {
                assert!(
                    v.is_null() || !b[k].is_null(),
                    "{model}: `{k}` lost in the dump"
                );
            }
        }
        close(&native["layers"], &back["layers"], model);
        assert_eq!(native["tokens"], back["tokens"], "{model}: tokens");
        // Only the requested tensors are written; hidden states always.
        let g = dir.path().join(format!("{model}_h.safetensors"));
        sinklab(&[
            "real",
            "--model",
            m.to_str().unwrap(),
            "--tokens",
            toks,
            "--json",
            "--dump",
            g.to_str().unwrap(),
            "--what",
            "attn",
        ]);
        let bytes = std::fs::read(&g).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let names = st.names();
        assert!(names.contains(&"hidden.0") && names.contains(&"attn.0"));
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with("keys.") || n.starts_with("mlp_out."))
        );
    }
}

/// Rewrites a safetensors file with its metadata replaced by `meta`.
fn with_metadata(src: &std::path::Path, dst: &std::path::Path, meta: Option<Vec<(&str, &str)>>) {
    let bytes = std::fs::read(src).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let tensors: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let meta = meta.map(|m| {
        m.into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    });
    std::fs::write(dst, safetensors::serialize(tensors, meta).unwrap()).unwrap();
}

#[test]
fn the_dump_states_how_the_model_attends() {
    // Control: the windowed model's dump without its layout metadata is read as a model that
    // sees every earlier key, so its normalised row entropies differ from the native run's;
    // the gpt-oss dump without `learned_sinks` is refused (its rows sum to less than 1).
    let dir = tempfile::tempdir().unwrap();
    let toks = "1,5,9,13,2,7,33,60,4,11";
    let dump = |model: &str| {
        let f = dir.path().join(format!("{model}.safetensors"));
        let native = sinklab(&[
            "real",
            "--model",
            tiny(model).to_str().unwrap(),
            "--tokens",
            toks,
            "--bos",
            "no",
            "--json",
            "--dump",
            f.to_str().unwrap(),
        ]);
        (f, native)
    };
    let (f, native) = dump("mistral_window");
    let bare = dir.path().join("bare.safetensors");
    with_metadata(&f, &bare, None);
    let back = sinklab(&["real", "--activations", bare.to_str().unwrap(), "--json"]);
    let differs = native["layers"]
        .as_array()
        .unwrap()
        .iter()
        .zip(back["layers"].as_array().unwrap())
        .flat_map(|(a, b)| {
            a["heads"]
                .as_array()
                .unwrap()
                .iter()
                .zip(b["heads"].as_array().unwrap())
        })
        .any(|(a, b)| {
            let (x, y) = (
                a["row_entropy"].as_f64().unwrap(),
                b["row_entropy"].as_f64().unwrap(),
            );
            (x - y).abs() > 1e-6
        });
    assert!(
        differs,
        "a binding window must change the read-back entropies"
    );
    let refused = |file: &std::path::Path, needle: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_sinklab"))
            .args(["real", "--activations", file.to_str().unwrap(), "--json"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "{} read", file.display());
        assert!(err.contains(needle), "{err}");
    };
    let (g, _) = dump("gpt_oss_strong_sink");
    let bare = dir.path().join("bare_sinks.safetensors");
    with_metadata(&g, &bare, Some(vec![("causal", "true")]));
    refused(&bare, "attention rows sum to 1");
    // A layout entry that does not parse is refused by name, never guessed.
    for (k, v) in [
        ("sliding_window", "[5]"),
        ("sliding_window", "[0, 0]"),
        ("sliding_window", "five"),
        ("learned_sinks", "yes"),
        ("causal", "1"),
    ] {
        let h = dir.path().join("bad.safetensors");
        with_metadata(&f, &h, Some(vec![(k, v)]));
        refused(&h, &format!("metadata `{k}`"));
    }
}

#[test]
fn a1_from_a_dump_equals_the_native_head_space_analysis() {
    // The pooled head-space analysis of one text, native (`--a1`) and from the dump's queries
    // and keys (`--activations F --a1`): the same verdicts and realisation rates; γ_a within
    // 1e-6 relative (the native queries carry the logit scale, a positive factor the relative
    // margin removes up to the hull solver's rounding).
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("qkv.safetensors");
    let m = tiny("llama_default");
    let toks = "1,5,9,13,2,7,33,60,4,11,3,8";
    let native = sinklab(&[
        "real",
        "--model",
        m.to_str().unwrap(),
        "--tokens",
        toks,
        "--bos",
        "no",
        "--a1",
        "--json",
        "--dump",
        f.to_str().unwrap(),
        "--what",
        "attn,qkv",
    ]);
    let back = sinklab(&[
        "real",
        "--activations",
        f.to_str().unwrap(),
        "--a1",
        "--json",
    ]);
    let (nh, bh) = (
        native["a1_pooled"]["heads"].as_array().unwrap(),
        back["heads"].as_array().unwrap(),
    );
    assert_eq!(nh.len(), 2 * 4, "L · H heads");
    assert_eq!(nh.len(), bh.len());
    for (a, b) in nh.iter().zip(bh) {
        for k in [
            "layer",
            "head",
            "n_points",
            "queries_in_half_space",
            "verified",
        ] {
            assert_eq!(a[k], b[k], "{k}");
        }
        assert_eq!(a["sep"]["sink_separable"], b["sep"]["sink_separable"]);
        for k in ["realised", "null_realised", "attn_first"] {
            close(&a[k], &b[k], k);
        }
        let (x, y) = (
            a["gamma_a"].as_f64().unwrap(),
            b["gamma_a"].as_f64().unwrap(),
        );
        assert!(
            (x - y).abs() <= 1e-6 * x.abs().max(1e-12),
            "gamma_a {x} vs {y}"
        );
    }
    assert_eq!(native["a1_pooled"]["verdict"], back["verdict"]);
    // A file without queries is refused, naming what --a1 needs.
    let g = dir.path().join("h.safetensors");
    sinklab(&[
        "real",
        "--model",
        m.to_str().unwrap(),
        "--tokens",
        toks,
        "--json",
        "--dump",
        g.to_str().unwrap(),
        "--what",
        "hidden",
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_sinklab"))
        .args(["real", "--activations", g.to_str().unwrap(), "--a1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("queries.{l}"));
}
