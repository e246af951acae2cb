//! Synthetic GGUF models (random weights, seeded), written streaming by one writer: tiny ones
//! for tests, fuzz seeds and benches that must run without the real model cache
//! ([`write_gguf`]), and paper-scale ones with a real model's shapes ([`write_paper_gguf`],
//! `sinklab synth`). The file is a genuine `llama`, `qwen2`, `gemma3`, `qwen3moe` or `gpt-oss`
//! GGUF, read back through the same loader as the real models; the mixtures of experts are
//! written as llama.cpp lays them out (stacked `ffn_*_exps`, an f32 router `ffn_gate_inp`),
//! gpt-oss's experts in MXFP4 as its published GGUF stores them.

use crate::runtime::RealError;
use crate::runtime::weights::WeightType;
use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::path::Path;

fn err(path: &Path, e: impl std::fmt::Display) -> RealError {
    RealError::file(path, format!("writing synthetic GGUF: {e}"))
}

/// The shape and storage of a synthetic decoder: a paper model's ([`SynthShape::by_name`]) or
/// a tiny test model ([`SynthShape::default`]). How the weights are drawn depends on the writer
/// ([`write_gguf`] or [`write_paper_gguf`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SynthShape {
    /// Name printed in `general.name` of a paper-scale file (e.g. `llama3.1-8b`).
    pub name: String,
    /// GGUF architecture: `llama`, `qwen2` or `gemma3` (Gemma's QK and sandwich norms, a
    /// sliding window of `ctx / 4`).
    pub arch: &'static str,
    /// Layers $L$.
    pub n_layer: usize,
    /// Residual width $d$.
    pub d: usize,
    /// Query heads $H$.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention: $H / H_{kv}$ queries share one key/value head).
    pub n_kv_head: usize,
    /// Head dimension $d_h$.
    pub head_dim: usize,
    /// MLP width.
    pub d_ff: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Context length written in the metadata.
    pub ctx: usize,
    /// RoPE base $\theta$.
    pub rope_base: f32,
    /// Llama-3 frequency-dependent RoPE scaling, stored as llama.cpp does: a `rope_freqs.weight`
    /// tensor of $d_h/2$ divisors.
    pub llama3_rope: Option<Llama3Rope>,
    /// q/k/v biases (Qwen2).
    pub qkv_bias: bool,
    /// RMSNorm $\varepsilon$.
    pub eps: f32,
    /// Storage of the matrices.
    pub dtype: SynthDtype,
    /// A mixture of experts in every layer's feed-forward sub-layer (`qwen3moe`, `gpt-oss`).
    pub moe: Option<SynthMoe>,
    /// Sliding window of gpt-oss's even layers (`attention.sliding_window`).
    pub window: Option<usize>,
    /// YaRN RoPE scaling (factor, original context length), written as
    /// `rope.scaling.{type = yarn, factor, original_context_length}`.
    pub yarn: Option<(f32, usize)>,
}

/// The mixture of experts of a synthetic decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthMoe {
    /// Experts $E$ (`expert_count`).
    pub n_expert: usize,
    /// Experts per token $k$ (`expert_used_count`).
    pub top_k: usize,
    /// Expert width $d_e$ (`expert_feed_forward_length`).
    pub d_expert: usize,
}

impl Default for SynthShape {
    /// The tiny test model: 2 layers, $d = 32$, 4 heads of 8 over 2 key/value heads, MLP 48,
    /// vocabulary 40, f32.
    fn default() -> Self {
        SynthShape {
            name: "test".into(),
            arch: "llama",
            n_layer: 2,
            d: 32,
            n_head: 4,
            n_kv_head: 2,
            head_dim: 8,
            d_ff: 48,
            vocab: 40,
            ctx: 64,
            rope_base: 10000.0,
            llama3_rope: None,
            qkv_bias: false,
            eps: 1e-5,
            dtype: SynthDtype::F32,
            moe: None,
            window: None,
            yarn: None,
        }
    }
}

/// Llama 3.x RoPE scaling parameters (Hugging Face `rope_scaling` with `rope_type: llama3`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Rope {
    /// Overall factor $s$ applied to low frequencies.
    pub factor: f32,
    /// Wavelengths above `original_ctx / low_freq_factor` are divided by $s$.
    pub low_freq_factor: f32,
    /// Wavelengths below `original_ctx / high_freq_factor` are kept.
    pub high_freq_factor: f32,
    /// Pre-training context length.
    pub original_ctx: usize,
}

impl Llama3Rope {
    /// The per-frequency divisors $f_i$ ($\omega_i \to \omega_i / f_i$, $i < d_h/2$): 1 for short
    /// wavelengths, $s$ for long ones, and between them
    /// $f_i = 1 / \big((1-\sigma)/s + \sigma\big)$ with
    /// $\sigma = (L_0/\lambda_i - a)/(b - a)$ ($a, b$ the low/high factors, $L_0$ the original context).
    pub fn divisors(&self, base: f32, head_dim: usize) -> Vec<f32> {
        let (s, a, b) = (
            self.factor as f64,
            self.low_freq_factor as f64,
            self.high_freq_factor as f64,
        );
        let l0 = self.original_ctx as f64;
        (0..head_dim / 2)
            .map(|i| {
                let omega = (base as f64).powf(-((2 * i) as f64) / head_dim as f64);
                let lambda = 2.0 * std::f64::consts::PI / omega;
                let f = if lambda < l0 / b {
                    1.0
                } else if lambda > l0 / a {
                    s
                } else {
                    let sigma = (l0 / lambda - a) / (b - a);
                    1.0 / ((1.0 - sigma) / s + sigma)
                };
                f as f32
            })
            .collect()
    }
}

