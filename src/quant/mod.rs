//! Quantized ggml blocks and their products: the kernels below the model runtime. Each reads
//! the blocks as the file stores them and imports nothing from the runtime.
//!
//! - [`dequant`]: block decoders to f32 for the tiled exact product (Q8_0, Q4_1, Q5_0, Q4_K,
//!   Q5_K, Q6_K), bit-equal to candle's `to_float`;
//! - [`fused`]: dequantize-and-dot for a few activation rows in f32, each block read once;
//! - [`q8`]: the `Matmul::Q8` product, llama.cpp's arithmetic (activations quantized to Q8
//!   blocks, integer dot products);
//! - [`mxfp4`]: MXFP4 blocks (gpt-oss's expert weights) in ggml's and OpenAI's packings,
//!   decoded to f32 for the exact product.
//!
//! Each kernel is chosen at run time from the CPU's features and has a portable twin that gives
//! the same bits.

pub mod dequant;
pub mod fused;
pub mod mxfp4;
pub mod q8;

/// Reinterprets bytes as a slice of `B` (a ggml block or a 16-bit float).
///
/// Callers guarantee the invariants that [`crate::runtime::weights::StoredMatrix`]'s constructors check: the length is a multiple
/// of `size_of::<B>()` and the address is aligned (every [`crate::runtime::weights::Bytes`] starts 8-byte aligned and row
/// offsets are multiples of the block size, itself a multiple of the block's alignment).
pub fn cast<B>(b: &[u8]) -> &[B] {
    let (sz, al) = (std::mem::size_of::<B>(), std::mem::align_of::<B>());
    assert!(
        b.len().is_multiple_of(sz) && (b.as_ptr() as usize).is_multiple_of(al),
        "weight bytes not a whole, aligned number of blocks"
    );
    // SAFETY: length and alignment checked above; `B` is a `#[repr(C)]` ggml block of
    // integers and f16/f32 fields (or f16/bf16), for which every bit pattern is valid.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<B>(), b.len() / sz) }
}
