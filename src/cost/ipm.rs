//! The gap programs by an interior-point conic solver (Clarabel: Goulart & Chen, *Clarabel: An
//! interior-point solver for conic programs with quadratic objectives*, arXiv:2405.12762), with
//! the same certified bracket as the first-order solver.
//!
//! Constraints $\langle A_c, W\rangle \ge \Delta$ with $A_c = e^q_i (e^k_{t(i)} - e^k_j)^\top$ in the
//! reduced coordinates of [`GapProgram`].
//!
//! **Frobenius**, a QP in whichever of two forms has the smaller dense block:
//! - primal ($n = r_q r_k \le m$ or orthonormal rows, where every $A_c$ has two entries):
//!   $\min \tfrac12\lVert w\rVert^2$ s.t. $\mathcal A w \ge \Delta\mathbf 1$;
//! - dual ($m < n$): $\min_{\lambda \ge 0} \tfrac12\lambda^\top G\lambda - \Delta\mathbf 1^\top\lambda$ with
//!   $G_{cc'} = \langle A_c, A_{c'}\rangle = G^q_{ii'}\thinspace(G^k_{tt'} - G^k_{tj'} - G^k_{jt'} + G^k_{jj'})$,
//!   and $W = \mathcal A^\ast\lambda$.
//!
//! **Nuclear**, an SDP: $\lVert W\rVert_\ast = \min\lbrace \tfrac12(\mathrm{tr}P + \mathrm{tr}Q) :
//! [P, W; W^\top, Q] \succeq 0\rbrace$, so the program is
//! $\min \tfrac12\mathrm{tr}X$ over $X \succeq 0$ of order $r_q + r_k$ with the gap constraints on its
//! off-diagonal block. Its dense KKT block has $N^2$ entries, $N = (r_q+r_k)(r_q+r_k+1)/2$: this is
//! what caps the sizes (see [`MAX_PSD_SVEC`]).
//!
//! **Certificates.** Nothing the solver reports is trusted: $W$ is read off its primal, every gap
//! recomputed in f64 and $W$ rescaled by $\Delta/\min_c\langle A_c, W\rangle$ (upper end, its norm
//! computed in f64), and the multipliers $\lambda \ge 0$ give the lower end
//! $\Delta\mathbf 1^\top\lambda/\lVert\mathcal A^\ast\lambda\rVert_{\rm dual}$ (weak duality, as in
//! [`solve`]). An infeasible program yields $\lambda \ge 0$ with $\mathcal A^\ast\lambda \approx 0$,
//! normalised to convex weights and re-checked as a [`Certificate`].

use super::*;

// Clarabel's SDP calls BLAS and LAPACK (dsyevr, dgemm, …) through `blas-sys`/`lapack-sys`,
// which name no library: the system OpenBLAS provides both.
#[link(name = "openblas")]
unsafe extern "C" {
    fn openblas_set_num_threads(n: std::ffi::c_int);
}

/// The SDP's BLAS calls are on matrices of order ≤ 50, where OpenBLAS's own threads only
/// contend with the caller's (measured: order 32 in 1.7 s on one thread, 5.8 s on its default
/// pool): one thread.
pub(super) fn blas_single_threaded() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: OpenBLAS's documented setter, called once, before any BLAS call of this process's
    // SDPs; it takes a plain integer.
    ONCE.call_once(|| unsafe { openblas_set_num_threads(1) });
}

use clarabel::algebra::CscMatrix;
use clarabel::solver::{DefaultSettings, DefaultSolver, IPSolver, SolverStatus, SupportedConeT::*};

/// Largest dense block ($\min(m, n)$ rows) of a Frobenius QP: its factor holds $k^2$ doubles
/// (4500: 160 MB) and costs $k^3/3$ flops an iteration (3·10¹⁰, seconds on two cores).
pub const MAX_DENSE: usize = 4500;
/// Largest number of stored constraint coefficients ($m \cdot n$ of the primal QP, $m \cdot r_q r_k$ of the
/// SDP's gap rows): Clarabel keeps two copies, 16 bytes each.
pub const MAX_NNZ: usize = 20_000_000;
/// Largest $N = (r_q + r_k)(r_q + r_k + 1)/2$ of the nuclear SDP: its KKT block is dense $N \times N$
/// and Clarabel assembles it from Kronecker products every iteration. Measured: order 40
/// ($N = 820$) in seconds, order 64 ($N = 2080$) over 90 s on a loaded 2-core machine; the cap
/// 1300 allows order 50, so $r_q = r_k \le 25$.
pub const MAX_PSD_SVEC: usize = 1300;

