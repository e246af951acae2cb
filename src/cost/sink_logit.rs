//! The selective sink-logit program on the copy-paste head (docs/theory.md §11, ours).
//!
//! A head with a learned sink logit $s$ (one scalar, its column carries no value) on the
//! copy-paste task of [`super::head`]: positions $0..T-1$ ($x_0$ the BOS, a visible key like any
//! other), sources $\pi$; query $i \ge 1$ is *on* when $\pi(i)$ is set and *off* otherwise; row 0
//! is unconstrained, as in §6. With logits $M = X W X^\top$ the constraints are
//! - **route** (on-query $i$, $t = \pi(i)$, every visible $j \le i$, $j \ne t$):
//!   $M_{it} - M_{ij} \ge \Delta$;
//! - **above the sink** (on-query $i$): $M_{it} - s \ge \Delta$;
//! - **below the sink** (off-query $i$, every visible $j \le i$, BOS included): $s - M_{ij} \ge \delta$.
//!
//! All are linear in $(W, s)$ jointly. *Linear sufficient version of the switch:* §11's hard
//! switch needs $s \ge \operatorname{LSE}(z_i) + \ln\frac{1-\varepsilon}{\varepsilon}$, and
//! $\operatorname{LSE}(z_i) \le \max_j z_{ij} + \ln(i+1)$, so $\delta = \ln(T(1-\varepsilon)/\varepsilon)$
//! (the logit that switches off every row at $W = 0$) suffices for every off-query; the same
//! $\Delta = \ln(T(1-\varepsilon)/\varepsilon)$ gives an on-query mass $\ge 1-\varepsilon$ on its source
//! against its $\le T$ competitors (the $i$ other visible keys and the sink).
//!
//! **Price of $s$.** $s$ is one more entry of the head's logit map and is priced as such: the
//! cost of $(W, s)$ is the norm of $\mathrm{diag}(W, s)$, Frobenius $\sqrt{\lVert W\rVert_F^2 + s^2}$ (the
//! Euclidean norm of the decayed parameters, as training decays $s$ like $W$) and nuclear
//! $\lVert W\rVert_\ast + \lvert s\rvert$ (the switch study reports $\lvert s\rvert$ beside
//! $\lVert W_{QK}\rVert_\ast$). Both are norms, so the minimum scales linearly in $(\Delta, \delta)$;
//! their duals are $\sqrt{\lVert Y\rVert_F^2 + y^2}$ and $\max(\lVert Y\rVert_2, \lvert y\rvert)$.
//!
//! **Coordinates and certificates** as in [`super`]: $W$ on the reduced basis $E = US$ of the
//! embeddings (orthonormal rows: the logits matrix itself); every value is a bracket
//! [dual bound $\sum_c\lambda_c b_c/\lVert\mathcal A^\ast\lambda\rVert_{\rm dual}$, norm of a primal rebuilt,
//! re-checked and rescaled to feasibility]; the interior-point solver ([`SinkLogitProgram::solve`],
//! feature `ipm`) solves the Frobenius program as a QP and the nuclear one as an SDP on
//! $[P, W; W^\top, Q] \succeq 0$ with $\lvert s\rvert = s^+ + s^-$.
//!
//! **Frobenius, orthonormal embeddings, closed form.** Write $n_{\rm on}$ for the on-queries and
//! $N_{\rm off} = \sum_{\text{off } i}(i+1)$ for the off-queries' visible keys. *Assumption:*
//! $N_{\rm off}\delta \ge n_{\rm on}\Delta$. Then
//! $$s^\star = \frac{N_{\rm off}\delta - n_{\rm on}\Delta}{1 + N_{\rm off} + n_{\rm on}} \ge 0,\qquad
//! C^F = \sqrt{s^{\star 2} + N_{\rm off}(\delta - s^\star)^2 + n_{\rm on}(s^\star + \Delta)^2},$$
//! attained by off rows $M_{ij} = s^\star - \delta$ ($j \le i$), on rows $M_{i\pi(i)} = s^\star + \Delta$ and
//! 0 elsewhere; proved by the multipliers $\delta - s^\star$ on every below-the-sink constraint,
//! $s^\star + \Delta$ on every above-the-sink one and 0 on the routes, whose $\mathcal A^\ast\lambda$ is that
//! primal (the KKT point of the QP). Derivation: for a fixed $s \ge 0$ an off row costs
//! $(i+1)\max(0, \delta - s)^2$ and an on row $(s+\Delta)^2$ (its other keys can stay at 0), a convex
//! quadratic in $s$ whose minimiser is $s^\star$. Without the assumption $s^\star < 0$, the on rows'
//! other keys must go below $s$ and the formula is a strict lower bound, not the minimum. As
//! $T \to \infty$ at a fixed on-rate, $C^F \to \sqrt{n_{\rm on}(\Delta + \delta)^2 + \delta^2}$: exponent ½.
//!
//! **Nuclear, orthonormal embeddings, closed form.** Let $n_c$ be the number of on-queries
//! copying source $c$ and $S = \sum_c\sqrt{n_c}$. The point $s = \delta$, $M = (\delta + \Delta)
//! \sum_{\text{on } i} e_i e_{\pi(i)}^\top$ is feasible and costs $\delta + (\delta + \Delta)S$. *Assumption:*
//! $n_{\rm off} \ge S + 1$ and the off-queries can be assigned to visible keys that are no source,
//! at most $\lfloor 1/\mu^2\rfloor$ to a key, $\mu = (S+1)/n_{\rm off}$. Dual: $\lambda = 1/\sqrt{n_{\pi(i)}}$
//! on each above-the-sink constraint and $\mu$ on one below-the-sink constraint per off-query (its
//! assigned key). Every row of $Y = \mathcal A^\ast\lambda$ has one entry, so $Y^\top Y$ is diagonal
//! (a source column holds $\sum 1/n_c = 1$, an assigned key at most $\lfloor 1/\mu^2\rfloor\mu^2 \le 1$),
//! $\lVert Y\rVert_2 \le 1$, $y = n_{\rm off}\mu - S = 1$, and the bound $\Delta S + \delta(S+1)$ equals the
//! primal value. So $C^\ast = \delta + (\delta+\Delta)\sum_c\sqrt{n_c}$: with distinct sources $S = n_{\rm on}$,
//! exponent 1. Every on-query pays $\delta + \Delta$ because the one scalar $s$ must sit $\delta$ above
//! every off-query logit and $\Delta$ below every on-query target: a sink logit compares logits
//! *across* queries, where the BOS sink and the diagonal compare them within a row.

