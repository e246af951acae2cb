//! A weight matrix in its storage format, and products with it.
//!
//! A [`StoredMatrix`] is a row-major `[rows, cols]` matrix kept as the file stored it: f32, 16-bit
//! floats (f16 / bf16, converted in the kernel), or ggml blocks (Q4_0 … Q8_K) whose bytes stay
//! in the memory-mapped file. Quantized blocks run along a row (the input dimension of a
//! projection `y = x Wᵀ`), so a row is a contiguous byte range: row slices and row
//! permutations are byte operations on every storage type ([`StoredMatrix::rows`],
//! [`StoredMatrix::permute_rows`]); anything else converts to f32 first ([`StoredMatrix::to_f32`]).
//!
//! MXFP4 blocks (gpt-oss's experts, [`crate::quant::mxfp4`]) are kept as stored too, in ggml's
//! packing (GGUF) or OpenAI's split one (Hugging Face `*_blocks` / `*_scales`), and decoded row
//! by row into the exact product's f32 tiles; a row selection with a stride (gpt-oss's
//! interleaved gate and up rows, [`StoredMatrix::every_other_row`]) stays a view of the map.
//!
//! Dequantization is [`crate::quant::dequant`] for Q8_0, Q4_1, Q5_0, Q4_K and Q6_K (the same bits as
//! candle's `to_float`, vectorised; tested bit for bit) and candle-core's block kernels
//! (`GgmlType::to_float`) on the file's bytes reinterpreted as blocks for every other type.
//!
//! Two products $x W^\top$ ([`StoredMatrix::matmul_t`]):
//! - [`Matmul::Exact`]: rows of `W` are dequantized in tiles of [`TILE`] rows into an f32
//!   scratch and multiplied by faer, so activations stay f32 and the result equals
//!   dequantize-then-multiply up to f32 summation order; for up to
//!   [`crate::quant::fused::MAX_ROWS`] activation rows of a Q8_0, Q4_1, Q5_0, Q4_K, Q5_K or Q6_K `W`, the fused kernels of
//!   [`crate::quant::fused`] compute the same f32 products without the dequantized copy;
//! - [`Matmul::Q8`]: each activation row is quantized to the weight type's dot-product partner
//!   (Q8_0, Q8_1 or Q8_K, as llama.cpp does) and multiplied by candle's integer `vec_dot`;
//!   [`q8_bound`] bounds its deviation from the exact product.

use crate::quant::cast;
use crate::quant::mxfp4::{self, Packing};
use candle_core::quantized::GgmlDType;
use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8_1, BlockQ8K, GgmlType,
};
use faer::{Accum, MatMut, MatRef, Par};
use half::{bf16, f16};
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::Arc;

/// Rows of `W` dequantized at a time by the exact product (64 rows × 4096 inputs = 1 MiB of f32).
pub const TILE: usize = 64;

/// Above this many multiply-adds a product uses all threads; below, sequential is faster.
const PAR_FLOPS: usize = 1 << 22;

/// How `x Wᵀ` is computed for a quantized `W`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum Matmul {
    /// f32 activations times `W` dequantized to f32 (parity with transformers at f32 rounding).
    #[default]
    Exact,
    /// Activations quantized to 8 bits per block, integer dot products (llama.cpp's scheme).
    /// Applies to candle's quantized block types only; f32 / f16 / bf16 and MXFP4 weights keep
    /// the exact product.
    Q8,
}

/// Memory that weight bytes live in: a file map or an 8-byte-aligned heap copy.
#[derive(Debug)]
pub enum Backing {
    /// A read-only memory map of a model file.
    Map(memmap2::Mmap),
    /// Heap bytes (held as u64 for alignment); the second field is the byte length.
    Heap(Vec<u64>, usize),
}

impl Backing {
    /// Maps a file read-only. The file must not be truncated while mapped.
    pub fn map(f: &std::fs::File) -> std::io::Result<Self> {
        if f.metadata()?.len() == 0 {
            return Ok(Backing::Heap(Vec::new(), 0));
        }
        // SAFETY: the map is read-only; the loader checks every tensor extent against the
        // file length before using it. Another process truncating the file while it is mapped
        // would fault, as with any mmap-based reader (llama.cpp, safetensors).
        unsafe { memmap2::Mmap::map(f) }.map(Backing::Map)
    }
    /// An aligned heap copy of `b`.
    pub fn copy(b: &[u8]) -> Self {
        let mut v = vec![0u64; b.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut v)[..b.len()].copy_from_slice(b);
        Backing::Heap(v, b.len())
    }
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Heap(v, n) => &bytemuck::cast_slice::<u64, u8>(v)[..*n],
        }
    }
}

