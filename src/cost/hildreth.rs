//! Hildreth's dual coordinate ascent: an independent Frobenius solver for cross-checks.

use super::*;

/// Frobenius program by dual coordinate ascent (Hildreth's method), an
/// algorithm independent of [`solve`], for cross-checks on small cases:
/// $\lambda_c \leftarrow \max(0, \lambda_c + (\Delta - \langle A_c, W\rangle)/\lVert A_c\rVert_F^2)$,
/// $W = \sum_c \lambda_c A_c$. Returns (‖W‖_F, smallest gap / Δ) after `sweeps` sweeps.
pub fn fro_by_coordinate_ascent(p: &GapProgram, sweeps: usize) -> (f64, f64) {
    let (rq, rk) = p.dim();
    let (eq, ek) = p.e.clone().unwrap_or_else(|| {
        let id = Mat::from_fn(p.t, p.t, |i, j| if i == j { 1.0 } else { 0.0 });
        (id.clone(), id)
    });
    let mut w = Mat::<f64>::zeros(rq, rk);
    let mut lam = vec![0.0; p.n_constraints()];
    for _ in 0..sweeps {
        for (c, &(i, j)) in p.cons.iter().enumerate() {
            let (i, j) = (i as usize, j as usize);
            let ti = p.targets[i].unwrap_or(i);
            let a: Vec<f64> = (0..rq).map(|k| eq[(i, k)]).collect();
            let bvec: Vec<f64> = (0..rk).map(|k| ek[(ti, k)] - ek[(j, k)]).collect();
            let na = linalg::dot(&a, &a) * linalg::dot(&bvec, &bvec);
            if na <= 0.0 {
                continue;
            }
            let val = linalg::bilinear(&a, w.as_ref(), &bvec);
            let new = (lam[c] + (p.delta - val) / na).max(0.0);
            let step = new - lam[c];
            lam[c] = new;
            if step != 0.0 {
                for x in 0..rq {
                    for y in 0..rk {
                        w[(x, y)] += step * a[x] * bvec[y];
                    }
                }
            }
        }
    }
    let gmin = p
        .forward(w.as_ref(), Par::Seq)
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    (linalg::fro_norm(w.as_ref()), gmin / p.delta)
}

/// Solver options of the closed-form checks (tight gap, generous budget).
pub(super) const CHECK_OPTS: SolveOptions = SolveOptions {
    rel_gap: 1e-4,
    max_iter: 50_000,
    feas_iter: 5_000,
    par: Par::Seq,
    method: Method::FirstOrder,
};

/// A random instance of the closed-form checks: (T, Δ ∈ [1, 10), pattern, embedding seed).
pub(super) fn check_instance(
    rng: &mut StdRng,
    t: std::ops::RangeInclusive<usize>,
) -> (usize, f64, Pattern, u64) {
    use rand::RngExt;
    let t = rng.random_range(t);
    let delta = rng.random_range(1.0..10.0);
    let pattern = if rng.random::<bool>() {
        Pattern::Sink
    } else {
        Pattern::Diagonal
    };
    (t, delta, pattern, rng.random())
}

/// Cross-check of a Frobenius solution `f` of `p` against Hildreth's coordinate ascent
/// (4000 sweeps): returns the slacks (validity, agreement) and Hildreth's (‖W‖_F, gap/Δ).
/// Hildreth's W rescaled by 1/gap is feasible, so its norm can never undercut the certified
/// lower end (validity of `solve`'s bound, rounding 1e-9); after 4000 sweeps it is within 1e-3
/// of the optimum, so it must not exceed the certified upper end by more than that (agreement
/// of two independent algorithms).
pub(super) fn hildreth_slacks(p: &GapProgram, f: &CostSolution) -> (f64, f64, f64, f64) {
    let (gl, gu) = (f.lower.unwrap_or(0.0), f.value.unwrap_or(f64::INFINITY));
    let (hv, hgap) = fro_by_coordinate_ascent(p, 4000);
    let hf = hv / hgap;
    (
        (hf - gl) / gu + 1e-9,
        (gu * (1.0 + 1e-3) - hf) / gu,
        hv,
        hgap,
    )
}
