//! The Frobenius program through its dual QP, by a primal–dual interior-point method on the
//! constraints' Gram matrix: the answer where the conic solver's QP stops without progress
//! (real inputs with nearly parallel rows, T ≥ 128).
//!
//! $\min\tfrac12\lVert W\rVert_F^2$ s.t. $\langle A_c, W\rangle \ge \Delta$ has the dual
//! $$ \max_{\lambda \ge 0}\ \Delta\mathbf 1^\top\lambda - \tfrac12\lambda^\top G\lambda, \qquad
//!    G_{cd} = \langle A_c, A_d\rangle = (e^q_{i_c}\cdot e^q_{i_d})\thinspace(b_c\cdot b_d), \quad W = \mathcal A^\ast\lambda, $$
//! $b_c = e^k_{t(i)} - e^k_j$, every entry gathered from the two $T \times T$ Gram matrices. Each
//! constraint is scaled to unit norm ($\lambda_c = \nu_c/\lVert A_c\rVert_F$, so the diagonal of the
//! scaled $G$ is 1). Mehrotra's predictor–corrector on $Q\nu - r - \zeta = 0$, $\nu \circ \zeta = \sigma\mu$:
//! $(Q + \mathrm{diag}(\zeta/\nu))\thinspace d\nu = \ldots$, one Cholesky factor of order $m$ an iteration.
//! As for every solver here, the caller rebuilds the certified bracket from $W$ and $\lambda$.

use super::*;
use faer::linalg::solvers::Solve;

const MAX_ITER: usize = 100;
/// Stopping rule: relative duality gap and residual (the certified bracket is what counts).
const TOL: f64 = 1e-12;
/// Fraction of the step to the boundary.
const STEP: f64 = 0.95;

/// The dual QP of the Frobenius program on the constraints `idx` of `p`: $W = \mathcal A^\ast\lambda$ and
/// $\lambda \ge 0$ over `idx`.
pub(super) fn raw(p: &GapProgram, idx: &[usize], par: Par) -> Result<super::ipm::Raw, String> {
    let (eq, ek) = p.reduced_or_identity();
    let m = idx.len();
    if m == 0 {
        return Err("dual QP: no constraint".into());
    }
    let gq = mm(eq.as_ref(), eq.transpose(), par);
    let gk = mm(ek.as_ref(), ek.transpose(), par);
    let cons = p.triples(idx);
    let bb = |c: (usize, usize, usize), d: (usize, usize, usize)| {
        gk[(c.1, d.1)] - gk[(c.1, d.2)] - gk[(c.2, d.1)] + gk[(c.2, d.2)]
    };
    let norms: Vec<f64> = cons
        .iter()
        .map(|&c| (gq[(c.0, c.0)] * bb(c, c)).max(0.0).sqrt())
        .collect();
    if norms.iter().any(|n| !(*n > 0.0 && n.is_finite())) {
        return Err("dual QP: a zero constraint".into());
    }
    // Q = D G D with D = diag(1/‖A_c‖), r_c = Δ/‖A_c‖ scaled to max 1.
    let mut q = Mat::<f64>::zeros(m, m);
    for d in 0..m {
        for c in d..m {
            let v = gq[(cons[c].0, cons[d].0)] * bb(cons[c], cons[d]) / (norms[c] * norms[d]);
            q[(c, d)] = v;
            q[(d, c)] = v;
        }
    }
    let rmax = norms.iter().map(|n| 1.0 / n).fold(0.0, f64::max);
    let r: Vec<f64> = norms.iter().map(|n| 1.0 / (n * rmax)).collect();
    let (nu, iterations) = solve_qp(&q, &r, par)?;
    // λ_c = ν_c/‖A_c‖ solves the program with gap 1/r_max·…: W = 𝒜*λ is rescaled by the caller.
    let lam: Vec<f64> = nu.iter().zip(&norms).map(|(v, n)| v / n).collect();
    let sub = p.subset(idx);
    Ok(super::ipm::Raw::Solved {
        w: sub.adjoint(&lam, par),
        lam,
        iterations: iterations as u32,
    })
}

