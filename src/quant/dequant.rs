//! Dequantization of ggml blocks to f32, the step before the tiled exact product of many
//! activation rows (prefill, capture: [`crate::runtime::weights::StoredMatrix::matmul_t`]). With block
//! scale $d$ and minimum $m$ (f16), sub-block scales $s_k$ and minima $m_k$ (6-bit, K-quants) and
//! integer quants $q_j$:
//! - Q8_0: $w_j = q_j d$ ($q_j$ int8, blocks of 32);
//! - Q4_1: $w_j = q_j d + m$ ($q_j \in 0..16$);
//! - Q5_0: $w_j = (q_j - 16) d$ ($q_j \in 0..32$, fifth bit from the word `qh`);
//! - Q4_K: $w_j = (d s_k) q_j - d_{\min} m_k$ over 8 sub-blocks of 32 in a block of 256;
//! - Q5_K: $w_j = (d s_k) q_j - d_{\min} m_k$ as Q4_K, $q_j \in 0..32$ (fifth bit from `qh`);
//! - Q6_K: $w_j = (d s_k) (q_j - 32)$, 16 sub-blocks of 16, $s_k$ int8, $q_j$ 6-bit.
//!
//! Each value is computed with the same f32 operations in the same order as candle's
//! `to_float` (the reference, and the path for every other block type), so the result is the
//! same bits; the f16 scales are converted by [`f16_to_f32`] (exact, branch-light, inlined).
//! The loops are dispatched at run time to AVX-512F, AVX2 or the baseline
//! ([`crate::backend::simd`]). Measured (perf of `sinklab secondary --dose-response` on
//! SmolLM2, Q4_1): candle's `to_float` and its per-block f16 conversion took 78 % of the time.

use candle_core::quantized::GgmlDType;

/// The exact f32 value of the IEEE binary16 number with bits `h` (normals, subnormals, zeros,
/// infinities, NaNs with their payload shifted as a widening conversion does).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x03ff) as u32;
    let bits = if exp == 0x1f {
        sign | 0x7f80_0000 | (man << 13)
    } else if exp != 0 {
        sign | ((exp + 112) << 23) | (man << 13)
    } else if man == 0 {
        sign
    } else {
        // Subnormal: man · 2^-24, exact in f32.
        let v = man as f32 * f32::from_bits(0x3380_0000);
        return if sign != 0 { -v } else { v };
    };
    f32::from_bits(bits)
}

/// [`f16_to_f32`] without branches, for loops over many scales that the compiler vectorises:
/// the magnitude's bits moved into an f32's exponent and mantissa fields and scaled by
/// $2^{112}$ (the difference of the exponent biases; exact for normals and subnormals, which
/// become f32 normals), infinities and NaNs selected apart, the sign put back. The same bits as
/// [`f16_to_f32`] on every input (tested on all 65 536).
#[inline(always)]
pub fn f16_to_f32_lanes(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let mag = h & 0x7fff;
    let finite = f32::from_bits(mag << 13) * f32::from_bits(0x7780_0000);
    let special = f32::from_bits(0x7f80_0000 | ((h & 0x03ff) << 13));
    let v = if mag >= 0x7c00 { special } else { finite };
    f32::from_bits(v.to_bits() | sign)
}

