//! gpt-oss: pre-RMSNorm blocks with grouped-query attention whose heads carry a learned sink
//! logit $s_h$ (`self_attn.sinks`): a row's softmax runs over the visible logits and $s_h$, and
//! the sink's column is dropped, so the map's rows sum to $1 - p_{sink}$. q/k/v/o biases
//! (`attention_bias`, default on), sliding-window and full-attention layers (`layer_types`,
//! default: even layers sliding, `sliding_window`), YaRN RoPE from `rope_parameters` (or the
//! legacy `rope_theta` + `rope_scaling`). The feed-forward sub-layer is a mixture of
//! `num_local_experts` experts: router $z = W_r x + b_r$, the `num_experts_per_tok` largest
//! logits kept and softmaxed ([`crate::runtime::moe::Routing::TopKSoftmax`]), each expert a
//! clamped SwiGLU with biases ([`crate::runtime::moe::SwigluClamp`], `swiglu_alpha`,
//! `swiglu_limit`) stored fused (`experts.gate_up_proj` `[E, d, 2 d_e]`, gate and up
//! interleaved). Conventions from transformers' `modeling_gpt_oss.py`. Hugging Face
//! directories with plain (f32/f16/bf16) weights, or with OpenAI's MXFP4 experts
//! (`quantization_config.quant_method` = `mxfp4`: `experts.{gate_up,down}_proj_{blocks,scales}`
//! stored `[E, out, in/32, 16]` and `[E, out, in/32]`, read in that format by
//! [`Checkpoint::mxfp4_stack`]; checked by [`check_quantization`]; other methods refused). GGUF
//! (`gpt-oss`, llama.cpp's layout and conventions, MXFP4 experts included): [`from_gguf`].

use super::decoder::{ExpertLayout, MoeSpec, swiglu_dims_of_checked};
use super::qwen3_moe::top_k;
use super::{DecoderSpec, HfCfg, MAX_DIM, decoder_hf, layer_types, plain_scale};
use crate::runtime::RealError;
use crate::runtime::moe::{Routing, SwigluClamp};
use crate::runtime::pretrained::{Arch, Pretrained};
use crate::runtime::safetensors::Checkpoint;

/// `config.json` keys read (besides [`super::DECODER_KEYS`], [`super::INERT`] and
/// [`super::COMMON_KEYS`]).
pub const KEYS: &[&str] = &[
    "attention_bias",
    "layer_types",
    "sliding_window",
    "num_local_experts",
    "num_experts_per_tok",
    "experts_per_token",
    "swiglu_alpha",
    "swiglu_limit",
    "initial_context_length",
];

/// Keys of `quantization_config` read for MXFP4 (transformers' `Mxfp4Config`): `dequantize`
/// and `modules_to_not_convert` change nothing sinklab computes (it decodes the blocks it
/// finds, with the same numbers either way) but `modules_to_not_convert` must agree with them.
const MXFP4_KEYS: &[&str] = &["quant_method", "modules_to_not_convert", "dequantize"];

/// Whether the glob `pat` (`*` any run of characters) matches `name`.
fn glob(pat: &str, name: &str) -> bool {
    match pat.split_once('*') {
        None => pat == name,
        Some((head, rest)) => {
            name.starts_with(head)
                && (0..=name.len() - head.len()).any(|k| glob(rest, &name[head.len() + k..]))
        }
    }
}

