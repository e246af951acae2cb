//! A transformers-saved SmolLM2 directory gives the same numbers as the SmolLM2 GGUF.
//!
//! `tests/fixtures/smollm2_hf/` holds the `config.json` (transformers ≥ 5 layout: the RoPE base
//! under `rope_parameters.rope_theta`), `tokenizer.json` (a `TemplateProcessing` without special
//! tokens) and `tokenizer_config.json` that transformers writes for this model
//! (`scripts/make_smollm2_hf_fixture.py`). The test writes the weights: the GGUF's tensors, as
//! loaded (dequantized to f32, q/k rows in Hugging Face order), under Hugging Face names. The two
//! loads then share weights and differ only in what the formats decide — hyper-parameters from
//! config.json vs GGUF metadata, tokenizer.json vs the GGUF vocabulary, BOS policy — so every
//! statistic must agree to f32 round-off of identical computations (1e-6); before RoPE was read
//! from `rope_parameters`, attention to the first token differed by 0.05.

use safetensors::tensor::{Dtype, TensorView};
use sinklab::real::stats::StatsObserver;
use sinklab::runtime::tokenizer::Bos;
use sinklab::runtime::{fetch, load};
use std::path::{Path, PathBuf};

const TEXTS: &[&str] = &[
    "The quick brown fox jumps over the lazy dog. Attention sinks, 1234 times over.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
];

fn write_hf_dir(m: &sinklab::runtime::pretrained::Pretrained, dir: &Path) {
    let fx = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smollm2_hf");
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fx.join(f), dir.join(f)).unwrap();
    }
    let mut t: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut put = |name: String, shape: Vec<usize>, v: &[f32]| {
        t.push((
            name,
            shape,
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ));
    };
    let c = &m.cfg;
    put(
        "model.embed_tokens.weight".into(),
        vec![c.vocab, c.d_model],
        &m.embed.to_f32(),
    );
    let gain = |n: &Option<sinklab::runtime::pretrained::NormLayer>| match n {
        Some(sinklab::runtime::pretrained::NormLayer::Rms { w, .. }) => w.clone(),
        _ => panic!("SmolLM2 uses RMSNorm"),
    };
    put(
        "model.norm.weight".into(),
        vec![c.d_model],
        &gain(&m.final_norm),
    );
    for (l, ly) in m.layers.iter().enumerate() {
        let b = format!("model.layers.{l}.");
        put(
            format!("{b}input_layernorm.weight"),
            vec![c.d_model],
            &gain(&ly.attn_norm),
        );
        put(
            format!("{b}post_attention_layernorm.weight"),
            vec![c.d_model],
            &gain(&ly.ffn_norm),
        );
        for (n, lin) in [
            ("self_attn.q_proj", &ly.wq),
            ("self_attn.k_proj", &ly.wk),
            ("self_attn.v_proj", &ly.wv),
            ("self_attn.o_proj", &ly.wo),
            ("mlp.gate_proj", mlp_of(ly).gate.as_ref().unwrap()),
            ("mlp.up_proj", &mlp_of(ly).up),
            ("mlp.down_proj", &mlp_of(ly).down),
        ] {
            put(
                format!("{b}{n}.weight"),
                vec![lin.out, lin.inp],
                &lin.w.to_f32(),
            );
        }
    }
    let views: Vec<(String, TensorView<'_>)> = t
        .iter()
        .map(|(n, s, d)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), d).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

#[test]
fn transformers_saved_smollm2_directory_matches_the_gguf() {
    let Some(gguf) = fetch::cached("smollm2") else {
        assert!(
            std::env::var("SINKLAB_REQUIRE_MODELS").as_deref() != Ok("1"),
            "smollm2 not in the cache"
        );
        eprintln!("SKIP: smollm2 not in the cache (run `sinklab fetch smollm2`)");
        return;
    };
    let a = load(&gguf).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    write_hf_dir(&a.model, tmp.path());
    let b = load(tmp.path()).unwrap();
    let (ta, tb) = (a.tok.as_ref().unwrap(), b.tok.as_ref().unwrap());
    for text in TEXTS {
        for bos in [Bos::Auto, Bos::Yes, Bos::No] {
            let (ia, ib) = (ta.encode(text, bos).unwrap(), tb.encode(text, bos).unwrap());
            assert_eq!(ia, ib, "token ids differ with --bos {bos:?} on {text:?}");
        }
        let toks = ta.encode(text, Bos::Yes).unwrap();
        assert_eq!(
            toks[0], 1,
            "--bos yes puts SmolLM2's BOS <|im_start|> first"
        );
        let mut sa = StatsObserver::default();
        let mut sb = StatsObserver::default();
        let oa = a.model.forward(&toks, &mut sa, None).unwrap();
        let ob = b.model.forward(&toks, &mut sb, None).unwrap();
        for (l, (x, y)) in sa.layers.iter().zip(&sb.layers).enumerate() {
            let (ax, ay) = (x.attn_to_first.unwrap(), y.attn_to_first.unwrap());
            assert!(
                (ax - ay).abs() <= 1e-6,
                "layer {l}: attn_to_first {ax} vs {ay}"
            );
            assert!(
                (x.bos_cos_mean - y.bos_cos_mean).abs() <= 1e-6,
                "layer {l}: BOS cosine {} vs {}",
                x.bos_cos_mean,
                y.bos_cos_mean
            );
        }
        let na = a.model.next_token_nll(&oa.normed, &toks).unwrap();
        let nb = b.model.next_token_nll(&ob.normed, &toks).unwrap();
        let (ma, mb) = (
            na.iter().sum::<f64>() / na.len() as f64,
            nb.iter().sum::<f64>() / nb.len() as f64,
        );
        assert!((ma - mb).abs() <= 1e-6, "next-token loss {ma} vs {mb}");
    }
}

