//! The one builder of a Llama-like decoder (Llama, Mistral, Qwen2, Qwen3, Gemma 2/3, Phi-3),
//! whichever file it comes from. Each block is
//! $h \mathrel{+}= \mathrm{post}(\mathrm{attn}(\mathrm{norm}(h)))$,
//! $h \mathrel{+}= \mathrm{post}(W_{down}(\sigma(W_{gate}\thinspace n) \odot W_{up}\thinspace n))$ with
//! $n = \mathrm{norm}'(h)$; the families differ only in what [`DecoderSpec`] and the per-layer
//! [`LayerPlan`]s say (biases, q/k norms, Gemma's sandwich norms and `1 + w` gains, fused
//! projections, activation, RoPE and window per layer).
//!
//! The file formats differ only in how tensors are named and stored: [`DecoderWeights`] asks
//! for them by role, with one implementation for Hugging Face checkpoints ([`HfWeights`],
//! names `model.layers.{l}.…`) and one for GGUF files ([`GgufWeights`], names `blk.{l}.…`).
//! The hyper-parameters common to every family are read once, by [`DecoderDims`] from
//! `config.json` (keys [`DECODER_KEYS`]) and by [`GgufDims`] from GGUF metadata (keys
//! [`GGUF_DECODER_KEYS`]).

use super::{HfCfg, MAX_DIM, MAX_LAYERS};
use crate::runtime::RealError;
use crate::runtime::gguf::{GgufFile, value_usize};
use crate::runtime::moe::{Routing, SwigluClamp};
use crate::runtime::pretrained::{
    Act, Arch, Config, Ffn, Layer, Linear, Mlp, Moe, NormLayer, Pretrained, Rope,
};
use crate::runtime::safetensors::Checkpoint;
use crate::runtime::weights::StoredMatrix;
use serde_json::Value;

/// `config.json` keys every Llama-like decoder reads: the dimensions of [`DecoderDims`], the
/// MLP activation and the RoPE parameters of [`super::rope::params`] (each family lists only
/// its own keys besides these, [`super::INERT`] and [`super::COMMON_KEYS`]).
pub const DECODER_KEYS: &[&str] = &[
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
];

/// GGUF metadata (under `<arch>.`) every Llama-like GGUF may carry: what [`GgufDims`] reads,
/// plus `feed_forward_length` and `vocab_size`, which the tensor shapes give and are not read.
pub const GGUF_DECODER_KEYS: &[&str] = &[
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

/// How a Llama-like decoder stores and uses its tensors.
#[derive(Debug, Clone, Copy)]
pub struct DecoderSpec {
    /// Family.
    pub arch: Arch,
    /// q/k/v projections carry biases (Hugging Face; a GGUF carries the biases it has).
    pub qkv_bias: bool,
    /// The output projection carries a bias (Hugging Face).
    pub o_bias: bool,
    /// The MLP projections carry biases (Hugging Face).
    pub mlp_bias: bool,
    /// Per-head RMSNorm on q and k.
    pub qk_norm: bool,
    /// Gemma's sandwich norms (post-attention, pre- and post-feed-forward), `1 + w` gains and
    /// embeddings scaled by $\sqrt d$.
    pub gemma: bool,
    /// Phi-3's fused `qkv_proj` and `gate_up_proj` (Hugging Face).
    pub fused: bool,
    /// MLP activation.
    pub act: Act,
    /// Default of `tie_word_embeddings` (Hugging Face; a GGUF is tied iff it has no
    /// `output.weight`).
    pub tie_default: bool,
    /// A learned sink logit per query head (gpt-oss).
    pub sinks: bool,
    /// The experts of the layers whose [`LayerPlan::moe`] is set.
    pub moe: Option<MoeSpec>,
}

/// How the experts of a mixture-of-experts layer are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertLayout {
    /// One `gate_proj` / `up_proj` / `down_proj` `[out, in]` per expert, router `mlp.gate`
    /// (Qwen-MoE).
    PerExpert,
    /// gpt-oss: `mlp.experts.gate_up_proj` `[E, d, 2 d_e]` stored `[in, out]` with gate and up
    /// interleaved along the outputs (gate even, up odd), `down_proj` `[E, d_e, d]`, biases
    /// beside them, router `mlp.router` with a bias.
    FusedInterleaved,
}

/// The mixture-of-experts sub-layers of a decoder.
#[derive(Debug, Clone, Copy)]
pub struct MoeSpec {
    /// Experts $E$.
    pub n_experts: usize,
    /// Experts per token $k$.
    pub top_k: usize,
    /// Expert MLP width.
    pub d_expert: usize,
    /// Router rule.
    pub routing: Routing,
    /// Clamped SwiGLU (gpt-oss), else the model's activation.
    pub clamp: Option<SwigluClamp>,
    /// Tensor layout.
    pub layout: ExpertLayout,
}

impl DecoderSpec {
    /// The plain Llama block of `arch`: SwiGLU, no biases, no extra norms, untied head.
    pub fn llama(arch: Arch) -> Self {
        Self {
            arch,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            qk_norm: false,
            gemma: false,
            fused: false,
            act: Act::Silu,
            tie_default: false,
            sinks: false,
            moe: None,
        }
    }

