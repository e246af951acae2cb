//! The in-memory model: architecture description and weights, independent of the file
//! format it came from (GGUF or safetensors). Projection matrices and the token embedding
//! stay in their storage format ([`StoredMatrix`]: f32, f16/bf16, or quantized ggml blocks);
//! norms, biases and position embeddings are f32.
//!
//! StoredMatrix matrices are row-major `[out, in]` (PyTorch's `nn.Linear` layout), so a projection
//! is `y = x Wᵀ + b` for a row-major activation `x ∈ R^{T×in}`. Q/K rows are stored in the
//! Hugging Face order (rotary pairs `(j, j + d_rot/2)`): the Llama-family GGUF loader undoes
//! llama.cpp's interleaving (see [`super::arch`]).

use super::RealError;
use super::moe::{Routing, SwigluClamp};
pub use super::weights::{Matmul, StoredMatrix};
use std::path::Path;

/// Model family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Arch {
    /// Llama family (Llama 1–3.x, Mistral): pre-RMSNorm, RoPE, SwiGLU, GQA.
    Llama,
    /// Qwen2 / Qwen2.5: the Llama block with q/k/v biases.
    Qwen2,
    /// Qwen3: the Llama block with per-head q/k RMSNorm.
    Qwen3,
    /// Qwen3-MoE: the Qwen3 block with mixture-of-experts feed-forward layers.
    Qwen3Moe,
    /// gpt-oss: learned per-head sink logits, attention biases, alternating sliding-window
    /// layers, YaRN RoPE, mixture-of-experts with a clamped SwiGLU.
    GptOss,
    /// Gemma 2: sandwich norms, `1 + w` gains, attention and final-logit soft-capping,
    /// alternating sliding-window layers.
    Gemma2,
    /// Phi-3: the Llama block with fused qkv / gate-up projections and partial rotary.
    Phi3,
    /// Gemma 3: q/k RMSNorm, sandwich norms, GELU(tanh) gated MLP, local/global RoPE, scaled embeddings.
    Gemma3,
    /// GPT-2: pre-LayerNorm, learned positions, GELU(tanh) MLP, biases everywhere.
    Gpt2,
    /// BERT encoder: post-LayerNorm, bidirectional attention, learned positions, GELU(erf).
    Bert,
}

/// Normalisation layer.
#[derive(Debug, Clone)]
pub enum NormLayer {
    /// `x · w / sqrt(mean(x²) + eps)`.
    Rms {
        /// Gain (for Gemma it already includes the `+1`).
        w: Vec<f32>,
        /// ε.
        eps: f32,
    },
    /// `(x − mean) / sqrt(var + eps) · w + b`.
    Layer {
        /// Gain.
        w: Vec<f32>,
        /// Bias.
        b: Vec<f32>,
        /// ε.
        eps: f32,
    },
}

impl NormLayer {
    /// Normalises each row of a row-major `[rows, w.len()]` buffer in place.
    pub fn apply(&self, x: &mut [f32]) {
        match self {
            NormLayer::Rms { w, eps } => {
                for row in x.chunks_mut(w.len()) {
                    let ms = row.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
                    let r = 1.0 / (ms + eps).sqrt();
                    for (v, g) in row.iter_mut().zip(w) {
                        *v = *v * r * g;
                    }
                }
            }
            NormLayer::Layer { w, b, eps } => {
                let n = w.len() as f32;
                for row in x.chunks_mut(w.len()) {
                    let mean = row.iter().sum::<f32>() / n;
                    let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
                    let r = 1.0 / (var + eps).sqrt();
                    for ((v, g), c) in row.iter_mut().zip(w).zip(b) {
                        *v = (*v - mean) * r * g + c;
                    }
                }
            }
        }
    }
    /// Width.
    pub fn dim(&self) -> usize {
        match self {
            NormLayer::Rms { w, .. } | NormLayer::Layer { w, .. } => w.len(),
        }
    }
}

/// A dense projection `y = x Wᵀ + b`, `W` row-major `[out, in]`.
#[derive(Debug, Clone)]
pub struct Linear {
    /// StoredMatrix, row-major `[out, in]`, in its storage format.
    pub w: StoredMatrix,
    /// Output width.
    pub out: usize,
    /// Input width.
    pub inp: usize,
    /// Optional bias of length `out`.
    pub b: Option<Vec<f32>>,
}

/// MLP nonlinearity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Act {
    /// `x σ(x)`.
    Silu,
    /// GELU, tanh approximation.
    GeluTanh,
    /// GELU, exact (erf).
    GeluErf,
}