impl SynthShape {
    /// Meta's Llama-3.1-8B: 32 layers, $d = 4096$, 32 heads, 8 key/value heads, MLP 14336,
    /// vocabulary 128256, $\theta = 5\cdot10^5$ with llama3 RoPE scaling (factor 8, 1, 4, 8192).
    pub fn llama31_8b() -> Self {
        SynthShape {
            name: "llama3.1-8b".into(),
            arch: "llama",
            n_layer: 32,
            d: 4096,
            n_head: 32,
            n_kv_head: 8,
            head_dim: 128,
            d_ff: 14336,
            vocab: 128256,
            ctx: 131072,
            rope_base: 500000.0,
            llama3_rope: Some(Llama3Rope {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_ctx: 8192,
            }),
            qkv_bias: false,
            eps: 1e-5,
            dtype: SynthDtype::Q4K,
            moe: None,
            window: None,
            yarn: None,
        }
    }

    /// Qwen2-7B: 28 layers, $d = 3584$, 28 heads, 4 key/value heads (GQA 7:1), MLP 18944,
    /// vocabulary 152064, q/k/v biases, $\theta = 10^6$.
    pub fn qwen2_7b() -> Self {
        SynthShape {
            name: "qwen2-7b".into(),
            arch: "qwen2",
            n_layer: 28,
            d: 3584,
            n_head: 28,
            n_kv_head: 4,
            head_dim: 128,
            d_ff: 18944,
            vocab: 152064,
            ctx: 32768,
            rope_base: 1_000_000.0,
            llama3_rope: None,
            qkv_bias: true,
            eps: 1e-6,
            dtype: SynthDtype::Q4K,
            moe: None,
            window: None,
            yarn: None,
        }
    }

    /// OpenAI's gpt-oss-20b as its published GGUF (`ggml-org/gpt-oss-20b-GGUF`, MXFP4): 24
    /// layers, $d = 2880$, 64 heads of 64, 8 key/value heads, q/k/v/o biases and learned sinks,
    /// 32 experts of width 2880 with 4 per token (router and expert biases), vocabulary 201088,
    /// $\theta = 150000$ with YaRN (factor 32, original context 4096), a window of 128 on the
    /// even layers; experts in MXFP4, the other matrices Q8_0, router and vectors f32
    /// ([`SynthDtype::Mxfp4`]).
    pub fn gpt_oss_20b() -> Self {
        SynthShape {
            name: "gpt-oss-20b".into(),
            arch: "gpt-oss",
            n_layer: 24,
            d: 2880,
            n_head: 64,
            n_kv_head: 8,
            head_dim: 64,
            d_ff: 2880,
            vocab: 201088,
            ctx: 131072,
            rope_base: 150000.0,
            llama3_rope: None,
            qkv_bias: true,
            eps: 1e-5,
            dtype: SynthDtype::Mxfp4,
            moe: Some(SynthMoe {
                n_expert: 32,
                top_k: 4,
                d_expert: 2880,
            }),
            window: Some(128),
            yarn: Some((32.0, 4096)),
        }
    }

    /// Qwen3-30B-A3B: 48 layers, $d = 2048$, 32 heads of 128, 4 key/value heads, q/k RMSNorm,
    /// 128 experts of width 768 with 8 per token (renormalised), vocabulary 151936,
    /// $\theta = 10^6$; llama.cpp's Q4_K_M mix ([`SynthDtype::Q4KM`]) with an f32 router.
    pub fn qwen3_30b_a3b() -> Self {
        SynthShape {
            name: "qwen3-30b-a3b".into(),
            arch: "qwen3moe",
            n_layer: 48,
            d: 2048,
            n_head: 32,
            n_kv_head: 4,
            head_dim: 128,
            d_ff: 6144,
            vocab: 151936,
            ctx: 40960,
            rope_base: 1_000_000.0,
            llama3_rope: None,
            qkv_bias: false,
            eps: 1e-6,
            dtype: SynthDtype::Q4KM,
            moe: Some(SynthMoe {
                n_expert: 128,
                top_k: 8,
                d_expert: 768,
            }),
            window: None,
            yarn: None,
        }
    }

    /// The shapes by CLI name; tiny variants (`tiny-llama3`, `tiny-qwen2`) keep the structure
    /// (GQA ratio, biases, RoPE scaling) at widths that are whole Q4_K blocks (256 values).
    /// (The tiny Llama has 4:1 grouping; the tiny Qwen2 keeps 7:1.)
    pub fn by_name(name: &str) -> Option<Self> {
        let tiny = |mut s: SynthShape, heads: usize, kv: usize, dh: usize| {
            s.name = format!("tiny-{}", s.arch.replace("llama", "llama3"));
            s.n_layer = 2;
            // llama.cpp wants $d = H d_h$ (Qwen2 checks it); a Q4_K row is 256 values.
            s.d = heads * dh;
            s.n_head = heads;
            s.n_kv_head = kv;
            s.head_dim = dh;
            s.d_ff = 256;
            s.vocab = 300;
            s.ctx = 4096;
            if let Some(r) = &mut s.llama3_rope {
                r.original_ctx = 512;
            }
            s
        };
        match name {
            "llama3.1-8b" => Some(Self::llama31_8b()),
            "qwen2-7b" => Some(Self::qwen2_7b()),
            "tiny-llama3" => Some(tiny(Self::llama31_8b(), 4, 1, 64)),
            // 7 heads of 256 (d = 1792): the smallest width with GQA 7:1 in whole Q4_K blocks.
            "tiny-qwen2" => Some(tiny(Self::qwen2_7b(), 7, 1, 256)),
            "gpt-oss-20b" => Some(Self::gpt_oss_20b()),
            "qwen3-30b-a3b" => Some(Self::qwen3_30b_a3b()),
            // 3 layers (sliding, full, sliding: window 4), d = 64 (two MXFP4 blocks a row), 4
            // heads of 16 over 2 key/value heads, 8 experts of 32 with 2 per token.
            "tiny-gpt-oss" => Some(SynthShape {
                name: "tiny-gpt-oss".into(),
                n_layer: 3,
                d: 64,
                n_head: 4,
                n_kv_head: 2,
                head_dim: 16,
                d_ff: 32,
                vocab: 300,
                ctx: 4096,
                moe: Some(SynthMoe {
                    n_expert: 8,
                    top_k: 2,
                    d_expert: 32,
                }),
                window: Some(4),
                yarn: Some((32.0, 256)),
                ..Self::gpt_oss_20b()
            }),
            // 2 layers, d = 256 (Q4_K rows), 4 heads of 64 over 1 key/value head, 8 experts of
            // 256 with 3 per token.
            "tiny-qwen3moe" => Some(SynthShape {
                name: "tiny-qwen3moe".into(),
                n_layer: 2,
                d: 256,
                n_head: 4,
                n_kv_head: 1,
                head_dim: 64,
                d_ff: 768,
                vocab: 300,
                ctx: 4096,
                moe: Some(SynthMoe {
                    n_expert: 8,
                    top_k: 3,
                    d_expert: 256,
                }),
                ..Self::qwen3_30b_a3b()
            }),
            _ => None,
        }
    }

