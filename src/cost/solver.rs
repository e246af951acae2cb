//! The Chambolle–Pock primal–dual solver with its certified bracket
//! [dual lower bound, rescaled feasible primal].

use super::*;

/// Solver options.
#[derive(Clone, Copy, Debug)]
pub struct SolveOptions {
    /// Stop when (upper − lower)/upper ≤ `rel_gap`.
    pub rel_gap: f64,
    /// Iteration budget of the primal–dual solver.
    pub max_iter: usize,
    /// Iteration budget of the feasibility test.
    pub feas_iter: usize,
    /// The caller's faer parallelism for the solver's products and SVDs: `Par::Seq` (the
    /// default) inside a parallel sweep, `Par::rayon(k)` for one large program at top level.
    pub par: Par,
    /// Which solver runs first: the interior-point method (falls back to the first-order
    /// solver beyond its size caps or on failure) or the first-order solver alone.
    pub method: Method,
}

/// The solver behind a value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Interior-point conic solver (Clarabel): Frobenius as a QP, nuclear as an SDP
    /// (needs the `ipm` feature).
    Ipm,
    /// Chambolle–Pock primal–dual iterations (always available).
    #[default]
    FirstOrder,
    /// The interior-point bracket tightened by the first-order solver (both certified: the
    /// larger lower end and the smaller upper end).
    #[cfg_attr(feature = "cli", value(skip))]
    IpmAndFirstOrder,
    /// The interior-point solver on a working set of constraints grown by the violated ones
    /// (Frobenius beyond its dense cap, nuclear beyond the SDP cap by the structured method of
    /// [`super::nuclear_ipm`]; see [`super::working_set`]).
    #[cfg_attr(feature = "cli", value(skip))]
    IpmWorkingSet,
}

impl Method {
    /// The CLI's default: the interior-point solver when the crate is built with it.
    pub const fn preferred() -> Self {
        if cfg!(feature = "ipm") {
            Method::Ipm
        } else {
            Method::FirstOrder
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::Ipm => "ipm",
            Method::FirstOrder => "first-order",
            Method::IpmAndFirstOrder => "ipm+first-order",
            Method::IpmWorkingSet => "ipm-working-set",
        })
    }
}

impl Default for SolveOptions {
    fn default() -> Self {
        Self {
            rel_gap: 1e-3,
            max_iter: 20_000,
            feas_iter: 5_000,
            par: Par::Seq,
            method: Method::FirstOrder,
        }
    }
}

/// A solved cost program.
#[derive(Clone, Debug, Serialize)]
pub struct CostSolution {
    /// The minimal cost (the certified upper end of the bracket); `None` when infeasible.
    pub value: Option<f64>,
    /// Certified lower bound from the dual iterate.
    pub lower: Option<f64>,
    /// Relative duality gap (upper − lower)/upper.
    pub rel_gap: Option<f64>,
    /// Whether the gap constraints can be met.
    pub feasible: bool,
    /// Infeasibility certificate.
    pub certificate: Option<Certificate>,
    /// Primal–dual iterations used.
    pub iterations: usize,
    /// Gap Δ.
    pub delta: f64,
    /// Number of constraints.
    pub constraints: usize,
    /// Rank of the optimum (singular values above 1e-6·σ_max).
    pub rank: Option<usize>,
    /// The solver that produced the bracket (or the certificate).
    pub solver: Method,
    /// Why the interior-point solver was asked for but did not produce the value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// The optimal logits matrix is not stored (large); its Frobenius norm for reference.
    #[serde(skip)]
    pub w: Option<Mat<f64>>,
}

pub(super) fn prox_nuclear(w: MatRef<'_, f64>, tau: f64, par: Par) -> Result<Mat<f64>, CostError> {
    let svd = w.thin_svd().map_err(|_| CostError::Svd)?;
    let s = svd.S().column_vector();
    let keep: Vec<usize> = (0..s.nrows()).filter(|&k| s[k] > tau).collect();
    let u = Mat::from_fn(w.nrows(), keep.len(), |i, c| {
        svd.U()[(i, keep[c])] * (s[keep[c]] - tau)
    });
    let v = Mat::from_fn(keep.len(), w.ncols(), |c, j| svd.V()[(j, keep[c])]);
    Ok(mm(u.as_ref(), v.as_ref(), par))
}