/// A byte range of a shared [`Backing`].
#[derive(Clone)]
pub struct Bytes {
    src: Arc<Backing>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match *self.src {
            Backing::Map(_) => "mapped",
            Backing::Heap(..) => "heap",
        };
        write!(f, "Bytes({} {kind} bytes at {})", self.len, self.start)
    }
}

impl Bytes {
    /// `src[start..start + len]`; None when the range is out of bounds. A range not 8-byte
    /// aligned in memory is copied to the heap, so block casts are always aligned.
    pub fn new(src: Arc<Backing>, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len)?;
        let all = src.bytes();
        if end > all.len() {
            return None;
        }
        if !(all.as_ptr() as usize + start).is_multiple_of(8) {
            return Some(Self::owned(&all[start..end]));
        }
        Some(Bytes { src, start, len })
    }
    /// A heap copy of `b`.
    pub fn owned(b: &[u8]) -> Self {
        Bytes {
            src: Arc::new(Backing::copy(b)),
            start: 0,
            len: b.len(),
        }
    }
    /// `src[start..start + len]` without the alignment copy of [`Bytes::new`], for data read
    /// byte by byte (MXFP4 codes and scales); None when the range is out of bounds.
    pub fn new_unaligned(src: Arc<Backing>, start: usize, len: usize) -> Option<Self> {
        let end = start.checked_add(len)?;
        if end > src.bytes().len() {
            return None;
        }
        Some(Bytes { src, start, len })
    }
    /// The number of bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.src.bytes()[self.start..self.start + self.len]
    }
    /// Whether these bytes are in a file map (not copied).
    pub fn is_mapped(&self) -> bool {
        matches!(*self.src, Backing::Map(_))
    }
    fn sub(&self, off: usize, len: usize) -> Self {
        debug_assert!(off + len <= self.len);
        Bytes {
            src: self.src.clone(),
            start: self.start + off,
            len,
        }
    }
}

/// Runs `$body` with `$B` the candle block type of a quantized `$dt` (None for float types).
macro_rules! per_block {
    ($dt:expr, |$B:ident| $body:expr) => {
        match $dt {
            GgmlDType::Q4_0 => {
                type $B = BlockQ4_0;
                Some($body)
            }
            GgmlDType::Q4_1 => {
                type $B = BlockQ4_1;
                Some($body)
            }
            GgmlDType::Q5_0 => {
                type $B = BlockQ5_0;
                Some($body)
            }
            GgmlDType::Q5_1 => {
                type $B = BlockQ5_1;
                Some($body)
            }
            GgmlDType::Q8_0 => {
                type $B = BlockQ8_0;
                Some($body)
            }
            GgmlDType::Q8_1 => {
                type $B = BlockQ8_1;
                Some($body)
            }
            GgmlDType::Q2K => {
                type $B = BlockQ2K;
                Some($body)
            }
            GgmlDType::Q3K => {
                type $B = BlockQ3K;
                Some($body)
            }
            GgmlDType::Q4K => {
                type $B = BlockQ4K;
                Some($body)
            }
            GgmlDType::Q5K => {
                type $B = BlockQ5K;
                Some($body)
            }
            GgmlDType::Q6K => {
                type $B = BlockQ6K;
                Some($body)
            }
            GgmlDType::Q8K => {
                type $B = BlockQ8K;
                Some($body)
            }
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => None,
        }
    };
}

/// Byte offsets, within one block, of the scales every dequantized value is a multiple of
/// (f16, except Q8_K's f32): a block's values are finite iff these are, because the other
/// fields are small integers. Checked against candle's `to_float` in tests/real_weights.rs.
pub fn scale_offsets(dt: GgmlDType) -> &'static [usize] {
    match dt {
        GgmlDType::Q4_0 | GgmlDType::Q5_0 | GgmlDType::Q8_0 | GgmlDType::Q8_1 => &[0],
        GgmlDType::Q4_1 | GgmlDType::Q5_1 | GgmlDType::Q4K | GgmlDType::Q5K => &[0, 2],
        GgmlDType::Q2K => &[80, 82],
        GgmlDType::Q3K => &[108],
        GgmlDType::Q6K => &[208],
        GgmlDType::Q8K => &[0],
        GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => &[],
    }
}

