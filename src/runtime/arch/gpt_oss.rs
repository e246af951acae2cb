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
//! directories with plain (f32/f16/bf16) weights: MXFP4 expert blocks are refused. GGUF
//! (`gpt-oss`, llama.cpp's layout and conventions): [`from_gguf`].

use super::decoder::{ExpertLayout, MoeSpec};
use super::qwen3_moe::top_k;
use super::{DecoderSpec, HfCfg, MAX_DIM, decoder_hf, layer_types, plain_scale, swiglu_dims};
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

/// Refuses a `quantization_config`, naming its method: no quantization method of gpt-oss
/// checkpoints (MXFP4 expert blocks, fp8, …) is implemented for Hugging Face directories, and
/// an MXFP4 declaration over plain weights says the file and its config disagree.
fn refuse_quantization(c: &HfCfg, w: &Checkpoint) -> Result<(), RealError> {
    let Some(q) = c.get("quantization_config") else {
        return Ok(());
    };
    let method = q
        .get("quant_method")
        .and_then(|m| m.as_str())
        .unwrap_or("(no quant_method)");
    let blocks = w.has("model.layers.0.mlp.experts.gate_up_proj_blocks");
    let why = match (method, blocks) {
        ("mxfp4", true) => "MXFP4 expert blocks are not decoded by sinklab yet",
        ("mxfp4", false) => {
            "it declares MXFP4 but the checkpoint stores plain expert weights (no \
             `gate_up_proj_blocks`): the config and the file disagree"
        }
        _ => "this quantization method is not implemented",
    };
    Err(c.err(format!(
        "`quantization_config.quant_method` = \"{method}\" is not supported: {why}"
    )))
}

/// Loads a `gpt_oss` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    refuse_quantization(c, w)?;
    let dims = swiglu_dims(c, "gpt-oss", 1e-5)?;
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
/// bf16 and the block types candle reads); MXFP4 is refused by [`crate::runtime::gguf`].
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
