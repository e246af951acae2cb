//! The nuclear program beyond the conic solver's SDP cap: a primal–dual interior-point method on
//! its semidefinite form that uses the rank-two structure of every constraint, so its linear
//! system is the $m \times m$ Schur matrix of the $m$ gap constraints, never a dense block over the
//! $n(n+1)/2$ coordinates of the PSD cone.
//!
//! With $a_c = e^q_i$, $b_c = e^k_{t(i)} - e^k_j$ scaled to $\lVert a_c\rVert, \lVert b_c\rVert \le 1$ and the
//! gap to 1, the program and its dual are ($n = r_q + r_k$, $u_c = (a_c, 0)$, $v_c = (0, b_c)$,
//! $A_c = \tfrac12(u_c v_c^\top + v_c u_c^\top)$, $C = \tfrac12 I$):
//! $$ \min_{X \succeq 0,\ s \ge 0} \langle C, X\rangle \ \ \text{s.t.}\ \ \langle A_c, X\rangle - s_c = 1,
//!    \qquad \max_{y \ge 0,\ Z \succeq 0} \mathbf 1^\top y \ \ \text{s.t.}\ \ \textstyle\sum_c y_c A_c + Z = C. $$
//! $X = [P, W; W^\top, Q]$ and $\tfrac12(\mathrm{tr}P + \mathrm{tr}Q) \ge \lVert W\rVert_\ast$ with equality at the optimum;
//! $Z \succeq 0$ is $\lVert\sum_c y_c a_c b_c^\top\rVert_2 \le 1$.
//!
//! **Direction.** The HKM direction (Helmberg–Rendl–Vanderbei–Wolkowicz; Kojima–Shindoh–Hara;
//! Monteiro) with Mehrotra's predictor–corrector: $dZ = R_d - \mathcal A^\ast dy$,
//! $dX = \mathrm{sym}(\sigma\mu Z^{-1} - X - X\thinspace dZ\thinspace Z^{-1})$, and
//! $(H + \mathrm{diag}(s/y))\thinspace dy = \text{rhs}$ with
//! $$ H_{cd} = \mathrm{tr}(A_c X A_d Z^{-1}) = \tfrac14\big[X^{uv}\_{dc}G^{uv}\_{cd} + X^{vv}\_{cd}G^{uu}\_{cd} +
//!    X^{uu}\_{cd}G^{vv}\_{cd} + X^{uv}\_{cd}G^{uv}\_{dc}\big], $$
//! $X^{uv}\_{cd} = u_c^\top X v_d$ and so on, $G = Z^{-1}$ (each constraint weighted by
//! $\omega_c = 1/(\lVert a_c\rVert\lVert b_c\rVert)$). Every such entry is gathered from one of three $T \times T$
//! products ($E_q P E_q^\top$, $E_k Q E_k^\top$, $E_q W E_k^\top$), so an iteration costs $O(T^2 r + m^2)$ to
//! form and $m^3/3$ to factor.
//!
//! Nothing here is trusted by the caller: [`super::working_set`] rebuilds $W$ and $y$ into the
//! certified bracket of the full program.

use super::*;
use faer::linalg::solvers::{DenseSolveCore, Solve};

/// Iterations at most of one solve.
const MAX_ITER: usize = 120;
/// Fraction of the step to the boundary of the cones. 0.98 stalled on real inputs (SmolLM2
/// layer 1, diagonal, T = 128: primal steps of 5–20 % for a hundred iterations, the iterates
/// pressed to the boundary); 0.9 keeps them central enough there.
const STEP: f64 = 0.9;
/// Stopping rule of one solve: relative duality gap and infeasibilities (the certified bracket,
/// not this rule, is what the caller reports).
const TOL: f64 = 1e-10;
/// Below this relative duality gap an iterate the method cannot improve (a factor that fails, a
/// vanishing step) is returned rather than refused: its certified bracket is what counts.
const STALL_GAP: f64 = 1e-6;
/// Iterations without a better iterate after which a solve below [`STALL_GAP`] stops.
const STALL_ITER: usize = 5;