/// The dense MLP of a layer (these models have no mixture-of-experts layers).
fn mlp_of(ly: &sinklab::runtime::pretrained::Layer) -> &sinklab::runtime::pretrained::Mlp {
    ly.ffn.dense().expect("a dense MLP")
}

// ---------------------------------------------------------------------------------------------
// Mixture-of-experts fixtures (Qwen3-MoE, gpt-oss) converted to GGUF
//
// The converter below does what llama.cpp's `convert_hf_to_gguf.py` does for these
// architectures, written independently of the loader: Hugging Face names to llama.cpp's
// (`blk.N.ffn_gate_inp`, `ffn_{gate,up,down}_exps` stacked `[E, out, in]`, `attn_sinks`,
// gpt-oss's `post_attention_layernorm` → `post_attention_norm`, its fused interleaved
// `gate_up_proj` `[E, d, 2 d_e]` transposed and split into even (gate) and odd (up) rows),
// config keys to `<arch>.` metadata. The file goes through the crate's GGUF writer
// (`synth::write_tensors_gguf`) and back through the GGUF loader. Both loads then hold the same
// f32 weights and differ only in what the formats decide, so every number must agree to f32
// round-off of identical computations (1e-6 relative), and the GGUF model must also match
// transformers' reference within the parity tolerance of `tests/real_arch_parity.rs`.

use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::Value as GValue;
use sinklab::runtime::capture::{Capture, Captured};
use sinklab::runtime::safetensors::StFile;
use sinklab::synth::{GgufTensor, write_tensors_gguf};

fn tiny(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/tiny/{name}"))
}

/// How [`convert`] stores the expert stacks.
#[derive(Clone, Copy, PartialEq)]
enum Experts {
    /// f32, as the checkpoint.
    F32,
    /// f16 (rounded to nearest).
    F16,
    /// f32 holding the f16-rounded values (the f16 file's numbers, in f32).
    F16Rounded,
    /// MXFP4 stacks (`*_blocks` / `*_scales` of the checkpoint) repacked into ggml's MXFP4
    /// blocks as llama.cpp's converter does; with the other modes they are decoded to f32 here.
    Mxfp4,
}

/// E2M1 code `q` from its bit fields (sign, 2 exponent bits with bias 1, 1 mantissa bit).
fn e2m1(q: u8) -> f64 {
    let (s, e, m) = (q >> 3, (q >> 1) & 3, q & 1);
    let mag = if e == 0 {
        0.5 * m as f64
    } else {
        2f64.powi(e as i32 - 1) * (1.0 + 0.5 * m as f64)
    };
    if s == 1 { -mag } else { mag }
}

/// (E, R, C, per stored row its scales and codes) of an MXFP4 stack.
type Mxfp4Stack = (usize, usize, usize, Vec<(Vec<u8>, Vec<u8>)>);

/// An MXFP4 stack of the checkpoint, `name_blocks` U8 `[E, R, nb, 16]` and `name_scales` U8
/// `[E, R, nb]` (value 2j of a block in the low nibble of byte j, 2j + 1 in the high one, times
/// 2^(scale − 127)): (E, R, C = 32 nb, per stored row its scales and codes).
fn read_mxfp4(file: &Path, name: &str) -> Mxfp4Stack {
    let bytes = std::fs::read(file).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let b = st.tensor(&format!("{name}_blocks")).unwrap();
    let sc = st.tensor(&format!("{name}_scales")).unwrap();
    let (e, r, nb) = (b.shape()[0], b.shape()[1], b.shape()[2]);
    assert_eq!(sc.shape(), [e, r, nb]);
    let rows = (0..e * r)
        .map(|k| {
            (
                sc.data()[k * nb..(k + 1) * nb].to_vec(),
                b.data()[k * nb * 16..(k + 1) * nb * 16].to_vec(),
            )
        })
        .collect();
    (e, r, 32 * nb, rows)
}

/// One stored row decoded from the spec.
fn decode_row((scales, codes): &(Vec<u8>, Vec<u8>)) -> Vec<f32> {
    let mut out = Vec::with_capacity(codes.len() * 2);
    for (k, &byte) in codes.iter().enumerate() {
        let x = 2f64.powi(scales[k / 16] as i32 - 127);
        out.push((e2m1(byte & 15) * x) as f32);
        out.push((e2m1(byte >> 4) * x) as f32);
    }
    out
}