    /// The Gemma block of `arch` (sandwich norms, tied head), q/k norms iff `qk_norm`.
    pub fn gemma(arch: Arch, act: Act, qk_norm: bool) -> Self {
        Self {
            qk_norm,
            gemma: true,
            act,
            tie_default: true,
            ..Self::llama(arch)
        }
    }
}

/// Per-layer attention geometry decided by the architecture module.
pub struct LayerPlan {
    /// RoPE of the layer.
    pub rope: Rope,
    /// Sliding window.
    pub window: Option<usize>,
    /// The feed-forward sub-layer is the mixture of experts of [`DecoderSpec::moe`].
    pub moe: bool,
}

/// The same RoPE on every layer, with the given per-layer windows.
pub fn same_rope(rope: &Rope, windows: impl IntoIterator<Item = Option<usize>>) -> Vec<LayerPlan> {
    windows
        .into_iter()
        .map(|window| LayerPlan {
            rope: rope.clone(),
            window,
            moe: false,
        })
        .collect()
}

/// What the blocks do not determine: context, logit scale and caps, BOS.
pub struct DecoderHead {
    /// Usable context.
    pub max_context: usize,
    /// Attention logit scale.
    pub attn_scale: f32,
    /// Attention and final logit soft caps.
    pub softcaps: (Option<f32>, Option<f32>),
    /// BOS id.
    pub bos_id: Option<u32>,
    /// Whether the tokenizer adds a BOS by default.
    pub add_bos: bool,
}

/// Where an RMSNorm gain sits.
#[derive(Debug, Clone, Copy)]
pub enum Gain {
    /// Before attention, layer `l`.
    Input(usize),
    /// Per-head on the queries.
    Q(usize),
    /// Per-head on the keys.
    K(usize),
    /// After attention (Gemma).
    PostAttn(usize),
    /// Before the MLP.
    PreFfn(usize),
    /// After the MLP (Gemma).
    PostFfn(usize),
    /// After the last block.
    Final,
}

/// A decoder's tensors, asked for by role.
pub trait DecoderWeights {
    /// The token embedding `[vocab, d]` and `vocab`.
    fn embed(&mut self, d: usize) -> Result<(StoredMatrix, usize), RealError>;
    /// An RMSNorm gain of length `n`, as the forward pass multiplies by it.
    fn gain(&mut self, at: Gain, n: usize) -> Result<Vec<f32>, RealError>;
    /// The q, k and v projections of layer `l` (`hq`, `hk`, `hk` rows, `d` columns).
    fn qkv(&mut self, l: usize, hq: usize, hk: usize, d: usize) -> Result<[Linear; 3], RealError>;
    /// The output projection of layer `l`.
    fn o(&mut self, l: usize, d: usize, hq: usize) -> Result<Linear, RealError>;
    /// The gate and up projections of layer `l` and the MLP width.
    fn gate_up(&mut self, l: usize, d: usize) -> Result<(Linear, Linear, usize), RealError>;
    /// The down projection of layer `l`.
    fn down(&mut self, l: usize, d: usize, dff: usize) -> Result<Linear, RealError>;
    /// The output head (`None` when tied to the embedding).
    fn head(&mut self, vocab: usize, d: usize) -> Result<Option<Linear>, RealError>;
    /// The mixture of experts of layer `l`.
    fn moe(&mut self, l: usize, d: usize, spec: &MoeSpec) -> Result<Moe, RealError>;
    /// The learned sink logits of layer `l`'s `n_head` query heads.
    fn sinks(&mut self, l: usize, n_head: usize) -> Result<Vec<f32>, RealError>;
}

/// The shape every block shares.
#[derive(Debug, Clone, Copy)]
pub struct BlockShape {
    /// Layers.
    pub n_layer: usize,
    /// Width.
    pub d: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_kv: usize,
    /// Head dimension.
    pub dh: usize,
    /// RMSNorm ε.
    pub eps: f32,
}

impl BlockShape {
    /// The shape from its parts.
    pub fn new(n_layer: usize, d: usize, n_head: usize, n_kv: usize, dh: usize, eps: f32) -> Self {
        Self {
            n_layer,
            d,
            n_head,
            n_kv,
            dh,
            eps,
        }
    }
}