/// Interior-point tolerances: far below the $10^{-8}$ the certified bracket is asked to meet,
/// so that the bracket, not the stopping rule, is what a test measures.
const TOL: f64 = 1e-11;

/// Dense coefficients of the constraints: $A_c = a_i b_c^\top$ with $a_i = e^q_i$ and
/// $b_c = e^k_{t(i)} - e^k_j$.
struct Rows {
    a: Mat<f64>,
    b: Mat<f64>,
}

fn rows(p: &GapProgram) -> Option<Rows> {
    let (q, k) = p.e.as_ref()?;
    let b = Mat::from_fn(p.cons.len(), k.ncols(), |c, x| {
        let (i, j) = (p.cons[c].0 as usize, p.cons[c].1 as usize);
        let t = p.targets[i].unwrap_or(i);
        k[(t, x)] - k[(j, x)]
    });
    Some(Rows { a: q.clone(), b })
}

pub(super) fn settings(opts: &SolveOptions) -> DefaultSettings<f64> {
    DefaultSettings {
        verbose: false,
        tol_gap_abs: TOL,
        tol_gap_rel: TOL,
        tol_feas: TOL,
        tol_infeas_abs: 1e-10,
        tol_infeas_rel: 1e-10,
        max_iter: 200,
        max_threads: match opts.par {
            Par::Seq => 1,
            Par::Rayon(n) => n.get() as u32,
        },
        direct_solve_method: "faer".into(),
        presolve_enable: false,
        ..DefaultSettings::default()
    }
}

/// CSC from columns of (row, value) pairs, rows increasing.
pub(super) fn csc(m: usize, cols: Vec<Vec<(usize, f64)>>) -> CscMatrix<f64> {
    let n = cols.len();
    let mut colptr = Vec::with_capacity(n + 1);
    let nnz = cols.iter().map(Vec::len).sum();
    let (mut rowval, mut nzval) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
    colptr.push(0);
    for col in cols {
        for (r, v) in col {
            rowval.push(r);
            nzval.push(v);
        }
        colptr.push(rowval.len());
    }
    CscMatrix::new(m, n, colptr, rowval, nzval)
}

/// The raw outcome of one conic solve: a primal $W$ and multipliers $\lambda$, or an
/// infeasibility ray $\lambda$.
pub(super) enum Raw {
    Solved {
        w: Mat<f64>,
        lam: Vec<f64>,
        iterations: u32,
    },
    Infeasible {
        lam: Vec<f64>,
        iterations: u32,
    },
}

fn status_error(s: SolverStatus) -> String {
    format!("interior-point solver stopped: {s:?}")
}

