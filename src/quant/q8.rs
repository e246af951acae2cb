//! The q8 product ([`crate::runtime::weights::Matmul::Q8`]): llama.cpp's arithmetic for quantized
//! weights. Each activation row is quantized once per product to 8 bits per block, then every
//! weight block meets its activation block in an integer dot product.
//!
//! Activation blocks of 32 values (Q8_0, and Q8_1 with its sum), as ggml's reference
//! `quantize_row_q8_0` / `quantize_row_q8_1` define them: with $a = \max_j |x_j|$,
//! $\delta = a/127$ (stored as f16: $\hat\delta$) and $q_j = \mathrm{round}(x_j/\delta)$ (half
//! away from zero, $q_j \in -127..127$); Q8_1 also stores $s = \mathrm{f16}(\delta\sum_j q_j)$.
//! A weight block with scale $d$ (f16), minimum $m$ (f16, Q4_1/Q5_1) and integer quants $v_j$
//! then gives
//! - Q4_0 ($v_j = n_j - 8$), Q5_0 ($v_j = n_j - 16$), Q8_0 ($v_j$ int8), all against Q8_0:
//!   $\langle w_b, x_b\rangle \approx (d\hat\delta)\sum_j v_j q_j$;
//! - Q4_1 ($v_j = n_j$), Q5_1 ($v_j = n_j$, fifth bit from `qh`), against Q8_1:
//!   $\langle w_b, x_b\rangle \approx (d\hat\delta)\sum_j v_j q_j + m\thinspace s$;
//!
//! the integer sums exact, the rest in f32. The K-quants (Q2_K … Q6_K) meet Q8_K activation
//! blocks of 256 through candle's `vec_dot` (AVX2 where the CPU has it, detected by candle).
//!
//! Summation order: the 32 products of a block are summed in 8 integer lanes (lane $l$ holds
//! values $4l … 4l+3$, the layout of AVX2's `maddubs`/`madd`), each lane scaled by $d\hat\delta$
//! and added to lane $l$ of accumulator $b \bmod 4$ (four independent chains of f32 additions);
//! at the end the accumulators are combined lane by lane and the lanes summed as a tree, and the
//! minima's terms (block $b$'s in running sum $b \bmod 16$) are summed as a tree and added. The AVX2 kernel, the AVX-512 VNNI ones (prefill: two blocks a register,
//! several activation rows per decoded block; generation: one block a 256-bit register, the
//! fifth bits as a masked add) and the portable one do the same f32
//! operations in the same order on the same exact integers, so they give the same bits (tested).
//! llama.cpp sums in another order (and with fused multiply-adds): its products equal these up
//! to f32 rounding, and the check that matters for the mode is that greedy generation gives
//! llama.cpp's token ids (`scripts/bench_engine.sh`).

use candle_core::quantized::GgmlDType;
use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8_1, BlockQ8K, GgmlType,
};
use rayon::prelude::*;

use super::dequant::f16_to_f32_lanes;

/// Values per activation block of Q8_0 / Q8_1 (and per weight block of the simple types).
pub const QK: usize = 32;

/// Weight rows a parallel task computes (each row's bytes read once for all activation rows).
const ROWS: usize = 64;

/// The block types with 32 values a block, whose integer dots this module computes itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Simple {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
}

impl Simple {
    /// The kind with code `k` (the const parameter the kernels are compiled for).
    #[inline(always)]
    pub(super) const fn from_code(k: u8) -> Self {
        match k {
            0 => Simple::Q4_0,
            1 => Simple::Q4_1,
            2 => Simple::Q5_0,
            3 => Simple::Q5_1,
            _ => Simple::Q8_0,
        }
    }

    pub(super) fn of(dt: GgmlDType) -> Option<Self> {
        Some(match dt {
            GgmlDType::Q4_0 => Simple::Q4_0,
            GgmlDType::Q4_1 => Simple::Q4_1,
            GgmlDType::Q5_0 => Simple::Q5_0,
            GgmlDType::Q5_1 => Simple::Q5_1,
            GgmlDType::Q8_0 => Simple::Q8_0,
            _ => return None,
        })
    }

    /// Bytes per block: f16 scale, f16 minimum (Q4_1/Q5_1), 32-bit `qh` (Q5_0/Q5_1), quants.
    pub(super) fn block_bytes(self) -> usize {
        match self {
            Simple::Q4_0 => 18,
            Simple::Q4_1 => 20,
            Simple::Q5_0 => 22,
            Simple::Q5_1 => 24,
            Simple::Q8_0 => 34,
        }
    }

    /// Whether the block has a minimum $m$ (and meets Q8_1's sum $s$).
    pub(super) fn with_min(self) -> bool {
        matches!(self, Simple::Q4_1 | Simple::Q5_1)
    }

    /// Offset of the packed nibbles (or of Q8_0's bytes).
    fn quants_at(self) -> usize {
        match self {
            Simple::Q4_0 => 2,
            Simple::Q4_1 => 4,
            Simple::Q5_0 => 6,
            Simple::Q5_1 => 8,
            Simple::Q8_0 => 2,
        }
    }

    /// Offset of the 32-bit word of fifth bits (Q5_0/Q5_1).
    fn qh_at(self) -> Option<usize> {
        match self {
            Simple::Q5_0 => Some(2),
            Simple::Q5_1 => Some(4),
            _ => None,
        }
    }

    /// The offset subtracted from the unsigned quants (0 for the types with a minimum).
    fn offset(self) -> i8 {
        match self {
            Simple::Q4_0 => 8,
            Simple::Q5_0 => 16,
            _ => 0,
        }
    }
}

/// `f::<K>(args)` (or, written `f<N>(args)`, `f::<K, N>(args)`) with `K` the code of `kind`
/// ([`Simple::from_code`]): the kernels are compiled once per kind, so the kind's branches
/// fold away.
macro_rules! by_kind {
    ($kind:expr, $f:ident $(<$n:tt>)? ($($a:expr),*)) => {
        match $kind {
            $crate::quant::q8::Simple::Q4_0 => $f::<0 $(, $n)?>($($a),*),
            $crate::quant::q8::Simple::Q4_1 => $f::<1 $(, $n)?>($($a),*),
            $crate::quant::q8::Simple::Q5_0 => $f::<2 $(, $n)?>($($a),*),
            $crate::quant::q8::Simple::Q5_1 => $f::<3 $(, $n)?>($($a),*),
            $crate::quant::q8::Simple::Q8_0 => $f::<4 $(, $n)?>($($a),*),
        }
    };
}
pub(super) use by_kind;

/// Activation rows quantized to blocks of [`QK`]: `q` the int8 quants, `d` each block's
/// $\hat\delta$ (the f16 value, as f32), `s` each block's Q8_1 sum (f16 value, as f32).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Q8Rows {
    pub q: Vec<i8>,
    pub d: Vec<f32>,
    pub s: Vec<f32>,
}

/// `N` rows of a [`Q8Rows`]: their quants, scales and sums.
type RowsOf<'a, const N: usize> = ([&'a [i8]; N], [&'a [f32]; N], [&'a [f32]; N]);

impl Q8Rows {
    /// The quants, scales and sums of rows `i0 .. i0 + N`, each `nb` blocks long.
    #[inline(always)]
    fn rows<const N: usize>(&self, i0: usize, nb: usize) -> RowsOf<'_, N> {
        let (mut q, mut d, mut s) = ([&self.q[..0]; N], [&self.d[..0]; N], [&self.s[..0]; N]);
        for i in 0..N {
            let r = i0 + i;
            q[i] = &self.q[r * nb * QK..(r + 1) * nb * QK];
            d[i] = &self.d[r * nb..(r + 1) * nb];
            s[i] = &self.s[r * nb..(r + 1) * nb];
        }
        (q, d, s)
    }
}

