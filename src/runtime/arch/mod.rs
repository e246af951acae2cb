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
pub mod decoder;
pub mod gemma2;
pub mod gemma3;
pub mod gpt2;
pub mod gpt_oss;
pub mod llama;
pub mod phi3;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3_moe;
pub mod rope;

use super::RealError;
use super::gguf::GgufFile;
use super::pretrained::{Act, Pretrained};
use super::safetensors::Checkpoint;
pub use decoder::{
    DECODER_KEYS, DecoderDims, DecoderSpec, GGUF_DECODER_KEYS, GgufDims, LayerPlan,
    check_gguf_keys, decoder_gguf, decoder_hf, one_rope_hf, plain_scale, same_rope, swiglu_dims,
};
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
    "router_aux_loss_coef",
    "output_router_logits",
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
        let text = crate::budget::read_text(path, crate::budget::MAX_CONFIG_BYTES)
            .map_err(|e| RealError::io(path, e))?;
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

    /// Refuses `key` unless it is absent or `false` (a switch for a feature not implemented);
    /// `why` is the reason the error gives.
    pub fn require_off(&self, key: &str, why: &str) -> Result<(), RealError> {
        self.require(key, &Value::Bool(false), why)
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

/// The `config.json` keys an architecture reads, by `model_type`: the `KEYS` of its module,
/// with [`DECODER_KEYS`] for the Llama-like decoders (and Gemma 2's for Gemma 3).
pub fn keys_of(model_type: &str) -> Option<Vec<&'static str>> {
    let parts: &[&[&str]] = match model_type {
        "bert" => &[bert::KEYS],
        "gpt2" => &[gpt2::KEYS],
        "llama" | "mistral" => &[DECODER_KEYS, llama::KEYS],
        "qwen2" => &[DECODER_KEYS, qwen2::KEYS],
        "qwen3" => &[DECODER_KEYS, qwen3::KEYS],
        "qwen3_moe" => &[DECODER_KEYS, qwen3_moe::KEYS],
        "gpt_oss" => &[DECODER_KEYS, gpt_oss::KEYS],
        "gemma2" => &[DECODER_KEYS, gemma2::KEYS],
        "gemma3_text" => &[DECODER_KEYS, gemma2::KEYS, gemma3::KEYS],
        "phi3" => &[DECODER_KEYS, phi3::KEYS],
        _ => return None,
    };
    Some(parts.concat())
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
        "qwen3_moe" => qwen3_moe::from_hf(&c, &w)?,
        "gpt_oss" => gpt_oss::from_hf(&c, &w)?,
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
    "qwen3_moe",
    "gpt_oss",
    "gemma2",
    "gemma3_text",
    "phi3",
];

/// `general.architecture`s a GGUF file may have.
pub const GGUF_ARCHS: &[&str] = &["llama", "mistral", "qwen2", "gemma3", "qwen3moe", "gpt-oss"];

/// Builds the model of an opened GGUF file: dispatches on `general.architecture`.
pub fn from_gguf(g: &mut GgufFile, path: &Path) -> Result<Pretrained, RealError> {
    let arch = g
        .meta_str("general.architecture")
        .ok_or_else(|| g.err("missing metadata `general.architecture`"))?
        .to_string();
    let m = match arch.as_str() {
        "llama" | "mistral" => llama::from_gguf(g, &arch)?,
        "qwen2" => qwen2::from_gguf(g)?,
        "gemma3" => gemma3::from_gguf(g)?,
        "qwen3moe" => qwen3_moe::from_gguf(g)?,
        "gpt-oss" => gpt_oss::from_gguf(g)?,
        other => {
            return Err(g.err(format!(
                "unknown architecture `{other}` for GGUF (supported: {}; Qwen3, Gemma 2 and \
                 Phi-3 load from Hugging Face directories)",
                GGUF_ARCHS.join(", ")
            )));
        }
    };
    // Every tensor is used exactly once: one the architecture does not read (a layer beyond
    // `block_count`, a tensor of another architecture) is refused by name, as a missing one is.
    let unread = g.unread_tensors();
    if let Some(first) = unread.first() {
        let more = match unread.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        return Err(g.err(format!(
            "tensor `{first}`{more} not used by the `{arch}` loader ({} layers from \
             `{arch}.block_count`); sinklab refuses a file whose tensors it would not run",
            m.layers.len()
        )));
    }
    m.validate(path)?;
    Ok(m)
}
