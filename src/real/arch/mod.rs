//! Architectures: one module per model family, each owning its hyper-parameters, tensor names
//! and conventions (q/k layout, RoPE style and scaling, norm placement and the `1 + w` gain,
//! soft-capping, sliding windows, biases, tied or untied head, embedding scale) for both GGUF
//! files and Hugging Face directories. The format readers ([`super::gguf`],
//! [`super::safetensors`]) only read files; the modules here turn what they read into a
//! [`Pretrained`].
//!
//! Refuse, never guess: every `config.json` key is either read by the architecture (listed in
//! its `KEYS`), or known not to change the forward pass ([`INERT`]); any other key stops the
//! load with a message naming it and the file. Values that change the math and are not
//! implemented (an unknown `rope_type`, quantization, …) are refused the same way. GGUF
//! metadata under `<arch>.` is checked against the architecture's `GGUF_KEYS` likewise.

pub mod bert;
pub mod gemma2;
pub mod gemma3;
pub mod gpt2;
pub mod llama;
pub mod phi3;
pub mod qwen2;
pub mod qwen3;
pub mod rope;

use super::RealError;
use super::gguf::GgufFile;
use super::model::{Act, Arch, Config, Layer, Linear, NormLayer, Pretrained, Rope};
use super::safetensors::Checkpoint;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Largest accepted layer count, width, head count or vocabulary: far above any released model,
/// low enough that a corrupt header cannot request an absurd allocation.
pub const MAX_DIM: usize = 1 << 22;
/// Largest accepted layer count.
pub const MAX_LAYERS: usize = 4096;

/// `config.json` keys that do not change the forward pass of any architecture here
/// (identifiers, training-only settings, generation defaults, bookkeeping).
pub const INERT: &[&str] = &[
    "architectures",
    "model_type",
    "dtype",
    "torch_dtype",
    "transformers_version",
    "_name_or_path",
    "_model_name_or_path",
    "unk_token_id",
    "initializer_range",
    "initializer_factor",
    "use_cache",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "attention_dropout",
    "attention_probs_dropout_prob",
    "hidden_dropout_prob",
    "hidden_dropout",
    "classifier_dropout",
    "embd_pdrop",
    "resid_pdrop",
    "attn_pdrop",
    "summary_type",
    "summary_use_proj",
    "summary_activation",
    "summary_proj_to_labels",
    "summary_first_dropout",
    "id2label",
    "label2id",
    "task_specific_params",
    "gradient_checkpointing",
    "pretraining_tp",
    "tokenizer_class",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "chunk_size_feed_forward",
    "problem_type",
    "cache_implementation",
    "max_length",
    "min_length",
    "do_sample",
    "num_beams",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
];

/// A `config.json` being read: remembers every key asked for, so that [`HfCfg::finish`] can
/// refuse the keys nobody read.
pub struct HfCfg {
    v: serde_json::Map<String, Value>,
    /// The file, for messages.
    pub path: PathBuf,
    read: RefCell<BTreeSet<String>>,
}