    /// Names accepted by [`SynthShape::by_name`].
    pub const NAMES: &'static [&'static str] = &[
        "llama3.1-8b",
        "qwen2-7b",
        "gpt-oss-20b",
        "qwen3-30b-a3b",
        "tiny-llama3",
        "tiny-qwen2",
        "tiny-gpt-oss",
        "tiny-qwen3moe",
    ];
}

/// How the matrices are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthDtype {
    /// Every matrix (embedding and head included) in Q4_K.
    Q4K,
    /// llama.cpp's Q4_K_M mix: Q4_K, with `output.weight` and, on the layers llama.cpp gives more
    /// bits ($l < L/8$, $l \ge 7L/8$, or $(l - L/8) \bmod 3 = 2$), `attn_v` and `ffn_down` in Q6_K.
    Q4KM,
    /// Q8_0 everywhere.
    Q8_0,
    /// f16 everywhere.
    F16,
    /// f32 everywhere.
    F32,
    /// The layers' matrices in the given type, the embedding and the vectors in f32 (the tiny
    /// test models' storage).
    Layers(GgmlDType),
    /// gpt-oss's published storage: expert stacks in MXFP4, every other matrix in Q8_0.
    Mxfp4,
}

impl SynthDtype {
    /// Parses `q4k`, `q4km`, `q8_0`, `f16`, `f32`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "q4k" | "q4_k" => Self::Q4K,
            "q4km" | "q4_k_m" => Self::Q4KM,
            "q8_0" | "q8" => Self::Q8_0,
            "f16" => Self::F16,
            "f32" => Self::F32,
            "mxfp4" => Self::Mxfp4,
            _ => return None,
        })
    }

    /// Storage of matrix `name` (`output.weight`, `blk.{l}.attn_v.weight`, …) in layer `l`: a
    /// router (`ffn_gate_inp`) is f32 whatever the type, as llama.cpp keeps it.
    fn of(self, name: &str, layer: Option<usize>, n_layer: usize) -> WeightType {
        if name.ends_with("ffn_gate_inp.weight") {
            return WeightType::Ggml(GgmlDType::F32);
        }
        if self == Self::Mxfp4 {
            return if name.contains("_exps.") {
                WeightType::Mxfp4
            } else {
                WeightType::Ggml(GgmlDType::Q8_0)
            };
        }
        WeightType::Ggml(self.of_ggml(name, layer, n_layer))
    }

    fn of_ggml(self, name: &str, layer: Option<usize>, n_layer: usize) -> GgmlDType {
        match self {
            Self::Q4K => return GgmlDType::Q4K,
            Self::Q8_0 => return GgmlDType::Q8_0,
            Self::F16 => return GgmlDType::F16,
            Self::F32 => return GgmlDType::F32,
            Self::Layers(t) => return if layer.is_some() { t } else { GgmlDType::F32 },
            Self::Q4KM | Self::Mxfp4 => {}
        }
        let more_bits =
            |l: usize| l < n_layer / 8 || l >= 7 * n_layer / 8 || (l - n_layer / 8) % 3 == 2;
        match layer {
            None if name == "output.weight" => GgmlDType::Q6K,
            Some(l)
                if (name.ends_with("attn_v.weight")
                    || name.ends_with("ffn_down.weight")
                    || name.ends_with("ffn_down_exps.weight"))
                    && more_bits(l) =>
            {
                GgmlDType::Q6K
            }
            _ => GgmlDType::Q4K,
        }
    }
}

/// The two kinds of file the one writer makes; they differ in what the file holds and in how
/// the weights are drawn, and each is fixed so that a seed keeps giving the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// Tiny test models ([`write_gguf`]): the output head tied to the embedding, the metadata
    /// the loader needs, one seeded stream drawn in file order, matrices uniform on
    /// $[-1.7/\sqrt{n_\text{in}}, 1.7/\sqrt{n_\text{in}}]$; GGUF v2 with an empty array typed u32
    /// (the layout of candle's writer, which these files were first written with).
    Test,
    /// Paper-scale models ([`write_paper_gguf`]): an `output.weight`, llama.cpp's metadata,
    /// one stream per chunk of rows ([`chunk_rng`], so the bytes do not depend on the thread
    /// count), matrices with variance $1/n_\text{in}$; GGUF v3 with an empty array typed string
    /// (llama.cpp refuses `tokenizer.ggml.merges` otherwise).
    Paper,
}

