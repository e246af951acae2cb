//! Gordan feasibility: the min-norm point of $\mathrm{conv}\lbrace A_c\rbrace$ is a witness or a
//! certificate of infeasibility (convex weights).

use super::*;

/// A certificate of infeasibility: convex weights on the constraints whose
/// combination $\sum_c \lambda_c A_c$ vanishes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Certificate {
    /// Non-zero weights `(query i, key j, λ)`, summing to 1.
    pub weights: Vec<(usize, usize, f64)>,
    /// $\lVert\sum_c \lambda_c A_c\rVert_F$, recomputed by plain arithmetic.
    pub residual: f64,
    /// $\max_c \lVert A_c\rVert_F$, the scale the residual is judged against.
    pub scale: f64,
    /// `residual <= 1e-6 · scale`.
    pub verified: bool,
}

/// Outcome of the feasibility test.
#[derive(Clone, Debug)]
pub enum Feasibility {
    /// A witness $W$ with every gap $> 0$ (checked).
    Feasible {
        /// The witness (reduced coordinates).
        witness: Mat<f64>,
        /// Its smallest gap.
        min_gap: f64,
    },
    /// Convex weights whose combination vanishes.
    Infeasible(Certificate),
}

pub(super) fn project_simplex(v: &mut [f64]) {
    let mut u: Vec<f64> = v.to_vec();
    u.sort_by(|a, b| b.total_cmp(a));
    let mut css = 0.0;
    let mut theta = 0.0;
    for (k, &uk) in u.iter().enumerate() {
        css += uk;
        let th = (css - 1.0) / (k + 1) as f64;
        if uk - th > 0.0 {
            theta = th;
        }
    }
    v.iter_mut().for_each(|x| *x = (*x - theta).max(0.0));
}

/// $Z = \mathcal A^\ast\lambda$: a witness when every gap $\langle A_c, Z\rangle$ is positive
/// (`Ok`), else `Err(Z)`; the products on the caller's `par`.
pub(super) fn combination(p: &GapProgram, lam: &[f64], par: Par) -> Result<Feasibility, Mat<f64>> {
    let z = p.adjoint(lam, par);
    let min_gap = p
        .forward(z.as_ref(), par)
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    if min_gap > 0.0 {
        Ok(Feasibility::Feasible {
            witness: z,
            min_gap,
        })
    } else {
        Err(z)
    }
}

/// Gordan test by FISTA on $\min_{\lambda \in \Delta^m} \tfrac12\lVert\mathcal A^\ast\lambda\rVert_F^2$,
/// the products on the caller's `par`.
pub fn feasibility(p: &GapProgram, max_iter: usize, par: Par) -> Result<Feasibility, CostError> {
    let m = p.n_constraints();
    let lip = p.op_norm * p.op_norm;
    let mut lam = vec![1.0 / m as f64; m];
    let mut y = lam.clone();
    let mut tk: f64 = 1.0;
    let scale = p.max_constraint_norm(par);
    for it in 0..max_iter {
        if it % 5 == 0 {
            match combination(p, &lam, par) {
                Ok(feasible) => return Ok(feasible),
                Err(z) if linalg::fro_norm(z.as_ref()) <= 1e-6 * scale => break,
                Err(_) => {}
            }
        }
        let zy = p.adjoint(&y, par);
        let grad = p.forward(zy.as_ref(), par);
        let mut next: Vec<f64> = y.iter().zip(&grad).map(|(a, g)| a - g / lip).collect();
        project_simplex(&mut next);
        let t1 = (1.0 + (1.0 + 4.0 * tk * tk).sqrt()) / 2.0;
        y = next
            .iter()
            .zip(&lam)
            .map(|(n, o)| n + (tk - 1.0) / t1 * (n - o))
            .collect();
        lam = next;
        tk = t1;
    }
    let z = match combination(p, &lam, par) {
        Ok(feasible) => return Ok(feasible),
        Err(z) => z,
    };
    let residual = linalg::fro_norm(z.as_ref());
    if residual <= 1e-4 * scale {
        let weights = p
            .cons
            .iter()
            .zip(&lam)
            .filter(|(_, l)| **l > 0.0)
            .map(|(&(i, j), &l)| (i as usize, j as usize, l))
            .collect();
        Ok(Feasibility::Infeasible(Certificate {
            weights,
            residual,
            scale,
            verified: residual <= 1e-6 * scale,
        }))
    } else {
        Err(CostError::Undetermined(max_iter, residual / scale))
    }
}
