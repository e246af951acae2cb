//! Tiny synthetic GGUF models (random weights, seeded) written with candle's GGUF writer: for
//! tests, fuzz seeds and benches that must run without the real model cache. The file is a
//! genuine `llama` (or `gemma3`) GGUF, read back through the same loader as the real models.

use super::RealError;
use candle_core::quantized::gguf_file::{Value, write};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::path::Path;

/// Shape of a synthetic model.
#[derive(Debug, Clone, Copy)]
pub struct SynthSpec {
    /// `llama` or `gemma3`.
    pub gemma: bool,
    /// Layers.
    pub n_layer: usize,
    /// Residual width.
    pub d: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_kv_head: usize,
    /// Head dimension (Llama: d / n_head).
    pub head_dim: usize,
    /// MLP width.
    pub d_ff: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Context length.
    pub ctx: usize,
    /// Storage type of the matrices (F32, or a quantized type such as Q8_0 when sizes allow).
    pub dtype: GgmlDType,
}

impl Default for SynthSpec {
    fn default() -> Self {
        SynthSpec {
            gemma: false,
            n_layer: 2,
            d: 32,
            n_head: 4,
            n_kv_head: 2,
            head_dim: 8,
            d_ff: 48,
            vocab: 40,
            ctx: 64,
            dtype: GgmlDType::F32,
        }
    }
}

fn err(path: &Path, e: impl std::fmt::Display) -> RealError {
    RealError::file(path, format!("writing synthetic GGUF: {e}"))
}

/// Writes a synthetic model with weights N(0, 1/in) (norm gains near 1) drawn from `seed`.
pub fn write_gguf(path: &Path, s: &SynthSpec, seed: u64) -> Result<(), RealError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let mut mat = |name: String,
                   out: usize,
                   inp: usize,
                   dtype: GgmlDType,
                   rng: &mut StdRng|
     -> Result<(), RealError> {
        let sc = 1.0 / (inp as f32).sqrt();
        let v: Vec<f32> = (0..out * inp)
            .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * sc * 1.7)
            .collect();
        let t = Tensor::from_vec(v, (out, inp), &Device::Cpu).map_err(|e| err(path, e))?;
        tensors.push((
            name,
            QTensor::quantize(&t, dtype).map_err(|e| err(path, e))?,
        ));
        Ok(())
    };
    let mut gains: Vec<(String, usize)> = Vec::new();
    let arch = if s.gemma { "gemma3" } else { "llama" };
    mat(
        "token_embd.weight".into(),
        s.vocab,
        s.d,
        GgmlDType::F32,
        &mut rng,
    )?;
    for l in 0..s.n_layer {
        let p = |x: &str| format!("blk.{l}.{x}");
        mat(
            p("attn_q.weight"),
            s.n_head * s.head_dim,
            s.d,
            s.dtype,
            &mut rng,
        )?;
        mat(
            p("attn_k.weight"),
            s.n_kv_head * s.head_dim,
            s.d,
            s.dtype,
            &mut rng,
        )?;
        mat(
            p("attn_v.weight"),
            s.n_kv_head * s.head_dim,
            s.d,
            s.dtype,
            &mut rng,
        )?;
        mat(
            p("attn_output.weight"),
            s.d,
            s.n_head * s.head_dim,
            s.dtype,
            &mut rng,
        )?;
        mat(p("ffn_gate.weight"), s.d_ff, s.d, s.dtype, &mut rng)?;
        mat(p("ffn_up.weight"), s.d_ff, s.d, s.dtype, &mut rng)?;
        mat(p("ffn_down.weight"), s.d, s.d_ff, s.dtype, &mut rng)?;
        gains.push((p("attn_norm.weight"), s.d));
        gains.push((p("ffn_norm.weight"), s.d));
        if s.gemma {
            gains.push((p("attn_q_norm.weight"), s.head_dim));
            gains.push((p("attn_k_norm.weight"), s.head_dim));
            gains.push((p("post_attention_norm.weight"), s.d));
            gains.push((p("post_ffw_norm.weight"), s.d));
        }
    }
    gains.push(("output_norm.weight".into(), s.d));
    for (name, n) in gains {
        let v: Vec<f32> = (0..n).map(|_| 0.8 + 0.4 * rng.random::<f32>()).collect();
        let t = Tensor::from_vec(v, n, &Device::Cpu).map_err(|e| err(path, e))?;
        tensors.push((
            name,
            QTensor::quantize(&t, GgmlDType::F32).map_err(|e| err(path, e))?,
        ));
    }
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
    let k = |x: &str| format!("{arch}.{x}");
    let mut meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (k("block_count"), Value::U32(s.n_layer as u32)),
        (k("context_length"), Value::U32(s.ctx as u32)),
        (k("embedding_length"), Value::U32(s.d as u32)),
        (k("feed_forward_length"), Value::U32(s.d_ff as u32)),
        (k("attention.head_count"), Value::U32(s.n_head as u32)),
        (k("attention.head_count_kv"), Value::U32(s.n_kv_head as u32)),
        (k("attention.key_length"), Value::U32(s.head_dim as u32)),
        (k("rope.freq_base"), Value::F32(10000.0)),
        (k("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.tokens".into(), Value::Array(toks)),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.merges".into(), Value::Array(vec![])),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
    ];
    if s.gemma {
        meta.push((
            k("attention.sliding_window"),
            Value::U32((s.ctx / 4).max(2) as u32),
        ));
    }
    let meta_ref: Vec<(&str, &Value)> = meta.iter().map(|(a, b)| (a.as_str(), b)).collect();
    let t_ref: Vec<(&str, &QTensor)> = tensors.iter().map(|(a, b)| (a.as_str(), b)).collect();
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| RealError::io(path, e))?);
    write(&mut f, &meta_ref, &t_ref).map_err(|e| err(path, e))?;
    Ok(())
}
