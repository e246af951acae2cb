//! GGUF model files through candle-core's reader (`quantized::gguf_file`) and its
//! dequantization to f32. Supports the `llama` (incl. Qwen2-style biases: `qwen2`) and
//! `gemma3` architectures.
//!
//! llama.cpp's converter permutes the Q and K rows of Llama-family models so that RoPE can
//! rotate interleaved pairs `(2j, 2j+1)`; within each head, GGUF row `2j + s` is Hugging Face
//! row `s·d_head/2 + j`. We undo this, so the model uses half-split RoPE on rows in Hugging Face
//! order (and captured q/k match transformers). Gemma 3 is stored unpermuted.

use super::RealError;
use super::model::{Act, Arch, Config, Layer, Linear, Model, Norm, Rope};
use candle_core::quantized::gguf_file::{Content, Value};
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// An open GGUF file: header, metadata and tensor directory.
pub struct GgufFile {
    path: PathBuf,
    content: Content,
    reader: BufReader<File>,
}

/// A candle error's message without the backtrace candle may attach to it.
fn candle_msg(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => candle_msg(inner),
        other => other.to_string(),
    }
}

impl GgufFile {
    /// Opens and parses the header of a GGUF file.
    pub fn open(path: &Path) -> Result<Self, RealError> {
        let f = File::open(path).map_err(|e| RealError::io(path, e))?;
        let mut reader = BufReader::new(f);
        let content = Content::read(&mut reader).map_err(|e| {
            RealError::file(
                path,
                format!("not a readable GGUF file: {}", candle_msg(&e)),
            )
        })?;
        // Check every tensor's extent before candle reads it (its element count is an unchecked
        // product: a corrupt dimension would overflow).
        let file_len = std::fs::metadata(path)
            .map_err(|e| RealError::io(path, e))?
            .len();
        for (name, ti) in &content.tensor_infos {
            let dims = ti.shape.dims();
            // Zero elements is rejected too: candle then casts a dangling u8 pointer to a block type.
            let n = dims
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
                .filter(|&n| n > 0);
            let bs = ti.ggml_dtype.block_size() as u64;
            let bytes = n
                .filter(|n| bs > 0 && n % bs == 0)
                .and_then(|n| (n / bs).checked_mul(ti.ggml_dtype.type_size() as u64));
            let end = bytes
                .and_then(|b| b.checked_add(content.tensor_data_offset))
                .and_then(|e| e.checked_add(ti.offset));
            match end {
                Some(e) if e <= file_len => {}
                Some(e) => {
                    return Err(RealError::file(
                        path,
                        format!(
                            "tensor `{name}` {dims:?} ends at byte {e}, past the end of the file ({file_len} bytes): truncated?"
                        ),
                    ));
                }
                None => {
                    return Err(RealError::file(
                        path,
                        format!(
                            "tensor `{name}` has an impossible shape {dims:?} for {:?}",
                            ti.ggml_dtype
                        ),
                    ));
                }
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            content,
            reader,
        })
    }

    /// The parsed header (metadata and tensor infos).
    pub fn content(&self) -> &Content {
        &self.content
    }

