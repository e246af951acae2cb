//! The host products of the reference model [`super::model`] (faer):
//! [`matmul`] / [`matmul_into`] for batch-wide products (on the caller's faer
//! `Par` above a size) and [`matmul_local`] for the small per-sequence ones.
//! Training itself runs its products on a [`crate::backend::Backend`]
//! ([`super::device`]).

use crate::backend::Real;
use faer::linalg::matmul::matmul as faer_matmul;
use faer::{Accum, Mat, MatMut, MatRef, Par};

/// Work (m·n·k) above which a product is split over threads; below it the
/// thread hand-off costs more than it saves (DESIGN.md: faer at n = 64 with
/// 2 threads is 10–20× slower than sequential).
const PAR_WORK: usize = 1 << 22;

/// `dst (+)= op(a) · op(b)`, `op` = transpose when the flag is set, on the caller's
/// parallelism `par` when the work reaches `PAR_WORK` (sequential below it). A caller
/// already inside a parallel loop passes `Par::Seq`.
pub fn matmul_into<F: Real>(
    dst: &mut Mat<F>,
    accumulate: bool,
    a: MatRef<'_, F>,
    b: MatRef<'_, F>,
    trans_a: bool,
    trans_b: bool,
    par: Par,
) {
    let a = if trans_a { a.transpose() } else { a };
    let b = if trans_b { b.transpose() } else { b };
    let work = a.nrows() * a.ncols() * b.ncols();
    let par = if work >= PAR_WORK { par } else { Par::Seq };
    let acc = if accumulate {
        Accum::Add
    } else {
        Accum::Replace
    };
    faer_matmul(dst.as_mut(), acc, a, b, F::from_f64(1.0), par);
    crate::linalg::clean_upper_state();
}

/// `op(a) · op(b)` as a new matrix (see [`matmul_into`] for `par`).
pub fn matmul<F: Real>(
    a: MatRef<'_, F>,
    b: MatRef<'_, F>,
    trans_a: bool,
    trans_b: bool,
    par: Par,
) -> Mat<F> {
    let m = if trans_a { a.ncols() } else { a.nrows() };
    let n = if trans_b { b.nrows() } else { b.ncols() };
    let mut c = Mat::zeros(m, n);
    matmul_into(&mut c, false, a, b, trans_a, trans_b, par);
    c
}

/// `dst (+)= a · b` on this thread, never split: the small per-sequence
/// products of attention (`T×T`), for which a thread hand-off costs more
/// than the product.
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
    crate::linalg::clean_upper_state();
}