/// Builds a Llama-like decoder: one layer per plan.
pub fn decoder<S: DecoderWeights>(
    src: &mut S,
    spec: &DecoderSpec,
    shape: BlockShape,
    plans: Vec<LayerPlan>,
    head: DecoderHead,
) -> Result<Pretrained, RealError> {
    let BlockShape {
        n_layer,
        d,
        n_head,
        n_kv,
        dh,
        eps,
    } = shape;
    let (embed, vocab) = src.embed(d)?;
    let rms = |src: &mut S, at: Gain, n: usize| -> Result<Option<NormLayer>, RealError> {
        Ok(Some(NormLayer::Rms {
            w: src.gain(at, n)?,
            eps,
        }))
    };
    let (hq, hk) = (n_head * dh, n_kv * dh);
    let mut layers = Vec::with_capacity(n_layer);
    for (l, plan) in plans.into_iter().enumerate() {
        let attn_norm = rms(src, Gain::Input(l), d)?;
        let [wq, wk, wv] = src.qkv(l, hq, hk, d)?;
        let wo = src.o(l, d, hq)?;
        let (q_norm, k_norm) = if spec.qk_norm {
            (rms(src, Gain::Q(l), dh)?, rms(src, Gain::K(l), dh)?)
        } else {
            (None, None)
        };
        let post_attn_norm = match spec.gemma {
            true => rms(src, Gain::PostAttn(l), d)?,
            false => None,
        };
        let ffn_norm = rms(src, Gain::PreFfn(l), d)?;
        let post_ffn_norm = match spec.gemma {
            true => rms(src, Gain::PostFfn(l), d)?,
            false => None,
        };
        let ffn = match (plan.moe, &spec.moe) {
            (true, Some(ms)) => Ffn::Moe(Box::new(src.moe(l, d, ms)?)),
            (true, None) => {
                return Err(RealError::Input(format!(
                    "layer {l} is planned as mixture-of-experts but the {:?} spec has no experts",
                    spec.arch
                )));
            }
            (false, _) => {
                let (gate, up, dff) = src.gate_up(l, d)?;
                let down = src.down(l, d, dff)?;
                Ffn::Dense(Mlp {
                    gate: Some(gate),
                    up,
                    down,
                })
            }
        };
        let sinks = match spec.sinks {
            true => Some(src.sinks(l, n_head)?),
            false => None,
        };
        layers.push(Layer {
            attn_norm,
            wq,
            wk,
            wv,
            wo,
            q_norm,
            k_norm,
            post_attn_norm,
            ffn_norm,
            post_ffn_norm,
            ffn,
            sinks,
            rope: Some(plan.rope),
            window: plan.window,
        });
    }
    let final_norm = rms(src, Gain::Final, d)?;
    let lm_head = src.head(vocab, d)?;
    Ok(Pretrained {
        cfg: Config {
            arch: spec.arch,
            n_layer,
            d_model: d,
            n_head,
            n_kv_head: n_kv,
            head_dim: dh,
            vocab,
            max_context: head.max_context,
            causal: true,
            act: spec.act,
            attn_scale: head.attn_scale,
            embed_scale: if spec.gemma { (d as f32).sqrt() } else { 1.0 },
            bos_id: head.bos_id,
            add_bos: head.add_bos,
            post_norm: false,
            attn_softcap: head.softcaps.0,
            final_softcap: head.softcaps.1,
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

/// Rows `r0..r0 + n` of a projection (a block of a fused one).
fn row_block(lin: &Linear, r0: usize, n: usize) -> Linear {
    let d = lin.inp;
    Linear {
        w: lin.w.rows(r0, n),
        out: n,
        inp: d,
        b: lin.b.as_ref().map(|b| b[r0..r0 + n].to_vec()),
    }
}

/// Hyper-parameters every Llama-like decoder reads from `config.json`.
pub struct DecoderDims {
    /// Layers, width, heads, head dimension and RMSNorm ε.
    pub shape: BlockShape,
    /// MLP width.
    pub dff: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// `max_position_embeddings`.
    pub max_pos: usize,
}

impl DecoderDims {
    /// Reads the common keys.
    pub fn read(c: &HfCfg, eps_key: &str, eps_default: f64) -> Result<Self, RealError> {
        let d = c.dim("hidden_size", MAX_DIM)?;
        let n_layer = c.dim("num_hidden_layers", MAX_LAYERS)?;
        let n_head = c.dim("num_attention_heads", MAX_DIM)?;
        let n_kv = c.dim_opt("num_key_value_heads", MAX_DIM)?.unwrap_or(n_head);
        let dff = c.dim("intermediate_size", MAX_DIM)?;
        let vocab = c.dim("vocab_size", MAX_DIM)?;
        let max_pos = c.dim("max_position_embeddings", 1 << 30)?;
        let eps = c.eps_or(eps_key, eps_default)?;
        let dh = match c.dim_opt("head_dim", MAX_DIM)? {
            Some(h) => h,
            None if d.is_multiple_of(n_head) => d / n_head,
            None => {
                return Err(c.err(format!(
                    "hidden_size {d} is not a multiple of num_attention_heads {n_head} and no head_dim is given"
                )));
            }
        };
        if !n_head.is_multiple_of(n_kv) {
            return Err(c.err(format!(
                "num_attention_heads {n_head} is not a multiple of num_key_value_heads {n_kv}"
            )));
        }
        Ok(Self {
            shape: BlockShape::new(n_layer, d, n_head, n_kv, dh, eps),
            dff,
            vocab,
            max_pos,
        })
    }
}

/// A Hugging Face checkpoint's tensors (names `model.layers.{l}.…`).
pub struct HfWeights<'a> {
    w: &'a Checkpoint,
    spec: DecoderSpec,
    vocab: usize,
    dff: usize,
    tie: bool,
}

impl DecoderWeights for HfWeights<'_> {
    fn embed(&mut self, d: usize) -> Result<(StoredMatrix, usize), RealError> {
        let e = self.w.weight("model.embed_tokens.weight", self.vocab, d)?;
        Ok((e, self.vocab))
    }

    fn gain(&mut self, at: Gain, n: usize) -> Result<Vec<f32>, RealError> {
        let name = match at {
            Gain::Input(l) => format!("model.layers.{l}.input_layernorm.weight"),
            Gain::Q(l) => format!("model.layers.{l}.self_attn.q_norm.weight"),
            Gain::K(l) => format!("model.layers.{l}.self_attn.k_norm.weight"),
            Gain::PostAttn(l) => format!("model.layers.{l}.post_attention_layernorm.weight"),
            Gain::PreFfn(l) if self.spec.gemma => {
                format!("model.layers.{l}.pre_feedforward_layernorm.weight")
            }
            Gain::PreFfn(l) => format!("model.layers.{l}.post_attention_layernorm.weight"),
            Gain::PostFfn(l) => format!("model.layers.{l}.post_feedforward_layernorm.weight"),
            Gain::Final => "model.norm.weight".to_string(),
        };
        let v = self.w.shaped(&name, &[n])?;
        Ok(if self.spec.gemma {
            v.into_iter().map(|x| 1.0 + x).collect()
        } else {
            v
        })
    }

    fn qkv(&mut self, l: usize, hq: usize, hk: usize, d: usize) -> Result<[Linear; 3], RealError> {
        let b = format!("model.layers.{l}.self_attn.");
        if self.spec.fused {
            let qkv = self
                .w
                .linear(&format!("{b}qkv_proj"), hq + 2 * hk, d, false)?;
            return Ok([
                row_block(&qkv, 0, hq),
                row_block(&qkv, hq, hk),
                row_block(&qkv, hq + hk, hk),
            ]);
        }
        let bias = self.spec.qkv_bias;
        Ok([
            self.w.linear(&format!("{b}q_proj"), hq, d, bias)?,
            self.w.linear(&format!("{b}k_proj"), hk, d, bias)?,
            self.w.linear(&format!("{b}v_proj"), hk, d, bias)?,
        ])
    }

    fn o(&mut self, l: usize, d: usize, hq: usize) -> Result<Linear, RealError> {
        let name = format!("model.layers.{l}.self_attn.o_proj");
        self.w.linear(&name, d, hq, self.spec.o_bias)
    }

    fn gate_up(&mut self, l: usize, d: usize) -> Result<(Linear, Linear, usize), RealError> {
        let (b, dff) = (format!("model.layers.{l}.mlp."), self.dff);
        if self.spec.fused {
            let gu = self
                .w
                .linear(&format!("{b}gate_up_proj"), 2 * dff, d, false)?;
            return Ok((row_block(&gu, 0, dff), row_block(&gu, dff, dff), dff));
        }
        let bias = self.spec.mlp_bias;
        Ok((
            self.w.linear(&format!("{b}gate_proj"), dff, d, bias)?,
            self.w.linear(&format!("{b}up_proj"), dff, d, bias)?,
            dff,
        ))
    }

    fn down(&mut self, l: usize, d: usize, dff: usize) -> Result<Linear, RealError> {
        let name = format!("model.layers.{l}.mlp.down_proj");
        self.w.linear(&name, d, dff, self.spec.mlp_bias)
    }

    fn head(&mut self, vocab: usize, d: usize) -> Result<Option<Linear>, RealError> {
        if self.tie {
            Ok(None)
        } else {
            Ok(Some(self.w.linear("lm_head", vocab, d, false)?))
        }
    }

    fn moe(&mut self, l: usize, d: usize, ms: &MoeSpec) -> Result<Moe, RealError> {
        let b = format!("model.layers.{l}.mlp.");
        let (ne, de) = (ms.n_experts, ms.d_expert);
        let (router, experts) = match ms.layout {
            ExpertLayout::PerExpert => {
                let router = self.w.linear(&format!("{b}gate"), ne, d, false)?;
                let experts = (0..ne)
                    .map(|e| {
                        let x = format!("{b}experts.{e}.");
                        Ok(Mlp {
                            gate: Some(self.w.linear(&format!("{x}gate_proj"), de, d, false)?),
                            up: self.w.linear(&format!("{x}up_proj"), de, d, false)?,
                            down: self.w.linear(&format!("{x}down_proj"), d, de, false)?,
                        })
                    })
                    .collect::<Result<Vec<_>, RealError>>()?;
                (router, experts)
            }
            ExpertLayout::FusedInterleaved => {
                let router = self.w.linear(&format!("{b}router"), ne, d, true)?;
                // MXFP4 stacks are stored [E, out, in] (rows blocked along the inputs), plain
                // ones [E, in, out].
                let gu_name = format!("{b}experts.gate_up_proj");
                let dn_name = format!("{b}experts.down_proj");
                let (gu, dn) = if self.w.has(&format!("{gu_name}_blocks")) {
                    (
                        self.w.mxfp4_stack(&gu_name, [ne, 2 * de, d])?,
                        self.w.mxfp4_stack(&dn_name, [ne, d, de])?,
                    )
                } else {
                    (
                        self.w.stacked_transposed(&gu_name, [ne, d, 2 * de])?,
                        self.w.stacked_transposed(&dn_name, [ne, de, d])?,
                    )
                };
                let gu_b = self
                    .w
                    .shaped(&format!("{b}experts.gate_up_proj_bias"), &[ne, 2 * de])?;
                let dn_b = self
                    .w
                    .shaped(&format!("{b}experts.down_proj_bias"), &[ne, d])?;
                // Gate rows are the even outputs, up rows the odd ones.
                let experts = gu
                    .into_iter()
                    .zip(dn)
                    .enumerate()
                    .map(|(e, (gu, dn))| {
                        let bias = &gu_b[e * 2 * de..(e + 1) * 2 * de];
                        let half = |k: usize| Linear {
                            w: gu.every_other_row(k),
                            out: de,
                            inp: d,
                            b: Some((0..de).map(|i| bias[2 * i + k]).collect()),
                        };
                        Mlp {
                            gate: Some(half(0)),
                            up: half(1),
                            down: Linear {
                                w: dn,
                                out: d,
                                inp: de,
                                b: Some(dn_b[e * d..(e + 1) * d].to_vec()),
                            },
                        }
                    })
                    .collect();
                (router, experts)
            }
        };
        Ok(Moe {
            router,
            experts,
            top_k: ms.top_k,
            routing: ms.routing,
            clamp: ms.clamp,
        })
    }

    fn sinks(&mut self, l: usize, n_head: usize) -> Result<Vec<f32>, RealError> {
        self.w
            .shaped(&format!("model.layers.{l}.self_attn.sinks"), &[n_head])
    }
}

/// Builds a Llama-like decoder from a Hugging Face checkpoint: the BOS comes from
/// `bos_token_id` (always added), the head is tied per `tie_word_embeddings` unless the
/// checkpoint stores `lm_head.weight` (then that is the head, as in transformers 5.24).
#[allow(clippy::too_many_arguments)]
pub fn decoder_hf(
    c: &HfCfg,
    w: &Checkpoint,
    spec: DecoderSpec,
    dims: &DecoderDims,
    plans: Vec<LayerPlan>,
    max_context: usize,
    attn_scale: f32,
    softcaps: (Option<f32>, Option<f32>),
) -> Result<Pretrained, RealError> {
    // transformers 5.24 ties only a head the checkpoint does not store: an `lm_head.weight`
    // beside `tie_word_embeddings: true` is loaded and used as it is.
    let tie = c.bool_or("tie_word_embeddings", spec.tie_default)? && !w.has("lm_head.weight");
    let bos_id = c
        .get("bos_token_id")
        .and_then(Value::as_u64)
        .filter(|&b| (b as usize) < dims.vocab)
        .map(|v| v as u32);
    let mut src = HfWeights {
        w,
        spec,
        vocab: dims.vocab,
        dff: dims.dff,
        tie,
    };
    let head = DecoderHead {
        max_context,
        attn_scale,
        softcaps,
        bos_id,
        add_bos: true,
    };
    decoder(&mut src, &spec, dims.shape, plans, head)
}

/// The start every SwiGLU family (Llama, Mistral, Qwen2, Qwen3, Phi-3) shares: refuses a
/// quantized checkpoint, reads [`DecoderDims`] and requires `hidden_act` to be SiLU.
pub fn swiglu_dims(c: &HfCfg, family: &str, eps_default: f64) -> Result<DecoderDims, RealError> {
    super::refuse_quantized(c)?;
    swiglu_dims_of_checked(c, family, eps_default)
}

/// [`swiglu_dims`] for a family that has checked its `quantization_config` itself (gpt-oss's
/// MXFP4 experts).
pub fn swiglu_dims_of_checked(
    c: &HfCfg,
    family: &str,
    eps_default: f64,
) -> Result<DecoderDims, RealError> {
    let dims = DecoderDims::read(c, "rms_norm_eps", eps_default)?;
    let why = format!("the {family} MLP is SwiGLU");
    c.require("hidden_act", &Value::from("silu"), &why)?;
    Ok(dims)
}

/// The logit scale $d_h^{-1/2}$.
pub fn plain_scale(dh: usize) -> f32 {
    1.0 / (dh as f32).sqrt()
}

/// A Hugging Face decoder with one RoPE on every layer (from `rope_theta` / `rope_scaling` /
/// `rope_parameters`, base $10^4$ by default) and the given per-layer windows.
pub fn one_rope_hf(
    c: &HfCfg,
    w: &Checkpoint,
    spec: DecoderSpec,
    dims: &DecoderDims,
    windows: Vec<Option<usize>>,
    attn_scale: f32,
    softcaps: (Option<f32>, Option<f32>),
) -> Result<Pretrained, RealError> {
    let (name, p) = super::rope::params(c, None, 10000.0)?;
    let (r, ctx) = super::rope::build(c, &name, &p, dims.shape.dh, dims.max_pos)?;
    let plans = same_rope(&r, windows);
    decoder_hf(c, w, spec, dims, plans, ctx, attn_scale, softcaps)
}

/// Refuses GGUF metadata under `<arch>.` that is neither in [`GGUF_DECODER_KEYS`] nor in
/// the architecture's own list `extra`.
pub fn check_gguf_keys(g: &GgufFile, arch: &str, extra: &[&str]) -> Result<(), RealError> {
    let pre = format!("{arch}.");
    for k in g.content().metadata.keys() {
        if let Some(rest) = k.strip_prefix(&pre)
            && !GGUF_DECODER_KEYS.contains(&rest)
            && !extra.contains(&rest)
        {
            return Err(g.err(format!(
                "metadata `{k}` is not known to the {arch} loader and may change the forward \
                 pass; refusing rather than guessing"
            )));
        }
    }
    Ok(())
}

/// The dimensions of a Llama-like GGUF, checked before anything is allocated.
pub struct GgufDims {
    /// Layers, width, heads, head dimension and RMSNorm ε.
    pub shape: BlockShape,
    /// Context length.
    pub ctx: usize,
    /// RoPE base θ.
    pub base: f32,
}

impl GgufDims {
    /// Reads and range-checks the common metadata of `<arch>.`.
    pub fn read(g: &GgufFile, arch: &str) -> Result<Self, RealError> {
        let k = |s: &str| format!("{arch}.{s}");
        let bounded = |key: &str, max: usize| -> Result<usize, RealError> {
            let v = g.meta_usize(key)?;
            if v == 0 || v > max {
                return Err(g.err(format!("metadata `{key}` = {v} is not in 1..={max}")));
            }
            Ok(v)
        };
        let n_layer = bounded(&k("block_count"), MAX_LAYERS)?;
        let d = bounded(&k("embedding_length"), MAX_DIM)?;
        let n_head = bounded(&k("attention.head_count"), MAX_DIM)?;
        let n_kv = match g.meta(&k("attention.head_count_kv")) {
            Some(_) => bounded(&k("attention.head_count_kv"), MAX_DIM)?,
            None => n_head,
        };
        let dh = match g.meta(&k("attention.key_length")) {
            Some(_) => bounded(&k("attention.key_length"), MAX_DIM)?,
            None => d / n_head,
        };
        if let Some(v) = g.meta(&k("attention.value_length"))
            && value_usize(v) != Some(dh)
        {
            return Err(g.err(format!(
                "metadata `{}` = {v:?} differs from the key length {dh} (not supported)",
                k("attention.value_length")
            )));
        }
        let ctx = bounded(&k("context_length"), 1 << 30)?;
        // Tensors for every declared block must exist (checked before any allocation).
        for l in [0, n_layer - 1] {
            let name = format!("blk.{l}.attn_norm.weight");
            if !g.has(&name) {
                return Err(g.err(format!(
                    "metadata `{}` = {n_layer}, but tensor `{name}` is missing",
                    k("block_count")
                )));
            }
        }
        let eps_key = k("attention.layer_norm_rms_epsilon");
        let eps = g.meta_f32_or(&eps_key, 1e-6)?;
        if !(eps.is_finite() && eps > 0.0) {
            return Err(g.err(format!(
                "metadata `{eps_key}` = {eps} must be finite and > 0"
            )));
        }
        let base_key = k("rope.freq_base");
        let base = g.meta_f32_or(&base_key, 10000.0)?;
        if !(base.is_finite() && base > 1.0) {
            return Err(g.err(format!(
                "metadata `{base_key}` = {base} must be finite and > 1"
            )));
        }
        if let Some(v) = g.meta(&k("rope.dimension_count"))
            && value_usize(v) != Some(dh)
        {
            return Err(g.err(format!(
                "metadata `{}` = {v:?}: partial rotary (≠ head dim {dh}) is not supported for GGUF",
                k("rope.dimension_count")
            )));
        }
        Ok(Self {
            shape: BlockShape::new(n_layer, d, n_head, n_kv, dh, eps),
            ctx,
            base,
        })
    }
}

/// A GGUF file's tensors (names `blk.{l}.…`, llama.cpp's layout): gains stored as the
/// multiplier (Gemma's `+1` already added), biases where the file has them, the MLP width and
/// vocabulary taken from the tensor shapes, tied iff there is no `output.weight`.
pub struct GgufWeights<'a> {
    g: &'a mut GgufFile,
    /// llama.cpp's name of the norm before the feed-forward sub-layer: `ffn_norm`, or
    /// gpt-oss's `post_attention_norm` (its converter maps `post_attention_layernorm` there).
    ffn_norm: &'static str,
}

impl GgufWeights<'_> {
    /// The row count of a `[rows, d]` tensor, checked before it is read.
    fn rows(&self, name: &str, d: usize, what: &str) -> Result<usize, RealError> {
        let dims = match self.g.content().tensor_infos.get(name) {
            Some(t) => t.shape.dims().to_vec(),
            None => return Err(self.g.err(format!("missing tensor `{name}`"))),
        };
        if dims.len() != 2 || dims[1] != d {
            return Err(self
                .g
                .err(format!("{name} has shape {dims:?}, expected [{what}, {d}]")));
        }
        Ok(dims[0])
    }
}

