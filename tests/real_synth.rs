//! The streaming paper-scale GGUF writer (`synth::write_paper_gguf`, `sinklab synth`), at
//! tiny shapes with the paper models' structure: bytes fixed by the seed, the file read back by
//! candle (and the sinklab loader) and by the Python `gguf` package, values those of the f32 draw
//! up to Q4_K rounding, and the paper shapes' parameter counts equal to the published models'.

#[path = "support/cli.rs"]
mod cli;
use candle_core::quantized::gguf_file::Content;
use candle_core::{Device, quantized::GgmlDType};
use cli::bin;
use sha2::{Digest, Sha256};
use sinklab::synth::{Llama3Rope, SynthDtype, SynthShape, paper_size, write_paper_gguf};
use std::path::Path;
use std::process::Command;

fn write(dir: &Path, name: &str, shape: &str, dt: SynthDtype, seed: u64) -> std::path::PathBuf {
    let p = dir.join(name);
    let s = SynthShape {
        dtype: dt,
        ..SynthShape::by_name(shape).unwrap()
    };
    let mut last = (0, 0);
    let size = write_paper_gguf(&p, &s, seed, 2, &mut |d, t| last = (d, t)).unwrap();
    // The progress callback ends at the total, which is the planned size and the file's size.
    assert_eq!(last, (size.total(), size.total()));
    assert_eq!(size, paper_size(&s, seed));
    assert_eq!(std::fs::metadata(&p).unwrap().len() as usize, size.total());
    p
}

fn sha(p: &Path) -> Vec<u8> {
    Sha256::digest(std::fs::read(p).unwrap()).to_vec()
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let d = tempfile::tempdir().unwrap();
    for shape in ["tiny-llama3", "tiny-qwen2"] {
        let a = write(d.path(), "a.gguf", shape, SynthDtype::Q4KM, 7);
        let ha = sha(&a);
        let b = write(d.path(), "b.gguf", shape, SynthDtype::Q4KM, 7);
        assert_eq!(ha, sha(&b), "{shape}: two writes with seed 7 differ");
        let c = write(d.path(), "c.gguf", shape, SynthDtype::Q4KM, 8);
        assert_ne!(ha, sha(&c), "{shape}: seeds 7 and 8 give the same file");
    }
}

/// The thread count sizes the batches of chunks, never the bytes (one stream per chunk).
#[test]
fn bytes_do_not_depend_on_the_thread_count() {
    let d = tempfile::tempdir().unwrap();
    let s = SynthShape {
        dtype: SynthDtype::Q8_0,
        ..SynthShape::by_name("tiny-llama3").unwrap()
    };
    let (a, b) = (d.path().join("a.gguf"), d.path().join("b.gguf"));
    write_paper_gguf(&a, &s, 4, 1, &mut |_, _| {}).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    pool.install(|| write_paper_gguf(&b, &s, 4, 3, &mut |_, _| {}))
        .unwrap();
    assert_eq!(sha(&a), sha(&b), "threads 1 and 3 wrote different files");
}

#[test]
fn paper_shapes_have_the_published_parameter_counts() {
    // Llama-3.1-8B: 8 030 261 248 parameters (Hugging Face `num_parameters()`), plus the 64
    // RoPE divisors llama.cpp stores as `rope_freqs.weight`. Qwen2-7B: 7 615 616 512.
    let l = paper_size(
        &SynthShape {
            dtype: SynthDtype::Q4KM,
            ..SynthShape::llama31_8b()
        },
        0,
    );
    assert_eq!(l.params, 8_030_261_248 + 64);
    assert_eq!(l.tensors, 2 + 32 * 9 + 1 + 1);
    let q = paper_size(
        &SynthShape {
            dtype: SynthDtype::Q4K,
            ..SynthShape::qwen2_7b()
        },
        0,
    );
    assert_eq!(q.params, 7_615_616_512);
    assert_eq!(q.tensors, 2 + 28 * 12 + 1);
    // Q4_K stores 256 values in 144 bytes (4.5 bits per value); Q4_K_M's Q6_K tensors take 210.
    let all_q4k = paper_size(
        &SynthShape {
            dtype: SynthDtype::Q4K,
            ..SynthShape::llama31_8b()
        },
        0,
    );
    assert!(all_q4k.data < l.data);
    // Everything else is f32 vectors (norm gains, RoPE divisors) and < 32 bytes of alignment
    // padding per tensor.
    let n_vec = 32 * 2 * 4096 + 4096 + 64;
    let exact = (8_030_261_248 + 64 - n_vec) / 256 * 144 + 4 * n_vec;
    assert!(all_q4k.data >= exact && all_q4k.data < exact + 32 * all_q4k.tensors);
}