/// Rotary position embedding of one layer (Hugging Face "half-split" convention on the first
/// `dim` coordinates of each head: pairs `(j, j + dim/2)` rotated by angle `p·ω_j`).
#[derive(Debug, Clone)]
pub struct Rope {
    /// Inverse frequencies `ω_j`, `j < dim/2` (after any scaling rule).
    pub inv_freq: Vec<f32>,
    /// Number of rotated coordinates per head (`d_head`, or less with partial rotary).
    pub dim: usize,
    /// Multiplier of cos and sin (YaRN's attention factor; 1 otherwise).
    pub attn_factor: f32,
    /// Dynamic NTK scaling: recompute `ω` from the sequence length when it exceeds the
    /// original context.
    pub dynamic: Option<DynamicNtk>,
}

/// Parameters of dynamic NTK RoPE scaling (transformers' `rope_type: dynamic`).
#[derive(Debug, Clone, Copy)]
pub struct DynamicNtk {
    /// Base θ.
    pub base: f32,
    /// Scaling factor.
    pub factor: f32,
    /// `max_position_embeddings` the rule is relative to.
    pub max_pos: usize,
}

impl Rope {
    /// Default RoPE: `ω_j = θ^{-2j/dim}`.
    pub fn plain(base: f32, dim: usize) -> Self {
        Rope {
            inv_freq: default_inv_freq(base, dim),
            dim,
            attn_factor: 1.0,
            dynamic: None,
        }
    }
    /// The inverse frequencies in force for a sequence of `seq_len` positions.
    pub fn inv_freq_at(&self, seq_len: usize) -> std::borrow::Cow<'_, [f32]> {
        match self.dynamic {
            Some(dy) if seq_len > dy.max_pos => {
                // θ' = θ·(f·L/L₀ − (f − 1))^{dim/(dim−2)}
                let r = dy.factor * seq_len as f32 / dy.max_pos as f32 - (dy.factor - 1.0);
                let base = dy.base * r.powf(self.dim as f32 / (self.dim as f32 - 2.0));
                std::borrow::Cow::Owned(default_inv_freq(base, self.dim))
            }
            _ => std::borrow::Cow::Borrowed(&self.inv_freq),
        }
    }
}

/// `ω_j = 1 / θ^{2j/dim}` in f32, as transformers computes it.
pub fn default_inv_freq(base: f32, dim: usize) -> Vec<f32> {
    (0..dim / 2)
        .map(|j| 1.0 / base.powf((2 * j) as f32 / dim as f32))
        .collect()
}

/// A dense MLP: $W_{down}(\mathrm{act}(W_{gate} x) \odot W_{up} x)$ when gated, else
/// $W_{down}\thinspace\mathrm{act}(W_{up} x)$.
#[derive(Debug, Clone)]
pub struct Mlp {
    /// Gate projection of a gated MLP.
    pub gate: Option<Linear>,
    /// Up projection.
    pub up: Linear,
    /// Down projection.
    pub down: Linear,
}

impl Mlp {
    /// The projections with their names (`gate`, `up`, `down`).
    pub fn linears(&self) -> Vec<(&'static str, &Linear)> {
        let mut v: Vec<(&'static str, &Linear)> = self.gate.iter().map(|g| ("gate", g)).collect();
        v.push(("up", &self.up));
        v.push(("down", &self.down));
        v
    }

    /// The projections, mutable.
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v: Vec<&mut Linear> = self.gate.iter_mut().collect();
        v.push(&mut self.up);
        v.push(&mut self.down);
        v
    }

    /// Each projection with its name (prefixed by `pre`) and expected `[out, in]` shape for
    /// width `d`: up and gate `[d_ff, d]`, down `[d, d_ff]` with $d_{ff}$ the up projection's.
    fn shape_checks<'a>(&'a self, pre: &str, d: usize) -> Vec<(String, &'a Linear, usize, usize)> {
        let dff = self.up.out;
        let mut v = vec![
            (format!("{pre}up"), &self.up, dff, d),
            (format!("{pre}down"), &self.down, d, dff),
        ];
        if let Some(g) = &self.gate {
            v.push((format!("{pre}gate"), g, dff, d));
        }
        v
    }
}

/// A mixture-of-experts sub-layer ([`super::moe`]).
#[derive(Debug, Clone)]
pub struct Moe {
    /// Router `[E, d]` (with gpt-oss's bias).
    pub router: Linear,
    /// The experts, each a gated MLP (`gate` present) `d → d_e → d`.
    pub experts: Vec<Mlp>,
    /// Experts per row, $1 \le k \le E$.
    pub top_k: usize,
    /// Weights from logits.
    pub routing: Routing,
    /// The experts' gating: gpt-oss's clamped SwiGLU, or (None) the model's activation
    /// applied as `act(gate) ⊙ up`.
    pub clamp: Option<SwigluClamp>,
}

