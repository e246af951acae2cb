//! safetensors files (f32, f16 or bf16 weights) and Hugging Face checkpoints: one
//! `model.safetensors` or shards listed in `model.safetensors.index.json`. Files are
//! memory-mapped; f16/bf16 matrices stay 16-bit in the map ([`StoredMatrix`]), converted to f32 in
//! the product's tile. This module only reads files; the architectures that use them live in
//! [`super::arch`].

use super::RealError;
use super::pretrained::{Linear, NormLayer};
use super::weights::{Backing, Bytes, StoredMatrix};
use candle_core::quantized::GgmlDType;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
        Dtype::I32 => int32_le(data, true).map(|x| x as f32).collect(),
        Dtype::U32 => int32_le(data, false).map(|x| x as f32).collect(),
        other => return Err(other),
    })
}

/// The 4-byte little-endian integers of `data`, read as `i32` (`signed`) or `u32`, widened
/// exactly to `i64` (a trailing partial chunk is not read).
pub fn int32_le(data: &[u8], signed: bool) -> impl Iterator<Item = i64> + '_ {
    data.chunks_exact(4).map(move |c| {
        let b = [c[0], c[1], c[2], c[3]];
        if signed {
            i32::from_le_bytes(b) as i64
        } else {
            u32::from_le_bytes(b) as i64
        }
    })
}

/// A parsed, memory-mapped safetensors file.
pub struct StFile {
    path: PathBuf,
    bytes: Arc<Backing>,
}

impl StFile {
    /// Maps a safetensors file and checks its header.
    pub fn open(path: &Path) -> Result<Self, RealError> {
        let f = crate::budget::open_input(path).map_err(|e| RealError::io(path, e))?;
        let bytes = Arc::new(Backing::map(&f).map_err(|e| RealError::io(path, e))?);
        SafeTensors::deserialize(bytes.bytes())
            .map_err(|e| RealError::file(path, format!("not a valid safetensors file: {e}")))?;
        Ok(Self {
            path: path.to_path_buf(),
            bytes,
        })
    }

