//! Qwen2 / Qwen2.5: the Llama block with biases on the q, k and v projections (none on the
//! output projection), untied head unless `tie_word_embeddings`. A sliding window applies only
//! with `use_sliding_window`, to the layers `layer_types` marks (transformers derives them
//! from `max_window_layers`).
//!
//! GGUF: llama.cpp's converter stores Qwen2 q/k rows in Hugging Face order (it permutes only
//! the Llama family), so nothing is un-permuted here.

use super::{
    DecoderSpec, GgufDims, HfCfg, check_gguf_keys, decoder_gguf, layer_types, one_rope_hf,
    plain_scale, same_rope, swiglu_dims,
};
use crate::runtime::RealError;
use crate::runtime::gguf::GgufFile;
use crate::runtime::pretrained::{Arch, Pretrained, Rope};
use crate::runtime::safetensors::Checkpoint;

/// `config.json` keys of the Qwen sliding windows ([`windows`]), shared with Qwen3.
pub const WINDOW_KEYS: &[&str] = &[
    "use_sliding_window",
    "sliding_window",
    "max_window_layers",
    "layer_types",
];

/// `config.json` keys read (besides [`super::DECODER_KEYS`], [`super::INERT`] and
/// [`super::COMMON_KEYS`]).
pub const KEYS: &[&str] = WINDOW_KEYS;

/// GGUF metadata read under `qwen2.`, besides [`super::GGUF_DECODER_KEYS`].
pub const GGUF_KEYS: &[&str] = &[];

/// The sliding windows of a Qwen2/Qwen3 config (per layer).
pub fn windows(c: &HfCfg, n_layer: usize) -> Result<Vec<Option<usize>>, RealError> {
    let use_sw = c.bool_or("use_sliding_window", false)?;
    let sw = c.dim_opt("sliding_window", 1 << 30)?;
    let mwl = c.dim_opt("max_window_layers", MAX)?.unwrap_or(n_layer);
    let kinds = layer_types(c, n_layer, |l| use_sw && sw.is_some() && l >= mwl)?;
    kinds
        .into_iter()
        .map(|s| match (s, use_sw, sw) {
            (false, _, _) => Ok(None),
            (true, true, Some(w)) => Ok(Some(w)),
            (true, _, _) => Err(c.err(
                "`layer_types` marks sliding layers but `use_sliding_window` / `sliding_window` do not give a window",
            )),
        })
        .collect()
}
const MAX: usize = super::MAX_LAYERS;

/// Loads a `qwen2` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    let dims = swiglu_dims(c, "Qwen2", 1e-6)?;
    let wins = windows(c, dims.shape.n_layer)?;
    let spec = DecoderSpec {
        qkv_bias: true,
        ..DecoderSpec::llama(Arch::Qwen2)
    };
    let scale = plain_scale(dims.shape.dh);
    one_rope_hf(c, w, spec, &dims, wins, scale, (None, None))
}

/// Loads a `qwen2` GGUF (q/k in Hugging Face order, biases from `attn_{q,k,v}.bias`).
pub fn from_gguf(g: &mut GgufFile) -> Result<Pretrained, RealError> {
    check_gguf_keys(g, "qwen2", GGUF_KEYS)?;
    let dims = GgufDims::read(g, "qwen2")?;
    let r = Rope::plain(dims.base, dims.shape.dh);
    let plans = same_rope(&r, vec![None; dims.shape.n_layer]);
    decoder_gguf(g, DecoderSpec::llama(Arch::Qwen2), &dims, plans, false)
}
