//! Qwen3: the Llama block with a per-head RMSNorm on queries and keys (applied before RoPE),
//! no q/k/v biases unless `attention_bias`, `head_dim` independent of `hidden_size / heads`.
//! Sliding windows as in Qwen2 ([`super::qwen2::windows`]). Hugging Face directories only: a
//! `qwen3` GGUF is refused by [`super::load_gguf`].

use super::{DecoderDims, DecoderSpec, HfCfg, LayerPlan, decoder_hf, refuse_quantized, rope};
use crate::real::RealError;
use crate::real::model::{Act, Arch, Pretrained};
use crate::real::safetensors::Checkpoint;
use serde_json::Value;

/// `config.json` keys read (besides [`super::INERT`] and [`super::COMMON_KEYS`]).
pub const KEYS: &[&str] = &[
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "head_dim",
    "hidden_act",
    "attention_bias",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "partial_rotary_factor",
    "original_max_position_embeddings",
    "use_sliding_window",
    "sliding_window",
    "max_window_layers",
    "layer_types",
];

/// Loads a `qwen3` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    refuse_quantized(c)?;
    let dims = DecoderDims::read(c, "rms_norm_eps", 1e-6)?;
    c.require(
        "hidden_act",
        &Value::from("silu"),
        "the Qwen3 MLP is SwiGLU",
    )?;
    let bias = c.bool_or("attention_bias", false)?;
    let wins = super::qwen2::windows(c, dims.n_layer)?;
    let (name, p) = rope::params(c, None, 10000.0)?;
    let (r, ctx) = rope::build(c, &name, &p, dims.dh, dims.max_pos)?;
    let plans = wins
        .into_iter()
        .map(|window| LayerPlan {
            rope: r.clone(),
            window,
        })
        .collect();
    let spec = DecoderSpec {
        arch: Arch::Qwen3,
        qkv_bias: bias,
        o_bias: bias,
        mlp_bias: false,
        qk_norm: true,
        gemma: false,
        fused: false,
        act: Act::Silu,
        tie_default: false,
    };
    let scale = 1.0 / (dims.dh as f32).sqrt();
    decoder_hf(c, w, spec, &dims, plans, ctx, scale, (None, None))
}
