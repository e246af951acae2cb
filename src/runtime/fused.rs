//! Fused dequantize-and-dot products $y = x W^\top$ for a few activation rows (generation),
//! reading each ggml block of `W` once from the file's bytes, with no f32 copy of the weights.
//!
//! For the simple block types of the packaged models, with block scale $d$ (f16), minimum $m$
//! (f16, Q4_1 only) and integer quants $q_j$ in a block $b$ of 32 values:
//! - Q8_0: $w_j = d\thinspace q_j$ ($q_j$ int8), so $\langle w_b, x_b\rangle = d \sum_j q_j x_j$;
//! - Q4_1: $w_j = d\thinspace q_j + m$ ($q_j$ in $0..16$, the low nibbles of the 16 bytes first, then the
//!   high ones), so $\langle w_b, x_b\rangle = d \sum_j q_j x_j + m \sum_j x_j$, the block sums of
//!   $x$ computed once per activation row;
//! - Q5_0: $w_j = d\thinspace (q_j - 16)$ with $q_j$ in $0..32$, its low four bits in the nibbles as
//!   Q4_1 stores them and its fifth bit bit $j$ of a 32-bit word `qh`, so
//!   $\langle w_b, x_b\rangle = d \sum_j (q_j - 16)\thinspace x_j$.
//!
//! The arithmetic is f32, as the exact product's ([`super::weights::Matmul::Exact`]): the
//! values are those of dequantize-then-multiply up to the order of the f32 roundings (the test
//! compares with candle's `to_float` followed by an f64 dot product). Other block types return
//! `None` and take the tiled exact product. The per-row loop is one `#[inline(always)]` body
//! dispatched at run time to AVX-512F, AVX2 or the baseline ([`crate::backend::simd`]).

use candle_core::quantized::GgmlDType;
use half::f16;
use rayon::prelude::*;

/// Activation rows up to which the fused product is used (above, the tiled exact product with
/// faer reuses each dequantized tile across the rows and is faster).
pub const MAX_ROWS: usize = 4;

/// Values per block of Q8_0 and Q4_1.
const QK: usize = 32;