/// Solves $\min \lVert W\rVert$ subject to the gap constraints, with a certified bracket.
///
/// The nuclear program is warm-started from the Frobenius optimum $(W_F, \lambda_F)$:
/// $W_F$ is feasible, so $\lVert W_F\rVert_\ast$ is an upper bound; $\lVert W\rVert_\ast \ge \lVert W\rVert_F$ makes the
/// Frobenius lower end a nuclear lower end; and $\lambda_F/\lVert\mathcal A^\ast\lambda_F\rVert_2$ is
/// dual-feasible for the nuclear program.
///
/// With [`Method::Ipm`] the interior-point solver runs first (see [`super::ipm`]); beyond its
/// size caps, on a solver failure, or when its bracket is wider than `opts.rel_gap`, the
/// first-order solver runs, and the reason is recorded in [`CostSolution::fallback`].
pub fn solve(
    p: &GapProgram,
    kind: NormKind,
    opts: SolveOptions,
) -> Result<CostSolution, CostError> {
    match opts.method {
        Method::FirstOrder => solve_with_dual(p, kind, opts).map(|(s, _)| s),
        Method::Ipm | Method::IpmAndFirstOrder | Method::IpmWorkingSet => {
            solve_ipm_first(p, kind, opts)
        }
    }
}

#[cfg(not(feature = "ipm"))]
fn solve_ipm_first(
    p: &GapProgram,
    kind: NormKind,
    opts: SolveOptions,
) -> Result<CostSolution, CostError> {
    let (s, _) = solve_with_dual(p, kind, opts)?;
    Ok(CostSolution {
        fallback: Some("built without the `ipm` feature".into()),
        ..s
    })
}

#[cfg(feature = "ipm")]
fn solve_ipm_first(
    p: &GapProgram,
    kind: NormKind,
    opts: SolveOptions,
) -> Result<CostSolution, CostError> {
    let first_order = |why: String| -> Result<CostSolution, CostError> {
        let (s, _) = solve_with_dual(p, kind, opts)?;
        Ok(CostSolution {
            fallback: Some(why),
            ..s
        })
    };
    let s = match super::ipm::solve(p, kind, opts) {
        Ok(s) => s,
        // Frobenius beyond the dense cap: constraint generation over the same solver.
        Err(why) if kind == NormKind::Fro && p.e.is_some() => {
            match super::working_set::solve(p, kind, opts) {
                Ok(s) => s,
                Err(w) => return first_order(format!("{why}; {w}")),
            }
        }
        // Nuclear beyond the SDP cap: the Frobenius program by the interior-point solver (direct
        // or by a working set) settles feasibility — a certificate, or a point with every gap
        // ≥ Δ — and, as ‖W‖_* ≥ ‖W‖_F, its lower end bounds the nuclear optimum too. The
        // nuclear program is then solved by the structured interior-point method over a working
        // set; where that fails, by the first-order iterations started from the Frobenius optimum.
        Err(why) if kind == NormKind::Nuclear => {
            let fro = match super::ipm::solve(p, NormKind::Fro, opts) {
                Ok(f) => Some(f),
                Err(_) if p.e.is_some() => super::working_set::solve(p, NormKind::Fro, opts).ok(),
                Err(_) => None,
            };
            // A Frobenius program the interior-point solver could not settle leaves feasibility to
            // the nuclear solve: a certified point proves it, a failure falls back below.
            if let Some(f) = fro.as_ref().filter(|f| !f.feasible) {
                return Ok(CostSolution {
                    fallback: Some(why),
                    ..f.clone()
                });
            }
            let floor = fro.as_ref().and_then(|f| f.lower).unwrap_or(0.0);
            let fro_iterations = fro.as_ref().map_or(0, |f| f.iterations);
            let start = fro.and_then(|f| f.w);
            let with_floor = |s: CostSolution, why: Option<String>| {
                let lower = s.lower.unwrap_or(0.0).max(floor);
                CostSolution {
                    lower: Some(lower),
                    rel_gap: s.value.map(|u| (u - lower) / u),
                    iterations: s.iterations + fro_iterations,
                    fallback: why.or(s.fallback.clone()),
                    ..s
                }
            };
            let why = match super::working_set::solve(p, kind, opts) {
                Ok(s) if s.rel_gap.is_some_and(|g| g <= opts.rel_gap) => {
                    return Ok(with_floor(s, None));
                }
                Ok(s) => {
                    // Certified but wide: tightened by the first-order bracket (both certified).
                    let fo = match start {
                        Some(w) => solve_from(p, kind, opts, w)?.0,
                        None => solve_with_dual(p, kind, opts)?.0,
                    };
                    return Ok(with_floor(super::ipm::intersect(s, fo), None));
                }
                Err(e) => format!("{why}; {e}"),
            };
            let Some(wf) = start else {
                return first_order(why);
            };
            let (s, _) = solve_from(p, kind, opts, wf)?;
            return Ok(with_floor(
                s,
                Some(format!(
                    "{why}; the first-order solver from the interior-point Frobenius optimum"
                )),
            ));
        }
        Err(why) => return first_order(why),
    };
    if !s.feasible || s.rel_gap.is_some_and(|g| g <= opts.rel_gap) {
        return Ok(s);
    }
    // A certified but wide Frobenius bracket (the conic solver stopped at reduced accuracy): the
    // dual QP on the Gram matrix, intersected (both certified).
    let s = match kind {
        NormKind::Fro => match super::dual_qp::solve(p, opts) {
            Ok(q) => CostSolution {
                solver: Method::Ipm,
                ..super::ipm::intersect(s, q)
            },
            Err(_) => s,
        },
        NormKind::Nuclear => s,
    };
    if s.rel_gap.is_some_and(|g| g <= opts.rel_gap) {
        return Ok(s);
    }
    // Still wide: tighten it with the first-order solver's (both ends are certificates, so their
    // intersection is one).
    let (f, _) = solve_with_dual(p, kind, opts)?;
    Ok(super::ipm::intersect(s, f))
}