/// One stored row as ggml's blocks: per block the scale, then byte j holding values j (low
/// nibble) and j + 16 (high nibble).
fn ggml_row((scales, codes): &(Vec<u8>, Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    for (s, c) in scales.iter().zip(codes.chunks(16)) {
        let q = |v: usize| (c[v / 2] >> (4 * (v % 2))) & 15;
        out.push(*s);
        out.extend((0..16).map(|j| q(j) | (q(j + 16) << 4)));
    }
    out
}

/// `[E, a, b]` → `[E, b, a]`.
fn transpose_stack(x: &[f32], e: usize, a: usize, b: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for k in 0..e {
        for i in 0..a {
            for j in 0..b {
                out[k * a * b + j * a + i] = x[k * a * b + i * b + j];
            }
        }
    }
    out
}

/// Rows `r ≡ parity (mod 2)` of each `[E, 2n, c]` block: `[E, n, c]`.
fn every_other_row(x: &[f32], e: usize, n: usize, c: usize, parity: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(e * n * c);
    for k in 0..e {
        for r in 0..n {
            let row = k * 2 * n * c + (2 * r + parity) * c;
            out.extend_from_slice(&x[row..row + c]);
        }
    }
    out
}

/// Converts the Hugging Face fixture `name` into a GGUF at `out` (llama.cpp's names and keys),
/// with `extra` metadata appended.
fn convert(name: &str, out: &Path, experts: Experts, extra: Vec<(String, GValue)>) {
    let d = tiny(name);
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("config.json")).unwrap()).unwrap();
    let st = StFile::open(&d.join("model.safetensors")).unwrap();
    let u = |k: &str| cfg[k].as_u64().unwrap_or_else(|| panic!("{name}: {k}")) as u32;
    let gpt_oss = cfg["model_type"] == "gpt_oss";
    let arch = if gpt_oss { "gpt-oss" } else { "qwen3moe" };
    let k = |s: &str| format!("{arch}.{s}");
    let rope = &cfg["rope_parameters"];
    let mut meta: Vec<(String, GValue)> = vec![
        ("general.architecture".into(), GValue::String(arch.into())),
        (k("block_count"), GValue::U32(u("num_hidden_layers"))),
        (
            k("context_length"),
            GValue::U32(u("max_position_embeddings")),
        ),
        (k("embedding_length"), GValue::U32(u("hidden_size"))),
        (
            k("feed_forward_length"),
            GValue::U32(u("intermediate_size")),
        ),
        (
            k("attention.head_count"),
            GValue::U32(u("num_attention_heads")),
        ),
        (
            k("attention.head_count_kv"),
            GValue::U32(u("num_key_value_heads")),
        ),
        (k("attention.key_length"), GValue::U32(u("head_dim"))),
        (k("attention.value_length"), GValue::U32(u("head_dim"))),
        (
            k("rope.freq_base"),
            GValue::F32(rope["rope_theta"].as_f64().unwrap() as f32),
        ),
        (
            k("attention.layer_norm_rms_epsilon"),
            GValue::F32(cfg["rms_norm_eps"].as_f64().unwrap() as f32),
        ),
        (k("expert_count"), GValue::U32(u("num_local_experts"))),
        (
            k("expert_used_count"),
            GValue::U32(u("num_experts_per_tok")),
        ),
    ];
    if gpt_oss {
        meta.push((
            k("expert_feed_forward_length"),
            GValue::U32(u("intermediate_size")),
        ));
        meta.push((
            k("attention.sliding_window"),
            GValue::U32(u("sliding_window")),
        ));
        // llama.cpp's gpt-oss: period-2 sliding layers (even ones); the fixtures follow it.
        for (l, t) in cfg["layer_types"].as_array().unwrap().iter().enumerate() {
            let sliding = t == "sliding_attention";
            assert_eq!(
                sliding,
                l % 2 == 0,
                "{name}: layer {l} breaks the period-2 pattern"
            );
        }
        assert_eq!(rope["rope_type"], "yarn", "{name}: gpt-oss's RoPE is YaRN");
        meta.push((k("rope.scaling.type"), GValue::String("yarn".into())));
        meta.push((
            k("rope.scaling.factor"),
            GValue::F32(rope["factor"].as_f64().unwrap() as f32),
        ));
        meta.push((
            k("rope.scaling.original_context_length"),
            GValue::U32(rope["original_max_position_embeddings"].as_u64().unwrap() as u32),
        ));
        for (hf, gg) in [
            ("beta_fast", "yarn_beta_fast"),
            ("beta_slow", "yarn_beta_slow"),
        ] {
            if let Some(b) = rope[hf].as_f64() {
                meta.push((k(&format!("rope.scaling.{gg}")), GValue::F32(b as f32)));
            }
        }
    } else {
        meta.push((
            k("expert_feed_forward_length"),
            GValue::U32(u("moe_intermediate_size")),
        ));
        meta.push((
            k("expert_weights_norm"),
            GValue::Bool(cfg["norm_topk_prob"].as_bool().unwrap()),
        ));
    }
    meta.extend(extra);
    let ne = u("num_local_experts") as usize;
    let dm = u("hidden_size") as usize;
    let de = if gpt_oss {
        u("intermediate_size")
    } else {
        u("moe_intermediate_size")
    } as usize;
    let mut tensors: Vec<GgufTensor> = Vec::new();
    let plain = |name: String, (data, dims): (Vec<f32>, Vec<usize>)| GgufTensor {
        name,
        dims,
        data,
        dtype: GgmlDType::F32,
        mxfp4: None,
    };
    let stack = |name: String, data: Vec<f32>, dims: Vec<usize>| {
        let (data, dtype) = match experts {
            Experts::F32 | Experts::Mxfp4 => (data, GgmlDType::F32),
            Experts::F16 => (data, GgmlDType::F16),
            Experts::F16Rounded => (
                data.iter()
                    .map(|&x| half::f16::from_f32(x).to_f32())
                    .collect(),
                GgmlDType::F32,
            ),
        };
        GgufTensor {
            name,
            dims,
            data,
            dtype,
            mxfp4: None,
        }
    };
    let mut per_expert: std::collections::BTreeMap<(usize, String), Vec<Vec<f32>>> =
        Default::default();
    for hf in st.names() {
        if hf.ends_with("_scales") {
            continue; // read with its blocks
        }
        if let Some(base) = hf.strip_suffix("_blocks") {
            let (ne2, r, c, rows) = read_mxfp4(&d.join("model.safetensors"), base);
            assert_eq!(ne2, ne);
            let l: usize = base
                .strip_prefix("model.layers.")
                .and_then(|x| x.split('.').next())
                .unwrap()
                .parse()
                .unwrap();
            // [E, R, C] rows selected by `keep` (row index within an expert), under `gname`.
            let mut emit = |gname: String, keep: &dyn Fn(usize) -> bool, n: usize| {
                let sel: Vec<&(Vec<u8>, Vec<u8>)> = rows
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| keep(k % r))
                    .map(|(_, x)| x)
                    .collect();
                let dims = vec![ne, n, c];
                tensors.push(if experts == Experts::Mxfp4 {
                    GgufTensor {
                        name: gname,
                        dims,
                        data: Vec::new(),
                        dtype: GgmlDType::F32,
                        mxfp4: Some(sel.iter().flat_map(|x| ggml_row(x)).collect()),
                    }
                } else {
                    stack(
                        gname,
                        sel.iter().flat_map(|x| decode_row(x)).collect(),
                        dims,
                    )
                });
            };
            if base.ends_with("experts.gate_up_proj") {
                // Gate rows are the even outputs, up rows the odd ones.
                assert_eq!((r, c), (2 * de, dm));
                emit(format!("blk.{l}.ffn_gate_exps.weight"), &|i| i % 2 == 0, de);
                emit(format!("blk.{l}.ffn_up_exps.weight"), &|i| i % 2 == 1, de);
            } else {
                assert!(base.ends_with("experts.down_proj"), "{base}");
                assert_eq!((r, c), (dm, de));
                emit(format!("blk.{l}.ffn_down_exps.weight"), &|_| true, dm);
            }
            continue;
        }
        let x = st.tensor(&hf).unwrap();
        let top = match hf.as_str() {
            "model.embed_tokens.weight" => Some("token_embd.weight"),
            "model.norm.weight" => Some("output_norm.weight"),
            "lm_head.weight" => Some("output.weight"),
            _ => None,
        };
        if let Some(n) = top {
            tensors.push(plain(n.into(), x));
            continue;
        }
        let rest = hf.strip_prefix("model.layers.").expect(&hf);
        let (l, rest) = rest.split_once('.').unwrap();
        let l: usize = l.parse().unwrap();
        let b = |s: &str| format!("blk.{l}.{s}");
        let simple = match rest {
            "input_layernorm.weight" => Some(b("attn_norm.weight")),
            "post_attention_layernorm.weight" if gpt_oss => Some(b("post_attention_norm.weight")),
            "post_attention_layernorm.weight" => Some(b("ffn_norm.weight")),
            "self_attn.q_norm.weight" => Some(b("attn_q_norm.weight")),
            "self_attn.k_norm.weight" => Some(b("attn_k_norm.weight")),
            "self_attn.sinks" => Some(b("attn_sinks.weight")),
            "mlp.gate.weight" | "mlp.router.weight" => Some(b("ffn_gate_inp.weight")),
            "mlp.router.bias" => Some(b("ffn_gate_inp.bias")),
            "mlp.gate_proj.weight" => Some(b("ffn_gate.weight")),
            "mlp.up_proj.weight" => Some(b("ffn_up.weight")),
            "mlp.down_proj.weight" => Some(b("ffn_down.weight")),
            _ => None,
        };
        let attn = rest.strip_prefix("self_attn.").and_then(|r| {
            let (p, kind) = r.split_once('.')?;
            let g = match p {
                "q_proj" => "attn_q",
                "k_proj" => "attn_k",
                "v_proj" => "attn_v",
                "o_proj" => "attn_output",
                _ => return None,
            };
            Some(b(&format!("{g}.{kind}")))
        });
        if let Some(n) = simple.or(attn) {
            tensors.push(plain(n, x));
            continue;
        }
        let (v, dims) = x;
        match rest {
            // gpt-oss: [E, d, 2 d_e] (in, out), gate and up interleaved along the outputs.
            "mlp.experts.gate_up_proj" => {
                assert_eq!(dims, vec![ne, dm, 2 * de]);
                let t = transpose_stack(&v, ne, dm, 2 * de);
                for (p, n) in [(0, "ffn_gate_exps"), (1, "ffn_up_exps")] {
                    let h = every_other_row(&t, ne, de, dm, p);
                    tensors.push(stack(b(&format!("{n}.weight")), h, vec![ne, de, dm]));
                }
            }
            "mlp.experts.gate_up_proj_bias" => {
                for (p, n) in [(0, "ffn_gate_exps"), (1, "ffn_up_exps")] {
                    let h = every_other_row(&v, ne, de, 1, p);
                    tensors.push(plain(b(&format!("{n}.bias")), (h, vec![ne, de])));
                }
            }
            "mlp.experts.down_proj" => {
                assert_eq!(dims, vec![ne, de, dm]);
                let t = transpose_stack(&v, ne, de, dm);
                tensors.push(stack(b("ffn_down_exps.weight"), t, vec![ne, dm, de]));
            }
            "mlp.experts.down_proj_bias" => {
                tensors.push(plain(b("ffn_down_exps.bias"), (v, dims)));
            }
            // Qwen3-MoE: one [out, in] matrix per expert, stacked as llama.cpp does.
            r if r.starts_with("mlp.experts.") => {
                let r = r.strip_prefix("mlp.experts.").unwrap();
                let (e, w) = r.split_once('.').unwrap();
                let e: usize = e.parse().unwrap();
                let slot = per_expert
                    .entry((l, w.to_string()))
                    .or_insert_with(|| vec![Vec::new(); ne]);
                slot[e] = v;
            }
            other => panic!("{name}: tensor `{hf}` ({other}) has no llama.cpp name here"),
        }
    }
    for ((l, w), parts) in per_expert {
        let (n, rows, cols) = match w.as_str() {
            "gate_proj.weight" => ("ffn_gate_exps", de, dm),
            "up_proj.weight" => ("ffn_up_exps", de, dm),
            "down_proj.weight" => ("ffn_down_exps", dm, de),
            other => panic!("{name}: expert tensor `{other}`"),
        };
        assert!(parts.iter().all(|p| p.len() == rows * cols));
        tensors.push(stack(
            format!("blk.{l}.{n}.weight"),
            parts.concat(),
            vec![ne, rows, cols],
        ));
    }
    write_tensors_gguf(out, &meta, &tensors).unwrap();
}

