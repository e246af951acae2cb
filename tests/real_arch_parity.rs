//! Parity of every architecture and variant with Hugging Face transformers on tiny seeded
//! random models (`tests/fixtures/tiny/<variant>/`, made by `scripts/make_tiny_fixtures.py`;
//! the mixture-of-experts and learned-sink ones by `scripts/make_moe_fixtures.py`, the MXFP4
//! one by `scripts/make_mxfp4_fixtures.py`):
//! per-layer residual streams, attention maps and logits, on T = 12 fixed token ids.
//!
//! Tolerance, derived from f32 rounding. Both sides compute in f32 on identical f32 weights
//! (bf16 variants are rounded to bf16 before the reference run); they differ only in summation
//! order. A dot product of length $n$ has error at most $\gamma_n \sum_i |x_i y_i|$ with
//! $\gamma_n \approx n u$, $u = 2^{-24}$; here $n \le N = 48$ (d = 32, MLP width 48, expert
//! widths ≤ 16, T = 12; a learned sink adds one term to a softmax sum). One layer chains at
//! most $K = 8$ such reductions (norm, q/k/v, logits, softmax sum, $A V$, $W_O$, gate/up, down;
//! a mixture's router runs beside gate/up and its weighted sum of $k \le 3$ expert outputs
//! after down, short sums well inside the budget of the others, as the measured errors of the
//! MoE fixtures, ≤ 7e-7, show), and each can amplify an input error by at most the operator norm of the
//! tiny random weights, $A \le 4$ (entries $N(0, 0.2^2)$, $\|W\|_2 \approx 0.2(\sqrt{32} +
//! \sqrt{48}) \approx 2.5$, plus the soft-cap/normalisation gains). Over $L$ layers and the head:
//! $\tau = (L+1) K N u A$, relative to $\max(1, \max|\text{ref}|)$ of each tensor — about
//! $2.7\cdot10^{-4}$ for L = 2. The MXFP4 fixture is wider (d = 64): there $N = d$. Its experts
//! are MXFP4 blocks, and transformers' reference runs on its own dequantization of them; the
//! f32 values of the blocks are exact (a small integer times a power of two), so the same bound
//! holds, and `quant_delta` (the logits' move from the unquantized weights) must exceed it. Every variant's feature moves the logits by `variant_delta`
//! ≥ 1e-2 (recorded by the script), far above τ, so a wrong convention cannot pass.

use sinklab::runtime::arch;
use sinklab::runtime::capture::{Capture, Captured};
use sinklab::runtime::safetensors::StFile;
use std::path::{Path, PathBuf};

const U: f64 = 5.960_464_477_539_063e-8; // 2^-24
const N: f64 = 48.0;
const K: f64 = 8.0;
const A: f64 = 4.0;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/tiny/{name}"))
}

fn max_err(ours: &[f32], theirs: &[f32]) -> (f64, f64) {
    assert_eq!(ours.len(), theirs.len(), "shape mismatch");
    let e = ours
        .iter()
        .zip(theirs)
        .map(|(a, b)| (*a as f64 - *b as f64).abs())
        .fold(0.0, f64::max);
    let s = theirs.iter().map(|b| (*b as f64).abs()).fold(1.0, f64::max);
    (e, s)
}