/// What the VNNI kernel reads beside each activation block $b$ of row $i$, eight lanes a
/// block (lane $l$ for the values $4l … 4l+3$): `ofs` $= -o\sum_{j=4l}^{4l+3} q_j$ for the
/// kind's [`Lanes::bias`] $o$ (empty when $o = 0$) and `dx` $= \hat\delta$ in every lane.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Lanes {
    ofs: Vec<i32>,
    dx: Vec<f32>,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl Lanes {
    /// The $o$ that makes `kind`'s weights unsigned: $v_j + o \in 0..256$ (the 4- and 5-bit
    /// offsets, 128 for Q8_0's signed bytes, 0 for the types with a minimum).
    fn bias(kind: Simple) -> i32 {
        match kind {
            Simple::Q8_0 => 128,
            k => k.offset() as i32,
        }
    }

    /// The lanes of every row of `a` for weights of `kind`.
    fn of(kind: Simple, a: &Q8Rows) -> Lanes {
        let o = Self::bias(kind);
        let ofs = if o == 0 {
            Vec::new()
        } else {
            a.q.chunks_exact(4)
                .map(|g| -o * g.iter().map(|&v| v as i32).sum::<i32>())
                .collect()
        };
        let dx = a.d.iter().flat_map(|&d| [d; 8]).collect();
        Lanes { ofs, dx }
    }

    /// The lanes of rows `i0 .. i0 + N`, each `nb` blocks long (`ofs` empty slices when the
    /// kind has no bias).
    #[inline(always)]
    fn rows<const N: usize>(&self, i0: usize, nb: usize) -> ([&[i32]; N], [&[f32]; N]) {
        let w = 8 * nb;
        let mut ofs = [&self.ofs[..0]; N];
        let mut dx = [&self.dx[..0]; N];
        for i in 0..N {
            let r = i0 + i;
            if !self.ofs.is_empty() {
                ofs[i] = &self.ofs[r * w..(r + 1) * w];
            }
            dx[i] = &self.dx[r * w..(r + 1) * w];
        }
        (ofs, dx)
    }
}

/// Quantizes each block of 32 values of `x` (a whole number of blocks) as ggml's reference
/// `quantize_row_q8_1` does (Q8_0's quants and scale are the same; Q8_1 adds the sum). A
/// block holding a NaN gets a NaN scale (ggml's `fmaxf` would skip it and give finite, wrong
/// products), so a NaN activation still makes its products NaN as in the exact mode.
///
/// # Panics
/// If `x` is not a whole number of blocks of 32 (the products check widths before calling).
pub fn quantize_rows(x: &[f32], par: bool) -> Q8Rows {
    assert!(x.len().is_multiple_of(QK), "q8: not whole blocks of 32");
    let nb = x.len() / QK;
    let mut out = Q8Rows {
        q: vec![0; x.len()],
        d: vec![0.0; nb],
        s: vec![0.0; nb],
    };
    type Block<'a> = ((&'a [f32], &'a mut [i8]), (&'a mut f32, &'a mut f32));
    let one = |((xb, qb), (d, s)): Block<'_>| (*d, *s) = quantize_block(xb, qb);
    let Q8Rows { q, d, s } = &mut out;
    if par && x.len() >= QUANT_PAR_MIN {
        x.par_chunks_exact(QK)
            .zip(q.par_chunks_exact_mut(QK))
            .zip(d.par_iter_mut().zip(s.par_iter_mut()))
            .with_min_len(64)
            .for_each(one);
    } else {
        x.chunks_exact(QK)
            .zip(q.chunks_exact_mut(QK))
            .zip(d.iter_mut().zip(s.iter_mut()))
            .for_each(one);
    }
    out
}

/// Activation values from which [`quantize_rows`] splits its blocks over the threads.
const QUANT_PAR_MIN: usize = 1 << 14;

/// One block of [`quantize_rows`]: its quants into `qb`, and $(\hat\delta, s)$.
#[inline(always)]
fn quantize_block(xb: &[f32], qb: &mut [i8]) -> (f32, f32) {
    let a = xb.iter().fold(0f32, |m, v| {
        if v.is_nan() || v.abs() > m {
            v.abs()
        } else {
            m
        }
    });
    let d = a / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in qb.iter_mut().zip(xb) {
        *q = round_to_i8(v * id);
        sum += *q as i32;
    }
    (
        half::f16::from_f32(d).to_f32(),
        half::f16::from_f32(sum as f32 * d).to_f32(),
    )
}

/// `y.round() as i8` (half away from zero, saturated to the i8 range, NaN to 0) without a
/// call to libm's `roundf`: the truncating cast of $y + \operatorname{sign}(y) \thinspace c$ with $c$
/// the largest f32 below $\tfrac12$ ($c = \tfrac12$ would send the f32 just below a halfway
/// point up). Equal on every f32: `cargo test --release -- --ignored round_to_i8` checks all
/// $2^{32}$ of them; the default test checks the halfway points and their neighbours.
#[inline(always)]
fn round_to_i8(y: f32) -> i8 {
    const C: f32 = 0.499_999_97;
    (y + C.copysign(y)) as i8
}

/// The 32 integer weights $v_j$ of one block of `kind` (unsigned for the types with a minimum).
#[inline(always)]
pub(super) fn block_values(kind: Simple, blk: &[u8]) -> [i8; QK] {
    let mut v = [0i8; QK];
    let qs = &blk[kind.quants_at()..];
    if kind == Simple::Q8_0 {
        for (o, &b) in v.iter_mut().zip(&qs[..QK]) {
            *o = b as i8;
        }
        return v;
    }
    let qh = kind
        .qh_at()
        .map(|at| u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]))
        .unwrap_or(0);
    for j in 0..QK / 2 {
        let (lo, hi) = (qs[j] & 0x0f, qs[j] >> 4);
        let (bl, bh) = (((qh >> j) & 1) << 4, ((qh >> (j + 16)) & 1) << 4);
        v[j] = (lo | bl as u8) as i8 - kind.offset();
        v[j + QK / 2] = (hi | bh as u8) as i8 - kind.offset();
    }
    v
}

/// The sum of `v` (a power of two long) as a tree of halves: $v_i \leftarrow v_i + v_{i+n/2}$
/// until one value is left.
#[inline(always)]
fn tree<const N: usize>(mut v: [f32; N]) -> f32 {
    let mut n = N;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            v[i] += v[i + n];
        }
    }
    v[0]
}

/// The result from the four accumulators of 8 lanes (block $b$ in accumulator $b \bmod 4$),
/// combined lane by lane as $(A_0 + A_2) + (A_1 + A_3)$ and summed as a [`tree`], plus the tree
/// of the 16 minima sums (block $b$'s term in sum $b \bmod 16$).
#[inline(always)]
pub(super) fn finish(a: [[f32; 8]; 4], mins: [f32; GROUP]) -> f32 {
    let mut l = [0f32; 8];
    for (i, v) in l.iter_mut().enumerate() {
        *v = (a[0][i] + a[2][i]) + (a[1][i] + a[3][i]);
    }
    tree(l) + tree(mins)
}

/// The f16 at byte `at` of a block as f32 (exact; branch-free, [`f16_to_f32_lanes`]).
#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32_lanes(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Blocks whose minima's terms go into one running sum each (block $b$ in sum $b \bmod 16$).
pub(super) const GROUP: usize = 16;

/// $\langle w, x\rangle$ for one weight row `row` of kind code `K` and one quantized
/// activation row (`q`, `d`, `s` of that row), portable: the lanes and accumulators of the
/// module doc.
fn dot_portable<const K: u8>(row: &[u8], q: &[i8], d: &[f32], s: &[f32]) -> f32 {
    let kind = Simple::from_code(K);
    let mut acc = [[0f32; 8]; 4];
    let mut mins = [0f32; GROUP];
    for (b, blk) in row.chunks_exact(kind.block_bytes()).enumerate() {
        let v = block_values(kind, blk);
        let qb = &q[b * QK..(b + 1) * QK];
        let dd = f16_at(blk, 0) * d[b];
        for (l, a) in acc[b % 4].iter_mut().enumerate() {
            let p: i32 = (4 * l..4 * l + 4).map(|j| v[j] as i32 * qb[j] as i32).sum();
            *a += dd * p as f32;
        }
        if kind.with_min() {
            mins[b % GROUP] += f16_at(blk, 2) * s[b];
        }
    }
    finish(acc, mins)
}