/// Reads every tensor with candle: (name, ggml type, dims innermost first, Σx, Σx²) of the
/// dequantized values.
/// (name, ggml type, dims innermost first, Σx, Σx²).
type TensorSummary = (String, GgmlDType, Vec<usize>, f64, f64);

fn candle_tensors(p: &Path) -> (Content, Vec<TensorSummary>) {
    let mut f = std::fs::File::open(p).unwrap();
    let c = Content::read(&mut f).unwrap();
    let mut names: Vec<_> = c.tensor_infos.keys().cloned().collect();
    names.sort();
    let mut out = Vec::new();
    for n in names {
        let q = c.tensor(&mut f, &n, &Device::Cpu).unwrap();
        let dims: Vec<usize> = q.shape().dims().iter().rev().copied().collect();
        let v: Vec<f32> = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let s1 = v.iter().map(|&x| x as f64).sum();
        let s2 = v.iter().map(|&x| (x as f64).powi(2)).sum();
        out.push((n, q.dtype(), dims, s1, s2));
    }
    (c, out)
}

#[test]
fn candle_reads_it_back_and_the_values_are_the_f32_draw_up_to_q4k_rounding() {
    let d = tempfile::tempdir().unwrap();
    for shape in ["tiny-llama3", "tiny-qwen2"] {
        let s = SynthShape::by_name(shape).unwrap();
        let q = write(d.path(), "q.gguf", shape, SynthDtype::Q4KM, 3);
        let f = write(d.path(), "f.gguf", shape, SynthDtype::F32, 3);
        let (cq, tq) = candle_tensors(&q);
        let (_, tf) = candle_tensors(&f);
        assert_eq!(tq.len(), tf.len());
        let md = |k: &str| cq.metadata[k].to_u32().unwrap() as usize;
        assert_eq!(md(&format!("{}.block_count", s.arch)), s.n_layer);
        assert_eq!(
            md(&format!("{}.attention.head_count_kv", s.arch)),
            s.n_kv_head
        );
        let mut quantized = 0;
        for ((n, dq, dims, _, s2q), (nf, df, dimsf, _, s2f)) in tq.iter().zip(&tf) {
            assert_eq!((n, dims), (nf, dimsf));
            assert_eq!(*df, GgmlDType::F32);
            if *dq == GgmlDType::F32 {
                // Vectors (norm gains, biases, RoPE divisors) are stored exactly.
                assert_eq!(s2q, s2f, "{shape} {n}");
                continue;
            }
            quantized += 1;
            assert!(matches!(dq, GgmlDType::Q4K | GgmlDType::Q6K), "{n}: {dq:?}");
        }
        assert_eq!(quantized, 2 + 7 * s.n_layer);
        // Elementwise: the dequantized Q4_K matrix against the f32 draw of the same seed. A
        // 4-bit quantizer over a block's range has RMS error ≈ step/√12 with step = range/15,
        // i.e. ≈ 1/15 ≈ 0.067 of the RMS of a uniform block; candle's Q4_K search (per-32
        // scales and minima) does at least that well, so 0.08 bounds it, and an error above
        // 0.01 shows the tensor really is 4-bit.
        let mut fq = std::fs::File::open(&q).unwrap();
        let mut ff = std::fs::File::open(&f).unwrap();
        let cf = Content::read(&mut ff).unwrap();
        for n in [
            "blk.0.attn_q.weight",
            "blk.1.ffn_up.weight",
            "token_embd.weight",
        ] {
            let a: Vec<f32> = cq
                .tensor(&mut fq, n, &Device::Cpu)
                .unwrap()
                .dequantize(&Device::Cpu)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let b: Vec<f32> = cf
                .tensor(&mut ff, n, &Device::Cpu)
                .unwrap()
                .dequantize(&Device::Cpu)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let e2: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| ((x - y) as f64).powi(2))
                .sum();
            let b2: f64 = b.iter().map(|&y| (y as f64).powi(2)).sum();
            let rel = (e2 / b2).sqrt();
            assert!(
                rel > 0.01 && rel < 0.08,
                "{shape} {n}: relative RMS error {rel}"
            );
            // Variance 1/n_in: the f32 draw's mean square is 1/d within sampling error (≥ 16k values).
            let ms = b2 / b.len() as f64;
            assert!(
                (ms * s.d as f64 - 1.0).abs() < 0.05,
                "{shape} {n}: mean square {ms}"
            );
        }
        if let Some(r) = &s.llama3_rope {
            let v: Vec<f32> = cq
                .tensor(&mut fq, "rope_freqs.weight", &Device::Cpu)
                .unwrap()
                .dequantize(&Device::Cpu)
                .unwrap()
                .to_vec1()
                .unwrap();
            assert_eq!(v, r.divisors(s.rope_base, s.head_dim));
        } else {
            assert!(!cq.tensor_infos.contains_key("rope_freqs.weight"));
        }
        assert_eq!(
            cq.tensor_infos.contains_key("blk.0.attn_q.bias"),
            s.qkv_bias
        );
    }
}