use super::{CostError, NormKind, check_finite, mm, reduce};
use crate::linalg;
use faer::{Mat, MatRef, Par};
#[cfg(feature = "ipm")]
use {
    super::SolveOptions,
    super::ipm::{MAX_DENSE, MAX_NNZ, MAX_PSD_SVEC, blas_single_threaded, csc, settings, svec},
    clarabel::algebra::CscMatrix,
    clarabel::solver::{DefaultSolver, IPSolver, SolverStatus, SupportedConeT::*},
};

/// One constraint of the program ($\langle A_c, (W, s)\rangle \ge b_c$).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Con {
    /// On-query `i` prefers its source `t` over visible key `j`: $M_{it} - M_{ij} \ge \Delta$.
    Route {
        /// Query.
        i: u32,
        /// Its source.
        t: u32,
        /// The competing visible key.
        j: u32,
    },
    /// On-query `i`'s source `t` beats the sink logit: $M_{it} - s \ge \Delta$.
    AboveSink {
        /// Query.
        i: u32,
        /// Its source.
        t: u32,
    },
    /// Off-query `i`'s visible key `j` stays below the sink logit: $s - M_{ij} \ge \delta$.
    BelowSink {
        /// Query.
        i: u32,
        /// The visible key.
        j: u32,
    },
}

impl Con {
    /// Query row, the (key, coefficient) pairs of its logits, and the coefficient of $s$.
    fn terms(self) -> (usize, [(usize, f64); 2], usize, f64) {
        match self {
            Con::Route { i, t, j } => (i as usize, [(t as usize, 1.0), (j as usize, -1.0)], 2, 0.0),
            Con::AboveSink { i, t } => (i as usize, [(t as usize, 1.0), (0, 0.0)], 1, -1.0),
            Con::BelowSink { i, j } => (i as usize, [(j as usize, -1.0), (0, 0.0)], 1, 1.0),
        }
    }
}

/// The selective sink-logit program on given embeddings (see the module docs).
#[derive(Clone, Debug)]
pub struct SinkLogitProgram {
    /// Reduced embeddings $E$ ($T \times r$); `None` for orthonormal rows (variable = logits).
    e: Option<Mat<f64>>,
    t: usize,
    pi: Vec<Option<usize>>,
    cons: Vec<Con>,
    /// On-query margin $\Delta$.
    pub delta_on: f64,
    /// Off-query margin $\delta$ below the sink logit.
    pub delta_off: f64,
}

/// A certified value: the bracket [`lower`](Self::lower) ≤ min ≤ [`upper`](Self::upper), the
/// upper end the norm of the feasible point [`w`](Self::w), [`s`](Self::s).
#[derive(Clone, Debug)]
pub struct SinkLogitCost {
    /// Weak-duality lower bound.
    pub lower: f64,
    /// Cost of the feasible point.
    pub upper: f64,
    /// $(\text{upper} - \text{lower})/\text{upper}$.
    pub rel_gap: f64,
    /// The feasible $W$ (reduced coordinates).
    pub w: Mat<f64>,
    /// The feasible sink logit.
    pub s: f64,
    /// Interior-point iterations.
    pub iterations: usize,
}

/// The arithmetic check of a primal–dual pair.
#[derive(Clone, Copy, Debug)]
pub struct PairCheck {
    /// Cost of the primal point.
    pub primal: f64,
    /// $\sum_c\lambda_c b_c/\lVert\mathcal A^\ast\lambda\rVert_{\rm dual}$ (a certified lower bound).
    pub dual: f64,
    /// $\min_c \langle A_c, (W,s)\rangle / b_c$ (feasible iff $\ge 1$).
    pub min_ratio: f64,
    /// $(\text{primal} - \text{dual})/\text{primal}$.
    pub rel_gap: f64,
    /// Feasible (to $10^{-12}$), $\lambda \ge 0$, and the bound meets the value to
    /// [`super::exact::OPT_TOL`].
    pub optimal: bool,
}

