//! MXFP4 blocks (the OCP microscaling format with 4-bit elements): 32 values share one E8M0
//! scale byte $E$, the power of two $2^{E - 127}$, and each value is a 4-bit E2M1 code $q$
//! (sign bit, two exponent bits, one mantissa bit) of magnitude in
//! $\lbrace 0, \tfrac12, 1, \tfrac32, 2, 3, 4, 6\rbrace$:
//! $$w_j = \mathrm{e2m1}(q_j)\cdot 2^{E-127} = K[q_j]\cdot 2^{E-128},$$
//! $K$ = [`KVALUES`] the E2M1 values doubled to integers (ggml's `kvalues_mxfp4`) and
//! $2^{E-128}$ = [`scale_half`] the scale halved (ggml's `GGML_E8M0_TO_FP32_HALF`, a subnormal
//! for $E \le 1$). Each $w_j$ is one f32 product of an integer and a power of two, exact unless
//! it overflows (only for $E \ge 253$ and large codes: [`block_is_finite`]).
//!
//! Two packings of a row of $32 n$ values ([`Packing`]):
//! - **ggml** (GGUF type 39, `block_mxfp4`): $n$ blocks of 17 bytes, the scale byte then 16
//!   code bytes; value $j < 16$ of a block is the low nibble of code byte $j$, value $j + 16$
//!   its high nibble;
//! - **split** (OpenAI's gpt-oss checkpoints, Hugging Face `*_blocks` / `*_scales`): the row's
//!   $n$ scale bytes in one tensor and its $16 n$ code bytes in another; value $2j$ of a block
//!   is the low nibble of code byte $j$, value $2j + 1$ its high nibble.
//!
//! The products read these bytes as stored: [`crate::runtime::weights::StoredMatrix`] decodes
//! rows of them into f32 tiles for the exact product.

/// E2M1 values doubled, indexed by the 4-bit code (bit 3 the sign): ggml's `kvalues_mxfp4`.
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Bytes of one ggml block: the scale byte and 16 code bytes.
pub const GGML_BLOCK_BYTES: usize = 17;

/// Values per block.
pub const BLOCK: usize = 32;

/// How a row's scales and codes are laid out (module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    /// ggml's `block_mxfp4`: scale byte then 16 code bytes; low nibbles are values 0..16.
    Ggml,
    /// Scales and codes in separate tensors; low nibbles are the even values.
    Split,
}

/// $2^{E-128}$, the E8M0 scale $2^{E-127}$ halved, with ggml's bits: a normal number
/// `(E − 1) << 23` for $E \ge 2$, the subnormal `0x00200000 << E` below.
#[inline(always)]
pub fn scale_half(e: u8) -> f32 {
    let e = e as u32;
    f32::from_bits(if e < 2 {
        0x0020_0000 << e
    } else {
        (e - 1) << 23
    })
}

/// The 16 values a block of scale `e` can hold, $K[q]\cdot 2^{E-128}$ for each code $q$.
#[inline(always)]
fn table(e: u8) -> [f32; 16] {
    let d = scale_half(e);
    KVALUES.map(|k| k as f32 * d)
}

/// Decodes a row of ggml blocks (`blocks.len() = 17 · out.len() / 32`) into `out`.
pub fn decode_ggml(blocks: &[u8], out: &mut [f32]) {
    assert_eq!(
        blocks.len() * BLOCK,
        out.len() * GGML_BLOCK_BYTES,
        "MXFP4 row length"
    );
    for (b, o) in blocks
        .chunks_exact(GGML_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(BLOCK))
    {
        let t = table(b[0]);
        let (lo, hi) = o.split_at_mut(16);
        for ((&q, l), h) in b[1..].iter().zip(lo).zip(hi) {
            *l = t[(q & 0x0f) as usize];
            *h = t[(q >> 4) as usize];
        }
    }
}

/// Decodes a row of split blocks (`scales.len() = out.len() / 32`, `codes.len() = out.len()
/// / 2`) into `out`.
pub fn decode_split(scales: &[u8], codes: &[u8], out: &mut [f32]) {
    assert!(
        scales.len() * BLOCK == out.len() && codes.len() * 2 == out.len(),
        "MXFP4 row length"
    );
    for ((&e, c), o) in scales
        .iter()
        .zip(codes.chunks_exact(16))
        .zip(out.chunks_exact_mut(BLOCK))
    {
        let t = table(e);
        for (&q, pair) in c.iter().zip(o.chunks_exact_mut(2)) {
            pair[0] = t[(q & 0x0f) as usize];
            pair[1] = t[(q >> 4) as usize];
        }
    }
}