impl Moe {
    /// Number of experts $E$.
    pub fn n_experts(&self) -> usize {
        self.experts.len()
    }
}

/// The feed-forward sub-layer of a block.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per layer, beside larger attention weights
pub enum Ffn {
    /// One MLP.
    Dense(Mlp),
    /// A mixture of experts ([`super::moe`]).
    Moe(Box<Moe>),
}

impl Ffn {
    /// Every projection with its name (`up`, `router`, `expert 3 gate`, …).
    pub fn linears(&self) -> Vec<(String, &Linear)> {
        match self {
            Ffn::Dense(m) => m
                .linears()
                .into_iter()
                .map(|(n, l)| (n.to_string(), l))
                .collect(),
            Ffn::Moe(moe) => {
                let mut v = vec![("router".to_string(), &moe.router)];
                for (e, m) in moe.experts.iter().enumerate() {
                    v.extend(
                        m.linears()
                            .into_iter()
                            .map(|(n, l)| (format!("expert {e} {n}"), l)),
                    );
                }
                v
            }
        }
    }

    /// Every projection, mutable.
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        match self {
            Ffn::Dense(m) => m.linears_mut(),
            Ffn::Moe(moe) => {
                let mut v = vec![&mut moe.router];
                for m in &mut moe.experts {
                    v.extend(m.linears_mut());
                }
                v
            }
        }
    }

    /// The dense MLP, if this is one.
    pub fn dense(&self) -> Option<&Mlp> {
        match self {
            Ffn::Dense(m) => Some(m),
            Ffn::Moe(_) => None,
        }
    }
}

/// One transformer block.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Pre-attention norm (None for post-norm BERT).
    pub attn_norm: Option<NormLayer>,
    /// Query projection `[H·d_head, d]`.
    pub wq: Linear,
    /// Key projection `[H_kv·d_head, d]`.
    pub wk: Linear,
    /// Value projection `[H_kv·d_head, d]`.
    pub wv: Linear,
    /// Output projection `[d, H·d_head]`.
    pub wo: Linear,
    /// Per-head RMSNorm on queries (Gemma 3).
    pub q_norm: Option<NormLayer>,
    /// Per-head RMSNorm on keys (Gemma 3).
    pub k_norm: Option<NormLayer>,
    /// Norm applied to the attention output before the residual add (Gemma 3), or after the add (BERT).
    pub post_attn_norm: Option<NormLayer>,
    /// Pre-MLP norm.
    pub ffn_norm: Option<NormLayer>,
    /// Norm on the MLP output before the residual add (Gemma 3), or after the add (BERT).
    pub post_ffn_norm: Option<NormLayer>,
    /// Feed-forward sub-layer.
    pub ffn: Ffn,
    /// Learned sink logit $s_h$ of each query head (gpt-oss): the softmax of a row runs over
    /// the visible logits and $s_h$, whose column is dropped, so a row of the map sums to
    /// $1 - p_{sink}$ with $p_{sink} = e^{s_h} / (e^{s_h} + \sum_j e^{z_j})$.
    pub sinks: Option<Vec<f32>>,
    /// Rotary embedding, if any.
    pub rope: Option<Rope>,
    /// Sliding window: key j visible from query i iff i − j < window.
    pub window: Option<usize>,
}

/// Architecture hyper-parameters.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Config {
    /// Family.
    pub arch: Arch,
    /// Number of layers L.
    pub n_layer: usize,
    /// Residual width d.
    pub d_model: usize,
    /// Query heads H.
    pub n_head: usize,
    /// Key/value heads H_kv (grouped-query attention when < H).
    pub n_kv_head: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Maximum context length.
    pub max_context: usize,
    /// Causal (decoder) or bidirectional (encoder).
    pub causal: bool,
    /// MLP activation.
    pub act: Act,
    /// Logit scale `1/sqrt(d_head)` (Gemma: `query_pre_attn_scalar^{-1/2}`).
    pub attn_scale: f32,
    /// Multiplier of the token embeddings (Gemma: √d).
    pub embed_scale: f32,
    /// BOS token id.
    pub bos_id: Option<u32>,
    /// Whether the tokenizer adds BOS by default.
    pub add_bos: bool,
    /// Post-norm block (BERT): norms after the residual adds.
    pub post_norm: bool,
    /// Attention-logit soft cap `c`: logits become `c·tanh(s/c)` before the mask (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Final-logit soft cap (Gemma 2).
    pub final_softcap: Option<f32>,
}