/// Counts of a source map that the closed forms use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counts {
    /// On-queries.
    pub n_on: usize,
    /// Off-queries ($i \ge 1$ without a source).
    pub n_off: usize,
    /// $N_{\rm off} = \sum_{\text{off } i}(i+1)$, the off-queries' visible keys.
    pub off_keys: usize,
    /// $S = \sum_c\sqrt{n_c}$ over distinct sources.
    pub sqrt_sum: f64,
}

/// The counts of `pi` (see [`Counts`]).
pub fn counts(pi: &[Option<usize>]) -> Counts {
    let mut per = std::collections::BTreeMap::<usize, usize>::new();
    let (mut n_on, mut n_off, mut off_keys) = (0, 0, 0);
    for (i, p) in pi.iter().enumerate().skip(1) {
        match p {
            Some(c) => {
                n_on += 1;
                *per.entry(*c).or_default() += 1;
            }
            None => {
                n_off += 1;
                off_keys += i + 1;
            }
        }
    }
    Counts {
        n_on,
        n_off,
        off_keys,
        sqrt_sum: per.values().map(|&n| (n as f64).sqrt()).sum(),
    }
}

/// $s^\star = (N_{\rm off}\delta - n_{\rm on}\Delta)/(1 + N_{\rm off} + n_{\rm on})$.
pub fn fro_sink_logit(pi: &[Option<usize>], delta_on: f64, delta_off: f64) -> f64 {
    let c = counts(pi);
    let (b, n) = (c.off_keys as f64, c.n_on as f64);
    (b * delta_off - n * delta_on) / (1.0 + b + n)
}

/// The Frobenius closed form's assumption $N_{\rm off}\delta \ge n_{\rm on}\Delta$ (i.e. $s^\star \ge 0$).
pub fn fro_assumption(pi: &[Option<usize>], delta_on: f64, delta_off: f64) -> bool {
    let c = counts(pi);
    c.off_keys as f64 * delta_off >= c.n_on as f64 * delta_on
}

/// The Frobenius formula $\sqrt{s^{\star2} + N_{\rm off}(\delta - s^\star)^2 + n_{\rm on}(s^\star+\Delta)^2}$,
/// evaluated whether or not [`fro_assumption`] holds: the minimum on orthonormal embeddings
/// when it does, a strict lower bound when it does not (module docs).
pub fn fro_closed_form(pi: &[Option<usize>], delta_on: f64, delta_off: f64) -> f64 {
    let c = counts(pi);
    let s = fro_sink_logit(pi, delta_on, delta_off);
    (s * s + c.off_keys as f64 * (delta_off - s).powi(2) + c.n_on as f64 * (s + delta_on).powi(2))
        .sqrt()
}

/// The Frobenius optimum on orthonormal embeddings: logits $M$ ($T\times T$) and $s^\star$.
pub fn fro_optimum(pi: &[Option<usize>], delta_on: f64, delta_off: f64) -> (Mat<f64>, f64) {
    let s = fro_sink_logit(pi, delta_on, delta_off);
    let t = pi.len();
    let m = Mat::from_fn(t, t, |i, j| match pi[i] {
        _ if i == 0 || j > i => 0.0,
        Some(src) if j == src => s + delta_on,
        Some(_) => 0.0,
        None => s - delta_off,
    });
    (m, s)
}

/// The nuclear closed form $\delta + (\delta+\Delta)\sum_c\sqrt{n_c}$: the cost of the feasible point
/// [`nuclear_optimum`] (always an upper bound), the minimum when
/// [`SinkLogitProgram::nuclear_dual`] exists.
pub fn nuclear_closed_form(pi: &[Option<usize>], delta_on: f64, delta_off: f64) -> f64 {
    delta_off + (delta_off + delta_on) * counts(pi).sqrt_sum
}

/// The nuclear optimum: $s = \delta$, $M = (\delta+\Delta)\sum_{\text{on } i} e_i e_{\pi(i)}^\top$.
pub fn nuclear_optimum(pi: &[Option<usize>], delta_on: f64, delta_off: f64) -> (Mat<f64>, f64) {
    let t = pi.len();
    let m = Mat::from_fn(t, t, |i, j| {
        if i > 0 && pi[i] == Some(j) {
            delta_off + delta_on
        } else {
            0.0
        }
    });
    (m, delta_off)
}

/// Cost of $(W, s)$: Frobenius $\sqrt{\lVert W\rVert_F^2 + s^2}$, nuclear $\lVert W\rVert_\ast + \lvert s\rvert$.
pub fn cost_norm(kind: NormKind, w: MatRef<'_, f64>, s: f64, par: Par) -> f64 {
    match kind {
        NormKind::Fro => linalg::fro_norm(w).hypot(s),
        NormKind::Nuclear => linalg::nuclear_norm(w, par) + s.abs(),
    }
}

