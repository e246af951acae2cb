//! Gemma 3 (text): the Gemma 2 block ([`super::gemma2`]) plus per-head q/k RMSNorm (`1 + w`
//! gains), local layers (sliding window, base θ = `rope_local_base_freq`, default 10⁴) and
//! every `sliding_window_pattern`-th layer global (θ = `rope_theta`, with its scaling); in
//! transformers ≥ 5 both come from `rope_parameters.{sliding,full}_attention` and
//! `layer_types`.
//!
//! GGUF (`gemma3`): llama.cpp stores q/k unpermuted and the norm gains with the `+1` already
//! added; every 6th layer is global.

use super::gemma2::GemmaCommon;
use super::{
    DecoderSpec, GgufDims, HfCfg, LayerPlan, check_gguf_keys, decoder_gguf, decoder_hf,
    layer_types, rope,
};
use crate::runtime::RealError;
use crate::runtime::gguf::GgufFile;
use crate::runtime::pretrained::{Act, Arch, Pretrained, Rope};
use crate::runtime::safetensors::Checkpoint;

/// `config.json` keys read besides Gemma 2's ([`super::gemma2::KEYS`]),
/// [`super::DECODER_KEYS`], [`super::INERT`] and [`super::COMMON_KEYS`].
pub const KEYS: &[&str] = &[
    "sliding_window_pattern",
    "_sliding_window_pattern",
    "rope_local_base_freq",
];

/// GGUF metadata read under `gemma3.`, besides [`super::GGUF_DECODER_KEYS`].
pub const GGUF_KEYS: &[&str] = &["attention.sliding_window"];

/// Loads a `gemma3_text` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    let g = GemmaCommon::read(c)?;
    let dims = &g.dims;
    // As transformers 5.24: without `layer_types`, every `sliding_window_pattern`-th layer
    // (default 6) is global; the private `_sliding_window_pattern` it stores is never read.
    let _ignored = c.get("_sliding_window_pattern");
    let pattern = c
        .dim_opt("sliding_window_pattern", super::MAX_LAYERS)?
        .unwrap_or(6);
    let kinds = layer_types(c, dims.shape.n_layer, |l| (l + 1) % pattern != 0)?;
    let split = matches!(c.get("rope_parameters"), Some(serde_json::Value::Object(o))
        if o.contains_key("sliding_attention") || o.contains_key("full_attention"));
    let (global, ctx) = {
        let (name, p) = rope::params(c, split.then_some("full_attention"), 1_000_000.0)?;
        rope::build(c, &name, &p, dims.shape.dh, dims.max_pos)?
    };
    let local = if split {
        let (name, p) = rope::params(c, Some("sliding_attention"), 10_000.0)?;
        rope::build(c, &name, &p, dims.shape.dh, dims.max_pos)?.0
    } else {
        let b = c.num_or("rope_local_base_freq", 10_000.0)?;
        if b <= 1.0 {
            return Err(c.err(format!("`rope_local_base_freq` = {b} must be > 1")));
        }
        Rope::plain(b as f32, dims.shape.dh)
    };
    let plans = kinds
        .into_iter()
        .map(|s| {
            Ok(LayerPlan {
                rope: if s { local.clone() } else { global.clone() },
                window: g.window_of(c, s)?,
                moe: false,
            })
        })
        .collect::<Result<Vec<_>, RealError>>()?;
    let spec = DecoderSpec::gemma(Arch::Gemma3, g.act, true);
    // transformers 5.24's Gemma 3 attention takes no soft cap: `attn_logit_softcapping` is
    // stored and never applied (the final-logit cap is).
    let softcaps = (None, g.softcaps.1);
    decoder_hf(c, w, spec, dims, plans, ctx, g.attn_scale, softcaps)
}

/// Loads a `gemma3` GGUF: every 6th layer global (base θ from the file, no window), the others
/// local (θ = $10^4$, `attention.sliding_window`); GELU(tanh); BOS added unless the file says not.
pub fn from_gguf(g: &mut GgufFile) -> Result<Pretrained, RealError> {
    check_gguf_keys(g, "gemma3", GGUF_KEYS)?;
    let dims = GgufDims::read(g, "gemma3")?;
    let window = g
        .meta_int_opt("gemma3.attention.sliding_window", u32::MAX as u64)?
        .map(|v| v as usize);
    let plans = (0..dims.shape.n_layer)
        .map(|l| {
            let global = (l + 1) % 6 == 0;
            LayerPlan {
                rope: Rope::plain(if global { dims.base } else { 10000.0 }, dims.shape.dh),
                window: if global { None } else { window },
                moe: false,
            }
        })
        .collect();
    let spec = DecoderSpec::gemma(Arch::Gemma3, Act::GeluTanh, true);
    decoder_gguf(g, spec, &dims, plans, true)
}