impl Family {
    /// GGUF version written in the header.
    fn version(self) -> u32 {
        match self {
            Family::Test => 2,
            Family::Paper => 3,
        }
    }

    /// GGUF type id of the elements of an empty array.
    fn empty_array_type(self) -> u32 {
        match self {
            Family::Test => 4,
            Family::Paper => 8,
        }
    }
}

/// What a tensor holds.
#[derive(Debug, Clone)]
enum Init {
    /// Uniform, centred, with the scale of the [`Family`] for $n_\text{in}$ = the row length.
    Matrix,
    /// Uniform on $[0.8, 1.2]$.
    Gain,
    /// Uniform on $[-0.02, 0.02]$.
    Bias,
    /// A learned sink logit: uniform on $[0, 2]$.
    Sink,
    /// Given values.
    Fixed(Vec<f32>),
}

/// One tensor of the file: name, values generated as `[rows, cols]` (`rows = 1` for vectors),
/// its GGUF dims (innermost first: `[cols]`, `[cols, rows]`, or `[cols, rows / E, E]` for a
/// stack of `E` expert matrices), storage.
#[derive(Debug, Clone)]
struct Planned {
    name: String,
    rows: usize,
    cols: usize,
    dims: Vec<usize>,
    dtype: WeightType,
    init: Init,
}

/// Values per block and bytes per block of a storage type.
fn block_geometry(t: WeightType) -> (usize, usize) {
    match t {
        WeightType::Ggml(g) => (g.block_size(), g.type_size()),
        WeightType::Mxfp4 => (
            crate::quant::mxfp4::BLOCK,
            crate::quant::mxfp4::GGML_BLOCK_BYTES,
        ),
    }
}

/// GGML's type id of a storage type.
fn type_id(t: WeightType) -> u32 {
    match t {
        WeightType::Ggml(g) => g.to_u32_public(),
        WeightType::Mxfp4 => GGML_TYPE_MXFP4,
    }
}

impl Planned {
    fn bytes(&self) -> usize {
        let (bs, ts) = block_geometry(self.dtype);
        self.rows * self.cols / bs * ts
    }
}

/// The tensors of the file, in file order.
fn plan(s: &SynthShape, family: Family) -> Vec<Planned> {
    let mut v = Vec::new();
    // A matrix `[rows, cols]`, or with `e` > 0 a stack of `e` of them.
    let mut stack = |name: String, layer: Option<usize>, e: usize, rows: usize, cols: usize| {
        let dtype = s.dtype.of(&name, layer, s.n_layer);
        let (rows, dims) = if e > 0 {
            (e * rows, vec![cols, rows, e])
        } else {
            (rows, vec![cols, rows])
        };
        v.push(Planned {
            name,
            rows,
            cols,
            dims,
            dtype,
            init: Init::Matrix,
        });
    };
    let gpt_oss = s.arch == "gpt-oss";
    let (q, kv) = (s.n_head * s.head_dim, s.n_kv_head * s.head_dim);
    stack("token_embd.weight".into(), None, 0, s.vocab, s.d);
    for l in 0..s.n_layer {
        let p = |x: &str| format!("blk.{l}.{x}");
        stack(p("attn_q.weight"), Some(l), 0, q, s.d);
        stack(p("attn_k.weight"), Some(l), 0, kv, s.d);
        stack(p("attn_v.weight"), Some(l), 0, kv, s.d);
        stack(p("attn_output.weight"), Some(l), 0, s.d, q);
        match s.moe {
            None => {
                stack(p("ffn_gate.weight"), Some(l), 0, s.d_ff, s.d);
                stack(p("ffn_up.weight"), Some(l), 0, s.d_ff, s.d);
                stack(p("ffn_down.weight"), Some(l), 0, s.d, s.d_ff);
            }
            Some(m) => {
                let (e, de) = (m.n_expert, m.d_expert);
                stack(p("ffn_gate_inp.weight"), Some(l), 0, e, s.d);
                stack(p("ffn_gate_exps.weight"), Some(l), e, de, s.d);
                stack(p("ffn_up_exps.weight"), Some(l), e, de, s.d);
                stack(p("ffn_down_exps.weight"), Some(l), e, s.d, de);
            }
        }
    }
    if family == Family::Paper {
        stack("output.weight".into(), None, 0, s.vocab, s.d);
    }
    let vec_ = |name: String, n: usize, init: Init| Planned {
        name,
        rows: 1,
        cols: n,
        dims: vec![n],
        dtype: WeightType::Ggml(GgmlDType::F32),
        init,
    };
    // f32 `[e, n]` values, one row per expert (the experts' biases).
    let per_expert = |name: String, e: usize, n: usize| Planned {
        name,
        rows: e,
        cols: n,
        dims: vec![n, e],
        dtype: WeightType::Ggml(GgmlDType::F32),
        init: Init::Bias,
    };
    for l in 0..s.n_layer {
        let p = |x: &str| format!("blk.{l}.{x}");
        v.push(vec_(p("attn_norm.weight"), s.d, Init::Gain));
        // gpt-oss's converter names its pre-feed-forward norm `post_attention_norm`.
        let ffn_norm = if gpt_oss {
            "post_attention_norm.weight"
        } else {
            "ffn_norm.weight"
        };
        v.push(vec_(p(ffn_norm), s.d, Init::Gain));
        if s.qkv_bias {
            v.push(vec_(p("attn_q.bias"), q, Init::Bias));
            v.push(vec_(p("attn_k.bias"), kv, Init::Bias));
            v.push(vec_(p("attn_v.bias"), kv, Init::Bias));
        }
        if s.arch == "qwen3moe" {
            v.push(vec_(p("attn_q_norm.weight"), s.head_dim, Init::Gain));
            v.push(vec_(p("attn_k_norm.weight"), s.head_dim, Init::Gain));
        }
        if gpt_oss {
            v.push(vec_(p("attn_output.bias"), s.d, Init::Bias));
            v.push(vec_(p("attn_sinks.weight"), s.n_head, Init::Sink));
            if let Some(m) = s.moe {
                let (e, de) = (m.n_expert, m.d_expert);
                v.push(vec_(p("ffn_gate_inp.bias"), e, Init::Bias));
                v.push(per_expert(p("ffn_gate_exps.bias"), e, de));
                v.push(per_expert(p("ffn_up_exps.bias"), e, de));
                v.push(per_expert(p("ffn_down_exps.bias"), e, s.d));
            }
        }
        if s.arch == "gemma3" {
            v.push(vec_(p("attn_q_norm.weight"), s.head_dim, Init::Gain));
            v.push(vec_(p("attn_k_norm.weight"), s.head_dim, Init::Gain));
            v.push(vec_(p("post_attention_norm.weight"), s.d, Init::Gain));
            v.push(vec_(p("post_ffw_norm.weight"), s.d, Init::Gain));
        }
    }
    v.push(vec_("output_norm.weight".into(), s.d, Init::Gain));
    if let Some(r) = &s.llama3_rope {
        let f = r.divisors(s.rope_base, s.head_dim);
        v.push(vec_("rope_freqs.weight".into(), f.len(), Init::Fixed(f)));
    }
    v
}

