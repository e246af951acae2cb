//! Minimal cost of a sink or a diagonal pattern (docs/theory.md §6, claim A5).
//!
//! For embeddings $x_0..x_{T-1}$ ($x_0 = s$ the sink) and a target $t(i)$ per
//! query row $i \in \lbrace 1..T-1\rbrace$ ($t(i) = 0$: sink, $t(i) = i$: diagonal), the
//! gap program is
//! $$ C = \min \lVert W\rVert \quad\text{s.t.}\quad x_i^\top W (x_{t(i)} - x_j) \ge \Delta
//!    \quad \forall\thinspace i \ge 1,\ j \le i,\ j \ne t(i), $$
//! with $\lVert\cdot\rVert$ the Frobenius or the nuclear norm (both convex programs).
//!
//! **Solver.** Write the constraints as $\mathcal A(W) \ge \Delta\mathbf 1$.
//! Chambolle–Pock primal–dual iterations (arXiv:0912.4571 is not it; see
//! Chambolle & Pock, *A first-order primal-dual algorithm for convex problems
//! with applications to imaging*, 2011) with the prox of $\tfrac12\lVert W\rVert_F^2$
//! (accelerated variant) or of $\lVert W\rVert_\ast$ (singular-value soft-thresholding).
//! Every iterate yields a *certified bracket*:
//! - upper: $\lVert W\rVert\thinspace\Delta/\min_c \mathcal A(W)\_c$ (a feasible rescaling of $W$);
//! - lower: for any $\lambda \ge 0$, $\Delta\thinspace\mathbf 1^\top\lambda / \lVert\mathcal A^\ast\lambda\rVert_{\rm dual}$
//!   (weak duality: $\langle \mathcal A^\ast\lambda, W\rangle \ge \Delta \mathbf 1^\top \lambda$ and Hölder),
//!   the dual norm being Frobenius for Frobenius and spectral for nuclear.
//!
//! The solver stops when the relative gap (upper − lower)/upper is below a
//! tolerance and reports both ends, so a value is never better than its gap.
//!
//! **Feasibility** (Gordan's alternative): the constraints are strictly
//! feasible iff $0 \notin \mathrm{conv}\lbrace A_c\rbrace$, $A_c = x_i (x_{t(i)} - x_j)^\top$.
//! The min-norm point $Z = \sum_c \lambda_c A_c$ of that hull (λ in the
//! simplex) is either a witness ($\min_c \langle A_c, Z\rangle > 0$, checked by
//! arithmetic) or, when $\lVert Z\rVert_F \approx 0$, a certificate of infeasibility.
//!
//! **Reduction.** $W$ may be restricted to the row space of $X$ on both sides
//! (projecting never increases either norm nor changes a constraint), so with
//! the thin SVD $X = U S V^\top$ the program runs on $E = US$ ($T \times r$,
//! $r = \mathrm{rank}\thinspace X$). For orthonormal embeddings the logits matrix
//! $M = X W X^\top$ itself is the variable.
//!
//! **Files.** `program` (the program, its operator and norms), `feasibility`
//! (Gordan), `solver` (primal–dual with certified brackets), `closed_form`
//! (§6 closed forms and witnesses), `hildreth` (independent Frobenius solver),
//! `embeddings` (seeded families), `check` (registered check `cost_closed_form`),
//! `ipm` (the interior-point solver, feature `ipm`), `nuclear_ipm` (the nuclear program beyond
//! its SDP cap, a primal–dual method on the Schur matrix of the rank-two constraints),
//! `dual_qp` (the Frobenius program's dual QP on the constraints' Gram matrix, where the conic
//! solver stops), `working_set` (both programs beyond the dense caps, by constraint generation), [`definitions`] (the map of cost
//! definitions and the A5 verdict over it),
//! [`head`] (the whole head on copy-paste), [`sink_logit`] (the selective sink-logit program on
//! the copy-paste head, docs/theory.md §11); this file holds the shared types and
//! [`CostQuery`].

mod check;
mod closed_form;
pub mod definitions;
#[cfg(feature = "ipm")]
pub mod dual_qp;
mod embeddings;
pub mod exact;
mod feasibility;
pub mod head;
mod hildreth;
#[cfg(feature = "ipm")]
pub mod ipm;
#[cfg(feature = "ipm")]
mod nuclear_ipm;
mod program;
pub mod sink_logit;
mod solver;
#[cfg(feature = "ipm")]
pub mod working_set;

pub use check::*;
pub use closed_form::*;
pub use embeddings::*;
pub use feasibility::*;
pub use hildreth::*;
pub use program::*;
pub use solver::*;

use crate::linalg::{self, Mat};
use faer::linalg::matmul::matmul;
use faer::{Accum, MatRef, Par};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// Errors of the cost programs.
#[derive(Debug, thiserror::Error)]
pub enum CostError {
    /// A parameter is out of its domain.
    #[error("invalid cost parameter: {0}")]
    Invalid(String),
    /// Training the model of trained embeddings failed.
    #[error("trained embeddings: {0}")]
    Training(String),
    /// An SVD did not converge.
    #[error("SVD failed to converge")]
    Svd,
    /// Neither a witness nor a certificate was found within the iteration budget.
    #[error("feasibility undetermined after {0} iterations (residual {1:.3e})")]
    Undetermined(usize, f64),
    /// The interior-point solver stopped without a usable answer (status, size cap, or a
    /// bracket that does not verify).
    #[error("interior-point solver: {0}")]
    Solver(String),
}

