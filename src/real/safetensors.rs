//! Hugging Face model directories: `config.json` + `model.safetensors` (f32, f16 or bf16).
//! Architectures: BERT (`bert`), GPT-2 (`gpt2`), Llama family (`llama`, `mistral`, `qwen2`).

use super::RealError;
use super::model::{Act, Arch, Config, Layer, Linear, Model, Norm, Rope};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Decodes a tensor's little-endian data to f32 (row-major): floats F32, F16, BF16, F64 and
/// integers I64, I32, U32, U64; any other dtype is returned as the error. The crate's one
/// dtype decoder (model weights, activation files).
pub fn decode(t: &safetensors::tensor::TensorView<'_>) -> Result<Vec<f32>, Dtype> {
    let data = t.data();
    let c8 = |c: &[u8]| -> [u8; 8] { c.try_into().unwrap_or([0; 8]) };
    Ok(match t.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c8(c)) as f32)
            .collect(),
        Dtype::I64 => data
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c8(c)) as f32)
            .collect(),
        Dtype::U64 => data
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c8(c)) as f32)
            .collect(),
        Dtype::I32 => data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
            .collect(),
        Dtype::U32 => data
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
            .collect(),
        other => return Err(other),
    })
}

/// A parsed safetensors file held in memory.
pub struct StFile {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl StFile {
    /// Reads a safetensors file and checks its header.
    pub fn open(path: &Path) -> Result<Self, RealError> {
        let bytes = std::fs::read(path).map_err(|e| RealError::io(path, e))?;
        SafeTensors::deserialize(&bytes)
            .map_err(|e| RealError::file(path, format!("not a valid safetensors file: {e}")))?;
        Ok(Self {
            path: path.to_path_buf(),
            bytes,
        })
    }

    fn st(&self) -> SafeTensors<'_> {
        // Checked in `open`.
        SafeTensors::deserialize(&self.bytes).expect("validated at open")
    }