/// Dual norm: Frobenius $\sqrt{\lVert Y\rVert_F^2 + y^2}$, nuclear $\max(\lVert Y\rVert_2, \lvert y\rvert)$.
pub fn dual_cost_norm(kind: NormKind, y: MatRef<'_, f64>, ys: f64, par: Par) -> f64 {
    match kind {
        NormKind::Fro => linalg::fro_norm(y).hypot(ys),
        NormKind::Nuclear => linalg::spectral_norm(y, par).max(ys.abs()),
    }
}

impl SinkLogitProgram {
    /// Builds the program on embeddings `x` ($T \times d$) for sources `pi` (`pi[i]` in
    /// $1..i-1$, `pi[0]` and `pi[1]` unset: BOS is never a source) and margins
    /// $\Delta$ (`delta_on`), $\delta$ (`delta_off`), both positive and finite.
    pub fn new(
        x: MatRef<'_, f64>,
        pi: &[Option<usize>],
        delta_on: f64,
        delta_off: f64,
    ) -> Result<Self, CostError> {
        let t = x.nrows();
        if t < 2 {
            return Err(CostError::Invalid(format!(
                "the sink-logit program needs T >= 2, got T = {t}"
            )));
        }
        if pi.len() != t {
            return Err(CostError::Invalid(format!(
                "{} sources for {t} positions",
                pi.len()
            )));
        }
        for (name, v) in [("Δ (on-queries)", delta_on), ("δ (off-queries)", delta_off)] {
            if !(v > 0.0 && v.is_finite()) {
                return Err(CostError::Invalid(format!(
                    "margin {name} must be positive and finite, got {v}"
                )));
            }
        }
        check_finite(x)?;
        let mut cons = Vec::new();
        for (i, p) in pi.iter().enumerate() {
            match *p {
                Some(src) if i == 0 || src == 0 || src >= i => {
                    return Err(CostError::Invalid(format!(
                        "source {src} of query {i}: a source lies in 1..{i}-1 (BOS is never one)"
                    )));
                }
                Some(src) => {
                    for j in (0..=i).filter(|&j| j != src) {
                        cons.push(Con::Route {
                            i: i as u32,
                            t: src as u32,
                            j: j as u32,
                        });
                    }
                    cons.push(Con::AboveSink {
                        i: i as u32,
                        t: src as u32,
                    });
                }
                None if i == 0 => {}
                None => cons.extend((0..=i).map(|j| Con::BelowSink {
                    i: i as u32,
                    j: j as u32,
                })),
            }
        }
        let gram = mm(x, x.transpose(), Par::Seq);
        let orthonormal = x.ncols() >= t
            && (0..t).all(|i| {
                (0..t).all(|j| (gram[(i, j)] - if i == j { 1.0 } else { 0.0 }).abs() < 1e-10)
            });
        let e = if orthonormal {
            None
        } else {
            Some(reduce(x)?.0)
        };
        Ok(Self {
            e,
            t,
            pi: pi.to_vec(),
            cons,
            delta_on,
            delta_off,
        })
    }

    /// The constraints, in order.
    pub fn constraints(&self) -> &[Con] {
        &self.cons
    }

    /// The source map.
    pub fn sources(&self) -> &[Option<usize>] {
        &self.pi
    }

    /// Whether the variable is the logits matrix itself (orthonormal embeddings).
    pub fn is_orthonormal(&self) -> bool {
        self.e.is_none()
    }

    /// Side $r$ of the reduced variable $W$ ($r \times r$).
    pub fn dim(&self) -> usize {
        self.e.as_ref().map_or(self.t, |e| e.ncols())
    }

    /// Right-hand side $b_c$: $\Delta$ for the on-queries' constraints, $\delta$ for the off-queries'.
    pub fn rhs(&self, c: Con) -> f64 {
        match c {
            Con::BelowSink { .. } => self.delta_off,
            _ => self.delta_on,
        }
    }

    fn logits(&self, w: MatRef<'_, f64>, par: Par) -> Mat<f64> {
        match &self.e {
            None => w.to_owned(),
            Some(e) => mm(mm(e.as_ref(), w, par).as_ref(), e.transpose(), par),
        }
    }

    /// $\langle A_c, (W, s)\rangle$ for every constraint.
    pub fn forward(&self, w: MatRef<'_, f64>, s: f64, par: Par) -> Vec<f64> {
        let m = self.logits(w, par);
        self.cons
            .iter()
            .map(|&c| {
                let (i, keys, n, sigma) = c.terms();
                keys[..n].iter().map(|&(k, a)| a * m[(i, k)]).sum::<f64>() + sigma * s
            })
            .collect()
    }

    /// $\mathcal A^\ast\lambda = (E^\top L E, \sum_c\lambda_c\sigma_c)$, $\sigma_c$ the coefficient of $s$.
    pub fn adjoint(&self, lam: &[f64], par: Par) -> (Mat<f64>, f64) {
        let mut l = Mat::<f64>::zeros(self.t, self.t);
        let mut ys = 0.0;
        for (&c, &v) in self.cons.iter().zip(lam) {
            let (i, keys, n, sigma) = c.terms();
            for &(k, a) in &keys[..n] {
                l[(i, k)] += a * v;
            }
            ys += sigma * v;
        }
        let y = match &self.e {
            None => l,
            Some(e) => mm(mm(e.transpose(), l.as_ref(), par).as_ref(), e.as_ref(), par),
        };
        (y, ys)
    }

