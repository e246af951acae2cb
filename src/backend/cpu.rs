//! CPU backend: faer matmuls, plain loops for the row-wise and elementwise
//! kernels (the row reductions and exponentials through the slice primitives
//! of [`super::real`]), generic over f64 and f32 ([`Real`]).
//!
//! Parallelism: faer with 2 threads is 10–20× *slower* than sequential at
//! n = 64 on the 2-core machine, so a matmul runs sequentially unless its
//! flop count $m n k$ reaches [`SPLIT_MIN_MNK`]. Above it the rows of `C` (or
//! the matrices of a batch) are split into as many blocks as the backend's thread count
//! ([`Cpu::with_threads`], the caller's `--threads`), run as tasks on the rayon pool the
//! caller runs in, each block a
//! sequential faer product (faer's own parallel kernel is never used here: its
//! crossover [`PAR_MIN_MNK`], measured in `benches/backend.rs` and BENCHMARKS.md, is
//! 16× higher and its barriers spin on a shared machine); a batch against one shared matrix is first stacked
//! into one product. Parallelism otherwise belongs at the sweep level.

use std::marker::PhantomData;

use faer::{Accum, MatMut, MatRef, Par};

use super::real::{dot_lanes, max_lanes, sum_lanes};
use super::{
    AdamWHyper, Backend, BackendError, Op, Real, Result, Shape, SoftmaxMask, check_embed,
    check_len, check_same, check_xent, matmul_dims,
};

/// Smallest $m n k$ for which a matmul uses faer's rayon parallelism.
///
/// Measured on the 2-core AVX-512 machine (f64 and f32, square n): sequential
/// wins clearly at n ≤ 128 and the two are within noise at n = 256, so the
/// threshold sits at $256^3$.
pub const PAR_MIN_MNK: usize = 256 * 256 * 256;

/// Smallest $m n k$ for which [`Cpu`]'s products split their output rows over the threads
/// (each block a sequential product, no barrier inside: worth it from about 10 µs of work,
/// an order of magnitude below [`PAR_MIN_MNK`], which was measured for faer's own parallel
/// kernel).
pub const SPLIT_MIN_MNK: usize = 1 << 20;

/// A batch of row-major matrices in host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTensor<T> {
    data: Vec<T>,
    shape: Shape,
}

impl<T: Real> CpuTensor<T> {
    /// Wraps row-major, batch-major data.
    pub fn from_vec(shape: Shape, data: Vec<T>) -> Result<Self> {
        check_len(shape, data.len())?;
        Ok(Self { data, shape })
    }
    /// Shape of the batch.
    pub fn shape(&self) -> Shape {
        self.shape
    }
    /// All elements, row-major, batch-major.
    pub fn as_slice(&self) -> &[T] {
        &self.data
    }
    /// All elements, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.data
    }
    /// Matrix `b` of the batch as a faer view.
    pub fn mat(&self, b: usize) -> MatRef<'_, T> {
        let l = self.shape.mat_len();
        MatRef::from_row_major_slice(
            &self.data[b * l..(b + 1) * l],
            self.shape.rows,
            self.shape.cols,
        )
    }
    /// Matrix `b` of the batch as a mutable faer view.
    pub fn mat_mut(&mut self, b: usize) -> MatMut<'_, T> {
        let l = self.shape.mat_len();
        let (r, c) = (self.shape.rows, self.shape.cols);
        MatMut::from_row_major_slice_mut(&mut self.data[b * l..(b + 1) * l], r, c)
    }
}

/// The faer backend in precision `T` (`Cpu::<f64>` for reference runs,
/// `Cpu::<f32>` to compare like with like against the GPU), with the number of threads
/// its large products are split over.
#[derive(Clone, Copy, Debug)]
pub struct Cpu<T> {
    threads: usize,
    _t: PhantomData<T>,
}

impl<T> Cpu<T> {
    /// The CPU backend on one thread: every product sequential on the calling thread.
    pub const fn new() -> Self {
        Self::with_threads(1)
    }