fn parity(name: &str) -> f64 {
    let d = dir(name);
    let fx = StFile::open(&d.join("expected.safetensors")).expect("fixture");
    let lm = sinklab::runtime::load(&d).unwrap_or_else(|e| panic!("{name}: {e}"));
    let m = &lm.model;
    let tokens: Vec<u32> = fx
        .tensor("tokens")
        .unwrap()
        .0
        .iter()
        .map(|&v| v as u32)
        .collect();
    let t = tokens.len();
    let (l, dm, h) = (m.cfg.n_layer, m.cfg.d_model, m.cfg.n_head);
    let tau = (l as f64 + 1.0) * K * N.max(dm as f64) * U * A;
    let mut cap = Captured::new(Capture {
        hidden: true,
        attn: true,
        ..Capture::default()
    });
    let out = m.forward(&tokens, &mut cap, None).expect("forward");
    let (resid, rs) = fx.tensor("resid").unwrap();
    assert_eq!(rs, vec![l, t, dm], "{name}: residual shape");
    let (attn, ash) = fx.tensor("attn").unwrap();
    assert_eq!(ash, vec![l, h, t, t], "{name}: attention shape");
    let mut worst = 0f64;
    for layer in 0..l {
        let (e, s) = max_err(
            cap.hidden(layer).unwrap(),
            &resid[layer * t * dm..(layer + 1) * t * dm],
        );
        worst = worst.max(e / s);
        assert!(
            e <= tau * s,
            "{name}: layer {layer}: residual error {e:.3e} > τ·{s:.2} = {:.3e}",
            tau * s
        );
        let a = cap.layers[layer].attn.as_ref().unwrap();
        let (e, _) = max_err(a, &attn[layer * h * t * t..(layer + 1) * h * t * t]);
        worst = worst.max(e);
        assert!(
            e <= tau,
            "{name}: layer {layer}: attention error {e:.3e} > τ = {tau:.3e}"
        );
    }
    let (fin, _) = fx.tensor("final").unwrap();
    let (e, s) = max_err(&out.normed, &fin);
    worst = worst.max(e / s);
    assert!(e <= tau * s, "{name}: final hidden state error {e:.3e}");
    if m.has_lm_head {
        let (lg, _) = fx.tensor("logits").unwrap();
        let ours = m.logits(&out.normed).unwrap();
        let (e, s) = max_err(&ours, &lg);
        worst = worst.max(e / s);
        assert!(
            e <= tau * s,
            "{name}: logits error {e:.3e} > {:.3e}",
            tau * s
        );
    }
    if let Ok((delta, _)) = fx.tensor("quant_delta") {
        assert!(
            delta[0] as f64 > 30.0 * tau,
            "{name}: the quantization moves the logits by only {}",
            delta[0]
        );
    }
    if let Ok((delta, _)) = fx.tensor("variant_delta") {
        assert!(
            delta[0] as f64 > 30.0 * tau,
            "{name}: the variant's feature moves the logits by only {}",
            delta[0]
        );
    }
    eprintln!("{name}: worst relative error {worst:.2e} (τ = {tau:.2e})");
    worst
}

macro_rules! parity_tests {
    ($($f:ident => $name:literal),* $(,)?) => {
        $(#[test] fn $f() { parity($name); })*
    };
}

parity_tests! {
    llama_default_rope_tied_head => "llama_default",
    llama_linear_rope_scaling => "llama_linear",
    llama_dynamic_ntk_beyond_max_positions => "llama_dynamic",
    llama_llama3_rope_scaling_gqa_4_to_1 => "llama_llama3",
    llama_yarn_rope_scaling => "llama_yarn",
    llama_bf16_weights_sharded_checkpoint => "llama_bf16_sharded",
    mistral_binding_sliding_window => "mistral_window",
    qwen2_qkv_biases_gqa => "qwen2",
    qwen3_qk_norm => "qwen3",
    gemma2_softcaps_alternating_window => "gemma2",
    gemma3_text_local_global_rope => "gemma3_text",
    gpt2 => "gpt2",
    phi3_fused_projections_partial_rotary => "phi3",
    bert_encoder => "bert",
    // Issue 25's loader zoo: config.json edited after saving, the reference from the model
    // transformers 5.24 reloads from it.
    gemma3_public_pattern_wins_and_attention_softcap_is_not_applied => "gemma3_pattern_keys",
    gemma3_private_pattern_key_alone_leaves_the_default_6 => "gemma3_private_pattern",
    yarn_length_at_top_level_overrides_the_default => "llama_yarn_top_level_length",
    // Mixture of experts and learned sinks (`scripts/make_moe_fixtures.py`).
    qwen3_moe_softmax_top_k_renormalised => "qwen3_moe_norm_topk",
    qwen3_moe_softmax_top_k_not_renormalised => "qwen3_moe_plain_topk",
    qwen3_moe_sparse_step_and_dense_only_layers => "qwen3_moe_sparse_step",
    gpt_oss_strong_learned_sink_binding_window_yarn => "gpt_oss_strong_sink",
    gpt_oss_absent_learned_sink => "gpt_oss_no_sink",
    gpt_oss_three_layers_gqa_binding_swiglu_clamp => "gpt_oss_shapes_clamp",
    gpt_oss_mxfp4_experts => "gpt_oss_mxfp4",
}

const VARIANTS: &[&str] = &[
    "llama_default",
    "llama_linear",
    "llama_dynamic",
    "llama_llama3",
    "llama_yarn",
    "llama_bf16_sharded",
    "mistral_window",
    "qwen2",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "gpt2",
    "phi3",
    "bert",
    "gemma3_pattern_keys",
    "gemma3_private_pattern",
    "llama_yarn_top_level_length",
    "qwen3_moe_norm_topk",
    "qwen3_moe_plain_topk",
    "qwen3_moe_sparse_step",
    "gpt_oss_strong_sink",
    "gpt_oss_no_sink",
    "gpt_oss_shapes_clamp",
    "gpt_oss_mxfp4",
];

/// Keys that change the forward pass of some architecture: each must be read by some
/// architecture module (its `KEYS` or the common list), else it would be ignored silently.
const MATH_KEYS: &[&str] = &[
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "hidden_act",
    "hidden_activation",
    "activation_function",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rope_local_base_freq",
    "partial_rotary_factor",
    "original_max_position_embeddings",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "sliding_window_pattern",
    "attention_bias",
    "mlp_bias",
    "query_pre_attn_scalar",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "use_bidirectional_attention",
    "tie_word_embeddings",
    "quantization_config",
    "position_embedding_type",
    "is_decoder",
    "scale_attn_by_inverse_layer_idx",
    "scale_attn_weights",
    "n_inner",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "experts_per_token",
    "moe_intermediate_size",
    "norm_topk_prob",
    "decoder_sparse_step",
    "mlp_only_layers",
    "swiglu_alpha",
    "swiglu_limit",
];

#[test]
fn every_math_key_is_read_by_some_architecture() {
    for k in MATH_KEYS {
        let read = arch::HF_TYPES
            .iter()
            .any(|t| arch::keys_of(t).unwrap().contains(k))
            || arch::COMMON_KEYS.contains(k);
        assert!(read, "config key `{k}` is read by no architecture module");
        assert!(
            !arch::INERT.contains(k),
            "`{k}` changes the math but is listed as inert"
        );
    }
}

#[test]
fn loaders_read_only_the_keys_they_declare() {
    for v in VARIANTS {
        let (_, read) = arch::load_hf_keys(&dir(v)).unwrap();
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir(v).join("config.json")).unwrap())
                .unwrap();
        let mt = cfg["model_type"].as_str().unwrap();
        let keys = arch::keys_of(mt).unwrap();
        for k in &read {
            assert!(
                keys.contains(&k.as_str())
                    || arch::COMMON_KEYS.contains(&k.as_str())
                    || arch::INERT.contains(&k.as_str()),
                "{v}: the {mt} loader reads `{k}` but does not list it in its KEYS"
            );
        }
    }
}

