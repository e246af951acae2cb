//! The dense kernels training needs, in one place, so a GPU backend can
//! replace them: [`matmul`] (with optional transposes) and the scalar trait.

use faer::linalg::matmul::matmul as faer_matmul;
use faer::{Accum, Mat, MatMut, MatRef, Par};

/// The scalar of training: `f32` (speed) or `f64` (gradient checks).
pub trait Real:
    faer::traits::RealField + Copy + Send + Sync + Default + std::fmt::Debug + 'static
{
    /// Conversion from f64.
    fn from_f64(v: f64) -> Self;
    /// Conversion to f64.
    fn to_f64(self) -> f64;
    /// $e^x$.
    fn exp(self) -> Self;
    /// $\ln x$.
    fn ln(self) -> Self;
    /// $\sqrt x$.
    fn sqrt(self) -> Self;
    /// `dst (+)= op(a) · op(b)` on the GPU routed to this thread
    /// ([`crate::backend::route`]), if any; `false`: compute it on the CPU.
    fn routed_matmul(
        _dst: &mut Mat<Self>,
        _accumulate: bool,
        _a: MatRef<'_, Self>,
        _b: MatRef<'_, Self>,
        _trans_a: bool,
        _trans_b: bool,
    ) -> bool {
        false
    }
    /// Whether [`Real::routed_matmul`] would send this thread's products to a
    /// GPU (the model then keeps its products on this thread, unsplit).
    fn routing_active() -> bool {
        false
    }
}

impl Real for f32 {
    fn routing_active() -> bool {
        crate::backend::route::active()
    }

    fn routed_matmul(
        dst: &mut Mat<f32>,
        accumulate: bool,
        a: MatRef<'_, f32>,
        b: MatRef<'_, f32>,
        trans_a: bool,
        trans_b: bool,
    ) -> bool {
        crate::backend::route::matmul_f32(dst.as_mut(), accumulate, a, trans_a, b, trans_b)
    }

    fn from_f64(v: f64) -> Self {
        v as f32
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
}

impl Real for f64 {
    fn from_f64(v: f64) -> Self {
        v
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

/// Work (m·n·k) above which a product is split over threads; below it the
/// thread hand-off costs more than it saves (DESIGN.md: faer at n = 64 with
/// 2 threads is 10–20× slower than sequential).
const PAR_WORK: usize = 1 << 22;

/// `dst (+)= op(a) · op(b)`, `op` = transpose when the flag is set.
pub fn matmul_into<F: Real>(
    dst: &mut Mat<F>,
    accumulate: bool,
    a: MatRef<'_, F>,
    b: MatRef<'_, F>,
    trans_a: bool,
    trans_b: bool,
) {
    if F::routed_matmul(dst, accumulate, a, b, trans_a, trans_b) {
        return;
    }
    let a = if trans_a { a.transpose() } else { a };
    let b = if trans_b { b.transpose() } else { b };
    let work = a.nrows() * a.ncols() * b.ncols();
    let par = if work >= PAR_WORK && rayon::current_thread_index().is_none() {
        Par::rayon(0)
    } else {
        Par::Seq
    };
    let acc = if accumulate {
        Accum::Add
    } else {
        Accum::Replace
    };
    faer_matmul(dst.as_mut(), acc, a, b, F::from_f64(1.0), par);
}

/// `op(a) · op(b)` as a new matrix.
pub fn matmul<F: Real>(a: MatRef<'_, F>, b: MatRef<'_, F>, trans_a: bool, trans_b: bool) -> Mat<F> {
    let m = if trans_a { a.ncols() } else { a.nrows() };
    let n = if trans_b { b.nrows() } else { b.ncols() };
    let mut c = Mat::zeros(m, n);
    matmul_into(&mut c, false, a, b, trans_a, trans_b);
    c
}

/// `dst (+)= a · b` on this thread's CPU, never routed nor split: the small
/// per-sequence products of attention (`T×T`), for which a device round trip
/// or a thread hand-off costs more than the product.
pub fn matmul_local<F: Real>(
    dst: MatMut<'_, F>,
    accumulate: bool,
    a: MatRef<'_, F>,
    b: MatRef<'_, F>,
) {
    let acc = if accumulate {
        Accum::Add
    } else {
        Accum::Replace
    };
    faer_matmul(dst, acc, a, b, F::from_f64(1.0), Par::Seq);
}
