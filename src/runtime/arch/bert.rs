//! BERT encoder: post-LayerNorm blocks (norm after each residual add), bidirectional
//! attention, learned absolute positions plus the token-type-0 embedding, GELU(erf) MLP,
//! biases everywhere, no language-model head. Hugging Face directories.

use super::{HfCfg, MAX_DIM, MAX_LAYERS, activation, refuse_quantized};
use crate::runtime::RealError;
use crate::runtime::pretrained::{Arch, Config, Ffn, Layer, Mlp, Pretrained};
use crate::runtime::safetensors::Checkpoint;
use serde_json::Value;

/// `config.json` keys read (besides [`super::INERT`] and [`super::COMMON_KEYS`]).
pub const KEYS: &[&str] = &[
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "layer_norm_eps",
    "hidden_act",
    "type_vocab_size",
    "position_embedding_type",
    "is_decoder",
    "add_cross_attention",
];

/// Loads a `bert` Hugging Face directory (the encoder; heads are ignored).
pub fn from_hf(c: &HfCfg, st: &Checkpoint) -> Result<Pretrained, RealError> {
    refuse_quantized(c)?;
    let d = c.dim("hidden_size", MAX_DIM)?;
    let n_layer = c.dim("num_hidden_layers", MAX_LAYERS)?;
    let n_head = c.dim("num_attention_heads", MAX_DIM)?;
    let dff = c.dim("intermediate_size", MAX_DIM)?;
    let vocab = c.dim("vocab_size", MAX_DIM)?;
    let ctx = c.dim("max_position_embeddings", 1 << 24)?;
    let _ = c.dim_opt("type_vocab_size", MAX_DIM)?;
    let eps = c.eps_or("layer_norm_eps", 1e-12)?;
    c.require(
        "position_embedding_type",
        &Value::from("absolute"),
        "only absolute positions are implemented",
    )?;
    c.require_off("is_decoder", "BERT as a decoder is not implemented")?;
    c.require_off("add_cross_attention", "not implemented")?;
    // The encoder has no head: tying does not change it.
    let _ = c.get("tie_word_embeddings");
    if !d.is_multiple_of(n_head) {
        return Err(c.err(format!(
            "hidden_size {d} is not a multiple of num_attention_heads {n_head}"
        )));
    }
    let act = activation(c, "hidden_act", "gelu")?;
    let p = if st.has("bert.embeddings.word_embeddings.weight") {
        "bert."
    } else {
        ""
    };
    let embed = st.weight(&format!("{p}embeddings.word_embeddings.weight"), vocab, d)?;
    let pos = st.shaped(
        &format!("{p}embeddings.position_embeddings.weight"),
        &[ctx, d],
    )?;
    let (types, ts) = st.finite(&format!("{p}embeddings.token_type_embeddings.weight"))?;
    if ts.len() != 2 || ts[1] != d {
        return Err(RealError::file(
            st.path(),
            format!("token_type_embeddings has shape {ts:?}"),
        ));
    }
    let embed_norm = Some(st.layer_norm(&format!("{p}embeddings.LayerNorm"), d, eps)?);
    let mut layers = Vec::with_capacity(n_layer);
    for l in 0..n_layer {
        let b = format!("{p}encoder.layer.{l}.");
        layers.push(Layer {
            attn_norm: None,
            wq: st.linear(&format!("{b}attention.self.query"), d, d, true)?,
            wk: st.linear(&format!("{b}attention.self.key"), d, d, true)?,
            wv: st.linear(&format!("{b}attention.self.value"), d, d, true)?,
            wo: st.linear(&format!("{b}attention.output.dense"), d, d, true)?,
            q_norm: None,
            k_norm: None,
            post_attn_norm: Some(st.layer_norm(
                &format!("{b}attention.output.LayerNorm"),
                d,
                eps,
            )?),
            ffn_norm: None,
            post_ffn_norm: Some(st.layer_norm(&format!("{b}output.LayerNorm"), d, eps)?),
            ffn: Ffn::Dense(Mlp {
                gate: None,
                up: st.linear(&format!("{b}intermediate.dense"), dff, d, true)?,
                down: st.linear(&format!("{b}output.dense"), d, dff, true)?,
            }),
            sinks: None,
            rope: None,
            window: None,
        });
    }
    Ok(Pretrained {
        cfg: Config {
            add_bos: true,
            post_norm: true,
            ..Config::multi_head(Arch::Bert, n_layer, d, n_head, vocab, ctx, act)
        },
        embed,
        pos_embed: Some(pos),
        type_embed: Some(types[..d].to_vec()),
        embed_norm,
        layers,
        final_norm: None,
        lm_head: None,
        has_lm_head: false,
        matmul: Default::default(),
    })
}