/// Copies a fixture directory to a temp dir and edits its config.json.
fn edited(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dir(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
    }
    let p = tmp.path().join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
    tmp
}

fn refused(dir: &Path, needles: &[&str]) {
    let e = match sinklab::runtime::load(dir) {
        Ok(_) => panic!("loaded, expected a refusal mentioning {needles:?}"),
        Err(e) => e.to_string(),
    };
    for n in needles {
        assert!(e.contains(n), "error `{e}` does not mention `{n}`");
    }
    assert!(
        e.contains("config.json") || e.contains("safetensors"),
        "error `{e}` names no file"
    );
}

#[test]
fn unknown_rope_type_is_refused_naming_key_and_file() {
    let t = edited("llama_linear", |v| {
        v["rope_parameters"]["rope_type"] = "longrope".into();
    });
    refused(
        t.path(),
        &["rope_parameters.rope_type", "longrope", "config.json"],
    );
}

#[test]
fn unread_rope_parameter_is_refused() {
    let t = edited("llama_linear", |v| {
        v["rope_parameters"]["low_freq_factor"] = 1.0.into();
    });
    refused(t.path(), &["rope_parameters.low_freq_factor"]);
}

#[test]
fn legacy_rope_theta_and_rope_scaling_are_read() {
    // transformers < 5 layout: top-level rope_theta + rope_scaling {type: linear}. Same model.
    let t = edited("llama_linear", |v| {
        let p = v["rope_parameters"].clone();
        v.as_object_mut().unwrap().remove("rope_parameters");
        v["rope_theta"] = p["rope_theta"].clone();
        v["rope_scaling"] = serde_json::json!({"type": "linear", "factor": p["factor"]});
    });
    let a = sinklab::runtime::load(t.path()).unwrap();
    let b = sinklab::runtime::load(&dir("llama_linear")).unwrap();
    let ra = a.model.layers[0].rope.as_ref().unwrap();
    let rb = b.model.layers[0].rope.as_ref().unwrap();
    assert_eq!(ra.inv_freq, rb.inv_freq);
    // And the base really is read: another θ gives other frequencies.
    let t2 = edited("llama_linear", |v| {
        v["rope_parameters"]["rope_theta"] = 500000.0.into();
    });
    let c = sinklab::runtime::load(t2.path()).unwrap();
    assert_ne!(
        c.model.layers[0].rope.as_ref().unwrap().inv_freq,
        rb.inv_freq
    );
}

