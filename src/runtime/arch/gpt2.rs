//! GPT-2: pre-LayerNorm blocks, learned absolute positions, GELU(tanh) MLP, biases everywhere,
//! `Conv1D` weights stored `[in, out]` (transposed here), tied head. Hugging Face directories.

use super::{HfCfg, MAX_DIM, MAX_LAYERS, refuse_quantized};
use crate::runtime::RealError;
use crate::runtime::pretrained::{
    Act, Arch, Config, Ffn, Layer, Linear, Mlp, Pretrained, StoredMatrix,
};
use crate::runtime::safetensors::Checkpoint;
use serde_json::Value;

/// `config.json` keys read (besides [`super::INERT`] and [`super::COMMON_KEYS`]).
pub const KEYS: &[&str] = &[
    "n_embd",
    "n_layer",
    "n_head",
    "n_positions",
    "n_ctx",
    "vocab_size",
    "layer_norm_epsilon",
    "n_inner",
    "activation_function",
    "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn",
    "add_cross_attention",
];

fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut o = vec![0f32; w.len()];
    for i in 0..rows {
        for j in 0..cols {
            o[j * rows + i] = w[i * cols + j];
        }
    }
    o
}

/// Loads a `gpt2` Hugging Face directory.
pub fn from_hf(c: &HfCfg, st: &Checkpoint) -> Result<Pretrained, RealError> {
    refuse_quantized(c)?;
    let d = c.dim("n_embd", MAX_DIM)?;
    let n_layer = c.dim("n_layer", MAX_LAYERS)?;
    let n_head = c.dim("n_head", MAX_DIM)?;
    let vocab = c.dim("vocab_size", MAX_DIM)?;
    let ctx = c.dim("n_positions", 1 << 24)?;
    let _ = c.dim_opt("n_ctx", 1 << 24)?;
    let eps = c.eps_or("layer_norm_epsilon", 1e-5)?;
    let dff = c.dim_opt("n_inner", MAX_DIM)?.unwrap_or(4 * d);
    c.require(
        "activation_function",
        &Value::from("gelu_new"),
        "GPT-2's MLP is GELU(tanh)",
    )?;
    c.require("scale_attn_weights", &Value::Bool(true), "not implemented")?;
    c.require_off("scale_attn_by_inverse_layer_idx", "not implemented")?;
    c.require_off("add_cross_attention", "not implemented")?;
    // Changes only the precision of the attention product, not the math.
    let _ = c.bool_or("reorder_and_upcast_attn", false)?;
    c.require(
        "tie_word_embeddings",
        &Value::Bool(true),
        "GPT-2's head is the token embedding",
    )?;
    if !d.is_multiple_of(n_head) {
        return Err(c.err(format!("n_embd {d} is not a multiple of n_head {n_head}")));
    }
    let p = if st.has("transformer.wte.weight") {
        "transformer."
    } else {
        ""
    };
    let embed = st.weight(&format!("{p}wte.weight"), vocab, d)?;
    let pos = st.shaped(&format!("{p}wpe.weight"), &[ctx, d])?;
    let conv = |name: &str, inp: usize, out: usize| -> Result<Linear, RealError> {
        let w = st.shaped(&format!("{name}.weight"), &[inp, out])?;
        let b = st.shaped(&format!("{name}.bias"), &[out])?;
        Ok(Linear {
            // Conv1D stores [in, out]: a transpose is not a row operation, so f32.
            w: StoredMatrix::f32(transpose(&w, inp, out), out, inp),
            out,
            inp,
            b: Some(b),
        })
    };
    let mut layers = Vec::with_capacity(n_layer);
    for l in 0..n_layer {
        let b = format!("{p}h.{l}.");
        let qkv = conv(&format!("{b}attn.c_attn"), d, 3 * d)?;
        let bias = qkv.b.clone().unwrap_or_default();
        let part = |k: usize| Linear {
            w: qkv.w.rows(k * d, d),
            out: d,
            inp: d,
            b: Some(bias[k * d..(k + 1) * d].to_vec()),
        };
        layers.push(Layer {
            attn_norm: Some(st.layer_norm(&format!("{b}ln_1"), d, eps)?),
            wq: part(0),
            wk: part(1),
            wv: part(2),
            wo: conv(&format!("{b}attn.c_proj"), d, d)?,
            q_norm: None,
            k_norm: None,
            post_attn_norm: None,
            ffn_norm: Some(st.layer_norm(&format!("{b}ln_2"), d, eps)?),
            post_ffn_norm: None,
            ffn: Ffn::Dense(Mlp {
                gate: None,
                up: conv(&format!("{b}mlp.c_fc"), d, dff)?,
                down: conv(&format!("{b}mlp.c_proj"), dff, d)?,
            }),
            sinks: None,
            rope: None,
            window: None,
        });
    }
    Ok(Pretrained {
        cfg: Config {
            causal: true,
            bos_id: c
                .get("bos_token_id")
                .and_then(Value::as_u64)
                .filter(|&b| (b as usize) < vocab)
                .map(|v| v as u32),
            ..Config::multi_head(Arch::Gpt2, n_layer, d, n_head, vocab, ctx, Act::GeluTanh)
        },
        embed,
        pos_embed: Some(pos),
        type_embed: None,
        embed_norm: None,
        layers,
        final_norm: Some(st.layer_norm(&format!("{p}ln_f"), d, eps)?),
        lm_head: None,
        has_lm_head: true,
        matmul: Default::default(),
    })
}