/// The f16 at byte `at` of a block, as f32.
#[inline(always)]
pub(super) fn half(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Bytes per block of the types this module decodes (`None`: another type).
pub fn block_bytes(dt: GgmlDType) -> Option<usize> {
    Some(match dt {
        GgmlDType::Q8_0 => 34,
        GgmlDType::Q4_1 => 20,
        GgmlDType::Q5_0 => 22,
        GgmlDType::Q4K => 144,
        GgmlDType::Q5K => 176,
        GgmlDType::Q6K => 210,
        _ => return None,
    })
}

/// Values per block: 256 for the K-quants, 32 for the others.
pub fn block_values(dt: GgmlDType) -> usize {
    if matches!(dt, GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K) {
        256
    } else {
        32
    }
}

/// Decodes the blocks of `bytes` into `out` (`out.len()` values: 32 per block of Q8_0, Q4_1,
/// Q5_0, 256 per block of Q4_K, Q5_K, Q6_K); `false` (and `out` untouched) for another type or
/// lengths that do not match.
pub fn to_f32(dt: GgmlDType, bytes: &[u8], out: &mut [f32]) -> bool {
    let Some(bb) = block_bytes(dt) else {
        return false;
    };
    let per = block_values(dt);
    if !bytes.len().is_multiple_of(bb) || bytes.len() / bb * per != out.len() {
        return false;
    }
    decode(dt, bytes, out);
    true
}

fn decode(dt: GgmlDType, bytes: &[u8], out: &mut [f32]) {
    crate::backend::simd::dispatch!(decode(dt: GgmlDType, bytes: &[u8], out: &mut [f32]) -> () = decode_loop(dt, bytes, out))
}

#[inline(always)]
fn decode_loop(dt: GgmlDType, bytes: &[u8], out: &mut [f32]) {
    match dt {
        GgmlDType::Q8_0 => {
            for (b, y) in bytes.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
                let d = half(b, 0);
                for (yj, &q) in y.iter_mut().zip(&b[2..34]) {
                    *yj = q as i8 as f32 * d;
                }
            }
        }
        GgmlDType::Q4_1 => {
            for (b, y) in bytes.chunks_exact(20).zip(out.chunks_exact_mut(32)) {
                let (d, m) = (half(b, 0), half(b, 2));
                let (lo, hi) = y.split_at_mut(16);
                for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[4..20]) {
                    *l = (q & 0x0f) as f32 * d + m;
                    *h = (q >> 4) as f32 * d + m;
                }
            }
        }
        GgmlDType::Q5_0 => {
            for (b, y) in bytes.chunks_exact(22).zip(out.chunks_exact_mut(32)) {
                let d = half(b, 0);
                let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                let (lo, hi) = y.split_at_mut(16);
                for (j, ((l, h), &q)) in lo.iter_mut().zip(hi).zip(&b[6..22]).enumerate() {
                    let x0 = ((q & 0x0f) as u32 | ((qh >> j) & 1) << 4) as i32 - 16;
                    let x1 = ((q >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4) as i32 - 16;
                    *l = x0 as f32 * d;
                    *h = x1 as f32 * d;
                }
            }
        }
        GgmlDType::Q4K => decode_q45_k(bytes, out, false),
        GgmlDType::Q5K => decode_q45_k(bytes, out, true),
        GgmlDType::Q6K => {
            // 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales, d.
            for (b, y) in bytes.chunks_exact(210).zip(out.chunks_exact_mut(256)) {
                let d = half(b, 208);
                for (n, yn) in y.chunks_exact_mut(128).enumerate() {
                    let ql = &b[64 * n..64 * n + 64];
                    let qh = &b[128 + 32 * n..128 + 32 * n + 32];
                    let sc = &b[192 + 8 * n..192 + 8 * n + 8];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i8 - 32;
                        let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                        yn[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                        yn[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                        yn[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                        yn[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                    }
                }
            }
        }
        _ => unreachable!("block_bytes admits only the types above"),
    }
}

/// Q4_K (`hbits` false; blocks of 144 bytes: $d$, $d_{\min}$, 12 bytes of packed 6-bit scales
/// and minima, 128 of nibbles) or Q5_K (`hbits` true; 176 bytes: the same with 32 bytes of
/// fifth bits `qh` before the nibbles), value by value as candle computes it.
#[inline(always)]
fn decode_q45_k(bytes: &[u8], out: &mut [f32], hbits: bool) {
    let bb = if hbits { 176 } else { 144 };
    for (b, y) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(256)) {
        let (d, dmin) = (half(b, 0), half(b, 2));
        let sc = &b[4..16];
        // Q4_K has no `qh` (the bytes read there are its nibbles, unused when `!hbits`).
        let (qh, qs) = (&b[16..48], &b[bb - 128..bb]);
        for (g, yg) in y.chunks_exact_mut(64).enumerate() {
            let q = &qs[32 * g..32 * g + 32];
            let (s1, m1) = scale_min_k4(2 * g, sc);
            let (s2, m2) = scale_min_k4(2 * g + 1, sc);
            let (d1, n1) = (d * s1 as f32, dmin * m1 as f32);
            let (d2, n2) = (d * s2 as f32, dmin * m2 as f32);
            let (lo, hi) = yg.split_at_mut(32);
            for (((l, h), &qq), &hb) in lo.iter_mut().zip(hi).zip(q).zip(qh) {
                let (mut a, mut c) = (qq & 0x0f, qq >> 4);
                if hbits {
                    a |= ((hb >> (2 * g)) & 1) << 4;
                    c |= ((hb >> (2 * g + 1)) & 1) << 4;
                }
                *l = d1 * a as f32 - n1;
                *h = d2 * c as f32 - n2;
            }
        }
    }
}

/// Sub-block `j` (0..8) of a K-quant block's 12 packed bytes: its 6-bit scale and minimum
/// (the first four stored whole in the low six bits, the last four split into a nibble and the
/// two high bits of the first eight bytes).
#[inline(always)]
pub(super) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::k_quants::{
        BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5K, BlockQ6K, BlockQ8_0, GgmlType,
    };
    use rand::{RngExt, SeedableRng, rngs::StdRng};

    #[test]
    fn f16_conversion_is_exact_on_every_value() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
            assert_eq!(f16_to_f32_lanes(h).to_bits(), got.to_bits(), "{h:#06x}");
        }
    }

    /// Random blocks (finite f16 scales, every other byte uniform), decoded here and by candle.
    fn same_bits<B: GgmlType>(dt: GgmlDType, scale_at: &[usize], seed: u64) {
        let bb = block_bytes(dt).unwrap();
        assert_eq!(bb, std::mem::size_of::<B>());
        let per = B::BLCK_SIZE;
        let n = 37;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut bytes: Vec<u8> = (0..n * bb).map(|_| rng.random::<u8>()).collect();
        for blk in bytes.chunks_exact_mut(bb) {
            for &at in scale_at {
                // A finite f16 (exponent field not all ones), subnormals included.
                let h: u16 = rng.random::<u16>() & 0xbfff;
                blk[at..at + 2].copy_from_slice(&h.to_le_bytes());
            }
        }
        let mut got = vec![0f32; n * per];
        assert!(to_f32(dt, &bytes, &mut got));
        let blocks: Vec<B> = bytes
            .chunks_exact(bb)
            .map(|c| {
                // SAFETY: candle's block types are plain old data of exactly `bb` bytes.
                unsafe { std::ptr::read_unaligned(c.as_ptr() as *const B) }
            })
            .collect();
        let mut want = vec![0f32; n * per];
        B::to_float(&blocks, &mut want);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{dt:?} value {i}: {g} vs {w}");
        }
    }

    #[test]
    fn decoding_matches_candle_bit_for_bit() {
        same_bits::<BlockQ8_0>(GgmlDType::Q8_0, &[0], 1);
        same_bits::<BlockQ4_1>(GgmlDType::Q4_1, &[0, 2], 2);
        same_bits::<BlockQ5_0>(GgmlDType::Q5_0, &[0], 3);
        same_bits::<BlockQ4K>(GgmlDType::Q4K, &[0, 2], 4);
        same_bits::<BlockQ6K>(GgmlDType::Q6K, &[208], 5);
        same_bits::<BlockQ5K>(GgmlDType::Q5K, &[0, 2], 6);
    }

    #[test]
    fn other_types_and_bad_lengths_are_left_to_the_caller() {
        let mut out = vec![7f32; 32];
        assert!(!to_f32(GgmlDType::Q5_1, &[0u8; 24], &mut out));
        assert!(!to_f32(GgmlDType::Q8_0, &[0u8; 33], &mut out));
        assert!(out.iter().all(|&x| x == 7.0));
    }
}
