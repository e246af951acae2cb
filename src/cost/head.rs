//! Whole-head cost on copy-paste: $W_{QK}$ and $W_{VO}$ together (docs/theory.md §6, §10).
//!
//! A context of $T$ positions, each its own token with embedding $x_i$ ($x_0$ the BOS,
//! the sink). A copy-paste source map $\pi$ makes some queries *on*: query $i$ must
//! output the token at $\pi(i) \in \lbrace 1..i-1\rbrace$ (BOS is never a source); the others
//! are *off*. The head is idealised as attending to one target per query, so its
//! cost splits into two independent convex programs:
//!
//! - **QK** (routing): $\min\lVert W_{QK}\rVert$ s.t. $x_i^\top W_{QK}(x_{\tau(i)} - x_j) \ge \Delta$
//!   for every $j \le i$, $j \ne \tau(i)$, with $\tau(i) = \pi(i)$ on on-queries and
//!   $\tau(i) = 0$ (sink) or $\tau(i) = i$ (diagonal) on off-queries;
//! - **VO** (copying, read-out tied to the embeddings): every source $s$ is decoded from
//!   its value, $(x_s - x_v)^\top W_{VO}\thinspace x_s \ge \Delta$ for every token $v \ne s$.
//!   Off-queries: with a **sink** the head must add nothing (hard switch), $W_{VO} x_0 = 0$,
//!   imposed exactly by writing $W_{VO} = W' P$ with $P = I - x_0 x_0^\top/\lVert x_0\rVert^2$;
//!   with a **diagonal** the head outputs $W_{VO} x_i$, the value of the query's own
//!   token (soft switch), which the task allows, so it adds no constraint.
//!
//! The VO constraint is $(P x_s)^\top W_{VO}^\top (x_s - x_v) \ge \Delta$: a
//! [`GapProgram`] with query rows $P x_s$, key rows $x_v$, every key visible, on the
//! variable $W_{VO}^\top$ (same norms). The cost of the head is
//! $\lVert W_{QK}\rVert + \lVert W_{VO}\rVert$ at the two optima (the programs share no variable).
//!
//! **Closed forms** (orthonormal embeddings, Frobenius): a row with $m$ competitors costs
//! $\Delta^2 m/(m+1)$ (docs/theory.md §6), so $C_{QK}^F = \Delta\sqrt{T - H_T}$ whatever the targets, and
//! $C_{VO}^F = \Delta\sqrt{n_{\rm src}(T-1)/T}$ for $n_{\rm src}$ distinct sources, for sink and
//! diagonal alike ($P x_s = x_s$ when the rows are orthonormal).
//! **Witness** (nuclear upper bound): one entry $\Delta$ per constrained row at its target column,
//! $\lVert W\rVert_\ast = \Delta\sum_c \sqrt{n_c}$ with $n_c$ the rows targeting column $c$.

use super::{
    CostError, CostSolution, GapProgram, NormKind, Pattern, SolveOptions, Visibility, solve,
};
use crate::linalg;
use faer::MatRef;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

/// Default fraction of queries $i \ge 2$ that are on-queries.
pub const DEFAULT_ON_RATE: f64 = 0.25;

/// Seeded copy-paste sources ("random earlier position" family of §10): each query
/// $i \in \lbrace 2..T-1\rbrace$ is on with probability `on_rate`, copying $\pi(i)$ uniform in
/// $\lbrace 1..i-1\rbrace$. At least one query is on (the last, when the draw leaves none).
pub fn sources(t: usize, on_rate: f64, seed: u64) -> Result<Vec<Option<usize>>, CostError> {
    if t < 3 {
        return Err(CostError::Invalid(format!(
            "copy-paste needs T >= 3 (a source after BOS and a later query), got T = {t}"
        )));
    }
    if !(0.0..=1.0).contains(&on_rate) {
        return Err(CostError::Invalid(format!(
            "on-query rate must lie in [0, 1], got {on_rate}"
        )));
    }
    let mut rng = StdRng::seed_from_u64(seed ^ 0xC0E7_0F0C_0B1E_5EED);
    let mut pi: Vec<Option<usize>> = (0..t)
        .map(|i| (i >= 2 && rng.random::<f64>() < on_rate).then(|| rng.random_range(1..i)))
        .collect();
    if pi.iter().all(Option::is_none) {
        pi[t - 1] = Some(rng.random_range(1..t - 1));
    }
    Ok(pi)
}

