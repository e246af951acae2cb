//! Qwen3: the Llama block with a per-head RMSNorm on queries and keys (applied before RoPE),
//! no q/k/v biases unless `attention_bias`, `head_dim` independent of `hidden_size / heads`.
//! Sliding windows as in Qwen2 ([`super::qwen2::windows`]). Hugging Face directories only: a
//! `qwen3` GGUF is refused by [`super::from_gguf`].

use super::qwen2::{WINDOW_KEYS, windows};
use super::{DecoderSpec, HfCfg, one_rope_hf, plain_scale, swiglu_dims};
use crate::runtime::RealError;
use crate::runtime::pretrained::{Arch, Pretrained};
use crate::runtime::safetensors::Checkpoint;

/// `config.json` keys read (besides [`super::DECODER_KEYS`], [`super::INERT`] and
/// [`super::COMMON_KEYS`]): `attention_bias` and the Qwen windows
/// ([`super::qwen2::WINDOW_KEYS`]).
pub const KEYS: &[&str] = &[
    "attention_bias",
    WINDOW_KEYS[0],
    WINDOW_KEYS[1],
    WINDOW_KEYS[2],
    WINDOW_KEYS[3],
];

/// Loads a `qwen3` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    let dims = swiglu_dims(c, "Qwen3", 1e-6)?;
    let bias = c.bool_or("attention_bias", false)?;
    let wins = windows(c, dims.shape.n_layer)?;
    let spec = DecoderSpec {
        qkv_bias: bias,
        o_bias: bias,
        qk_norm: true,
        ..DecoderSpec::llama(Arch::Qwen3)
    };
    let scale = plain_scale(dims.shape.dh);
    one_rope_hf(c, w, spec, &dims, wins, scale, (None, None))
}