/// Frobenius QP (primal or dual form, see the module docs).
pub(super) fn fro_raw(p: &GapProgram, opts: &SolveOptions) -> Result<Raw, String> {
    let m = p.n_constraints();
    let (rq, rk) = p.dim();
    let n = rq * rk;
    let reduced = p.e.is_some();
    let primal = !reduced || n <= m;
    if reduced && n.min(m) > MAX_DENSE {
        return Err(format!(
            "Frobenius QP too large for the interior-point solver: dense block {} > {MAX_DENSE}",
            n.min(m)
        ));
    }
    if primal && reduced && m * n > MAX_NNZ {
        return Err(format!(
            "Frobenius QP too large for the interior-point solver: {m}·{n} coefficients > {MAX_NNZ}"
        ));
    }
    let st = settings(opts);
    if primal {
        let rws = rows(p);
        // Columns of −𝒜 over w = vec W (index a·r_k + b).
        let mut cols: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
        match &rws {
            None => {
                for (c, &(i, j)) in p.cons.iter().enumerate() {
                    let (i, j) = (i as usize, j as usize);
                    let t = p.targets[i].unwrap_or(i);
                    cols[i * rk + t].push((c, -1.0));
                    cols[i * rk + j].push((c, 1.0));
                }
            }
            Some(r) => {
                for a in 0..rq {
                    for b in 0..rk {
                        let col = &mut cols[a * rk + b];
                        col.reserve(m);
                        for (c, &(i, _)) in p.cons.iter().enumerate() {
                            let v = r.a[(i as usize, a)] * r.b[(c, b)];
                            if v != 0.0 {
                                col.push((c, -v));
                            }
                        }
                    }
                }
            }
        }
        let a = csc(m, cols);
        let pm = CscMatrix::identity(n);
        let q = vec![0.0; n];
        let bv = vec![-p.delta; m];
        let cones = [NonnegativeConeT(m)];
        let mut s = DefaultSolver::new(&pm, &q, &a, &bv, &cones, st).map_err(|e| e.to_string())?;
        s.solve();
        let sol = &s.solution;
        match sol.status {
            SolverStatus::Solved | SolverStatus::AlmostSolved => Ok(Raw::Solved {
                w: Mat::from_fn(rq, rk, |x, y| sol.x[x * rk + y]),
                lam: sol.z.clone(),
                iterations: sol.iterations,
            }),
            SolverStatus::PrimalInfeasible | SolverStatus::AlmostPrimalInfeasible => {
                Ok(Raw::Infeasible {
                    lam: sol.z.clone(),
                    iterations: sol.iterations,
                })
            }
            other => Err(status_error(other)),
        }
    } else {
        let Some((q, k)) = p.e.as_ref() else {
            return Err("dual form only for reduced embeddings".into());
        };
        let gq = mm(q.as_ref(), q.transpose(), Par::Seq);
        let gk = mm(k.as_ref(), k.transpose(), Par::Seq);
        let tj: Vec<(usize, usize, usize)> = p
            .cons
            .iter()
            .map(|&(i, j)| {
                let i = i as usize;
                (i, p.targets[i].unwrap_or(i), j as usize)
            })
            .collect();
        // Upper triangle of G, column by column.
        let cols: Vec<Vec<(usize, f64)>> = (0..m)
            .map(|c2| {
                let (i2, t2, j2) = tj[c2];
                (0..=c2)
                    .map(|c1| {
                        let (i1, t1, j1) = tj[c1];
                        let v = gq[(i1, i2)]
                            * (gk[(t1, t2)] - gk[(t1, j2)] - gk[(j1, t2)] + gk[(j1, j2)]);
                        (c1, v)
                    })
                    .collect()
            })
            .collect();
        let pm = csc(m, cols);
        let qv = vec![-p.delta; m];
        let a = csc(m, (0..m).map(|c| vec![(c, -1.0)]).collect());
        let bv = vec![0.0; m];
        let cones = [NonnegativeConeT(m)];
        let mut s = DefaultSolver::new(&pm, &qv, &a, &bv, &cones, st).map_err(|e| e.to_string())?;
        s.solve();
        let sol = &s.solution;
        let lam: Vec<f64> = sol.x.iter().map(|&l| l.max(0.0)).collect();
        match sol.status {
            SolverStatus::Solved | SolverStatus::AlmostSolved => Ok(Raw::Solved {
                w: p.adjoint(&lam, opts.par),
                lam,
                iterations: sol.iterations,
            }),
            SolverStatus::DualInfeasible | SolverStatus::AlmostDualInfeasible => {
                Ok(Raw::Infeasible {
                    lam,
                    iterations: sol.iterations,
                })
            }
            other => Err(status_error(other)),
        }
    }
}

/// svec index of entry (row, col), row ≤ col, of a symmetric matrix (Clarabel's packing: upper
/// triangle by columns, off-diagonal entries scaled by √2).
pub(super) fn svec(row: usize, col: usize) -> usize {
    col * (col + 1) / 2 + row
}

/// The nuclear SDP's size caps ([`MAX_PSD_SVEC`], [`MAX_NNZ`]), checked before any solve.
fn nuclear_fits(p: &GapProgram) -> Result<(), String> {
    let m = p.n_constraints();
    let (rq, rk) = p.dim();
    let np = rq + rk;
    let nv = np * (np + 1) / 2;
    if nv > MAX_PSD_SVEC {
        return Err(format!(
            "nuclear SDP too large for the interior-point solver: {nv} PSD coordinates (order {np}) > {MAX_PSD_SVEC}"
        ));
    }
    if m * rq * rk > MAX_NNZ {
        return Err(format!(
            "nuclear SDP too large for the interior-point solver: {m}·{} coefficients > {MAX_NNZ}",
            rq * rk
        ));
    }
    Ok(())
}

