//! Gemma 3 (text): the Gemma 2 block ([`super::gemma2`]) plus per-head q/k RMSNorm (`1 + w`
//! gains), local layers (sliding window, base θ = `rope_local_base_freq`, default 10⁴) and
//! every `sliding_window_pattern`-th layer global (θ = `rope_theta`, with its scaling); in
//! transformers ≥ 5 both come from `rope_parameters.{sliding,full}_attention` and
//! `layer_types`.
//!
//! GGUF (`gemma3`): llama.cpp stores q/k unpermuted and the norm gains with the `+1` already
//! added; every 6th layer is global.

use super::gemma2::{attn_scale, common_refusals, gemma_act, softcap};
use super::{
    DecoderDims, DecoderSpec, GgufDims, HfCfg, LayerPlan, check_gguf_keys, decoder_hf, layer_types,
    rope,
};
use crate::real::RealError;
use crate::real::gguf::{GgufFile, value_usize};
use crate::real::model::{Act, Arch, Config, Layer, Linear, NormLayer, Pretrained, Rope};
use crate::real::safetensors::Checkpoint;
use candle_core::quantized::gguf_file::Value as GValue;

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
    "sliding_window_pattern",
    "_sliding_window_pattern",
    "layer_types",
    "use_bidirectional_attention",
    "rope_theta",
    "rope_local_base_freq",
    "rope_scaling",
    "rope_parameters",
    "partial_rotary_factor",
    "original_max_position_embeddings",
];

/// GGUF metadata read under `gemma3.`.
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
    "attention.sliding_window",
    "rope.freq_base",
    "rope.dimension_count",
    "vocab_size",
];

/// Loads a `gemma3_text` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    common_refusals(c)?;
    let dims = DecoderDims::read(c, "rms_norm_eps", 1e-6)?;
    let act = gemma_act(c)?;
    let sw = c.dim_opt("sliding_window", 1 << 30)?;
    let pattern = match c.dim_opt("sliding_window_pattern", super::MAX_LAYERS)? {
        Some(p) => p,
        None => c
            .dim_opt("_sliding_window_pattern", super::MAX_LAYERS)?
            .unwrap_or(6),
    };
    let kinds = layer_types(c, dims.n_layer, |l| (l + 1) % pattern != 0)?;
    let split = matches!(c.get("rope_parameters"), Some(serde_json::Value::Object(o))
        if o.contains_key("sliding_attention") || o.contains_key("full_attention"));
    let (global, ctx) = {
        let (name, p) = rope::params(c, split.then_some("full_attention"), 1_000_000.0)?;
        rope::build(c, &name, &p, dims.dh, dims.max_pos)?
    };
    let local = if split {
        let (name, p) = rope::params(c, Some("sliding_attention"), 10_000.0)?;
        rope::build(c, &name, &p, dims.dh, dims.max_pos)?.0
    } else {
        let b = c.num_or("rope_local_base_freq", 10_000.0)?;
        if b <= 1.0 {
            return Err(c.err(format!("`rope_local_base_freq` = {b} must be > 1")));
        }
        Rope::plain(b as f32, dims.dh)
    };
    let plans = kinds
        .into_iter()
        .map(|s| {
            Ok(if s {
                LayerPlan {
                    rope: local.clone(),
                    window: Some(
                        sw.ok_or_else(|| c.err("sliding layers without a `sliding_window` value"))?,
                    ),
                }
            } else {
                LayerPlan {
                    rope: global.clone(),
                    window: None,
                }
            })
        })
        .collect::<Result<Vec<_>, RealError>>()?;
    let spec = DecoderSpec {
        arch: Arch::Gemma3,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        qk_norm: true,
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

/// BOS id and whether the tokenizer adds it by default (`tokenizer.ggml.add_bos_token`, else
/// `default`).
pub fn gguf_bos(g: &GgufFile, default: bool) -> (Option<u32>, bool) {
    let bos_id = g
        .meta("tokenizer.ggml.bos_token_id")
        .and_then(value_usize)
        .map(|v| v as u32);
    let add_bos = match g.meta("tokenizer.ggml.add_bos_token") {
        Some(GValue::Bool(b)) => *b,
        _ => default,
    };
    (bos_id, add_bos)
}

/// Loads a `gemma3` GGUF.
pub fn from_gguf(g: &mut GgufFile) -> Result<Pretrained, RealError> {
    check_gguf_keys(g, "gemma3", GGUF_KEYS)?;
    let dims = GgufDims::read(g, "gemma3")?;
    let GgufDims {
        n_layer,
        d,
        n_head,
        n_kv,
        dh,
        ctx,
        eps,
        base,
    } = dims;
    let (embed, edims) = g.weight("token_embd.weight")?;
    if edims.len() != 2 || edims[1] != d {
        return Err(g.err(format!(
            "token_embd.weight has shape {edims:?}, expected [vocab, {d}]"
        )));
    }
    let vocab = edims[0];
    let window = g
        .meta("gemma3.attention.sliding_window")
        .and_then(value_usize);
    let rms = |w: Vec<f32>| NormLayer::Rms { w, eps };
    let (hq, hk) = (n_head * dh, n_kv * dh);
    let mut layers = Vec::with_capacity(n_layer);
    for l in 0..n_layer {
        let p = |s: &str| format!("blk.{l}.{s}");
        let global = (l + 1) % 6 == 0;
        let (up_w, up_dims) = g.weight(&p("ffn_up.weight"))?;
        if up_dims.len() != 2 || up_dims[1] != d {
            return Err(g.err(format!(
                "{} has shape {up_dims:?}, expected [d_ff, {d}]",
                p("ffn_up.weight")
            )));
        }
        let dff = up_dims[0];
        layers.push(Layer {
            attn_norm: Some(rms(g.vector(&p("attn_norm.weight"), d)?)),
            wq: g.linear(&p("attn_q"), hq, d)?,
            wk: g.linear(&p("attn_k"), hk, d)?,
            wv: g.linear(&p("attn_v"), hk, d)?,
            wo: g.linear(&p("attn_output"), d, hq)?,
            q_norm: Some(rms(g.vector(&p("attn_q_norm.weight"), dh)?)),
            k_norm: Some(rms(g.vector(&p("attn_k_norm.weight"), dh)?)),
            post_attn_norm: Some(rms(g.vector(&p("post_attention_norm.weight"), d)?)),
            ffn_norm: Some(rms(g.vector(&p("ffn_norm.weight"), d)?)),
            post_ffn_norm: Some(rms(g.vector(&p("post_ffw_norm.weight"), d)?)),
            gate: Some(g.linear(&p("ffn_gate"), dff, d)?),
            up: Linear {
                w: up_w,
                out: dff,
                inp: d,
                b: None,
            },
            down: g.linear(&p("ffn_down"), d, dff)?,
            rope: Some(Rope::plain(if global { base } else { 10000.0 }, dh)),
            window: if global { None } else { window },
        });
    }
    let final_norm = Some(rms(g.vector("output_norm.weight", d)?));
    let lm_head = if g.has("output.weight") {
        Some(g.linear("output", vocab, d)?)
    } else {
        None
    };
    let (bos_id, add_bos) = gguf_bos(g, true);
    Ok(Pretrained {
        cfg: Config {
            arch: Arch::Gemma3,
            n_layer,
            d_model: d,
            n_head,
            n_kv_head: n_kv,
            head_dim: dh,
            vocab,
            max_context: ctx,
            causal: true,
            act: Act::GeluTanh,
            attn_scale: 1.0 / (dh as f32).sqrt(),
            embed_scale: (d as f32).sqrt(),
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