impl HfCfg {
    /// Parses `config.json`.
    pub fn open(path: &Path) -> Result<Self, RealError> {
        let text = std::fs::read_to_string(path).map_err(|e| RealError::io(path, e))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| RealError::file(path, format!("invalid JSON: {e}")))?;
        let Value::Object(v) = v else {
            return Err(RealError::file(path, "not a JSON object"));
        };
        Ok(Self {
            v,
            path: path.to_path_buf(),
            read: RefCell::new(BTreeSet::new()),
        })
    }

    /// An error naming this file.
    pub fn err(&self, msg: impl Into<String>) -> RealError {
        RealError::file(&self.path, msg)
    }

    /// A value (JSON `null` counts as absent); marks the key as read.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.read.borrow_mut().insert(key.to_string());
        self.v.get(key).filter(|v| !v.is_null())
    }

    /// The keys read so far.
    pub fn keys_read(&self) -> BTreeSet<String> {
        self.read.borrow().clone()
    }

    /// A required positive integer no larger than `max`.
    pub fn dim(&self, key: &str, max: usize) -> Result<usize, RealError> {
        let v = self
            .get(key)
            .ok_or_else(|| self.err(format!("missing `{key}`")))?;
        self.dim_of(key, v, max)
    }

    fn dim_of(&self, key: &str, v: &Value, max: usize) -> Result<usize, RealError> {
        match v.as_u64() {
            Some(n) if n >= 1 && n as usize <= max => Ok(n as usize),
            _ => Err(self.err(format!("`{key}` = {v} is not an integer in 1..={max}"))),
        }
    }

    /// An optional positive integer.
    pub fn dim_opt(&self, key: &str, max: usize) -> Result<Option<usize>, RealError> {
        match self.get(key).cloned() {
            None => Ok(None),
            Some(v) => self.dim_of(key, &v, max).map(Some),
        }
    }

    /// A finite number (JSON number only: strings such as `"nan"` are refused), or `default`.
    pub fn num_or(&self, key: &str, default: f64) -> Result<f64, RealError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(x),
                _ => Err(self.err(format!("`{key}` = {v} is not a finite number"))),
            },
        }
    }

    /// A normalisation ε: finite and > 0.
    pub fn eps_or(&self, key: &str, default: f64) -> Result<f32, RealError> {
        let e = self.num_or(key, default)?;
        if e > 0.0 && (e as f32) > 0.0 {
            Ok(e as f32)
        } else {
            Err(self.err(format!("`{key}` = {e} must be > 0")))
        }
    }

    /// A boolean, or `default`.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, RealError> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.err(format!("`{key}` = {v} is not a boolean"))),
        }
    }

    /// A string, or `default`.
    pub fn str_or(&self, key: &str, default: &str) -> Result<String, RealError> {
        match self.get(key) {
            None => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(self.err(format!("`{key}` = {v} is not a string"))),
        }
    }

    /// Requires `key` to be absent, null, or equal to `ok` (a setting whose other values are
    /// not implemented).
    pub fn require(&self, key: &str, ok: &Value, why: &str) -> Result<(), RealError> {
        match self.get(key) {
            None => Ok(()),
            Some(v) if v == ok => Ok(()),
            Some(v) => Err(self.err(format!("`{key}` = {v} is not supported ({why})"))),
        }
    }

    /// Refuses every key that was neither read nor listed in [`INERT`].
    pub fn finish(&self, arch: &str) -> Result<(), RealError> {
        let read = self.read.borrow();
        for (k, v) in &self.v {
            if !read.contains(k) && !INERT.contains(&k.as_str()) {
                return Err(self.err(format!(
                    "key `{k}` = {v} is not known to the {arch} loader and may change the \
                     forward pass; refusing rather than guessing"
                )));
            }
        }
        Ok(())
    }
}

/// Keys every decoder reads or refuses (in addition to its own list).
pub const COMMON_KEYS: &[&str] = &["quantization_config", "tie_word_embeddings"];

/// Refuses a quantized checkpoint (the weights would be read as if dense).
pub fn refuse_quantized(c: &HfCfg) -> Result<(), RealError> {
    if let Some(q) = c.get("quantization_config") {
        return Err(c.err(format!(
            "`quantization_config` = {q}: quantized Hugging Face checkpoints are not supported"
        )));
    }
    Ok(())
}

/// How a Llama-like Hugging Face decoder stores and uses its tensors.
#[derive(Debug, Clone, Copy)]
pub struct DecoderSpec {
    /// Family.
    pub arch: Arch,
    /// q/k/v projections carry biases.
    pub qkv_bias: bool,
    /// The output projection carries a bias.
    pub o_bias: bool,
    /// The MLP projections carry biases.
    pub mlp_bias: bool,
    /// Per-head RMSNorm on q and k.
    pub qk_norm: bool,
    /// Gemma's sandwich norms (post-attention, pre- and post-feed-forward) and `1 + w` gains.
    pub gemma: bool,
    /// Phi-3's fused `qkv_proj` and `gate_up_proj`.
    pub fused: bool,
    /// MLP activation.
    pub act: Act,
    /// Default of `tie_word_embeddings`.
    pub tie_default: bool,
}