/// Attention pattern on the off-queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Every query attends to position 0.
    Sink,
    /// Every query attends to itself.
    Diagonal,
}

/// Cost definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// Frobenius norm $\lVert W\rVert_F$.
    Fro,
    /// Nuclear norm $\lVert W\rVert_\ast$ (= minimal factored weight decay $\tfrac12(\lVert W_Q\rVert_F^2+\lVert W_K\rVert_F^2)$).
    Nuclear,
}

/// Embedding family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum EmbeddingKind {
    /// Orthonormal rows (needs $d \ge T$), a seeded random rotation.
    Orthonormal,
    /// i.i.d. $\mathcal N(0, 1/d)$ entries.
    Gaussian,
    /// The attention input $x_i = E_{\rm tok}\[w_i\] + E_{\rm pos}\[i\]$ of a one-layer model
    /// trained on bigram-copy at this $T$ and $d$ (see `crate::train::embeddings`).
    Trained,
}

/// What the program prices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// $W_{QK}$ alone, every query $i \ge 1$ an off-query (§6).
    #[default]
    Qk,
    /// The whole head on copy-paste, $\lVert W_{QK}\rVert + \lVert W_{VO}\rVert$ (see [`head`]).
    Head,
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Pattern::Sink => "sink",
            Pattern::Diagonal => "diagonal",
        })
    }
}
impl std::fmt::Display for NormKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NormKind::Fro => "fro",
            NormKind::Nuclear => "nuclear",
        })
    }
}
impl std::fmt::Display for EmbeddingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EmbeddingKind::Orthonormal => "orthonormal",
            EmbeddingKind::Gaussian => "gaussian",
            EmbeddingKind::Trained => "trained",
        })
    }
}

/// Concentration margin $\Delta_\varepsilon(m) = \ln(m(1-\varepsilon)/\varepsilon)$:
/// a target ahead of $m$ others by $\Delta$ gets mass $\ge 1-\varepsilon$.
pub fn delta_eps(m: usize, eps: f64) -> Result<f64, CostError> {
    if !(eps > 0.0 && eps < 1.0) || m == 0 {
        return Err(CostError::Invalid(format!(
            "need 0 < eps < 1 and m >= 1 (eps = {eps}, m = {m})"
        )));
    }
    Ok(crate::patterns::concentration_gap(m, eps))
}

/// The sizes every embedding family needs: $T \ge 2$, $d \ge 1$.
pub fn check_sizes(t: usize, d: usize) -> Result<(), CostError> {
    if t < 2 || d == 0 {
        return Err(CostError::Invalid(format!(
            "need T >= 2 and d >= 1 (T = {t}, d = {d})"
        )));
    }
    Ok(())
}

/// Targets of a pattern: row 0 unconstrained, row $i \ge 1$ targets 0 (sink) or $i$ (diagonal).
pub fn pattern_targets(pattern: Pattern, t: usize) -> Vec<Option<usize>> {
    (0..t)
        .map(|i| match (i, pattern) {
            (0, _) => None,
            (_, Pattern::Sink) => Some(0),
            (_, Pattern::Diagonal) => Some(i),
        })
        .collect()
}

/// One value: the minimal cost of a pattern on seeded embeddings.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct CostQuery {
    /// Pattern.
    pub pattern: Pattern,
    /// Cost definition.
    pub norm: NormKind,
    /// Embedding family.
    pub embedding: EmbeddingKind,
    /// Context length.
    pub t: usize,
    /// Embedding dimension.
    pub d: usize,
    /// Gap Δ.
    pub delta: f64,
    /// Embedding seed (also the seed of the copy-paste sources).
    pub seed: u64,
    /// $W_{QK}$ alone or the whole head on copy-paste.
    #[serde(default)]
    pub scope: Scope,
    /// Fraction of on-queries (whole head only).
    #[serde(default = "default_on_rate")]
    pub on_rate: f64,
}

fn default_on_rate() -> f64 {
    head::DEFAULT_ON_RATE
}

/// Solves a [`CostQuery`] on its embeddings `x` ($T \times d$, drawn by the caller:
/// `crate::train::embeddings::solve_query` draws them for every family). For the
/// whole head: the sum of both parts, see [`head::HeadCost::total`].
pub fn solve_query_on(
    q: &CostQuery,
    x: MatRef<'_, f64>,
    opts: SolveOptions,
) -> Result<CostSolution, CostError> {
    match q.scope {
        Scope::Qk => {
            let p = GapProgram::for_pattern(x, q.pattern, q.delta)?;
            solve(&p, q.norm, opts)
        }
        Scope::Head => Ok(solve_head_query_on(q, x, opts)?.total()),
    }
}

/// Solves the whole-head program of a [`CostQuery`] on its embeddings `x` (its
/// `scope` is ignored).
pub fn solve_head_query_on(
    q: &CostQuery,
    x: MatRef<'_, f64>,
    opts: SolveOptions,
) -> Result<head::HeadCost, CostError> {
    let pi = head::sources(q.t, q.on_rate, q.seed)?;
    head::solve_head(x, q.pattern, &pi, q.norm, q.delta, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_fixture() {
        // docs/theory.md §1 fixture: Δ_0.01(63) = 8.738255.
        assert!((delta_eps(63, 0.01).unwrap() - 8.738255).abs() < 1e-6);
    }

    #[test]
    fn simplex_projection_sums_to_one() {
        let mut v = vec![0.3, -1.0, 2.0, 0.1];
        project_simplex(&mut v);
        assert!((v.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(v.iter().all(|&x| x >= 0.0));
    }
}
