//! GGUF model files: the header through candle-core's reader (`quantized::gguf_file`), the
//! tensor data memory-mapped and kept in its storage format ([`StoredMatrix`]: quantized blocks and
//! f16/bf16 reference the map; f32 tensors are copied once). This module only reads files;
//! which architectures load and with which conventions (e.g. the Llama-only q/k row
//! permutation) is [`super::arch`]'s business.
//!
//! MXFP4 tensors (GGML type 39, which candle's reader does not know) are read too: the header
//! is parsed from a copy whose type-39 entries carry a placeholder type, the names are kept,
//! and their extents and matrices use MXFP4's geometry (32 values in 17 bytes).

use super::RealError;
use super::pretrained::Linear;
use super::weights::{Backing, Bytes, StoredMatrix};
use candle_core::quantized::gguf_file::{Content, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An open GGUF file: header, metadata, tensor directory and the memory map of its data.
pub struct GgufFile {
    path: PathBuf,
    content: Content,
    map: Arc<Backing>,
    /// Names of the tensors read so far (an architecture must read every tensor once).
    read: std::cell::RefCell<std::collections::BTreeSet<String>>,
    /// Tensors stored as MXFP4 (their `tensor_infos` type is a placeholder).
    mxfp4: std::collections::HashSet<String>,
}

/// A candle error's message without the backtrace candle may attach to it.
fn candle_msg(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => candle_msg(inner),
        other => other.to_string(),
    }
}

/// What candle's header reader keeps only in maps (duplicates overwritten) or does not check,
/// read from the raw bytes first: metadata keys and tensor names in file order, and the
/// `general.alignment` value with its type.
struct RawHeader {
    keys: Vec<String>,
    /// (GGUF value type, the value when it is an integer).
    alignment: Option<(u32, Option<i128>)>,
    tensors: Vec<String>,
    /// The GGML type id of each tensor, in the same order.
    types: Vec<u32>,
    /// The byte offset of each tensor's type id.
    type_at: Vec<usize>,
    /// The byte offset just past the tensor directory.
    end: usize,
}

/// GGML's type id of MXFP4 blocks (gpt-oss's published expert weights).
const GGML_TYPE_MXFP4: u32 = 39;

/// The type id written in place of [`GGML_TYPE_MXFP4`] for candle's header reader (Q4_0: any
/// type it knows would do; only shapes and offsets are read from it).
const MXFP4_PLACEHOLDER: u32 = 2;

/// GGUF value type ids (the format's `gguf_metadata_value_type`).
const GGUF_TYPE_NAMES: [&str; 13] = [
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array",
    "uint64", "int64", "float64",
];

/// A bounds-checked cursor over the header bytes.
struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
    /// GGUF v1 stores lengths as u32, later versions as u64.
    v1: bool,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.b.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn len(&mut self) -> Option<usize> {
        if self.v1 {
            self.u32().map(|v| v as usize)
        } else {
            usize::try_from(self.u64()?).ok()
        }
    }
    /// A string as candle reads it (trailing NULs dropped, lossy UTF-8).
    fn string(&mut self) -> Option<String> {
        let n = self.len()?;
        let mut v = self.take(n)?;
        while let [rest @ .., 0] = v {
            v = rest;
        }
        Some(String::from_utf8_lossy(v).into_owned())
    }
    /// Skips one value of type `ty`; returns it when it is an integer.
    fn value(&mut self, ty: u32, depth: usize) -> Option<Option<i128>> {
        let int = |b: &[u8], signed: bool| -> i128 {
            let mut w = [0u8; 16];
            w[..b.len()].copy_from_slice(b);
            if signed && b.last().is_some_and(|&x| x & 0x80 != 0) {
                w[b.len()..].fill(0xff);
            }
            i128::from_le_bytes(w)
        };
        Some(match ty {
            0 | 1 => Some(int(self.take(1)?, ty == 1)),
            2 | 3 => Some(int(self.take(2)?, ty == 3)),
            4 | 5 => Some(int(self.take(4)?, ty == 5)),
            10 | 11 => Some(int(self.take(8)?, ty == 11)),
            6 => self.take(4).map(|_| None)?,
            12 => self.take(8).map(|_| None)?,
            7 => self.take(1).map(|_| None)?,
            8 => self.string().map(|_| None)?,
            9 if depth < 65 => {
                let et = self.u32()?;
                let n = self.len()?;
                for _ in 0..n {
                    self.value(et, depth + 1)?;
                }
                None
            }
            _ => return None,
        })
    }
}