/// The GGUF alignment of tensor data (llama.cpp's default, written as `general.alignment`).
const ALIGN: usize = 32;

fn pad(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN - n
}

/// Sizes of a planned file: header bytes, data bytes, parameter count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthSize {
    /// Bytes before the aligned tensor data.
    pub header: usize,
    /// Bytes of tensor data (with alignment padding).
    pub data: usize,
    /// Parameters.
    pub params: usize,
    /// Tensors.
    pub tensors: usize,
}

impl SynthSize {
    /// Total file size in bytes.
    pub fn total(&self) -> usize {
        self.header + self.data
    }
}

fn metadata(s: &SynthShape, seed: u64, family: Family) -> Vec<(String, Value)> {
    let paper = family == Family::Paper;
    let k = |x: &str| format!("{}.{x}", s.arch);
    let toks: Vec<Value> = (0..s.vocab)
        .map(|i| {
            Value::String(if i == 1 {
                "<s>".into()
            } else {
                format!("t{i}")
            })
        })
        .collect();
    let types: Vec<Value> = (0..s.vocab)
        .map(|i| Value::I32(if i == 1 { 3 } else { 1 }))
        .collect();
    let mut m = vec![("general.architecture".into(), Value::String(s.arch.into()))];
    if paper {
        m.push((
            "general.name".into(),
            Value::String(format!(
                "sinklab synthetic {} (random weights, seed {seed})",
                s.name
            )),
        ));
        m.push(("general.alignment".into(), Value::U32(ALIGN as u32)));
    }
    m.extend([
        (k("block_count"), Value::U32(s.n_layer as u32)),
        (k("context_length"), Value::U32(s.ctx as u32)),
        (k("embedding_length"), Value::U32(s.d as u32)),
        (k("feed_forward_length"), Value::U32(s.d_ff as u32)),
        (k("attention.head_count"), Value::U32(s.n_head as u32)),
        (k("attention.head_count_kv"), Value::U32(s.n_kv_head as u32)),
        (k("attention.key_length"), Value::U32(s.head_dim as u32)),
    ]);
    if paper {
        m.push((k("attention.value_length"), Value::U32(s.head_dim as u32)));
        m.push((k("rope.dimension_count"), Value::U32(s.head_dim as u32)));
    }
    m.push((k("rope.freq_base"), Value::F32(s.rope_base)));
    m.push((k("attention.layer_norm_rms_epsilon"), Value::F32(s.eps)));
    if paper {
        m.push((k("vocab_size"), Value::U32(s.vocab as u32)));
    }
    if let Some(e) = s.moe {
        m.push((k("expert_count"), Value::U32(e.n_expert as u32)));
        m.push((k("expert_used_count"), Value::U32(e.top_k as u32)));
        m.push((
            k("expert_feed_forward_length"),
            Value::U32(e.d_expert as u32),
        ));
    }
    if let Some(w) = s.window {
        m.push((k("attention.sliding_window"), Value::U32(w as u32)));
    }
    if let Some((f, l0)) = s.yarn {
        m.push((k("rope.scaling.type"), Value::String("yarn".into())));
        m.push((k("rope.scaling.factor"), Value::F32(f)));
        m.push((
            k("rope.scaling.original_context_length"),
            Value::U32(l0 as u32),
        ));
    }
    // The paper shapes carry the real models' split rules (both known to sinklab's tokenizer
    // and to llama.cpp); gpt-oss's own (`gpt-4o`) is not implemented by sinklab's tokenizer,
    // and Llama 3's stands in for it over the synthetic vocabulary.
    let pre = match s.arch {
        _ if !paper => "gpt2",
        "qwen2" | "qwen3moe" => "qwen2",
        _ => "llama-bpe",
    };
    m.extend([
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String(pre.into())),
        ("tokenizer.ggml.tokens".into(), Value::Array(toks)),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.merges".into(), Value::Array(vec![])),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
    ]);
    if s.arch == "gemma3" {
        m.push((
            k("attention.sliding_window"),
            Value::U32((s.ctx / 4).max(2) as u32),
        ));
    }
    m
}