#[test]
fn the_sinklab_loader_runs_it_on_token_ids() {
    let d = tempfile::tempdir().unwrap();
    for shape in ["tiny-llama3", "tiny-qwen2"] {
        let s = SynthShape::by_name(shape).unwrap();
        let p = write(d.path(), "m.gguf", shape, SynthDtype::Q4KM, 5);
        let lm = sinklab::runtime::load(&p).unwrap();
        let c = &lm.model.cfg;
        assert_eq!(
            (
                c.n_layer,
                c.d_model,
                c.n_head,
                c.n_kv_head,
                c.head_dim,
                c.vocab
            ),
            (s.n_layer, s.d, s.n_head, s.n_kv_head, s.head_dim, s.vocab)
        );
        let toks: Vec<u32> = (0..40).map(|i| 1 + (i * 37 % 299) as u32).collect();
        let out = lm.model.forward(&toks, &mut (), None).unwrap();
        assert_eq!(out.normed.len(), toks.len() * s.d);
        // Variance-preserving init and gains near 1: the residual stream stays finite and O(√L).
        let rms = (out.hidden.iter().map(|&x| (x as f64).powi(2)).sum::<f64>()
            / out.hidden.len() as f64)
            .sqrt();
        assert!(
            rms.is_finite() && rms > 0.1 && rms < 100.0,
            "{shape}: residual RMS {rms}"
        );
    }
    // `sinklab real --tokens` on the synthetic vocabulary.
    let p = write(d.path(), "cli.gguf", "tiny-qwen2", SynthDtype::Q4K, 5);
    let o = bin()
        .args([
            "real",
            "--model",
            p.to_str().unwrap(),
            "--tokens",
            "1,4,9,16,25,36",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", cli::stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.is_object(), "{v}");
}

/// The `gguf` package's reader on our file (a Python with gguf and numpy at `SINKLAB_PYTHON`).
/// Required only under its own `SINKLAB_REQUIRE_GGUF_PYTHON=1`: the Python package's venv that
/// `SINKLAB_REQUIRE_PYTHON` asks for holds no gguf.
#[test]
fn python_gguf_reads_the_same_tensors() {
    let py = std::env::var("SINKLAB_PYTHON").unwrap_or_else(|_| "/work/venv/bin/python".into());
    let has_gguf = Command::new(&py)
        .args(["-c", "import gguf, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_gguf {
        assert!(
            std::env::var_os("SINKLAB_REQUIRE_GGUF_PYTHON").is_none(),
            "SINKLAB_REQUIRE_GGUF_PYTHON set but {py} cannot import gguf"
        );
        eprintln!("SKIP: {py} with the gguf package not found (SINKLAB_PYTHON)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "m.gguf", "tiny-llama3", SynthDtype::Q4KM, 11);
    let script = r#"
import json, sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
r = GGUFReader(sys.argv[1])
ts = []
for t in r.tensors:
    x = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64).ravel()
    ts.append([t.name, int(t.tensor_type), [int(s) for s in t.shape], float(x.sum()), float((x * x).sum())])
ts.sort()
print(json.dumps({"arch": r.fields["general.architecture"].contents(),
                  "vocab": len(r.fields["tokenizer.ggml.tokens"].contents()),
                  "tensors": ts}))
"#;
    let o = Command::new(&py)
        .args(["-c", script, p.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", cli::stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["arch"], "llama");
    assert_eq!(v["vocab"], 300);
    let (_, ours) = candle_tensors(&p);
    let theirs = v["tensors"].as_array().unwrap();
    assert_eq!(theirs.len(), ours.len());
    for (t, (n, dt, dims, s1, s2)) in theirs.iter().zip(&ours) {
        assert_eq!(t[0].as_str().unwrap(), n);
        let id = match dt {
            GgmlDType::F32 => 0,
            GgmlDType::Q4K => 12,
            GgmlDType::Q6K => 14,
            other => panic!("{n}: unexpected {other:?}"),
        };
        assert_eq!(t[1].as_u64().unwrap(), id, "{n}");
        let td: Vec<usize> = t[2]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(&td, dims, "{n}");
        // Both dequantize the same bytes to f32 with the same formula; only the order of the
        // f32 products may differ, so the sums agree to f32 rounding (1e-5 of Σx², which also
        // bounds |Σx| differences).
        let (p1, p2) = (t[3].as_f64().unwrap(), t[4].as_f64().unwrap());
        assert!((p2 - s2).abs() <= 1e-5 * s2, "{n}: Σx² {p2} vs {s2}");
        assert!(
            (p1 - s1).abs() <= 1e-5 * s2.max(1.0),
            "{n}: Σx {p1} vs {s1}"
        );
    }
}

#[test]
fn refuses_shapes_that_do_not_fit_the_blocks_and_unknown_names() {
    let d = tempfile::tempdir().unwrap();
    let mut s = SynthShape::by_name("tiny-llama3").unwrap();
    s.d_ff = 300;
    s.dtype = SynthDtype::Q4K;
    let e = write_paper_gguf(&d.path().join("x.gguf"), &s, 0, 2, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("ffn_down.weight") && e.contains("300"), "{e}");
    // F32 has block length 1: the same shape is fine there.
    s.dtype = SynthDtype::F32;
    write_paper_gguf(&d.path().join("y.gguf"), &s, 0, 2, &mut |_, _| {}).unwrap();
    let o = bin()
        .args([
            "synth",
            "--shape",
            "llama-9000",
            "--out",
            d.path().join("z.gguf").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(cli::stderr(&o).contains("llama3.1-8b"));
}

#[test]
fn llama3_rope_divisors() {
    // Hugging Face `_compute_llama3_parameters` at Llama 3.1's settings: the highest frequencies
    // (wavelength < 8192/4) are kept, the lowest (wavelength > 8192) divided by 8, between them
    // a smooth ramp; monotone in the wavelength.
    let r = Llama3Rope {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_ctx: 8192,
    };
    let f = r.divisors(500000.0, 128);
    assert_eq!(f.len(), 64);
    assert_eq!(f[0], 1.0);
    assert_eq!(f[63], 8.0);
    assert!(f.windows(2).all(|w| w[1] >= w[0]));
    let ramp = f.iter().filter(|&&x| x > 1.0 && x < 8.0).count();
    assert!(ramp > 0 && ramp < 20, "{ramp} frequencies on the ramp");
}

#[test]
fn llama_cpp_loads_and_runs_it() {
    // llama.cpp is the strictest reader at hand (tensor shapes against its own architecture
    // tables, typed metadata, known pre-tokenizers); installed by scripts/bench_baselines.sh.
    let py = std::env::var("SINKLAB_PYTHON").unwrap_or_else(|_| "/work/venv/bin/python".into());
    let has = Command::new(&py)
        .args(["-c", "import llama_cpp"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        eprintln!("SKIP: {py} without llama_cpp (scripts/bench_baselines.sh installs it)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    for shape in ["tiny-llama3", "tiny-qwen2"] {
        let p = write(d.path(), "m.gguf", shape, SynthDtype::Q4KM, 2);
        let script = r#"
import sys, llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=2, verbose=False)
g = []
for t in llm.generate([1, 5, 9, 16], temp=0.0, top_k=1):
    g.append(t)
    if len(g) == 4:
        break
print(",".join(map(str, g)))
"#;
        let o = Command::new(&py)
            .args(["-c", script, p.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{shape}: llama.cpp refused the file: {}",
            cli::stderr(&o)
        );
        let ids: Vec<u32> = String::from_utf8_lossy(&o.stdout)
            .trim()
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(ids.len(), 4);
        assert!(ids.iter().all(|&i| i < 300), "{shape}: {ids:?}");
    }
}

/// The mixture-of-experts paper shapes have the published parameter counts: Qwen3-30B-A3B's
/// 30 532 122 624 and gpt-oss-20b's 20 914 757 184, each also rebuilt here from its published
/// configuration.
#[test]
fn moe_paper_shapes_have_the_published_parameter_counts() {
    let g = paper_size(&SynthShape::gpt_oss_20b(), 0);
    let (d, v, l, e, de) = (2880usize, 201088usize, 24usize, 32usize, 2880usize);
    let attn = d * 4096 * 2 + d * 512 * 2 + 4096 + 512 * 2 + d + 64;
    let moe = e * d + e + e * (2 * de * d + d * de) + e * (2 * de + d);
    let per_layer = attn + moe + 2 * d;
    assert_eq!(g.params, 2 * v * d + l * per_layer + d);
    assert_eq!(g.params, 20_914_757_184);
    // 24 × (4 attention matrices, router, 3 expert stacks, 2 norms, 4 attention biases, sinks,
    // router bias, 3 expert biases) + embedding, head, final norm.
    assert_eq!(g.tensors, 24 * 19 + 3);
    let q = paper_size(&SynthShape::qwen3_30b_a3b(), 0);
    let (d, v, l, e, de) = (2048usize, 151936usize, 48usize, 128usize, 768usize);
    let per_layer = d * 4096 * 2 + d * 512 * 2 + 2 * 128 + 2 * d + e * d + e * 3 * de * d;
    assert_eq!(q.params, 2 * v * d + l * per_layer + d);
    assert_eq!(q.params, 30_532_122_624);
}

/// The tiny mixture-of-experts shapes through the same writer: same seed same bytes, the
/// sinklab loader reads them with the published storage (gpt-oss: MXFP4 expert stacks mapped in
/// place, Q8_0 attention, f32 router; Qwen3-MoE: Q4_K_M blocks, f32 router), the MXFP4 values
/// are the draw's (mean square within 25 % of the variance 1/n_in, and no value beyond the
/// draw's bound √(3/n_in) by more than MXFP4's round-up of at most 1/8 of a block's largest
/// magnitude), and a forward pass gives finite logits.
#[test]
fn moe_shapes_load_with_the_published_storage_and_run() {
    use sinklab::runtime::pretrained::Ffn;
    use sinklab::runtime::weights::{Storage, WeightType};
    let d = tempfile::tempdir().unwrap();
    for shape in ["tiny-gpt-oss", "tiny-qwen3moe"] {
        let dt = SynthShape::by_name(shape).unwrap().dtype;
        let a = write(d.path(), "a.gguf", shape, dt, 11);
        let b = write(d.path(), "b.gguf", shape, dt, 11);
        assert_eq!(sha(&a), sha(&b), "{shape}: two writes with seed 11 differ");
        let lm = sinklab::runtime::load(&a).unwrap_or_else(|e| panic!("{shape}: {e}"));
        let m = &lm.model;
        let f32_ = WeightType::Ggml(GgmlDType::F32);
        for (l, ly) in m.layers.iter().enumerate() {
            let Ffn::Moe(moe) = &ly.ffn else {
                panic!("{shape}: layer {l} is not a mixture")
            };
            assert_eq!(moe.router.w.dtype(), f32_, "{shape}: router");
            for x in &moe.experts {
                for w in [&x.gate.as_ref().unwrap().w, &x.up.w, &x.down.w] {
                    if shape == "tiny-gpt-oss" {
                        let Storage::Mxfp4(s) = w.storage() else {
                            panic!("{shape}: layer {l}: expert stored as {:?}", w.dtype())
                        };
                        assert!(s.blocks.is_mapped());
                        let v = w.to_f32();
                        let n = w.n_cols() as f64;
                        let ms =
                            v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / v.len() as f64;
                        assert!((ms * n - 1.0).abs() < 0.25, "{shape}: mean square {ms} · n");
                        let bound = (3.0 / n).sqrt() * 1.125;
                        assert!(v.iter().all(|&x| (x as f64).abs() <= bound));
                    } else {
                        assert!(w.is_quantized(), "{shape}: expert {:?}", w.dtype());
                    }
                }
            }
            if shape == "tiny-gpt-oss" {
                assert_eq!(ly.wq.w.dtype(), WeightType::Ggml(GgmlDType::Q8_0));
                assert!(ly.sinks.is_some(), "{shape}: layer {l} has no sinks");
            }
        }
        let tokens: Vec<u32> = (0..12).map(|i| 2 + (i * 37) % 290).collect();
        let out = m
            .forward(&tokens, &mut (), None)
            .unwrap_or_else(|e| panic!("{shape}: {e}"));
        let logits = m.logits(&out.normed).unwrap();
        assert_eq!(logits.len(), 12 * m.cfg.vocab);
        assert!(logits.iter().all(|x| x.is_finite()), "{shape}: logits");
    }
}