    /// The CPU backend splitting its products of [`SPLIT_MIN_MNK`] and more over `threads`
    /// blocks (the caller's thread count, e.g. `--threads`; 0 counts as 1). The blocks run as
    /// tasks of the rayon pool the calling thread is in; values do not depend on `threads`.
    pub const fn with_threads(threads: usize) -> Self {
        Self {
            threads: if threads == 0 { 1 } else { threads },
            _t: PhantomData,
        }
    }

    /// The thread count the products are split over.
    pub const fn threads(&self) -> usize {
        self.threads
    }

    /// Threads a product of $m n k$ multiply-adds runs on: all of [`Cpu::threads`] at
    /// [`SPLIT_MIN_MNK`] and above (and when `C` has rows to split), else one.
    fn threads_for(&self, m: usize, n: usize, k: usize) -> usize {
        if m >= 2 && m.saturating_mul(n).saturating_mul(k) >= SPLIT_MIN_MNK {
            self.threads
        } else {
            1
        }
    }
}

impl<T> Default for Cpu<T> {
    /// [`Cpu::new`]: one thread.
    fn default() -> Self {
        Self::new()
    }
}

/// `C ← α A B + β C` through faer, the rows of `C` split into `threads` blocks that run as
/// independent sequential products on the rayon pool (β = 0 overwrites, so `C` may hold
/// anything; `k = 0` gives `β C`). Splitting the output, not faer's own parallel kernel: a
/// block is a whole product with no barrier inside, so a thread that is descheduled delays
/// only its block (faer's spinning barriers took a third of a step on a shared machine).
fn gemm<T: Real>(
    c: MatMut<'_, T>,
    alpha: f64,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: f64,
    threads: usize,
) {
    let m = c.nrows();
    if threads <= 1 || m < 2 {
        return gemm_seq(c, alpha, a, b, beta);
    }
    let blocks = row_blocks(c, m.div_ceil(threads));
    use rayon::prelude::*;
    blocks.into_par_iter().for_each(|(r0, blk)| {
        let n = blk.nrows();
        gemm_seq(blk, alpha, a.subrows(r0, n), b, beta);
    });
}

/// `c` cut into consecutive blocks of `step` rows (the last may be shorter), each with the
/// index of its first row: disjoint views that threads may write at once.
pub fn row_blocks<T>(c: MatMut<'_, T>, step: usize) -> Vec<(usize, MatMut<'_, T>)> {
    let m = c.nrows();
    let mut blocks = Vec::with_capacity(m.div_ceil(step.max(1)));
    let mut rest = c;
    let mut r0 = 0;
    while r0 < m {
        let n = step.min(m - r0);
        let (blk, tail) = rest.split_at_row_mut(n);
        blocks.push((r0, blk));
        rest = tail;
        r0 += n;
    }
    blocks
}

fn gemm_seq<T: Real>(
    mut c: MatMut<'_, T>,
    alpha: f64,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    beta: f64,
) {
    let accum = if beta == 0.0 {
        Accum::Replace
    } else {
        if beta != 1.0 {
            let bt = T::from_f64(beta);
            for j in 0..c.ncols() {
                for i in 0..c.nrows() {
                    c[(i, j)] = bt * c[(i, j)];
                }
            }
        }
        Accum::Add
    };
    if a.ncols() == 0 {
        if beta == 0.0 {
            c.fill(T::from_f64(0.0));
        }
        return;
    }
    faer::linalg::matmul::matmul(c, accum, a, b, T::from_f64(alpha), Par::Seq);
    crate::linalg::clean_upper_state();
}

impl<T: Real> Backend for Cpu<T> {
    type Elem = T;
    type Tensor = CpuTensor<T>;

    fn describe(&self) -> String {
        format!("cpu (faer, {})", T::NAME)
    }

    fn shape(&self, t: &CpuTensor<T>) -> Shape {
        t.shape
    }

    fn zeros(&self, shape: Shape) -> Result<CpuTensor<T>> {
        Ok(CpuTensor {
            data: vec![T::from_f64(0.0); shape.len()],
            shape,
        })
    }