    /// A metadata value.
    pub fn meta(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    fn err(&self, msg: impl Into<String>) -> RealError {
        RealError::file(&self.path, msg)
    }

    /// A required integer metadata value.
    pub fn meta_usize(&self, key: &str) -> Result<usize, RealError> {
        let v = self
            .meta(key)
            .ok_or_else(|| self.err(format!("missing metadata `{key}`")))?;
        value_usize(v).ok_or_else(|| self.err(format!("metadata `{key}` is not an integer: {v:?}")))
    }

    /// A float metadata value, or `default`.
    pub fn meta_f32_or(&self, key: &str, default: f32) -> Result<f32, RealError> {
        match self.meta(key) {
            None => Ok(default),
            Some(Value::F32(v)) => Ok(*v),
            Some(Value::F64(v)) => Ok(*v as f32),
            Some(v) => value_usize(v)
                .map(|u| u as f32)
                .ok_or_else(|| self.err(format!("metadata `{key}` is not a number: {v:?}"))),
        }
    }

    /// A string metadata value.
    pub fn meta_str(&self, key: &str) -> Option<&str> {
        match self.meta(key) {
            Some(Value::String(s)) => Some(s.as_str()),
            _ => None,
        }
    }

    /// Whether a tensor exists.
    pub fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Reads and dequantizes a tensor to f32; returns (row-major data, dims in PyTorch order).
    pub fn tensor(&mut self, name: &str) -> Result<(Vec<f32>, Vec<usize>), RealError> {
        if !self.has(name) {
            return Err(self.err(format!("missing tensor `{name}`")));
        }
        let qt = self
            .content
            .tensor(&mut self.reader, name, &candle_core::Device::Cpu)
            .map_err(|e| {
                RealError::file(&self.path, format!("tensor `{name}`: {}", candle_msg(&e)))
            })?;
        let dims = qt.shape().dims().to_vec();
        let t = qt
            .dequantize(&candle_core::Device::Cpu)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_dtype(candle_core::DType::F32))
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| {
                RealError::file(
                    &self.path,
                    format!("tensor `{name}`: dequantization failed: {}", candle_msg(&e)),
                )
            })?;
        if let Some(k) = t.iter().position(|v| !v.is_finite()) {
            return Err(self.err(format!(
                "tensor `{name}` has a non-finite value at index {k}"
            )));
        }
        Ok((t, dims))
    }

    fn matrix(&mut self, name: &str, out: usize, inp: usize) -> Result<Vec<f32>, RealError> {
        let (w, dims) = self.tensor(name)?;
        if dims != [out, inp] {
            return Err(self.err(format!(
                "tensor `{name}` has shape {dims:?}, expected [{out}, {inp}]"
            )));
        }
        Ok(w)
    }

    fn vector(&mut self, name: &str, n: usize) -> Result<Vec<f32>, RealError> {
        let (w, dims) = self.tensor(name)?;
        if w.len() != n {
            return Err(self.err(format!(
                "tensor `{name}` has shape {dims:?}, expected [{n}]"
            )));
        }
        Ok(w)
    }

    fn linear(&mut self, name: &str, out: usize, inp: usize) -> Result<Linear, RealError> {
        let w = self.matrix(&format!("{name}.weight"), out, inp)?;
        let bn = format!("{name}.bias");
        let b = if self.has(&bn) {
            Some(self.vector(&bn, out)?)
        } else {
            None
        };
        Ok(Linear { w, out, inp, b })
    }
}

fn value_usize(v: &Value) -> Option<usize> {
    Some(match v {
        Value::U8(x) => *x as usize,
        Value::U16(x) => *x as usize,
        Value::U32(x) => *x as usize,
        Value::U64(x) => *x as usize,
        Value::I8(x) if *x >= 0 => *x as usize,
        Value::I16(x) if *x >= 0 => *x as usize,
        Value::I32(x) if *x >= 0 => *x as usize,
        Value::I64(x) if *x >= 0 => *x as usize,
        _ => return None,
    })
}