    /// Weak-duality lower bound $\sum_c\lambda_c b_c/\lVert\mathcal A^\ast\lambda\rVert_{\rm dual}$ for
    /// $\lambda \ge 0$ (negative entries are clamped to 0); 0 when it is undefined.
    pub fn lower_bound(&self, kind: NormKind, lam: &[f64], par: Par) -> f64 {
        let lam: Vec<f64> = lam.iter().map(|l| l.max(0.0)).collect();
        let num: f64 = self
            .cons
            .iter()
            .zip(&lam)
            .map(|(&c, l)| l * self.rhs(c))
            .sum();
        let (y, ys) = self.adjoint(&lam, par);
        let dn = dual_cost_norm(kind, y.as_ref(), ys, par);
        if num > 0.0 && dn > 0.0 { num / dn } else { 0.0 }
    }

    /// $\min_c\langle A_c, (W,s)\rangle/b_c$: the point is feasible iff this is $\ge 1$.
    pub fn min_ratio(&self, w: MatRef<'_, f64>, s: f64, par: Par) -> f64 {
        self.forward(w, s, par)
            .into_iter()
            .zip(&self.cons)
            .map(|(g, &c)| g / self.rhs(c))
            .fold(f64::INFINITY, f64::min)
    }

    /// Checks that $(W, s)$ and $\lambda$ prove each other optimal (on the calling thread).
    pub fn check_pair(&self, kind: NormKind, w: MatRef<'_, f64>, s: f64, lam: &[f64]) -> PairCheck {
        let par = Par::Seq;
        let min_ratio = self.min_ratio(w, s, par);
        let primal = cost_norm(kind, w, s, par);
        let dual = self.lower_bound(kind, lam, par);
        let rel_gap = (primal - dual) / primal;
        PairCheck {
            primal,
            dual,
            min_ratio,
            rel_gap,
            optimal: min_ratio >= 1.0 - 1e-12
                && lam.len() == self.cons.len()
                && lam.iter().all(|&l| l >= 0.0)
                && rel_gap.abs() <= super::exact::OPT_TOL,
        }
    }

    /// The certified bracket of a point and multipliers: $(W, s)$ rescaled by
    /// $1/\min_c\langle A_c,(W,s)\rangle/b_c$ (feasible; its norm the upper end), the lower end
    /// [`lower_bound`](Self::lower_bound), raised to `floor` (a lower bound known otherwise);
    /// `iterations` is left 0 for the solver to fill in.
    pub fn certify(
        &self,
        kind: NormKind,
        w: Mat<f64>,
        s: f64,
        lam: &[f64],
        floor: f64,
        par: Par,
    ) -> Result<SinkLogitCost, CostError> {
        let theta = self.min_ratio(w.as_ref(), s, par);
        if !(theta > 0.0 && theta.is_finite()) {
            return Err(CostError::Solver(format!(
                "primal has least constraint ratio {theta:.3e}: not rescalable to feasibility"
            )));
        }
        let w = w * faer::Scale(1.0 / theta);
        let s = s / theta;
        let upper = cost_norm(kind, w.as_ref(), s, par);
        let lower = self.lower_bound(kind, lam, par).max(floor);
        if !(upper.is_finite() && lower > 0.0) {
            return Err(CostError::Solver(format!(
                "bracket unusable: [{lower:.3e}, {upper:.3e}]"
            )));
        }
        Ok(SinkLogitCost {
            lower,
            upper,
            rel_gap: (upper - lower) / upper,
            w,
            s,
            iterations: 0,
        })
    }

    /// The Frobenius closed form's multipliers (module docs): $\delta - s^\star$ on every
    /// below-the-sink constraint, $s^\star + \Delta$ on every above-the-sink one, 0 on routes.
    /// They prove [`fro_optimum`] optimal exactly when [`fro_assumption`] holds (else
    /// $s^\star < 0$, the on-queries' sources sit only $s^\star + \Delta < \Delta$ above their other
    /// keys, and [`check_pair`](Self::check_pair) rejects the infeasible point).
    pub fn fro_dual(&self) -> Vec<f64> {
        let s = fro_sink_logit(&self.pi, self.delta_on, self.delta_off);
        self.cons
            .iter()
            .map(|c| match c {
                Con::Route { .. } => 0.0,
                Con::AboveSink { .. } => s + self.delta_on,
                Con::BelowSink { .. } => self.delta_off - s,
            })
            .collect()
    }

