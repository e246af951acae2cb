//! GGUF model files through candle-core's reader (`quantized::gguf_file`) and its
//! dequantization to f32. This module only reads files; which architectures load and with
//! which conventions (e.g. the Llama-only q/k row permutation) is [`super::arch`]'s business.

use super::RealError;
use super::model::{Linear, Pretrained};
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
            let m = candle_msg(&e);
            let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            if m.contains("failed to fill whole buffer") {
                RealError::file(
                    path,
                    format!(
                        "truncated GGUF file: it ends ({len} bytes) inside the header \
                         (metadata or tensor directory)"
                    ),
                )
            } else if m.contains("remaining") {
                RealError::file(path, format!("truncated GGUF file ({len} bytes): {m}"))
            } else {
                RealError::file(path, format!("not a readable GGUF file: {m}"))
            }
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

    pub(crate) fn err(&self, msg: impl Into<String>) -> RealError {
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
                let m = candle_msg(&e);
                let m = if m.contains("failed to fill whole buffer") {
                    "truncated: the file ends inside this tensor's data".to_string()
                } else {
                    m
                };
                RealError::file(&self.path, format!("tensor `{name}`: {m}"))
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

    pub(crate) fn matrix(
        &mut self,
        name: &str,
        out: usize,
        inp: usize,
    ) -> Result<Vec<f32>, RealError> {
        let (w, dims) = self.tensor(name)?;
        if dims != [out, inp] {
            return Err(self.err(format!(
                "tensor `{name}` has shape {dims:?}, expected [{out}, {inp}]"
            )));
        }
        Ok(w)
    }

    pub(crate) fn vector(&mut self, name: &str, n: usize) -> Result<Vec<f32>, RealError> {
        let (w, dims) = self.tensor(name)?;
        if w.len() != n {
            return Err(self.err(format!(
                "tensor `{name}` has shape {dims:?}, expected [{n}]"
            )));
        }
        Ok(w)
    }

    pub(crate) fn linear(
        &mut self,
        name: &str,
        out: usize,
        inp: usize,
    ) -> Result<Linear, RealError> {
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

/// An integer metadata value as usize (None for other types or negatives).
pub fn value_usize(v: &Value) -> Option<usize> {
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

pub use super::arch::llama::unpermute_rows;

/// Loads a GGUF model; see [`super::arch::load_gguf`].
pub fn load(path: &Path) -> Result<Pretrained, RealError> {
    super::arch::load_gguf(path)
}
