//! Gemma 2: sandwich RMSNorms with `1 + w` gains (input, post-attention, pre- and
//! post-feed-forward), GELU(tanh) gated MLP, embeddings scaled by $\sqrt d$, logit scale
//! `query_pre_attn_scalar`$^{-1/2}$, attention logits soft-capped $s \mapsto c\tanh(s/c)$
//! (`attn_logit_softcapping`, before the mask) and final logits likewise
//! (`final_logit_softcapping`), sliding window on the layers `layer_types` marks (by default
//! every even layer), tied head. Hugging Face directories only.

use super::{
    DecoderDims, DecoderSpec, HfCfg, activation, layer_types, one_rope_hf, refuse_quantized,
};
use crate::runtime::RealError;
use crate::runtime::pretrained::{Act, Arch, Pretrained};
use crate::runtime::safetensors::Checkpoint;

/// `config.json` keys read (besides [`super::DECODER_KEYS`], [`super::INERT`] and
/// [`super::COMMON_KEYS`]); Gemma 3 reads these too.
pub const KEYS: &[&str] = &[
    "hidden_activation",
    "attention_bias",
    "query_pre_attn_scalar",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "sliding_window",
    "layer_types",
    "use_bidirectional_attention",
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
    c.require_off("attention_bias", "Gemma has no attention biases")?;
    c.require_off(
        "use_bidirectional_attention",
        "bidirectional attention is not implemented",
    )?;
    Ok(())
}

/// The MLP activation (`hidden_activation`, falling back to `hidden_act`).
pub fn gemma_act(c: &HfCfg) -> Result<Act, RealError> {
    if c.get("hidden_activation").is_some() {
        activation(c, "hidden_activation", "gelu_pytorch_tanh")
    } else {
        activation(c, "hidden_act", "gelu_pytorch_tanh")
    }
}

/// What Gemma 2 and Gemma 3 read alike.
pub struct GemmaCommon {
    /// The common decoder dimensions.
    pub dims: DecoderDims,
    /// MLP activation.
    pub act: Act,
    /// `sliding_window`, the window of the sliding layers.
    pub window: Option<usize>,
    /// Attention and final logit soft caps.
    pub softcaps: (Option<f32>, Option<f32>),
    /// Attention logit scale ([`attn_scale`]).
    pub attn_scale: f32,
}

impl GemmaCommon {
    /// Reads the keys Gemma 2 and 3 share (after [`common_refusals`]).
    pub fn read(c: &HfCfg) -> Result<Self, RealError> {
        common_refusals(c)?;
        let dims = DecoderDims::read(c, "rms_norm_eps", 1e-6)?;
        let act = gemma_act(c)?;
        let window = c.dim_opt("sliding_window", 1 << 30)?;
        let softcaps = (
            softcap(c, "attn_logit_softcapping")?,
            softcap(c, "final_logit_softcapping")?,
        );
        let attn_scale = attn_scale(c, dims.shape.dh)?;
        Ok(Self {
            dims,
            act,
            window,
            softcaps,
            attn_scale,
        })
    }

    /// The window of a layer: `sliding_window` when `sliding`, refused if it is not given.
    pub fn window_of(&self, c: &HfCfg, sliding: bool) -> Result<Option<usize>, RealError> {
        if !sliding {
            return Ok(None);
        }
        let w = self
            .window
            .ok_or_else(|| c.err("sliding layers without a `sliding_window` value"))?;
        Ok(Some(w))
    }
}

/// Loads a `gemma2` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    let g = GemmaCommon::read(c)?;
    let kinds = layer_types(c, g.dims.shape.n_layer, |l| (l + 1) % 2 != 0)?;
    let windows = kinds
        .into_iter()
        .map(|s| g.window_of(c, s))
        .collect::<Result<Vec<_>, RealError>>()?;
    let spec = DecoderSpec::gemma(Arch::Gemma2, g.act, false);
    one_rope_hf(c, w, spec, &g.dims, windows, g.attn_scale, g.softcaps)
}