fn load_gguf(path: &Path) -> Result<sinklab::runtime::pretrained::Pretrained, String> {
    let mut g = sinklab::runtime::gguf::GgufFile::open(path).map_err(|e| e.to_string())?;
    sinklab::runtime::arch::from_gguf(&mut g, path).map_err(|e| e.to_string())
}

fn fixture_tokens(name: &str) -> Vec<u32> {
    let fx = StFile::open(&tiny(name).join("expected.safetensors")).unwrap();
    fx.tensor("tokens")
        .unwrap()
        .0
        .iter()
        .map(|&v| v as u32)
        .collect()
}

/// Largest |a − b| and the scale max(1, max |b|).
fn max_err(a: &[f32], b: &[f32]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "shape mismatch");
    let e = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).abs())
        .fold(0.0, f64::max);
    let s = b.iter().map(|y| (*y as f64).abs()).fold(1.0, f64::max);
    (e, s)
}

/// Per-layer residual streams and maps, and the logits, of `m` on `tokens`.
fn run(m: &sinklab::runtime::pretrained::Pretrained, tokens: &[u32]) -> (Captured, Vec<f32>) {
    let mut cap = Captured::new(Capture {
        hidden: true,
        attn: true,
        ..Capture::default()
    });
    let out = m.forward(tokens, &mut cap, None).unwrap();
    let logits = m.logits(&out.normed).unwrap();
    (cap, logits)
}