    fn write(&self, t: &mut CpuTensor<T>, data: &[T]) -> Result<()> {
        check_len(t.shape, data.len())?;
        t.data.copy_from_slice(data);
        Ok(())
    }

    fn read(&self, t: &CpuTensor<T>) -> Result<Vec<T>> {
        Ok(t.data.clone())
    }

    fn matmul(
        &self,
        alpha: f64,
        a: &CpuTensor<T>,
        op_a: Op,
        b: &CpuTensor<T>,
        op_b: Op,
        beta: f64,
        c: &mut CpuTensor<T>,
    ) -> Result<()> {
        let (m, n, k) = matmul_dims(a.shape, op_a, b.shape, op_b, c.shape)?;
        let batch = c.shape.batch;
        // A batch of activations times one shared matrix, `C_b = A_b op(B)` with `A` not
        // transposed: the batch's rows stacked, one `(batch·m) × k` product instead of `batch`
        // small ones (same sums, one call, and threads when the stacked product is large).
        if batch > 1 && a.shape.batch == batch && b.shape.batch == 1 && op_a == Op::N {
            let am = MatRef::from_row_major_slice(&a.data, batch * m, k);
            let bm = b.mat(0);
            let bm = if op_b == Op::T { bm.transpose() } else { bm };
            let cm = MatMut::from_row_major_slice_mut(&mut c.data, batch * m, n);
            gemm(cm, alpha, am, bm, beta, self.threads_for(batch * m, n, k));
            return Ok(());
        }
        let one = |bi: usize, cd: &mut [T], threads: usize| {
            let ai = if a.shape.batch == 1 { 0 } else { bi };
            let bj = if b.shape.batch == 1 { 0 } else { bi };
            let am = a.mat(ai);
            let bm = b.mat(bj);
            let am = if op_a == Op::T { am.transpose() } else { am };
            let bm = if op_b == Op::T { bm.transpose() } else { bm };
            let cm = MatMut::from_row_major_slice_mut(cd, m, n);
            gemm(cm, alpha, am, bm, beta, threads);
        };
        let len = c.shape.mat_len();
        if len == 0 {
            return Ok(());
        }
        // Independent products of one batch: spread over the threads when their total is
        // large, each product sequential (small products lose to threads inside faer).
        let total = batch.saturating_mul(m).saturating_mul(n).saturating_mul(k);
        if batch > 1 && total >= SPLIT_MIN_MNK && self.threads > 1 {
            use rayon::prelude::*;
            c.data
                .par_chunks_mut(len)
                .enumerate()
                .for_each(|(bi, cd)| one(bi, cd, 1));
        } else {
            let threads = self.threads_for(m, n, k);
            for (bi, cd) in c.data.chunks_mut(len).enumerate() {
                one(bi, cd, threads);
            }
        }
        Ok(())
    }

    fn softmax_rows(
        &self,
        x: &CpuTensor<T>,
        scale: f64,
        mask: SoftmaxMask,
        y: &mut CpuTensor<T>,
    ) -> Result<()> {
        check_same("softmax_rows", x.shape, y.shape)?;
        let (rows, cols) = (x.shape.rows, x.shape.cols);
        let s = T::from_f64(scale);
        let zero = T::from_f64(0.0);
        if cols == 0 {
            return Ok(());
        }
        for (r, (xr, yr)) in x
            .data
            .chunks_exact(cols)
            .zip(y.data.chunks_exact_mut(cols))
            .enumerate()
        {
            let (lo, vis) = mask.visible(r % rows, cols);
            if lo >= vis {
                yr.fill(zero);
                continue;
            }
            let live = &mut yr[lo..vis];
            for (o, &v) in live.iter_mut().zip(&xr[lo..vis]) {
                *o = s * v;
            }
            let mx = max_lanes(live);
            for o in live.iter_mut() {
                *o -= mx;
            }
            T::exp_in_place(live);
            let sum = sum_lanes(live);
            for o in live.iter_mut() {
                *o /= sum;
            }
            yr[..lo].fill(zero);
            yr[vis..].fill(zero);
        }
        Ok(())
    }