/// Nuclear SDP on the block matrix $X = [P, W; W^\top, Q] \succeq 0$.
fn nuclear_raw(p: &GapProgram, opts: &SolveOptions) -> Result<Raw, String> {
    nuclear_fits(p)?;
    let m = p.n_constraints();
    let (rq, rk) = p.dim();
    let np = rq + rk;
    let nv = np * (np + 1) / 2;
    let h = std::f64::consts::FRAC_1_SQRT_2;
    // Rows 0..m: −⟨A_c, W⟩ + s_c = −Δ with W_ab = x[svec(a, rq+b)]/√2; rows m..m+nv: −x + s = 0.
    let rws = rows(p);
    let mut cols: Vec<Vec<(usize, f64)>> = vec![Vec::new(); nv];
    match &rws {
        None => {
            for (c, &(i, j)) in p.cons.iter().enumerate() {
                let (i, j) = (i as usize, j as usize);
                let t = p.targets[i].unwrap_or(i);
                cols[svec(i, rq + t)].push((c, -h));
                cols[svec(i, rq + j)].push((c, h));
            }
        }
        Some(r) => {
            for a in 0..rq {
                for b in 0..rk {
                    let col = &mut cols[svec(a, rq + b)];
                    for (c, &(i, _)) in p.cons.iter().enumerate() {
                        let v = r.a[(i as usize, a)] * r.b[(c, b)];
                        if v != 0.0 {
                            col.push((c, -h * v));
                        }
                    }
                }
            }
        }
    }
    for (x, col) in cols.iter_mut().enumerate() {
        col.push((m + x, -1.0));
    }
    let a = csc(m + nv, cols);
    let pm = CscMatrix::zeros((nv, nv));
    let mut q = vec![0.0; nv];
    for d in 0..np {
        q[svec(d, d)] = 0.5;
    }
    let mut bv = vec![-p.delta; m];
    bv.extend(std::iter::repeat_n(0.0, nv));
    let cones = [NonnegativeConeT(m), PSDTriangleConeT(np)];
    blas_single_threaded();
    let mut s =
        DefaultSolver::new(&pm, &q, &a, &bv, &cones, settings(opts)).map_err(|e| e.to_string())?;
    s.solve();
    let sol = &s.solution;
    let lam: Vec<f64> = sol.z[..m].iter().map(|&l| l.max(0.0)).collect();
    match sol.status {
        SolverStatus::Solved | SolverStatus::AlmostSolved => Ok(Raw::Solved {
            w: Mat::from_fn(rq, rk, |x, y| sol.x[svec(x, rq + y)] * h),
            lam,
            iterations: sol.iterations,
        }),
        SolverStatus::PrimalInfeasible | SolverStatus::AlmostPrimalInfeasible => {
            Ok(Raw::Infeasible {
                lam,
                iterations: sol.iterations,
            })
        }
        other => Err(status_error(other)),
    }
}

/// The certified bracket of a raw solve, every number recomputed in f64 from $W$ and $\lambda$.
/// `lower_floor` is a lower bound known otherwise (the Frobenius value under a nuclear program).
pub(super) fn certify(
    p: &GapProgram,
    kind: NormKind,
    raw: Raw,
    lower_floor: f64,
    par: Par,
) -> Result<CostSolution, String> {
    let base = CostSolution {
        solver: Method::Ipm,
        ..unsolved(p)
    };
    match raw {
        Raw::Infeasible { lam, iterations } => {
            let c = certificate(p, &lam, par).ok_or_else(|| {
                "interior-point infeasibility ray does not verify (‖Σλ A‖ > 1e-4·scale)".to_string()
            })?;
            Ok(CostSolution {
                certificate: Some(c),
                iterations: iterations as usize,
                ..base
            })
        }
        Raw::Solved { w, lam, iterations } => {
            let gmin = p
                .forward(w.as_ref(), par)
                .into_iter()
                .fold(f64::INFINITY, f64::min);
            if !(gmin > 0.0 && gmin.is_finite()) {
                return Err(format!(
                    "interior-point primal has smallest gap {gmin:.3e}: not rescalable to feasibility"
                ));
            }
            let best_w = w * faer::Scale(p.delta / gmin);
            let upper = norm_of(kind, best_w.as_ref(), par);
            // Weak duality needs λ ≥ 0 (clamping guards against rounding of the iterate).
            let lam: Vec<f64> = lam.iter().map(|l| l.max(0.0)).collect();
            let s: f64 = lam.iter().sum();
            let z = p.adjoint(&lam, par);
            let dn = dual_norm(kind, z.as_ref(), par);
            let lower = if s > 0.0 && dn > 0.0 {
                p.delta * s / dn
            } else {
                0.0
            }
            .max(lower_floor);
            if !(upper.is_finite() && lower > 0.0) {
                return Err(format!(
                    "interior-point bracket unusable: [{lower:.3e}, {upper:.3e}]"
                ));
            }
            let sv = linalg::singular_values_par(best_w.as_ref(), par);
            let rank = sv.iter().filter(|&&x| x > 1e-6 * sv[0]).count();
            Ok(CostSolution {
                value: Some(upper),
                lower: Some(lower),
                rel_gap: Some((upper - lower) / upper),
                feasible: true,
                iterations: iterations as usize,
                rank: Some(rank),
                w: Some(best_w),
                ..base
            })
        }
    }
}

