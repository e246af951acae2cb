//! Gemma 2: sandwich RMSNorms with `1 + w` gains (input, post-attention, pre- and
//! post-feed-forward), GELU(tanh) gated MLP, embeddings scaled by $\sqrt d$, logit scale
//! `query_pre_attn_scalar`$^{-1/2}$, attention logits soft-capped $s \mapsto c\tanh(s/c)$
//! (`attn_logit_softcapping`, before the mask) and final logits likewise
//! (`final_logit_softcapping`), sliding window on the layers `layer_types` marks (by default
//! every even layer), tied head. Hugging Face directories only.

use super::{
    DecoderDims, DecoderSpec, HfCfg, LayerPlan, activation, decoder_hf, layer_types,
    refuse_quantized, rope,
};
use crate::real::RealError;
use crate::real::model::{Arch, Pretrained};
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
    "hidden_activation",
    "hidden_act",
    "attention_bias",
    "query_pre_attn_scalar",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "sliding_window",
    "layer_types",
    "use_bidirectional_attention",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "partial_rotary_factor",
    "original_max_position_embeddings",
];

/// Reads an optional positive soft cap.
pub fn softcap(c: &HfCfg, key: &str) -> Result<Option<f32>, RealError> {
    match c.get(key) {
        None => Ok(None),
        Some(_) => {
            let v = c.num_or(key, 0.0)?;
            if v > 0.0 {
                Ok(Some(v as f32))
            } else {
                Err(c.err(format!("`{key}` = {v} must be > 0 (or null)")))
            }
        }
    }
}

/// The attention logit scale `query_pre_attn_scalar^{-1/2}` (default $d_h$).
pub fn attn_scale(c: &HfCfg, dh: usize) -> Result<f32, RealError> {
    let q = c.num_or("query_pre_attn_scalar", dh as f64)?;
    if q <= 0.0 {
        return Err(c.err(format!("`query_pre_attn_scalar` = {q} must be > 0")));
    }
    Ok((1.0 / q.sqrt()) as f32)
}

/// Refuses the settings no Gemma loader here implements.
pub fn common_refusals(c: &HfCfg) -> Result<(), RealError> {
    refuse_quantized(c)?;
    c.require(
        "attention_bias",
        &Value::Bool(false),
        "Gemma has no attention biases",
    )?;
    c.require(
        "use_bidirectional_attention",
        &Value::Bool(false),
        "bidirectional attention is not implemented",
    )?;
    Ok(())
}

/// The MLP activation (`hidden_activation`, falling back to `hidden_act`).
pub fn gemma_act(c: &HfCfg) -> Result<crate::real::model::Act, RealError> {
    if c.get("hidden_activation").is_some() {
        activation(c, "hidden_activation", "gelu_pytorch_tanh")
    } else {
        activation(c, "hidden_act", "gelu_pytorch_tanh")
    }
}

/// Loads a `gemma2` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    common_refusals(c)?;
    let dims = DecoderDims::read(c, "rms_norm_eps", 1e-6)?;
    let act = gemma_act(c)?;
    let sw = c.dim_opt("sliding_window", 1 << 30)?;
    let kinds = layer_types(c, dims.n_layer, |l| (l + 1) % 2 != 0)?;
    let (name, p) = rope::params(c, None, 10000.0)?;
    let (r, ctx) = rope::build(c, &name, &p, dims.dh, dims.max_pos)?;
    let plans = kinds
        .into_iter()
        .map(|s| {
            Ok(LayerPlan {
                rope: r.clone(),
                window: if s {
                    Some(
                        sw.ok_or_else(|| c.err("sliding layers without a `sliding_window` value"))?,
                    )
                } else {
                    None
                },
            })
        })
        .collect::<Result<Vec<_>, RealError>>()?;
    let spec = DecoderSpec {
        arch: Arch::Gemma2,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        qk_norm: false,
        gemma: true,
        fused: false,
        act,
        tie_default: true,
    };
    let caps = (
        softcap(c, "attn_logit_softcapping")?,
        softcap(c, "final_logit_softcapping")?,
    );
    let scale = attn_scale(c, dims.dh)?;
    decoder_hf(c, w, spec, &dims, plans, ctx, scale, caps)
}