impl DecoderWeights for GgufWeights<'_> {
    fn embed(&mut self, d: usize) -> Result<(StoredMatrix, usize), RealError> {
        let vocab = self.rows("token_embd.weight", d, "vocab")?;
        Ok((self.g.matrix("token_embd.weight", vocab, d)?, vocab))
    }

    fn gain(&mut self, at: Gain, n: usize) -> Result<Vec<f32>, RealError> {
        let name = match at {
            Gain::Input(l) => format!("blk.{l}.attn_norm.weight"),
            Gain::Q(l) => format!("blk.{l}.attn_q_norm.weight"),
            Gain::K(l) => format!("blk.{l}.attn_k_norm.weight"),
            Gain::PostAttn(l) => format!("blk.{l}.post_attention_norm.weight"),
            Gain::PreFfn(l) => format!("blk.{l}.{}.weight", self.ffn_norm),
            Gain::PostFfn(l) => format!("blk.{l}.post_ffw_norm.weight"),
            Gain::Final => "output_norm.weight".to_string(),
        };
        self.g.vector(&name, n)
    }

    fn qkv(&mut self, l: usize, hq: usize, hk: usize, d: usize) -> Result<[Linear; 3], RealError> {
        Ok([
            self.g.linear(&format!("blk.{l}.attn_q"), hq, d)?,
            self.g.linear(&format!("blk.{l}.attn_k"), hk, d)?,
            self.g.linear(&format!("blk.{l}.attn_v"), hk, d)?,
        ])
    }

    fn o(&mut self, l: usize, d: usize, hq: usize) -> Result<Linear, RealError> {
        self.g.linear(&format!("blk.{l}.attn_output"), d, hq)
    }

    fn gate_up(&mut self, l: usize, d: usize) -> Result<(Linear, Linear, usize), RealError> {
        let dff = self.rows(&format!("blk.{l}.ffn_up.weight"), d, "d_ff")?;
        let up = self.g.linear(&format!("blk.{l}.ffn_up"), dff, d)?;
        let gate = self.g.linear(&format!("blk.{l}.ffn_gate"), dff, d)?;
        Ok((gate, up, dff))
    }

    fn down(&mut self, l: usize, d: usize, dff: usize) -> Result<Linear, RealError> {
        self.g.linear(&format!("blk.{l}.ffn_down"), d, dff)
    }

    fn head(&mut self, vocab: usize, d: usize) -> Result<Option<Linear>, RealError> {
        if self.g.has("output.weight") {
            Ok(Some(self.g.linear("output", vocab, d)?))
        } else {
            Ok(None)
        }
    }

    /// llama.cpp's layout: router `ffn_gate_inp` `[E, d]` (bias where the file has one), the
    /// experts stacked `ffn_{gate,up}_exps` `[E, d_e, d]` (or fused `ffn_gate_up_exps`
    /// `[E, 2 d_e, d]`, gate rows first) and `ffn_down_exps` `[E, d, d_e]`, biases `[E, ·]`
    /// beside them where present; each expert's matrices are row blocks of the stacks.
    fn moe(&mut self, l: usize, d: usize, ms: &MoeSpec) -> Result<Moe, RealError> {
        let (ne, de) = (ms.n_experts, ms.d_expert);
        let p = |x: &str| format!("blk.{l}.{x}");
        let router = self.g.linear(&p("ffn_gate_inp"), ne, d)?;
        let g = &*self.g;
        let stack =
            |name: &str, rows: usize, cols: usize| -> Result<Vec<StoredMatrix>, RealError> {
                let (w, dims) = g.weight(name)?;
                if dims != [ne, rows, cols] {
                    return Err(g.err(format!(
                        "tensor `{name}` has shape {dims:?}, expected [{ne}, {rows}, {cols}] \
                     ({ne} experts)"
                    )));
                }
                Ok((0..ne).map(|e| w.rows(e * rows, rows)).collect())
            };
        let bias = |name: &str, n: usize| -> Result<Option<Vec<Vec<f32>>>, RealError> {
            if !g.has(name) {
                return Ok(None);
            }
            let (b, dims) = g.tensor(name)?;
            if dims != [ne, n] {
                return Err(g.err(format!(
                    "tensor `{name}` has shape {dims:?}, expected [{ne}, {n}]"
                )));
            }
            Ok(Some(b.chunks(n).map(<[f32]>::to_vec).collect()))
        };
        let fused = p("ffn_gate_up_exps.weight");
        let (gate, up, gate_b, up_b) = if g.has(&fused) {
            let gu = stack(&fused, 2 * de, d)?;
            let gu_b = bias(&p("ffn_gate_up_exps.bias"), 2 * de)?;
            let half =
                |k: usize| -> Vec<StoredMatrix> { gu.iter().map(|m| m.rows(k * de, de)).collect() };
            let half_b = |k: usize| {
                gu_b.as_ref().map(|b| {
                    b.iter()
                        .map(|v| v[k * de..(k + 1) * de].to_vec())
                        .collect::<Vec<_>>()
                })
            };
            (half(0), half(1), half_b(0), half_b(1))
        } else {
            (
                stack(&p("ffn_gate_exps.weight"), de, d)?,
                stack(&p("ffn_up_exps.weight"), de, d)?,
                bias(&p("ffn_gate_exps.bias"), de)?,
                bias(&p("ffn_up_exps.bias"), de)?,
            )
        };
        let down = stack(&p("ffn_down_exps.weight"), d, de)?;
        let down_b = bias(&p("ffn_down_exps.bias"), d)?;
        let pick = |b: &Option<Vec<Vec<f32>>>, e: usize| b.as_ref().map(|b| b[e].clone());
        let experts = gate
            .into_iter()
            .zip(up)
            .zip(down)
            .enumerate()
            .map(|(e, ((gw, uw), dw))| Mlp {
                gate: Some(Linear {
                    w: gw,
                    out: de,
                    inp: d,
                    b: pick(&gate_b, e),
                }),
                up: Linear {
                    w: uw,
                    out: de,
                    inp: d,
                    b: pick(&up_b, e),
                },
                down: Linear {
                    w: dw,
                    out: d,
                    inp: de,
                    b: pick(&down_b, e),
                },
            })
            .collect();
        Ok(Moe {
            router,
            experts,
            top_k: ms.top_k,
            routing: ms.routing,
            clamp: ms.clamp,
        })
    }

    /// llama.cpp's `attn_sinks.weight` `[H]`.
    fn sinks(&mut self, l: usize, n_head: usize) -> Result<Vec<f32>, RealError> {
        self.g.vector(&format!("blk.{l}.attn_sinks.weight"), n_head)
    }
}