    /// The nuclear closed form's multipliers (module docs), or `None` when its assumption
    /// fails: $n_{\rm off} < S+1$, or the greedy assignment (each off-query to its own key when
    /// that is no source, else to the nearest earlier key that is no source and has room) finds
    /// no key with fewer than $\lfloor 1/\mu^2\rfloor$ off-queries.
    pub fn nuclear_dual(&self) -> Option<Vec<f64>> {
        let c = counts(&self.pi);
        if c.n_off == 0 {
            return None;
        }
        let mu = (c.sqrt_sum + 1.0) / c.n_off as f64;
        if mu > 1.0 {
            return None;
        }
        let mut cap = (1.0 / (mu * mu)).floor() as usize;
        while cap > 1 && cap as f64 * mu * mu > 1.0 {
            cap -= 1;
        }
        let mut per = vec![0usize; self.t];
        for p in self.pi.iter().flatten() {
            per[*p] += 1;
        }
        let is_source: Vec<bool> = per.iter().map(|&n| n > 0).collect();
        let mut load = vec![0usize; self.t];
        let mut key = vec![usize::MAX; self.t];
        for i in (1..self.t).filter(|&i| self.pi[i].is_none()) {
            let j = (0..=i).rev().find(|&j| !is_source[j] && load[j] < cap)?;
            load[j] += 1;
            key[i] = j;
        }
        Some(
            self.cons
                .iter()
                .map(|c| match *c {
                    Con::Route { .. } => 0.0,
                    Con::AboveSink { t, .. } => 1.0 / (per[t as usize] as f64).sqrt(),
                    Con::BelowSink { i, j } if key[i as usize] == j as usize => mu,
                    Con::BelowSink { .. } => 0.0,
                })
                .collect(),
        )
    }
}

#[cfg(feature = "ipm")]
impl SinkLogitProgram {
    /// Dense coefficients of constraint `c` on $W$: $A_c = e_i b_c^\top$ in reduced
    /// coordinates ($b_c$ the key combination); `None` for orthonormal rows.
    fn key_rows(&self) -> Option<Mat<f64>> {
        let e = self.e.as_ref()?;
        Some(Mat::from_fn(self.cons.len(), e.ncols(), |c, b| {
            let (_, keys, n, _) = self.cons[c].terms();
            keys[..n].iter().map(|&(k, a)| a * e[(k, b)]).sum()
        }))
    }

    /// Columns over $\mathrm{vec}\thinspace W$ (index $a r + b$) of the map taking $W$ to
    /// the vector of $-\langle A_c, W\rangle$, each entry times `scale`, with `col` mapping
    /// $(a, b)$ to the variable's index.
    fn w_columns(
        &self,
        scale: f64,
        ncols: usize,
        col: impl Fn(usize, usize) -> usize,
    ) -> Vec<Vec<(usize, f64)>> {
        let r = self.dim();
        let mut cols: Vec<Vec<(usize, f64)>> = vec![Vec::new(); ncols];
        match (self.key_rows(), &self.e) {
            (Some(kr), Some(e)) => {
                for a in 0..r {
                    for b in 0..r {
                        let v = &mut cols[col(a, b)];
                        for (c, con) in self.cons.iter().enumerate() {
                            let x = e[(con.terms().0, a)] * kr[(c, b)];
                            if x != 0.0 {
                                v.push((c, -scale * x));
                            }
                        }
                    }
                }
            }
            _ => {
                for (c, con) in self.cons.iter().enumerate() {
                    let (i, keys, n, _) = con.terms();
                    for &(k, a) in &keys[..n] {
                        cols[col(i, k)].push((c, -scale * a));
                    }
                }
            }
        }
        cols
    }

    fn sigma_column(&self, sign: f64) -> Vec<(usize, f64)> {
        self.cons
            .iter()
            .enumerate()
            .filter_map(|(c, con)| {
                let sigma = con.terms().3;
                (sigma != 0.0).then_some((c, -sign * sigma))
            })
            .collect()
    }

    fn status(s: SolverStatus) -> Result<(), CostError> {
        match s {
            SolverStatus::Solved | SolverStatus::AlmostSolved => Ok(()),
            SolverStatus::PrimalInfeasible | SolverStatus::AlmostPrimalInfeasible => {
                Err(CostError::Solver(
                    "the constraints admit no (W, s) on these embeddings (interior-point \
                     infeasibility; no certificate is built for this program)"
                        .into(),
                ))
            }
            other => Err(CostError::Solver(format!("stopped: {other:?}"))),
        }
    }

    /// Frobenius QP $\min\tfrac12(\lVert W\rVert_F^2 + s^2)$, certified.
    fn solve_fro(&self, opts: &SolveOptions) -> Result<SinkLogitCost, CostError> {
        let m = self.cons.len();
        let r = self.dim();
        let n = r * r;
        if self.e.is_some() && m * n > MAX_NNZ {
            return Err(CostError::Solver(format!(
                "Frobenius QP too large: {m}·{n} coefficients > {MAX_NNZ}"
            )));
        }
        if self.e.is_some() && n.min(m) > MAX_DENSE {
            return Err(CostError::Solver(format!(
                "Frobenius QP too large: dense block {} > {MAX_DENSE}",
                n.min(m)
            )));
        }
        let mut cols = self.w_columns(1.0, n, |a, b| a * r + b);
        cols.push(self.sigma_column(1.0));
        let a = csc(m, cols);
        let p = CscMatrix::identity(n + 1);
        let q = vec![0.0; n + 1];
        let b: Vec<f64> = self.cons.iter().map(|&c| -self.rhs(c)).collect();
        let cones = [NonnegativeConeT(m)];
        let mut s = DefaultSolver::new(&p, &q, &a, &b, &cones, settings(opts))
            .map_err(|e| CostError::Solver(e.to_string()))?;
        s.solve();
        let sol = &s.solution;
        Self::status(sol.status)?;
        let w = Mat::from_fn(r, r, |x, y| sol.x[x * r + y]);
        let c = self.certify(NormKind::Fro, w, sol.x[n], &sol.z, 0.0, opts.par)?;
        Ok(SinkLogitCost {
            iterations: sol.iterations as usize,
            ..c
        })
    }