/// The body of the one-row kernels ([`avx2::dot`], [`avx512::dot`]) for `kind`'s `row`
/// against an activation row's scales `d` and sums `s`, given `|blk, b| ints`: the 8 integer
/// lanes of block `b` (its bytes `blk`) as an `__m256i`. Eight blocks at a time take their
/// scales together ([`avx2::scales8`]); block $b$'s lanes, scaled by $d\hat\delta$, go to
/// accumulator $b \bmod 4$, its minimum's term to running sum $b \bmod 16$; the last
/// `nb mod 8` blocks one at a time. A macro, so the caller's integer kernel inlines into the
/// loop under the caller's target features.
#[cfg(target_arch = "x86_64")]
macro_rules! one_row {
    ($kind:expr, $row:expr, $d:expr, $s:expr, |$blk:ident, $b:ident| $ints:expr) => {{
        use std::arch::x86_64::*;
        use $crate::quant::q8::avx2::{half8, lanes, load8, prefetch, scaled, scales8};
        use $crate::quant::q8::{GROUP, finish};
        let (kind, row, d, s): (Simple, &[u8], &[f32], &[f32]) = ($kind, $row, $d, $s);
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut mins8 = [_mm256_setzero_ps(); 2];
        let bb = kind.block_bytes();
        let mut dd = [0f32; 8];
        let mut octs = row.chunks_exact(8 * bb);
        for (c, oct) in octs.by_ref().enumerate() {
            let b0 = 8 * c;
            prefetch(oct.as_ptr());
            prefetch(oct[4 * bb..].as_ptr());
            let (dw, mw) = scales8(oct, bb);
            // SAFETY: `dd` is 8 writable f32; the store has no alignment requirement.
            unsafe { _mm256_storeu_ps(dd.as_mut_ptr(), _mm256_mul_ps(dw, load8(d, b0))) };
            if kind.with_min() {
                let m = &mut mins8[c % 2];
                *m = _mm256_add_ps(*m, _mm256_mul_ps(mw, load8(s, b0)));
            }
            for (j, $blk) in oct.chunks_exact(bb).enumerate() {
                let $b = b0 + j;
                acc[j % 4] = scaled(acc[j % 4], $ints, dd[j]);
            }
        }
        let mut mins = [0f32; GROUP];
        // SAFETY: `mins` is 16 writable f32; the stores have no alignment requirement.
        unsafe {
            _mm256_storeu_ps(mins.as_mut_ptr(), mins8[0]);
            _mm256_storeu_ps(mins.as_mut_ptr().add(8), mins8[1]);
        }
        let b0 = row.len() / bb / 8 * 8;
        for (j, $blk) in octs.remainder().chunks_exact(bb).enumerate() {
            let $b = b0 + j;
            let dd = _mm256_cvtss_f32(half8($blk, 0)) * d[$b];
            acc[j % 4] = scaled(acc[j % 4], $ints, dd);
            if kind.with_min() {
                mins[$b % GROUP] += _mm256_cvtss_f32(half8($blk, 2)) * s[$b];
            }
        }
        finish(lanes(acc), mins)
    }};
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::{GROUP, QK, Simple, finish};
    use std::arch::x86_64::*;

    /// Prefetch distance in bytes of the weight kernels (here and [`super::super::fused`]).
    pub(in crate::quant) const AHEAD: usize = 1024;

    /// The f16 at bytes `at`, `at + 1` of `blk` in all 8 lanes (exact).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    pub(in crate::quant) fn half8(blk: &[u8], at: usize) -> __m256 {
        let h = u16::from_le_bytes([blk[at], blk[at + 1]]);
        _mm256_cvtph_ps(_mm_set1_epi16(h as i16))
    }

    /// Asks for the three cache lines [`AHEAD`] bytes past `p` (the rest of the row, or the
    /// next rows'), so the loads of the coming blocks do not wait on memory. A hint: no fault
    /// past the end of the weights.
    #[inline]
    #[target_feature(enable = "sse")]
    pub(in crate::quant) fn prefetch(p: *const u8) {
        let p = p.wrapping_add(AHEAD);
        for k in 0..3 {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64 * k) as *const i8);
        }
    }

    /// The 32 weights of a block as bytes in value order: signed $v_j$ for the types without
    /// a minimum, unsigned $n_j$ for Q4_1/Q5_1.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::quant) fn weights(kind: Simple, blk: &[u8]) -> __m256i {
        let w = stored(kind, blk);
        if kind.offset() != 0 {
            return _mm256_sub_epi8(w, _mm256_set1_epi8(kind.offset()));
        }
        w
    }

    /// The 32 quants of a block as stored, in value order: the unsigned $n_j$ of the 4- and
    /// 5-bit types (before their offset is taken away), Q8_0's signed bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::quant) fn stored(kind: Simple, blk: &[u8]) -> __m256i {
        let qs = &blk[kind.quants_at()..];
        if kind == Simple::Q8_0 {
            let b: &[u8; 32] = qs[..32].try_into().expect("32 quant bytes");
            // SAFETY: `b` is 32 readable bytes; the load has no alignment requirement.
            return unsafe { _mm256_loadu_si256(b.as_ptr() as *const __m256i) };
        }
        let mut w = nibbles(qs);
        if let Some(at) = kind.qh_at() {
            let qh = u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]);
            // Byte j of the register ← byte j/8 of qh, then bit j mod 8 of it → 0x10.
            let rep = _mm256_set1_epi32(qh as i32);
            let idx = _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                3, 3, 3, 3,
            );
            let bytes = _mm256_shuffle_epi8(rep, idx);
            let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
            w = _mm256_or_si256(w, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
        }
        w
    }

    /// The 16 bytes of packed nibbles at the start of `qs` as 32 bytes in value order: the low
    /// nibbles in bytes 0–15, the high ones in bytes 16–31.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::quant) fn nibbles(qs: &[u8]) -> __m256i {
        let b: &[u8; 16] = qs[..16].try_into().expect("16 nibble bytes");
        // SAFETY: `b` is 16 readable bytes; the load has no alignment requirement.
        let p = unsafe { _mm_loadu_si128(b.as_ptr() as *const __m128i) };
        let m4 = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(p, m4);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(p), m4);
        _mm256_set_m128i(hi, lo)
    }

    /// One block's term added to the accumulator `acc`: the 8 integer lanes of
    /// $\sum_j v_j q_j$, converted and scaled by `dd`, for the block's weights `w` ([`weights`])
    /// and their magnitudes `wa` $= |w|$ (used by the types without a minimum).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn block(kind: Simple, acc: __m256, w: (__m256i, __m256i), qb: &[i8], dd: f32) -> __m256 {
        scaled(acc, ints(kind, w, qb), dd)
    }

    /// The 8 integer lanes of $\sum_j v_j q_j$ (lane $l$: values $4l … 4l+3$) of one block,
    /// for its weights `w` ([`weights`]) and their magnitudes `wa` $= |w|$.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn ints(kind: Simple, (w, wa): (__m256i, __m256i), qb: &[i8]) -> __m256i {
        let qb: &[i8; QK] = qb[..QK].try_into().expect("32 quants");
        // SAFETY: `qb` is 32 readable bytes; the load has no alignment requirement.
        let x = unsafe { _mm256_loadu_si256(qb.as_ptr() as *const __m256i) };
        let p16 = if kind.with_min() {
            // Unsigned weights (0..31) times signed activations, pairs summed in i16.
            _mm256_maddubs_epi16(w, x)
        } else {
            // |v| times x·sign(v): the same products with an unsigned first operand.
            _mm256_maddubs_epi16(wa, _mm256_sign_epi8(x, w))
        };
        _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
    }

    /// `acc` $+$ `dd` $\cdot$ `p` lane by lane, for a block's integer lanes `p`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::quant) fn scaled(acc: __m256, p: __m256i, dd: f32) -> __m256 {
        _mm256_add_ps(
            acc,
            _mm256_mul_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(p)),
        )
    }

    /// The block's weights and their magnitudes, as [`block`] takes them.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn decoded(kind: Simple, blk: &[u8]) -> (__m256i, __m256i) {
        let w = weights(kind, blk);
        (w, _mm256_sign_epi8(w, w))
    }

    /// The 8 lanes of each accumulator, for [`finish`].
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::quant) fn lanes(acc: [__m256; 4]) -> [[f32; 8]; 4] {
        let mut l = [[0f32; 8]; 4];
        for (l, a) in l.iter_mut().zip(acc) {
            // SAFETY: `l` is 8 writable f32; the store has no alignment requirement.
            unsafe { _mm256_storeu_ps(l.as_mut_ptr(), a) };
        }
        l
    }

    /// [`super::tree`] of the 8 lanes of `v`, in registers: $v_i \mathrel{+}= v_{i+4}$, then
    /// $v_i \mathrel{+}= v_{i+2}$, then $v_0 + v_1$ (the same additions, so the same bits).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::quant) fn tree8(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
    }

    /// [`dot`] of one weight row against the activation rows `i0 .. i0 + out.len()` (at most
    /// [`super::ACTS`]) of `a`, into `out`: each weight block decoded once for all of them. Each
    /// pair keeps its own accumulators and minima sums, updated in [`dot`]'s order (block
    /// $b$ into accumulator $b \bmod 4$ and minima sum $b \bmod 16$), so each output has
    /// [`dot`]'s bits (tested).
    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn dots<const K: u8, const N: usize>(
        row: &[u8],
        a: &super::Q8Rows,
        i0: usize,
        nb: usize,
        out: &mut [f32],
    ) {
        let kind = Simple::from_code(K);
        let bb = kind.block_bytes();
        let (q, d, s) = a.rows::<N>(i0, nb);
        let mut acc = [[_mm256_setzero_ps(); 4]; N];
        let mut mins = [[0f32; GROUP]; N];
        // Block b (the j-th of its quad) into accumulator j = b mod 4 of every pair (a macro,
        // not a closure: the body must inline into this loop).
        macro_rules! one {
            ($j:expr, $b:expr, $blk:expr) => {{
                let (j, b, blk): (usize, usize, &[u8]) = ($j, $b, $blk);
                let w = decoded(kind, blk);
                let dw = _mm256_cvtss_f32(half8(blk, 0));
                for i in 0..N {
                    acc[i][j] = block(kind, acc[i][j], w, &q[i][b * QK..], dw * d[i][b]);
                }
                if kind.with_min() {
                    let mw = _mm256_cvtss_f32(half8(blk, 2));
                    for i in 0..N {
                        mins[i][b % GROUP] += mw * s[i][b];
                    }
                }
            }};
        }
        let mut quads = row[..nb * bb].chunks_exact(4 * bb);
        for (c, quad) in quads.by_ref().enumerate() {
            prefetch(quad.as_ptr());
            for j in 0..4 {
                one!(j, 4 * c + j, &quad[j * bb..(j + 1) * bb]);
            }
        }
        let b0 = nb / 4 * 4;
        for (j, blk) in quads.remainder().chunks_exact(bb).enumerate() {
            one!(j, b0 + j, blk);
        }
        for ((o, acc), mins) in out.iter_mut().zip(acc).zip(mins) {
            *o = finish(lanes(acc), mins);
        }
    }

    /// The f16 words at bytes 0–1 and 2–3 of the 8 blocks at `p`, `p + bb`, …, `p + 7bb`
    /// (scale $d$ and, for the types with one, minimum $m$) as f32: one gather of the 8
    /// 32-bit words ($d$ in the low half, $m$ in the high half), split and converted 8 at a
    /// time (exact). For the types without a minimum the second vector is the conversion of
    /// quant bytes, not used.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    pub(in crate::quant) fn scales8(blocks: &[u8], bb: usize) -> (__m256, __m256) {
        assert!(blocks.len() >= 7 * bb + 4, "8 blocks of at least 4 bytes");
        let at = bb as i32;
        let idx = _mm256_setr_epi32(0, at, 2 * at, 3 * at, 4 * at, 5 * at, 6 * at, 7 * at);
        // SAFETY: the 8 words read are bytes `j·bb .. j·bb + 4` for j < 8, inside `blocks`
        // (asserted above); the gather has no alignment requirement.
        let w = unsafe { _mm256_i32gather_epi32::<1>(blocks.as_ptr() as *const i32, idx) };
        let lo = _mm256_and_si256(w, _mm256_set1_epi32(0xffff));
        let hi = _mm256_srli_epi32::<16>(w);
        // [d0..3, m0..3 | d4..7, m4..7] as 16-bit words, then [d0..7 | m0..7].
        let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(lo, hi));
        (
            _mm256_cvtph_ps(_mm256_castsi256_si128(packed)),
            _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(packed)),
        )
    }

    /// 8 f32 from `v[at..at + 8]`.
    #[inline]
    #[target_feature(enable = "avx")]
    pub(in crate::quant) fn load8(v: &[f32], at: usize) -> __m256 {
        let v: &[f32; 8] = v[at..at + 8].try_into().expect("8 values");
        // SAFETY: `v` is 8 readable f32; the load has no alignment requirement.
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    }

    /// [`super::dot_portable`] with AVX2 and F16C: the same integers and f32 operations. Eight
    /// blocks at a time take their scales together ([`scales8`]): the 8 products
    /// $d\hat\delta$ in one vector multiply, and the minima's terms $m s$ in one vector multiply
    /// added to the 16 running sums kept as two vectors (blocks $8c … 8c + 7$ go to sums
    /// $8(c \bmod 2) + j$, which is $b \bmod 16$); the last `nb mod 8` blocks one at a time.
    /// Each lane's operations and their order are those of one block at a time, so the bits
    /// are [`super::dot_portable`]'s (tested).
    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn dot<const K: u8>(row: &[u8], q: &[i8], d: &[f32], s: &[f32]) -> f32 {
        let kind = Simple::from_code(K);
        one_row!(kind, row, d, s, |blk, b| ints(
            kind,
            decoded(kind, blk),
            &q[b * QK..]
        ))
    }

    /// [`dot`] of each weight row of `rows` (`rb` bytes a row) against one activation row,
    /// into `out[r · stride]`: the loop over the rows inside the kernel, so a task dispatches
    /// once, not once a row.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) fn dot_each<const K: u8>(
        rows: &[u8],
        rb: usize,
        (q, d, s): (&[i8], &[f32], &[f32]),
        out: &mut [f32],
        stride: usize,
    ) {
        for (r, row) in rows.chunks_exact(rb).enumerate() {
            out[r * stride] = dot::<K>(row, q, d, s);
        }
    }
}

