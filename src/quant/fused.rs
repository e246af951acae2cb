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
//! and for the K-quants (blocks of 256 with an f16 $d$, sub-block scales $s_k$):
//! - Q4_K and Q5_K: $w_j = (d s_k) q_j - d_{\min} m_k$ over 8 sub-blocks of 32 (6-bit $s_k$,
//!   $m_k$; $q_j$ 4-bit, or 5-bit with the fifth bit in `qh`), so
//!   $\langle w_b, x_b\rangle = \sum_k d s_k \sum_{j\in k} q_j x_j - d_{\min}\sum_k m_k \sum_{j \in k} x_j$,
//!   the sub-block sums of $x$ being Q4_1's block sums;
//! - Q6_K: $w_j = (d s_k)(q_j - 32)$ over 16 sub-blocks of 16 ($s_k$ int8, $q_j$ 6-bit).
//!
//! The arithmetic is f32, as the exact product's ([`crate::runtime::weights::Matmul::Exact`]): the
//! values are those of dequantize-then-multiply up to the order of the f32 roundings (the test
//! compares with candle's `to_float` followed by an f64 dot product). Other block types return
//! `None` and take the tiled exact product.
//!
//! Order of the simple types' operations, with $v_j$ the block's integer weights
//! ([`super::q8::block_values`]: $q_j$, $q_j - 16$, or Q4_1's unsigned $q_j$) and
//! $\mathrm{fma}(a, b, c) = ab + c$ rounded once: for each lane $l < 8$,
//! $s_l = \mathrm{fma}(v_{l+24}, x_{l+24}, \mathrm{fma}(v_{l+16}, x_{l+16},
//! \mathrm{fma}(v_{l+8}, x_{l+8}, v_l x_l)))$, added as $A_l \leftarrow \mathrm{fma}(d, s_l, A_l)$
//! to accumulator $b \bmod 4$; Q4_1's minima $m_b \sum_j x_{b,j}$ go into running sum
//! $b \bmod 16$; the end is the q8 product's ([`super::q8::finish`]). The AVX2 + FMA kernel and
//! the portable one (`f32::mul_add`) do these operations in this order, so they give the same
//! bits (tested). The K-quants' per-row loop is one `#[inline(always)]` body dispatched at run
//! time to AVX-512F, AVX2 or the baseline ([`crate::backend::simd`]).

use candle_core::quantized::GgmlDType;
use rayon::prelude::*;

/// Activation rows up to which the fused product is used (above, the tiled exact product with
/// faer reuses each dequantized tile across the rows and is faster).
pub const MAX_ROWS: usize = 4;

/// Values per block of Q8_0, Q4_1 and Q5_0 (and per sub-block of Q4_K, Q5_K).
const QK: usize = 32;

/// Values per block of the K-quants.
const QK_K: usize = 256;

use super::dequant::{f16_to_f32_lanes, half as scale, scale_min_k4};
use super::q8::{self, GROUP, Simple};

/// $\langle w, x\rangle$ for one row of a simple type (kind code `K`, [`Simple`]), `xsum`
/// the block sums of `x`. Portable; the operations of the module doc, with `f32::mul_add`
/// for each fused multiply-add, so it gives the bits of [`fma::dot`].
fn simple_dot_portable<const K: u8>(row: &[u8], x: &[f32], xsum: &[f32]) -> f32 {
    let kind = Simple::from_code(K);
    let mut acc = [[0f32; 8]; 4];
    let mut mins = [0f32; GROUP];
    for (b, blk) in row.chunks_exact(kind.block_bytes()).enumerate() {
        let v = q8::block_values(kind, blk);
        let d = f16_to_f32_lanes(u16::from_le_bytes([blk[0], blk[1]]));
        let xb: &[f32; QK] = x[b * QK..(b + 1) * QK].try_into().expect("32 values");
        for (l, a) in acc[b % 4].iter_mut().enumerate() {
            let mut s = v[l] as f32 * xb[l];
            for g in 1..4 {
                s = (v[8 * g + l] as f32).mul_add(xb[8 * g + l], s);
            }
            *a = d.mul_add(s, *a);
        }
        if kind.with_min() {
            mins[b % GROUP] += f16_to_f32_lanes(u16::from_le_bytes([blk[2], blk[3]])) * xsum[b];
        }
    }
    q8::finish(acc, mins)
}