#[test]
fn unknown_config_key_is_refused() {
    let t = edited("qwen2", |v| {
        v["attn_temperature_tuning"] = true.into();
    });
    refused(t.path(), &["attn_temperature_tuning", "config.json"]);
}

#[test]
fn nan_layer_norm_eps_is_refused_naming_key() {
    let t = edited("bert", |v| {
        v["layer_norm_eps"] = "nan".into();
    });
    refused(t.path(), &["layer_norm_eps", "config.json"]);
    let t = edited("llama_default", |v| {
        v["rms_norm_eps"] = 0.0.into();
    });
    refused(t.path(), &["rms_norm_eps"]);
}

#[test]
fn quantized_checkpoint_is_refused() {
    let t = edited("llama_default", |v| {
        v["quantization_config"] = serde_json::json!({"quant_method": "awq"});
    });
    refused(t.path(), &["quantization_config"]);
}

#[test]
fn missing_shard_is_one_clear_error() {
    let t = edited("llama_bf16_sharded", |_| {});
    std::fs::remove_file(t.path().join("model-00002-of-00002.safetensors")).unwrap();
    let e = sinklab::runtime::load(t.path()).err().unwrap().to_string();
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");
    assert_eq!(e.matches("No such file").count(), 1, "{e}");
}

#[test]
fn dynamic_rope_equals_default_within_max_positions() {
    // transformers' dynamic NTK leaves the frequencies unchanged up to max_position_embeddings.
    let lm = sinklab::runtime::load(&dir("llama_dynamic")).unwrap();
    let r = lm.model.layers[0].rope.as_ref().unwrap();
    assert_eq!(&*r.inv_freq_at(8), &r.inv_freq[..]);
    assert_ne!(&*r.inv_freq_at(12), &r.inv_freq[..]);
}

#[test]
fn phi3_reads_su_and_yarn_as_longrope_and_refuses_other_scalings() {
    for (ty, needles) in [
        ("yarn", &["`yarn`", "longrope", "does not implement"][..]),
        ("su", &["`su`", "longrope"][..]),
        ("linear", &["`linear`", "only `default` or `longrope`"][..]),
    ] {
        let t = edited("phi3", |v| {
            v["rope_parameters"]["rope_type"] = ty.into();
            v["rope_parameters"]["factor"] = 2.0.into();
        });
        refused(t.path(), needles);
    }
    // The control: the unedited fixture loads.
    sinklab::runtime::load(&dir("phi3")).expect("phi3 with default RoPE loads");
}

#[test]
fn gpt_oss_quantization_is_refused_naming_the_method() {
    // MXFP4 declared over the fixture's plain weights: the config and the file disagree.
    let t = edited("gpt_oss_no_sink", |v| {
        v["quantization_config"] = serde_json::json!({"quant_method": "mxfp4"});
    });
    refused(t.path(), &["quantization_config", "mxfp4", "plain"]);
    let t = edited("gpt_oss_no_sink", |v| {
        v["quantization_config"] = serde_json::json!({"quant_method": "fp8"});
    });
    refused(t.path(), &["quantization_config", "fp8", "not implemented"]);
}

/// The MXFP4 fixture's experts stay MXFP4 views of the mapped file (split packing), gate and
/// up rows interleaved in one stored tensor; the router and attention stay f32.
#[test]
fn gpt_oss_mxfp4_experts_are_read_in_place() {
    use sinklab::runtime::weights::{Storage, WeightType};
    let lm = sinklab::runtime::load(&dir("gpt_oss_mxfp4")).unwrap();
    for (l, ly) in lm.model.layers.iter().enumerate() {
        let sinklab::runtime::pretrained::Ffn::Moe(moe) = &ly.ffn else {
            panic!("layer {l}: not a mixture");
        };
        assert_eq!(
            moe.router.w.dtype(),
            WeightType::Ggml(candle_core::quantized::GgmlDType::F32)
        );
        for (e, m) in moe.experts.iter().enumerate() {
            for w in [&m.gate.as_ref().unwrap().w, &m.up.w, &m.down.w] {
                let Storage::Mxfp4(x) = w.storage() else {
                    panic!("layer {l} expert {e}: not MXFP4");
                };
                assert!(
                    x.blocks.is_mapped() && x.scales.is_mapped(),
                    "layer {l} expert {e}"
                );
            }
            // Gate and up are the even and odd rows of one stored tensor: a view with step 2.
            let Storage::Mxfp4(g) = m.gate.as_ref().unwrap().w.storage() else {
                unreachable!()
            };
            assert_eq!(g.step, 2);
        }
    }
}