impl Config {
    /// A classic multi-head block (BERT, GPT-2): $H_{kv} = H$ heads of width $d/H$, logit scale
    /// $1/\sqrt{d/H}$, no embedding scale, soft caps or post-norm; bidirectional, with no BOS
    /// (callers set what differs).
    pub fn multi_head(
        arch: Arch,
        n_layer: usize,
        d: usize,
        n_head: usize,
        vocab: usize,
        max_context: usize,
        act: Act,
    ) -> Self {
        Config {
            arch,
            n_layer,
            d_model: d,
            n_head,
            n_kv_head: n_head,
            head_dim: d / n_head,
            vocab,
            max_context,
            causal: false,
            act,
            attn_scale: 1.0 / ((d / n_head) as f32).sqrt(),
            embed_scale: 1.0,
            bos_id: None,
            add_bos: false,
            post_norm: false,
            attn_softcap: None,
            final_softcap: None,
        }
    }
}

/// A loaded model.
#[derive(Debug, Clone)]
pub struct Pretrained {
    /// Hyper-parameters.
    pub cfg: Config,
    /// Token embeddings, row-major `[vocab, d]`, in their storage format (a lookup
    /// dequantizes only the rows it needs).
    pub embed: StoredMatrix,
    /// Learned absolute positions, row-major `[max_context, d]`.
    pub pos_embed: Option<Vec<f32>>,
    /// Token-type-0 embedding (BERT), length d.
    pub type_embed: Option<Vec<f32>>,
    /// Norm right after the embeddings (BERT).
    pub embed_norm: Option<NormLayer>,
    /// Blocks.
    pub layers: Vec<Layer>,
    /// Final norm before the LM head (decoders).
    pub final_norm: Option<NormLayer>,
    /// LM head `[vocab, d]`; None with a decoder means tied to `embed`.
    pub lm_head: Option<Linear>,
    /// Has a language-model head (decoders).
    pub has_lm_head: bool,
    /// How projections with quantized weights are computed ([`Matmul::Exact`] unless asked).
    pub matmul: Matmul,
}

impl Pretrained {
    /// Converts every projection matrix and the embedding to f32 storage (the pre-quantized
    /// representation: ≈ 4 bytes per weight resident, no dequantization per product). Exact-mode
    /// results are unchanged up to f32 summation order; T = 1 decoding is faster when memory allows.
    pub fn make_f32_resident(&mut self) {
        self.embed.f32_mut();
        for ly in &mut self.layers {
            for l in [&mut ly.wq, &mut ly.wk, &mut ly.wv, &mut ly.wo] {
                l.w.f32_mut();
            }
            for l in ly.ffn.linears_mut() {
                l.w.f32_mut();
            }
        }
        if let Some(h) = &mut self.lm_head {
            h.w.f32_mut();
        }
    }

    /// Number of elements of every projection matrix and the embedding (what
    /// [`Pretrained::make_f32_resident`] turns into 4 bytes each).
    pub fn matrix_elements(&self) -> usize {
        let mut n = self.embed.len();
        for ly in &self.layers {
            n += ly.wq.w.len() + ly.wk.w.len() + ly.wv.w.len() + ly.wo.w.len();
            n += ly
                .ffn
                .linears()
                .iter()
                .map(|(_, l)| l.w.len())
                .sum::<usize>();
        }
        n + self.lm_head.as_ref().map_or(0, |h| h.w.len())
    }

    /// Every projection matrix with its name (`layer l: q projection`, …), the embedding and
    /// a separate head included.
    pub fn matrices(&self) -> Vec<(String, &StoredMatrix)> {
        let mut v = vec![("token embedding".to_string(), &self.embed)];
        for (l, ly) in self.layers.iter().enumerate() {
            for (what, m) in [
                ("q", &ly.wq),
                ("k", &ly.wk),
                ("v", &ly.wv),
                ("output", &ly.wo),
            ] {
                v.push((format!("layer {l}: {what} projection"), &m.w));
            }
            for (what, m) in ly.ffn.linears() {
                v.push((format!("layer {l}: {what} projection"), &m.w));
            }
        }
        if let Some(h) = &self.lm_head {
            v.push(("output head".to_string(), &h.w));
        }
        v
    }

