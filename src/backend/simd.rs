//! Element-wise f32 slice kernels shared by the training backend ([`super::Cpu`]) and the
//! real-model forward (`runtime::forward`): the exponential, a row softmax, SiLU and tanh-GELU, and
//! a log-sum-exp, each a loop of plain arithmetic over [`exp_f32`] that the compiler vectorises.
//!
//! **Dispatch.** Each public function picks, at run time, a copy of the same loop compiled for
//! AVX-512F (16 lanes) or AVX2 (8 lanes) when the CPU has it (`is_x86_feature_detected!`, a
//! cached flag), else the crate's baseline (SSE2 on x86-64, NEON on aarch64). The copies
//! perform the same operations in the same order, and Rust never contracts `a * b + c` into an
//! FMA, so every copy returns the same bits: a result does not depend on the machine.
//!
//! **Accuracy.** [`exp_f32`] is within 1 ulp of $e^x$ wherever the result is a normal f32
//! (test `exp_f32_is_within_one_ulp`); the kernels below add one rounding per operation on top.

/// $e^x$ in f32 from arithmetic and bit operations only, so that a loop over a
/// slice vectorises (libm's `expf` is one call per element). Cody–Waite
/// reduction $x = n\ln 2 + r$, $|r| \le \tfrac12\ln 2$, with $\ln 2$ split in two,
/// and Cephes' degree-6 polynomial for $e^r$ (about 1 ulp); $2^n$ is built in
/// the exponent bits (two factors, so the product stays exact). Results below the smallest normal f32 ($x < -87.34$)
/// are flushed to 0 (libm returns subnormals there); $x > 88.72$ gives $+\infty$,
/// NaN stays NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LO: f32 = -87.336_55;
    const HI: f32 = 88.722_83;
    // 1.5·2^23: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let xc = x.clamp(LO, HI);
    let t = xc * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    let ni = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let r = xc - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // 2^n as two normal factors (n runs from -126 to 128, 2^128 overflows).
    let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    let e = y * pow2(ni >> 1) * pow2(ni - (ni >> 1));
    if x < LO {
        0.0
    } else if x > HI {
        f32::INFINITY
    } else if x.is_nan() {
        x
    } else {
        e
    }
}

/// Runs `$body` (a call of an `#[inline(always)]` loop) in a copy compiled for the best
/// vector extension the CPU has. It `return`s from the calling function: use it as a
/// function's whole body.
macro_rules! dispatch {
    ($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $body:expr) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f")]
            unsafe fn wide($($arg: $ty),*) -> $ret {
                $body
            }
            #[target_feature(enable = "avx2")]
            unsafe fn avx2($($arg: $ty),*) -> $ret {
                $body
            }
            if std::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has just been found to support AVX-512F.
                return unsafe { wide($($arg),*) };
            }
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has just been found to support AVX2.
                return unsafe { avx2($($arg),*) };
            }
        }
        $body
    }};
}

#[cfg(feature = "runtime")] // the quantized kernels of `quant` dispatch with it
pub(crate) use dispatch;

/// Independent partial results kept by the reductions (one per vector lane at AVX-512 width).
const W: usize = 16;

/// $x_i \leftarrow e^{x_i}$ for every element.
pub fn exp_in_place(xs: &mut [f32]) {
    dispatch!(exp_in_place(xs: &mut [f32]) -> () = map_loop(xs, exp_f32))
}

/// $x_i \leftarrow f(x_i)$ for every element (the body each element-wise kernel dispatches).
#[inline(always)]
fn map_loop(xs: &mut [f32], f: impl Fn(f32) -> f32) {
    for x in xs {
        *x = f(*x);
    }
}

/// $u_i \leftarrow u_i \cdot f(g_i)$ (the body of the gated MLP kernels).
#[inline(always)]
fn gated_loop(up: &mut [f32], gate: &[f32], f: impl Fn(f32) -> f32) {
    for (u, &g) in up.iter_mut().zip(gate) {
        *u *= f(g);
    }
}

/// $\max_i x_i$ in [`W`] partial maxima ($-\infty$ for an empty slice; NaN elements are
/// skipped, as `f32::max` skips them).
#[inline(always)]
fn max_loop(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; W];
    let mut it = xs.chunks_exact(W);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = if x > *a { x } else { *a };
        }
    }
    it.remainder()
        .iter()
        .chain(&acc)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}