    /// Tensor names.
    pub fn names(&self) -> Vec<String> {
        self.st()
            .names()
            .into_iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// Whether a tensor exists.
    pub fn has(&self, name: &str) -> bool {
        self.st().tensor(name).is_ok()
    }

    /// A tensor converted to f32 (row-major) and its shape.
    pub fn tensor(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), RealError> {
        let st = self.st();
        let t = st
            .tensor(name)
            .map_err(|_| RealError::file(&self.path, format!("missing tensor `{name}`")))?;
        let v = decode(&t).map_err(|other| {
            RealError::file(
                &self.path,
                format!("tensor `{name}` has unsupported dtype {other:?}"),
            )
        })?;
        let shape = t.shape().to_vec();
        if v.len() != shape.iter().product::<usize>() {
            return Err(RealError::file(
                &self.path,
                format!("tensor `{name}`: data length does not match shape {shape:?}"),
            ));
        }
        Ok((v, shape))
    }

    fn finite(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), RealError> {
        let (v, s) = self.tensor(name)?;
        if let Some(k) = v.iter().position(|x| !x.is_finite()) {
            return Err(RealError::file(
                &self.path,
                format!("tensor `{name}` has a non-finite value at index {k}"),
            ));
        }
        Ok((v, s))
    }

    fn shaped(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RealError> {
        let (v, s) = self.finite(name)?;
        if s != shape {
            return Err(RealError::file(
                &self.path,
                format!("tensor `{name}` has shape {s:?}, expected {shape:?}"),
            ));
        }
        Ok(v)
    }

    fn linear(&self, name: &str, out: usize, inp: usize, bias: bool) -> Result<Linear, RealError> {
        let w = self.shaped(&format!("{name}.weight"), &[out, inp])?;
        let bn = format!("{name}.bias");
        let b = if bias || self.has(&bn) {
            Some(self.shaped(&bn, &[out])?)
        } else {
            None
        };
        Ok(Linear { w, out, inp, b })
    }

    fn layer_norm(&self, name: &str, d: usize, eps: f32) -> Result<Norm, RealError> {
        Ok(Norm::Layer {
            w: self.shaped(&format!("{name}.weight"), &[d])?,
            b: self.shaped(&format!("{name}.bias"), &[d])?,
            eps,
        })
    }
}

fn cfg_usize(cfg: &Value, key: &str, path: &Path) -> Result<usize, RealError> {
    cfg.get(key)
        .and_then(Value::as_u64)
        .map(|v| v as usize)
        .ok_or_else(|| RealError::file(path, format!("missing or non-integer `{key}`")))
}

fn cfg_f32(cfg: &Value, key: &str, default: f32) -> f32 {
    cfg.get(key)
        .and_then(Value::as_f64)
        .map(|v| v as f32)
        .unwrap_or(default)
}

/// Loads a Hugging Face directory (or a `model.safetensors` inside one).
pub fn load(path: &Path) -> Result<Model, RealError> {
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let cfg_path = dir.join("config.json");
    let cfg_text = std::fs::read_to_string(&cfg_path).map_err(|e| RealError::io(&cfg_path, e))?;
    let cfg: Value = serde_json::from_str(&cfg_text)
        .map_err(|e| RealError::file(&cfg_path, format!("invalid JSON: {e}")))?;
    let st_path = if path.is_dir() {
        dir.join("model.safetensors")
    } else {
        path.to_path_buf()
    };
    let st = StFile::open(&st_path)?;
    let mt = cfg
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let m = match mt.as_str() {
        "bert" => load_bert(&st, &cfg, &cfg_path)?,
        "gpt2" => load_gpt2(&st, &cfg, &cfg_path)?,
        "llama" | "mistral" | "qwen2" => load_llama(&st, &cfg, &cfg_path)?,
        other => {
            return Err(RealError::file(
                &cfg_path,
                format!(
                    "unknown architecture `model_type: {other}` (supported: bert, gpt2, llama, mistral, qwen2)"
                ),
            ));
        }
    };
    m.validate(&st_path)?;
    Ok(m)
}

fn load_bert(st: &StFile, cfg: &Value, cp: &Path) -> Result<Model, RealError> {
    let d = cfg_usize(cfg, "hidden_size", cp)?;
    let n_layer = cfg_usize(cfg, "num_hidden_layers", cp)?;
    let n_head = cfg_usize(cfg, "num_attention_heads", cp)?;
    let dff = cfg_usize(cfg, "intermediate_size", cp)?;
    let vocab = cfg_usize(cfg, "vocab_size", cp)?;
    let ctx = cfg_usize(cfg, "max_position_embeddings", cp)?;
    let eps = cfg_f32(cfg, "layer_norm_eps", 1e-12);
    if n_head == 0 || d % n_head != 0 {
        return Err(RealError::file(
            cp,
            format!("hidden_size {d} is not a multiple of num_attention_heads {n_head}"),
        ));
    }
    let p = if st.has("bert.embeddings.word_embeddings.weight") {
        "bert."
    } else {
        ""
    };
    let embed = st.shaped(
        &format!("{p}embeddings.word_embeddings.weight"),
        &[vocab, d],
    )?;
    let pos = st.shaped(
        &format!("{p}embeddings.position_embeddings.weight"),
        &[ctx, d],
    )?;
    let (types, ts) = st.finite(&format!("{p}embeddings.token_type_embeddings.weight"))?;
    if ts.len() != 2 || ts[1] != d {
        return Err(RealError::file(
            &st.path,
            format!("token_type_embeddings has shape {ts:?}"),
        ));
    }
    let embed_norm = Some(st.layer_norm(&format!("{p}embeddings.LayerNorm"), d, eps)?);
    let mut layers = Vec::new();
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
            gate: None,
            up: st.linear(&format!("{b}intermediate.dense"), dff, d, true)?,
            down: st.linear(&format!("{b}output.dense"), d, dff, true)?,
            rope: None,
            window: None,
        });
    }
    let act = match cfg
        .get("hidden_act")
        .and_then(Value::as_str)
        .unwrap_or("gelu")
    {
        "gelu" => Act::GeluErf,
        "gelu_new" | "gelu_pytorch_tanh" => Act::GeluTanh,
        other => {
            return Err(RealError::file(
                cp,
                format!("unsupported hidden_act `{other}`"),
            ));
        }
    };
    Ok(Model {
        cfg: Config {
            arch: Arch::Bert,
            n_layer,
            d_model: d,
            n_head,
            n_kv_head: n_head,
            head_dim: d / n_head,
            vocab,
            max_context: ctx,
            causal: false,
            act,
            attn_scale: 1.0 / ((d / n_head) as f32).sqrt(),
            embed_scale: 1.0,
            bos_id: None,
            add_bos: true,
            post_norm: true,
        },
        embed,
        pos_embed: Some(pos),
        type_embed: Some(types[..d].to_vec()),
        embed_norm,
        layers,
        final_norm: None,
        lm_head: None,
        has_lm_head: false,
    })
}

fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut o = vec![0f32; w.len()];
    for i in 0..rows {
        for j in 0..cols {
            o[j * rows + i] = w[i * cols + j];
        }
    }
    o
}

fn load_gpt2(st: &StFile, cfg: &Value, cp: &Path) -> Result<Model, RealError> {
    let d = cfg_usize(cfg, "n_embd", cp)?;
    let n_layer = cfg_usize(cfg, "n_layer", cp)?;
    let n_head = cfg_usize(cfg, "n_head", cp)?;
    let vocab = cfg_usize(cfg, "vocab_size", cp)?;
    let ctx = cfg_usize(cfg, "n_positions", cp)?;
    let eps = cfg_f32(cfg, "layer_norm_epsilon", 1e-5);
    let dff = cfg
        .get("n_inner")
        .and_then(Value::as_u64)
        .map(|v| v as usize)
        .unwrap_or(4 * d);
    if n_head == 0 || d % n_head != 0 {
        return Err(RealError::file(
            cp,
            format!("n_embd {d} is not a multiple of n_head {n_head}"),
        ));
    }
    let p = if st.has("transformer.wte.weight") {
        "transformer."
    } else {
        ""
    };
    let embed = st.shaped(&format!("{p}wte.weight"), &[vocab, d])?;
    let pos = st.shaped(&format!("{p}wpe.weight"), &[ctx, d])?;
    // GPT-2's Conv1D stores weights as [in, out]: transpose to [out, in].
    let conv = |name: &str, inp: usize, out: usize| -> Result<Linear, RealError> {
        let w = st.shaped(&format!("{name}.weight"), &[inp, out])?;
        let b = st.shaped(&format!("{name}.bias"), &[out])?;
        Ok(Linear {
            w: transpose(&w, inp, out),
            out,
            inp,
            b: Some(b),
        })
    };
    let mut layers = Vec::new();
    for l in 0..n_layer {
        let b = format!("{p}h.{l}.");
        let qkv = conv(&format!("{b}attn.c_attn"), d, 3 * d)?;
        let bias = qkv.b.clone().unwrap_or_default();
        let part = |k: usize| Linear {
            w: qkv.w[k * d * d..(k + 1) * d * d].to_vec(),
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
            gate: None,
            up: conv(&format!("{b}mlp.c_fc"), d, dff)?,
            down: conv(&format!("{b}mlp.c_proj"), dff, d)?,
            rope: None,
            window: None,
        });
    }
    Ok(Model {
        cfg: Config {
            arch: Arch::Gpt2,
            n_layer,
            d_model: d,
            n_head,
            n_kv_head: n_head,
            head_dim: d / n_head,
            vocab,
            max_context: ctx,
            causal: true,
            act: Act::GeluTanh,
            attn_scale: 1.0 / ((d / n_head) as f32).sqrt(),
            embed_scale: 1.0,
            bos_id: cfg
                .get("bos_token_id")
                .and_then(Value::as_u64)
                .map(|v| v as u32),
            add_bos: false,
            post_norm: false,
        },
        embed,
        pos_embed: Some(pos),
        type_embed: None,
        embed_norm: None,
        layers,
        final_norm: Some(st.layer_norm(&format!("{p}ln_f"), d, eps)?),
        lm_head: None,
        has_lm_head: true,
    })
}