/// Per-layer attention geometry decided by the architecture module.
pub struct LayerPlan {
    /// RoPE of the layer.
    pub rope: Rope,
    /// Sliding window.
    pub window: Option<usize>,
}

/// Hyper-parameters every Llama-like decoder reads from `config.json`.
pub struct DecoderDims {
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
    /// MLP width.
    pub dff: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// `max_position_embeddings`.
    pub max_pos: usize,
    /// RMSNorm ε.
    pub eps: f32,
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
            n_layer,
            d,
            n_head,
            n_kv,
            dh,
            dff,
            vocab,
            max_pos,
            eps,
        })
    }
}

/// Builds a Llama-like decoder from a Hugging Face checkpoint (names `model.layers.{l}.…`).
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
    let DecoderDims {
        n_layer,
        d,
        n_head,
        n_kv,
        dh,
        dff,
        vocab,
        eps,
        ..
    } = *dims;
    let tie = c.bool_or("tie_word_embeddings", spec.tie_default)?;
    let gain = |v: Vec<f32>| -> Vec<f32> {
        if spec.gemma {
            v.into_iter().map(|x| 1.0 + x).collect()
        } else {
            v
        }
    };
    let rms = |name: &str, n: usize| -> Result<NormLayer, RealError> {
        Ok(NormLayer::Rms {
            w: gain(w.shaped(name, &[n])?),
            eps,
        })
    };
    let embed = w.weight("model.embed_tokens.weight", vocab, d)?;
    let (hq, hk) = (n_head * dh, n_kv * dh);
    let mut layers = Vec::with_capacity(n_layer);
    for (l, plan) in plans.into_iter().enumerate() {
        let b = format!("model.layers.{l}.");
        let (wq, wk, wv, gate, up) = if spec.fused {
            let qkv = w.linear(&format!("{b}self_attn.qkv_proj"), hq + 2 * hk, d, false)?;
            let rows = |r0: usize, n: usize| Linear {
                w: qkv.w.rows(r0, n),
                out: n,
                inp: d,
                b: qkv.b.as_ref().map(|b| b[r0..r0 + n].to_vec()),
            };
            let gu = w.linear(&format!("{b}mlp.gate_up_proj"), 2 * dff, d, false)?;
            let half = |r0: usize| Linear {
                w: gu.w.rows(r0, dff),
                out: dff,
                inp: d,
                b: gu.b.as_ref().map(|b| b[r0..r0 + dff].to_vec()),
            };
            (
                rows(0, hq),
                rows(hq, hk),
                rows(hq + hk, hk),
                half(0),
                half(dff),
            )
        } else {
            (
                w.linear(&format!("{b}self_attn.q_proj"), hq, d, spec.qkv_bias)?,
                w.linear(&format!("{b}self_attn.k_proj"), hk, d, spec.qkv_bias)?,
                w.linear(&format!("{b}self_attn.v_proj"), hk, d, spec.qkv_bias)?,
                w.linear(&format!("{b}mlp.gate_proj"), dff, d, spec.mlp_bias)?,
                w.linear(&format!("{b}mlp.up_proj"), dff, d, spec.mlp_bias)?,
            )
        };
        let (q_norm, k_norm) = if spec.qk_norm {
            (
                Some(rms(&format!("{b}self_attn.q_norm.weight"), dh)?),
                Some(rms(&format!("{b}self_attn.k_norm.weight"), dh)?),
            )
        } else {
            (None, None)
        };
        let (post_attn_norm, ffn_norm, post_ffn_norm) = if spec.gemma {
            (
                Some(rms(&format!("{b}post_attention_layernorm.weight"), d)?),
                Some(rms(&format!("{b}pre_feedforward_layernorm.weight"), d)?),
                Some(rms(&format!("{b}post_feedforward_layernorm.weight"), d)?),
            )
        } else {
            (
                None,
                Some(rms(&format!("{b}post_attention_layernorm.weight"), d)?),
                None,
            )
        };
        layers.push(Layer {
            attn_norm: Some(rms(&format!("{b}input_layernorm.weight"), d)?),
            wq,
            wk,
            wv,
            wo: w.linear(&format!("{b}self_attn.o_proj"), d, hq, spec.o_bias)?,
            q_norm,
            k_norm,
            post_attn_norm,
            ffn_norm,
            post_ffn_norm,
            gate: Some(gate),
            up,
            down: w.linear(&format!("{b}mlp.down_proj"), d, dff, spec.mlp_bias)?,
            rope: Some(plan.rope),
            window: plan.window,
        });
    }
    let lm_head = if tie {
        None
    } else {
        Some(w.linear("lm_head", vocab, d, false)?)
    };
    let bos_id = c
        .get("bos_token_id")
        .and_then(Value::as_u64)
        .filter(|&b| (b as usize) < vocab)
        .map(|v| v as u32);
    Ok(Pretrained {
        cfg: Config {
            arch: spec.arch,
            n_layer,
            d_model: d,
            n_head,
            n_kv_head: n_kv,
            head_dim: dh,
            vocab,
            max_context,
            causal: true,
            act: spec.act,
            attn_scale,
            embed_scale: if spec.gemma { (d as f32).sqrt() } else { 1.0 },
            bos_id,
            add_bos: true,
            post_norm: false,
            attn_softcap: softcaps.0,
            final_softcap: softcaps.1,
        },
        embed,
        pos_embed: None,
        type_embed: None,
        embed_norm: None,
        layers,
        final_norm: Some(rms("model.norm.weight", d)?),
        lm_head,
        has_lm_head: true,
        matmul: Default::default(),
    })
}