/// The empty solution of `p` (nothing solved yet).
pub(super) fn unsolved(p: &GapProgram) -> CostSolution {
    CostSolution {
        value: None,
        lower: None,
        rel_gap: None,
        feasible: false,
        certificate: None,
        iterations: 0,
        delta: p.delta,
        constraints: p.n_constraints(),
        rank: None,
        solver: Method::FirstOrder,
        fallback: None,
        w: None,
    }
}

pub(super) fn solve_with_dual(
    p: &GapProgram,
    kind: NormKind,
    opts: SolveOptions,
) -> Result<(CostSolution, Vec<f64>), CostError> {
    match feasibility(p, opts.feas_iter, opts.par)? {
        Feasibility::Infeasible(c) => Ok((
            CostSolution {
                certificate: Some(c),
                ..unsolved(p)
            },
            vec![0.0; p.n_constraints()],
        )),
        Feasibility::Feasible { witness, min_gap } => {
            solve_from(p, kind, opts, witness * faer::Scale(p.delta / min_gap))
        }
    }
}

/// The primal–dual iterations from a feasible `witness` (gaps ≥ Δ).
pub(super) fn solve_from(
    p: &GapProgram,
    kind: NormKind,
    opts: SolveOptions,
    witness: Mat<f64>,
) -> Result<(CostSolution, Vec<f64>), CostError> {
    let base = unsolved(p);
    let par = opts.par;
    let n = p.n_constraints();
    let la = p.op_norm;
    // Start from the scaled witness: a feasible point, so the upper bound is finite at once.
    let mut w = witness.clone();
    let mut best_w = witness.clone();
    let mut upper = norm_of(kind, witness.as_ref(), par);
    let mut lower = 0.0f64;
    let mut lam = vec![0.0; n];
    let mut warm_iters = 0;
    if kind == NormKind::Nuclear {
        let (f, lam_f) = solve_from(p, NormKind::Fro, opts, witness.clone())?;
        warm_iters = f.iterations;
        lower = f.lower.unwrap_or(0.0);
        if let Some(wf) = &f.w {
            let nf = linalg::nuclear_norm(wf.as_ref(), par);
            if nf < upper {
                upper = nf;
                best_w = wf.clone();
                w = wf.clone();
            }
            let z = p.adjoint(&lam_f, par);
            let s2 = linalg::spectral_norm(z.as_ref(), par);
            if s2 > 0.0 {
                lam = lam_f.iter().map(|l| l / s2).collect();
            }
        }
    }
    let mut w_bar = w.clone();
    // Step balance: the primal scale is ~upper, the dual scale ~upper/(Δ·n)·(something);
    // start balanced on the operator norm and adapt by residual balancing (nuclear)
    // or by the strong-convexity acceleration (Frobenius).
    // Primal scale ‖W₀‖_F; dual scale: at the optimum Δ·Σλ = C, spread over n constraints,
    // so ‖λ‖ ≈ C/(Δ√n). PDHG converges fastest with τ/σ ≈ (primal scale / dual scale)².
    let beta = (linalg::fro_norm(w.as_ref()) * p.delta * (n as f64).sqrt() / upper).max(1e-6);
    let mut tau = 0.99 * beta / la;
    let mut sigma = 0.99 / (beta * la);
    let mut it = 0;
    let check_every = 10;
    while it < opts.max_iter {
        it += 1;
        let aw = p.forward(w_bar.as_ref(), par);
        let lam_old = lam.clone();
        for (l, g) in lam.iter_mut().zip(&aw) {
            *l = (*l - sigma * (g - p.delta)).max(0.0);
        }
        let at = p.adjoint(&lam, par);
        let v = &w + &at * faer::Scale(tau);
        let w_new = match kind {
            NormKind::Fro => v * faer::Scale(1.0 / (1.0 + tau)),
            NormKind::Nuclear => prox_nuclear(v.as_ref(), tau, par)?,
        };
        let theta = match kind {
            NormKind::Fro => {
                // Accelerated CP for a 1-strongly convex primal (½‖W‖²).
                let th = 1.0 / (1.0 + 2.0 * tau).sqrt();
                tau *= th;
                sigma /= th;
                th
            }
            NormKind::Nuclear => 1.0,
        };
        w_bar = &w_new + (&w_new - &w) * faer::Scale(theta);
        if kind == NormKind::Nuclear && it % 20 == 0 {
            // Residual balancing (Goldstein et al., adaptive PDHG): compare primal and dual residuals.
            let dw = &w - &w_new;
            let dl: Vec<f64> = lam_old.iter().zip(&lam).map(|(a, b)| a - b).collect();
            let pr =
                linalg::fro_norm((&dw * faer::Scale(1.0 / tau) - p.adjoint(&dl, par)).as_ref());
            let adw = p.forward(dw.as_ref(), par);
            let dr = dl
                .iter()
                .zip(&adw)
                .map(|(a, b)| (a / sigma - b).powi(2))
                .sum::<f64>()
                .sqrt();
            if pr > 2.0 * dr {
                tau *= 1.5;
                sigma /= 1.5;
            } else if dr > 2.0 * pr {
                tau /= 1.5;
                sigma *= 1.5;
            }
        }
        w = w_new;
        if it % check_every == 0 || it == opts.max_iter {
            let g = p.forward(w.as_ref(), par);
            let gmin = g.iter().copied().fold(f64::INFINITY, f64::min);
            if gmin > 0.0 {
                let u = norm_of(kind, w.as_ref(), par) * p.delta / gmin;
                if u < upper {
                    upper = u;
                    best_w = w.clone() * faer::Scale(p.delta / gmin);
                }
            }
            let s: f64 = lam.iter().sum();
            if s > 0.0 {
                let z = p.adjoint(&lam, par);
                let dn = dual_norm(kind, z.as_ref(), par);
                if dn > 0.0 {
                    lower = lower.max(p.delta * s / dn);
                }
            }
            if upper - lower <= opts.rel_gap * upper {
                break;
            }
        }
    }
    let sv = linalg::singular_values_par(best_w.as_ref(), par);
    let rank = sv.iter().filter(|&&s| s > 1e-6 * sv[0]).count();
    Ok((
        CostSolution {
            value: Some(upper),
            lower: Some(lower),
            rel_gap: Some((upper - lower) / upper),
            feasible: true,
            iterations: it + warm_iters,
            rank: Some(rank),
            w: Some(best_w),
            ..base
        },
        lam,
    ))
}