fn load_llama(st: &StFile, cfg: &Value, cp: &Path) -> Result<Model, RealError> {
    let d = cfg_usize(cfg, "hidden_size", cp)?;
    let n_layer = cfg_usize(cfg, "num_hidden_layers", cp)?;
    let n_head = cfg_usize(cfg, "num_attention_heads", cp)?;
    let n_kv = cfg
        .get("num_key_value_heads")
        .and_then(Value::as_u64)
        .map(|v| v as usize)
        .unwrap_or(n_head);
    let dff = cfg_usize(cfg, "intermediate_size", cp)?;
    let vocab = cfg_usize(cfg, "vocab_size", cp)?;
    let ctx = cfg_usize(cfg, "max_position_embeddings", cp)?;
    let eps = cfg_f32(cfg, "rms_norm_eps", 1e-6);
    let base = cfg_f32(cfg, "rope_theta", 10000.0);
    if n_head == 0 || n_kv == 0 || d % n_head != 0 {
        return Err(RealError::file(
            cp,
            format!("hidden_size {d} / heads {n_head} / kv heads {n_kv} inconsistent"),
        ));
    }
    let dh = cfg
        .get("head_dim")
        .and_then(Value::as_u64)
        .map(|v| v as usize)
        .unwrap_or(d / n_head);
    let embed = st.shaped("model.embed_tokens.weight", &[vocab, d])?;
    let rms = |name: String| -> Result<Norm, RealError> {
        Ok(Norm::Rms {
            w: st.shaped(&name, &[d])?,
            eps,
        })
    };
    let mut layers = Vec::new();
    for l in 0..n_layer {
        let b = format!("model.layers.{l}.");
        layers.push(Layer {
            attn_norm: Some(rms(format!("{b}input_layernorm.weight"))?),
            wq: st.linear(&format!("{b}self_attn.q_proj"), n_head * dh, d, false)?,
            wk: st.linear(&format!("{b}self_attn.k_proj"), n_kv * dh, d, false)?,
            wv: st.linear(&format!("{b}self_attn.v_proj"), n_kv * dh, d, false)?,
            wo: st.linear(&format!("{b}self_attn.o_proj"), d, n_head * dh, false)?,
            q_norm: None,
            k_norm: None,
            post_attn_norm: None,
            ffn_norm: Some(rms(format!("{b}post_attention_layernorm.weight"))?),
            post_ffn_norm: None,
            gate: Some(st.linear(&format!("{b}mlp.gate_proj"), dff, d, false)?),
            up: st.linear(&format!("{b}mlp.up_proj"), dff, d, false)?,
            down: st.linear(&format!("{b}mlp.down_proj"), d, dff, false)?,
            rope: Some(Rope { base, dim: dh }),
            window: None,
        });
    }
    let lm_head = if st.has("lm_head.weight") {
        Some(st.linear("lm_head", vocab, d, false)?)
    } else {
        None
    };
    Ok(Model {
        cfg: Config {
            arch: Arch::Llama,
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
            bos_id: cfg
                .get("bos_token_id")
                .and_then(Value::as_u64)
                .map(|v| v as u32),
            add_bos: true,
            post_norm: false,
        },
        embed,
        pos_embed: None,
        type_embed: None,
        embed_norm: None,
        layers,
        final_norm: Some(rms("model.norm.weight".into())?),
        lm_head,
        has_lm_head: true,
    })
}