/// The AVX-512 VNNI kernel: two blocks side by side in one 512-bit register (block $b$ in
/// the low 256 bits, $b + 1$ in the high), the 4-value integer sums by `vpdpbusd` on the
/// unsigned weights $v_j + o$ started from $-o\sum q_j$ ([`Lanes`]). A lane holds the same
/// integer as in [`avx2`] (`dpbusd` sums the same four products that `maddubs` + `madd` sum,
/// exactly in i32), and the f32 operations are element-wise, so accumulators $b \bmod 4 = 0, 1$
/// sharing one register (as do 2, 3) give [`dot_portable`]'s bits (tested).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::avx2::{half8, nibbles, prefetch, stored, tree8};
    use super::{GROUP, Lanes, Q8Rows, QK, Simple};
    use std::arch::x86_64::*;

    /// The lanes of the low half only (block $b$).
    const LOW: __mmask16 = 0x00ff;

    /// Blocks `lo` and `hi` (or zeros for a missing `hi`) as one register of unsigned bytes
    /// $v_j + o$, each half [`biased`].
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
    fn pair(kind: Simple, lo: &[u8], hi: Option<&[u8]>) -> __m512i {
        let h = hi.map_or(_mm256_setzero_si256(), |b| biased(kind, b));
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(biased(kind, lo)), h)
    }

    /// The first 64 bytes of `v` as a register, or with `two` false its first 32 and zeros.
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    fn load<T>(v: &[T], two: bool) -> __m512i {
        let n = if two { 64 } else { 32 };
        assert!(
            std::mem::size_of_val(v) >= n,
            "q8: a load past the end of a row"
        );
        // SAFETY: `v` has at least `n` readable bytes (checked); no alignment is required.
        unsafe {
            if two {
                _mm512_loadu_si512(v.as_ptr() as *const __m512i)
            } else {
                _mm512_zextsi256_si512(_mm256_loadu_si256(v.as_ptr() as *const __m256i))
            }
        }
    }

    /// One block as 32 unsigned bytes $v_j + o$ ([`Lanes::bias`] $o$): [`stored`], with
    /// Q8_0's sign bit flipped, and with Q5_0/Q5_1's fifth bits added as one masked byte add
    /// (bit $j$ of `qh` selects byte $j$; AVX-512BW).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
    fn biased(kind: Simple, blk: &[u8]) -> __m256i {
        if kind == Simple::Q8_0 {
            return _mm256_xor_si256(stored(kind, blk), _mm256_set1_epi8(i8::MIN));
        }
        let Some(at) = kind.qh_at() else {
            return stored(kind, blk);
        };
        let qh = u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]);
        let w = nibbles(&blk[kind.quants_at()..]);
        _mm256_mask_add_epi8(w, qh, w, _mm256_set1_epi8(0x10))
    }

    /// The 8 integer lanes of block `b` of one activation row (quants `q`, [`Lanes::ofs`]
    /// `ofs`, empty without a bias) against the weight block `blk`: one 256-bit `vpdpbusd` of
    /// the unsigned weights ([`biased`]) started from the offsets, the integers of
    /// [`super::avx2`]'s `maddubs` + `madd` (exact in i32).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
    fn ints(kind: Simple, blk: &[u8], q: &[i8], ofs: &[i32], b: usize) -> __m256i {
        let qb: &[i8; QK] = q[b * QK..(b + 1) * QK].try_into().expect("32 quants");
        // SAFETY: `qb` is 32 readable bytes; the load has no alignment requirement.
        let x = unsafe { _mm256_loadu_si256(qb.as_ptr() as *const __m256i) };
        let o = if ofs.is_empty() {
            _mm256_setzero_si256()
        } else {
            let o: &[i32; 8] = ofs[8 * b..8 * b + 8].try_into().expect("8 offsets");
            // SAFETY: `o` is 32 readable bytes; the load has no alignment requirement.
            unsafe { _mm256_loadu_si256(o.as_ptr() as *const __m256i) }
        };
        _mm256_dpbusd_epi32(o, biased(kind, blk), x)
    }

    /// [`super::avx2::dot`] for one activation row with 256-bit VNNI (AVX-512 VL): each
    /// block's lanes from [`ints`], the scales, the f32 operations and their order
    /// [`super::avx2::dot`]'s, so the bits are [`super::dot_portable`]'s (tested). `ofs` is the
    /// row's [`Lanes::ofs`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
    pub(super) fn dot<const K: u8>(
        row: &[u8],
        (q, d, s): (&[i8], &[f32], &[f32]),
        ofs: &[i32],
    ) -> f32 {
        let kind = Simple::from_code(K);
        one_row!(kind, row, d, s, |blk, b| ints(kind, blk, q, ofs, b))
    }

    /// [`dot`] of each weight row of `rows` (`rb` bytes a row) against one activation row,
    /// into `out[r · stride]`, as [`super::avx2::dot_each`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
    pub(super) fn dot_each<const K: u8>(
        rows: &[u8],
        rb: usize,
        qds: (&[i8], &[f32], &[f32]),
        ofs: &[i32],
        out: &mut [f32],
        stride: usize,
    ) {
        for (r, row) in rows.chunks_exact(rb).enumerate() {
            out[r * stride] = dot::<K>(row, qds, ofs);
        }
    }

    /// [`super::avx2::dots`] with AVX-512 VNNI, for `N` activation rows (1 to
    /// [`super::ACTS_VNNI`]): the same integers and f32 operations in the same order per pair.
    /// A lane's integer is $\sum_j (v_j + o) q_j - o \sum_j q_j$, one `vpdpbusd` started from
    /// the row's [`Lanes::ofs`], and its scale $d\hat\delta$ is the product of the weight
    /// scale with the row's [`Lanes::dx`], lane by lane (the scalar product's bits).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
    pub(super) fn dots<const K: u8, const N: usize>(
        row: &[u8],
        a: &Q8Rows,
        l: &Lanes,
        i0: usize,
        nb: usize,
        out: &mut [f32],
    ) {
        let kind = Simple::from_code(K);
        let bb = kind.block_bytes();
        let (q, _, s) = a.rows::<N>(i0, nb);
        let (ofs, dx) = l.rows::<N>(i0, nb);
        let biased = Lanes::bias(kind) != 0;
        // acc[i][0]: accumulators 0 | 1 of pair i; acc[i][1]: accumulators 2 | 3.
        let mut acc = [[_mm512_setzero_ps(); 2]; N];
        // Blocks b (and b + 1 when `hi` is given) into register half `h` = (b mod 4) / 2.
        macro_rules! step {
            ($h:expr, $b:expr, $lo:expr, $hi:expr) => {{
                let (h, b, lo, hi): (usize, usize, &[u8], Option<&[u8]>) = ($h, $b, $lo, $hi);
                let two = hi.is_some();
                let w = pair(kind, lo, hi);
                let d0 = _mm256_cvtss_f32(half8(lo, 0));
                let d1 = hi.map_or(0.0, |blk| _mm256_cvtss_f32(half8(blk, 0)));
                let dw = _mm512_mask_blend_ps(!LOW, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
                for i in 0..N {
                    let o = if biased {
                        load(&ofs[i][8 * b..], two)
                    } else {
                        _mm512_setzero_si512()
                    };
                    let x = load(&q[i][b * QK..], two);
                    let p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(o, w, x));
                    let dd = _mm512_mul_ps(dw, _mm512_castsi512_ps(load(&dx[i][8 * b..], two)));
                    let t = _mm512_mul_ps(dd, p);
                    acc[i][h] = if two {
                        _mm512_add_ps(acc[i][h], t)
                    } else {
                        _mm512_mask_add_ps(acc[i][h], LOW, acc[i][h], t)
                    };
                }
            }};
        }
        let mut quads = row[..nb * bb].chunks_exact(4 * bb);
        for (c, quad) in quads.by_ref().enumerate() {
            prefetch(quad.as_ptr());
            let blk = |j: usize| &quad[j * bb..(j + 1) * bb];
            step!(0, 4 * c, blk(0), Some(blk(1)));
            step!(1, 4 * c + 2, blk(2), Some(blk(3)));
        }
        let b0 = nb / 4 * 4;
        let (mut rest, mut n) = ([&row[..0]; 3], 0);
        for blk in quads.remainder().chunks_exact(bb) {
            rest[n] = blk;
            n += 1;
        }
        match n {
            1 => step!(0, b0, rest[0], None),
            2 => step!(0, b0, rest[0], Some(rest[1])),
            3 => {
                step!(0, b0, rest[0], Some(rest[1]));
                step!(1, b0 + 2, rest[2], None);
            }
            _ => {}
        }
        // The minima's sums, 16 blocks at a time: lane l of chunk k holds block 16k + l, so
        // sum l gathers its blocks in increasing order, as in `dot_portable` (padding lanes
        // add 0·0 = +0, which leaves every sum unchanged: a sum started at +0 is never −0).
        let mut mins = [_mm512_setzero_ps(); N];
        if kind.with_min() {
            for (k, chunk) in row[..nb * bb].chunks(GROUP * bb).enumerate() {
                let mut h = [0u16; GROUP];
                for (hk, blk) in h.iter_mut().zip(chunk.chunks_exact(bb)) {
                    *hk = u16::from_le_bytes([blk[2], blk[3]]);
                }
                // SAFETY: `h` is 32 readable bytes; the load has no alignment requirement.
                let m =
                    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(h.as_ptr() as *const __m256i) });
                let n = chunk.len() / bb;
                let lanes = ((1u32 << n) - 1) as __mmask16;
                for i in 0..N {
                    let sk = &s[i][GROUP * k..GROUP * k + n];
                    // SAFETY: the masked load reads only the `n` values of `sk`.
                    let sv = unsafe { _mm512_maskz_loadu_ps(lanes, sk.as_ptr()) };
                    mins[i] = _mm512_add_ps(mins[i], _mm512_mul_ps(m, sv));
                }
            }
        }
        // [`finish`] in registers: acc[i][0] + acc[i][1] is (A₀ + A₂ | A₁ + A₃), its halves
        // added give the combined lanes; the minima's halves added are the first step of
        // their tree.
        for ((o, acc), mins) in out.iter_mut().zip(acc).zip(mins) {
            let half = |v: __m512, k: usize| {
                let v = _mm512_castps_si512(v);
                _mm256_castsi256_ps(if k == 0 {
                    _mm512_castsi512_si256(v)
                } else {
                    _mm512_extracti64x4_epi64::<1>(v)
                })
            };
            let s = _mm512_add_ps(acc[0], acc[1]);
            let l = _mm256_add_ps(half(s, 0), half(s, 1));
            let m = _mm256_add_ps(half(mins, 0), half(mins, 1));
            *o = tree8(l) + tree8(m);
        }
    }
}