/// QK targets: $\tau(i) = \pi(i)$ on on-queries, the pattern's target on off-queries $i \ge 1$.
pub fn qk_targets(pattern: Pattern, pi: &[Option<usize>]) -> Vec<Option<usize>> {
    pi.iter()
        .enumerate()
        .map(|(i, p)| match (i, p, pattern) {
            (0, _, _) => None,
            (_, Some(s), _) => Some(*s),
            (_, None, Pattern::Sink) => Some(0),
            (_, None, Pattern::Diagonal) => Some(i),
        })
        .collect()
}

/// Distinct sources, sorted.
pub fn distinct_sources(pi: &[Option<usize>]) -> Vec<usize> {
    let mut s: Vec<usize> = pi.iter().flatten().copied().collect();
    s.sort_unstable();
    s.dedup();
    s
}

/// The QK program of the head.
pub fn qk_program(
    x: MatRef<'_, f64>,
    pattern: Pattern,
    pi: &[Option<usize>],
    delta: f64,
) -> Result<GapProgram, CostError> {
    GapProgram::new(x, &qk_targets(pattern, pi), delta)
}

/// The VO program of the head on the variable $W_{VO}^\top$ (see the module docs).
pub fn vo_program(
    x: MatRef<'_, f64>,
    pattern: Pattern,
    pi: &[Option<usize>],
    delta: f64,
) -> Result<GapProgram, CostError> {
    let t = x.nrows();
    if pi.len() != t {
        return Err(CostError::Invalid(format!(
            "{} sources for {t} positions",
            pi.len()
        )));
    }
    let src = distinct_sources(pi);
    if let Some(&bad) = src.iter().find(|&&s| s == 0 || s >= t) {
        return Err(CostError::Invalid(format!(
            "source {bad} is BOS or outside the context"
        )));
    }
    let mut targets = vec![None; t];
    for &s in &src {
        targets[s] = Some(s);
    }
    let xq = match pattern {
        Pattern::Diagonal => x.to_owned(),
        Pattern::Sink => {
            // Rows P x_i with P = I − x₀x₀ᵀ/‖x₀‖² (W_VO x₀ = 0: the sink adds nothing).
            let x0 = linalg::row(x, 0);
            let n0 = linalg::dot(&x0, &x0);
            if n0 <= 0.0 {
                return Err(CostError::Invalid("the BOS embedding x₀ is zero".into()));
            }
            let mut q = x.to_owned();
            for i in 0..t {
                let c = linalg::dot(&linalg::row(x, i), &x0) / n0;
                for (k, &v) in x0.iter().enumerate() {
                    q[(i, k)] -= c * v;
                }
            }
            q
        }
    };
    GapProgram::general(xq.as_ref(), x, &targets, delta, Visibility::All)
}

/// A solved whole-head program.
#[derive(Clone, Debug, Serialize)]
pub struct HeadCost {
    /// $\lVert W_{QK}\rVert + \lVert W_{VO}\rVert$ (sum of the certified upper ends); `None` when a part is infeasible.
    pub value: Option<f64>,
    /// Sum of the certified lower ends.
    pub lower: Option<f64>,
    /// (value − lower)/value.
    pub rel_gap: Option<f64>,
    /// Both parts feasible.
    pub feasible: bool,
    /// On-queries.
    pub on_queries: usize,
    /// Distinct sources.
    pub sources: usize,
    /// The routing part.
    pub qk: CostSolution,
    /// The copying part.
    pub vo: CostSolution,
}