/// The worst relative difference between two runs (residual streams, maps, logits).
fn run_diff(a: &(Captured, Vec<f32>), b: &(Captured, Vec<f32>), n_layer: usize) -> f64 {
    let mut worst = 0f64;
    for l in 0..n_layer {
        let (e, s) = max_err(a.0.hidden(l).unwrap(), b.0.hidden(l).unwrap());
        worst = worst.max(e / s);
        let (e, _) = max_err(
            a.0.layers[l].attn.as_ref().unwrap(),
            b.0.layers[l].attn.as_ref().unwrap(),
        );
        worst = worst.max(e);
    }
    let (e, s) = max_err(&a.1, &b.1);
    worst.max(e / s)
}

/// The GGUF conversion of `name` equals the Hugging Face load (1e-6) and transformers'
/// reference (the parity tolerance τ of `tests/real_arch_parity.rs`).
fn moe_gguf_matches(name: &str) {
    moe_gguf_matches_as(name, Experts::F32);
}

fn moe_gguf_matches_as(name: &str, experts: Experts) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("model.gguf");
    convert(name, &path, experts, vec![]);
    let hf = load(&tiny(name)).unwrap().model;
    let gg = load_gguf(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(gg.cfg.arch, hf.cfg.arch);
    for (l, (x, y)) in hf.layers.iter().zip(&gg.layers).enumerate() {
        assert_eq!(x.window, y.window, "{name}: layer {l} window");
        assert_eq!(x.sinks, y.sinks, "{name}: layer {l} sinks");
        let (rx, ry) = (x.rope.as_ref().unwrap(), y.rope.as_ref().unwrap());
        // llama.cpp floors/ceils YaRN's correction range, transformers' gpt-oss does not
        // (`truncate: false`); on these head widths both give the same ramp.
        assert_eq!(
            rx.inv_freq, ry.inv_freq,
            "{name}: layer {l} RoPE frequencies"
        );
        assert_eq!(
            rx.attn_factor, ry.attn_factor,
            "{name}: layer {l} RoPE scale"
        );
        assert_eq!(
            x.ffn.dense().is_some(),
            y.ffn.dense().is_some(),
            "{name}: layer {l} dense vs mixture"
        );
    }
    let tokens = fixture_tokens(name);
    let (a, b) = (run(&hf, &tokens), run(&gg, &tokens));
    let n_layer = hf.cfg.n_layer;
    let diff = run_diff(&a, &b, n_layer);
    assert!(
        diff <= 1e-6,
        "{name}: GGUF vs Hugging Face differ by {diff:.3e}"
    );
    // Against transformers: τ = (L + 1) K N u A as derived in tests/real_arch_parity.rs.
    let n_max = 48f64.max(hf.cfg.d_model as f64);
    let tau = (n_layer as f64 + 1.0) * 8.0 * n_max * 5.960_464_477_539_063e-8 * 4.0;
    let fx = StFile::open(&tiny(name).join("expected.safetensors")).unwrap();
    let (resid, _) = fx.tensor("resid").unwrap();
    let (attn, _) = fx.tensor("attn").unwrap();
    let (lg, _) = fx.tensor("logits").unwrap();
    let (t, d, h) = (tokens.len(), hf.cfg.d_model, hf.cfg.n_head);
    for l in 0..n_layer {
        let (e, s) = max_err(b.0.hidden(l).unwrap(), &resid[l * t * d..(l + 1) * t * d]);
        assert!(
            e <= tau * s,
            "{name}: layer {l}: residual vs transformers {e:.3e}"
        );
        let (e, _) = max_err(
            b.0.layers[l].attn.as_ref().unwrap(),
            &attn[l * h * t * t..(l + 1) * h * t * t],
        );
        assert!(
            e <= tau,
            "{name}: layer {l}: attention vs transformers {e:.3e}"
        );
    }
    let (e, s) = max_err(&b.1, &lg);
    assert!(e <= tau * s, "{name}: logits vs transformers {e:.3e}");
    eprintln!(
        "{name}: GGUF vs HF {diff:.2e}; GGUF logits vs transformers {:.2e}",
        e / s
    );
}

