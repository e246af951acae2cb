//! Phi-3: the Llama block with fused projections — `qkv_proj` rows are $[W_Q; W_K; W_V]$ and
//! `gate_up_proj` rows $[W_{gate}; W_{up}]$ — RoPE on the first
//! `partial_rotary_factor`·$d_h$ coordinates of each head, an optional sliding window on every
//! layer, untied head. `longrope` scaling (Phi-3 128k) is refused by [`super::rope`].
//! Hugging Face directories only.

use super::{DecoderSpec, HfCfg, one_rope_hf, plain_scale, swiglu_dims};
use crate::runtime::RealError;
use crate::runtime::pretrained::{Arch, Pretrained};
use crate::runtime::safetensors::Checkpoint;

/// `config.json` keys read (besides [`super::DECODER_KEYS`], [`super::INERT`] and
/// [`super::COMMON_KEYS`]).
pub const KEYS: &[&str] = &["sliding_window"];

/// Loads a `phi3` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    let dims = swiglu_dims(c, "Phi-3", 1e-5)?;
    let window = c.dim_opt("sliding_window", 1 << 30)?;
    // Only rope_type longrope reads it; read here so that the key is accounted for.
    let _ = c.dim_opt("original_max_position_embeddings", 1 << 30)?;
    // transformers 5.24's Phi-3 reads `su` and `yarn` as `longrope` (not implemented here) and
    // refuses every other scaling.
    let (name, p) = super::rope::params(c, None, 10_000.0)?;
    match p
        .get("rope_type")
        .and_then(|v| v.as_str())
        .unwrap_or("default")
    {
        "default" => {}
        t @ ("su" | "yarn" | "longrope") => {
            return Err(c.err(format!(
                "`{name}.rope_type` = `{t}`: Phi-3 reads it as `longrope` (transformers 5.24), \
                 which sinklab does not implement"
            )));
        }
        t => {
            return Err(c.err(format!(
                "`{name}.rope_type` = `{t}`: Phi-3 takes only `default` or `longrope` \
                 (transformers 5.24 refuses it too)"
            )));
        }
    }
    let spec = DecoderSpec {
        fused: true,
        ..DecoderSpec::llama(Arch::Phi3)
    };
    let windows = vec![window; dims.shape.n_layer];
    let scale = plain_scale(dims.shape.dh);
    one_rope_hf(c, w, spec, &dims, windows, scale, (None, None))
}
