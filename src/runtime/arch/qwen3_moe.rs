//! Qwen3-MoE: the Qwen3 block (per-head q/k RMSNorm before RoPE, no q/k/v biases unless
//! `attention_bias`) whose feed-forward sub-layer is a mixture of experts on the layers
//! $l \notin$ `mlp_only_layers` with $(l + 1) \bmod$ `decoder_sparse_step` $= 0$, a dense SwiGLU
//! of width `intermediate_size` elsewhere. The router is $p = \mathrm{softmax}(W_r x)$ over
//! the `num_experts` experts, the `num_experts_per_tok` largest kept and renormalised iff
//! `norm_topk_prob` ([`crate::runtime::moe::Routing::SoftmaxTopK`]); each expert is a SwiGLU
//! of width `moe_intermediate_size` stored per expert (`mlp.experts.{e}.{gate,up,down}_proj`,
//! router `mlp.gate`). With `use_sliding_window` the window applies to every layer, as in
//! transformers' `Qwen3MoeModel`. GGUF (`qwen3moe`, llama.cpp's layout): [`from_gguf`].

use super::decoder::{ExpertLayout, MoeSpec};
use super::{DecoderSpec, HfCfg, MAX_DIM, decoder_hf, plain_scale, same_rope, swiglu_dims};
use crate::runtime::RealError;
use crate::runtime::moe::Routing;
use crate::runtime::pretrained::{Arch, Pretrained};
use crate::runtime::safetensors::Checkpoint;
use serde_json::Value;

/// `config.json` keys read (besides [`super::DECODER_KEYS`], [`super::INERT`] and
/// [`super::COMMON_KEYS`]).
pub const KEYS: &[&str] = &[
    "attention_bias",
    "use_sliding_window",
    "sliding_window",
    "max_window_layers",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "norm_topk_prob",
    "decoder_sparse_step",
    "mlp_only_layers",
];

/// The expert count: `num_experts` (the published configs) or `num_local_experts` (what
/// transformers 5 writes, its attribute map's other name); both given must agree.
pub fn n_experts(c: &HfCfg) -> Result<usize, RealError> {
    let a = c.dim_opt("num_experts", MAX_DIM)?;
    let b = c.dim_opt("num_local_experts", MAX_DIM)?;
    match (a, b) {
        (Some(x), Some(y)) if x != y => Err(c.err(format!(
            "`num_experts` = {x} and `num_local_experts` = {y} disagree"
        ))),
        (Some(x), _) | (None, Some(x)) => Ok(x),
        (None, None) => Err(c.err("missing `num_experts` (or `num_local_experts`)")),
    }
}

/// The number of experts per token, checked against the expert count.
pub fn top_k(c: &HfCfg, n_experts: usize) -> Result<usize, RealError> {
    let k = c.dim("num_experts_per_tok", MAX_DIM)?;
    if k > n_experts {
        return Err(c.err(format!(
            "`num_experts_per_tok` = {k} exceeds the {n_experts} experts"
        )));
    }
    Ok(k)
}