    /// Nuclear SDP on $X = [P, W; W^\top, Q] \succeq 0$ with $s = s^+ - s^-$, certified;
    /// `floor` is the Frobenius lower end ($\lVert W\rVert_\ast + \lvert s\rvert \ge
    /// \sqrt{\lVert W\rVert_F^2+s^2}$).
    fn solve_nuclear(&self, opts: &SolveOptions, floor: f64) -> Result<SinkLogitCost, CostError> {
        let m = self.cons.len();
        let r = self.dim();
        let np = 2 * r;
        let nv = np * (np + 1) / 2;
        if nv > MAX_PSD_SVEC {
            return Err(CostError::Solver(format!(
                "nuclear SDP too large: {nv} PSD coordinates (order {np}) > {MAX_PSD_SVEC}"
            )));
        }
        if m * r * r > MAX_NNZ {
            return Err(CostError::Solver(format!(
                "nuclear SDP too large: {m}·{} coefficients > {MAX_NNZ}",
                r * r
            )));
        }
        let h = std::f64::consts::FRAC_1_SQRT_2;
        // Rows 0..m: gaps; m, m+1: s⁺, s⁻ ≥ 0; m+2..: −x ∈ PSD.
        let mut cols = self.w_columns(h, nv + 2, |a, b| svec(a, r + b));
        cols[nv] = self.sigma_column(1.0);
        cols[nv + 1] = self.sigma_column(-1.0);
        cols[nv].push((m, -1.0));
        cols[nv + 1].push((m + 1, -1.0));
        for (x, col) in cols.iter_mut().take(nv).enumerate() {
            col.push((m + 2 + x, -1.0));
        }
        let a = csc(m + 2 + nv, cols);
        let p = CscMatrix::zeros((nv + 2, nv + 2));
        let mut q = vec![0.0; nv + 2];
        for d in 0..np {
            q[svec(d, d)] = 0.5;
        }
        q[nv] = 1.0;
        q[nv + 1] = 1.0;
        let mut b: Vec<f64> = self.cons.iter().map(|&c| -self.rhs(c)).collect();
        b.extend(std::iter::repeat_n(0.0, 2 + nv));
        let cones = [NonnegativeConeT(m + 2), PSDTriangleConeT(np)];
        blas_single_threaded();
        let mut s = DefaultSolver::new(&p, &q, &a, &b, &cones, settings(opts))
            .map_err(|e| CostError::Solver(e.to_string()))?;
        s.solve();
        let sol = &s.solution;
        Self::status(sol.status)?;
        let w = Mat::from_fn(r, r, |x, y| sol.x[svec(x, r + y)] * h);
        let c = self.certify(
            NormKind::Nuclear,
            w,
            sol.x[nv] - sol.x[nv + 1],
            &sol.z[..m],
            floor,
            opts.par,
        )?;
        Ok(SinkLogitCost {
            iterations: sol.iterations as usize,
            ..c
        })
    }

    /// The minimal cost under `kind` by the interior-point solver, as a certified bracket
    /// (a nuclear program first solves the Frobenius one for its floor). Errors name the
    /// size cap, the solver status or the bracket that failed.
    pub fn solve(&self, kind: NormKind, opts: &SolveOptions) -> Result<SinkLogitCost, CostError> {
        let fro = self.solve_fro(opts)?;
        match kind {
            NormKind::Fro => Ok(fro),
            NormKind::Nuclear => {
                let nuc = self.solve_nuclear(opts, fro.lower)?;
                Ok(SinkLogitCost {
                    iterations: nuc.iterations + fro.iterations,
                    ..nuc
                })
            }
        }
    }
}

/// Source maps on which both closed forms' assumptions fail: every query $i \ge 2$ copies the
/// previous token ($\pi(i) = i-1$), only query 1 is off ($N_{\rm off} = 2$, $n_{\rm off} = 1 < S + 1$).
pub fn previous_token_everywhere(t: usize) -> Vec<Option<usize>> {
    (0..t).map(|i| (i >= 2).then(|| i - 1)).collect()
}

