//! The gap programs beyond the interior-point solvers' dense caps, by constraint generation (a
//! working set of constraints, grown by the violated ones): Frobenius by [`super::ipm`]'s QP,
//! nuclear by the structured SDP method of [`super::nuclear_ipm`].
//!
//! For a subset $S$ of the constraints, the relaxed program
//! $\min\lVert W\rVert$ s.t. $\langle A_c, W\rangle \ge \Delta$, $c \in S$, has a value below the full
//! one, and its multipliers $\lambda_S \ge 0$ (zero outside $S$) are dual-feasible for the full
//! program: the lower end $\Delta\thinspace\mathbf 1^\top\lambda / \lVert\mathcal A^\ast\lambda\rVert_{\rm dual}$ holds for the
//! full program (dual norm: Frobenius, or spectral for the nuclear norm). Its optimum $W_S$, with every gap of the full program recomputed in f64, rescaled
//! by $\Delta/\min_c\langle A_c, W_S\rangle$, is feasible: the upper end. The constraints $W_S$ violates
//! (per query row, the most violated first) join $S$ and the relaxed program is solved again,
//! until the bracket is within the tolerance, nothing is violated, or $S$ reaches the dense cap
//! [`super::ipm::MAX_DENSE`] (Frobenius) or [`MAX_NUCLEAR_SET`] (nuclear). Every round's bracket is certified, so the best ends so far are.
//! A relaxed program that is infeasible makes the full one infeasible (its constraints are a
//! subset), and its Gordan certificate is one of the full program.
//!
//! The start: per query row, the [`INIT_PER_ROW`] competitors $j$ nearest its target
//! ($\lVert e^k_{t(i)} - e^k_j\rVert$ smallest: the hardest to separate); a nuclear program of at
//! most [`NUCLEAR_DIRECT`] constraints is solved on all of them at once.

use super::*;

/// Competitors per query row in the first working set.
pub const INIT_PER_ROW: usize = 2;
/// Violated constraints added per query row and round.
pub const ADD_PER_ROW: usize = 3;
/// Rounds at most.
pub const MAX_ROUNDS: usize = 40;
/// A nuclear program with at most this many constraints is solved whole (its Schur matrix of
/// order $m$ factors in well under a second).
pub const NUCLEAR_DIRECT: usize = 1500;
/// Largest working set of a nuclear program: the Schur matrix's factor costs $m^3/3$ flops an
/// iteration (9·10⁹ at 3000, seconds on two cores).
pub const MAX_NUCLEAR_SET: usize = 3000;