/// The expert width $d_e$ of a mixture-of-experts GGUF: `<arch>.expert_feed_forward_length`
/// when given, checked against the stacked expert tensors of layer `l`
/// (`ffn_gate_exps` `[E, d_e, d]` or `ffn_gate_up_exps` `[E, 2 d_e, d]`), else read from them.
pub fn gguf_expert_width(g: &GgufFile, arch: &str, l: usize) -> Result<usize, RealError> {
    let infos = &g.content().tensor_infos;
    let of = |n: &str| infos.get(n).map(|t| t.shape.dims().to_vec());
    let shape = match (
        of(&format!("blk.{l}.ffn_gate_exps.weight")),
        of(&format!("blk.{l}.ffn_gate_up_exps.weight")),
    ) {
        (Some(s), _) if s.len() == 3 => Some(s[1]),
        (None, Some(s)) if s.len() == 3 && s[1] % 2 == 0 => Some(s[1] / 2),
        _ => None,
    };
    let key = format!("{arch}.expert_feed_forward_length");
    let declared = g.meta_int_opt(&key, MAX_DIM as u64)?.map(|v| v as usize);
    match (declared, shape) {
        (Some(k), Some(s)) if k != s => Err(g.err(format!(
            "metadata `{key}` = {k}, but layer {l}'s expert tensors are {s} wide"
        ))),
        (Some(0), _) => Err(g.err(format!("metadata `{key}` = 0"))),
        (Some(k), _) | (None, Some(k)) => Ok(k),
        (None, None) => Err(g.err(format!(
            "layer {l}: no `{key}` and no expert tensor `blk.{l}.ffn_gate_exps.weight`"
        ))),
    }
}