/// $x_i \leftarrow e^{x_i - m}$ and the sum of the results, in [`W`] f32 partial sums.
#[inline(always)]
fn exp_shift_sum_loop(xs: &mut [f32], m: f32) -> f32 {
    let mut acc = [0f32; W];
    let mut it = xs.chunks_exact_mut(W);
    for c in &mut it {
        for (a, x) in acc.iter_mut().zip(c) {
            *x = exp_f32(*x - m);
            *a += *x;
        }
    }
    let mut s = 0f32;
    for x in it.into_remainder() {
        *x = exp_f32(*x - m);
        s += *x;
    }
    acc.iter().fold(s, |s, &a| s + a)
}

/// $x \leftarrow \operatorname{softmax}(x)$, $x_i = e^{x_i - m} / \sum_j e^{x_j - m}$ with
/// $m = \max_j x_j$: one pass for the maximum, one fused pass for the exponentials and their
/// sum, one scaling pass by $1/\sum$. Returns $\log\sum_j e^{x_j}$ of the input (f64:
/// $m + \ln \sum$), which the cross-entropy needs. An empty slice returns $-\infty$.
pub fn softmax_in_place(xs: &mut [f32]) -> f64 {
    dispatch!(softmax_in_place(xs: &mut [f32]) -> f64 = softmax_loop(xs))
}

#[inline(always)]
fn softmax_loop(xs: &mut [f32]) -> f64 {
    if xs.is_empty() {
        return f64::NEG_INFINITY;
    }
    let m = max_loop(xs);
    let s = exp_shift_sum_loop(xs, m);
    let inv = 1.0 / s;
    for x in xs.iter_mut() {
        *x *= inv;
    }
    m as f64 + (s as f64).ln()
}

/// $\log \sum_i e^{x_i}$ without changing `xs`: the exponentials $e^{x_i - m}$ in f32
/// (through `scratch`, resized as needed), their sum accumulated in f64 over [`W`] lanes, so a
/// 150 000-word vocabulary loses no more than the f32 rounding of each term.
pub fn log_sum_exp(xs: &[f32], scratch: &mut Vec<f32>) -> f64 {
    scratch.clear();
    scratch.extend_from_slice(xs);
    let s: &mut [f32] = scratch;
    dispatch!(log_sum_exp(s: &mut [f32]) -> f64 = lse_loop(s))
}

/// `(m, Σ e^{x_i - m})` of `xs` (overwritten by the exponentials), the sum in f64.
fn lse_parts(xs: &mut [f32]) -> (f64, f64) {
    dispatch!(lse_parts(xs: &mut [f32]) -> (f64, f64) = lse_parts_loop(xs))
}

#[inline(always)]
fn lse_parts_loop(xs: &mut [f32]) -> (f64, f64) {
    let m = max_loop(xs);
    if m == f32::NEG_INFINITY {
        return (f64::NEG_INFINITY, 0.0);
    }
    for x in xs.iter_mut() {
        *x = exp_f32(*x - m);
    }
    let mut acc = [0f64; W];
    let mut it = xs.chunks_exact(W);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x as f64;
        }
    }
    let s = it.remainder().iter().fold(0f64, |s, &x| s + x as f64);
    (m as f64, acc.iter().fold(s, |s, &a| s + a))
}

#[inline(always)]
fn lse_loop(xs: &mut [f32]) -> f64 {
    let (m, s) = lse_parts_loop(xs);
    m + s.ln()
}

/// The running log-sum-exp of a vocabulary visited in tiles: `(m, s)` with
/// $\log\sum = m + \ln s$; [`lse_update`] merges one more tile's values in, rescaling
/// $s \leftarrow s\thinspace e^{m_{old} - m_{new}}$ (f64) when the maximum grows.
pub fn lse_update(state: (f64, f64), tile: &[f32], scratch: &mut Vec<f32>) -> (f64, f64) {
    scratch.clear();
    scratch.extend_from_slice(tile);
    let (mt, st) = lse_parts(scratch);
    let (m, s) = state;
    if mt == f64::NEG_INFINITY {
        return state;
    }
    if mt > m {
        (mt, s * (m - mt).exp() + st)
    } else {
        (m, s + st * (mt - m).exp())
    }
}

/// $u_i \leftarrow u_i \cdot \operatorname{SiLU}(g_i)$, $\operatorname{SiLU}(g) = g / (1 + e^{-g})$
/// (the gated MLP); `gate` as long as `up`.
pub fn silu_mul(up: &mut [f32], gate: &[f32]) {
    assert_eq!(up.len(), gate.len(), "silu_mul: lengths differ");
    dispatch!(silu_mul(up: &mut [f32], gate: &[f32]) -> () = gated_loop(up, gate, silu))
}