/// Little-endian GGUF encoding of metadata values (candle's encoder is private).
fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn value_type(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

/// `empty` is the element type id written for an empty array.
fn put_value(out: &mut Vec<u8>, v: &Value, empty: u32) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(x) => put_str(out, x),
        Value::Array(xs) => {
            // Arrays here are homogeneous (built above); an empty one is typed `empty`.
            out.extend_from_slice(&xs.first().map_or(empty, value_type).to_le_bytes());
            out.extend_from_slice(&(xs.len() as u64).to_le_bytes());
            for x in xs {
                put_value(out, x, empty);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// GGUF header: magic, version, counts, metadata, tensor infos (dims innermost first, offsets
/// relative to the aligned data start), padded to [`ALIGN`].
fn header(meta: &[(String, Value)], tensors: &[Planned], family: Family) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&0x4655_4747u32.to_le_bytes());
    h.extend_from_slice(&family.version().to_le_bytes());
    h.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    h.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    for (k, v) in meta {
        put_str(&mut h, k);
        h.extend_from_slice(&value_type(v).to_le_bytes());
        put_value(&mut h, v, family.empty_array_type());
    }
    let mut off = 0usize;
    for t in tensors {
        put_str(&mut h, &t.name);
        h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for &d in &t.dims {
            h.extend_from_slice(&(d as u64).to_le_bytes());
        }
        h.extend_from_slice(&type_id(t.dtype).to_le_bytes());
        h.extend_from_slice(&(off as u64).to_le_bytes());
        off += t.bytes() + pad(t.bytes());
    }
    h.resize(h.len() + pad(h.len()), 0);
    h
}

/// GGML type ids (ggml.h), for the dtypes this writer emits.
trait GgmlId {
    fn to_u32_public(self) -> u32;
}

impl GgmlId for GgmlDType {
    fn to_u32_public(self) -> u32 {
        match self {
            GgmlDType::F32 => 0,
            GgmlDType::F16 => 1,
            GgmlDType::Q4_0 => 2,
            GgmlDType::Q4_1 => 3,
            GgmlDType::Q5_0 => 6,
            GgmlDType::Q5_1 => 7,
            GgmlDType::Q8_0 => 8,
            GgmlDType::Q8_1 => 9,
            GgmlDType::Q2K => 10,
            GgmlDType::Q3K => 11,
            GgmlDType::Q4K => 12,
            GgmlDType::Q5K => 13,
            GgmlDType::Q6K => 14,
            GgmlDType::Q8K => 15,
            GgmlDType::BF16 => 30,
        }
    }
}

/// Checks the shape before anything is written: divisibility by the heads and by the block length.
fn validate(s: &SynthShape, family: Family, path: &Path) -> Result<(), RealError> {
    let bad = |m: String| {
        Err(RealError::file(
            path,
            format!("synthetic shape {}: {m}", s.name),
        ))
    };
    if s.n_layer == 0 || s.d == 0 || s.n_head == 0 || s.n_kv_head == 0 || s.vocab < 2 {
        return bad("every dimension must be positive (vocabulary ≥ 2)".into());
    }
    if !s.n_head.is_multiple_of(s.n_kv_head) {
        return bad(format!(
            "{} heads are not a multiple of {} key/value heads",
            s.n_head, s.n_kv_head
        ));
    }
    if !s.head_dim.is_multiple_of(2) {
        return bad(format!(
            "head dimension {} must be even (RoPE pairs)",
            s.head_dim
        ));
    }
    if let Some(m) = s.moe
        && (m.n_expert == 0 || m.top_k == 0 || m.top_k > m.n_expert || m.d_expert == 0)
    {
        return bad(format!(
            "{} experts, {} per token, width {}: need 1 ≤ k ≤ E and a positive width",
            m.n_expert, m.top_k, m.d_expert
        ));
    }
    for t in plan(s, family) {
        let b = block_geometry(t.dtype).0;
        if t.cols % b != 0 {
            return bad(format!(
                "`{}` has rows of {} values, not a multiple of the {:?} block length {b}",
                t.name, t.cols, t.dtype
            ));
        }
    }
    Ok(())
}

/// Size of the file [`write_paper_gguf`] writes, computed without writing it.
pub fn paper_size(s: &SynthShape, seed: u64) -> SynthSize {
    size(s, seed, Family::Paper)
}

fn size(s: &SynthShape, seed: u64, family: Family) -> SynthSize {
    let tensors = plan(s, family);
    let h = header(&metadata(s, seed, family), &tensors, family);
    SynthSize {
        header: h.len(),
        data: tensors.iter().map(|t| t.bytes() + pad(t.bytes())).sum(),
        params: tensors.iter().map(|t| t.rows * t.cols).sum(),
        tensors: tensors.len(),
    }
}

/// Rows per generated chunk: about $2^{22}$ values (16 MB of f32), at least one row.
fn chunk_rows(cols: usize) -> usize {
    ((1usize << 22) / cols).max(1)
}

/// The RNG of chunk `c` of tensor `t`: SplitMix64 of (seed, tensor, chunk), so the bytes depend
/// only on the seed and the shape, not on the thread count or the order chunks are computed in.
fn chunk_rng(seed: u64, t: usize, c: usize) -> StdRng {
    let mut z = seed ^ (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (c as u64).rotate_left(32);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    StdRng::seed_from_u64(z ^ (z >> 31))
}

/// Draws `rows` rows of tensor `t` from `rng` and encodes them in the tensor's storage.
fn chunk_bytes(
    t: &Planned,
    rows: usize,
    rng: &mut StdRng,
    family: Family,
) -> candle_core::Result<Vec<u8>> {
    let n = rows * t.cols;
    let v: Vec<f32> = match &t.init {
        Init::Matrix if family == Family::Test => {
            let sc = 1.0 / (t.cols as f32).sqrt();
            (0..n)
                .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * sc * 1.7)
                .collect()
        }
        Init::Matrix => {
            let a = (3.0 / t.cols as f32).sqrt();
            (0..n)
                .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * a)
                .collect()
        }
        Init::Gain => (0..n).map(|_| 0.8 + 0.4 * rng.random::<f32>()).collect(),
        Init::Bias => (0..n)
            .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * 0.02)
            .collect(),
        Init::Sink => (0..n).map(|_| 2.0 * rng.random::<f32>()).collect(),
        Init::Fixed(f) => f.clone(),
    };
    let dt = match t.dtype {
        WeightType::Ggml(GgmlDType::F32) => {
            return Ok(v.iter().flat_map(|x| x.to_le_bytes()).collect());
        }
        WeightType::Mxfp4 => {
            return Ok(v
                .chunks_exact(crate::quant::mxfp4::BLOCK)
                .flat_map(crate::quant::mxfp4::quantize_block_ggml)
                .collect());
        }
        WeightType::Ggml(g) => g,
    };
    let x = Tensor::from_vec(v, (rows, t.cols), &Device::Cpu)?;
    Ok(QTensor::quantize(&x, dt)?.data()?.into_owned())
}