impl HeadCost {
    /// The head as one [`CostSolution`] (for the sweep's records): value and bracket are
    /// the sums, the certificate is the first infeasible part's.
    pub fn total(&self) -> CostSolution {
        CostSolution {
            value: self.value,
            lower: self.lower,
            rel_gap: self.rel_gap,
            feasible: self.feasible,
            certificate: self
                .qk
                .certificate
                .clone()
                .or_else(|| self.vo.certificate.clone()),
            iterations: self.qk.iterations + self.vo.iterations,
            delta: self.qk.delta,
            constraints: self.qk.constraints + self.vo.constraints,
            rank: None,
            // Parts solved by different solvers (one fell back): the mixed method.
            solver: if self.qk.solver == self.vo.solver {
                self.qk.solver
            } else {
                super::Method::IpmAndFirstOrder
            },
            fallback: self
                .qk
                .fallback
                .clone()
                .or_else(|| self.vo.fallback.clone()),
            w: None,
        }
    }
}

/// Solves both programs of the head on embeddings `x` with sources `pi`.
pub fn solve_head(
    x: MatRef<'_, f64>,
    pattern: Pattern,
    pi: &[Option<usize>],
    norm: NormKind,
    delta: f64,
    opts: SolveOptions,
) -> Result<HeadCost, CostError> {
    let qk = solve(&qk_program(x, pattern, pi, delta)?, norm, opts)?;
    let vo = solve(&vo_program(x, pattern, pi, delta)?, norm, opts)?;
    let feasible = qk.feasible && vo.feasible;
    let (value, lower) = match (qk.value, vo.value, qk.lower, vo.lower) {
        (Some(a), Some(b), Some(la), Some(lb)) if feasible => (Some(a + b), Some(la + lb)),
        _ => (None, None),
    };
    Ok(HeadCost {
        value,
        lower,
        rel_gap: value.zip(lower).map(|(v, l)| (v - l) / v),
        feasible,
        on_queries: pi.iter().filter(|p| p.is_some()).count(),
        sources: distinct_sources(pi).len(),
        qk,
        vo,
    })
}

/// §6 closed forms for orthonormal embeddings, Frobenius: $(C_{QK}^F, C_{VO}^F)$.
pub fn fro_orthonormal(t: usize, n_sources: usize, delta: f64) -> (f64, f64) {
    (
        super::fro_orthonormal(t, delta),
        delta * (n_sources as f64 * (t - 1) as f64 / t as f64).sqrt(),
    )
}

/// Nuclear witness of a target assignment: $\Delta\sum_c\sqrt{n_c}$, $n_c$ = rows targeting $c$
/// (orthonormal embeddings; an upper bound on the nuclear optimum).
pub fn nuclear_witness(targets: &[Option<usize>], delta: f64) -> f64 {
    let mut n = vec![0usize; targets.len()];
    for &c in targets.iter().flatten() {
        n[c] += 1;
    }
    delta * n.iter().map(|&k| (k as f64).sqrt()).sum::<f64>()
}