#[inline(always)]
fn silu(g: f32) -> f32 {
    g / (1.0 + exp_f32(-g))
}

/// $x_i \leftarrow \operatorname{SiLU}(x_i)$.
pub fn silu_in_place(xs: &mut [f32]) {
    dispatch!(silu_in_place(xs: &mut [f32]) -> () = map_loop(xs, silu))
}

/// $\tanh y = 1 - 2/(e^{2y} + 1)$ from [`exp_f32`]: absolute error a few f32 ulps of 1
/// (relative error grows as $|y| \to 0$, where $\tanh y \approx y$; callers add it to 1).
#[inline(always)]
fn tanh_abs(y: f32) -> f32 {
    1.0 - 2.0 / (exp_f32(2.0 * y) + 1.0)
}

/// $\operatorname{GELU}\_{\tanh}(x) = \tfrac12 x\big(1 + \tanh(\sqrt{2/\pi}(x + 0.044715x^3))\big)$
/// (PyTorch's `gelu(approximate="tanh")`).
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
    0.5 * x * (1.0 + tanh_abs(C * (x + 0.044715 * x * x * x)))
}

/// $u_i \leftarrow u_i \cdot \operatorname{GELU}\_{\tanh}(g_i)$ (Gemma's gated MLP).
pub fn gelu_tanh_mul(up: &mut [f32], gate: &[f32]) {
    assert_eq!(up.len(), gate.len(), "gelu_tanh_mul: lengths differ");
    dispatch!(gelu_tanh_mul(up: &mut [f32], gate: &[f32]) -> () = gated_loop(up, gate, gelu_tanh))
}