/// The kernels a product can take on this CPU, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Path {
    Portable,
    Avx2,
    Vnni,
}

impl Path {
    /// The best path this CPU runs: AVX-512 VNNI (with BW and VL), else AVX2 with F16C, else the
    /// portable one (features detected once by the standard library).
    fn best() -> Path {
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            if has!("avx2") && has!("f16c") {
                if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512vnni") {
                    return Path::Vnni;
                }
                return Path::Avx2;
            }
        }
        Path::Portable
    }

    /// The paths this CPU runs (for the tests that compare them).
    #[cfg(test)]
    fn available() -> Vec<Path> {
        [Path::Portable, Path::Avx2, Path::Vnni]
            .into_iter()
            .filter(|&p| p <= Path::best())
            .collect()
    }
}

/// One weight row against activation row `i`, on `path` (the VNNI kernel needs the rows'
/// `lanes`; without them the AVX2 one runs).
#[inline]
fn dot(
    kind: Simple,
    path: Path,
    row: &[u8],
    a: &Q8Rows,
    lanes: Option<&Lanes>,
    i: usize,
    nb: usize,
) -> f32 {
    let ([q], [d], [s]) = a.rows::<1>(i, nb);
    #[cfg(target_arch = "x86_64")]
    if let (Path::Vnni, Some(l)) = (path, lanes) {
        let ([ofs], _) = l.rows::<1>(i, nb);
        use avx512::dot as fast;
        // SAFETY: `Path::Vnni` is chosen only when the CPU was found to support it.
        return unsafe { by_kind!(kind, fast(row, (q, d, s), ofs)) };
    }
    #[cfg(target_arch = "x86_64")]
    if path != Path::Portable {
        use avx2::dot as fast;
        // SAFETY: both SIMD paths are chosen only when the CPU supports AVX2 and F16C.
        return unsafe { by_kind!(kind, fast(row, q, d, s)) };
    }
    let _ = (path, lanes);
    by_kind!(kind, dot_portable(row, q, d, s))
}

