//! The one scalar trait of the crate's dense numerics, [`Real`] (`f32` for
//! speed, `f64` for references and gradient checks): what the backends
//! compute in and what the host reference model of `train::model` is generic
//! over. Also the slice primitives the CPU kernels and the host model share:
//! reductions in [`LANES`] partial results ([`sum_lanes`], [`dot_lanes`],
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

/// The [`Real`] methods that are the standard library's inherent ones of type `$t`.
macro_rules! std_math {
    ($t:ty) => {
        fn exp(self) -> Self {
            <$t>::exp(self)
        }
        fn ln(self) -> Self {
            <$t>::ln(self)
        }
        fn sqrt(self) -> Self {
            <$t>::sqrt(self)
        }
    };
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
    std_math!(f64);
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
    std_math!(f32);
    fn exp_in_place(xs: &mut [f32]) {
        super::simd::exp_in_place(xs);
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