/// Progress of a streaming write: bytes written so far and the total.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize);

/// Writes a tiny test model of shape `s` drawn from `seed` through the same writer as
/// [`write_paper_gguf`]: the output head tied to the embedding, the metadata the loader needs,
/// one seeded stream drawn in file order, matrices uniform on
/// $[-1.7/\sqrt{n_\text{in}}, 1.7/\sqrt{n_\text{in}}]$, norm gains uniform on $[0.8, 1.2]$.
pub fn write_gguf(path: &Path, s: &SynthShape, seed: u64) -> Result<(), RealError> {
    write(path, s, seed, Family::Test, 1, &mut |_, _| {}).map(|_| ())
}

/// Writes a paper-scale synthetic GGUF, one chunk of rows at a time: each chunk is generated,
/// quantized with candle's quantizer (`QTensor::quantize`, blocks never straddle rows) and
/// appended, so the writer holds a few chunks (≈ 16 MB of f32 each, two per thread of
/// `threads`, which should be the size of the rayon pool it runs in), never a tensor.
/// Matrices are drawn i.i.d. uniform on $[-\sqrt{3/n_\text{in}}, \sqrt{3/n_\text{in}}]$
/// (variance $1/n_\text{in}$, so every projection keeps the activations' scale), norm gains
/// uniform on $[0.8, 1.2]$, biases uniform on $[-0.02, 0.02]$. Same seed and shape, same bytes,
/// whatever `threads`.
pub fn write_paper_gguf(
    path: &Path,
    s: &SynthShape,
    seed: u64,
    threads: usize,
    progress: Progress,
) -> Result<SynthSize, RealError> {
    write(path, s, seed, Family::Paper, threads, progress)
}

/// The one writer. The file is written through [`crate::atomic::write_with`] (a temporary
/// beside `path`, renamed over it once complete), so a failure (a full disk) leaves an
/// existing `path` as it was.
fn write(
    path: &Path,
    s: &SynthShape,
    seed: u64,
    family: Family,
    threads: usize,
    progress: Progress,
) -> Result<SynthSize, RealError> {
    use rayon::prelude::*;
    use std::io::Write;
    validate(s, family, path)?;
    // Into the temporary file `f` (errors name `path`).
    let fill = |f: &mut std::io::BufWriter<std::fs::File>| -> Result<SynthSize, RealError> {
        let tensors = plan(s, family);
        let h = header(&metadata(s, seed, family), &tensors, family);
        let size = size(s, seed, family);
        f.write_all(&h).map_err(|e| RealError::io(path, e))?;
        let mut done = h.len();
        progress(done, size.total());
        let batch = 2 * threads.max(1);
        // The test family's one stream, drawn in file order.
        let mut stream = StdRng::seed_from_u64(seed);
        for (ti, t) in tensors.iter().enumerate() {
            let per = match family {
                Family::Test => t.rows.max(1),
                Family::Paper => chunk_rows(t.cols),
            };
            let chunks: Vec<(usize, usize)> = (0..t.rows.div_ceil(per))
                .map(|c| (c, ((c + 1) * per).min(t.rows) - c * per))
                .collect();
            for group in chunks.chunks(batch) {
                let out: Vec<candle_core::Result<Vec<u8>>> = match family {
                    Family::Test => group
                        .iter()
                        .map(|&(_, rows)| chunk_bytes(t, rows, &mut stream, family))
                        .collect(),
                    Family::Paper => group
                        .par_iter()
                        .map(|&(c, rows)| chunk_bytes(t, rows, &mut chunk_rng(seed, ti, c), family))
                        .collect(),
                };
                for b in out {
                    let b = b.map_err(|e| err(path, e))?;
                    f.write_all(&b).map_err(|e| RealError::io(path, e))?;
                    done += b.len();
                }
                progress(done, size.total());
            }
            let p = pad(t.bytes());
            f.write_all(&vec![0u8; p])
                .map_err(|e| RealError::io(path, e))?;
            done += p;
        }
        if done != size.total() {
            return Err(err(
                path,
                format!("wrote {done} bytes, planned {}", size.total()),
            ));
        }
        Ok(size)
    };
    crate::atomic::write_with(path, fill, |e| RealError::io(path, e))
}