/// Registered check `sink_logit_selective` (feature `ipm`). `Kept`: copy-paste sources drawn by
/// [`super::head::sources`] (redrawn until both closed forms' assumptions hold), $T$ 4–9,
/// margins $\Delta, \delta \in [0.5, 4]$, orthonormal embeddings (a seeded rotation, $d = T+1$):
/// each closed form's primal–dual pair proves it optimal ([`PairCheck::optimal`]), and the
/// interior-point bracket of each norm contains it and is at most $10^{-7}$ wide (relative);
/// then Gaussian embeddings ($d = T + 2$): the nuclear upper end is at least the Frobenius lower
/// end. `Dropped`: [`previous_token_everywhere`] with $\delta \le \Delta$, where both assumptions fail:
/// the case holds only if the formulas still fall inside the brackets, which they must not
/// (the Frobenius formula is then a strict lower bound, the nuclear one an upper bound).
/// Margin: the least relative slack of "closed form inside the bracket".
#[cfg(feature = "ipm")]
pub fn check_sink_logit_selective(
    cases: usize,
    seed: u64,
    assumption: crate::switch::Assumption,
) -> crate::outcome::CheckOutcome {
    use super::{EmbeddingKind, SolveOptions, embeddings, head};
    use crate::switch::Assumption;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    let mut out =
        crate::outcome::CheckOutcome::new("sink_logit_selective", "relative slack in the bracket");
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5e1f_0003);
    let opts = SolveOptions::default();
    for case in 0..cases {
        let t = rng.random_range(if assumption == Assumption::Kept {
            4..=9
        } else {
            5..=9
        });
        let delta_on = rng.random_range(0.5..4.0);
        let delta_off = match assumption {
            Assumption::Kept => rng.random_range(0.5..4.0),
            Assumption::Dropped => rng.random_range(0.5..=delta_on),
        };
        let es: u64 = rng.random();
        let run = || -> Result<(bool, f64, String), CostError> {
            let pi = match assumption {
                Assumption::Dropped => previous_token_everywhere(t),
                Assumption::Kept => {
                    let on_rate = 0.2 + 0.3 * (es % 1000) as f64 / 1000.0;
                    let mut k = 0u64;
                    loop {
                        let pi = head::sources(t, on_rate, es.wrapping_add(k))?;
                        let x = Mat::<f64>::identity(t, t);
                        let p = SinkLogitProgram::new(x.as_ref(), &pi, delta_on, delta_off)?;
                        if fro_assumption(&pi, delta_on, delta_off) && p.nuclear_dual().is_some() {
                            break pi;
                        }
                        k += 1;
                        if k > 200 {
                            return Err(CostError::Invalid(format!(
                                "no source map with both assumptions at T = {t} in 200 draws"
                            )));
                        }
                    }
                }
            };
            let x = embeddings(EmbeddingKind::Orthonormal, t, t + 1, es)?;
            let p = SinkLogitProgram::new(x.as_ref(), &pi, delta_on, delta_off)?;
            let (mf, sf) = fro_optimum(&pi, delta_on, delta_off);
            let fro_pair = p.check_pair(NormKind::Fro, mf.as_ref(), sf, &p.fro_dual());
            let (mn, sn) = nuclear_optimum(&pi, delta_on, delta_off);
            let nuc_pair = p
                .nuclear_dual()
                .map(|l| p.check_pair(NormKind::Nuclear, mn.as_ref(), sn, &l));
            let f = p.solve(NormKind::Fro, &opts)?;
            let n = p.solve(NormKind::Nuclear, &opts)?;
            let (cf, cn) = (
                fro_closed_form(&pi, delta_on, delta_off),
                nuclear_closed_form(&pi, delta_on, delta_off),
            );
            // Inside the bracket, up to 1e-9 relative: the bracket's own arithmetic (sums of
            // O(T²) terms and an SVD of order ≤ 10) rounds at ~1e-14, the solver's tolerance is
            // 1e-11; 1e-9 is far below the distance of a wrong formula in the `Dropped` cases.
            let slack = |v: f64, lo: f64, hi: f64| ((v - lo) / v).min((hi - v) / v) + 1e-9;
            let sf_ = slack(cf, f.lower, f.upper);
            let sn_ = slack(cn, n.lower, n.upper);
            let tight = f.rel_gap <= 1e-7 && n.rel_gap <= 1e-7;
            let g = embeddings(EmbeddingKind::Gaussian, t, t + 2, es)?;
            let pg = SinkLogitProgram::new(g.as_ref(), &pi, delta_on, delta_off)?;
            let gf = pg.solve(NormKind::Fro, &opts)?;
            let gn = pg.solve(NormKind::Nuclear, &opts)?;
            let order = gn.upper >= gf.lower * (1.0 - 1e-9);
            let pairs = fro_pair.optimal && nuc_pair.is_some_and(|c| c.optimal);
            let m = sf_.min(sn_);
            Ok((
                m >= 0.0 && tight && order && pairs,
                m,
                format!(
                    "case {case}: T={t} Δ={delta_on:.3} δ={delta_off:.3}: fro [{:.9},{:.9}] vs {cf:.9}; nuclear [{:.9},{:.9}] vs {cn:.9}; pairs fro {} nuclear {}; gaussian fro ≥ {:.6}, nuclear ≤ {:.6}",
                    f.lower,
                    f.upper,
                    n.lower,
                    n.upper,
                    fro_pair.optimal,
                    nuc_pair.map_or("no dual".to_string(), |c| c.optimal.to_string()),
                    gf.lower,
                    gn.upper
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