/// The storage type of a [`StoredMatrix`]: a ggml type candle-core names, or MXFP4 (GGML type
/// 39, which it does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightType {
    /// f32, f16, bf16 or one of candle's ggml block types.
    Ggml(GgmlDType),
    /// MXFP4 blocks ([`crate::quant::mxfp4`]), in either packing.
    Mxfp4,
}

impl PartialEq<GgmlDType> for WeightType {
    fn eq(&self, other: &GgmlDType) -> bool {
        *self == WeightType::Ggml(*other)
    }
}

/// MXFP4 rows: `rows` logical rows of `cols / 32` blocks, logical row `i` being stored row
/// `i · step` from the start of the bytes.
#[derive(Debug, Clone)]
pub struct Mxfp4Rows {
    /// How scales and codes are laid out.
    pub packing: Packing,
    /// ggml: the 17-byte blocks; split: the 16 code bytes of each block.
    pub blocks: Bytes,
    /// split: one scale byte per block (empty for ggml).
    pub scales: Bytes,
    /// Stored rows per logical row (1, or 2 for an every-other-row view).
    pub step: usize,
}

impl Mxfp4Rows {
    /// Bytes of one stored row in `blocks` and in `scales`.
    fn row_bytes(&self, cols: usize) -> (usize, usize) {
        let nb = cols / mxfp4::BLOCK;
        match self.packing {
            Packing::Ggml => (nb * mxfp4::GGML_BLOCK_BYTES, 0),
            Packing::Split => (nb * 16, nb),
        }
    }
    /// Logical rows `r0 .. r0 + n`, taking every `k`-th of them (a view of the same bytes).
    fn view(&self, cols: usize, r0: usize, n: usize, k: usize) -> Self {
        let (rb, sb) = self.row_bytes(cols);
        let step = self.step * k;
        let span = (n - 1) * step + 1;
        let first = r0 * self.step;
        Mxfp4Rows {
            packing: self.packing,
            blocks: self.blocks.sub(first * rb, span * rb),
            scales: self.scales.sub(first * sb, span * sb),
            step,
        }
    }
    /// The stored bytes of logical row `i`: (blocks or codes, scales).
    fn row(&self, cols: usize, i: usize) -> (&[u8], &[u8]) {
        let (rb, sb) = self.row_bytes(cols);
        let p = i * self.step;
        (
            &self.blocks.as_slice()[p * rb..(p + 1) * rb],
            &self.scales.as_slice()[p * sb..(p + 1) * sb],
        )
    }
    /// Decodes logical row `i` into `out` (`cols` values).
    fn decode(&self, cols: usize, i: usize, out: &mut [f32]) {
        let (b, sc) = self.row(cols, i);
        match self.packing {
            Packing::Ggml => mxfp4::decode_ggml(b, out),
            Packing::Split => mxfp4::decode_split(sc, b, out),
        }
    }
    /// Whether every value of logical row `i` is finite.
    fn row_is_finite(&self, cols: usize, i: usize) -> bool {
        let (b, sc) = self.row(cols, i);
        match self.packing {
            Packing::Ggml => b
                .chunks_exact(mxfp4::GGML_BLOCK_BYTES)
                .all(|blk| mxfp4::block_is_finite(blk[0], &blk[1..])),
            Packing::Split => sc
                .iter()
                .zip(b.chunks_exact(16))
                .all(|(&e, c)| mxfp4::block_is_finite(e, c)),
        }
    }
}

/// How a [`StoredMatrix`] is stored.
#[derive(Debug, Clone)]
pub enum Storage {
    /// f32 values.
    F32(Vec<f32>),
    /// IEEE half floats, little-endian.
    F16(Bytes),
    /// bfloat16, little-endian.
    Bf16(Bytes),
    /// ggml blocks of `dtype` along each row.
    Quantized {
        /// Block type.
        dtype: GgmlDType,
        /// `rows · cols / block_size` blocks.
        bytes: Bytes,
    },
    /// MXFP4 blocks along each row.
    Mxfp4(Mxfp4Rows),
}

/// A row-major `[rows, cols]` matrix in its storage format.
#[derive(Debug, Clone)]
pub struct StoredMatrix {
    rows: usize,
    cols: usize,
    storage: Storage,
}

impl StoredMatrix {
    /// An f32 matrix. Panics if `v.len() != rows · cols` (a caller bug, not an input error).
    pub fn f32(v: Vec<f32>, rows: usize, cols: usize) -> Self {
        assert_eq!(v.len(), rows * cols, "f32 weight of the wrong length");
        StoredMatrix {
            rows,
            cols,
            storage: Storage::F32(v),
        }
    }