    fn st(&self) -> SafeTensors<'_> {
        // Checked in `open`.
        SafeTensors::deserialize(self.bytes.bytes()).expect("validated at open")
    }

    /// A finite `[out, inp]` matrix: f16/bf16 kept 16-bit in the map, other dtypes converted
    /// to f32 (finiteness of 16-bit data is checked by [`Pretrained::validate`]).
    pub(crate) fn weight(
        &self,
        name: &str,
        out: usize,
        inp: usize,
    ) -> Result<StoredMatrix, RealError> {
        let st = self.st();
        let t = st
            .tensor(name)
            .map_err(|_| RealError::file(&self.path, format!("missing tensor `{name}`")))?;
        let dt = match t.dtype() {
            Dtype::F16 => GgmlDType::F16,
            Dtype::BF16 => GgmlDType::BF16,
            _ => return Ok(StoredMatrix::f32(self.shaped(name, &[out, inp])?, out, inp)),
        };
        if t.shape() != [out, inp] {
            return Err(RealError::file(
                &self.path,
                format!(
                    "tensor `{name}` has shape {:?}, expected {:?}",
                    t.shape(),
                    [out, inp]
                ),
            ));
        }
        let start = t.data().as_ptr() as usize - self.bytes.bytes().as_ptr() as usize;
        let bytes = Bytes::new(self.bytes.clone(), start, t.data().len())
            .ok_or_else(|| RealError::file(&self.path, format!("tensor `{name}`: bad extent")))?;
        StoredMatrix::from_bytes(dt, bytes, out, inp)
            .map_err(|m| RealError::file(&self.path, format!("tensor `{name}`: {m}")))
    }

    /// The `[a, b]` slices of a stacked `[E, a, b]` tensor, each transposed to `[b, a]` (the
    /// `[out, in]` rows of a product stored `[in, out]`): f16/bf16 values moved as they are
    /// (the file's format kept), other float types as f32.
    pub(crate) fn stacked_transposed(
        &self,
        name: &str,
        [ne, a, b]: [usize; 3],
    ) -> Result<Vec<StoredMatrix>, RealError> {
        let st = self.st();
        let t = st
            .tensor(name)
            .map_err(|_| RealError::file(&self.path, format!("missing tensor `{name}`")))?;
        let dt = match t.dtype() {
            Dtype::F16 => Some(GgmlDType::F16),
            Dtype::BF16 => Some(GgmlDType::BF16),
            _ => None,
        };
        let Some(dt) = dt else {
            let v = self.shaped(name, &[ne, a, b])?;
            return Ok(v
                .chunks_exact(a * b)
                .map(|m| {
                    let tr = (0..b * a).map(|k| m[(k % a) * b + k / a]).collect();
                    StoredMatrix::f32(tr, b, a)
                })
                .collect());
        };
        if t.shape() != [ne, a, b] {
            return Err(RealError::file(
                &self.path,
                format!(
                    "tensor `{name}` has shape {:?}, expected {:?}",
                    t.shape(),
                    [ne, a, b]
                ),
            ));
        }
        let data = t.data();
        let mut out = Vec::with_capacity(ne);
        for m in data.chunks_exact(2 * a * b) {
            let mut tr = Vec::with_capacity(2 * a * b);
            for i in 0..b {
                for j in 0..a {
                    let k = 2 * (j * b + i);
                    tr.extend_from_slice(&m[k..k + 2]);
                }
            }
            let w = StoredMatrix::from_bytes(dt, Bytes::owned(&tr), b, a)
                .map_err(|e| RealError::file(&self.path, format!("tensor `{name}`: {e}")))?;
            if let Some(r) = w.first_non_finite_row() {
                return Err(RealError::file(
                    &self.path,
                    format!("tensor `{name}`: a non-finite value in row {r} of a slice"),
                ));
            }
            out.push(w);
        }
        Ok(out)
    }

    /// A `U8` tensor's bytes (a view of the map) and its shape.
    fn bytes_u8(&self, name: &str) -> Result<(Bytes, Vec<usize>), RealError> {
        let st = self.st();
        let t = st
            .tensor(name)
            .map_err(|_| RealError::file(&self.path, format!("missing tensor `{name}`")))?;
        if t.dtype() != Dtype::U8 {
            return Err(RealError::file(
                &self.path,
                format!(
                    "tensor `{name}` has dtype {:?}: MXFP4 blocks and scales are U8",
                    t.dtype()
                ),
            ));
        }
        let start = t.data().as_ptr() as usize - self.bytes.bytes().as_ptr() as usize;
        let b = Bytes::new_unaligned(self.bytes.clone(), start, t.data().len())
            .ok_or_else(|| RealError::file(&self.path, format!("tensor `{name}`: bad extent")))?;
        Ok((b, t.shape().to_vec()))
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

    /// A float tensor with finite values (every weight is read through here; an integer
    /// dtype is refused).
    pub(crate) fn finite(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), RealError> {
        if let Ok(t) = self.st().tensor(name) {
            // A weight is a float; integer data decoded to f32 would be read as numbers it does
            // not hold (F32 bits labelled I32 become integers), so an integer dtype is refused.
            if !matches!(
                t.dtype(),
                Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F64
            ) {
                return Err(RealError::file(
                    &self.path,
                    format!(
                        "tensor `{name}` has dtype {:?}: a weight must be F32, F16, BF16 or F64",
                        t.dtype()
                    ),
                ));
            }
        }
        let (v, s) = self.tensor(name)?;
        if let Some(k) = v.iter().position(|x| !x.is_finite()) {
            return Err(RealError::file(
                &self.path,
                format!("tensor `{name}` has a non-finite value at index {k}"),
            ));
        }
        Ok((v, s))
    }

    pub(crate) fn shaped(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RealError> {
        let (v, s) = self.finite(name)?;
        if s != shape {
            return Err(RealError::file(
                &self.path,
                format!("tensor `{name}` has shape {s:?}, expected {shape:?}"),
            ));
        }
        Ok(v)
    }
}

/// A Hugging Face checkpoint: one `model.safetensors`, or the shards listed by
/// `model.safetensors.index.json` (`weight_map`: tensor name → shard file).
pub struct Checkpoint {
    path: PathBuf,
    shards: Vec<StFile>,
    /// Tensor name → index into `shards`.
    map: std::collections::HashMap<String, usize>,
}

impl Checkpoint {
    /// The checkpoint of a directory: `model.safetensors`, else the sharded index.
    pub fn open_dir(dir: &Path) -> Result<Self, RealError> {
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        if single.exists() {
            return Self::open_file(&single);
        }
        if !index.exists() {
            return Err(RealError::file(
                dir,
                "no model.safetensors and no model.safetensors.index.json in this directory",
            ));
        }
        let text = crate::budget::read_text(&index, crate::budget::MAX_CONFIG_BYTES)
            .map_err(|e| RealError::io(&index, e))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| RealError::file(&index, format!("invalid JSON: {e}")))?;
        let Some(wm) = v.get("weight_map").and_then(Value::as_object) else {
            return Err(RealError::file(&index, "no `weight_map` object"));
        };
        let mut files: Vec<String> = Vec::new();
        let mut map = std::collections::HashMap::new();
        for (name, f) in wm {
            let Some(f) = f.as_str() else {
                return Err(RealError::file(
                    &index,
                    format!("`weight_map.{name}` is not a file name"),
                ));
            };
            if f.contains('/') || f.contains('\\') || f.starts_with('.') {
                return Err(RealError::file(
                    &index,
                    format!("`weight_map.{name}` = \"{f}\" is not a file in this directory"),
                ));
            }
            let k = match files.iter().position(|x| x == f) {
                Some(k) => k,
                None => {
                    files.push(f.to_string());
                    files.len() - 1
                }
            };
            map.insert(name.clone(), k);
        }
        let shards = files
            .iter()
            .map(|f| StFile::open(&dir.join(f)))
            .collect::<Result<Vec<_>, _>>()?;
        for (name, &k) in &map {
            if !shards[k].has(name) {
                return Err(RealError::file(
                    &shards[k].path,
                    format!("tensor `{name}` listed in {} is missing", index.display()),
                ));
            }
        }
        Ok(Self {
            path: index,
            shards,
            map,
        })
    }

    /// A single safetensors file.
    pub fn open_file(path: &Path) -> Result<Self, RealError> {
        let f = StFile::open(path)?;
        let map = f.names().into_iter().map(|n| (n, 0)).collect();
        Ok(Self {
            path: path.to_path_buf(),
            shards: vec![f],
            map,
        })
    }

    /// The file (or index) loaded, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn file_of(&self, name: &str) -> Result<&StFile, RealError> {
        self.map
            .get(name)
            .map(|&k| &self.shards[k])
            .ok_or_else(|| RealError::file(&self.path, format!("missing tensor `{name}`")))
    }

    /// Whether a tensor exists.
    pub fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// The names of every tensor, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }

    /// A tensor converted to f32 and its shape.
    pub fn tensor(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), RealError> {
        self.file_of(name)?.tensor(name)
    }

    /// A tensor with finite values.
    pub fn finite(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), RealError> {
        self.file_of(name)?.finite(name)
    }

    /// A `[out, inp]` matrix in its storage format (f16/bf16 kept, others as f32).
    pub fn weight(&self, name: &str, out: usize, inp: usize) -> Result<StoredMatrix, RealError> {
        self.file_of(name)?.weight(name, out, inp)
    }

    /// A finite tensor of the given shape.
    pub fn shaped(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RealError> {
        self.file_of(name)?.shaped(name, shape)
    }

    /// The `E` matrices `[rows, cols]` of an MXFP4 stack stored as OpenAI's checkpoints store
    /// it: `name_blocks` U8 `[E, rows, cols/32, 16]` (the codes of each block of 32 values along
    /// a row) and `name_scales` U8 `[E, rows, cols/32]` (their E8M0 scales), the split packing
    /// of [`crate::quant::mxfp4`]; the matrices are views of the map.
    pub fn mxfp4_stack(
        &self,
        name: &str,
        [ne, rows, cols]: [usize; 3],
    ) -> Result<Vec<StoredMatrix>, RealError> {
        let (bn, sn) = (format!("{name}_blocks"), format!("{name}_scales"));
        let (codes, cs) = self.file_of(&bn)?.bytes_u8(&bn)?;
        let (scales, ss) = self.file_of(&sn)?.bytes_u8(&sn)?;
        let nb = cols / crate::quant::mxfp4::BLOCK;
        let shape_err = |n: &str, got: &[usize], want: &[usize]| {
            RealError::file(
                &self.path,
                format!(
                    "tensor `{n}` has shape {got:?}, expected {want:?} (MXFP4 of [{ne}, {rows}, {cols}])"
                ),
            )
        };
        if !cols.is_multiple_of(crate::quant::mxfp4::BLOCK) || cs != [ne, rows, nb, 16] {
            return Err(shape_err(&bn, &cs, &[ne, rows, nb, 16]));
        }
        if ss != [ne, rows, nb] {
            return Err(shape_err(&sn, &ss, &[ne, rows, nb]));
        }
        let all = StoredMatrix::mxfp4_split(scales, codes, ne * rows, cols)
            .map_err(|m| RealError::file(&self.path, format!("tensor `{name}`: {m}")))?;
        Ok((0..ne).map(|e| all.rows(e * rows, rows)).collect())
    }

    /// The `[a, b]` slices of a stacked `[E, a, b]` tensor, each transposed to `[b, a]`, in
    /// the file's format where it is 16-bit.
    pub fn stacked_transposed(
        &self,
        name: &str,
        shape: [usize; 3],
    ) -> Result<Vec<StoredMatrix>, RealError> {
        self.file_of(name)?.stacked_transposed(name, shape)
    }

    /// `name.weight` `[out, inp]` and `name.bias` (required when `bias`, else if present).
    pub fn linear(
        &self,
        name: &str,
        out: usize,
        inp: usize,
        bias: bool,
    ) -> Result<Linear, RealError> {
        let w = self.weight(&format!("{name}.weight"), out, inp)?;
        let bn = format!("{name}.bias");
        let b = if bias || self.has(&bn) {
            Some(self.shaped(&bn, &[out])?)
        } else {
            None
        };
        Ok(Linear { w, out, inp, b })
    }

    /// A LayerNorm `name.weight`, `name.bias`.
    pub fn layer_norm(&self, name: &str, d: usize, eps: f32) -> Result<NormLayer, RealError> {
        Ok(NormLayer::Layer {
            w: self.shaped(&format!("{name}.weight"), &[d])?,
            b: self.shaped(&format!("{name}.bias"), &[d])?,
            eps,
        })
    }
}