    /// Checks shapes and finiteness; `path` names the file in the error.
    pub fn validate(&self, path: &Path) -> Result<(), RealError> {
        let c = &self.cfg;
        let bad = |m: String| Err(RealError::file(path, m));
        if c.n_layer == 0 || c.d_model == 0 || c.n_head == 0 || c.n_kv_head == 0 || c.head_dim == 0
        {
            return bad(format!("degenerate configuration {c:?}"));
        }
        if !c.n_head.is_multiple_of(c.n_kv_head) {
            return bad(format!(
                "{} query heads not a multiple of {} kv heads",
                c.n_head, c.n_kv_head
            ));
        }
        if self.embed.n_rows() != c.vocab || self.embed.n_cols() != c.d_model {
            return bad(format!(
                "token embedding is [{}, {}], expected vocab {} × d {}",
                self.embed.n_rows(),
                self.embed.n_cols(),
                c.vocab,
                c.d_model
            ));
        }
        if self.layers.len() != c.n_layer {
            return bad(format!(
                "{} layers loaded, configuration says {}",
                self.layers.len(),
                c.n_layer
            ));
        }
        let (d, hq, hk) = (c.d_model, c.n_head * c.head_dim, c.n_kv_head * c.head_dim);
        for (l, ly) in self.layers.iter().enumerate() {
            let mut checks: Vec<(String, &Linear, usize, usize)> = vec![
                ("q".into(), &ly.wq, hq, d),
                ("k".into(), &ly.wk, hk, d),
                ("v".into(), &ly.wv, hk, d),
                ("o".into(), &ly.wo, d, hq),
            ];
            match &ly.ffn {
                Ffn::Dense(m) => checks.extend(m.shape_checks("", d)),
                Ffn::Moe(moe) => {
                    let e = moe.experts.len();
                    if e == 0 || moe.top_k == 0 || moe.top_k > e {
                        return bad(format!(
                            "layer {l}: {} experts, {} per token: need 1 ≤ k ≤ E",
                            e, moe.top_k
                        ));
                    }
                    if moe.experts.iter().any(|m| m.gate.is_none()) {
                        return bad(format!("layer {l}: an expert has no gate projection"));
                    }
                    for (i, m) in moe.experts.iter().enumerate() {
                        checks.extend(m.shape_checks(&format!("expert {i} "), d));
                    }
                    checks.push(("router".into(), &moe.router, e, d));
                }
            }
            for (name, lin, o, i) in checks {
                if lin.out != o
                    || lin.inp != i
                    || lin.w.n_rows() != o
                    || lin.w.n_cols() != i
                    || lin.b.as_ref().is_some_and(|b| b.len() != o)
                {
                    return bad(format!(
                        "layer {l}: {name} projection is [{}, {}], expected [{o}, {i}]",
                        lin.out, lin.inp
                    ));
                }
                if let Some(r) = lin.w.first_non_finite_row() {
                    return bad(format!(
                        "layer {l}: {name} projection has a non-finite weight in row {r}"
                    ));
                }
            }
            if let Some(s) = &ly.sinks
                && (s.len() != c.n_head || s.iter().any(|v| !v.is_finite()))
            {
                return bad(format!(
                    "layer {l}: {} sink logits (finite: {}), expected {} finite ones",
                    s.len(),
                    s.iter().all(|v| v.is_finite()),
                    c.n_head
                ));
            }
            for (name, n, w) in [
                ("attn_norm", &ly.attn_norm, d),
                ("ffn_norm", &ly.ffn_norm, d),
                ("post_attn_norm", &ly.post_attn_norm, d),
                ("post_ffn_norm", &ly.post_ffn_norm, d),
                ("q_norm", &ly.q_norm, c.head_dim),
                ("k_norm", &ly.k_norm, c.head_dim),
            ] {
                if let Some(n) = n
                    && n.dim() != w
                {
                    return bad(format!(
                        "layer {l}: {name} has width {}, expected {w}",
                        n.dim()
                    ));
                }
            }
        }
        if let Some(r) = self.embed.first_non_finite_row() {
            return bad(format!("token embedding has a non-finite value in row {r}"));
        }
        if let Some(h) = &self.lm_head
            && (h.w.n_rows() != c.vocab || h.w.n_cols() != c.d_model)
        {
            return bad(format!(
                "LM head is [{}, {}], expected [{}, {}]",
                h.w.n_rows(),
                h.w.n_cols(),
                c.vocab,
                c.d_model
            ));
        }
        if let Some(h) = &self.lm_head
            && let Some(r) = h.w.first_non_finite_row()
        {
            return bad(format!("LM head has a non-finite weight in row {r}"));
        }
        if let Some(p) = &self.pos_embed
            && p.len() < c.max_context * d
        {
            return bad(format!(
                "position embedding too short for context {}",
                c.max_context
            ));
        }
        Ok(())
    }
}