    /// A matrix of `dtype` over `bytes`; the error says what does not fit. F32 bytes are
    /// decoded to an owned `Vec<f32>`; 16-bit and quantized bytes are kept as they are.
    pub fn from_bytes(
        dtype: GgmlDType,
        bytes: Bytes,
        rows: usize,
        cols: usize,
    ) -> Result<Self, String> {
        let bs = dtype.block_size();
        if cols == 0 || rows == 0 || !cols.is_multiple_of(bs) {
            return Err(format!(
                "shape [{rows}, {cols}] is not whole {dtype:?} blocks of {bs} along rows"
            ));
        }
        let want = rows
            .checked_mul(cols / bs)
            .and_then(|n| n.checked_mul(dtype.type_size()));
        if want != Some(bytes.len) {
            return Err(format!(
                "{} bytes for a [{rows}, {cols}] {dtype:?} matrix (expected {want:?})",
                bytes.len
            ));
        }
        let storage = match dtype {
            GgmlDType::F32 => Storage::F32(
                bytes
                    .as_slice()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            GgmlDType::F16 => Storage::F16(bytes),
            GgmlDType::BF16 => Storage::Bf16(bytes),
            q => {
                let size = per_block!(q, |B| std::mem::size_of::<B>()).unwrap_or(0);
                if size != q.type_size() {
                    return Err(format!(
                        "{q:?}: candle's block is {size} bytes, the file's {}",
                        q.type_size()
                    ));
                }
                Storage::Quantized { dtype: q, bytes }
            }
        };
        Ok(StoredMatrix {
            rows,
            cols,
            storage,
        })
    }

    /// An MXFP4 matrix over ggml's 17-byte blocks (GGUF type 39), `cols / 32` blocks a row.
    pub fn mxfp4_ggml(bytes: Bytes, rows: usize, cols: usize) -> Result<Self, String> {
        Self::mxfp4(Packing::Ggml, bytes, Bytes::owned(&[]), rows, cols)
    }

    /// An MXFP4 matrix in the split packing: `codes` 16 bytes a block, `scales` one byte a
    /// block, `cols / 32` blocks a row.
    pub fn mxfp4_split(
        scales: Bytes,
        codes: Bytes,
        rows: usize,
        cols: usize,
    ) -> Result<Self, String> {
        Self::mxfp4(Packing::Split, codes, scales, rows, cols)
    }

    fn mxfp4(
        packing: Packing,
        blocks: Bytes,
        scales: Bytes,
        rows: usize,
        cols: usize,
    ) -> Result<Self, String> {
        if cols == 0 || rows == 0 || !cols.is_multiple_of(mxfp4::BLOCK) {
            return Err(format!(
                "shape [{rows}, {cols}] is not whole MXFP4 blocks of 32 along rows"
            ));
        }
        let m = Mxfp4Rows {
            packing,
            blocks,
            scales,
            step: 1,
        };
        let (rb, sb) = m.row_bytes(cols);
        if m.blocks.len != rows * rb || m.scales.len != rows * sb {
            return Err(format!(
                "{} block bytes and {} scale bytes for a [{rows}, {cols}] MXFP4 matrix \
                 ({packing:?} packing: expected {} and {})",
                m.blocks.len,
                m.scales.len,
                rows * rb,
                rows * sb
            ));
        }
        Ok(StoredMatrix {
            rows,
            cols,
            storage: Storage::Mxfp4(m),
        })
    }

    /// Number of rows (outputs of a projection).
    pub fn n_rows(&self) -> usize {
        self.rows
    }
    /// Number of columns (inputs of a projection).
    pub fn n_cols(&self) -> usize {
        self.cols
    }
    /// Number of values, `rows · cols`.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }
    /// Whether the matrix is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The storage.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }
    /// The storage type.
    pub fn dtype(&self) -> WeightType {
        WeightType::Ggml(match &self.storage {
            Storage::F32(_) => GgmlDType::F32,
            Storage::F16(_) => GgmlDType::F16,
            Storage::Bf16(_) => GgmlDType::BF16,
            Storage::Quantized { dtype, .. } => *dtype,
            Storage::Mxfp4(_) => return WeightType::Mxfp4,
        })
    }
    /// Whether the values are blocks of one of candle's ggml types (not MXFP4, which has no
    /// `Matmul::Q8` product here).
    pub fn is_quantized(&self) -> bool {
        matches!(self.storage, Storage::Quantized { .. })
    }
    /// Bytes the matrix's values occupy in its storage format.
    pub fn storage_bytes(&self) -> usize {
        if let Storage::Mxfp4(m) = &self.storage {
            let (rb, sb) = m.row_bytes(self.cols);
            return self.rows * (rb + sb);
        }
        self.rows * self.row_bytes()
    }

    /// Bytes of one row of a ggml-typed storage (not MXFP4, whose rows are [`Mxfp4Rows`]'s).
    fn row_bytes(&self) -> usize {
        let dt = match &self.storage {
            Storage::F32(_) => GgmlDType::F32,
            Storage::F16(_) => GgmlDType::F16,
            Storage::Bf16(_) => GgmlDType::BF16,
            Storage::Quantized { dtype, .. } => *dtype,
            Storage::Mxfp4(m) => return m.row_bytes(self.cols).0,
        };
        self.cols / dt.block_size() * dt.type_size()
    }

    /// Rows `parity, parity + 2, …` (the even or the odd rows) of a matrix with an even number
    /// of rows: a view of the same bytes for MXFP4, a copy otherwise.
    pub fn every_other_row(&self, parity: usize) -> StoredMatrix {
        assert!(
            parity < 2 && self.rows.is_multiple_of(2),
            "every other row of an even number of rows"
        );
        let n = self.rows / 2;
        if let Storage::Mxfp4(m) = &self.storage {
            return StoredMatrix {
                rows: n,
                cols: self.cols,
                storage: Storage::Mxfp4(m.view(self.cols, parity, n, 2)),
            };
        }
        let perm: Vec<usize> = (0..self.rows)
            .map(|i| {
                if i < n {
                    2 * i + parity
                } else {
                    2 * (i - n) + 1 - parity
                }
            })
            .collect();
        self.permute_rows(&perm).rows(0, n)
    }

    /// Rows `r0 .. r0 + n` (a byte range for every storage type; no copy for mapped bytes).
    pub fn rows(&self, r0: usize, n: usize) -> StoredMatrix {
        assert!(r0 + n <= self.rows && n > 0, "row range out of bounds");
        let rb = self.row_bytes();
        let storage = match &self.storage {
            Storage::F32(v) => Storage::F32(v[r0 * self.cols..(r0 + n) * self.cols].to_vec()),
            Storage::F16(b) => Storage::F16(b.sub(r0 * rb, n * rb)),
            Storage::Bf16(b) => Storage::Bf16(b.sub(r0 * rb, n * rb)),
            Storage::Quantized { dtype, bytes } => Storage::Quantized {
                dtype: *dtype,
                bytes: bytes.sub(r0 * rb, n * rb),
            },
            Storage::Mxfp4(m) => Storage::Mxfp4(m.view(self.cols, r0, n, 1)),
        };
        StoredMatrix {
            rows: n,
            cols: self.cols,
            storage,
        }
    }

    /// The matrix whose row `i` is row `perm[i]` of this one (bytes copied once).
    pub fn permute_rows(&self, perm: &[usize]) -> StoredMatrix {
        assert!(
            perm.len() == self.rows && perm.iter().all(|&p| p < self.rows),
            "not a row permutation"
        );
        let storage = match &self.storage {
            Storage::F32(v) => Storage::F32(
                perm.iter()
                    .flat_map(|&p| &v[p * self.cols..(p + 1) * self.cols])
                    .copied()
                    .collect(),
            ),
            Storage::Mxfp4(m) => {
                let (mut blocks, mut scales) = (Vec::new(), Vec::new());
                for &p in perm {
                    let (b, sc) = m.row(self.cols, p);
                    blocks.extend_from_slice(b);
                    scales.extend_from_slice(sc);
                }
                Storage::Mxfp4(Mxfp4Rows {
                    packing: m.packing,
                    blocks: Bytes::owned(&blocks),
                    scales: Bytes::owned(&scales),
                    step: 1,
                })
            }
            other => {
                let rb = self.row_bytes();
                let src = match other {
                    Storage::F16(b) | Storage::Bf16(b) | Storage::Quantized { bytes: b, .. } => {
                        b.as_slice()
                    }
                    Storage::F32(_) | Storage::Mxfp4(_) => unreachable!(),
                };
                let mut out = Vec::with_capacity(self.rows * rb);
                for &p in perm {
                    out.extend_from_slice(&src[p * rb..(p + 1) * rb]);
                }
                let b = Bytes::owned(&out);
                match other {
                    Storage::F16(_) => Storage::F16(b),
                    Storage::Bf16(_) => Storage::Bf16(b),
                    Storage::Quantized { dtype, .. } => Storage::Quantized {
                        dtype: *dtype,
                        bytes: b,
                    },
                    Storage::F32(_) | Storage::Mxfp4(_) => unreachable!(),
                }
            }
        };
        StoredMatrix {
            rows: self.rows,
            cols: self.cols,
            storage,
        }
    }

    /// Rows `r0 .. r0 + n` as f32 into `out` (`n · cols` values).
    pub fn rows_f32(&self, r0: usize, n: usize, out: &mut [f32]) {
        let c = self.cols;
        assert!(
            r0 + n <= self.rows && out.len() == n * c,
            "row range out of bounds"
        );
        if let Storage::Mxfp4(m) = &self.storage {
            for (i, o) in out.chunks_exact_mut(c).enumerate() {
                m.decode(c, r0 + i, o);
            }
            return;
        }
        let rb = self.row_bytes();
        fn bytes(b: &Bytes, lo: usize, hi: usize) -> &[u8] {
            &b.as_slice()[lo..hi]
        }
        let (lo, hi) = (r0 * rb, (r0 + n) * rb);
        match &self.storage {
            Storage::F32(v) => out.copy_from_slice(&v[r0 * c..(r0 + n) * c]),
            Storage::F16(b) => {
                for (o, h) in out.iter_mut().zip(cast::<f16>(bytes(b, lo, hi))) {
                    *o = h.to_f32();
                }
            }
            Storage::Bf16(b) => {
                for (o, h) in out.iter_mut().zip(cast::<bf16>(bytes(b, lo, hi))) {
                    *o = h.to_f32();
                }
            }
            Storage::Quantized { dtype, bytes: b } => {
                let raw = bytes(b, lo, hi);
                if !crate::quant::dequant::to_f32(*dtype, raw, out) {
                    per_block!(*dtype, |B| B::to_float(cast::<B>(raw), out));
                }
            }
            Storage::Mxfp4(_) => unreachable!("decoded above"),
        }
    }

    /// Row `i` as f32 into `out` (`cols` values).
    pub fn row_f32(&self, i: usize, out: &mut [f32]) {
        self.rows_f32(i, 1, out)
    }

    /// The whole matrix as f32 (borrowed when stored as f32).
    pub fn to_f32(&self) -> Cow<'_, [f32]> {
        match &self.storage {
            Storage::F32(v) => Cow::Borrowed(v),
            _ => {
                let mut out = vec![0f32; self.len()];
                out.par_chunks_mut(TILE * self.cols)
                    .enumerate()
                    .for_each(|(i, ch)| self.rows_f32(i * TILE, ch.len() / self.cols, ch));
                Cow::Owned(out)
            }
        }
    }