/// Checks the checkpoint's quantization against its tensors. Without a `quantization_config` the experts must be plain; with `quant_method` =
/// `mxfp4` every layer's `experts.gate_up_proj` and `experts.down_proj` must be stored as
/// `*_blocks` / `*_scales` (and only they: the router, attention and embeddings stay plain, as
/// OpenAI's checkpoints keep them), none of them listed in `modules_to_not_convert`; any other
/// method (fp8, …) or key is refused by name.
fn check_quantization(c: &HfCfg, w: &Checkpoint, n_layer: usize) -> Result<(), RealError> {
    let blocks_of = |l: usize, p: &str| format!("model.layers.{l}.mlp.experts.{p}_blocks");
    let mut packed: Vec<String> = w
        .names()
        .filter(|n| n.ends_with("_blocks") || n.ends_with("_scales"))
        .map(str::to_string)
        .collect();
    packed.sort();
    let Some(q) = c.get("quantization_config") else {
        if let Some(n) = packed.first() {
            return Err(c.err(format!(
                "tensor `{n}` is an MXFP4 block tensor but config.json has no \
                 `quantization_config`: the config and the file disagree"
            )));
        }
        return Ok(());
    };
    let method = q
        .get("quant_method")
        .and_then(|m| m.as_str())
        .unwrap_or("(no quant_method)");
    if method != "mxfp4" {
        return Err(c.err(format!(
            "`quantization_config.quant_method` = \"{method}\" is not supported: this \
             quantization method is not implemented (MXFP4 expert blocks are)"
        )));
    }
    if let Some(k) = q
        .as_object()
        .and_then(|o| o.keys().find(|k| !MXFP4_KEYS.contains(&k.as_str())))
    {
        return Err(c.err(format!(
            "`quantization_config.{k}` is not read by sinklab's MXFP4 loader (it reads {})",
            MXFP4_KEYS.join(", ")
        )));
    }
    if !w.has(&blocks_of(0, "gate_up_proj")) {
        return Err(c.err(
            "`quantization_config.quant_method` = \"mxfp4\" is not supported here: it \
             declares MXFP4 but the checkpoint stores plain expert weights (no \
             `gate_up_proj_blocks`): the config and the file disagree",
        ));
    }
    let keep: Vec<&str> = match q.get("modules_to_not_convert") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str().ok_or_else(|| {
                    c.err(format!(
                        "`quantization_config.modules_to_not_convert` holds {v}, not a name"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(c.err(format!(
                "`quantization_config.modules_to_not_convert` = {v} is not a list"
            )));
        }
    };
    let mut expected = std::collections::BTreeSet::new();
    for l in 0..n_layer {
        let experts = format!("model.layers.{l}.mlp.experts");
        if let Some(p) = keep.iter().find(|p| glob(p, &experts)) {
            return Err(c.err(format!(
                "`quantization_config.modules_to_not_convert` lists `{p}`, which covers \
                 `{experts}`, but its weights are stored as MXFP4 blocks: the config and the \
                 file disagree"
            )));
        }
        for p in ["gate_up_proj", "down_proj"] {
            let b = blocks_of(l, p);
            let sc = format!("{}_scales", b.trim_end_matches("_blocks"));
            for n in [&b, &sc] {
                if !w.has(n) {
                    return Err(c.err(format!(
                        "the checkpoint is MXFP4 but has no `{n}` (layer {l}'s experts must \
                         all be stored as blocks and scales)"
                    )));
                }
            }
            let plain = format!("model.layers.{l}.mlp.experts.{p}");
            if w.has(&plain) {
                return Err(c.err(format!(
                    "layer {l} stores both `{plain}` and its MXFP4 blocks: which one is meant \
                     is ambiguous"
                )));
            }
            expected.insert(b);
            expected.insert(sc);
        }
    }
    if let Some(n) = packed.iter().find(|n| !expected.contains(n.as_str())) {
        return Err(c.err(format!(
            "tensor `{n}` looks like MXFP4 blocks or scales, but only the experts' \
             `gate_up_proj` and `down_proj` are stored so in gpt-oss"
        )));
    }
    Ok(())
}

/// Loads a `gpt_oss` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    // Every layer's experts agree with the config; the decoder builder reads each layer's
    // experts in the format stored.
    check_quantization(c, w, c.dim("num_hidden_layers", super::MAX_LAYERS)?)?;
    let dims = swiglu_dims_of_checked(c, "gpt-oss", 1e-5)?;
    let n = dims.shape.n_layer;
    let bias = c.bool_or("attention_bias", true)?;
    let ne = c.dim("num_local_experts", MAX_DIM)?;
    let k = top_k(c, ne)?;
    // The original release's name for k; transformers does not read it, so it must agree.
    if let Some(k2) = c.dim_opt("experts_per_token", MAX_DIM)?
        && k2 != k
    {
        return Err(c.err(format!(
            "`experts_per_token` = {k2} disagrees with `num_experts_per_tok` = {k}"
        )));
    }
    // The original release's pretraining length; transformers' model does not read it (YaRN
    // takes `original_max_position_embeddings` from the RoPE parameters).
    let _ = c.dim_opt("initial_context_length", 1 << 30)?;
    let alpha = c.num_or("swiglu_alpha", 1.702)? as f32;
    let limit = c.num_or("swiglu_limit", 7.0)?;
    if limit <= 0.0 {
        return Err(c.err(format!("`swiglu_limit` = {limit} must be > 0")));
    }
    let sliding = layer_types(c, n, |l| l % 2 == 0)?;
    let sw = c.dim_opt("sliding_window", 1 << 30)?;
    let windows = sliding
        .iter()
        .map(|&s| match (s, sw) {
            (false, _) => Ok(None),
            (true, Some(w)) => Ok(Some(w)),
            (true, None) => {
                Err(c.err("`layer_types` marks sliding layers but no `sliding_window`"))
            }
        })
        .collect::<Result<Vec<_>, RealError>>()?;
    // transformers fills in gpt-oss's YaRN defaults when the config has no RoPE parameters;
    // sinklab wants them written.
    if c.get("rope_parameters").is_none() && c.get("rope_scaling").is_none() {
        return Err(c.err(
            "neither `rope_parameters` nor `rope_scaling`: gpt-oss's RoPE must be given \
             (transformers would assume its YaRN defaults)",
        ));
    }
    let (name, p) = super::rope::params(c, None, 150000.0)?;
    let (r, ctx) = super::rope::build(c, &name, &p, dims.shape.dh, dims.max_pos)?;
    let mut plans = super::same_rope(&r, windows);
    for plan in &mut plans {
        plan.moe = true;
    }
    let spec = DecoderSpec {
        qkv_bias: bias,
        o_bias: bias,
        sinks: true,
        moe: Some(MoeSpec {
            n_experts: ne,
            top_k: k,
            d_expert: dims.dff,
            routing: Routing::TopKSoftmax,
            clamp: Some(SwigluClamp {
                alpha,
                limit: limit as f32,
            }),
            layout: ExpertLayout::FusedInterleaved,
        }),
        ..DecoderSpec::llama(Arch::GptOss)
    };
    let scale = plain_scale(dims.shape.dh);
    decoder_hf(c, w, spec, &dims, plans, ctx, scale, (None, None))
}

/// GGUF metadata read under `gpt-oss.`, besides [`super::GGUF_DECODER_KEYS`] and
/// [`super::rope::GGUF_ROPE_KEYS`].
pub const GGUF_KEYS: &[&str] = &[
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_weights_scale",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "rope.freq_base_swa",
];

/// Whether layer `l` of a gpt-oss GGUF is a sliding-window layer under llama.cpp's period rule
/// (`set_swa_pattern(p)`): every layer when $p = 0$, else those with $l \bmod p < p - 1$ (the
/// default $p = 2$ makes the even layers sliding, as gpt-oss's `layer_types`).
pub fn swa_layer(period: usize, l: usize) -> bool {
    period == 0 || l % period < period - 1
}

/// Loads a `gpt-oss` GGUF (llama.cpp's `LLM_ARCH_OPENAI_MOE`): q/k in Hugging Face order,
/// q/k/v/o biases, the pre-feed-forward norm stored as `post_attention_norm`, learned sinks
/// `attn_sinks`, the experts and router of [`super::decoder::GgufWeights`] with gpt-oss's
/// routing (top-k logits, softmax over them) and clamped SwiGLU with llama.cpp's fixed
/// $\alpha = 1.702$, $\ell = 7$ (a GGUF has no key for them); sliding layers per
/// `attention.sliding_window_pattern` (a period, default 2) with window
/// `attention.sliding_window` and base θ `rope.freq_base_swa` (default `rope.freq_base`),
/// RoPE scaling per [`super::rope::gguf_rope`]. Expert tensors in plain storage (f32, f16,
/// bf16), candle's block types or MXFP4 (GGML type 39, as llama.cpp's converter writes
/// OpenAI's experts).
pub fn from_gguf(g: &mut crate::runtime::gguf::GgufFile) -> Result<Pretrained, RealError> {
    use super::{GgufDims, check_gguf_keys, decoder_gguf};
    const A: &str = "gpt-oss";
    let keys = [GGUF_KEYS, super::rope::GGUF_ROPE_KEYS].concat();
    check_gguf_keys(g, A, &keys)?;
    let dims = GgufDims::read(g, A)?;
    let n = dims.shape.n_layer;
    let (ne, k) = super::decoder::gguf_experts(g, A)?;
    let de = super::decoder::gguf_expert_width(g, A, 0)?;
    let wkey = format!("{A}.attention.sliding_window");
    let window =
        g.meta_int_opt(&wkey, 1 << 30)?
            .filter(|&w| w > 0)
            .ok_or_else(|| g.err(format!("missing or zero metadata `{wkey}`")))? as usize;
    let pkey = format!("{A}.attention.sliding_window_pattern");
    let period = match g.meta(&pkey) {
        None => 2,
        Some(candle_core::quantized::gguf_file::Value::Array(_)) => {
            return Err(g.err(format!(
                "metadata `{pkey}` is a per-layer array: only llama.cpp's period form is \
                 implemented for gpt-oss"
            )));
        }
        Some(_) => g
            .meta_int_opt(&pkey, super::MAX_LAYERS as u64)?
            .unwrap_or(2) as usize,
    };
    let bkey = format!("{A}.rope.freq_base_swa");
    let base_swa = g.meta_f32_or(&bkey, dims.base)?;
    if !(base_swa.is_finite() && base_swa > 1.0) {
        return Err(g.err(format!("metadata `{bkey}` = {base_swa} must be > 1")));
    }
    let dh = dims.shape.dh;
    let full = super::rope::gguf_rope(g, A, dims.base, dh, dims.ctx)?;
    let local = super::rope::gguf_rope(g, A, base_swa, dh, dims.ctx)?;
    let plans = (0..n)
        .map(|l| {
            let s = swa_layer(period, l);
            super::LayerPlan {
                rope: if s { local.clone() } else { full.clone() },
                window: s.then_some(window),
                moe: true,
            }
        })
        .collect();
    let spec = DecoderSpec {
        sinks: true,
        moe: Some(MoeSpec {
            n_experts: ne,
            top_k: k,
            d_expert: de,
            routing: Routing::TopKSoftmax,
            clamp: Some(SwigluClamp {
                alpha: 1.702,
                limit: 7.0,
            }),
            layout: ExpertLayout::FusedInterleaved,
        }),
        ..DecoderSpec::llama(Arch::GptOss)
    };
    decoder_gguf(g, spec, &dims, plans, false)
}
