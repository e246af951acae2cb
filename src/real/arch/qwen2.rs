//! Qwen2 / Qwen2.5: the Llama block with biases on the q, k and v projections (none on the
//! output projection), untied head unless `tie_word_embeddings`. A sliding window applies only
//! with `use_sliding_window`, to the layers `layer_types` marks (transformers derives them
//! from `max_window_layers`).
//!
//! GGUF: llama.cpp's converter stores Qwen2 q/k rows in Hugging Face order (it permutes only
//! the Llama family), so nothing is un-permuted here.

use super::{
    DecoderDims, DecoderSpec, GgufDims, HfCfg, LayerPlan, check_gguf_keys, decoder_hf, layer_types,
    refuse_quantized, rope,
};
use crate::real::RealError;
use crate::real::gguf::GgufFile;
use crate::real::model::{Act, Arch, Config, Layer, Linear, NormLayer, Pretrained, Rope};
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

/// GGUF metadata read under `qwen2.`.
pub const GGUF_KEYS: &[&str] = &[
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "rope.freq_base",
    "rope.dimension_count",
    "vocab_size",
];

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
    refuse_quantized(c)?;
    let dims = DecoderDims::read(c, "rms_norm_eps", 1e-6)?;
    c.require(
        "hidden_act",
        &Value::from("silu"),
        "the Qwen2 MLP is SwiGLU",
    )?;
    let wins = windows(c, dims.n_layer)?;
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
        arch: Arch::Qwen2,
        qkv_bias: true,
        o_bias: false,
        mlp_bias: false,
        qk_norm: false,
        gemma: false,
        fused: false,
        act: Act::Silu,
        tie_default: false,
    };
    let scale = 1.0 / (dims.dh as f32).sqrt();
    decoder_hf(c, w, spec, &dims, plans, ctx, scale, (None, None))
}

/// Loads a `qwen2` GGUF (q/k in Hugging Face order, biases from `attn_{q,k,v}.bias`).
pub fn from_gguf(g: &mut GgufFile) -> Result<Pretrained, RealError> {
    check_gguf_keys(g, "qwen2", GGUF_KEYS)?;
    let dims = GgufDims::read(g, "qwen2")?;
    let r = Rope::plain(dims.base, dims.dh);
    gguf_decoder(g, "qwen2", &dims, Arch::Qwen2, r)
}

/// A Llama-like GGUF decoder in file order (tensor names `blk.{l}.…`; biases where present).
pub fn gguf_decoder(
    g: &mut GgufFile,
    _arch: &str,
    dims: &GgufDims,
    arch: Arch,
    rope: Rope,
) -> Result<Pretrained, RealError> {
    let GgufDims {
        n_layer,
        d,
        n_head,
        n_kv,
        dh,
        ctx,
        eps,
        ..
    } = *dims;
    let (embed, edims) = g.weight("token_embd.weight")?;
    if edims.len() != 2 || edims[1] != d {
        return Err(g.err(format!(
            "token_embd.weight has shape {edims:?}, expected [vocab, {d}]"
        )));
    }
    let vocab = edims[0];
    let rms = |w: Vec<f32>| NormLayer::Rms { w, eps };
    let (hq, hk) = (n_head * dh, n_kv * dh);
    let mut layers = Vec::with_capacity(n_layer);
    for l in 0..n_layer {
        let p = |s: &str| format!("blk.{l}.{s}");
        let attn_norm = Some(rms(g.vector(&p("attn_norm.weight"), d)?));
        let wq = g.linear(&p("attn_q"), hq, d)?;
        let wk = g.linear(&p("attn_k"), hk, d)?;
        let wv = g.linear(&p("attn_v"), hk, d)?;
        let wo = g.linear(&p("attn_output"), d, hq)?;
        let ffn_norm = Some(rms(g.vector(&p("ffn_norm.weight"), d)?));
        let (up_w, up_dims) = g.weight(&p("ffn_up.weight"))?;
        if up_dims.len() != 2 || up_dims[1] != d {
            return Err(g.err(format!(
                "{} has shape {up_dims:?}, expected [d_ff, {d}]",
                p("ffn_up.weight")
            )));
        }
        let dff = up_dims[0];
        let up = Linear {
            w: up_w,
            out: dff,
            inp: d,
            b: None,
        };
        let gate = Some(g.linear(&p("ffn_gate"), dff, d)?);
        let down = g.linear(&p("ffn_down"), d, dff)?;
        layers.push(Layer {
            attn_norm,
            wq,
            wk,
            wv,
            wo,
            q_norm: None,
            k_norm: None,
            post_attn_norm: None,
            ffn_norm,
            post_ffn_norm: None,
            gate,
            up,
            down,
            rope: Some(rope.clone()),
            window: None,
        });
    }
    let final_norm = Some(rms(g.vector("output_norm.weight", d)?));
    let lm_head = if g.has("output.weight") {
        Some(g.linear("output", vocab, d)?)
    } else {
        None
    };
    let (bos_id, add_bos) = super::gemma3::gguf_bos(g, false);
    Ok(Pretrained {
        cfg: Config {
            arch,
            n_layer,
            d_model: d,
            n_head,
            n_kv_head: n_kv,
            head_dim: dh,
            vocab,
            max_context: ctx,
            causal: true,
            act: Act::Silu,
            attn_scale: 1.0 / (dh as f32).sqrt(),
            embed_scale: 1.0,
            bos_id,
            add_bos,
            post_norm: false,
            attn_softcap: None,
            final_softcap: None,
        },
        embed,
        pos_embed: None,
        type_embed: None,
        embed_norm: None,
        layers,
        final_norm,
        lm_head,
        has_lm_head: true,
        matmul: Default::default(),
    })
}