/// $x_i \leftarrow \operatorname{GELU}\_{\tanh}(x_i)$.
pub fn gelu_tanh_in_place(xs: &mut [f32]) {
    dispatch!(gelu_tanh_in_place(xs: &mut [f32]) -> () = map_loop(xs, gelu_tanh))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Real;

    /// The vectorisable f32 exponential against f64's, over the whole range
    /// where f32 has normal results: within 1 ulp of the exact value (measured 0.96).
    #[test]
    fn exp_f32_is_within_one_ulp() {
        let mut worst: f64 = 0.0;
        let n = 400_000;
        for k in 0..=n {
            let x = -87.3f32 + (88.7f32 + 87.3) * k as f32 / n as f32;
            let want = (x as f64).exp();
            let got = exp_f32(x) as f64;
            let ulp = (want as f32).to_bits();
            let ulp = (f32::from_bits(ulp + 1) - f32::from_bits(ulp)) as f64;
            worst = worst.max((got - want).abs() / ulp);
        }
        assert!(worst <= 1.0, "worst error {worst} ulp");
        let mut xs = [
            0.0f32,
            -1e-30,
            1.0,
            -88.0,
            -1e4,
            89.0,
            f32::NEG_INFINITY,
            f32::INFINITY,
        ];
        f32::exp_in_place(&mut xs);
        assert_eq!(&xs[..3], &[1.0, 1.0, std::f32::consts::E]);
        assert_eq!(&xs[3..], &[0.0, 0.0, f32::INFINITY, 0.0, f32::INFINITY]);
        assert!(exp_f32(f32::NAN).is_nan());
        // The dispatched slice loop gives exactly the element-wise values.
        let mut ys: Vec<f32> = (0..1003).map(|k| -90.0 + 0.179 * k as f32).collect();
        let want: Vec<u32> = ys.iter().map(|&y| exp_f32(y).to_bits()).collect();
        f32::exp_in_place(&mut ys);
        assert_eq!(ys.iter().map(|y| y.to_bits()).collect::<Vec<_>>(), want);
    }

    fn seeded(n: usize, lo: f32, hi: f32, seed: u64) -> Vec<f32> {
        // SplitMix64: a fixed sequence, no RNG state shared with anything else.
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                lo + (hi - lo) * ((z >> 40) as f32 / (1u64 << 24) as f32)
            })
            .collect()
    }

    /// Softmax against the f64 definition: each probability within a few f32 roundings
    /// (max, one exp ≤ 1 ulp, a sum of n terms ≤ n·u relative, one product) of the exact one,
    /// and the returned log-sum-exp within n·u of the f64 value.
    #[test]
    fn softmax_matches_f64_definition() {
        for (n, seed) in [(1usize, 1u64), (7, 2), (16, 3), (513, 4), (49_152, 5)] {
            let x = seeded(n, -30.0, 30.0, seed);
            let mut y = x.clone();
            let lse = softmax_in_place(&mut y);
            let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
            let s: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
            let want_lse = m + s.ln();
            let u = f32::EPSILON as f64 / 2.0;
            assert!(
                (lse - want_lse).abs() <= (n as f64 + 4.0) * u * want_lse.abs().max(1.0),
                "n = {n}: lse {lse} vs {want_lse}"
            );
            for (&yi, &xi) in y.iter().zip(&x) {
                let want = (xi as f64 - want_lse).exp();
                let tol = (n as f64 + 8.0) * u * want + f32::MIN_POSITIVE as f64;
                assert!((yi as f64 - want).abs() <= tol, "n = {n}: {yi} vs {want}");
            }
            let total: f64 = y.iter().map(|&v| v as f64).sum();
            assert!(
                (total - 1.0).abs() <= (2.0 * n as f64 + 8.0) * u,
                "sum {total}"
            );
        }
        assert_eq!(softmax_in_place(&mut []), f64::NEG_INFINITY);
        // A masked entry (−∞) gets probability 0; the others renormalise.
        let mut z = [0.0, f32::NEG_INFINITY, 0.0];
        softmax_in_place(&mut z);
        assert_eq!(z, [0.5, 0.0, 0.5]);
    }

    /// The f64-accumulated log-sum-exp and its tiled form agree with the f64 definition to the
    /// f32 rounding of each term (relative u per term, so u on the sum), far tighter than an
    /// f32 running sum over 150 000 terms would allow.
    #[test]
    fn log_sum_exp_whole_and_tiled() {
        let x = seeded(150_000, -20.0, 12.0, 9);
        let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let want = m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
        let mut scratch = Vec::new();
        let got = log_sum_exp(&x, &mut scratch);
        let tol = 4.0 * f32::EPSILON as f64;
        assert!((got - want).abs() <= tol, "{got} vs {want}");
        let mut st = (f64::NEG_INFINITY, 0.0);
        for tile in x.chunks(4096) {
            st = lse_update(st, tile, &mut scratch);
        }
        assert!((st.0 + st.1.ln() - want).abs() <= tol);
        assert_eq!(
            log_sum_exp(&[f32::NEG_INFINITY; 3], &mut scratch),
            f64::NEG_INFINITY
        );
    }

    /// SiLU and tanh-GELU against their f64 definitions over [−40, 40]: SiLU within 3 ulps
    /// relative (one exp, one add, one divide); GELU within 3·2⁻²⁴·|x| absolute (the tanh from
    /// `exp` is exact to a few ulps of 1, which the factor ½x scales).
    #[test]
    fn activations_match_f64_definitions() {
        let g = seeded(20_000, -40.0, 40.0, 11);
        let mut up = vec![1f32; g.len()];
        silu_mul(&mut up, &g);
        let mut s2 = g.clone();
        silu_in_place(&mut s2);
        assert_eq!(up, s2);
        for (&gi, &yi) in g.iter().zip(&up) {
            let x = gi as f64;
            let want = x / (1.0 + (-x).exp());
            let tol = 3.0 * f32::EPSILON as f64 * want.abs() + 1e-37;
            assert!(
                (yi as f64 - want).abs() <= tol,
                "silu({gi}) = {yi}, want {want}"
            );
        }
        let mut up = vec![2f32; g.len()];
        gelu_tanh_mul(&mut up, &g);
        let mut g2 = g.clone();
        gelu_tanh_in_place(&mut g2);
        for ((&gi, &yi), &zi) in g.iter().zip(&up).zip(&g2) {
            assert_eq!(yi, 2.0 * zi);
            let x = gi as f64;
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let want = 0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh());
            let tol = 3.0 * f32::EPSILON as f64 * (x.abs() + want.abs());
            assert!(
                (zi as f64 - want).abs() <= tol,
                "gelu({gi}) = {zi}, want {want}"
            );
        }
    }

    /// Every dispatched copy is the same loop: the dispatched kernels give exactly the bits of
    /// the element-wise baseline ([`exp_f32`]) on the machine running the test.
    #[test]
    fn dispatch_is_bitwise_the_baseline() {
        let x = seeded(1003, -100.0, 100.0, 13);
        let mut y = x.clone();
        exp_in_place(&mut y);
        let want: Vec<u32> = x.iter().map(|&v| exp_f32(v).to_bits()).collect();
        assert_eq!(y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
        let mut up = vec![1f32; x.len()];
        silu_mul(&mut up, &x);
        let want: Vec<u32> = x.iter().map(|&v| silu(v).to_bits()).collect();
        assert_eq!(up.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
    }
}