/// `a·b` on the caller's parallelism above order 256 (see `mm`).
fn prod(a: MatRef<'_, f64>, b: MatRef<'_, f64>, par: Par) -> Mat<f64> {
    mm(a, b, par)
}

/// The structured SDP of a relaxed program: scaled reduced rows $\bar e^q_i = e^q_i/s_a$
/// ($T \times r_q$), $\bar e^k_j = e^k_j/s_b$ ($T \times r_k$), and each constraint's $(i, t(i), j)$, so
/// $a_c = \bar e^q_i$ and $b_c = \bar e^k_t - \bar e^k_j$. Every product with the $m$ constraint vectors
/// is a gather from a $T \times T$ matrix ($E_q P E_q^\top$, $E_k Q E_k^\top$, $E_q W E_k^\top$).
struct Sdp {
    eq: Mat<f64>,
    ek: Mat<f64>,
    cons: Vec<(usize, usize, usize)>,
    /// $\omega_c = 1/(\lVert a_c\rVert\lVert b_c\rVert)$: constraint $c$ enters as $\omega_c\langle A_c, X\rangle \ge r_c$.
    omega: Vec<f64>,
    /// Right-hand sides $r_c = \omega_c/\max_d\omega_d \in (0, 1]$.
    rhs: Vec<f64>,
    par: Par,
}

/// The $T \times T$ products of one symmetric $M = [P, W; W^\top, Q]$ with the rows.
struct Grams {
    p: Mat<f64>,
    q: Mat<f64>,
    w: Mat<f64>,
}

impl Sdp {
    fn m(&self) -> usize {
        self.cons.len()
    }
    fn rq(&self) -> usize {
        self.eq.ncols()
    }
    fn n(&self) -> usize {
        self.eq.ncols() + self.ek.ncols()
    }