/// Mehrotra's method for $\min_{\nu \ge 0}\tfrac12\nu^\top Q\nu - r^\top\nu$: $(\nu, \text{iterations})$.
fn solve_qp(q: &Mat<f64>, r: &[f64], par: Par) -> Result<(Vec<f64>, usize), String> {
    let m = r.len();
    let mut nu = vec![1.0; m];
    let mut zeta = vec![1.0; m];
    let matvec = |v: &[f64]| {
        let col = Mat::from_fn(m, 1, |c, _| v[c]);
        let out = mm(q.as_ref(), col.as_ref(), par);
        (0..m).map(|c| out[(c, 0)]).collect::<Vec<f64>>()
    };
    let max_step = super::nuclear_ipm::max_step_pos;
    let rnorm = 1.0 + linalg::norm(r);
    let mut best: (f64, Vec<f64>, usize) = (f64::INFINITY, nu.clone(), 0);
    for it in 0..MAX_ITER {
        let qn = matvec(&nu);
        let res: Vec<f64> = (0..m).map(|c| qn[c] - r[c] - zeta[c]).collect();
        let mu = linalg::dot(&nu, &zeta) / m as f64;
        let quad = linalg::dot(&nu, &qn);
        let pobj = 0.5 * quad - linalg::dot(r, &nu);
        let gap = m as f64 * mu / (1.0 + pobj.abs());
        let rinf = linalg::norm(&res) / rnorm;
        let score = gap.max(rinf);
        if score < best.0 {
            best = (score, nu.clone(), it);
        }
        if gap < TOL && rinf < TOL {
            return Ok((nu, it));
        }
        let mut h = q.clone();
        for c in 0..m {
            h[(c, c)] += zeta[c] / nu[c];
        }
        let Ok(f) = h.llt(faer::Side::Lower) else {
            return if best.0 < 1e-8 {
                Ok((best.1, it))
            } else {
                Err(format!("dual QP: singular Newton matrix at iteration {it}"))
            };
        };
        let solve = |target: &[f64]| {
            // (Q + Ζ/Ν) dν = −res + target/ν, dζ = (target − ζ dν)/ν.
            let mut rhs = Mat::from_fn(m, 1, |c, _| -res[c] + target[c] / nu[c]);
            f.solve_in_place(rhs.as_mut());
            let dn: Vec<f64> = (0..m).map(|c| rhs[(c, 0)]).collect();
            let dz: Vec<f64> = (0..m)
                .map(|c| (target[c] - zeta[c] * dn[c]) / nu[c])
                .collect();
            (dn, dz)
        };
        let aff: Vec<f64> = (0..m).map(|c| -nu[c] * zeta[c]).collect();
        let (dna, dza) = solve(&aff);
        let a = max_step(&nu, &dna).min(max_step(&zeta, &dza)).min(1.0);
        let mu_aff = (0..m)
            .map(|c| (nu[c] + a * dna[c]) * (zeta[c] + a * dza[c]))
            .sum::<f64>()
            / m as f64;
        let sigma = (mu_aff / mu).clamp(0.0, 1.0).powi(3);
        let target: Vec<f64> = (0..m)
            .map(|c| sigma * mu - nu[c] * zeta[c] - dna[c] * dza[c])
            .collect();
        let (dn, dz) = solve(&target);
        // One step for both: the residual Qν − r − ζ couples them.
        let step = (STEP * max_step(&nu, &dn).min(max_step(&zeta, &dz))).min(1.0);
        // NaN (a failed solve) counts as vanishing.
        if step.is_nan() || step <= 1e-12 {
            return if best.0 < 1e-8 {
                Ok((best.1, it))
            } else {
                Err(format!("dual QP: vanishing step at iteration {it}"))
            };
        }
        for c in 0..m {
            nu[c] += step * dn[c];
            zeta[c] += step * dz[c];
        }
    }
    Ok((best.1, MAX_ITER))
}

/// The Frobenius program on all its constraints by the dual QP alone, with the certified
/// bracket (what the working set does each round; a check against the conic solver's QP).
pub fn solve(p: &GapProgram, opts: SolveOptions) -> Result<CostSolution, String> {
    let idx: Vec<usize> = (0..p.n_constraints()).collect();
    let s = super::ipm::certify(p, NormKind::Fro, raw(p, &idx, opts.par)?, 0.0, opts.par)?;
    Ok(CostSolution {
        solver: Method::Ipm,
        ..s
    })
}