    fn softmax_rows_backward(
        &self,
        y: &CpuTensor<T>,
        dy: &CpuTensor<T>,
        scale: f64,
        dx: &mut CpuTensor<T>,
    ) -> Result<()> {
        check_same("softmax_rows_backward", y.shape, dy.shape)?;
        check_same("softmax_rows_backward", y.shape, dx.shape)?;
        let cols = y.shape.cols;
        if cols == 0 {
            return Ok(());
        }
        let s = T::from_f64(scale);
        let rows = y.data.chunks_exact(cols).zip(dy.data.chunks_exact(cols));
        for ((yr, dyr), dxr) in rows.zip(dx.data.chunks_exact_mut(cols)) {
            let dot = dot_lanes(yr, dyr);
            for ((o, &a), &b) in dxr.iter_mut().zip(yr).zip(dyr) {
                *o = s * a * (b - dot);
            }
        }
        Ok(())
    }

    fn axpby(&self, a: f64, x: &CpuTensor<T>, b: f64, y: &mut CpuTensor<T>) -> Result<()> {
        check_same("axpby", x.shape, y.shape)?;
        let (a, bt) = (T::from_f64(a), T::from_f64(b));
        if b == 0.0 {
            for (o, &v) in y.data.iter_mut().zip(&x.data) {
                *o = a * v;
            }
        } else {
            for (o, &v) in y.data.iter_mut().zip(&x.data) {
                *o = a * v + bt * *o;
            }
        }
        Ok(())
    }

    fn adamw(
        &self,
        h: &AdamWHyper,
        t: u64,
        p: &mut CpuTensor<T>,
        g: &CpuTensor<T>,
        m: &mut CpuTensor<T>,
        v: &mut CpuTensor<T>,
    ) -> Result<()> {
        check_same("adamw", p.shape, g.shape)?;
        check_same("adamw", p.shape, m.shape)?;
        check_same("adamw", p.shape, v.shape)?;
        adamw_update(h, t, &mut p.data, &g.data, &mut m.data, &mut v.data);
        Ok(())
    }

    fn embed(
        &self,
        emb: &CpuTensor<T>,
        pos: &CpuTensor<T>,
        ids: &CpuTensor<T>,
        out: &mut CpuTensor<T>,
    ) -> Result<()> {
        check_embed("embed", emb.shape, pos.shape, ids.shape, out.shape)?;
        let (t, d) = (ids.shape.rows, out.shape.cols);
        for (r, &id) in ids.data.iter().enumerate() {
            let v = token_id(id, emb.shape.rows)?;
            let (e, p) = (&emb.data[v * d..(v + 1) * d], &pos.data[(r % t) * d..][..d]);
            for ((o, &a), &b) in out.data[r * d..(r + 1) * d].iter_mut().zip(e).zip(p) {
                *o = a + b;
            }
        }
        Ok(())
    }

    fn embed_backward(
        &self,
        dh: &CpuTensor<T>,
        ids: &CpuTensor<T>,
        d_emb: &mut CpuTensor<T>,
        d_pos: &mut CpuTensor<T>,
    ) -> Result<()> {
        check_embed(
            "embed_backward",
            d_emb.shape,
            d_pos.shape,
            ids.shape,
            dh.shape,
        )?;
        let (t, d) = (ids.shape.rows, dh.shape.cols);
        let zero = T::from_f64(0.0);
        d_emb.data.fill(zero);
        d_pos.data.fill(zero);
        for (r, &id) in ids.data.iter().enumerate() {
            let v = token_id(id, d_emb.shape.rows)?;
            let g = &dh.data[r * d..(r + 1) * d];
            for (o, &x) in d_emb.data[v * d..(v + 1) * d].iter_mut().zip(g) {
                *o += x;
            }
            for (o, &x) in d_pos.data[(r % t) * d..][..d].iter_mut().zip(g) {
                *o += x;
            }
        }
        Ok(())
    }