fn scale(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// $\langle w, x\rangle$ for one Q8_0 row (`row`: its blocks of 34 bytes). The 16 lanes of
/// `acc` run across the blocks (value $j$ and $j + 16$ of each block in lane $j$), so the loop
/// vectorises; they are summed once at the end.
#[inline(always)]
fn dot_q8_0(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (blk, xb) in row.chunks_exact(34).zip(x.chunks_exact(QK)) {
        let blk: &[u8; 34] = blk.try_into().expect("34-byte block");
        let xb: &[f32; QK] = xb.try_into().expect("32 values");
        let d = scale(blk, 0);
        for j in 0..16 {
            let (a, b) = (blk[2 + j] as i8 as f32, blk[18 + j] as i8 as f32);
            acc[j] += d * (a * xb[j] + b * xb[j + 16]);
        }
    }
    acc.iter().sum()
}

/// $\langle w, x\rangle$ for one Q4_1 row (blocks of 20 bytes), `xsum[b]` the block sums of `x`;
/// lanes as in [`dot_q8_0`], the minimum's terms $m_b \sum x_b$ in one running sum.
#[inline(always)]
fn dot_q4_1(row: &[u8], x: &[f32], xsum: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let mut mins = 0f32;
    for ((blk, xb), &sx) in row.chunks_exact(20).zip(x.chunks_exact(QK)).zip(xsum) {
        let blk: &[u8; 20] = blk.try_into().expect("20-byte block");
        let xb: &[f32; QK] = xb.try_into().expect("32 values");
        let (d, m) = (scale(blk, 0), scale(blk, 2));
        for j in 0..16 {
            let q = blk[4 + j];
            acc[j] += d * ((q & 0x0F) as f32 * xb[j] + (q >> 4) as f32 * xb[j + 16]);
        }
        mins += m * sx;
    }
    acc.iter().sum::<f32>() + mins
}

/// $\langle w, x\rangle$ for one Q5_0 row (blocks of 22 bytes: scale, `qh`, 16 nibble bytes),
/// lanes as in [`dot_q8_0`], the offset applied to each quant ($q_j - 16$ is exact in f32).
#[inline(always)]
fn dot_q5_0(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (blk, xb) in row.chunks_exact(22).zip(x.chunks_exact(QK)) {
        let blk: &[u8; 22] = blk.try_into().expect("22-byte block");
        let xb: &[f32; QK] = xb.try_into().expect("32 values");
        let d = scale(blk, 0);
        let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        for j in 0..16 {
            let q = blk[6 + j];
            let lo = ((q & 0x0F) as u32 | ((qh >> j) & 1) << 4) as i32 - 16;
            let hi = ((q >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4) as i32 - 16;
            acc[j] += d * (lo as f32 * xb[j] + hi as f32 * xb[j + 16]);
        }
    }
    acc.iter().sum()
}

/// The activation side of a product: `t` rows of `x` (`cols` wide, row-major) and their
/// per-block sums `xsum` (`cols / 32` a row, used by Q4_1's offsets).
#[derive(Clone, Copy)]
struct Acts<'a> {
    x: &'a [f32],
    xsum: &'a [f32],
    cols: usize,
    t: usize,
}

/// One output row block: `out[k·t + i] = ⟨W[r0 + k], x_i⟩` for the weight rows of `w`
/// (`rows` × `row_bytes` bytes) and the `t` activation rows of `a`.
fn rows_block(dt: GgmlDType, w: &[u8], row_bytes: usize, a: Acts<'_>, out: &mut [f32]) {
    crate::backend::simd::dispatch!(rows_block(dt: GgmlDType, w: &[u8], row_bytes: usize, a: Acts<'_>, out: &mut [f32]) -> () = rows_loop(dt, w, row_bytes, a, out))
}

#[inline(always)]
fn rows_loop(dt: GgmlDType, w: &[u8], row_bytes: usize, a: Acts<'_>, out: &mut [f32]) {
    let Acts { x, xsum, cols, t } = a;
    let nb = cols / QK;
    for (row, o) in w.chunks_exact(row_bytes).zip(out.chunks_exact_mut(t)) {
        for (i, oi) in o.iter_mut().enumerate() {
            let xi = &x[i * cols..(i + 1) * cols];
            *oi = match dt {
                GgmlDType::Q8_0 => dot_q8_0(row, xi),
                GgmlDType::Q5_0 => dot_q5_0(row, xi),
                _ => dot_q4_1(row, xi, &xsum[i * nb..(i + 1) * nb]),
            };
        }
    }
}

/// `x Wᵀ` as a row-major `[rows, t]` matrix (transposed, free for `t = 1`) for a Q8_0, Q4_1 or Q5_0
/// `W` stored as `bytes`; `None` for another type, a width that is not whole blocks, or more
/// than [`MAX_ROWS`] activation rows. Rows of `W` are split over the threads when `par`.
pub fn matmul_t_rows(
    dt: GgmlDType,
    bytes: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    t: usize,
    par: bool,
) -> Option<Vec<f32>> {
    let block_bytes = match dt {
        GgmlDType::Q8_0 => 34,
        GgmlDType::Q4_1 => 20,
        GgmlDType::Q5_0 => 22,
        _ => return None,
    };
    if t == 0 || t > MAX_ROWS || !cols.is_multiple_of(QK) || x.len() != t * cols {
        return None;
    }
    let row_bytes = cols / QK * block_bytes;
    if bytes.len() != rows * row_bytes {
        return None;
    }
    let xsum: Vec<f32> = x.chunks_exact(QK).map(|b| b.iter().sum()).collect();
    let mut out = vec![0f32; rows * t];
    // 64 weight rows a task: each reads its rows' bytes once for all `t` activation rows.
    const ROWS: usize = 64;
    let work = |(k, o): (usize, &mut [f32])| {
        let n = o.len() / t;
        let w = &bytes[k * ROWS * row_bytes..(k * ROWS + n) * row_bytes];
        let a = Acts {
            x,
            xsum: &xsum,
            cols,
            t,
        };
        rows_block(dt, w, row_bytes, a, o);
    };
    if par {
        out.par_chunks_mut(ROWS * t).enumerate().for_each(work);
    } else {
        out.chunks_mut(ROWS * t).enumerate().for_each(work);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::k_quants::{BlockQ4_1, BlockQ5_0, BlockQ8_0, GgmlType};

    /// Random but valid block bytes (finite f16 scales in ±0.05, any quants), seeded.
    fn blocks(dt: GgmlDType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let bb = match dt {
            GgmlDType::Q8_0 => 34,
            GgmlDType::Q5_0 => 22,
            _ => 20,
        };
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let mut out = Vec::new();
        for _ in 0..rows * cols / QK {
            let mut b = vec![0u8; bb];
            for v in b.iter_mut() {
                *v = next() as u8;
            }
            let nscales = if dt == GgmlDType::Q4_1 { 2 } else { 1 };
            for k in 0..nscales {
                let v = (next() % 2000) as f32 / 2000.0 * 0.1 - 0.05;
                b[2 * k..2 * k + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
            }
            out.extend(b);
        }
        out
    }

    /// Against dequantize-then-multiply with candle's own `to_float` and an f64 dot product:
    /// each output within the f32 rounding of its terms, $2\cdot 32\thinspace u \sum_j |w_j x_j|$ per
    /// block plus one rounding per block of the running sum (γ over `cols` terms).
    #[test]
    fn fused_products_equal_dequantize_then_multiply() {
        for dt in [GgmlDType::Q8_0, GgmlDType::Q4_1, GgmlDType::Q5_0] {
            let (rows, cols) = (130, 576);
            let w = blocks(dt, rows, cols, 7);
            let mut deq = vec![0f32; rows * cols];
            match dt {
                GgmlDType::Q8_0 => BlockQ8_0::to_float(bytemuck_cast::<BlockQ8_0>(&w), &mut deq),
                GgmlDType::Q5_0 => BlockQ5_0::to_float(bytemuck_cast::<BlockQ5_0>(&w), &mut deq),
                _ => BlockQ4_1::to_float(bytemuck_cast::<BlockQ4_1>(&w), &mut deq),
            }
            for t in 1..=MAX_ROWS {
                let x: Vec<f32> = (0..t * cols)
                    .map(|k| ((k * 37 % 101) as f32 - 50.0) / 25.0)
                    .collect();
                for par in [false, true] {
                    let got = matmul_t_rows(dt, &w, rows, cols, &x, t, par).unwrap();
                    for r in 0..rows {
                        for i in 0..t {
                            let (wr, xi) =
                                (&deq[r * cols..(r + 1) * cols], &x[i * cols..(i + 1) * cols]);
                            let want: f64 =
                                wr.iter().zip(xi).map(|(&a, &b)| a as f64 * b as f64).sum();
                            let mag: f64 = wr
                                .iter()
                                .zip(xi)
                                .map(|(&a, &b)| (a as f64 * b as f64).abs())
                                .sum();
                            let u = f32::EPSILON as f64 / 2.0;
                            let tol = (2.0 * QK as f64 + cols as f64 / QK as f64 + 4.0)
                                * u
                                * (mag + 1e-30)
                                * 2.0;
                            let g = got[r * t + i] as f64;
                            assert!(
                                (g - want).abs() <= tol,
                                "{dt:?} t={t} row {r}: {g} vs {want} (tol {tol:.2e})"
                            );
                        }
                    }
                }
            }
        }
        // Unsupported type, width or row count: the caller falls back.
        assert!(matmul_t_rows(GgmlDType::Q4K, &[], 1, 256, &[0.0; 256], 1, false).is_none());
        assert!(matmul_t_rows(GgmlDType::Q8_0, &[0; 34], 1, 32, &[0.0; 160], 5, false).is_none());
    }

    fn bytemuck_cast<B>(b: &[u8]) -> &[B] {
        assert!(b.len().is_multiple_of(std::mem::size_of::<B>()));
        assert!((b.as_ptr() as usize).is_multiple_of(std::mem::align_of::<B>()));
        // SAFETY: the blocks are plain bytes (f16 and u8/i8 fields, alignment 2, checked above),
        // and every bit pattern of them is a valid block.
        unsafe { std::slice::from_raw_parts(b.as_ptr().cast(), b.len() / std::mem::size_of::<B>()) }
    }
}