    /// The values as a mutable f32 slice, converting the storage to f32 first if needed (for
    /// edits such as a test's planted weights).
    pub fn f32_mut(&mut self) -> &mut [f32] {
        if !matches!(self.storage, Storage::F32(_)) {
            self.storage = Storage::F32(self.to_f32().into_owned());
        }
        match &mut self.storage {
            Storage::F32(v) => v,
            _ => unreachable!(),
        }
    }

    /// The first row holding a non-finite value, if any. f32 / f16 / bf16 values are scanned
    /// (16-bit ones by their exponent bits); quantized blocks by their scales only
    /// ([`scale_offsets`]), so the check reads every block but dequantizes nothing; MXFP4
    /// blocks by their scale and largest code ([`mxfp4::block_is_finite`]).
    pub fn first_non_finite_row(&self) -> Option<usize> {
        let c = self.cols;
        if let Storage::Mxfp4(m) = &self.storage {
            return (0..self.rows)
                .into_par_iter()
                .position_first(|i| !m.row_is_finite(c, i));
        }
        let rb = self.row_bytes();
        match &self.storage {
            Storage::F32(v) => v.iter().position(|x| !x.is_finite()).map(|k| k / c),
            Storage::F16(b) => cast::<u16>(b.as_slice())
                .par_iter()
                .position_first(|&h| h & 0x7c00 == 0x7c00)
                .map(|k| k / c),
            Storage::Bf16(b) => cast::<u16>(b.as_slice())
                .par_iter()
                .position_first(|&h| h & 0x7f80 == 0x7f80)
                .map(|k| k / c),
            Storage::Quantized { dtype, bytes } => {
                let ts = dtype.type_size();
                let offs = scale_offsets(*dtype);
                let wide = *dtype == GgmlDType::Q8K;
                bytes
                    .as_slice()
                    .par_chunks_exact(ts)
                    .position_first(|blk| {
                        offs.iter().any(|&o| {
                            if wide {
                                let v = [blk[o], blk[o + 1], blk[o + 2], blk[o + 3]];
                                !f32::from_le_bytes(v).is_finite()
                            } else {
                                u16::from_le_bytes([blk[o], blk[o + 1]]) & 0x7c00 == 0x7c00
                            }
                        })
                    })
                    .map(|k| k * ts / rb)
            }
            Storage::Mxfp4(_) => unreachable!("checked above"),
        }
    }

