//! Llama 1–3.x and Mistral: pre-RMSNorm blocks, RoPE (every `rope_type` of
//! [`super::rope`]), SwiGLU MLP, grouped-query attention, optional q/k/v/o biases
//! (`attention_bias`), untied head unless `tie_word_embeddings`. Mistral adds a sliding window
//! on every layer (`sliding_window`, key $j$ visible from query $i$ iff $i - j <$ window).
//!
//! GGUF: llama.cpp's converter permutes the Q and K rows of this family (and only this family)
//! so that RoPE can rotate interleaved pairs $(2j, 2j+1)$: within each head, GGUF row $2j+s$
//! is Hugging Face row $s\thinspace d_h/2 + j$. [`unpermute_rows`] undoes it.

use super::{
    DecoderSpec, GgufDims, HfCfg, check_gguf_keys, decoder_gguf, one_rope_hf, plain_scale,
    same_rope, swiglu_dims,
};
use crate::runtime::RealError;
use crate::runtime::gguf::GgufFile;
use crate::runtime::pretrained::{Arch, Pretrained, Rope};
use crate::runtime::safetensors::Checkpoint;
use serde_json::Value;

/// `config.json` keys read (besides [`super::DECODER_KEYS`], [`super::INERT`] and
/// [`super::COMMON_KEYS`]).
pub const KEYS: &[&str] = &["attention_bias", "mlp_bias", "sliding_window"];

/// GGUF metadata read under `llama.` (or `mistral.`), besides [`super::GGUF_DECODER_KEYS`].
pub const GGUF_KEYS: &[&str] = &[
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.finetuned",
];

/// Loads a `llama` or `mistral` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint, mt: &str) -> Result<Pretrained, RealError> {
    let dims = swiglu_dims(c, "Llama", 1e-6)?;
    let bias = c.bool_or("attention_bias", false)?;
    let mlp_bias = c.bool_or("mlp_bias", false)?;
    let window = if mt == "mistral" {
        c.dim_opt("sliding_window", 1 << 30)?
    } else {
        c.require(
            "sliding_window",
            &Value::Null,
            "Llama has no sliding window",
        )?;
        None
    };
    let spec = DecoderSpec {
        qkv_bias: bias,
        o_bias: bias,
        mlp_bias,
        ..DecoderSpec::llama(Arch::Llama)
    };
    let windows = vec![window; dims.shape.n_layer];
    let scale = plain_scale(dims.shape.dh);
    one_rope_hf(c, w, spec, &dims, windows, scale, (None, None))
}

/// The row permutation [`unpermute_rows`] applies: HF row `dst` is GGUF row `perm[dst]`
/// (a byte operation on quantized rows, [`crate::runtime::weights::StoredMatrix::permute_rows`]).
pub fn unpermute_perm(n_heads: usize, head_dim: usize) -> Vec<usize> {
    let half = head_dim / 2;
    let mut perm = vec![0; n_heads * head_dim];
    for h in 0..n_heads {
        for j in 0..half {
            for s in 0..2 {
                perm[h * head_dim + s * half + j] = h * head_dim + 2 * j + s;
            }
        }
    }
    perm
}

/// Undoes llama.cpp's Q/K row permutation: within each head, GGUF row `2j+s` → HF row `s·half+j`.
pub fn unpermute_rows(w: &[f32], n_heads: usize, head_dim: usize, cols: usize) -> Vec<f32> {
    let half = head_dim / 2;
    let mut out = vec![0f32; w.len()];
    for h in 0..n_heads {
        for j in 0..half {
            for s in 0..2 {
                let src = h * head_dim + 2 * j + s;
                let dst = h * head_dim + s * half + j;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// The RoPE of a Llama-family GGUF: `rope.scaling.type` none or linear (factor), and
/// llama.cpp's per-frequency divisors `rope_freqs.weight` (how Llama 3.x stores its scaling).
pub fn gguf_rope(g: &mut GgufFile, arch: &str, dims: &GgufDims) -> Result<Rope, RealError> {
    let mut r = Rope::plain(dims.base, dims.shape.dh);
    let tkey = format!("{arch}.rope.scaling.type");
    match g.meta_str(&tkey) {
        None | Some("none") => {}
        Some("linear") => {
            let fkey = format!("{arch}.rope.scaling.factor");
            let f = g.meta_f32_or(&fkey, f32::NAN)?;
            if !(f.is_finite() && f >= 1.0) {
                return Err(g.err(format!("metadata `{fkey}` = {f} must be ≥ 1")));
            }
            for w in &mut r.inv_freq {
                *w /= f;
            }
        }
        Some(other) => {
            return Err(g.err(format!(
                "metadata `{tkey}` = \"{other}\" is not implemented for GGUF (none, linear)"
            )));
        }
    }
    if g.has("rope_freqs.weight") {
        let (ff, _) = g.tensor("rope_freqs.weight")?;
        if ff.len() != r.inv_freq.len() || ff.iter().any(|&v| v.is_nan() || v <= 0.0) {
            return Err(g.err(format!(
                "tensor `rope_freqs.weight` has {} entries (expected {} positive divisors)",
                ff.len(),
                r.inv_freq.len()
            )));
        }
        for (w, f) in r.inv_freq.iter_mut().zip(&ff) {
            *w /= f;
        }
    }
    Ok(r)
}

/// Loads a `llama` / `mistral` GGUF (q/k rows un-permuted).
pub fn from_gguf(g: &mut GgufFile, arch: &str) -> Result<Pretrained, RealError> {
    check_gguf_keys(g, arch, GGUF_KEYS)?;
    let dims = GgufDims::read(g, arch)?;
    let r = gguf_rope(g, arch, &dims)?;
    let plans = same_rope(&r, vec![None; dims.shape.n_layer]);
    let mut m = decoder_gguf(g, DecoderSpec::llama(Arch::Llama), &dims, plans, false)?;
    for ly in &mut m.layers {
        ly.wq.w = ly
            .wq
            .w
            .permute_rows(&unpermute_perm(dims.shape.n_head, dims.shape.dh));
        ly.wk.w = ly
            .wk
            .w
            .permute_rows(&unpermute_perm(dims.shape.n_kv, dims.shape.dh));
        ly.wq.b = ly
            .wq
            .b
            .take()
            .map(|b| unpermute_rows(&b, dims.shape.n_head, dims.shape.dh, 1));
        ly.wk.b = ly
            .wk
            .b
            .take()
            .map(|b| unpermute_rows(&b, dims.shape.n_kv, dims.shape.dh, 1));
    }
    Ok(m)
}