/// Seconds [`write_paper_gguf`] should take here on `threads` threads: one matrix chunk is
/// generated and quantized (timed), then scaled by the number of values and divided by the
/// threads.
pub fn estimate_seconds(s: &SynthShape, seed: u64, threads: usize) -> f64 {
    let tensors = plan(s, Family::Paper);
    let Some((ti, t)) = tensors
        .iter()
        .enumerate()
        .find(|(_, t)| t.name.ends_with("ffn_up.weight") || t.name.ends_with("ffn_up_exps.weight"))
    else {
        return f64::NAN;
    };
    let r1 = chunk_rows(t.cols).min(t.rows);
    let t0 = std::time::Instant::now();
    if chunk_bytes(t, r1, &mut chunk_rng(seed, ti, 0), Family::Paper).is_err() {
        return f64::NAN;
    }
    let per_value = t0.elapsed().as_secs_f64() / (r1 * t.cols) as f64;
    let params: usize = tensors.iter().map(|t| t.rows * t.cols).sum();
    per_value * params as f64 / threads.max(1) as f64
}

/// One tensor for [`write_tensors_gguf`]: its name, dims in PyTorch order (outermost first; the
/// file stores them innermost first), row-major values and storage (`F32` or `F16`), or MXFP4
/// blocks given as bytes.
#[derive(Debug, Clone)]
pub struct GgufTensor {
    /// Tensor name (`blk.0.ffn_gate_exps.weight`, …).
    pub name: String,
    /// Dims, outermost first (`[E, d_e, d]` for a stack of `[d_e, d]` expert matrices).
    pub dims: Vec<usize>,
    /// Values, row-major, $\prod$ dims of them.
    pub data: Vec<f32>,
    /// Storage: [`GgmlDType::F32`] or [`GgmlDType::F16`] (rounded to nearest).
    pub dtype: GgmlDType,
    /// MXFP4 blocks in ggml's packing ([`crate::quant::mxfp4`], GGML type 39), written as
    /// given instead of `data` (which is then empty; `dtype` is not read).
    pub mxfp4: Option<Vec<u8>>,
}

/// GGML's type id of MXFP4 blocks.
const GGML_TYPE_MXFP4: u32 = 39;

/// Writes a GGUF v3 file of the given metadata and tensors, in the order given (data aligned to
/// [`ALIGN`], `general.alignment` written first): the writer of files converted from other
/// formats (a Hugging Face checkpoint's tensors under llama.cpp's names), which the tests load
/// back through the GGUF reader. Only plain storage (f32, f16) and given MXFP4 blocks are
/// written; anything else, a
/// duplicate name or a value count that is not the product of the dims is refused.
pub fn write_tensors_gguf(
    path: &Path,
    meta: &[(String, Value)],
    tensors: &[GgufTensor],
) -> Result<(), RealError> {
    use std::io::Write;
    let mut seen = std::collections::HashSet::new();
    let mut blobs: Vec<Vec<u8>> = Vec::with_capacity(tensors.len());
    for t in tensors {
        if !seen.insert(t.name.as_str()) {
            return Err(err(path, format!("tensor `{}` given twice", t.name)));
        }
        let n: usize = t.dims.iter().product();
        if let Some(b) = &t.mxfp4 {
            let cols = t.dims.last().copied().unwrap_or(0);
            let bs = crate::quant::mxfp4::BLOCK;
            if n == 0
                || !t.data.is_empty()
                || !cols.is_multiple_of(bs)
                || b.len() != n / bs * crate::quant::mxfp4::GGML_BLOCK_BYTES
            {
                return Err(err(
                    path,
                    format!(
                        "tensor `{}`: {} MXFP4 bytes (and {} values) for dims {:?}",
                        t.name,
                        b.len(),
                        t.data.len(),
                        t.dims
                    ),
                ));
            }
            blobs.push(b.clone());
            continue;
        }
        if t.dims.is_empty() || n != t.data.len() || n == 0 {
            return Err(err(
                path,
                format!(
                    "tensor `{}`: {} values for dims {:?}",
                    t.name,
                    t.data.len(),
                    t.dims
                ),
            ));
        }
        blobs.push(match t.dtype {
            GgmlDType::F32 => t.data.iter().flat_map(|x| x.to_le_bytes()).collect(),
            GgmlDType::F16 => t
                .data
                .iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect(),
            other => {
                return Err(err(
                    path,
                    format!("tensor `{}`: storage {other:?} is not written here", t.name),
                ));
            }
        });
    }
    let mut h = Vec::new();
    h.extend_from_slice(&0x4655_4747u32.to_le_bytes());
    h.extend_from_slice(&3u32.to_le_bytes());
    h.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    h.extend_from_slice(&(meta.len() as u64 + 1).to_le_bytes());
    put_str(&mut h, "general.alignment");
    h.extend_from_slice(&4u32.to_le_bytes());
    h.extend_from_slice(&(ALIGN as u32).to_le_bytes());
    for (k, v) in meta {
        put_str(&mut h, k);
        h.extend_from_slice(&value_type(v).to_le_bytes());
        put_value(&mut h, v, 8);
    }
    let mut off = 0usize;
    for (t, b) in tensors.iter().zip(&blobs) {
        put_str(&mut h, &t.name);
        h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in t.dims.iter().rev() {
            h.extend_from_slice(&(*d as u64).to_le_bytes());
        }
        let ty = match t.mxfp4 {
            Some(_) => GGML_TYPE_MXFP4,
            None => t.dtype.to_u32_public(),
        };
        h.extend_from_slice(&ty.to_le_bytes());
        h.extend_from_slice(&(off as u64).to_le_bytes());
        off += b.len() + pad(b.len());
    }
    h.resize(h.len() + pad(h.len()), 0);
    let fill = |f: &mut std::io::BufWriter<std::fs::File>| -> Result<(), RealError> {
        f.write_all(&h).map_err(|e| RealError::io(path, e))?;
        for b in &blobs {
            f.write_all(b).map_err(|e| RealError::io(path, e))?;
            f.write_all(&vec![0u8; pad(b.len())])
                .map_err(|e| RealError::io(path, e))?;
        }
        Ok(())
    };
    crate::atomic::write_with(path, fill, |e| RealError::io(path, e))
}
