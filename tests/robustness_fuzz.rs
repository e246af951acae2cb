//! A bounded mutation fuzzer, run by `cargo test`: seeded mutations of small valid inputs —
//! a GGUF model, a safetensors model directory, its `config.json` and `tokenizer.json`, an
//! activation file and a sweep spec — fed to the crate's entry points
//! ([`sinklab::runtime::load`], the activation reader and analysis, the spec parser). Every
//! input must give `Ok` or `Err`: no panic (caught), no abort (it would end this process, so
//! the test), no hang (each input runs in its own thread and must finish within
//! [`LIMIT`]). The libFuzzer target `fuzz/fuzz_targets/loaders.rs` explores further.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use safetensors::{Dtype, tensor::TensorView};
use sinklab::synth::{SynthSpec, write_gguf};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Wall-clock limit of one input (the loaders take milliseconds on these sizes; a loader that
/// trusts a declared size spins or allocates for far longer).
const LIMIT: Duration = Duration::from_secs(10);

/// One mutation of `b`, drawn from `rng`: bit flips, extreme bytes and words, deletions,
/// insertions, duplications and truncations.
fn mutate(b: &[u8], rng: &mut StdRng) -> Vec<u8> {
    let mut v = b.to_vec();
    let n = rng.random_range(1..=4);
    for _ in 0..n {
        if v.is_empty() {
            v.push(0);
        }
        let at = rng.random_range(0..v.len());
        match rng.random_range(0..7) {
            0 => v[at] ^= 1 << rng.random_range(0..8),
            1 => v[at] = [0u8, 0xFF, 0x7F, 0x80, b'0', b'-', b'9'][rng.random_range(0..7)],
            2 => {
                let word: [u8; 8] = [
                    u64::MAX,
                    u32::MAX as u64,
                    0,
                    1 << 40,
                    i64::MIN as u64,
                    f64::NAN.to_bits(),
                ][rng.random_range(0..6)]
                .to_le_bytes();
                let k = rng.random_range(1..=8).min(v.len() - at);
                v[at..at + k].copy_from_slice(&word[..k]);
            }
            3 => {
                let k = rng.random_range(1..=16).min(v.len() - at);
                v.drain(at..at + k);
            }
            4 => {
                let k = rng.random_range(1..=16);
                let ins: Vec<u8> = (0..k).map(|_| rng.random()).collect();
                v.splice(at..at, ins);
            }
            5 => {
                let k = rng.random_range(1..=32).min(v.len() - at);
                let chunk = v[at..at + k].to_vec();
                let to = rng.random_range(0..v.len());
                v.splice(to..to, chunk);
            }
            _ => v.truncate(at),
        }
    }
    v
}

/// Runs `f` in its own thread; fails on a panic or when it exceeds [`LIMIT`].
fn guarded(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(AssertUnwindSafe(f));
        let _ = tx.send(r.is_ok());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(true) => {}
        Ok(false) => panic!("{what}: panicked"),
        Err(_) => panic!("{what}: still running after {LIMIT:?} (hang)"),
    }
}

fn f32s(n: usize, rng: &mut StdRng) -> Vec<u8> {
    (0..n)
        .flat_map(|_| (rng.random::<f32>() * 0.2 - 0.1).to_le_bytes())
        .collect()
}