    fn relu(&self, x: &CpuTensor<T>, y: &mut CpuTensor<T>) -> Result<()> {
        check_same("relu", x.shape, y.shape)?;
        let zero = T::from_f64(0.0);
        for (o, &v) in y.data.iter_mut().zip(&x.data) {
            *o = if v > zero { v } else { zero };
        }
        Ok(())
    }

    fn relu_backward(
        &self,
        x: &CpuTensor<T>,
        dy: &CpuTensor<T>,
        dx: &mut CpuTensor<T>,
    ) -> Result<()> {
        check_same("relu_backward", x.shape, dy.shape)?;
        check_same("relu_backward", x.shape, dx.shape)?;
        let zero = T::from_f64(0.0);
        for ((o, &v), &g) in dx.data.iter_mut().zip(&x.data).zip(&dy.data) {
            *o = if v > zero { g } else { zero };
        }
        Ok(())
    }

    fn softmax_xent(
        &self,
        logits: &CpuTensor<T>,
        targets: &CpuTensor<T>,
        coef: &CpuTensor<T>,
        dlogits: &mut CpuTensor<T>,
        loss: &mut CpuTensor<T>,
    ) -> Result<()> {
        check_xent(
            logits.shape,
            targets.shape,
            coef.shape,
            dlogits.shape,
            loss.shape,
        )?;
        let cols = logits.shape.cols;
        let zero = T::from_f64(0.0);
        for r in 0..loss.data.len() {
            let (z, dz) = (
                &logits.data[r * cols..(r + 1) * cols],
                &mut dlogits.data[r * cols..(r + 1) * cols],
            );
            let c = coef.data[r];
            if c == zero || cols == 0 {
                dz.fill(zero);
                loss.data[r] = zero;
                continue;
            }
            let y = token_id(targets.data[r], cols)?;
            // The same passes as `softmax_rows`: lane maximum, vectorised exp, lane sum.
            let mx = max_lanes(z);
            for (o, &v) in dz.iter_mut().zip(z) {
                *o = v - mx;
            }
            T::exp_in_place(dz);
            let sum = sum_lanes(dz);
            let p_y = dz[y] / sum;
            for o in dz.iter_mut() {
                *o = *o / sum * c;
            }
            dz[y] = (p_y - T::from_f64(1.0)) * c;
            let lse = mx.to_f64() + sum.to_f64().ln();
            loss.data[r] = c * T::from_f64(lse - z[y].to_f64());
        }
        Ok(())
    }

    /// A no-op: each CPU op has finished when it returns.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn reshape(&self, t: &mut CpuTensor<T>, shape: Shape) -> Result<()> {
        check_len(t.shape, shape.len())?;
        t.shape = shape;
        Ok(())
    }
}

/// The AdamW update of [`Backend::adamw`] on host slices (equal lengths, any
/// layout: the update is elementwise) at step `t ≥ 1`:
/// $m \leftarrow \beta_1 m + (1-\beta_1) g$, $v \leftarrow \beta_2 v + (1-\beta_2) g^2$,
/// $p \leftarrow p - \eta\thinspace\big(\hat m/(\sqrt{\hat v}+\epsilon) + \lambda p\big)$.
/// The one definition of the optimiser: [`Cpu`] runs it on its tensors and
/// `train::adamw` on the host reference model's matrices (the GPU kernel
/// `adamw.wgsl` computes the same expression).
pub fn adamw_update<T: Real>(
    h: &AdamWHyper,
    t: u64,
    p: &mut [T],
    g: &[T],
    m: &mut [T],
    v: &mut [T],
) {
    assert!(
        g.len() == p.len() && m.len() == p.len() && v.len() == p.len(),
        "adamw_update: slices of unequal length"
    );
    let c = AdamWCoeffs::new(h, t);
    let f = T::from_f64;
    let (b1, b2, ib1, ib2) = (f(h.beta1), f(h.beta2), f(1.0 - h.beta1), f(1.0 - h.beta2));
    let (lr, eps, wd, c1, c2) = (
        f(h.lr),
        f(h.eps),
        f(h.weight_decay),
        f(c.inv_bc1),
        f(c.inv_bc2),
    );
    for i in 0..p.len() {
        let gi = g[i];
        let mi = b1 * m[i] + ib1 * gi;
        let vi = b2 * v[i] + ib2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        let step = (mi * c1) / ((vi * c2).sqrt() + eps) + wd * p[i];
        p[i] -= lr * step;
    }
}