/// The expert count and experts per token of a mixture-of-experts GGUF
/// (`<arch>.expert_count`, `<arch>.expert_used_count`, $1 \le k \le E$), refusing an
/// `<arch>.expert_weights_scale` other than 1 (a multiplier of the routing weights that the
/// families here do not have).
pub fn gguf_experts(g: &GgufFile, arch: &str) -> Result<(usize, usize), RealError> {
    let k = |s: &str| format!("{arch}.{s}");
    let ne = g.meta_usize(&k("expert_count"))?;
    let used = g.meta_usize(&k("expert_used_count"))?;
    if ne == 0 || ne > MAX_DIM || used == 0 || used > ne {
        return Err(g.err(format!(
            "metadata `{}` = {ne} and `{}` = {used}: need 1 ≤ used ≤ count",
            k("expert_count"),
            k("expert_used_count")
        )));
    }
    let sk = k("expert_weights_scale");
    if g.meta(&sk).is_some() {
        let s = g.meta_f32_or(&sk, 1.0)?;
        if s != 1.0 {
            return Err(g.err(format!(
                "metadata `{sk}` = {s}: scaled routing weights are not implemented for {arch}"
            )));
        }
    }
    Ok((ne, used))
}

/// Builds a Llama-like decoder from a GGUF file in file order (q/k rows as stored): BOS per
/// `tokenizer.ggml.*` (added by default iff `add_bos_default`), logit scale $d_h^{-1/2}$, no
/// soft caps.
pub fn decoder_gguf(
    g: &mut GgufFile,
    spec: DecoderSpec,
    dims: &GgufDims,
    plans: Vec<LayerPlan>,
    add_bos_default: bool,
) -> Result<Pretrained, RealError> {
    let (bos_id, add_bos) = g.bos(add_bos_default)?;
    let head = DecoderHead {
        max_context: dims.ctx,
        attn_scale: 1.0 / (dims.shape.dh as f32).sqrt(),
        softcaps: (None, None),
        bos_id,
        add_bos,
    };
    let ffn_norm = if spec.arch == Arch::GptOss {
        "post_attention_norm"
    } else {
        "ffn_norm"
    };
    decoder(
        &mut GgufWeights { g, ffn_norm },
        &spec,
        dims.shape,
        plans,
        head,
    )
}

#[cfg(test)]
mod tests {
    use super::super::{HF_TYPES, keys_of};
    use std::collections::BTreeSet;

    /// A family lists only its own keys: none repeats a shared one (or its own), so that the
    /// union `keys_of` is what each module declares once.
    #[test]
    fn no_family_lists_a_key_twice() {
        for t in HF_TYPES {
            let keys = keys_of(t).unwrap();
            let set: BTreeSet<_> = keys.iter().collect();
            assert_eq!(
                set.len(),
                keys.len(),
                "{t}: a key is listed twice: {keys:?}"
            );
        }
    }
}