/// A tiny valid BERT directory: config.json, model.safetensors, tokenizer.json.
fn bert_dir(dir: &Path) -> (String, Vec<u8>, String) {
    let (d, dff, v, ctx) = (8usize, 16usize, 10usize, 4usize);
    let config = format!(
        r#"{{"model_type":"bert","hidden_size":{d},"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":{dff},"vocab_size":{v},"max_position_embeddings":{ctx},"hidden_act":"gelu","layer_norm_eps":1e-12}}"#
    );
    let mut rng = StdRng::seed_from_u64(7);
    let mut t: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut push = |name: &str, shape: Vec<usize>, rng: &mut StdRng| {
        let n = shape.iter().product();
        t.push((name.to_string(), shape, f32s(n, rng)));
    };
    push("embeddings.word_embeddings.weight", vec![v, d], &mut rng);
    push(
        "embeddings.position_embeddings.weight",
        vec![ctx, d],
        &mut rng,
    );
    push(
        "embeddings.token_type_embeddings.weight",
        vec![2, d],
        &mut rng,
    );
    for ln in [
        "embeddings.LayerNorm",
        "encoder.layer.0.attention.output.LayerNorm",
        "encoder.layer.0.output.LayerNorm",
    ] {
        push(&format!("{ln}.weight"), vec![d], &mut rng);
        push(&format!("{ln}.bias"), vec![d], &mut rng);
    }
    for (name, o, i) in [
        ("attention.self.query", d, d),
        ("attention.self.key", d, d),
        ("attention.self.value", d, d),
        ("attention.output.dense", d, d),
        ("intermediate.dense", dff, d),
        ("output.dense", d, dff),
    ] {
        push(
            &format!("encoder.layer.0.{name}.weight"),
            vec![o, i],
            &mut rng,
        );
        push(&format!("encoder.layer.0.{name}.bias"), vec![o], &mut rng);
    }
    let views: Vec<(String, TensorView<'_>)> = t
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let st = safetensors::serialize(views, None).unwrap();
    let tok = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","vocab":{"[UNK]":0,"a":1,"b":2,"c":3},"unk_token":"[UNK]"}}"#.to_string();
    std::fs::write(dir.join("config.json"), &config).unwrap();
    std::fs::write(dir.join("model.safetensors"), &st).unwrap();
    std::fs::write(dir.join("tokenizer.json"), &tok).unwrap();
    (config, st, tok)
}

/// An activation file with every optional tensor (valid: the seed loads).
fn activations_seed() -> Vec<u8> {
    let (l, t, d) = (2usize, 4usize, 6usize);
    let mut rng = StdRng::seed_from_u64(3);
    let mut t_: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for layer in 0..l {
        t_.push((
            format!("hidden.{layer}"),
            Dtype::F32,
            vec![t, d],
            f32s(t * d, &mut rng),
        ));
        t_.push((
            format!("mlp_out.{layer}"),
            Dtype::F32,
            vec![t, d],
            f32s(t * d, &mut rng),
        ));
        let attn: Vec<u8> = (0..2 * t * t)
            .flat_map(|k| {
                let (i, j) = ((k / t) % t, k % t);
                (if j <= i { 1.0 / (i + 1) as f32 } else { 0.0 }).to_le_bytes()
            })
            .collect();
        t_.push((format!("attn.{layer}"), Dtype::F32, vec![2, t, t], attn));
        t_.push((
            format!("keys.{layer}"),
            Dtype::F32,
            vec![1, t, 3],
            f32s(t * 3, &mut rng),
        ));
        t_.push((
            format!("values.{layer}"),
            Dtype::F32,
            vec![1, t, 3],
            f32s(t * 3, &mut rng),
        ));
    }
    t_.push((
        "tokens".into(),
        Dtype::I64,
        vec![t],
        [1i64, 2, 3, 4]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
    ));
    let views: Vec<(String, TensorView<'_>)> = t_
        .iter()
        .map(|(n, dt, s, b)| (n.clone(), TensorView::new(*dt, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// Mutated copies of `seed`, each written to `path` (in a fresh directory per case, so a hung
/// case cannot race the next) and passed to `check`.
fn campaign(
    name: &str,
    seed: &[u8],
    cases: usize,
    rng_seed: u64,
    prepare: impl Fn(&Path, &[u8]) -> PathBuf,
    check: fn(PathBuf),
) -> Duration {
    let start = Instant::now();
    let root = tempfile::tempdir().unwrap();
    // The unmutated seed must load: otherwise the campaign only probes the first check.
    let p0 = prepare(&root.path().join("seed"), seed);
    guarded(&format!("{name} seed"), move || check(p0));
    let mut rng = StdRng::seed_from_u64(rng_seed);
    for k in 0..cases {
        let bytes = mutate(seed, &mut rng);
        let p = prepare(&root.path().join(format!("c{k}")), &bytes);
        guarded(&format!("{name} case {k} (seed {rng_seed})"), move || {
            check(p)
        });
    }
    start.elapsed()
}

#[test]
fn mutated_inputs_never_panic_abort_or_hang() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("tiny.gguf");
    write_gguf(&gguf, &SynthSpec::default(), 1).unwrap();
    let gguf_seed = std::fs::read(&gguf).unwrap();
    sinklab::runtime::load(&gguf).expect("the GGUF seed loads");
    let bdir = tmp.path().join("bert");
    std::fs::create_dir_all(&bdir).unwrap();
    let (config, st, tok) = bert_dir(&bdir);
    sinklab::runtime::load(&bdir).expect("the BERT seed loads");
    let acts = activations_seed();
    let spec = sinklab::sweep::cost_scaling::QUICK_SPEC.as_bytes().to_vec();

    let file = |name: &'static str| {
        move |dir: &Path, b: &[u8]| {
            std::fs::create_dir_all(dir).unwrap();
            let p = dir.join(name);
            std::fs::write(&p, b).unwrap();
            p
        }
    };
    // A BERT directory with one of its three files replaced by the mutated bytes.
    let bert_with = |which: &'static str, cfg: String, st: Vec<u8>, tok: String| {
        move |dir: &Path, b: &[u8]| {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("config.json"), &cfg).unwrap();
            std::fs::write(dir.join("model.safetensors"), &st).unwrap();
            std::fs::write(dir.join("tokenizer.json"), &tok).unwrap();
            std::fs::write(dir.join(which), b).unwrap();
            dir.to_path_buf()
        }
    };
    let load = |p: PathBuf| {
        let _ = sinklab::runtime::load(&p);
    };
    let mut total = Duration::ZERO;
    total += campaign("gguf", &gguf_seed, 120, 11, file("m.gguf"), load);
    total += campaign(
        "safetensors",
        &st,
        60,
        12,
        bert_with("model.safetensors", config.clone(), st.clone(), tok.clone()),
        load,
    );
    total += campaign(
        "config.json",
        config.as_bytes(),
        60,
        13,
        bert_with("config.json", config.clone(), st.clone(), tok.clone()),
        load,
    );
    total += campaign(
        "tokenizer.json",
        tok.as_bytes(),
        60,
        14,
        bert_with("tokenizer.json", config.clone(), st.clone(), tok.clone()),
        load,
    );
    total += campaign("activations", &acts, 100, 15, file("a.safetensors"), |p| {
        let _ = sinklab::runtime::activation_file::Activations::read(&p);
        let _ = sinklab::real::activations::analyze_file(&p);
    });
    total += campaign("sweep spec", &spec, 100, 16, file("s.toml"), |p| {
        if let Ok(s) = sinklab::sweep::cost_scaling::SweepSpec::load(&p) {
            let pts = s.points();
            for p in &pts {
                let _ = p.id();
            }
            let _ = sinklab::sweep::cost_scaling::check_budget(
                &s,
                "fuzz",
                &sinklab::budget::Budget::default(),
                2,
                false,
                None,
            );
        }
    });
    // 500 inputs; the whole campaign stays a small part of `cargo test`.
    assert!(
        total < Duration::from_secs(60),
        "fuzz campaign took {total:?}"
    );
}
