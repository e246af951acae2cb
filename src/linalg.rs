//! Dense linear algebra shared by every module: norms, SVD, softmax, cosines.
//!
//! Matrices are [`faer::Mat<f64>`] (row = token, column = feature, unless a
//! function says otherwise). Theorem checks use these f64 routines only.

pub use faer::Mat;
use faer::MatRef;

/// Clears the upper halves of the vector registers (`vzeroupper`) on an x86-64 CPU with AVX;
/// nothing elsewhere. No value changes.
///
/// faer's AVX-512 GEMM kernels return with that state dirty. On the Intel cores measured
/// (a Xeon with AMX), scalar SSE code on the same thread then pays a state transition at each
/// call into libm's VEX-encoded routines (`ln`, `exp`, `tanh`, `sincos`): the row-entropy loop
/// of `sinklab real` took 60 ms a head at $T = 907$ after a product and 1.9 ms after this call.
/// It follows each faer product of the CPU paths and starts the scalar loops that call libm.
#[inline]
pub fn clean_upper_state() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked on the line above).
        unsafe { zero_upper() }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn zero_upper() {
    std::arch::x86_64::_mm256_zeroupper()
}

/// Frobenius norm $\lVert W\rVert_F = (\sum_{ij} W_{ij}^2)^{1/2}$.
pub fn fro_norm(w: MatRef<'_, f64>) -> f64 {
    w.norm_l2()
}

/// [`singular_values_par`] on the calling thread (`Par::Seq`): for the many small
/// decompositions of a per-head loop, which itself runs in parallel.
pub fn singular_values_seq(w: MatRef<'_, f64>) -> Vec<f64> {
    singular_values_par(w, faer::Par::Seq)
}

/// Singular values of `w`, in non-increasing order: faer's SVD on the caller's parallelism
/// `par` (`Par::Seq` inside a parallel loop, `Par::rayon(k)` for one large matrix at top
/// level), the cyclic-Jacobi fallback when it does not converge.
///
/// Returns an empty vector for an empty matrix.
pub fn singular_values_par(w: MatRef<'_, f64>, par: faer::Par) -> Vec<f64> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::svd::{self, ComputeSvdVectors};
    let (m, n) = (w.nrows(), w.ncols());
    if m == 0 || n == 0 {
        return Vec::new();
    }
    let mut s = faer::diag::Diag::<f64>::zeros(m.min(n));
    let req = svd::svd_scratch::<f64>(
        m,
        n,
        ComputeSvdVectors::No,
        ComputeSvdVectors::No,
        par,
        Default::default(),
    );
    let mut buf = MemBuffer::new(req);
    let ok = svd::svd(
        w,
        s.as_mut(),
        None,
        None,
        par,
        MemStack::new(&mut buf),
        Default::default(),
    );
    let mut s: Vec<f64> = match ok {
        Ok(()) => s.column_vector().iter().copied().collect(),
        Err(_) => jacobi_singular_values(w),
    };
    s.sort_by(|a, b| b.total_cmp(a));
    s
}

/// The `r × r` upper-triangular factor $R$ of the thin QR $A = QR$ of an `n × r` matrix
/// (`r ≤ n`; Householder, on the calling thread).
pub fn thin_qr_r_seq(a: MatRef<'_, f64>) -> Mat<f64> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::qr::no_pivoting::factor;
    let (n, r) = (a.nrows(), a.ncols());
    let k = n.min(r);
    let mut work = a.to_owned();
    if k == 0 {
        return Mat::zeros(k, r);
    }
    let bs = factor::recommended_block_size::<f64>(n, r);
    let mut coeff = Mat::<f64>::zeros(bs, k);
    let par = faer::Par::Seq;
    let req = factor::qr_in_place_scratch::<f64>(n, r, bs, par, Default::default());
    let mut buf = MemBuffer::new(req);
    factor::qr_in_place(
        work.as_mut(),
        coeff.as_mut(),
        par,
        MemStack::new(&mut buf),
        Default::default(),
    );
    Mat::from_fn(k, r, |i, j| if j >= i { work[(i, j)] } else { 0.0 })
}

/// Fallback when faer's SVD does not converge: eigenvalues of $W^\top W$ by
/// cyclic Jacobi (slow, exact enough for the small matrices it is used on).
#[allow(clippy::needless_range_loop)] // index notation mirrors the Jacobi rotation formulas
fn jacobi_singular_values(w: MatRef<'_, f64>) -> Vec<f64> {
    let g = w.transpose() * w;
    let n = g.nrows();
    let mut a: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| g[(i, j)]).collect())
        .collect();
    for _sweep in 0..100 {
        let mut off = 0.0;
        for p in 0..n {
            for q in (p + 1)..n {
                off += a[p][q] * a[p][q];
                if a[p][q].abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let akp = a[k][p];
                    let akq = a[k][q];
                    a[k][p] = c * akp - s * akq;
                    a[k][q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let apk = a[p][k];
                    let aqk = a[q][k];
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
            }
        }
        if off < 1e-30 {
            break;
        }
    }
    (0..n).map(|i| a[i][i].max(0.0).sqrt()).collect()
}