/// What the MXFP4 checkpoint's config must say about its blocks, refused by name otherwise.
#[test]
fn gpt_oss_mxfp4_config_must_agree_with_the_blocks() {
    let t = edited("gpt_oss_mxfp4", |v| {
        v.as_object_mut().unwrap().remove("quantization_config");
    });
    refused(
        t.path(),
        &[
            "experts.down_proj_blocks",
            "quantization_config",
            "disagree",
        ],
    );
    let t = edited("gpt_oss_mxfp4", |v| {
        v["quantization_config"]["quant_method"] = "fp8".into();
    });
    refused(t.path(), &["fp8", "not implemented"]);
    let t = edited("gpt_oss_mxfp4", |v| {
        v["quantization_config"]["modules_to_not_convert"] =
            serde_json::json!(["model.layers.*.mlp.experts", "lm_head"]);
    });
    refused(
        t.path(),
        &[
            "modules_to_not_convert",
            "model.layers.*.mlp.experts",
            "disagree",
        ],
    );
    let t = edited("gpt_oss_mxfp4", |v| {
        v["quantization_config"]["group_size"] = 64.into();
    });
    refused(t.path(), &["quantization_config.group_size"]);
    // The control: `dequantize` (transformers' loading option) changes nothing here.
    let t = edited("gpt_oss_mxfp4", |v| {
        v["quantization_config"]["dequantize"] = true.into();
    });
    sinklab::runtime::load(t.path()).expect("dequantize: true loads");
}

#[test]
fn moe_settings_that_are_not_implemented_are_refused() {
    // Qwen2-MoE's shared expert is not part of Qwen3-MoE: refused by name, not ignored.
    let t = edited("qwen3_moe_norm_topk", |v| {
        v["shared_expert_intermediate_size"] = 64.into();
    });
    refused(
        t.path(),
        &["shared_expert_intermediate_size", "config.json"],
    );
    // Both names of the expert count, disagreeing.
    let t = edited("qwen3_moe_norm_topk", |v| {
        v["num_experts"] = 8.into();
    });
    refused(t.path(), &["num_experts", "num_local_experts", "disagree"]);
    // More experts per token than experts.
    let t = edited("gpt_oss_no_sink", |v| {
        v["num_experts_per_tok"] = 5.into();
    });
    refused(t.path(), &["num_experts_per_tok", "exceeds"]);
    // The original release's `experts_per_token` must agree with what transformers reads.
    let t = edited("gpt_oss_no_sink", |v| {
        v["experts_per_token"] = 3.into();
    });
    refused(t.path(), &["experts_per_token", "num_experts_per_tok"]);
    // A window that transformers' Qwen3-MoE would apply to layers `max_window_layers` excludes.
    let t = edited("qwen3_moe_norm_topk", |v| {
        v["use_sliding_window"] = true.into();
        v["sliding_window"] = 4.into();
        v["max_window_layers"] = 1.into();
    });
    refused(t.path(), &["max_window_layers", "ambiguous"]);
    // gpt-oss without RoPE parameters: transformers would assume its YaRN defaults.
    let t = edited("gpt_oss_no_sink", |v| {
        v.as_object_mut().unwrap().remove("rope_parameters");
    });
    refused(t.path(), &["rope_parameters", "rope_scaling"]);
}

#[test]
fn moe_layers_follow_sparse_step_and_dense_only_layers() {
    use sinklab::runtime::pretrained::Ffn;
    let lm = sinklab::runtime::load(&dir("qwen3_moe_sparse_step")).unwrap();
    let kinds: Vec<bool> = lm
        .model
        .layers
        .iter()
        .map(|ly| matches!(ly.ffn, Ffn::Moe(_)))
        .collect();
    // decoder_sparse_step = 2 puts experts on layers 1 and 3; mlp_only_layers = [3].
    assert_eq!(kinds, vec![false, true, false, false]);
}
