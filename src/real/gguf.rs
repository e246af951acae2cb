//! GGUF model files: the header through candle-core's reader (`quantized::gguf_file`), the
//! tensor data memory-mapped and kept in its storage format ([`Weight`]: quantized blocks and
//! f16/bf16 reference the map; f32 tensors are copied once). This module only reads files;
//! which architectures load and with which conventions (e.g. the Llama-only q/k row
//! permutation) is [`super::arch`]'s business.

use super::RealError;
use super::model::{Linear, Pretrained};
use super::weights::{Backing, Bytes, Weight};
use candle_core::quantized::gguf_file::{Content, Value};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An open GGUF file: header, metadata, tensor directory and the memory map of its data.
pub struct GgufFile {
    path: PathBuf,
    content: Content,
    map: Arc<Backing>,
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
        let map = Arc::new(Backing::map(&f).map_err(|e| RealError::io(path, e))?);
        let mut reader = std::io::Cursor::new(map.bytes());
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
            map,
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

    /// A tensor in its storage format, viewed as a row-major matrix `[∏ dims[..n−1], dims[n−1]]`
    /// (a 1-D tensor is one row), and its dims in PyTorch order.
    pub fn weight(&self, name: &str) -> Result<(Weight, Vec<usize>), RealError> {
        let ti = self
            .content
            .tensor_infos
            .get(name)
            .ok_or_else(|| self.err(format!("missing tensor `{name}`")))?;
        let dims = ti.shape.dims().to_vec();
        let cols = dims.last().copied().unwrap_or(1);
        let rows = dims.iter().rev().skip(1).product::<usize>();
        let dt = ti.ggml_dtype;
        // Extents were checked against the file length in `open`.
        let len = rows * cols / dt.block_size() * dt.type_size();
        let start = self.content.tensor_data_offset as usize + ti.offset as usize;
        let bytes = Bytes::new(self.map.clone(), start, len).ok_or_else(|| {
            self.err(format!(
                "tensor `{name}`: truncated: the file ends inside this tensor's data"
            ))
        })?;
        let w = Weight::from_bytes(dt, bytes, rows, cols)
            .map_err(|m| self.err(format!("tensor `{name}`: {m}")))?;
        Ok((w, dims))
    }

    /// Reads a tensor converted to f32 (refusing non-finite values); returns (row-major data,
    /// dims in PyTorch order).
    pub fn tensor(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), RealError> {
        let (w, dims) = self.weight(name)?;
        let t = w.to_f32().into_owned();
        if let Some(k) = t.iter().position(|v| !v.is_finite()) {
            return Err(self.err(format!(
                "tensor `{name}` has a non-finite value at index {k}"
            )));
        }
        Ok((t, dims))
    }

    /// A `[out, inp]` matrix in its storage format (finiteness is checked by
    /// [`Pretrained::validate`] on the scales, without dequantizing).
    pub(crate) fn matrix(&self, name: &str, out: usize, inp: usize) -> Result<Weight, RealError> {
        let (w, dims) = self.weight(name)?;
        if dims != [out, inp] {
            return Err(self.err(format!(
                "tensor `{name}` has shape {dims:?}, expected [{out}, {inp}]"
            )));
        }
        Ok(w)
    }

    pub(crate) fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, RealError> {
        let (w, dims) = self.tensor(name)?;
        if w.len() != n {
            return Err(self.err(format!(
                "tensor `{name}` has shape {dims:?}, expected [{n}]"
            )));
        }
        Ok(w)
    }

    pub(crate) fn linear(&self, name: &str, out: usize, inp: usize) -> Result<Linear, RealError> {
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