/// Whether every value of a block of scale `e` and 16 code bytes `codes` is finite in f32
/// (the largest magnitude among its codes times the scale does not overflow).
pub fn block_is_finite(e: u8, codes: &[u8]) -> bool {
    let m = codes
        .iter()
        .flat_map(|&q| [q & 0x0f, q >> 4])
        .map(|q| KVALUES[q as usize].unsigned_abs())
        .max()
        .unwrap_or(0);
    (m as f32 * scale_half(e)).is_finite()
}

/// Codes the 32 values of `x` as a ggml block ([`Packing::Ggml`]) with ggml's reference rule
/// (`quantize_row_mxfp4_ref`, the OCP spec's shared exponent): $E = \lfloor\log_2 \max_j
/// |x_j|\rfloor - 2 + 127$ (0 for an all-zero block; the floor taken from the f32 exponent
/// bits, exactly), so the largest magnitude lies in $[4, 8)\cdot 2^{E-127}$ and magnitudes above
/// $6 \cdot 2^{E-127}$ saturate; each value takes the nearest of the block's 16 values (the
/// first on a tie, as ggml's `best_index_mxfp4`).
pub fn quantize_block_ggml(x: &[f32]) -> [u8; GGML_BLOCK_BYTES] {
    assert_eq!(x.len(), BLOCK, "an MXFP4 block has 32 values");
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let e = if amax > 0.0 && amax.is_finite() {
        // floor(log2 amax): the unbiased exponent of a normal, from the bits of a subnormal.
        let bits = amax.to_bits();
        let fl = match bits >> 23 {
            0 => -149 + (31 - bits.leading_zeros() as i32),
            b => b as i32 - 127,
        };
        (fl - 2 + 127).clamp(0, 255) as u8
    } else {
        0
    };
    let t = table(e);
    let code = |v: f32| -> u8 {
        let mut best = 0;
        for (q, &w) in t.iter().enumerate() {
            if (w - v).abs() < (t[best] - v).abs() {
                best = q;
            }
        }
        best as u8
    };
    let mut b = [0u8; GGML_BLOCK_BYTES];
    b[0] = e;
    for j in 0..16 {
        b[1 + j] = code(x[j]) | (code(x[j + 16]) << 4);
    }
    b
}