#[test]
fn qwen3_moe_gguf_matches_the_directory_and_transformers() {
    moe_gguf_matches("qwen3_moe_norm_topk");
}

#[test]
fn qwen3_moe_gguf_with_dense_layers_matches() {
    moe_gguf_matches("qwen3_moe_sparse_step");
}

#[test]
fn gpt_oss_gguf_with_a_strong_learned_sink_matches() {
    moe_gguf_matches("gpt_oss_strong_sink");
}

#[test]
fn gpt_oss_gguf_without_a_sink_matches() {
    moe_gguf_matches("gpt_oss_no_sink");
}

/// MXFP4 experts repacked from the checkpoint's split blocks into ggml's (GGUF type 39): the
/// file loads with them as MXFP4 views of the map and equals the directory and transformers.
#[test]
fn gpt_oss_gguf_with_mxfp4_experts_matches() {
    moe_gguf_matches_as("gpt_oss_mxfp4", Experts::Mxfp4);
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("mx.gguf");
    convert("gpt_oss_mxfp4", &p, Experts::Mxfp4, vec![]);
    let m = load_gguf(&p).unwrap();
    for ly in &m.layers {
        let sinklab::runtime::pretrained::Ffn::Moe(moe) = &ly.ffn else {
            panic!("not a mixture")
        };
        for x in &moe.experts {
            for w in [&x.gate.as_ref().unwrap().w, &x.up.w, &x.down.w] {
                let sinklab::runtime::weights::Storage::Mxfp4(b) = w.storage() else {
                    panic!("expert not MXFP4: {:?}", w.dtype())
                };
                assert!(b.blocks.is_mapped() && b.step == 1);
            }
        }
    }
}