/// Nuclear norm $\lVert W\rVert_\ast = \sum_k \sigma_k(W)$, the SVD on the caller's `par`
/// (see [`singular_values_par`]).
pub fn nuclear_norm(w: MatRef<'_, f64>, par: faer::Par) -> f64 {
    singular_values_par(w, par).iter().sum()
}

/// Spectral norm $\lVert W\rVert_2 = \sigma_{\max}(W)$, the SVD on the caller's `par`.
pub fn spectral_norm(w: MatRef<'_, f64>, par: faer::Par) -> f64 {
    singular_values_par(w, par).first().copied().unwrap_or(0.0)
}

/// Euclidean dot product of two equal-length slices.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    debug_assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Euclidean norm of a slice.
pub fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// Cosine similarity $a\cdot b / (\lVert a\rVert\lVert b\rVert)$; `None` when either vector is zero.
pub fn cosine(a: &[f64], b: &[f64]) -> Option<f64> {
    let na = norm(a);
    let nb = norm(b);
    if na == 0.0 || nb == 0.0 || !na.is_finite() || !nb.is_finite() {
        None
    } else {
        Some((dot(a, b) / (na * nb)).clamp(-1.0, 1.0))
    }
}

/// Numerically stable $\log\sum_j e^{z_j}$ (`-inf` for an empty slice).
pub fn logsumexp(z: &[f64]) -> f64 {
    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + z.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
}

/// Softmax of a slice, in place: $p_j = e^{z_j - \mathrm{lse}(z)}$.
/// Entries equal to `-inf` (masked) get probability 0.
pub fn softmax_in_place(z: &mut [f64]) {
    let lse = logsumexp(z);
    for v in z.iter_mut() {
        *v = (*v - lse).exp();
    }
}

/// Row `i` of a matrix as an owned vector.
pub fn row(m: MatRef<'_, f64>, i: usize) -> Vec<f64> {
    (0..m.ncols()).map(|j| m[(i, j)]).collect()
}

/// Builds a matrix from row vectors (all of equal length).
pub fn from_rows(rows: &[Vec<f64>]) -> Mat<f64> {
    let n = rows.len();
    let d = rows.first().map_or(0, Vec::len);
    Mat::from_fn(n, d, |i, j| rows[i][j])
}

/// $W x$ for a matrix and a slice.
pub fn matvec(w: MatRef<'_, f64>, x: &[f64]) -> Vec<f64> {
    debug_assert_eq!(w.ncols(), x.len());
    (0..w.nrows())
        .map(|i| (0..w.ncols()).map(|j| w[(i, j)] * x[j]).sum())
        .collect()
}

/// Bilinear form $x^\top W y$.
pub fn bilinear(x: &[f64], w: MatRef<'_, f64>, y: &[f64]) -> f64 {
    dot(x, &matvec(w, y))
}

/// Harmonic number $H_n = \sum_{k=1}^n 1/k$.
pub fn harmonic(n: usize) -> f64 {
    (1..=n).map(|k| 1.0 / k as f64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norms_of_a_known_matrix() {
        // diag(3, 4) rotated: singular values 4 and 3.
        let w = Mat::from_fn(2, 2, |i, j| [[3.0, 0.0], [0.0, -4.0]][i][j]);
        assert!((fro_norm(w.as_ref()) - 5.0).abs() < 1e-12);
        assert!((nuclear_norm(w.as_ref(), faer::Par::Seq) - 7.0).abs() < 1e-12);
        assert!((spectral_norm(w.as_ref(), faer::Par::rayon(2)) - 4.0).abs() < 1e-12);
        let j = jacobi_singular_values(w.as_ref());
        let mut j = j;
        j.sort_by(|a, b| b.total_cmp(a));
        assert!((j[0] - 4.0).abs() < 1e-12 && (j[1] - 3.0).abs() < 1e-12);
    }

    #[test]
    fn softmax_concentration_fixture() {
        // docs/theory.md §1: target ahead of m = 63 others by Δ = 10 gets 1/(1 + 63 e^{-10}).
        let mut z = vec![0.0; 64];
        z[0] = 10.0;
        softmax_in_place(&mut z);
        assert!((z[0] - 0.997_148_0).abs() < 5e-8, "{}", z[0]);
        let mut m = vec![0.0, f64::NEG_INFINITY];
        softmax_in_place(&mut m);
        assert_eq!(m, vec![1.0, 0.0]);
    }

    #[test]
    fn cosine_of_zero_is_none() {
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), None);
        assert!((cosine(&[1.0, 1.0], &[-2.0, -2.0]).unwrap() + 1.0).abs() < 1e-15);
    }
}