/// Loads a `qwen3_moe` Hugging Face directory.
pub fn from_hf(c: &HfCfg, w: &Checkpoint) -> Result<Pretrained, RealError> {
    let dims = swiglu_dims(c, "Qwen3-MoE", 1e-6)?;
    let n = dims.shape.n_layer;
    let bias = c.bool_or("attention_bias", false)?;
    let ne = n_experts(c)?;
    let k = top_k(c, ne)?;
    let de = c.dim("moe_intermediate_size", MAX_DIM)?;
    let renormalise = c.bool_or("norm_topk_prob", false)?;
    let step = c
        .dim_opt("decoder_sparse_step", super::MAX_LAYERS)?
        .unwrap_or(1);
    let dense_only: Vec<usize> = match c.get("mlp_only_layers") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v.as_u64() {
                Some(l) if (l as usize) < n => Ok(l as usize),
                _ => Err(c.err(format!(
                    "`mlp_only_layers` entry {v} is not a layer index below {n}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(c.err(format!("`mlp_only_layers` = {v} is not a list"))),
    };
    // transformers' Qwen3MoeConfig keeps `sliding_window` only with `use_sliding_window`, and
    // the model then masks every layer; `max_window_layers` is not read by it.
    let use_sw = c.bool_or("use_sliding_window", false)?;
    let sw = c.dim_opt("sliding_window", 1 << 30)?;
    let mwl = c.dim_opt("max_window_layers", super::MAX_LAYERS)?;
    let window = match (use_sw, sw) {
        (true, Some(w)) => {
            if let Some(m) = mwl.filter(|&m| m < n) {
                return Err(c.err(format!(
                    "`max_window_layers` = {m} with `use_sliding_window`: transformers' \
                     Qwen3-MoE ignores it and windows every layer; ambiguous, refusing"
                )));
            }
            Some(w)
        }
        _ => None,
    };
    let spec = DecoderSpec {
        qkv_bias: bias,
        o_bias: bias,
        qk_norm: true,
        moe: Some(MoeSpec {
            n_experts: ne,
            top_k: k,
            d_expert: de,
            routing: Routing::SoftmaxTopK { renormalise },
            clamp: None,
            layout: ExpertLayout::PerExpert,
        }),
        ..DecoderSpec::llama(Arch::Qwen3Moe)
    };
    let (name, p) = super::rope::params(c, None, 10000.0)?;
    let (r, ctx) = super::rope::build(c, &name, &p, dims.shape.dh, dims.max_pos)?;
    let mut plans = same_rope(&r, vec![window; n]);
    for (l, plan) in plans.iter_mut().enumerate() {
        plan.moe = !dense_only.contains(&l) && (l + 1) % step == 0;
    }
    let scale = plain_scale(dims.shape.dh);
    decoder_hf(c, w, spec, &dims, plans, ctx, scale, (None, None))
}

/// GGUF metadata read under `qwen3moe.`, besides [`super::GGUF_DECODER_KEYS`] and
/// [`super::rope::GGUF_ROPE_KEYS`].
pub const GGUF_KEYS: &[&str] = &[
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_weights_scale",
    "expert_weights_norm",
];

/// Loads a `qwen3moe` GGUF (llama.cpp's `LLM_ARCH_QWEN3MOE`): q/k in Hugging Face order,
/// per-head q/k RMSNorm (`attn_q_norm`, `attn_k_norm`), the experts and router of
/// [`super::decoder::GgufWeights`] on every layer that has a router `ffn_gate_inp` (a dense
/// SwiGLU `ffn_{gate,up,down}` on a layer without one), routing $\mathrm{softmax}$ then top-k
/// renormalised, as llama.cpp always does for this architecture: an `expert_weights_norm` of
/// false says otherwise and is refused by name. RoPE scaling per
/// [`super::rope::gguf_rope`]; no sliding window (llama.cpp's Qwen3-MoE has none, and the key
/// is refused as unknown).
pub fn from_gguf(g: &mut crate::runtime::gguf::GgufFile) -> Result<Pretrained, RealError> {
    use super::{GgufDims, LayerPlan, check_gguf_keys, decoder_gguf};
    use candle_core::quantized::gguf_file::Value as GValue;
    const A: &str = "qwen3moe";
    let keys = [GGUF_KEYS, super::rope::GGUF_ROPE_KEYS].concat();
    check_gguf_keys(g, A, &keys)?;
    let nkey = format!("{A}.expert_weights_norm");
    match g.meta(&nkey) {
        None | Some(GValue::Bool(true)) => {}
        Some(v) => {
            return Err(g.err(format!(
                "metadata `{nkey}` = {v:?}: llama.cpp's {A} always renormalises the top-k \
                 routing weights; a file that says otherwise is refused rather than run one way \
                 or the other"
            )));
        }
    }
    let dims = GgufDims::read(g, A)?;
    let n = dims.shape.n_layer;
    let (ne, k) = super::decoder::gguf_experts(g, A)?;
    let moe: Vec<bool> = (0..n)
        .map(|l| g.has(&format!("blk.{l}.ffn_gate_inp.weight")))
        .collect();
    let first = moe
        .iter()
        .position(|&m| m)
        .ok_or_else(|| g.err("no layer has a router `blk.N.ffn_gate_inp.weight`"))?;
    let de = super::decoder::gguf_expert_width(g, A, first)?;
    let rope = super::rope::gguf_rope(g, A, dims.base, dims.shape.dh, dims.ctx)?;
    let plans = moe
        .into_iter()
        .map(|m| LayerPlan {
            rope: rope.clone(),
            window: None,
            moe: m,
        })
        .collect();
    let spec = DecoderSpec {
        qk_norm: true,
        moe: Some(MoeSpec {
            n_experts: ne,
            top_k: k,
            d_expert: de,
            routing: Routing::SoftmaxTopK { renormalise: true },
            clamp: None,
            layout: ExpertLayout::PerExpert,
        }),
        ..DecoderSpec::llama(Arch::Qwen3Moe)
    };
    decoder_gguf(g, spec, &dims, plans, false)
}