/// Convex weights from an infeasibility ray $\lambda \ge 0$, re-checked: `None` unless
/// $\lVert\sum_c \lambda_c A_c\rVert_F \le 10^{-4}\max_c\lVert A_c\rVert_F$ (the first-order test's
/// threshold; `verified` at $10^{-6}$).
pub(super) fn certificate(p: &GapProgram, lam: &[f64], par: Par) -> Option<Certificate> {
    let s: f64 = lam.iter().map(|l| l.max(0.0)).sum();
    if !(s > 0.0 && s.is_finite()) {
        return None;
    }
    let w: Vec<f64> = lam.iter().map(|l| l.max(0.0) / s).collect();
    let residual = linalg::fro_norm(p.adjoint(&w, par).as_ref());
    let scale = p.max_constraint_norm(par);
    (residual <= 1e-4 * scale).then(|| Certificate {
        weights: p
            .cons
            .iter()
            .zip(&w)
            .filter(|(_, l)| **l > 0.0)
            .map(|(&(i, j), &l)| (i as usize, j as usize, l))
            .collect(),
        residual,
        scale,
        verified: residual <= 1e-6 * scale,
    })
}

/// Solves the program by the interior-point method, with a certified bracket; `Err` names why
/// it could not (size caps, solver status, a bracket that does not verify), for the caller to
/// fall back on the first-order solver. A nuclear program first solves the Frobenius one
/// (feasibility, and $\lVert W\rVert_\ast \ge \lVert W\rVert_F$ as a floor for the lower end).
pub fn solve(p: &GapProgram, kind: NormKind, opts: SolveOptions) -> Result<CostSolution, String> {
    if kind == NormKind::Nuclear {
        nuclear_fits(p)?;
    }
    let fro = certify(p, NormKind::Fro, fro_raw(p, &opts)?, 0.0, opts.par)?;
    if kind == NormKind::Fro || !fro.feasible {
        return Ok(fro);
    }
    let floor = fro.lower.unwrap_or(0.0);
    let nuc = certify(p, kind, nuclear_raw(p, &opts)?, floor, opts.par)?;
    if !nuc.feasible {
        return Err("the nuclear SDP reports infeasible where the Frobenius QP is feasible".into());
    }
    Ok(CostSolution {
        iterations: nuc.iterations + fro.iterations,
        ..nuc
    })
}

/// The intersection of two certified brackets of one program: the larger lower end, the
/// smaller upper end with its point.
pub fn intersect(a: CostSolution, b: CostSolution) -> CostSolution {
    if !(a.feasible && b.feasible) {
        return if a.feasible { a } else { b };
    }
    let lower = a.lower.unwrap_or(0.0).max(b.lower.unwrap_or(0.0));
    let iterations = a.iterations + b.iterations;
    let best = if b.value.unwrap_or(f64::INFINITY) < a.value.unwrap_or(f64::INFINITY) {
        b
    } else {
        a
    };
    let upper = best.value.unwrap_or(f64::INFINITY);
    CostSolution {
        lower: Some(lower),
        rel_gap: Some((upper - lower) / upper),
        iterations,
        solver: Method::IpmAndFirstOrder,
        ..best
    }
}