/// The simple types' kernel with AVX2, FMA and F16C: the block's f16 scale and 32 integer
/// weights decoded in registers ([`q8::avx2::weights`]), the weights widened to f32 eight at
/// a time and met with `x` in fused multiply-adds; one pass over the row's bytes.
#[cfg(target_arch = "x86_64")]
mod fma {
    use super::{GROUP, QK, Simple, q8};
    use q8::avx2::{half8, lanes, prefetch};
    use std::arch::x86_64::*;

    /// Accumulator `acc` plus block `blk`'s term: $d \cdot s$ with
    /// $s_l = \sum_{g<4} v_{8g+l}\thinspace x_{8g+l}$ (one product, three fused multiply-adds).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn block(kind: Simple, acc: __m256, blk: &[u8], xb: &[f32]) -> __m256 {
        let w = q8::avx2::weights(kind, blk);
        let (lo, hi) = (_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
        let widen = |h: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h));
        let v = [
            widen(lo),
            widen(_mm_srli_si128::<8>(lo)),
            widen(hi),
            widen(_mm_srli_si128::<8>(hi)),
        ];
        let xb: &[f32; QK] = xb[..QK].try_into().expect("32 values");
        // SAFETY: `xb` is 32 readable f32; the loads have no alignment requirement.
        let x = |g: usize| unsafe { _mm256_loadu_ps(xb.as_ptr().add(8 * g)) };
        let mut s = _mm256_mul_ps(v[0], x(0));
        s = _mm256_fmadd_ps(v[1], x(1), s);
        s = _mm256_fmadd_ps(v[2], x(2), s);
        s = _mm256_fmadd_ps(v[3], x(3), s);
        _mm256_fmadd_ps(half8(blk, 0), s, acc)
    }

    /// [`super::simple_dot_portable`] with AVX2, FMA and F16C: the same operations in the
    /// same order.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn dot<const K: u8>(row: &[u8], x: &[f32], xsum: &[f32]) -> f32 {
        let kind = Simple::from_code(K);
        let bb = kind.block_bytes();
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut mins = [0f32; GROUP];
        // Four blocks at a time, block b into accumulator b mod 4.
        let mut quads = row.chunks_exact(4 * bb);
        for (c, quad) in quads.by_ref().enumerate() {
            prefetch(quad.as_ptr());
            for (j, a) in acc.iter_mut().enumerate() {
                let (b, blk) = (4 * c + j, &quad[j * bb..(j + 1) * bb]);
                *a = block(kind, *a, blk, &x[b * QK..]);
                if kind.with_min() {
                    mins[b % GROUP] += _mm256_cvtss_f32(half8(blk, 2)) * xsum[b];
                }
            }
        }
        let b0 = row.len() / bb / 4 * 4;
        for (j, blk) in quads.remainder().chunks_exact(bb).enumerate() {
            let b = b0 + j;
            acc[j] = block(kind, acc[j], blk, &x[b * QK..]);
            if kind.with_min() {
                mins[b % GROUP] += _mm256_cvtss_f32(half8(blk, 2)) * xsum[b];
            }
        }
        q8::finish(lanes(acc), mins)
    }
}

/// Whether the AVX2 + FMA + F16C kernel runs on this CPU (detected once by the standard
/// library).
fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// One (weight row, activation row) pair of a simple type: the AVX2 + FMA kernel where the CPU
/// has it (`fast`), else the portable one (the same bits).
#[inline]
fn simple_dot(kind: Simple, fast: bool, row: &[u8], x: &[f32], xsum: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if fast {
        use fma::dot as fast_dot;
        // SAFETY: `fast` is true only when the CPU was found to support AVX2, FMA and F16C.
        return unsafe { q8::by_kind!(kind, fast_dot(row, x, xsum)) };
    }
    let _ = fast;
    q8::by_kind!(kind, simple_dot_portable(row, x, xsum))
}

/// One output row block of a simple type, as [`rows_block`].
fn simple_rows(kind: Simple, fast: bool, w: &[u8], row_bytes: usize, a: Acts<'_>, out: &mut [f32]) {
    let Acts { x, xsum, cols, t } = a;
    let nb = cols / QK;
    for (row, o) in w.chunks_exact(row_bytes).zip(out.chunks_exact_mut(t)) {
        for (i, oi) in o.iter_mut().enumerate() {
            let (xi, si) = (&x[i * cols..(i + 1) * cols], &xsum[i * nb..(i + 1) * nb]);
            *oi = simple_dot(kind, fast, row, xi, si);
        }
    }
}