/// Walks the header (`None` where it is malformed: candle's reader then says how).
fn raw_header(b: &[u8]) -> Option<RawHeader> {
    let mut c = Cursor {
        b,
        pos: 0,
        v1: false,
    };
    if c.u32()? != 0x4655_4747 {
        return None;
    }
    c.v1 = match c.u32()? {
        1 => true,
        2 | 3 => false,
        _ => return None,
    };
    let (n_tensors, n_kv) = (c.len()?, c.len()?);
    let mut h = RawHeader {
        keys: Vec::new(),
        alignment: None,
        tensors: Vec::new(),
        types: Vec::new(),
        type_at: Vec::new(),
        end: 0,
    };
    for _ in 0..n_kv {
        let key = c.string()?;
        let ty = c.u32()?;
        let v = c.value(ty, 0)?;
        if key == "general.alignment" {
            h.alignment = Some((ty, v));
        }
        h.keys.push(key);
    }
    for _ in 0..n_tensors {
        h.tensors.push(c.string()?);
        let n_dims = c.u32()? as usize;
        c.take(n_dims.checked_mul(if c.v1 { 4 } else { 8 })?)?;
        h.type_at.push(c.pos);
        h.types.push(c.u32()?);
        c.take(8)?;
    }
    h.end = c.pos;
    Some(h)
}

/// The first name that appears twice.
fn first_duplicate(names: &[String]) -> Option<&str> {
    let mut seen = std::collections::HashSet::new();
    names
        .iter()
        .find(|n| !seen.insert(n.as_str()))
        .map(String::as_str)
}