/// Theorem check `cost_head_closed_form`: on random small copy-paste instances with
/// orthonormal embeddings, both parts of the head (sink and diagonal) have certified
/// Frobenius brackets containing the closed forms, nuclear brackets between the Frobenius
/// value and the witnesses; on Gaussian embeddings the VO Frobenius value agrees with
/// Hildreth's coordinate ascent. Margin: smallest relative slack.
pub fn check_closed_form(cases: usize, seed: u64) -> crate::outcome::CheckOutcome {
    let mut out = crate::outcome::CheckOutcome::new("cost_head_closed_form", "relative slack");
    let mut rng = StdRng::seed_from_u64(seed);
    let opts = super::CHECK_OPTS;
    for case in 0..cases {
        let (t, delta, pattern, es) = super::check_instance(&mut rng, 4..=9);
        let run = || -> Result<(bool, f64, String), CostError> {
            let x = super::embeddings(super::EmbeddingKind::Orthonormal, t, t + 1, es)?;
            let pi = sources(t, 0.5, es)?;
            let f = solve_head(x.as_ref(), pattern, &pi, NormKind::Fro, delta, opts)?;
            let n = solve_head(x.as_ref(), pattern, &pi, NormKind::Nuclear, delta, opts)?;
            let (cq, cv) = fro_orthonormal(t, f.sources, delta);
            let bracket =
                |s: &CostSolution| (s.lower.unwrap_or(0.0), s.value.unwrap_or(f64::INFINITY));
            let mut slacks = Vec::new();
            for (part, closed, fs, ns, wit) in [
                (
                    "qk",
                    cq,
                    &f.qk,
                    &n.qk,
                    nuclear_witness(&qk_targets(pattern, &pi), delta),
                ),
                ("vo", cv, &f.vo, &n.vo, delta * f.sources as f64),
            ] {
                let (fl, fu) = bracket(fs);
                let (nl, nu) = bracket(ns);
                // Closed form inside the Frobenius bracket; ‖W‖_* ≥ ‖W‖_F; nuclear lower
                // end ≤ witness. 1e-9 absorbs rounding of the bracket arithmetic.
                slacks.push((part, (closed - fl) / closed + 1e-9));
                slacks.push((part, (fu - closed) / closed + 1e-9));
                slacks.push((part, (nu - fl) / closed + 1e-9));
                slacks.push((part, (wit - nl) / wit + 1e-9));
            }
            // Gaussian cross-check of the VO program (two-sided embeddings, all keys visible).
            let g = super::embeddings(super::EmbeddingKind::Gaussian, t, t + 3, es)?;
            let pg = vo_program(g.as_ref(), pattern, &pi, delta)?;
            let fg = solve(&pg, NormKind::Fro, opts)?;
            let (s_valid, s_agree, _, hgap) = super::hildreth_slacks(&pg, &fg);
            slacks.push(("vo-gauss", s_valid));
            slacks.push(("vo-gauss", s_agree));
            let (worst, m) =
                slacks.iter().fold(
                    ("", f64::INFINITY),
                    |a, &(p, s)| if s < a.1 { (p, s) } else { a },
                );
            Ok((
                m >= 0.0 && hgap > 0.0,
                m,
                format!(
                    "case {case}: T={t} Δ={delta:.3} {pattern} sources={}: qk fro {:?} closed {cq:.6}; vo fro {:?} closed {cv:.6}; worst part {worst}",
                    f.sources,
                    bracket(&f.qk),
                    bracket(&f.vo)
                ),
            ))
        };
        match run() {
            Ok((ok, m, what)) => out.record(ok, m, || what),
            Err(e) => out.record(false, f64::NAN, || format!("case {case}: {e}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{EmbeddingKind, embeddings};

    #[test]
    fn sources_are_earlier_non_bos_positions() {
        for seed in 0..20 {
            let pi = sources(30, 0.3, seed).unwrap();
            assert!(pi[0].is_none() && pi[1].is_none());
            for (i, p) in pi.iter().enumerate() {
                if let Some(s) = p {
                    assert!((1..i).contains(s), "π({i}) = {s}");
                }
            }
            assert!(pi.iter().any(Option::is_some));
        }
        assert!(sources(2, 0.3, 0).is_err());
        assert!(sources(8, 1.5, 0).is_err());
    }

    #[test]
    fn sink_vo_solution_annihilates_bos() {
        // Gaussian rows: x₀ is not orthogonal to the sources, so W_VO x₀ = 0 binds.
        let x = embeddings(EmbeddingKind::Gaussian, 6, 9, 3).unwrap();
        let pi = sources(6, 0.6, 1).unwrap();
        let p = vo_program(x.as_ref(), Pattern::Sink, &pi, 2.0).unwrap();
        let s = solve(&p, NormKind::Fro, SolveOptions::default()).unwrap();
        // The optimal read-out logits M = (P X) W_VOᵀ Xᵀ have a zero row 0 (P x₀ = 0).
        let m = p.logits_of(s.w.as_ref().unwrap().as_ref(), faer::Par::Seq);
        let row0 = (0..6).map(|j| m[(0, j)].abs()).fold(0.0, f64::max);
        let scale = (0..6).map(|j| m[(1, j)].abs()).fold(0.0, f64::max);
        assert!(row0 <= 1e-9 * scale.max(1.0), "row 0 = {row0}");
        // And every constraint holds at the returned optimum.
        let gmin = p
            .forward(s.w.as_ref().unwrap().as_ref(), faer::Par::Seq)
            .into_iter()
            .fold(f64::INFINITY, f64::min);
        assert!(gmin >= 2.0 * (1.0 - 1e-9), "min gap {gmin}");
    }
}