/// $\langle w, x\rangle$ for one Q4_K (`hbits` false, blocks of 144 bytes: $d$, $d_{\min}$, 12
/// bytes of scales and minima, 128 of nibbles) or Q5_K row (`hbits` true, 176 bytes: the same
/// with 32 bytes of fifth bits `qh` before the nibbles); `xsum[k]` the sums of `x` over its
/// sub-blocks of 32. The 32 lanes of `acc` run over the values of a sub-block, the minima's
/// terms in one running sum.
#[inline(always)]
fn dot_q45_k(row: &[u8], x: &[f32], xsum: &[f32], hbits: bool) -> f32 {
    let bb = if hbits { 176 } else { 144 };
    let mut acc = [0f32; 32];
    let mut mins = 0f32;
    for ((blk, xb), sx) in row
        .chunks_exact(bb)
        .zip(x.chunks_exact(QK_K))
        .zip(xsum.chunks_exact(QK_K / QK))
    {
        let (d, dmin) = (scale(blk, 0), scale(blk, 2));
        let sc = &blk[4..16];
        // Q4_K has no `qh` (the bytes read there are its nibbles, unused when `!hbits`).
        let (qh, qs) = (&blk[16..48], &blk[bb - 128..bb]);
        for g in 0..4 {
            let (s1, m1) = scale_min_k4(2 * g, sc);
            let (s2, m2) = scale_min_k4(2 * g + 1, sc);
            let (d1, d2) = (d * s1 as f32, d * s2 as f32);
            mins += dmin * (m1 as f32 * sx[2 * g] + m2 as f32 * sx[2 * g + 1]);
            let q: &[u8; 32] = qs[32 * g..32 * g + 32].try_into().expect("32 bytes");
            let h: &[u8; 32] = qh.try_into().expect("32 bytes");
            let xl: &[f32; 32] = xb[64 * g..64 * g + 32].try_into().expect("32 values");
            let xh: &[f32; 32] = xb[64 * g + 32..64 * g + 64].try_into().expect("32 values");
            for l in 0..32 {
                let (mut a, mut b) = (q[l] & 0x0f, q[l] >> 4);
                if hbits {
                    a |= ((h[l] >> (2 * g)) & 1) << 4;
                    b |= ((h[l] >> (2 * g + 1)) & 1) << 4;
                }
                acc[l] += d1 * (a as f32 * xl[l]) + d2 * (b as f32 * xh[l]);
            }
        }
    }
    acc.iter().sum::<f32>() - mins
}