/// Undoes llama.cpp's Q/K row permutation: within each head, GGUF row `2j+s` → HF row `s·half+j`.
pub fn unpermute_rows(w: &[f32], n_heads: usize, head_dim: usize, cols: usize) -> Vec<f32> {
    let half = head_dim / 2;
    let mut out = vec![0f32; w.len()];
    for h in 0..n_heads {
        for j in 0..half {
            for s in 0..2 {
                let src = h * head_dim + 2 * j + s;
                let dst = h * head_dim + s * half + j;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

fn unpermute_vec(b: &[f32], n_heads: usize, head_dim: usize) -> Vec<f32> {
    unpermute_rows(b, n_heads, head_dim, 1)
}

/// Loads a GGUF model (architectures `llama`, `qwen2`, `mistral`, `gemma3`).
pub fn load(path: &Path) -> Result<Model, RealError> {
    let mut g = GgufFile::open(path)?;
    let arch_s = g
        .meta_str("general.architecture")
        .ok_or_else(|| g.err("missing metadata `general.architecture`"))?
        .to_string();
    let arch = match arch_s.as_str() {
        "llama" | "mistral" | "qwen2" => Arch::Llama,
        "gemma3" => Arch::Gemma3,
        other => {
            return Err(g.err(format!(
                "unknown architecture `{other}` (supported: llama, mistral, qwen2, gemma3)"
            )));
        }
    };
    let k = |s: &str| format!("{arch_s}.{s}");
    let n_layer = g.meta_usize(&k("block_count"))?;
    let d = g.meta_usize(&k("embedding_length"))?;
    let n_head = g.meta_usize(&k("attention.head_count"))?;
    let n_kv_head = match g.meta(&k("attention.head_count_kv")) {
        Some(_) => g.meta_usize(&k("attention.head_count_kv"))?,
        None => n_head,
    };
    if n_head == 0 || n_kv_head == 0 || n_layer == 0 || d == 0 {
        return Err(g.err("zero layers, heads or width in the metadata"));
    }
    let head_dim = match g.meta(&k("attention.key_length")) {
        Some(_) => g.meta_usize(&k("attention.key_length"))?,
        None => d / n_head,
    };
    let ctx = g.meta_usize(&k("context_length"))?;
    let eps = g.meta_f32_or(&k("attention.layer_norm_rms_epsilon"), 1e-6)?;
    let base = g.meta_f32_or(&k("rope.freq_base"), 10000.0)?;
    let (embed, dims) = g.tensor("token_embd.weight")?;
    if dims.len() != 2 || dims[1] != d {
        return Err(g.err(format!(
            "token_embd.weight has shape {dims:?}, expected [vocab, {d}]"
        )));
    }
    let vocab = dims[0];
    let bos_id = g
        .meta("tokenizer.ggml.bos_token_id")
        .and_then(value_usize)
        .map(|v| v as u32);
    let add_bos = match g.meta("tokenizer.ggml.add_bos_token") {
        Some(Value::Bool(b)) => *b,
        _ => arch == Arch::Gemma3,
    };
    let gemma = arch == Arch::Gemma3;
    let window = g.meta(&k("attention.sliding_window")).and_then(value_usize);
    let rms = |w: Vec<f32>| Norm::Rms { w, eps };
    let (hq, hk) = (n_head * head_dim, n_kv_head * head_dim);
    let mut layers = Vec::with_capacity(n_layer);
    for l in 0..n_layer {
        let p = |s: &str| format!("blk.{l}.{s}");
        let attn_norm = Some(rms(g.vector(&p("attn_norm.weight"), d)?));
        let mut wq = g.linear(&p("attn_q"), hq, d)?;
        let mut wk = g.linear(&p("attn_k"), hk, d)?;
        if !gemma {
            wq.w = unpermute_rows(&wq.w, n_head, head_dim, d);
            wk.w = unpermute_rows(&wk.w, n_kv_head, head_dim, d);
            wq.b = wq.b.map(|b| unpermute_vec(&b, n_head, head_dim));
            wk.b = wk.b.map(|b| unpermute_vec(&b, n_kv_head, head_dim));
        }
        let wv = g.linear(&p("attn_v"), hk, d)?;
        let wo = g.linear(&p("attn_output"), d, hq)?;
        let ffn_norm = Some(rms(g.vector(&p("ffn_norm.weight"), d)?));
        let (up_w, up_dims) = g.tensor(&p("ffn_up.weight"))?;
        if up_dims.len() != 2 || up_dims[1] != d {
            return Err(g.err(format!(
                "{} has shape {up_dims:?}, expected [d_ff, {d}]",
                p("ffn_up.weight")
            )));
        }
        let dff = up_dims[0];
        let up = Linear {
            w: up_w,
            out: dff,
            inp: d,
            b: None,
        };
        let gate = Some(g.linear(&p("ffn_gate"), dff, d)?);
        let down = g.linear(&p("ffn_down"), d, dff)?;
        let (q_norm, k_norm, post_attn_norm, post_ffn_norm, rope_base, win) = if gemma {
            // Gemma 3: every 6th layer is global (θ from the metadata), the others local (θ = 10⁴, sliding window).
            let global = (l + 1) % 6 == 0;
            (
                Some(rms(g.vector(&p("attn_q_norm.weight"), head_dim)?)),
                Some(rms(g.vector(&p("attn_k_norm.weight"), head_dim)?)),
                Some(rms(g.vector(&p("post_attention_norm.weight"), d)?)),
                Some(rms(g.vector(&p("post_ffw_norm.weight"), d)?)),
                if global { base } else { 10000.0 },
                if global { None } else { window },
            )
        } else {
            (None, None, None, None, base, None)
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
            gate,
            up,
            down,
            rope: Some(Rope {
                base: rope_base,
                dim: head_dim,
            }),
            window: win,
        });
    }
    let final_norm = Some(rms(g.vector("output_norm.weight", d)?));
    let lm_head = if g.has("output.weight") {
        Some(g.linear("output", vocab, d)?)
    } else {
        None
    };
    let cfg = Config {
        arch,
        n_layer,
        d_model: d,
        n_head,
        n_kv_head,
        head_dim,
        vocab,
        max_context: ctx,
        causal: true,
        act: if gemma { Act::GeluTanh } else { Act::Silu },
        attn_scale: if gemma {
            1.0 / g
                .meta_f32_or(&k("attention.query_pre_attn_scalar"), head_dim as f32)?
                .sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        },
        embed_scale: if gemma { (d as f32).sqrt() } else { 1.0 },
        bos_id,
        add_bos,
        post_norm: false,
    };
    let m = Model {
        cfg,
        embed,
        pos_embed: None,
        type_embed: None,
        embed_norm: None,
        layers,
        final_norm,
        lm_head,
        has_lm_head: true,
    };
    m.validate(path)?;
    Ok(m)
}