/// [`dot`] of each weight row of `rows` (`rb` bytes a row) against activation row `i`, into
/// `out[r · stride]`, on `path`.
#[allow(clippy::too_many_arguments)]
fn dot_each(
    kind: Simple,
    path: Path,
    rows: &[u8],
    rb: usize,
    a: &Q8Rows,
    lanes: Option<&Lanes>,
    i: usize,
    nb: usize,
    out: &mut [f32],
    stride: usize,
) {
    let ([q], [d], [s]) = a.rows::<1>(i, nb);
    #[cfg(target_arch = "x86_64")]
    if let (Path::Vnni, Some(l)) = (path, lanes) {
        let ([ofs], _) = l.rows::<1>(i, nb);
        use avx512::dot_each as fast;
        // SAFETY: `Path::Vnni` is chosen only when the CPU was found to support it.
        return unsafe { by_kind!(kind, fast(rows, rb, (q, d, s), ofs, out, stride)) };
    }
    #[cfg(target_arch = "x86_64")]
    if path != Path::Portable {
        use avx2::dot_each as fast;
        // SAFETY: both SIMD paths are chosen only when the CPU supports AVX2 and F16C.
        return unsafe { by_kind!(kind, fast(rows, rb, (q, d, s), out, stride)) };
    }
    let _ = (path, lanes);
    for (r, row) in rows.chunks_exact(rb).enumerate() {
        out[r * stride] = by_kind!(kind, dot_portable(row, q, d, s));
    }
}

/// Activation rows that one weight row meets together in [`simple_rows`] ([`avx2::dots`]).
const ACTS: usize = 4;

/// The same for the VNNI kernel ([`avx512::dots`]: 2 of its 32 registers a row).
const ACTS_VNNI: usize = 8;

/// [`dot`] of one weight row against activation rows `i0 .. i0 + out.len()` (at most
/// [`ACTS`], or [`ACTS_VNNI`] with `lanes`, given on the VNNI path), into `out`; the same
/// bits as one [`dot`] a row, on every path.
#[allow(clippy::too_many_arguments)]
fn dots(
    kind: Simple,
    path: Path,
    row: &[u8],
    a: &Q8Rows,
    lanes: Option<&Lanes>,
    i0: usize,
    nb: usize,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if let (Path::Vnni, Some(l)) = (path, lanes)
        && out.len() > 1
    {
        // The row count as a constant, so the loops over the rows unroll.
        macro_rules! n {
            ($n:literal) => {{
                use avx512::dots;
                // SAFETY: `Path::Vnni` is chosen only when the CPU was found to support it.
                return unsafe { by_kind!(kind, dots<$n>(row, a, l, i0, nb, out)) };
            }};
        }
        match out.len() {
            1 => n!(1),
            2 => n!(2),
            3 => n!(3),
            4 => n!(4),
            5 => n!(5),
            6 => n!(6),
            7 => n!(7),
            _ => n!(8),
        }
    }
    #[cfg(target_arch = "x86_64")]
    if path != Path::Portable && out.len() > 1 {
        macro_rules! n {
            ($n:literal) => {{
                use avx2::dots;
                // SAFETY: both SIMD paths are chosen only when the CPU supports AVX2 and F16C.
                return unsafe { by_kind!(kind, dots<$n>(row, a, i0, nb, out)) };
            }};
        }
        match out.len() {
            2 => n!(2),
            3 => n!(3),
            _ => n!(4),
        }
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = dot(kind, path, row, a, lanes, i0 + i, nb);
    }
}

/// `x Wᵀ` in q8 arithmetic as a row-major `[rows, t]` matrix, for `W` of type `dt` stored as
/// `bytes` (`rows` rows of `cols` values) and `x` row-major `[t, cols]`; `None` for a type
/// that is not a ggml block type or a width that is not whole blocks (the caller then computes
/// the exact product, as for f32 and 16-bit weights). Rows of `W` are split
/// over the threads when `par`.
pub fn matmul_t_rows(
    dt: GgmlDType,
    bytes: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    t: usize,
    par: bool,
) -> Option<Vec<f32>> {
    if x.len() != t * cols {
        return None;
    }
    if let Some(kind) = Simple::of(dt) {
        if !cols.is_multiple_of(QK) || bytes.len() != rows * cols / QK * kind.block_bytes() {
            return None;
        }
        return Some(simple_rows(
            kind,
            Path::best(),
            bytes,
            rows,
            cols,
            x,
            t,
            par,
        ));
    }
    macro_rules! k {
        ($B:ty) => {{
            if !cols.is_multiple_of(<$B>::BLCK_SIZE)
                || bytes.len() != rows * cols / <$B>::BLCK_SIZE * std::mem::size_of::<$B>()
            {
                return None;
            }
            let w = blocks::<$B>(bytes);
            Some(k_rows::<$B>(&w, rows, cols, x, t, par))
        }};
    }
    match dt {
        GgmlDType::Q2K => k!(BlockQ2K),
        GgmlDType::Q3K => k!(BlockQ3K),
        GgmlDType::Q4K => k!(BlockQ4K),
        GgmlDType::Q5K => k!(BlockQ5K),
        GgmlDType::Q6K => k!(BlockQ6K),
        GgmlDType::Q8K => k!(BlockQ8K),
        GgmlDType::Q8_1 => k!(BlockQ8_1),
        _ => None,
    }
}

/// The simple types: activations quantized once, then one dot per (weight row, activation row),
/// [`ACTS`] activation rows at a time.
#[allow(clippy::too_many_arguments)]
fn simple_rows(
    kind: Simple,
    path: Path,
    bytes: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    t: usize,
    par: bool,
) -> Vec<f32> {
    let a = quantize_rows(x, par);
    let lanes = (path == Path::Vnni).then(|| Lanes::of(kind, &a));
    let acts = if lanes.is_some() { ACTS_VNNI } else { ACTS };
    let nb = cols / QK;
    let rb = nb * kind.block_bytes();
    row_tasks(rows, t, par, |k, o| {
        let n = o.len() / t;
        let task = &bytes[k * ROWS * rb..(k * ROWS + n) * rb];
        // Activation rows in groups of `acts` (outer, so a group's quants stay in L1 while the
        // task's weight rows pass), each weight row meeting the whole group at once.
        for i0 in (0..t).step_by(acts) {
            let m = acts.min(t - i0);
            if m == 1 {
                // One activation row (generation, or the last of a group): the kernel runs
                // over the task's rows itself.
                let l = lanes.as_ref();
                dot_each(kind, path, task, rb, &a, l, i0, nb, &mut o[i0..], t);
                continue;
            }
            for (r, orow) in o.chunks_exact_mut(t).enumerate() {
                let row = &task[r * rb..(r + 1) * rb];
                let out = &mut orow[i0..i0 + m];
                dots(kind, path, row, &a, lanes.as_ref(), i0, nb, out);
            }
        }
    })
}