/// $\langle w, x\rangle$ for one Q6_K row (blocks of 210 bytes: 128 of low nibbles, 64 of high
/// bit pairs, 16 int8 scales, $d$). Each half block holds four runs of 32 values at offsets
/// 0, 32, 64, 96 sharing their byte index `l`, the scale changing every 16 values; the 16 lanes
/// of `acc` run over `l mod 16`.
#[inline(always)]
fn dot_q6_k(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (blk, xb) in row.chunks_exact(210).zip(x.chunks_exact(QK_K)) {
        let d = scale(blk, 208);
        for n in 0..2 {
            let ql = &blk[64 * n..64 * n + 64];
            let qh = &blk[128 + 32 * n..128 + 32 * n + 32];
            let sc = &blk[192 + 8 * n..192 + 8 * n + 8];
            let xn = &xb[128 * n..128 * n + 128];
            for half in 0..2 {
                let s = |k: usize| d * (sc[half + 2 * k] as i8) as f32;
                let (s0, s1, s2, s3) = (s(0), s(1), s(2), s(3));
                let o = 16 * half;
                let lo: &[u8; 16] = ql[o..o + 16].try_into().expect("16 bytes");
                let lo2: &[u8; 16] = ql[o + 32..o + 48].try_into().expect("16 bytes");
                let hi: &[u8; 16] = qh[o..o + 16].try_into().expect("16 bytes");
                let x0: &[f32; 16] = xn[o..o + 16].try_into().expect("16 values");
                let x1: &[f32; 16] = xn[o + 32..o + 48].try_into().expect("16 values");
                let x2: &[f32; 16] = xn[o + 64..o + 80].try_into().expect("16 values");
                let x3: &[f32; 16] = xn[o + 96..o + 112].try_into().expect("16 values");
                for j in 0..16 {
                    let q1 = ((lo[j] & 0xf) | ((hi[j] & 3) << 4)) as i32 - 32;
                    let q2 = ((lo2[j] & 0xf) | (((hi[j] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((lo[j] >> 4) | (((hi[j] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((lo2[j] >> 4) | (((hi[j] >> 6) & 3) << 4)) as i32 - 32;
                    acc[j] += s0 * (q1 as f32 * x0[j])
                        + s1 * (q2 as f32 * x1[j])
                        + s2 * (q3 as f32 * x2[j])
                        + s3 * (q4 as f32 * x3[j]);
                }
            }
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
            let si = &xsum[i * nb..(i + 1) * nb];
            // The K-quants only: the simple types take [`simple_rows`].
            *oi = match dt {
                GgmlDType::Q6K => dot_q6_k(row, xi),
                GgmlDType::Q5K => dot_q45_k(row, xi, si, true),
                _ => dot_q45_k(row, xi, si, false),
            };
        }
    }
}

/// `x Wᵀ` as a row-major `[rows, t]` matrix (transposed, free for `t = 1`) for a Q8_0, Q4_1,
/// Q5_0, Q4_K, Q5_K or Q6_K `W` stored as `bytes`; `None` for another type, a width that is not
/// whole blocks, or more
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
    let block_bytes = super::dequant::block_bytes(dt)?;
    let per = super::dequant::block_values(dt);
    if t == 0 || t > MAX_ROWS || !cols.is_multiple_of(per) || x.len() != t * cols {
        return None;
    }
    let row_bytes = cols / per * block_bytes;
    if bytes.len() != rows * row_bytes {
        return None;
    }
    let xsum: Vec<f32> = x.chunks_exact(QK).map(|b| b.iter().sum()).collect();
    let mut out = vec![0f32; rows * t];
    let (simple, fast) = (Simple::of(dt), has_fma());
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
        match simple {
            Some(kind) => simple_rows(kind, fast, w, row_bytes, a, o),
            None => rows_block(dt, w, row_bytes, a, o),
        }
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
    use crate::quant::dequant::{block_bytes, block_values};
    use half::f16;

    /// Byte offsets of the f16 scale (first) and, where the type has one, the f16 minimum.
    fn scale_at(dt: GgmlDType) -> &'static [usize] {
        match dt {
            GgmlDType::Q4_1 | GgmlDType::Q4K | GgmlDType::Q5K => &[0, 2],
            GgmlDType::Q6K => &[208],
            _ => &[0],
        }
    }

    /// Random but valid block bytes (finite f16 scales in ±0.05, any quants), seeded.
    fn blocks(dt: GgmlDType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let bb = block_bytes(dt).unwrap();
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let mut out = Vec::new();
        for _ in 0..rows * cols / block_values(dt) {
            let mut b = vec![0u8; bb];
            for v in b.iter_mut() {
                *v = next() as u8;
            }
            for &at in scale_at(dt) {
                let v = (next() % 2000) as f32 / 2000.0 * 0.1 - 0.05;
                b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
            }
            out.extend(b);
        }
        out
    }

    /// candle's own `to_float` of the blocks (the reference decoder).
    fn candle_decode(dt: GgmlDType, w: &[u8], out: &mut [f32]) {
        use candle_core::quantized::k_quants::*;
        fn go<B: GgmlType>(w: &[u8], out: &mut [f32]) {
            let blocks: Vec<B> = w
                .chunks_exact(std::mem::size_of::<B>())
                // SAFETY: candle's block types are plain old data of exactly this many bytes.
                .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const B) })
                .collect();
            B::to_float(&blocks, out);
        }
        match dt {
            GgmlDType::Q8_0 => go::<BlockQ8_0>(w, out),
            GgmlDType::Q4_1 => go::<BlockQ4_1>(w, out),
            GgmlDType::Q5_0 => go::<BlockQ5_0>(w, out),
            GgmlDType::Q4K => go::<BlockQ4K>(w, out),
            GgmlDType::Q5K => go::<BlockQ5K>(w, out),
            GgmlDType::Q6K => go::<BlockQ6K>(w, out),
            _ => unreachable!(),
        }
    }

    /// The AVX2 + FMA kernel gives the portable kernel's bits for every simple type, on rows
    /// whose block count is not a multiple of four (the remainder path) and is.
    #[test]
    fn simple_kernels_give_the_same_bits() {
        if !has_fma() {
            eprintln!("SKIP: this CPU lacks AVX2 or FMA; only the portable kernel runs");
            return;
        }
        for (dt, kind) in [
            (GgmlDType::Q8_0, Simple::Q8_0),
            (GgmlDType::Q4_1, Simple::Q4_1),
            (GgmlDType::Q5_0, Simple::Q5_0),
        ] {
            // Remainders of 1, 2, 3 and 0 blocks after the quads.
            for cols in [32 * 5, 32 * 6, 32 * 7, 32 * 16] {
                let w = blocks(dt, 3, cols, 11);
                let x: Vec<f32> = (0..cols)
                    .map(|k| ((k * 53 % 97) as f32 - 48.0) / 7.0)
                    .collect();
                let xsum: Vec<f32> = x.chunks_exact(QK).map(|b| b.iter().sum()).collect();
                let rb = w.len() / 3;
                for r in 0..3 {
                    let row = &w[r * rb..(r + 1) * rb];
                    let a = simple_dot(kind, true, row, &x, &xsum);
                    let b = simple_dot(kind, false, row, &x, &xsum);
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{dt:?} cols {cols} row {r}: {a} vs {b}"
                    );
                }
            }
        }
    }

    /// Against dequantize-then-multiply with candle's own `to_float` and an f64 dot product:
    /// each output within the f32 rounding of its terms. A lane accumulates at most `cols / 16`
    /// terms (Q6_K: 16 lanes, 4 products a value index and half block), each product of a quant,
    /// a value and a scale rounds twice, the lanes are summed (≤ 32 additions) and the minima's
    /// running sum adds `cols / 32`: within $(2\cdot 32 + \mathrm{cols}/32 + 4)\thinspace 2u$
    /// times the magnitude. For the types with a minimum the fused kernel sums its two parts
    /// separately, so the magnitude is $\sum_j (|d_k q_j x_j| + |m_k x_j|)$ (computed by decoding
    /// the blocks once more with the minimum set to zero), else $\sum_j |w_j x_j|$.
    #[test]
    fn fused_products_equal_dequantize_then_multiply() {
        for dt in [
            GgmlDType::Q8_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
        ] {
            let (rows, cols) = (130, if block_values(dt) == 256 { 768 } else { 576 });
            let w = blocks(dt, rows, cols, 7);
            let mut deq = vec![0f32; rows * cols];
            candle_decode(dt, &w, &mut deq);
            // The scale part alone (minimum zeroed): |w − scaled| is the minimum's part.
            let mut scaled = deq.clone();
            if let [_, at_min] = scale_at(dt) {
                let bb = block_bytes(dt).unwrap();
                let mut w0 = w.clone();
                for b in w0.chunks_exact_mut(bb) {
                    b[*at_min..at_min + 2].fill(0);
                }
                candle_decode(dt, &w0, &mut scaled);
            }
            for t in 1..=MAX_ROWS {
                let x: Vec<f32> = (0..t * cols)
                    .map(|k| ((k * 37 % 101) as f32 - 50.0) / 25.0)
                    .collect();
                for par in [false, true] {
                    let got = matmul_t_rows(dt, &w, rows, cols, &x, t, par).unwrap();
                    for r in 0..rows {
                        for i in 0..t {
                            let span = r * cols..(r + 1) * cols;
                            let (wr, sr) = (&deq[span.clone()], &scaled[span]);
                            let xi = &x[i * cols..(i + 1) * cols];
                            let want: f64 =
                                wr.iter().zip(xi).map(|(&a, &b)| a as f64 * b as f64).sum();
                            let mag: f64 = wr
                                .iter()
                                .zip(sr)
                                .zip(xi)
                                .map(|((&a, &s), &b)| {
                                    let (a, s, b) = (a as f64, s as f64, b as f64);
                                    (s * b).abs() + ((a - s) * b).abs()
                                })
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
        assert!(matmul_t_rows(GgmlDType::Q5_1, &[0; 24], 1, 32, &[0.0; 32], 1, false).is_none());
        assert!(matmul_t_rows(GgmlDType::Q4K, &[0; 144], 1, 128, &[0.0; 128], 1, false).is_none());
        assert!(matmul_t_rows(GgmlDType::Q8_0, &[0; 34], 1, 32, &[0.0; 160], 5, false).is_none());
    }
}