impl GgufFile {
    /// Opens and parses the header of a GGUF file.
    pub fn open(path: &Path) -> Result<Self, RealError> {
        let f = crate::budget::open_input(path).map_err(|e| RealError::io(path, e))?;
        let map = Arc::new(Backing::map(&f).map_err(|e| RealError::io(path, e))?);
        // What candle would overwrite, ignore or divide by, refused first.
        let mut alignment = candle_core::quantized::gguf_file::DEFAULT_ALIGNMENT;
        let mut mxfp4 = std::collections::HashSet::new();
        // The header with MXFP4 type ids replaced, when the file has any.
        let mut patched: Option<Vec<u8>> = None;
        if let Some(raw) = raw_header(map.bytes()) {
            if let Some(k) = first_duplicate(&raw.keys) {
                return Err(RealError::file(
                    path,
                    format!("metadata key `{k}` appears twice"),
                ));
            }
            for ((t, &ty), &at) in raw.tensors.iter().zip(&raw.types).zip(&raw.type_at) {
                if ty == GGML_TYPE_MXFP4 {
                    let h = patched.get_or_insert_with(|| map.bytes()[..raw.end].to_vec());
                    h[at..at + 4].copy_from_slice(&MXFP4_PLACEHOLDER.to_le_bytes());
                    mxfp4.insert(t.clone());
                }
            }
            if let Some(t) = first_duplicate(&raw.tensors) {
                return Err(RealError::file(
                    path,
                    format!("tensor `{t}` appears twice in the tensor directory"),
                ));
            }
            match raw.alignment {
                None => {}
                Some((4, Some(a))) if a > 0 && a % 8 == 0 => alignment = a as u64,
                Some((4, Some(a))) => {
                    return Err(RealError::file(
                        path,
                        format!(
                            "metadata `general.alignment` = {a}: must be a positive multiple of 8"
                        ),
                    ));
                }
                Some((ty, _)) => {
                    return Err(RealError::file(
                        path,
                        format!(
                            "metadata `general.alignment` is a {}; the GGUF format gives it as uint32",
                            GGUF_TYPE_NAMES.get(ty as usize).unwrap_or(&"unknown type")
                        ),
                    ));
                }
            }
        }
        let mut reader = std::io::Cursor::new(patched.as_deref().unwrap_or(map.bytes()));
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
        let mut extents: Vec<(u64, u64, &str)> = Vec::with_capacity(content.tensor_infos.len());
        for (name, ti) in &content.tensor_infos {
            if ti.offset % alignment != 0 {
                return Err(RealError::file(
                    path,
                    format!(
                        "tensor `{name}` starts at data offset {}, not a multiple of the alignment {alignment}",
                        ti.offset
                    ),
                ));
            }
            let dims = ti.shape.dims();
            // Zero elements is rejected too: candle then casts a dangling u8 pointer to a block type.
            let n = dims
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
                .filter(|&n| n > 0);
            let (bs, ts) = geometry(&mxfp4, name, ti.ggml_dtype);
            let (bs, ts) = (bs as u64, ts as u64);
            let bytes = n
                .filter(|n| bs > 0 && n % bs == 0)
                .and_then(|n| (n / bs).checked_mul(ts));
            let end = bytes
                .and_then(|b| b.checked_add(content.tensor_data_offset))
                .and_then(|e| e.checked_add(ti.offset));
            match end {
                Some(e) if e <= file_len => {
                    extents.push((content.tensor_data_offset + ti.offset, e, name.as_str()));
                }
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
                            "tensor `{name}` has an impossible shape {dims:?} for {}",
                            if mxfp4.contains(name) {
                                "MXFP4".to_string()
                            } else {
                                format!("{:?}", ti.ggml_dtype)
                            }
                        ),
                    ));
                }
            }
        }
        // No two tensors share a byte, and none lies apart from the next by more than padding:
        // a gap means a tensor's declared type or shape is smaller than the bytes it was
        // written with (a Q4_0 label on F32 data reads a prefix of it as blocks).
        extents.sort_unstable();
        for w in extents.windows(2) {
            let ((s0, e0, a), (s1, _, b)) = (w[0], w[1]);
            if s1 < e0 {
                return Err(RealError::file(
                    path,
                    format!("tensors `{a}` (bytes {s0}..{e0}) and `{b}` (from byte {s1}) overlap"),
                ));
            }
            if s1 - e0 >= alignment {
                return Err(RealError::file(
                    path,
                    format!(
                        "{} bytes between tensor `{a}` (bytes {s0}..{e0}) and tensor `{b}` \
                         (from byte {s1}) belong to no tensor (at most {} of padding are \
                         allowed): is `{a}`'s type or shape wrong?",
                        s1 - e0,
                        alignment - 1
                    ),
                ));
            }
        }
        // The data section holds the listed tensors and their padding, nothing more: bytes past
        // the last tensor's padding mean the directory lists fewer tensors than the file holds
        // (a `tensor_count` one short shifts every offset), so the offsets cannot be trusted.
        let data_end = extents
            .iter()
            .map(|e| e.1)
            .max()
            .unwrap_or(content.tensor_data_offset);
        let trailing = file_len.saturating_sub(data_end);
        if trailing >= alignment {
            return Err(RealError::file(
                path,
                format!(
                    "{trailing} bytes follow the last tensor's data (at most {} of padding are \
                     allowed): the tensor directory ({} tensors) does not describe the whole \
                     file; is `tensor_count` wrong?",
                    alignment - 1,
                    content.tensor_infos.len()
                ),
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            content,
            map,
            read: Default::default(),
            mxfp4,
        })
    }

    /// Whether tensor `name` is stored as MXFP4.
    pub fn is_mxfp4(&self, name: &str) -> bool {
        self.mxfp4.contains(name)
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

    /// An optional integer metadata value that must fit `max` (a token id: `u32::MAX`): absent is
    /// `None`; a string, a float, a negative or a larger value is refused by name, never cast.
    pub fn meta_int_opt(&self, key: &str, max: u64) -> Result<Option<u64>, RealError> {
        let Some(v) = self.meta(key) else {
            return Ok(None);
        };
        match value_i128(v) {
            Some(x) if (0..=max as i128).contains(&x) => Ok(Some(x as u64)),
            Some(x) => Err(self.err(format!("metadata `{key}` = {x} is not in 0..={max}"))),
            None => Err(self.err(format!("metadata `{key}` is not an integer: {v:?}"))),
        }
    }

    /// BOS id (`tokenizer.ggml.bos_token_id`) and whether the tokenizer adds it by default
    /// (`tokenizer.ggml.add_bos_token`, else `default`). A BOS id that is not an integer in
    /// `[0, 2^32)` is refused by name.
    pub fn bos(&self, default: bool) -> Result<(Option<u32>, bool), RealError> {
        let bos_id = self
            .meta_int_opt("tokenizer.ggml.bos_token_id", u32::MAX as u64)?
            .map(|v| v as u32);
        let add_bos = match self.meta("tokenizer.ggml.add_bos_token") {
            Some(Value::Bool(b)) => *b,
            _ => default,
        };
        Ok((bos_id, add_bos))
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
    /// Tensors of the directory not read so far, in name order.
    pub fn unread_tensors(&self) -> Vec<String> {
        let read = self.read.borrow();
        self.content
            .tensor_infos
            .keys()
            .filter(|n| !read.contains(n.as_str()))
            .cloned()
            .collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// A tensor in its storage format, viewed as a row-major matrix `[∏ dims[..n−1], dims[n−1]]`
    /// (a 1-D tensor is one row), and its dims in PyTorch order.
    pub fn weight(&self, name: &str) -> Result<(StoredMatrix, Vec<usize>), RealError> {
        let ti = self
            .content
            .tensor_infos
            .get(name)
            .ok_or_else(|| self.err(format!("missing tensor `{name}`")))?;
        self.read.borrow_mut().insert(name.to_string());
        let dims = ti.shape.dims().to_vec();
        let cols = dims.last().copied().unwrap_or(1);
        let rows = dims.iter().rev().skip(1).product::<usize>();
        let dt = ti.ggml_dtype;
        // Extents were checked against the file length in `open`.
        let (bs, ts) = geometry(&self.mxfp4, name, dt);
        let len = rows * cols / bs * ts;
        let start = self.content.tensor_data_offset as usize + ti.offset as usize;
        if self.mxfp4.contains(name) {
            let bytes = Bytes::new_unaligned(self.map.clone(), start, len)
                .ok_or_else(|| self.err(format!("tensor `{name}`: truncated")))?;
            let w = StoredMatrix::mxfp4_ggml(bytes, rows, cols)
                .map_err(|m| self.err(format!("tensor `{name}`: {m}")))?;
            return Ok((w, dims));
        }
        let bytes = Bytes::new(self.map.clone(), start, len).ok_or_else(|| {
            self.err(format!(
                "tensor `{name}`: truncated: the file ends inside this tensor's data"
            ))
        })?;
        let w = StoredMatrix::from_bytes(dt, bytes, rows, cols)
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
    pub(crate) fn matrix(
        &self,
        name: &str,
        out: usize,
        inp: usize,
    ) -> Result<StoredMatrix, RealError> {
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

/// Values per block and bytes per block of tensor `name` (MXFP4 when listed in `mxfp4`).
fn geometry(
    mxfp4: &std::collections::HashSet<String>,
    name: &str,
    dt: candle_core::quantized::GgmlDType,
) -> (usize, usize) {
    if mxfp4.contains(name) {
        (
            crate::quant::mxfp4::BLOCK,
            crate::quant::mxfp4::GGML_BLOCK_BYTES,
        )
    } else {
        (dt.block_size(), dt.type_size())
    }
}

/// An integer metadata value, exactly (None for other types).
fn value_i128(v: &Value) -> Option<i128> {
    Some(match v {
        Value::U8(x) => *x as i128,
        Value::U16(x) => *x as i128,
        Value::U32(x) => *x as i128,
        Value::U64(x) => *x as i128,
        Value::I8(x) => *x as i128,
        Value::I16(x) => *x as i128,
        Value::I32(x) => *x as i128,
        Value::I64(x) => *x as i128,
        _ => return None,
    })
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