/// The `[rows, t]` output computed by `work(k, out_k)` on task `k`'s [`ROWS`] weight rows
/// (`out_k` their `ROWS·t` outputs), the tasks split over the threads when `par`.
fn row_tasks(
    rows: usize,
    t: usize,
    par: bool,
    work: impl Fn(usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    let mut out = vec![0f32; rows * t];
    let work = |(k, o): (usize, &mut [f32])| work(k, o);
    if par {
        out.par_chunks_mut(ROWS * t).enumerate().for_each(work);
    } else {
        out.chunks_mut(ROWS * t).enumerate().for_each(work);
    }
    out
}

/// `bytes` as candle blocks: borrowed in place when aligned for `B` (as every
/// [`crate::runtime::weights::StoredMatrix`]'s bytes are), else copied block by block.
fn blocks<B: Clone>(bytes: &[u8]) -> std::borrow::Cow<'_, [B]> {
    if (bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<B>()) {
        std::borrow::Cow::Borrowed(super::cast::<B>(bytes))
    } else {
        let sz = std::mem::size_of::<B>();
        std::borrow::Cow::Owned(
            bytes
                .chunks_exact(sz)
                // SAFETY: candle's blocks are plain old data of exactly `sz` bytes, for which
                // every bit pattern is valid.
                .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const B) })
                .collect(),
        )
    }
}