/// Solves the program `p` under norm `kind` by constraint generation. `Err` names why it could
/// not (the interior-point method failed on a relaxed program).
pub fn solve(p: &GapProgram, kind: NormKind, opts: SolveOptions) -> Result<CostSolution, String> {
    let par = opts.par;
    let m = p.n_constraints();
    let relaxed = |idx: &[usize]| match kind {
        // The conic solver's QP, and where it stops without an answer the dual QP on the Gram
        // matrix (its failures are on nearly parallel rows, which the per-constraint scaling
        // of the latter absorbs).
        NormKind::Fro => super::ipm::fro_raw(&p.subset(idx), &opts)
            .or_else(|e| super::dual_qp::raw(p, idx, par).map_err(|d| format!("{e}; {d}"))),
        NormKind::Nuclear => super::nuclear_ipm::raw(p, idx, par),
    };
    let cap = match kind {
        NormKind::Fro => super::ipm::MAX_DENSE,
        NormKind::Nuclear => MAX_NUCLEAR_SET,
    };
    // ‖e_t − e_j‖² from the key-side Gram matrix (orthonormal rows: 2).
    let gk =
        p.e.as_ref()
            .map(|(_, k)| mm(k.as_ref(), k.transpose(), par));
    let dist = |t: usize, j: usize| {
        gk.as_ref()
            .map_or(2.0, |g| g[(t, t)] + g[(j, j)] - 2.0 * g[(t, j)])
    };
    // Constraints of each row, contiguous in `p.cons`.
    let mut rows: Vec<(usize, usize)> = Vec::new();
    for (c, &(i, _)) in p.cons.iter().enumerate() {
        match rows.last_mut() {
            Some(r) if p.cons[r.0].0 == i => r.1 = c + 1,
            _ => rows.push((c, c + 1)),
        }
    }
    let mut in_s = vec![false; m];
    for &(a, b) in &rows {
        let i = p.cons[a].0 as usize;
        let t = p.targets[i].unwrap_or(i);
        let mut cand: Vec<(f64, usize)> =
            (a..b).map(|c| (dist(t, p.cons[c].1 as usize), c)).collect();
        cand.sort_by(|x, y| x.0.total_cmp(&y.0));
        let take = if kind == NormKind::Nuclear && m <= NUCLEAR_DIRECT {
            cand.len()
        } else {
            INIT_PER_ROW
        };
        for &(_, c) in cand.iter().take(take) {
            in_s[c] = true;
        }
    }
    let mut best: Option<CostSolution> = None;
    let mut iterations = 0usize;
    let mut why_stopped = String::new();
    for round in 0..MAX_ROUNDS {
        let idx: Vec<usize> = (0..m).filter(|&c| in_s[c]).collect();
        let sub = p.subset(&idx);
        // A failed relaxed solve after the first round keeps the certified bracket so far.
        let raw = match relaxed(&idx) {
            Ok(r) => r,
            Err(e) if best.is_some() => {
                why_stopped = format!("working set: round {} failed ({e})", round + 1);
                break;
            }
            Err(e) => return Err(e),
        };
        let (w, lam, it) = match raw {
            super::ipm::Raw::Infeasible { lam, iterations } => {
                let c = super::ipm::certificate(&sub, &lam, par)
                    .ok_or_else(|| "working set: infeasibility ray does not verify".to_string())?;
                return Ok(CostSolution {
                    certificate: Some(c),
                    iterations: iterations as usize,
                    solver: Method::IpmWorkingSet,
                    ..unsolved(p)
                });
            }
            super::ipm::Raw::Solved { w, lam, iterations } => (w, lam, iterations as usize),
        };
        iterations += it;
        let gaps = p.forward(w.as_ref(), par);
        let gmin = gaps.iter().copied().fold(f64::INFINITY, f64::min);
        // Weak duality needs λ ≥ 0: the solver's iterate is interior, clamping only guards
        // against rounding.
        let lam: Vec<f64> = lam.iter().map(|l| l.max(0.0)).collect();
        let s: f64 = lam.iter().sum();
        let z = sub.adjoint(&lam, par);
        let zn = dual_norm(kind, z.as_ref(), par);
        let lower = if s > 0.0 && zn > 0.0 {
            p.delta * s / zn
        } else {
            0.0
        };
        let upper_point = (gmin > 0.0 && gmin.is_finite()).then(|| w * faer::Scale(p.delta / gmin));
        let upper = upper_point
            .as_ref()
            .map_or(f64::INFINITY, |x| norm_of(kind, x.as_ref(), par));
        let prev_lower = best.as_ref().and_then(|b| b.lower).unwrap_or(0.0);
        let prev_upper = best.as_ref().and_then(|b| b.value).unwrap_or(f64::INFINITY);
        let lo = lower.max(prev_lower);
        let (up, point) = if upper < prev_upper {
            (upper, upper_point)
        } else {
            (prev_upper, best.as_mut().and_then(|b| b.w.take()))
        };
        best = Some(CostSolution {
            value: up.is_finite().then_some(up),
            lower: Some(lo),
            rel_gap: up.is_finite().then(|| (up - lo) / up),
            feasible: up.is_finite(),
            iterations,
            rank: None,
            solver: Method::IpmWorkingSet,
            w: point,
            ..unsolved(p)
        });
        if up.is_finite() && (up - lo) / up <= opts.rel_gap {
            why_stopped.clear();
            break;
        }
        // Grow S by each row's most violated constraints.
        let mut added = 0usize;
        for &(a, b) in &rows {
            let mut viol: Vec<(f64, usize)> = (a..b)
                .filter(|&c| !in_s[c] && gaps[c] < p.delta * (1.0 - 1e-10))
                .map(|c| (gaps[c], c))
                .collect();
            viol.sort_by(|x, y| x.0.total_cmp(&y.0));
            for &(_, c) in viol.iter().take(ADD_PER_ROW) {
                in_s[c] = true;
                added += 1;
            }
        }
        let size = idx.len() + added;
        if added == 0 {
            why_stopped = format!("working set: nothing violated after {} rounds", round + 1);
            break;
        }
        let (rq, rk) = p.dim();
        let dense = match kind {
            NormKind::Fro => size.min(rq * rk),
            NormKind::Nuclear => size,
        };
        if dense > cap {
            why_stopped = format!(
                "working set of {size} constraints would exceed the dense cap {cap} after {} rounds",
                round + 1
            );
            break;
        }
        why_stopped = format!("working set: {MAX_ROUNDS} rounds");
    }
    let mut s = best.ok_or("working set: no round ran")?;
    // No round gave a point with every gap of the full program positive: that is no evidence
    // of infeasibility (only a relaxed program's certificate is), so the caller falls back.
    if !s.feasible {
        return Err(format!(
            "working set: no rescalable point of the full program ({why_stopped})"
        ));
    }
    if let Some(w) = &s.w {
        let sv = linalg::singular_values_par(w.as_ref(), par);
        s.rank = Some(sv.iter().filter(|&&x| x > 1e-6 * sv[0]).count());
    }
    if !why_stopped.is_empty() {
        s.fallback = Some(why_stopped);
    }
    Ok(s)
}