/// The MXFP4 GGUF gives the numbers of a plain f32 GGUF holding the blocks' values decoded
/// here from the spec (the plain-weight model of the dequantized weights): 1e-6.
#[test]
fn mxfp4_gguf_equals_the_f32_file_of_its_values() {
    let name = "gpt_oss_mxfp4";
    let tmp = tempfile::tempdir().unwrap();
    let (pm, pf) = (tmp.path().join("mx.gguf"), tmp.path().join("f32.gguf"));
    convert(name, &pm, Experts::Mxfp4, vec![]);
    convert(name, &pf, Experts::F32, vec![]);
    let tokens = fixture_tokens(name);
    let mm = load_gguf(&pm).unwrap();
    let mf = load_gguf(&pf).unwrap();
    let diff = run_diff(&run(&mm, &tokens), &run(&mf, &tokens), mm.cfg.n_layer);
    assert!(diff <= 1e-6, "MXFP4 vs f32 of its values: {diff:.3e}");
    // And the f32 stacks hold exactly what the MXFP4 ones decode to.
    let (a, b) = (&mm.layers[1].ffn, &mf.layers[1].ffn);
    use sinklab::runtime::pretrained::Ffn;
    let (Ffn::Moe(a), Ffn::Moe(b)) = (a, b) else {
        panic!()
    };
    assert_eq!(a.experts[3].down.w.to_f32(), b.experts[3].down.w.to_f32());
    assert_eq!(a.experts[2].up.w.to_f32(), b.experts[2].up.w.to_f32());
}

/// f16 expert stacks load and run: the f16 file gives exactly the numbers of an f32 file holding
/// the same f16-rounded values, and those differ from the f32 model's (the rounding is seen).
#[test]
fn f16_expert_tensors_load_as_their_values() {
    for name in ["gpt_oss_strong_sink", "qwen3_moe_norm_topk"] {
        let tmp = tempfile::tempdir().unwrap();
        let (p16, pr, p32) = (
            tmp.path().join("f16.gguf"),
            tmp.path().join("rounded.gguf"),
            tmp.path().join("f32.gguf"),
        );
        convert(name, &p16, Experts::F16, vec![]);
        convert(name, &pr, Experts::F16Rounded, vec![]);
        convert(name, &p32, Experts::F32, vec![]);
        let tokens = fixture_tokens(name);
        let m16 = load_gguf(&p16).unwrap();
        let n = m16.cfg.n_layer;
        let r16 = run(&m16, &tokens);
        let rr = run(&load_gguf(&pr).unwrap(), &tokens);
        let r32 = run(&load_gguf(&p32).unwrap(), &tokens);
        let same = run_diff(&r16, &rr, n);
        assert!(
            same <= 1e-6,
            "{name}: f16 storage vs its values in f32: {same:.3e}"
        );
        let moved = run_diff(&r16, &r32, n);
        assert!(
            moved > 0.0,
            "{name}: f16 rounding changed nothing: the stacks were not read"
        );
    }
}

/// What a GGUF cannot say for these families is refused by name: a Qwen3-MoE file whose
/// routing is not renormalised (llama.cpp always renormalises), a gpt-oss clamp other than
/// llama.cpp's fixed one (written as a key no loader reads), an MXFP4 type id on f32 data (the
/// sizes disagree: refused naming the tensor).
#[test]
fn moe_gguf_metadata_that_is_not_implemented_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("plain.gguf");
    convert("qwen3_moe_plain_topk", &p, Experts::F32, vec![]);
    let e = load_gguf(&p).unwrap_err();
    assert!(e.contains("qwen3moe.expert_weights_norm"), "{e}");

    let p = tmp.path().join("clamp.gguf");
    convert(
        "gpt_oss_shapes_clamp",
        &p,
        Experts::F32,
        vec![("gpt-oss.swiglu_limit".into(), GValue::F32(0.8))],
    );
    let e = load_gguf(&p).unwrap_err();
    assert!(e.contains("gpt-oss.swiglu_limit"), "{e}");

    for (key, v) in [
        ("qwen3moe.expert_weights_scale", GValue::F32(2.5)),
        (
            "qwen3moe.rope.scaling.type",
            GValue::String("longrope".into()),
        ),
        ("qwen3moe.attention.sliding_window", GValue::U32(4)),
    ] {
        let p = tmp.path().join("extra.gguf");
        convert(
            "qwen3_moe_norm_topk",
            &p,
            Experts::F32,
            vec![(key.into(), v)],
        );
        let e = load_gguf(&p).unwrap_err();
        assert!(e.contains(key), "{key}: {e}");
    }

    // The same file with one expert stack's type id set to MXFP4 (39): its bytes are f32.
    let p = tmp.path().join("mxfp4.gguf");
    convert("gpt_oss_no_sink", &p, Experts::F32, vec![]);
    let mut bytes = std::fs::read(&p).unwrap();
    let name = b"blk.0.ffn_gate_exps.weight";
    let at = bytes
        .windows(name.len())
        .position(|w| w == name)
        .expect("tensor name in the header")
        + name.len();
    let n_dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let ty = at + 4 + 8 * n_dims;
    assert_eq!(u32::from_le_bytes(bytes[ty..ty + 4].try_into().unwrap()), 0);
    bytes[ty..ty + 4].copy_from_slice(&39u32.to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let e = load_gguf(&p).unwrap_err();
    assert!(
        e.contains("blk.0.ffn_gate_exps.weight") && e.contains("type or shape"),
        "{e}"
    );
}

