//! Phi-3: the Llama block with fused projections — `qkv_proj` rows are $[W_Q; W_K; W_V]$ and
//! `gate_up_proj` rows $[W_{gate}; W_{up}]$ — RoPE on the first
//! `partial_rotary_factor`·$d_h$ coordinates of each head, an optional sliding window on every
//! layer, untied head. `longrope` scaling (Phi-3 128k) is refused by [`super::rope`].
//! Hugging Face directories only.

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
    "original_max_position_embeddings",
    "rms_norm_eps",
    "head_dim",
    "hidden_act",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "partial_rotary_factor",
    "sliding_window",
];

/// Loads a `phi3` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    refuse_quantized(c)?;
    let dims = DecoderDims::read(c, "rms_norm_eps", 1e-5)?;
    c.require(
        "hidden_act",
        &Value::from("silu"),
        "the Phi-3 MLP is SwiGLU",
    )?;
    let window = c.dim_opt("sliding_window", 1 << 30)?;
    // Only rope_type longrope reads it; read here so that the key is accounted for.
    let _ = c.dim_opt("original_max_position_embeddings", 1 << 30)?;
    let (name, p) = rope::params(c, None, 10000.0)?;
    let (r, ctx) = rope::build(c, &name, &p, dims.dh, dims.max_pos)?;
    let plans = (0..dims.n_layer)
        .map(|_| LayerPlan {
            rope: r.clone(),
            window,
        })
        .collect();
    let spec = DecoderSpec {
        arch: Arch::Phi3,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        qk_norm: false,
        gemma: false,
        fused: true,
        act: Act::Silu,
        tie_default: false,
    };
    let scale = 1.0 / (dims.dh as f32).sqrt();
    decoder_hf(c, w, spec, &dims, plans, ctx, scale, (None, None))
}