    fn grams(&self, x: MatRef<'_, f64>) -> Grams {
        let (rq, n) = (self.rq(), self.n());
        let rk = n - rq;
        let (eq, ek) = (self.eq.as_ref(), self.ek.as_ref());
        let side = |e: MatRef<'_, f64>, b: MatRef<'_, f64>, f: MatRef<'_, f64>| {
            prod(prod(e, b, self.par).as_ref(), f.transpose(), self.par)
        };
        Grams {
            p: side(eq, x.submatrix(0, 0, rq, rq), eq),
            q: side(ek, x.submatrix(rq, rq, rk, rk), ek),
            w: side(eq, x.submatrix(0, rq, rq, rk), ek),
        }
    }

    /// $\mathcal A(M)\_c = a_c^\top M_{12} b_c$ for symmetric $M$.
    fn op(&self, x: MatRef<'_, f64>) -> Vec<f64> {
        let rq = self.rq();
        let w = x.submatrix(0, rq, rq, x.ncols() - rq);
        let kw = prod(
            prod(self.eq.as_ref(), w, self.par).as_ref(),
            self.ek.transpose(),
            self.par,
        );
        self.cons
            .iter()
            .zip(&self.omega)
            .map(|(&(i, t, j), &w)| w * (kw[(i, t)] - kw[(i, j)]))
            .collect()
    }

    /// $B_y = \sum_c y_c a_c b_c^\top = \bar E_q^\top L \bar E_k$ ($r_q \times r_k$), $L_{it} \mathrel{+}= y_c$, $L_{ij} \mathrel{-}= y_c$.
    fn off_block(&self, y: &[f64]) -> Mat<f64> {
        let t = self.eq.nrows();
        let mut l = Mat::<f64>::zeros(t, t);
        for ((&(i, tt, j), &v), &w) in self.cons.iter().zip(y).zip(&self.omega) {
            l[(i, tt)] += w * v;
            l[(i, j)] -= w * v;
        }
        prod(
            prod(self.eq.transpose(), l.as_ref(), self.par).as_ref(),
            self.ek.as_ref(),
            self.par,
        )
    }

    /// $\mathcal A^\ast y = \sum_c y_c A_c = \tfrac12[0, B_y; B_y^\top, 0]$.
    fn adjoint(&self, y: &[f64]) -> Mat<f64> {
        let by = self.off_block(y);
        let (rq, n) = (self.rq(), self.n());
        Mat::from_fn(n, n, |i, j| match (i < rq, j < rq) {
            (true, false) => 0.5 * by[(i, j - rq)],
            (false, true) => 0.5 * by[(j, i - rq)],
            _ => 0.0,
        })
    }

    /// The Schur matrix $H + \mathrm{diag}(d)$, by gathers from the Gram products of $X$ and $G$:
    /// $u_c^\top M u_d = (E_qPE_q^\top)\_{i_c i_d}$, $v_c^\top M v_d$ four entries of $E_kQE_k^\top$,
    /// $u_c^\top M v_d$ two entries of $E_qWE_k^\top$.
    fn schur(&self, x: MatRef<'_, f64>, g: MatRef<'_, f64>, d: &[f64]) -> Mat<f64> {
        let (gx, gg) = (self.grams(x), self.grams(g));
        let uu = |k: &Grams, c: usize, e: usize| k.p[(self.cons[c].0, self.cons[e].0)];
        let vv = |k: &Grams, c: usize, e: usize| {
            let ((_, t1, j1), (_, t2, j2)) = (self.cons[c], self.cons[e]);
            k.q[(t1, t2)] - k.q[(t1, j2)] - k.q[(j1, t2)] + k.q[(j1, j2)]
        };
        let uv = |k: &Grams, c: usize, e: usize| {
            let (i1, (_, t2, j2)) = (self.cons[c].0, self.cons[e]);
            k.w[(i1, t2)] - k.w[(i1, j2)]
        };
        let m = self.m();
        let mut h = Mat::<f64>::zeros(m, m);
        for e in 0..m {
            for c in e..m {
                let v = 0.25
                    * self.omega[c]
                    * self.omega[e]
                    * (uv(&gx, e, c) * uv(&gg, c, e)
                        + vv(&gx, c, e) * uu(&gg, c, e)
                        + uu(&gx, c, e) * vv(&gg, c, e)
                        + uv(&gx, c, e) * uv(&gg, e, c));
                h[(c, e)] = v;
                h[(e, c)] = v;
            }
            h[(e, e)] += d[e];
        }
        h
    }
}

fn sym(m: Mat<f64>) -> Mat<f64> {
    let n = m.nrows();
    Mat::from_fn(n, n, |i, j| 0.5 * (m[(i, j)] + m[(j, i)]))
}