/// The K-quants (and the 8-bit activation types Q8_K, Q8_1 used as weights): activation rows
/// quantized once to the block's partner type (`VecDotType`: Q8_K, or Q8_1; candle's
/// `from_float`, ggml's reference), then candle's `vec_dot` per (weight row, activation row).
fn k_rows<B: GgmlType>(
    w: &[B],
    rows: usize,
    cols: usize,
    x: &[f32],
    t: usize,
    par: bool,
) -> Vec<f32> {
    let nb = cols / B::BLCK_SIZE;
    let nbx = cols / B::VecDotType::BLCK_SIZE;
    let mut xq = vec![B::VecDotType::zeros(); t * nbx];
    for (xr, qr) in x.chunks_exact(cols).zip(xq.chunks_exact_mut(nbx)) {
        B::VecDotType::from_float(xr, qr);
    }
    row_tasks(rows, t, par, |k, o| {
        for (r, orow) in o.chunks_exact_mut(t).enumerate() {
            let wr = &w[(k * ROWS + r) * nb..(k * ROWS + r + 1) * nb];
            for (v, qr) in orow.iter_mut().zip(xq.chunks_exact(nbx)) {
                *v = B::vec_dot(cols, wr, qr);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::k_quants::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};
    use half::f16;

    /// Random valid blocks of a simple type (finite f16 scale and minimum in ±0.05), seeded.
    fn blocks(kind: Simple, n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let bb = kind.block_bytes();
        let mut out = vec![0u8; n * bb];
        for b in out.chunks_exact_mut(bb) {
            for v in b.iter_mut() {
                *v = next() as u8;
            }
            let scales = if kind.with_min() { 2 } else { 1 };
            for k in 0..scales {
                let v = (next() % 2000) as f32 / 2000.0 * 0.1 - 0.05;
                b[2 * k..2 * k + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
            }
        }
        out
    }

    fn acts(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|k| {
                (((k as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 2001) as f32
                    / 400.0
                    - 2.5
            })
            .collect()
    }

    fn read<B: Clone>(b: &[u8]) -> Vec<B> {
        b.chunks_exact(std::mem::size_of::<B>())
            // SAFETY: candle's block types are plain old data of exactly this size.
            .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const B) })
            .collect()
    }

    /// [`round_to_i8`] is `round() as i8` at every halfway point $n + \tfrac12$ of the i8
    /// range and beyond, at its two neighbours, at the integers and their neighbours, and at
    /// the specials.
    #[test]
    fn round_to_i8_rounds_half_away_from_zero() {
        let check = |y: f32| assert_eq!(round_to_i8(y), y.round() as i8, "{y:e}");
        for n in -300..=300 {
            for base in [n as f32, n as f32 + 0.5] {
                let b = base.to_bits();
                for y in [
                    base,
                    f32::from_bits(b.wrapping_add(1)),
                    f32::from_bits(b.wrapping_sub(1)),
                ] {
                    check(y);
                }
            }
        }
        for y in [
            0.0,
            -0.0,
            0.499_999_97,
            -0.499_999_97,
            1e-40,
            4194304.5,
            8388607.5,
            3e9,
        ] {
            check(y);
        }
        for y in [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
        ] {
            check(y);
        }
    }

    /// [`round_to_i8`] on all $2^{32}$ f32 values (about 5 s in release on 2 cores: run with
    /// `cargo test --release -- --ignored round_to_i8`).
    #[test]
    #[ignore = "exhaustive, about 5 s in release on 2 cores"]
    fn round_to_i8_equals_round_on_every_f32() {
        let bad = (0..=u32::MAX)
            .into_par_iter()
            .filter(|&b| {
                let y = f32::from_bits(b);
                round_to_i8(y) != y.round() as i8
            })
            .count();
        assert_eq!(bad, 0);
    }

    /// The quants and scales are ggml's reference ones: candle's `from_float` (a port of
    /// `quantize_row_q8_0`) gives the same bytes for Q8_0; for Q8_1 the quants and scale agree
    /// and the sum is $\mathrm{f16}(\delta\sum_j q_j)$, computed here in f64 from the quants.
    #[test]
    fn activations_are_quantized_as_ggml_defines() {
        let x = acts(32 * 40, 3);
        let mut x = x;
        x[5] = 0.0;
        x[32..64].fill(0.0); // an all-zero block: scale 0, quants 0
        let got = quantize_rows(&x, false);
        assert_eq!(quantize_rows(&x, true), got, "in parallel");
        let mut c0 = vec![BlockQ8_0::zeros(); 40];
        BlockQ8_0::from_float(&x, &mut c0);
        let mut c1 = vec![BlockQ8_1::zeros(); 40];
        BlockQ8_1::from_float(&x, &mut c1);
        for b in 0..40 {
            // SAFETY: plain old data read as bytes.
            let b0: [u8; 34] = unsafe { std::mem::transmute_copy(&c0[b]) };
            let b1: [u8; 36] = unsafe { std::mem::transmute_copy(&c1[b]) };
            let qs: Vec<u8> = got.q[b * QK..(b + 1) * QK]
                .iter()
                .map(|&v| v as u8)
                .collect();
            assert_eq!(&b0[2..], &qs[..], "block {b}: quants");
            assert_eq!(&b1[4..], &qs[..], "block {b}: Q8_1 quants");
            let d0 = f16::from_le_bytes([b0[0], b0[1]]).to_f32();
            assert_eq!(got.d[b].to_bits(), d0.to_bits(), "block {b}: scale");
            let xb = &x[b * QK..(b + 1) * QK];
            let delta = xb.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            let sum: i32 = got.q[b * QK..(b + 1) * QK].iter().map(|&v| v as i32).sum();
            let want = f16::from_f32(sum as f32 * delta).to_f32();
            assert_eq!(got.s[b].to_bits(), want.to_bits(), "block {b}: sum");
            // The quants round x/δ: within half a step, in range.
            for (j, &q) in got.q[b * QK..(b + 1) * QK].iter().enumerate() {
                assert!((-127..=127).contains(&q));
                if delta > 0.0 {
                    assert!(
                        (xb[j] / delta - q as f32).abs() <= 0.5 + 1e-4,
                        "block {b} value {j}"
                    );
                }
            }
        }
        assert!(got.q[32..64].iter().all(|&q| q == 0) && got.d[1] == 0.0);
        // A NaN in a block: its scale is NaN (the products become NaN), the others unchanged.
        let mut xn = x.clone();
        xn[70] = f32::NAN;
        let gn = quantize_rows(&xn, false);
        assert!(gn.d[2].is_nan() && gn.s[2].is_nan());
        assert_eq!(gn.d[3].to_bits(), got.d[3].to_bits());
        let w = blocks(Simple::Q8_0, xn.len() / QK, 9);
        let y = matmul_t_rows(GgmlDType::Q8_0, &w, 1, xn.len(), &xn, 1, false).unwrap();
        assert!(
            y[0].is_nan(),
            "a NaN activation must give a NaN product, got {}",
            y[0]
        );
    }

    /// Each product equals its definition, $\sum_b (d_b\hat\delta_b)\sum_j v_j q_j + m_b s_b$,
    /// computed in f64 from candle's own decoding of the weights ($d_b v_j$ and $m_b$ read back
    /// through `to_float`), within the f32 rounding of the kernel: each block adds one product
    /// and one sum to a lane (`cols/32/8` blocks a lane), 8 lanes are summed and the minima add
    /// `cols/32` terms; bounded by $(2\cdot\mathrm{cols}/32 + 16)\thinspace u$ times the sum of
    /// the terms' magnitudes. The AVX2 and portable kernels give the same bits, and candle's
    /// `vec_dot` (llama.cpp's arithmetic, another summation order) agrees within the same bound
    /// (its Q8_1 sum rounds $\hat s = \mathrm{f16}(\mathrm{f16}(\sum q)\hat\delta)$ instead, within
    /// $2^{-10}|s|$ more per block, added to its bound).
    #[test]
    fn integer_dots_equal_their_definition_on_every_path() {
        println!("paths on this CPU: {:?}", Path::available());
        fn candle_dot<W: GgmlType>(w: &[u8], x: &[f32]) -> f32 {
            let w: Vec<W> = read(w);
            let mut xq = vec![W::VecDotType::zeros(); x.len() / W::VecDotType::BLCK_SIZE];
            W::VecDotType::from_float(x, &mut xq);
            W::vec_dot(x.len(), &w, &xq)
        }
        for (kind, cols) in [
            Simple::Q4_0,
            Simple::Q4_1,
            Simple::Q5_0,
            Simple::Q5_1,
            Simple::Q8_0,
        ]
        .into_iter()
        // 16 to 19 and 23 blocks a row: the kernels' remainders of 0 to 3 blocks (four at a
        // time) and of 0, 1, 2, 3 and 7 blocks (eight at a time, the one-row AVX2 kernel).
        .flat_map(|k| [512, 544, 576, 608, 736].map(|c| (k, c)))
        {
            let rows = 70;
            let nb = cols / QK;
            let w = blocks(kind, rows * nb, 11);
            let x = acts(11 * cols, 5);
            let a = quantize_rows(&x, false);
            let u = f32::EPSILON as f64 / 2.0;
            let tol_rel = (2.0 * nb as f64 + 16.0) * u;
            for r in 0..rows {
                let row = &w[r * nb * kind.block_bytes()..(r + 1) * nb * kind.block_bytes()];
                for i in 0..3 {
                    let mut want = 0f64;
                    let mut mag = 0f64;
                    let mut s_err = 0f64;
                    for (b, blk) in row.chunks_exact(kind.block_bytes()).enumerate() {
                        let v = block_values(kind, blk);
                        let qb = &a.q[(i * nb + b) * QK..(i * nb + b + 1) * QK];
                        let sumi: i64 = v.iter().zip(qb).map(|(&p, &q)| p as i64 * q as i64).sum();
                        let dd = f16_at(blk, 0) as f64 * a.d[i * nb + b] as f64;
                        want += dd * sumi as f64;
                        mag += (dd * sumi as f64).abs();
                        if kind.with_min() {
                            let ms = f16_at(blk, 2) as f64 * a.s[i * nb + b] as f64;
                            want += ms;
                            mag += ms.abs();
                            s_err += (f16_at(blk, 2) as f64 * a.s[i * nb + b] as f64).abs()
                                * 2f64.powi(-10);
                        }
                    }
                    let tol = tol_rel * mag + 1e-30;
                    let port = dot(kind, Path::Portable, row, &a, None, i, nb);
                    assert!(
                        (port as f64 - want).abs() <= tol,
                        "{kind:?} row {r} act {i}: {port} vs {want} (tol {tol:.2e})"
                    );
                    for path in Path::available() {
                        // The VNNI path with its lanes takes its own one-row kernel.
                        let l = (path == Path::Vnni).then(|| Lanes::of(kind, &a));
                        let fast = dot(kind, path, row, &a, l.as_ref(), i, nb);
                        assert_eq!(
                            fast.to_bits(),
                            port.to_bits(),
                            "{kind:?} row {r}: {path:?} differs"
                        );
                    }
                    if nb % 2 == 1 {
                        continue; // candle's `vec_dot` takes an even number of blocks only
                    }
                    let xi = &x[i * cols..(i + 1) * cols];
                    let c = match kind {
                        Simple::Q4_0 => candle_dot::<BlockQ4_0>(row, xi),
                        Simple::Q4_1 => candle_dot::<BlockQ4_1>(row, xi),
                        Simple::Q5_0 => candle_dot::<BlockQ5_0>(row, xi),
                        Simple::Q5_1 => candle_dot::<BlockQ5_1>(row, xi),
                        Simple::Q8_0 => candle_dot::<BlockQ8_0>(row, xi),
                    };
                    assert!(
                        (c as f64 - want).abs() <= 2.0 * tol + s_err,
                        "{kind:?} row {r} act {i}: candle {c} vs {want}"
                    );
                }
            }
            // Each path's blocked kernel (1 to ACTS rows at once) gives the per-row dot's bits;
            // t = 5 and 9 end on a lone row after whole groups of 4 and of 8.
            for (path, t) in Path::available()
                .into_iter()
                .flat_map(|p| [1, 5, 6, 9, 11].map(|t| (p, t)))
            {
                let out = simple_rows(kind, path, &w, rows, cols, &x[..t * cols], t, false);
                for r in 0..rows {
                    let rb = nb * kind.block_bytes();
                    for i in 0..t {
                        let want = dot(
                            kind,
                            Path::Portable,
                            &w[r * rb..(r + 1) * rb],
                            &a,
                            None,
                            i,
                            nb,
                        );
                        assert_eq!(
                            out[r * t + i].to_bits(),
                            want.to_bits(),
                            "{kind:?} {path:?}"
                        );
                    }
                }
            }
            // The whole product, in parallel or not, is the per-row dot.
            for par in [false, true] {
                let dt = match kind {
                    Simple::Q4_0 => GgmlDType::Q4_0,
                    Simple::Q4_1 => GgmlDType::Q4_1,
                    Simple::Q5_0 => GgmlDType::Q5_0,
                    Simple::Q5_1 => GgmlDType::Q5_1,
                    Simple::Q8_0 => GgmlDType::Q8_0,
                };
                // 3 rows: one partial group of the blocked kernels; 6 and 11: a whole group of
                // each and a part.
                for t in [1, 3, 6, 11] {
                    let out = matmul_t_rows(dt, &w, rows, cols, &x[..t * cols], t, par).unwrap();
                    for r in 0..rows {
                        let rb = nb * kind.block_bytes();
                        let row = &w[r * rb..(r + 1) * rb];
                        for i in 0..t {
                            let want = dot(kind, Path::Portable, row, &a, None, i, nb);
                            assert_eq!(out[r * t + i].to_bits(), want.to_bits(), "{kind:?} t={t}");
                        }
                    }
                }
            }
        }
        // A width that is not whole blocks, a float type, or a mismatched activation: refused.
        assert!(matmul_t_rows(GgmlDType::Q8_0, &[0; 34], 1, 33, &[0.0; 33], 1, false).is_none());
        assert!(matmul_t_rows(GgmlDType::F32, &[0; 128], 1, 32, &[0.0; 32], 1, false).is_none());
        assert!(matmul_t_rows(GgmlDType::Q8_0, &[0; 34], 1, 32, &[0.0; 31], 1, false).is_none());
    }
}