/// The MLP activation named by `hidden_act` / `hidden_activation`.
pub fn activation(c: &HfCfg, key: &str, default: &str) -> Result<Act, RealError> {
    let a = c.str_or(key, default)?;
    Ok(match a.as_str() {
        "silu" | "swish" => Act::Silu,
        "gelu_pytorch_tanh" | "gelu_new" | "gelu_tanh" => Act::GeluTanh,
        "gelu" => Act::GeluErf,
        other => {
            return Err(c.err(format!(
                "`{key}` = \"{other}\" is not supported (silu, gelu, gelu_new, gelu_pytorch_tanh)"
            )));
        }
    })
}

/// Per-layer attention kind from `layer_types` (`full_attention` / `sliding_attention`), or
/// `default(l)` when the key is absent. Returns `true` for sliding layers.
pub fn layer_types(
    c: &HfCfg,
    n_layer: usize,
    default: impl Fn(usize) -> bool,
) -> Result<Vec<bool>, RealError> {
    match c.get("layer_types") {
        None => Ok((0..n_layer).map(default).collect()),
        Some(Value::Array(a)) if a.len() == n_layer => a
            .iter()
            .map(|v| match v.as_str() {
                Some("full_attention") => Ok(false),
                Some("sliding_attention") => Ok(true),
                _ => Err(c.err(format!(
                    "`layer_types` entry {v} is not supported (full_attention, sliding_attention)"
                ))),
            })
            .collect(),
        Some(v) => Err(c.err(format!(
            "`layer_types` = {v} is not a list of {n_layer} layer kinds"
        ))),
    }
}

/// Loads a Hugging Face directory (or a `.safetensors` file inside one): reads `config.json`
/// and dispatches on `model_type`.
pub fn load_hf(path: &Path) -> Result<Pretrained, RealError> {
    load_hf_keys(path).map(|(m, _)| m)
}