    /// `x Wᵀ` for `x` row-major `[t, cols]`: a row-major `[t, rows]` result.
    pub fn matmul_t(&self, x: &[f32], t: usize, mode: Matmul) -> Vec<f32> {
        let (r, c) = (self.rows, self.cols);
        assert_eq!(x.len(), t * c, "activation width does not match the weight");
        let par = t * r * c >= PAR_FLOPS;
        if let Storage::F32(w) = &self.storage {
            let mut out = vec![0f32; t * r];
            faer::linalg::matmul::matmul(
                MatMut::from_row_major_slice_mut(&mut out, t, r),
                Accum::Replace,
                MatRef::from_row_major_slice(x, t, c),
                MatRef::from_row_major_slice(w, r, c).transpose(),
                1.0f32,
                if par { Par::rayon(0) } else { Par::Seq },
            );
            crate::linalg::clean_upper_state();
            return out;
        }
        // Dequantizing (or quantizing) costs about as much per weight as 8 multiply-adds: a
        // T = 1 gemv over a large matrix is worth splitting over threads.
        let par = (t + 8) * r * c >= PAR_FLOPS;
        if mode == Matmul::Q8
            && let Storage::Quantized { dtype, bytes } = &self.storage
            && let Some(out_t) =
                crate::quant::q8::matmul_t_rows(*dtype, bytes.as_slice(), r, c, x, t, par)
        {
            return transpose(out_t, r, t);
        }
        // Exact, a few activation rows (generation): fused dequantize-and-dot where the block
        // type has a kernel (`crate::quant::fused`), each block read once.
        if let Storage::Quantized { dtype, bytes } = &self.storage
            && let Some(out_t) =
                crate::quant::fused::matmul_t_rows(*dtype, bytes.as_slice(), r, c, x, t, par)
        {
            return transpose(out_t, r, t);
        }
        // Exact: the column block `out[:, r0..r0+n] = x · W[r0..r0+n]ᵀ` of each row tile,
        // dequantized once into a per-thread scratch and written in place (no transpose).
        let n_tile = tile_rows(r, c, t);
        let xm = MatRef::from_row_major_slice(x, t, c);
        let mut out = vec![0f32; t * r];
        // Column blocks of `out`: the row blocks of its transpose, transposed back.
        let out_tr = MatMut::from_row_major_slice_mut(&mut out, t, r).transpose_mut();
        let blocks: Vec<(usize, MatMut<'_, f32>)> = crate::backend::cpu::row_blocks(out_tr, n_tile)
            .into_iter()
            .map(|(r0, blk)| (r0, blk.transpose_mut()))
            .collect();
        let work = |scratch: &mut Vec<f32>, (r0, blk): (usize, MatMut<'_, f32>)| {
            let n = blk.ncols();
            let s = &mut scratch[..n * c];
            self.rows_f32(r0, n, s);
            faer::linalg::matmul::matmul(
                blk,
                Accum::Replace,
                xm,
                MatRef::from_row_major_slice(s, n, c).transpose(),
                1.0f32,
                Par::Seq,
            );
            crate::linalg::clean_upper_state();
        };
        let scratch = || vec![0f32; n_tile.min(r) * c];
        if par {
            blocks.into_par_iter().for_each_init(scratch, work);
        } else {
            let mut s = scratch();
            for b in blocks {
                work(&mut s, b);
            }
        }
        out
    }
}

/// Rows of `W` dequantized at a time by the exact product of `t` activation rows: [`TILE`] for
/// a few rows (generation: the tile is the unit of parallel work), more when `t` is large, so
/// the activations are packed by the GEMM fewer times (once per tile), up to a 1 MiB f32 tile
/// and at least two tiles per thread.
fn tile_rows(rows: usize, cols: usize, t: usize) -> usize {
    if t < 16 {
        return TILE;
    }
    let by_cache = (1usize << 18) / cols.max(1);
    let by_threads = rows.div_ceil(2 * rayon::current_num_threads().max(1));
    let n = by_cache.min(by_threads).max(TILE);
    n - n % 16
}

/// `[r, t]` row-major → `[t, r]` row-major (free when `t = 1`).
fn transpose(m: Vec<f32>, r: usize, t: usize) -> Vec<f32> {
    if t == 1 || r == 0 {
        return m;
    }
    // Bands of `BAND` output rows (columns of `m`), in parallel from `PAR_VALUES` values: a
    // band reads `BAND` consecutive values of each row of `m` and writes `BAND` output rows.
    const BAND: usize = 16;
    const PAR_VALUES: usize = 1 << 18;
    let mut out = vec![0f32; r * t];
    let band = |(k, o): (usize, &mut [f32])| {
        let j0 = k * BAND;
        let n = o.len() / r;
        for (i, row) in m.chunks_exact(t).enumerate() {
            for (jj, v) in row[j0..j0 + n].iter().enumerate() {
                o[jj * r + i] = *v;
            }
        }
    };
    if r * t >= PAR_VALUES {
        out.par_chunks_mut(BAND * r).enumerate().for_each(band);
    } else {
        out.chunks_mut(BAND * r).enumerate().for_each(band);
    }
    out
}

/// Upper bound on `|(x Wᵀ)_q8 − (x Wᵀ)_exact|` for one weight row `w` (as f32) and one
/// activation row `x`, for a quantized weight of type `dt`.
///
/// The activation is quantized per block `b` of `B` values (`B` = 32 for Q8_0/Q8_1, 256 for
/// Q8_K) with step $\delta_b = a_b/127$, $a_b = \max_{i\in b}|x_i|$, so each value moves by at
/// most $\delta_b/2 = a_b/254$; storing $\delta_b$ as f16 (Q8_0/Q8_1) moves $q_i\delta_b$ by at
/// most $127\thinspace\delta_b\thinspace 2^{-11} = a_b 2^{-11}$. Both products then round in f32 over `k = cols`
/// terms, each within $\gamma_k\sum|x_i w_i| \le \gamma_k \sum_b a_b\lVert w_b\rVert_1$,
/// $\gamma_k = ku/(1-ku)$, $u = 2^{-24}$. Hence
/// $|\Delta| \le (1/254 + 2^{-10} + 4\gamma_k)\sum_b a_b \lVert w_b\rVert_1$, plus for Q4_1/Q5_1 (whose
/// partner Q8_1 carries $s = \delta_b\sum q_i$ in f16, relative error $2^{-11}$, multiplied by
/// the block minimum $|m_b| \le \max_{i\in b}|w_i|$) the term
/// $2^{-11}\thinspace B\thinspace(1+1/127)\thinspace a_b\max_{i\in b}|w_i|$ per block.
pub fn q8_bound(dt: GgmlDType, w: &[f32], x: &[f32]) -> f64 {
    let bs = match dt {
        GgmlDType::Q2K | GgmlDType::Q3K | GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K => 256,
        GgmlDType::Q8K => 256,
        _ => 32,
    };
    let k = w.len() as f64;
    let u = 2f64.powi(-24);
    let gamma = k * u / (1.0 - k * u);
    let c = 1.0 / 254.0 + 2f64.powi(-10) + 4.0 * gamma;
    let with_s = matches!(dt, GgmlDType::Q4_1 | GgmlDType::Q5_1);
    w.chunks(bs)
        .zip(x.chunks(bs))
        .map(|(wb, xb)| {
            let a = xb.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            let l1: f64 = wb.iter().map(|v| v.abs() as f64).sum();
            let mut t = c * a * l1;
            if with_s {
                let wmax = wb.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
                t += 2f64.powi(-11) * bs as f64 * (1.0 + 1.0 / 127.0) * a * wmax;
            }
            t
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::transpose;

    /// Element (i, j) of the `[r, t]` input is element (j, i) of the output, for shapes with a
    /// partial band and for one large enough to take the parallel path.
    #[test]
    fn transpose_moves_every_element() {
        for (r, t) in [(37, 5), (3, 1), (600, 513), (0, 7)] {
            let m: Vec<f32> = (0..r * t).map(|k| k as f32).collect();
            let out = transpose(m, r, t);
            for i in 0..r {
                for j in 0..t {
                    assert_eq!(out[j * r + i], (i * t + j) as f32, "r {r} t {t} ({i}, {j})");
                }
            }
        }
    }
}