/// A ggml block's bytes rewritten in the split packing: (scale, 16 code bytes).
pub fn ggml_to_split(block: &[u8]) -> (u8, [u8; 16]) {
    assert_eq!(
        block.len(),
        GGML_BLOCK_BYTES,
        "an MXFP4 ggml block is 17 bytes"
    );
    let q = |j: usize| {
        let b = block[1 + j % 16];
        if j < 16 { b & 0x0f } else { b >> 4 }
    };
    let mut c = [0u8; 16];
    for (j, v) in c.iter_mut().enumerate() {
        *v = q(2 * j) | (q(2 * j + 1) << 4);
    }
    (block[0], c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng, rngs::StdRng};

    /// E2M1 from its bit fields (OCP MX spec §5.3.3): sign s, exponent e (bias 1), mantissa m;
    /// $e = 0$: $(-1)^s \cdot m/2$, else $(-1)^s 2^{e-1}(1 + m/2)$.
    fn e2m1(q: u8) -> f64 {
        let (s, e, m) = (q >> 3, (q >> 1) & 3, q & 1);
        let mag = if e == 0 {
            m as f64 * 0.5
        } else {
            2f64.powi(e as i32 - 1) * (1.0 + m as f64 / 2.0)
        };
        if s == 1 { -mag } else { mag }
    }

    /// E8M0 from its definition: $2^{E - 127}$.
    fn e8m0(e: u8) -> f64 {
        2f64.powi(e as i32 - 127)
    }

    #[test]
    fn table_and_scale_follow_the_bit_fields() {
        for q in 0..16u8 {
            assert_eq!(KVALUES[q as usize] as f64, 2.0 * e2m1(q), "code {q}");
        }
        for e in 0..=255u8 {
            assert_eq!(scale_half(e) as f64, e8m0(e) / 2.0, "scale {e}");
        }
    }

    /// Hand-made blocks: the value at each position, computed from the spec and the packing's
    /// nibble order, against both decoders.
    #[test]
    fn hand_made_blocks_decode_to_the_spec_values() {
        let mut rng = StdRng::seed_from_u64(91);
        for &e in &[0u8, 1, 2, 100, 127, 130, 200, 250] {
            let codes: Vec<u8> = (0..32).map(|_| rng.random_range(0..16u8)).collect();
            let want: Vec<f64> = codes.iter().map(|&q| e2m1(q) * e8m0(e)).collect();
            // ggml: byte j holds values j (low) and j + 16 (high).
            let mut g = vec![e];
            g.extend((0..16).map(|j| codes[j] | (codes[j + 16] << 4)));
            let mut out = vec![0f32; 32];
            decode_ggml(&g, &mut out);
            for j in 0..32 {
                assert_eq!(out[j] as f64, want[j], "ggml e {e} value {j}");
            }
            // split: byte j holds values 2j (low) and 2j + 1 (high).
            let c: Vec<u8> = (0..16)
                .map(|j| codes[2 * j] | (codes[2 * j + 1] << 4))
                .collect();
            let mut out2 = vec![0f32; 32];
            decode_split(&[e], &c, &mut out2);
            for j in 0..32 {
                assert_eq!(out2[j] as f64, want[j], "split e {e} value {j}");
            }
            let (se, sc) = ggml_to_split(&g);
            assert_eq!((se, sc.to_vec()), (e, c), "repacking e {e}");
        }
        // A fixed block written out by hand: scale 2^0, codes 0..15 then 15..0 (ggml order).
        let mut g = vec![127u8];
        g.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let mut out = vec![0f32; 32];
        decode_ggml(&g, &mut out);
        let first = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        for j in 0..8 {
            assert_eq!(out[j], first[j]);
            assert_eq!(out[8 + j], -first[j]);
            assert_eq!(out[31 - j], first[j]);
        }
    }

    #[test]
    fn overflow_only_at_the_top_scales() {
        // K · 2^{E-128} is finite iff K < 2^{256-E}: every code below E = 253, K ≤ 6 at 253,
        // K ≤ 3 at 254, K ≤ 1 at 255 (f32's largest finite value is just below 2^128).
        for (e, byte, finite) in [
            (252u8, 0x77u8, true),
            (253, 0x77, false),
            (253, 0x55, true),
            (254, 0x44, false),
            (254, 0x33, true),
            (255, 0x22, false),
            (255, 0x11, true),
            (255, 0x00, true),
        ] {
            assert_eq!(
                block_is_finite(e, &[byte; 16]),
                finite,
                "E {e} byte {byte:#x}"
            );
            let mut out = vec![0f32; 32];
            let mut b = vec![e];
            b.extend([byte; 16]);
            decode_ggml(&b, &mut out);
            assert_eq!(
                out.iter().all(|v| v.is_finite()),
                finite,
                "E {e} byte {byte:#x}"
            );
        }
        let mut out = vec![0f32; 32];
        let mut b = vec![254u8];
        b.extend([0x70u8; 16]);
        decode_ggml(&b, &mut out);
        assert!(out[16].is_infinite() && out[0] == 0.0);
    }

    /// Quantizing: the shared exponent puts the largest magnitude in [4, 8) · X, X = 2^{E-127};
    /// a value of magnitude ≤ 6X lands within half the widest grid gap (2X) of itself, a larger
    /// one saturates to ±6X; a decoded block quantizes to itself.
    #[test]
    fn quantize_rounds_to_the_nearest_grid_value() {
        let mut rng = StdRng::seed_from_u64(5);
        for _ in 0..200 {
            let s = 2f32.powi(rng.random_range(-20..20));
            let x: Vec<f32> = (0..32)
                .map(|_| s * (rng.random::<f32>() * 2.0 - 1.0))
                .collect();
            let b = quantize_block_ggml(&x);
            let mut y = vec![0f32; 32];
            decode_ggml(&b, &mut y);
            let xs = e8m0(b[0]);
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            assert!(
                amax >= 4.0 * xs && amax < 8.0 * xs,
                "amax {amax} scale {xs}"
            );
            for (&a, &q) in x.iter().zip(&y) {
                let (a, q) = (a as f64, q as f64);
                if a.abs() <= 6.0 * xs {
                    assert!((a - q).abs() <= xs * (1.0 + 1e-6), "{a} → {q}");
                } else {
                    assert_eq!(q, 6.0 * xs * a.signum(), "{a} saturates");
                }
            }
            assert_eq!(quantize_block_ggml(&y), b);
        }
        assert_eq!(quantize_block_ggml(&[0.0; 32]), [0u8; 17]);
    }
}