/// The `config.json` keys an architecture reads (`KEYS` of its module), by `model_type`.
pub fn keys_of(model_type: &str) -> Option<&'static [&'static str]> {
    Some(match model_type {
        "bert" => bert::KEYS,
        "gpt2" => gpt2::KEYS,
        "llama" | "mistral" => llama::KEYS,
        "qwen2" => qwen2::KEYS,
        "qwen3" => qwen3::KEYS,
        "gemma2" => gemma2::KEYS,
        "gemma3_text" => gemma3::KEYS,
        "phi3" => phi3::KEYS,
        _ => return None,
    })
}

/// [`load_hf`], also returning the `config.json` keys the loader read (for the test that the
/// `KEYS` lists are truthful).
pub fn load_hf_keys(path: &Path) -> Result<(Pretrained, BTreeSet<String>), RealError> {
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let c = HfCfg::open(&dir.join("config.json"))?;
    let w = if path.is_dir() {
        Checkpoint::open_dir(&dir)?
    } else {
        Checkpoint::open_file(path)?
    };
    let mt = c.str_or("model_type", "")?;
    let m = match mt.as_str() {
        "bert" => bert::from_hf(&c, &w)?,
        "gpt2" => gpt2::from_hf(&c, &w)?,
        "llama" | "mistral" => llama::from_hf(&c, &w, &mt)?,
        "qwen2" => qwen2::from_hf(&c, &w)?,
        "qwen3" => qwen3::from_hf(&c, &w)?,
        "gemma2" => gemma2::from_hf(&c, &w)?,
        "gemma3_text" => gemma3::from_hf(&c, &w)?,
        "phi3" => phi3::from_hf(&c, &w)?,
        other => {
            return Err(c.err(format!(
                "unknown architecture `model_type: {other}` (supported: {})",
                HF_TYPES.join(", ")
            )));
        }
    };
    c.finish(&mt)?;
    m.validate(w.path())?;
    Ok((m, c.keys_read()))
}

/// `model_type`s a Hugging Face directory may have.
pub const HF_TYPES: &[&str] = &[
    "bert",
    "gpt2",
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "phi3",
];

/// `general.architecture`s a GGUF file may have.
pub const GGUF_ARCHS: &[&str] = &["llama", "mistral", "qwen2", "gemma3"];

/// Loads a GGUF file: dispatches on `general.architecture`.
pub fn load_gguf(path: &Path) -> Result<Pretrained, RealError> {
    let mut g = GgufFile::open(path)?;
    let arch = g
        .meta_str("general.architecture")
        .ok_or_else(|| g.err("missing metadata `general.architecture`"))?
        .to_string();
    let m = match arch.as_str() {
        "llama" | "mistral" => llama::from_gguf(&mut g, &arch)?,
        "qwen2" => qwen2::from_gguf(&mut g)?,
        "gemma3" => gemma3::from_gguf(&mut g)?,
        other => {
            return Err(g.err(format!(
                "unknown architecture `{other}` for GGUF (supported: {}; Qwen3, Gemma 2 \
                 and Phi-3 load from Hugging Face directories)",
                GGUF_ARCHS.join(", ")
            )));
        }
    };
    m.validate(path)?;
    Ok(m)
}

/// Refuses GGUF metadata under `<arch>.` that the architecture does not read.
pub fn check_gguf_keys(g: &GgufFile, arch: &str, known: &[&str]) -> Result<(), RealError> {
    let pre = format!("{arch}.");
    for k in g.content().metadata.keys() {
        if let Some(rest) = k.strip_prefix(&pre)
            && !known.contains(&rest)
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
    /// Context length.
    pub ctx: usize,
    /// RMSNorm ε.
    pub eps: f32,
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
            && super::gguf::value_usize(v) != Some(dh)
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
            && super::gguf::value_usize(v) != Some(dh)
        {
            return Err(g.err(format!(
                "metadata `{}` = {v:?}: partial rotary (≠ head dim {dh}) is not supported for GGUF",
                k("rope.dimension_count")
            )));
        }
        Ok(Self {
            n_layer,
            d,
            n_head,
            n_kv,
            dh,
            ctx,
            eps,
            base,
        })
    }
}