fn inner(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> f64 {
    let mut s = 0.0;
    for j in 0..a.ncols() {
        for i in 0..a.nrows() {
            s += a[(i, j)] * b[(i, j)];
        }
    }
    s
}

/// Largest $\alpha$ with $X + \alpha\thinspace dX \succeq 0$ ($X \succ 0$ with Cholesky factor `l`): $-1/\lambda_{\min}(L^{-1} dX L^{-\top})$.
fn max_step_psd(l: MatRef<'_, f64>, dx: MatRef<'_, f64>) -> Result<f64, String> {
    use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
    let mut m = dx.to_owned();
    solve_lower_triangular_in_place(l, m.as_mut(), Par::Seq);
    let mut mt = m.transpose().to_owned();
    solve_lower_triangular_in_place(l, mt.as_mut(), Par::Seq);
    let ev = sym(mt)
        .self_adjoint_eigenvalues(faer::Side::Lower)
        .map_err(|_| "nuclear interior point: eigenvalues did not converge".to_string())?;
    let lmin = ev.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(if lmin < 0.0 {
        -1.0 / lmin
    } else {
        f64::INFINITY
    })
}

/// Largest $\alpha$ with $v + \alpha\thinspace dv \ge 0$ ($v > 0$).
pub(super) fn max_step_pos(v: &[f64], dv: &[f64]) -> f64 {
    v.iter()
        .zip(dv)
        .filter(|(_, d)| **d < 0.0)
        .map(|(x, d)| -x / d)
        .fold(f64::INFINITY, f64::min)
}

fn chol(x: MatRef<'_, f64>) -> Result<faer::linalg::solvers::Llt<f64>, String> {
    x.llt(faer::Side::Lower)
        .map_err(|_| "nuclear interior point: an iterate left the cone".to_string())
}

/// The Schur matrix's Cholesky factor; a matrix that is not numerically positive definite gets
/// a diagonal shift of $10^{-14}$, then $10^{-12}$, … of its largest diagonal entry.
fn chol_shifted(mut h: Mat<f64>) -> Result<faer::linalg::solvers::Llt<f64>, String> {
    let dmax = (0..h.nrows()).map(|i| h[(i, i)]).fold(0.0, f64::max);
    let mut shift = 0.0;
    for k in 0..6 {
        if let Ok(f) = h.llt(faer::Side::Lower) {
            return Ok(f);
        }
        let next = dmax * 10f64.powi(-14 + 2 * k);
        for i in 0..h.nrows() {
            h[(i, i)] += next - shift;
        }
        shift = next;
    }
    Err("nuclear interior point: the Schur matrix is singular".into())
}

/// Solves the relaxed nuclear program on the constraints `idx` of `p`: its $W$ (in `p`'s reduced
/// coordinates, scaled to gap Δ) and multipliers $\lambda \ge 0$ over `idx` (up to a positive
/// factor, which the bracket does not see).
pub(super) fn raw(p: &GapProgram, idx: &[usize], par: Par) -> Result<super::ipm::Raw, String> {
    let (eq, ek) = p.reduced_or_identity();
    if idx.is_empty() {
        return Err("nuclear interior point: no constraint".into());
    }
    let cons = p.triples(idx);
    let norm_row =
        |e: &Mat<f64>, r: usize| (0..e.ncols()).map(|k| e[(r, k)] * e[(r, k)]).sum::<f64>();
    let sa = cons
        .iter()
        .map(|&(i, _, _)| norm_row(&eq, i))
        .fold(0.0, f64::max)
        .sqrt();
    let sb = cons
        .iter()
        .map(|&(_, t, j)| {
            (0..ek.ncols())
                .map(|k| (ek[(t, k)] - ek[(j, k)]).powi(2))
                .sum::<f64>()
        })
        .fold(0.0, f64::max)
        .sqrt();
    if !(sa > 0.0 && sb > 0.0) {
        return Err("nuclear interior point: a zero constraint".into());
    }
    let (eq, ek) = (eq * faer::Scale(1.0 / sa), ek * faer::Scale(1.0 / sb));
    let omega: Vec<f64> = cons
        .iter()
        .map(|&(i, t, j)| {
            let na = norm_row(&eq, i).sqrt();
            let nb = (0..ek.ncols())
                .map(|k| (ek[(t, k)] - ek[(j, k)]).powi(2))
                .sum::<f64>()
                .sqrt();
            1.0 / (na * nb)
        })
        .collect();
    if omega.iter().any(|w| !w.is_finite()) {
        return Err("nuclear interior point: a zero constraint".into());
    }
    let wmax = omega.iter().copied().fold(0.0, f64::max);
    let rhs = omega.iter().map(|w| w / wmax).collect();
    let sdp = Sdp {
        eq,
        ek,
        cons,
        omega,
        rhs,
        par,
    };
    let (w, y, iterations) = solve_scaled(&sdp)?;
    // ω_c āᵀW'b̄ ≥ ω_c/ω_max ⇔ aᵀ(W' ω_max Δ/(s_a s_b)) b ≥ Δ; the multiplier of the unscaled
    // constraint is ω_c y_c (up to a common factor).
    let lam = y.iter().zip(&sdp.omega).map(|(y, w)| y * w).collect();
    Ok(super::ipm::Raw::Solved {
        w: w * faer::Scale(wmax * p.delta / (sa * sb)),
        lam,
        iterations: iterations as u32,
    })
}

/// The interior-point iterations on the scaled program: $(W, y, \text{iterations})$.
fn solve_scaled(sdp: &Sdp) -> Result<(Mat<f64>, Vec<f64>, usize), String> {
    let (m, n, rq) = (sdp.m(), sdp.n(), sdp.rq());
    let half = Mat::<f64>::identity(n, n) * faer::Scale(0.5);
    // The start of SDPT3 (Toh, Todd, Tütüncü): X = ξI, s = ξ1, Z = ηI, y = η1, with every
    // ‖ω_c A_c‖_F = 1/√2 and every r_c ≤ 1.
    let nf = n as f64;
    let xi = 10f64
        .max(nf.sqrt())
        .max(nf * 2.0 / (1.0 + std::f64::consts::FRAC_1_SQRT_2));
    let eta = 10f64.max(nf.sqrt());
    let mut x = Mat::<f64>::identity(n, n) * faer::Scale(xi);
    let mut z = Mat::<f64>::identity(n, n) * faer::Scale(eta);
    let mut s = vec![xi; m];
    let mut y = vec![eta; m];
    let cnorm = 1.0 + 0.5 * nf.sqrt();
    let nm = (n + m) as f64;
    let mut best = (
        f64::INFINITY,
        Mat::<f64>::zeros(rq, n - rq),
        y.clone(),
        0usize,
    );
    for it in 0..MAX_ITER {
        let ax = sdp.op(x.as_ref());
        let rp: Vec<f64> = (0..m).map(|c| sdp.rhs[c] + s[c] - ax[c]).collect();
        let rd = &half - sdp.adjoint(&y) - &z;
        let mu = (inner(x.as_ref(), z.as_ref()) + linalg::dot(&s, &y)) / nm;
        let pobj = 0.5 * (0..n).map(|i| x[(i, i)]).sum::<f64>();
        let dobj = linalg::dot(&sdp.rhs, &y);
        let gap = (pobj - dobj).abs() / (1.0 + pobj.abs() + dobj.abs());
        let pinf = linalg::norm(&rp) / (1.0 + linalg::norm(&sdp.rhs));
        let dinf = linalg::fro_norm(rd.as_ref()) / cnorm;
        if gap < TOL && pinf < TOL && dinf < TOL {
            return Ok((block(&x, rq), y, it));
        }
        // Rounding can make late iterates worse (the Schur matrix grows ill-conditioned): the
        // best so far, by its larger residual, is what a stalled solve returns.
        let score = gap.max(pinf).max(dinf);
        if score < best.0 {
            best = (score, block(&x, rq), y.clone(), it);
        } else if it > best.3 + STALL_ITER && best.0 < STALL_GAP {
            return Ok((best.1, best.2, it));
        }
        // Near the optimum X and Z are nearly singular (a low-rank W): when a factor fails there,
        // the iterate so far is the answer, for the caller to certify.
        let factors = chol(x.as_ref()).and_then(|lx| Ok((lx, chol(z.as_ref())?)));
        let (lx, lz) = match factors {
            Ok(f) => f,
            Err(_) if best.0 < STALL_GAP => return Ok((best.1, best.2, it)),
            Err(e) => return Err(e),
        };
        let g = lz.inverse();
        let d: Vec<f64> = (0..m).map(|c| s[c] / y[c]).collect();
        let h = match chol_shifted(sdp.schur(x.as_ref(), g.as_ref(), &d)) {
            Ok(h) => h,
            Err(_) if best.0 < STALL_GAP => return Ok((best.1, best.2, it)),
            Err(e) => return Err(e),
        };
        let xrdg = prod(
            prod(x.as_ref(), rd.as_ref(), sdp.par).as_ref(),
            g.as_ref(),
            sdp.par,
        );
        // One Newton system for a given K (the part of dX without dy) and complementarity target.
        let direction = |k: &Mat<f64>, target: &[f64]| {
            let ak = sdp.op(sym(k.clone()).as_ref());
            let rhs: Vec<f64> = (0..m)
                .map(|c| rp[c] - ak[c] + target[c] / y[c] - s[c])
                .collect();
            let mut dy = Mat::from_fn(m, 1, |c, _| rhs[c]);
            h.solve_in_place(dy.as_mut());
            let dy: Vec<f64> = (0..m).map(|c| dy[(c, 0)]).collect();
            let ady = sdp.adjoint(&dy);
            let dz = &rd - &ady;
            let xady = prod(
                prod(x.as_ref(), ady.as_ref(), sdp.par).as_ref(),
                g.as_ref(),
                sdp.par,
            );
            let dx = sym(k + xady);
            let ds: Vec<f64> = (0..m)
                .map(|c| target[c] / y[c] - s[c] - d[c] * dy[c])
                .collect();
            (dx, ds, dy, dz)
        };
        let steps = |dx: &Mat<f64>, ds: &[f64], dy: &[f64], dz: &Mat<f64>| {
            let ap = max_step_psd(lx.L(), dx.as_ref())?.min(max_step_pos(&s, ds));
            let ad = max_step_psd(lz.L(), dz.as_ref())?.min(max_step_pos(&y, dy));
            Ok::<_, String>((ap, ad))
        };
        // Predictor (σ = 0).
        let k_aff = -&x - &xrdg;
        let (dxa, dsa, dya, dza) = direction(&k_aff, &vec![0.0; m]);
        let (apa, ada) = match steps(&dxa, &dsa, &dya, &dza) {
            Ok(a) => a,
            Err(_) if best.0 < STALL_GAP => return Ok((best.1, best.2, it)),
            Err(e) => return Err(e),
        };
        let (apa, ada) = (apa.min(1.0), ada.min(1.0));
        let xa = &x + &dxa * faer::Scale(apa);
        let za = &z + &dza * faer::Scale(ada);
        let mu_aff = (inner(xa.as_ref(), za.as_ref())
            + (0..m)
                .map(|c| (s[c] + apa * dsa[c]) * (y[c] + ada * dya[c]))
                .sum::<f64>())
            / nm;
        let sigma = (mu_aff / mu).clamp(0.0, 1.0).powi(3);
        // Corrector: K = σμG − X − X R_d G − dX_aff dZ_aff G, target σμ − ds_aff dy_aff.
        let corr = prod(
            prod(dxa.as_ref(), dza.as_ref(), sdp.par).as_ref(),
            g.as_ref(),
            sdp.par,
        );
        let k = &g * faer::Scale(sigma * mu) - &x - &xrdg - &corr;
        let target: Vec<f64> = (0..m).map(|c| sigma * mu - dsa[c] * dya[c]).collect();
        let (dx, ds, dy, dz) = direction(&k, &target);
        let (ap, ad) = match steps(&dx, &ds, &dy, &dz) {
            Ok(a) => a,
            Err(_) if best.0 < STALL_GAP => return Ok((best.1, best.2, it)),
            Err(e) => return Err(e),
        };
        let (ap, ad) = ((STEP * ap).min(1.0), (STEP * ad).min(1.0));
        if !(ap > 1e-12 && ad > 1e-12) && best.0 < STALL_GAP {
            return Ok((best.1, best.2, it));
        }
        if !(ap > 1e-12 && ad > 1e-12) {
            return Err(format!(
                "nuclear interior point: steps {ap:.1e}/{ad:.1e} at iteration {it} (gap {gap:.1e})"
            ));
        }
        x += &dx * faer::Scale(ap);
        z += &dz * faer::Scale(ad);
        for c in 0..m {
            s[c] += ap * ds[c];
            y[c] += ad * dy[c];
        }
    }
    // The caller certifies whatever the best iterate gives; a loose one shows as a wide bracket.
    Ok((best.1, best.2, MAX_ITER))
}

fn block(x: &Mat<f64>, rq: usize) -> Mat<f64> {
    let rk = x.ncols() - rq;
    Mat::from_fn(rq, rk, |i, j| x[(i, rq + j)])
}