/// Greedy generation with the KV cache on both families and both formats: the cached steps
/// give the ids that a full forward pass over the whole prefix picks (an exact
/// self-consistency check: the same argmax, recomputed without the cache), sliding windows
/// binding (T past the windows of 3–4), and the GGUF conversion generates the same ids.
#[test]
fn cached_greedy_generation_equals_the_full_forward_argmax() {
    let n_new = 20;
    for name in [
        "gpt_oss_strong_sink",
        "gpt_oss_shapes_clamp",
        "qwen3_moe_norm_topk",
        "qwen3_moe_sparse_step",
    ] {
        let m = load(&tiny(name)).unwrap().model;
        let prompt = fixture_tokens(name);
        let ids = m.generate_greedy(&prompt, n_new, &mut ()).unwrap();
        assert_eq!(ids.len(), prompt.len() + n_new, "{name}");
        // The trimmed cache holds w − 1 positions on each sliding layer and every position on
        // the others, and decodes the ids of a cache that keeps everything.
        let (tids, tcache) = m
            .generate_greedy_cached(&prompt, n_new, &mut (), true)
            .unwrap();
        let (fids, fcache) = m
            .generate_greedy_cached(&prompt, n_new, &mut (), false)
            .unwrap();
        assert_eq!(tids, ids, "{name}");
        assert_eq!(fids, ids, "{name}: the full cache decodes other ids");
        let row = m.cfg.n_kv_head * m.cfg.head_dim;
        // Every id, the last generated one included, went through the cache.
        let cached = ids.len();
        let mut trimmed_any = false;
        for (l, ly) in m.layers.iter().enumerate() {
            let want = ly.window.map_or(cached, |w| cached.min(w - 1));
            trimmed_any |= want < cached;
            assert_eq!(tcache.k[l].len(), want * row, "{name}: layer {l} keys kept");
            assert_eq!(
                tcache.v[l].len(),
                want * row,
                "{name}: layer {l} values kept"
            );
            assert_eq!(
                fcache.k[l].len(),
                cached * row,
                "{name}: layer {l} full cache"
            );
        }
        assert_eq!(
            trimmed_any,
            name.starts_with("gpt_oss"),
            "{name}: the sliding layers are trimmed"
        );
        assert_eq!(&ids[..prompt.len()], &prompt[..]);
        for n in prompt.len()..ids.len() {
            let out = m.forward(&ids[..n], &mut (), None).unwrap();
            let d = m.cfg.d_model;
            let lg = m.logits(&out.normed[(n - 1) * d..]).unwrap();
            let best = (0..lg.len())
                .max_by(|&a, &b| lg[a].total_cmp(&lg[b]).then(b.cmp(&a)))
                .unwrap() as u32;
            assert_eq!(
                ids[n], best,
                "{name}: step {n}: cached id vs full forward argmax"
            );
        }
        if name != "gpt_oss_shapes_clamp" {
            let tmp = tempfile::tempdir().unwrap();
            let p = tmp.path().join("m.gguf");
            convert(name, &p, Experts::F32, vec![]);
            let g = load_gguf(&p).unwrap();
            let gids = g.generate_greedy(&prompt, n_new, &mut ()).unwrap();
            assert_eq!(gids, ids, "{name}: GGUF generation differs");
        }
        eprintln!("{name}: generated {:?}", &ids[prompt.len()..]);
    }
}

/// Greedy ids equal transformers' `generate` (KV cache, float32, eager attention;
/// `scripts/moe_generate_ids.py` wrote them to `generate.json`) on every mixture-of-experts
/// fixture, both families, sliding windows binding from the prompt on: the steps up to the
/// first whose top-two logit gap in transformers is below 1e-4 (none here: the smallest is
/// about 1e-3, a thousand times the f32 error of these logits).
#[test]
fn greedy_ids_equal_transformers_generate() {
    for name in [
        "qwen3_moe_norm_topk",
        "qwen3_moe_plain_topk",
        "qwen3_moe_sparse_step",
        "gpt_oss_strong_sink",
        "gpt_oss_no_sink",
        "gpt_oss_shapes_clamp",
    ] {
        let g: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(tiny(name).join("generate.json")).unwrap(),
        )
        .unwrap();
        let ids_of = |v: &serde_json::Value| -> Vec<u32> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        };
        let (prompt, want) = (ids_of(&g["prompt"]), ids_of(&g["ids"]));
        assert_eq!(prompt, fixture_tokens(name), "{name}: prompt");
        let gaps: Vec<f64> = g["gaps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let trusted = gaps.iter().position(|&x| x < 1e-4).unwrap_or(gaps.len());
        assert!(
            trusted >= 10,
            "{name}: only {trusted} steps away from a tie"
        );
        let m = load(&tiny(name)).unwrap().model;
        let got = m.generate_greedy(&prompt, trusted, &mut ()).unwrap();
        assert_eq!(
            got[..],
            want[..prompt.len() + trusted],
            "{name}: greedy ids vs transformers"
        );
    }
}