/// An id stored as a tensor value, checked to be an integer in `0..n`.
fn token_id<T: Real>(x: T, n: usize) -> Result<usize> {
    let v = x.to_f64();
    if v >= 0.0 && v.fract() == 0.0 && (v as usize) < n {
        Ok(v as usize)
    } else {
        Err(BackendError::Shape {
            op: "token id",
            detail: format!("{v} is not an integer in 0..{n}"),
        })
    }
}

/// Bias corrections of AdamW at step `t`: $1/(1-\beta_1^t)$, $1/(1-\beta_2^t)$.
pub(crate) struct AdamWCoeffs {
    pub inv_bc1: f64,
    pub inv_bc2: f64,
}

impl AdamWCoeffs {
    pub fn new(h: &AdamWHyper, t: u64) -> Self {
        let t = t.max(1) as f64;
        Self {
            inv_bc1: 1.0 / (1.0 - h.beta1.powf(t)),
            inv_bc2: 1.0 / (1.0 - h.beta2.powf(t)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic entries in [-1, 1) (an LCG), so the test needs no RNG crate.
    fn filled(shape: Shape, seed: u64) -> CpuTensor<f64> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let data = (0..shape.len())
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
            })
            .collect();
        CpuTensor::from_vec(shape, data).unwrap()
    }

    /// The three paths of `matmul` above [`SPLIT_MIN_MNK`] (a batch against one shared matrix,
    /// a batch of independent products, one product split by rows) give the same bits on 1, 2
    /// and 3 threads (each output row is one sequential faer product whatever the split), and
    /// match a plain triple loop to f64 rounding ($k = 64$ terms of size ≤ 1: 1e-12 absolute).
    #[test]
    fn split_products_do_not_depend_on_the_thread_count() {
        let (m, k, n) = (150, 64, 120);
        let cases = [
            (Shape::new(4, m, k), Shape::new(1, k, n)),
            (Shape::new(4, m, k), Shape::new(4, k, n)),
            (Shape::new(1, 2 * m, k), Shape::new(1, k, n)),
        ];
        for (sa, sb) in cases {
            assert!(sa.batch.max(1) * sa.rows * k * n >= SPLIT_MIN_MNK);
            let (a, b) = (filled(sa, 1), filled(sb, 2));
            let run = |threads: usize| {
                let be = Cpu::<f64>::with_threads(threads);
                let mut c = be.zeros(Shape::new(sa.batch, sa.rows, n)).unwrap();
                be.matmul(1.0, &a, Op::N, &b, Op::N, 0.0, &mut c).unwrap();
                c
            };
            let one = run(1);
            for threads in [2, 3] {
                assert_eq!(run(threads).as_slice(), one.as_slice(), "{threads} threads");
            }
            for bi in 0..sa.batch {
                let bj = if sb.batch == 1 { 0 } else { bi };
                let (am, bm, cm) = (a.mat(bi), b.mat(bj), one.mat(bi));
                for i in 0..sa.rows {
                    for j in 0..n {
                        let want: f64 = (0..k).map(|l| am[(i, l)] * bm[(l, j)]).sum();
                        assert!((cm[(i, j)] - want).abs() < 1e-12, "({bi}, {i}, {j})");
                    }
                }
            }
        }
        assert_eq!(Cpu::<f64>::with_threads(0).threads(), 1);
        assert_eq!(Cpu::<f64>::default().threads(), 1);
    }
}
