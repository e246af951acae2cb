//! The one scalar trait of the crate's dense numerics, [`Real`] (`f32` for
//! speed, `f64` for references and gradient checks): what the backends
//! compute in and what the host reference model of `train::model` is generic
//! over. Also the slice primitives the CPU kernels and the host model share:
//! the vectorisable f32 exponential [`exp_f32`] behind [`Real::exp_in_place`],
//! and reductions in [`LANES`] partial results ([`sum_lanes`], [`dot_lanes`],
//! [`max_lanes`]).

use std::fmt;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, Neg, Sub, SubAssign};

/// Real scalars the backends compute in (f32 and f64).
pub trait Real:
    faer::traits::RealField
    + Copy
    + Send
    + Sync
    + Default
    + fmt::Debug
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + DivAssign
    + bytemuck::Pod
    + 'static
{
    /// `"f32"` or `"f64"`.
    const NAME: &'static str;
    /// Unit roundoff scale (machine epsilon) of the type.
    const EPS: f64;
    /// Rounds an f64 to this type.
    fn from_f64(x: f64) -> Self;
    /// Widens to f64.
    fn to_f64(self) -> f64;
    /// $e^x$ in this type's precision.
    fn exp(self) -> Self;
    /// $\ln x$ in this type's precision.
    fn ln(self) -> Self;
    /// $\sqrt{x}$ in this type's precision.
    fn sqrt(self) -> Self;
    /// $x \leftarrow e^x$ element by element (the softmaxes' exponentials).
    fn exp_in_place(xs: &mut [Self]) {
        for x in xs {
            *x = x.exp();
        }
    }
}

impl Real for f64 {
    const NAME: &'static str = "f64";
    const EPS: f64 = f64::EPSILON;
    fn from_f64(x: f64) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn ln(self) -> Self {
        f64::ln(self)
    }
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
}

impl Real for f32 {
    const NAME: &'static str = "f32";
    const EPS: f64 = f32::EPSILON as f64;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn exp(self) -> Self {
        f32::exp(self)
    }
    fn ln(self) -> Self {
        f32::ln(self)
    }
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    fn exp_in_place(xs: &mut [f32]) {
        super::simd::exp_in_place(xs);
    }
}

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

/// Lanes of the element-wise reductions below: independent partial results
/// that the compiler keeps in SIMD registers (a single running sum would be a
/// chain of dependent scalar additions).
pub const LANES: usize = 8;

/// $\sum_k x_k$, summed in [`LANES`] interleaved partial sums.
pub fn sum_lanes<F: Real>(xs: &[F]) -> F {
    let zero = F::from_f64(0.0);
    let mut acc = [zero; LANES];
    let mut it = xs.chunks_exact(LANES);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    let mut s = zero;
    for &x in it.remainder() {
        s += x;
    }
    acc.iter().fold(s, |s, &a| s + a)
}

/// $\sum_k x_k y_k$ over the common length, in [`LANES`] partial sums.
pub fn dot_lanes<F: Real>(xs: &[F], ys: &[F]) -> F {
    let zero = F::from_f64(0.0);
    let n = xs.len().min(ys.len());
    let (xs, ys) = (&xs[..n], &ys[..n]);
    let mut acc = [zero; LANES];
    let (mut xi, mut yi) = (xs.chunks_exact(LANES), ys.chunks_exact(LANES));
    for (c, d) in (&mut xi).zip(&mut yi) {
        for ((a, &x), &y) in acc.iter_mut().zip(c).zip(d) {
            *a += x * y;
        }
    }
    let mut s = zero;
    for (&x, &y) in xi.remainder().iter().zip(yi.remainder()) {
        s += x * y;
    }
    acc.iter().fold(s, |s, &a| s + a)
}

/// $\max_k x_k$ ($-\infty$ for an empty slice).
pub fn max_lanes<F: Real>(xs: &[F]) -> F {
    let mut acc = [F::from_f64(f64::NEG_INFINITY); LANES];
    let mut it = xs.chunks_exact(LANES);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = if x > *a { x } else { *a };
        }
    }
    let mut m = F::from_f64(f64::NEG_INFINITY);
    for &x in it.remainder().iter().chain(&acc) {
        if x > m {
            m = x;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
