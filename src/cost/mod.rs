//! Minimal cost of a sink or a diagonal pattern (THEORY.md §6, claim A5).
//!
//! For embeddings $x_0..x_{T-1}$ ($x_0 = s$ the sink) and a target $t(i)$ per
//! query row $i \in \{1..T-1\}$ ($t(i) = 0$: sink, $t(i) = i$: diagonal), the
//! gap program is
//! $$ C = \min \|W\| \quad\text{s.t.}\quad x_i^\top W (x_{t(i)} - x_j) \ge \Delta
//!    \quad \forall\, i \ge 1,\ j \le i,\ j \ne t(i), $$
//! with $\|\cdot\|$ the Frobenius or the nuclear norm (both convex programs).
//!
//! **Solver.** Write the constraints as $\mathcal A(W) \ge \Delta\mathbf 1$.
//! Chambolle–Pock primal–dual iterations (arXiv:0912.4571 is not it; see
//! Chambolle & Pock, *A first-order primal-dual algorithm for convex problems
//! with applications to imaging*, 2011) with the prox of $\tfrac12\|W\|_F^2$
//! (accelerated variant) or of $\|W\|_*$ (singular-value soft-thresholding).
//! Every iterate yields a *certified bracket*:
//! - upper: $\|W\|\,\Delta/\min_c \mathcal A(W)_c$ (a feasible rescaling of $W$);
//! - lower: for any $\lambda \ge 0$, $\Delta\,\mathbf 1^\top\lambda / \|\mathcal A^*\lambda\|_{\rm dual}$
//!   (weak duality: $\langle \mathcal A^*\lambda, W\rangle \ge \Delta \mathbf 1^\top \lambda$ and Hölder),
//!   the dual norm being Frobenius for Frobenius and spectral for nuclear.
//!
//! The solver stops when the relative gap (upper − lower)/upper is below a
//! tolerance and reports both ends, so a value is never better than its gap.
//!
//! **Feasibility** (Gordan's alternative): the constraints are strictly
//! feasible iff $0 \notin \mathrm{conv}\{A_c\}$, $A_c = x_i (x_{t(i)} - x_j)^\top$.
//! The min-norm point $Z = \sum_c \lambda_c A_c$ of that hull (λ in the
//! simplex) is either a witness ($\min_c \langle A_c, Z\rangle > 0$, checked by
//! arithmetic) or, when $\|Z\|_F \approx 0$, a certificate of infeasibility.
//!
//! **Reduction.** $W$ may be restricted to the row space of $X$ on both sides
//! (projecting never increases either norm nor changes a constraint), so with
//! the thin SVD $X = U S V^\top$ the program runs on $E = US$ ($T \times r$,
//! $r = \mathrm{rank}\, X$). For orthonormal embeddings the logits matrix
//! $M = X W X^\top$ itself is the variable.

pub mod exact;
pub mod head;
pub mod trained;

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
}

/// Attention pattern on the off-queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Every query attends to position 0.
    Sink,
    /// Every query attends to itself.
    Diagonal,
}

/// Cost definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// Frobenius norm $\|W\|_F$.
    Fro,
    /// Nuclear norm $\|W\|_*$ (= minimal factored weight decay $\tfrac12(\|W_Q\|_F^2+\|W_K\|_F^2)$).
    Nuclear,
}

/// Embedding family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum EmbeddingKind {
    /// Orthonormal rows (needs $d \ge T$), a seeded random rotation.
    Orthonormal,
    /// i.i.d. $\mathcal N(0, 1/d)$ entries.
    Gaussian,
    /// The attention input $x_i = E_{\rm tok}[w_i] + E_{\rm pos}[i]$ of a one-layer model
    /// trained on bigram-copy at this $T$ and $d$ (see [`trained`]).
    Trained,
}

/// What the program prices.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// $W_{QK}$ alone, every query $i \ge 1$ an off-query (§6).
    #[default]
    Qk,
    /// The whole head on copy-paste, $\|W_{QK}\| + \|W_{VO}\|$ (see [`head`]).
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
    Ok((m as f64 * (1.0 - eps) / eps).ln())
}

/// Seeded embeddings, one row per position ($T \times d$). `Trained` trains a model
/// first (seconds; cached per process, see [`trained::embeddings`]).
pub fn embeddings(
    kind: EmbeddingKind,
    t: usize,
    d: usize,
    seed: u64,
) -> Result<Mat<f64>, CostError> {
    if t < 2 || d == 0 {
        return Err(CostError::Invalid(format!(
            "need T >= 2 and d >= 1 (T = {t}, d = {d})"
        )));
    }
    if kind == EmbeddingKind::Trained {
        return trained::embeddings(t, d, seed).map(|x| x.as_ref().clone());
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let g = Mat::from_fn(t, d, |_, _| {
        let v: f64 = StandardNormal.sample(&mut rng);
        v
    });
    match kind {
        EmbeddingKind::Gaussian | EmbeddingKind::Trained => {
            Ok(g * faer::Scale(1.0 / (d as f64).sqrt()))
        }
        EmbeddingKind::Orthonormal => {
            if d < t {
                return Err(CostError::Invalid(format!(
                    "orthonormal embeddings need d >= T (T = {t}, d = {d})"
                )));
            }
            // Modified Gram–Schmidt, twice ("twice is enough") for orthogonality to rounding.
            let mut rows: Vec<Vec<f64>> = (0..t).map(|i| linalg::row(g.as_ref(), i)).collect();
            for _pass in 0..2 {
                for i in 0..t {
                    for k in 0..i {
                        let c = linalg::dot(&rows[i], &rows[k]);
                        let (head, tail) = rows.split_at_mut(i);
                        tail[0]
                            .iter_mut()
                            .zip(&head[k])
                            .for_each(|(a, b)| *a -= c * b);
                    }
                    let n = linalg::norm(&rows[i]);
                    rows[i].iter_mut().for_each(|a| *a /= n);
                }
            }
            Ok(linalg::from_rows(&rows))
        }
    }
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

/// `dst = a·b` (sequential below ~128, the measured faer crossover on 2 cores).
fn mm(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> Mat<f64> {
    let mut c = Mat::zeros(a.nrows(), b.ncols());
    let big = a.nrows().max(a.ncols()).max(b.ncols()) >= 256;
    let par = if big && rayon::current_thread_index().is_none() {
        Par::rayon(0)
    } else {
        Par::Seq
    };
    matmul(c.as_mut(), Accum::Replace, a, b, 1.0, par);
    c
}

/// Which keys a constrained query row competes against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// Row $i$ sees keys $0..=i$ (causal attention, itself included).
    Causal,
    /// Row $i$ sees every key $0..T$ (a read-out over the whole vocabulary).
    All,
}

/// The linear gap program $\mathcal A(W) \ge \Delta$ on reduced embeddings.
///
/// In general the query side and the key side have their own embeddings,
/// $x^q_i{}^\top W (x^k_{t(i)} - x^k_j) \ge \Delta$; the attention programs of §6
/// use the same rows on both sides.
#[derive(Clone, Debug)]
pub struct GapProgram {
    /// Reduced embeddings $(E_q, E_k)$ ($T \times r_q$, $T \times r_k$); `None` when
    /// both sides are the same orthonormal rows and the variable is the logits matrix itself.
    e: Option<(Mat<f64>, Mat<f64>)>,
    t: usize,
    targets: Vec<Option<usize>>,
    /// Constraints $(i, j)$: row $i$ prefers its target over key $j$.
    cons: Vec<(u32, u32)>,
    /// Required gap $\Delta$.
    pub delta: f64,
    op_norm: f64,
}

/// Reduced basis $E = U S$ of the thin SVD $X = U S V^\top$ (rank-truncated at $10^{-10}\sigma_{\max}$),
/// and $\sigma_{\max}$.
fn reduce(x: MatRef<'_, f64>) -> Result<(Mat<f64>, f64), CostError> {
    let svd = x.thin_svd().map_err(|_| CostError::Svd)?;
    let s = svd.S().column_vector();
    let smax = s[0];
    let r = (0..s.nrows())
        .filter(|&k| s[k] > 1e-10 * smax)
        .count()
        .max(1);
    Ok((
        Mat::from_fn(x.nrows(), r, |i, k| svd.U()[(i, k)] * s[k]),
        smax,
    ))
}

fn check_finite(x: MatRef<'_, f64>) -> Result<(), CostError> {
    if x.ncols() == 0 || (0..x.nrows()).any(|i| (0..x.ncols()).any(|j| !x[(i, j)].is_finite())) {
        return Err(CostError::Invalid(
            "embeddings must be finite and non-empty".into(),
        ));
    }
    Ok(())
}

impl GapProgram {
    /// Builds the program for embeddings `x` ($T \times d$), per-row targets and gap Δ.
    /// Row $i$ with a target sees keys $0..=i$ (causal, itself included).
    pub fn new(
        x: MatRef<'_, f64>,
        targets: &[Option<usize>],
        delta: f64,
    ) -> Result<Self, CostError> {
        Self::general(x, x, targets, delta, Visibility::Causal)
    }

    /// Builds the program with query-side rows `xq` and key-side rows `xk`
    /// (both $T \times d$): constraints $x^q_i{}^\top W (x^k_{t(i)} - x^k_j) \ge \Delta$ for every
    /// row $i$ with a target and every visible key $j \ne t(i)$.
    pub fn general(
        xq: MatRef<'_, f64>,
        xk: MatRef<'_, f64>,
        targets: &[Option<usize>],
        delta: f64,
        visibility: Visibility,
    ) -> Result<Self, CostError> {
        let t = xk.nrows();
        if xq.nrows() != t || xq.ncols() != xk.ncols() {
            return Err(CostError::Invalid(format!(
                "query embeddings {}×{} and key embeddings {}×{} differ in shape",
                xq.nrows(),
                xq.ncols(),
                xk.nrows(),
                xk.ncols()
            )));
        }
        if targets.len() != t {
            return Err(CostError::Invalid(format!(
                "{} targets for {t} rows",
                targets.len()
            )));
        }
        if !(delta > 0.0 && delta.is_finite()) {
            return Err(CostError::Invalid(format!(
                "gap must be positive and finite, got {delta}"
            )));
        }
        check_finite(xq)?;
        check_finite(xk)?;
        let mut cons = Vec::new();
        let mut max_row = 0;
        for (i, tg) in targets.iter().enumerate() {
            if let Some(ti) = *tg {
                let keys = match visibility {
                    Visibility::Causal => i + 1,
                    Visibility::All => t,
                };
                if ti >= keys {
                    return Err(CostError::Invalid(format!(
                        "target {ti} of row {i} is not visible"
                    )));
                }
                for j in 0..keys {
                    if j != ti {
                        cons.push((i as u32, j as u32));
                    }
                }
                max_row = max_row.max(keys);
            }
        }
        if cons.is_empty() {
            return Err(CostError::Invalid(
                "no constraint: every row is unconstrained".into(),
            ));
        }
        let same = (0..t).all(|i| (0..xk.ncols()).all(|j| xq[(i, j)] == xk[(i, j)]));
        let gram = mm(xk, xk.transpose());
        let orthonormal = same
            && xk.ncols() >= t
            && (0..t).all(|i| {
                (0..t).all(|j| (gram[(i, j)] - if i == j { 1.0 } else { 0.0 }).abs() < 1e-10)
            });
        let (e, s_q, s_k) = if orthonormal {
            (None, 1.0, 1.0)
        } else {
            let (ek, sk) = reduce(xk)?;
            let (eq, sq) = if same { (ek.clone(), sk) } else { reduce(xq)? };
            (Some((eq, ek)), sq, sk)
        };
        // ‖𝒜‖ ≤ ‖E_q‖₂‖E_k‖₂ · √(max_i (n_i + 1)): ‖E_qᵀ L E_k‖_F ≤ ‖E_q‖₂‖E_k‖₂‖L‖_F, and the
        // per-row map λ ↦ (Σλ) e_t − Σ λ_j e_j has Gram matrix I + 11ᵀ, of norm n_i + 1.
        let op_norm = s_q * s_k * (max_row as f64).sqrt();
        Ok(Self {
            e,
            t,
            targets: targets.to_vec(),
            cons,
            delta,
            op_norm,
        })
    }

    /// Convenience: the §6 program for a pattern on given embeddings with gap Δ.
    pub fn for_pattern(
        x: MatRef<'_, f64>,
        pattern: Pattern,
        delta: f64,
    ) -> Result<Self, CostError> {
        Self::new(x, &pattern_targets(pattern, x.nrows()), delta)
    }

    /// Number of gap constraints.
    pub fn n_constraints(&self) -> usize {
        self.cons.len()
    }

    /// Shape $(r_q, r_k)$ of the reduced variable.
    pub fn dim(&self) -> (usize, usize) {
        self.e
            .as_ref()
            .map_or((self.t, self.t), |(q, k)| (q.ncols(), k.ncols()))
    }

    fn logits(&self, w: MatRef<'_, f64>) -> Mat<f64> {
        match &self.e {
            None => w.to_owned(),
            Some((q, k)) => mm(mm(q.as_ref(), w).as_ref(), k.transpose()),
        }
    }

    /// $\mathcal A(W)$: the gap of every constraint.
    pub fn forward(&self, w: MatRef<'_, f64>) -> Vec<f64> {
        let m = self.logits(w);
        self.cons
            .iter()
            .map(|&(i, j)| {
                let (i, j) = (i as usize, j as usize);
                let ti = self.targets[i].unwrap_or(i);
                m[(i, ti)] - m[(i, j)]
            })
            .collect()
    }

    /// $\mathcal A^*\lambda = E_q^\top L E_k$ with $L_{i,t(i)} = \sum_j \lambda_{ij}$, $L_{ij} = -\lambda_{ij}$.
    pub fn adjoint(&self, lam: &[f64]) -> Mat<f64> {
        let mut l = Mat::<f64>::zeros(self.t, self.t);
        for (&(i, j), &v) in self.cons.iter().zip(lam) {
            let (i, j) = (i as usize, j as usize);
            let ti = self.targets[i].unwrap_or(i);
            l[(i, ti)] += v;
            l[(i, j)] -= v;
        }
        match &self.e {
            None => l,
            Some((q, k)) => mm(mm(q.transpose(), l.as_ref()).as_ref(), k.as_ref()),
        }
    }

    /// The constraint matrix $A_c$ has Frobenius norm $\|e^q_i\|\,\|e^k_{t(i)} - e^k_j\|$; its maximum.
    fn max_constraint_norm(&self) -> f64 {
        let grams = self
            .e
            .as_ref()
            .map(|(q, k)| (mm(q.as_ref(), q.transpose()), mm(k.as_ref(), k.transpose())));
        let gq = |a: usize| grams.as_ref().map_or(1.0, |(g, _)| g[(a, a)]);
        let k = |a: usize, b: usize| {
            grams
                .as_ref()
                .map_or(if a == b { 1.0 } else { 0.0 }, |(_, g)| g[(a, b)])
        };
        self.cons
            .iter()
            .map(|&(i, j)| {
                let (i, j) = (i as usize, j as usize);
                let ti = self.targets[i].unwrap_or(i);
                (gq(i) * (k(ti, ti) + k(j, j) - 2.0 * k(ti, j)).max(0.0)).sqrt()
            })
            .fold(0.0, f64::max)
    }

    /// Embeds a reduced variable back as the logits matrix $M = E W E^\top$ ($T\times T$).
    pub fn logits_of(&self, w: MatRef<'_, f64>) -> Mat<f64> {
        self.logits(w)
    }
}

/// Norm of a reduced variable (equal to the norm of the full $W$).
pub fn norm_of(kind: NormKind, w: MatRef<'_, f64>) -> f64 {
    match kind {
        NormKind::Fro => linalg::fro_norm(w),
        NormKind::Nuclear => linalg::nuclear_norm(w),
    }
}

fn dual_norm(kind: NormKind, z: MatRef<'_, f64>) -> f64 {
    match kind {
        NormKind::Fro => linalg::fro_norm(z),
        NormKind::Nuclear => linalg::spectral_norm(z),
    }
}

/// A certificate of infeasibility: convex weights on the constraints whose
/// combination $\sum_c \lambda_c A_c$ vanishes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Certificate {
    /// Non-zero weights `(query i, key j, λ)`, summing to 1.
    pub weights: Vec<(usize, usize, f64)>,
    /// $\|\sum_c \lambda_c A_c\|_F$, recomputed by plain arithmetic.
    pub residual: f64,
    /// $\max_c \|A_c\|_F$, the scale the residual is judged against.
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

fn project_simplex(v: &mut [f64]) {
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

/// $Z = \mathcal A^*\lambda$: a witness when every gap $\langle A_c, Z\rangle$ is positive
/// (`Ok`), else `Err(Z)`.
fn combination(p: &GapProgram, lam: &[f64]) -> Result<Feasibility, Mat<f64>> {
    let z = p.adjoint(lam);
    let min_gap = p
        .forward(z.as_ref())
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

/// Gordan test by FISTA on $\min_{\lambda \in \Delta^m} \tfrac12\|\mathcal A^*\lambda\|_F^2$.
pub fn feasibility(p: &GapProgram, max_iter: usize) -> Result<Feasibility, CostError> {
    let m = p.n_constraints();
    let lip = p.op_norm * p.op_norm;
    let mut lam = vec![1.0 / m as f64; m];
    let mut y = lam.clone();
    let mut tk: f64 = 1.0;
    let scale = p.max_constraint_norm();
    for it in 0..max_iter {
        if it % 5 == 0 {
            match combination(p, &lam) {
                Ok(feasible) => return Ok(feasible),
                Err(z) if linalg::fro_norm(z.as_ref()) <= 1e-6 * scale => break,
                Err(_) => {}
            }
        }
        let zy = p.adjoint(&y);
        let grad = p.forward(zy.as_ref());
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
    let z = match combination(p, &lam) {
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

/// Solver options.
#[derive(Clone, Copy, Debug)]
pub struct SolveOptions {
    /// Stop when (upper − lower)/upper ≤ `rel_gap`.
    pub rel_gap: f64,
    /// Iteration budget of the primal–dual solver.
    pub max_iter: usize,
    /// Iteration budget of the feasibility test.
    pub feas_iter: usize,
}

impl Default for SolveOptions {
    fn default() -> Self {
        Self {
            rel_gap: 1e-3,
            max_iter: 20_000,
            feas_iter: 5_000,
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
    /// The optimal logits matrix is not stored (large); its Frobenius norm for reference.
    #[serde(skip)]
    pub w: Option<Mat<f64>>,
}

fn prox_nuclear(w: MatRef<'_, f64>, tau: f64) -> Result<Mat<f64>, CostError> {
    let svd = w.thin_svd().map_err(|_| CostError::Svd)?;
    let s = svd.S().column_vector();
    let keep: Vec<usize> = (0..s.nrows()).filter(|&k| s[k] > tau).collect();
    let u = Mat::from_fn(w.nrows(), keep.len(), |i, c| {
        svd.U()[(i, keep[c])] * (s[keep[c]] - tau)
    });
    let v = Mat::from_fn(keep.len(), w.ncols(), |c, j| svd.V()[(j, keep[c])]);
    Ok(mm(u.as_ref(), v.as_ref()))
}

/// Solves $\min \|W\|$ subject to the gap constraints, with a certified bracket.
///
/// The nuclear program is warm-started from the Frobenius optimum $(W_F, \lambda_F)$:
/// $W_F$ is feasible, so $\|W_F\|_*$ is an upper bound; $\|W\|_* \ge \|W\|_F$ makes the
/// Frobenius lower end a nuclear lower end; and $\lambda_F/\|\mathcal A^*\lambda_F\|_2$ is
/// dual-feasible for the nuclear program.
pub fn solve(
    p: &GapProgram,
    kind: NormKind,
    opts: SolveOptions,
) -> Result<CostSolution, CostError> {
    solve_with_dual(p, kind, opts).map(|(s, _)| s)
}

/// The empty solution of `p` (nothing solved yet).
fn unsolved(p: &GapProgram) -> CostSolution {
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
        w: None,
    }
}

fn solve_with_dual(
    p: &GapProgram,
    kind: NormKind,
    opts: SolveOptions,
) -> Result<(CostSolution, Vec<f64>), CostError> {
    match feasibility(p, opts.feas_iter)? {
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
fn solve_from(
    p: &GapProgram,
    kind: NormKind,
    opts: SolveOptions,
    witness: Mat<f64>,
) -> Result<(CostSolution, Vec<f64>), CostError> {
    let base = unsolved(p);
    let n = p.n_constraints();
    let la = p.op_norm;
    // Start from the scaled witness: a feasible point, so the upper bound is finite at once.
    let mut w = witness.clone();
    let mut best_w = witness.clone();
    let mut upper = norm_of(kind, witness.as_ref());
    let mut lower = 0.0f64;
    let mut lam = vec![0.0; n];
    let mut warm_iters = 0;
    if kind == NormKind::Nuclear {
        let (f, lam_f) = solve_from(p, NormKind::Fro, opts, witness.clone())?;
        warm_iters = f.iterations;
        lower = f.lower.unwrap_or(0.0);
        if let Some(wf) = &f.w {
            let nf = linalg::nuclear_norm(wf.as_ref());
            if nf < upper {
                upper = nf;
                best_w = wf.clone();
                w = wf.clone();
            }
            let z = p.adjoint(&lam_f);
            let s2 = linalg::spectral_norm(z.as_ref());
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
        let aw = p.forward(w_bar.as_ref());
        let lam_old = lam.clone();
        for (l, g) in lam.iter_mut().zip(&aw) {
            *l = (*l - sigma * (g - p.delta)).max(0.0);
        }
        let at = p.adjoint(&lam);
        let v = &w + &at * faer::Scale(tau);
        let w_new = match kind {
            NormKind::Fro => v * faer::Scale(1.0 / (1.0 + tau)),
            NormKind::Nuclear => prox_nuclear(v.as_ref(), tau)?,
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
            let pr = linalg::fro_norm((&dw * faer::Scale(1.0 / tau) - p.adjoint(&dl)).as_ref());
            let adw = p.forward(dw.as_ref());
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
            let g = p.forward(w.as_ref());
            let gmin = g.iter().copied().fold(f64::INFINITY, f64::min);
            if gmin > 0.0 {
                let u = norm_of(kind, w.as_ref()) * p.delta / gmin;
                if u < upper {
                    upper = u;
                    best_w = w.clone() * faer::Scale(p.delta / gmin);
                }
            }
            let s: f64 = lam.iter().sum();
            if s > 0.0 {
                let z = p.adjoint(&lam);
                let dn = dual_norm(kind, z.as_ref());
                if dn > 0.0 {
                    lower = lower.max(p.delta * s / dn);
                }
            }
            if upper - lower <= opts.rel_gap * upper {
                break;
            }
        }
    }
    let sv = linalg::singular_values(best_w.as_ref());
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

/// §6 closed form, orthonormal embeddings, Frobenius, sink or diagonal alike:
/// $C^F = \Delta\sqrt{\sum_{i=1}^{T-1} i/(i+1)} = \Delta\sqrt{T - H_T}$.
pub fn fro_orthonormal(t: usize, delta: f64) -> f64 {
    delta * (t as f64 - linalg::harmonic(t)).sqrt()
}

/// §6 nuclear witness costs (upper bounds) for orthonormal embeddings:
/// sink $W = \Delta\sum_{i\ge1} e_i e_0^\top$ costs $\Delta\sqrt{T-1}$; diagonal
/// $W = \Delta\,\mathrm{diag}(0,1,\dots,1)$ costs $\Delta(T-1)$ (THEORY's $\Delta I$ costs $\Delta T$).
pub fn nuclear_witness(pattern: Pattern, t: usize, delta: f64) -> f64 {
    match pattern {
        Pattern::Sink => delta * ((t - 1) as f64).sqrt(),
        Pattern::Diagonal => delta * (t - 1) as f64,
    }
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

/// Solves a [`CostQuery`] (for the whole head: the sum of both parts, see [`head::HeadCost::total`]).
pub fn solve_query(q: &CostQuery, opts: SolveOptions) -> Result<CostSolution, CostError> {
    match q.scope {
        Scope::Qk => {
            let x = embeddings(q.embedding, q.t, q.d, q.seed)?;
            let p = GapProgram::for_pattern(x.as_ref(), q.pattern, q.delta)?;
            solve(&p, q.norm, opts)
        }
        Scope::Head => Ok(solve_head_query(q, opts)?.total()),
    }
}

/// Solves the whole-head program of a [`CostQuery`] (its `scope` is ignored).
pub fn solve_head_query(q: &CostQuery, opts: SolveOptions) -> Result<head::HeadCost, CostError> {
    let x = embeddings(q.embedding, q.t, q.d, q.seed)?;
    let pi = head::sources(q.t, q.on_rate, q.seed)?;
    head::solve_head(x.as_ref(), q.pattern, &pi, q.norm, q.delta, opts)
}

/// Frobenius program by dual coordinate ascent (Hildreth's method), an
/// algorithm independent of [`solve`], for cross-checks on small cases:
/// $\lambda_c \leftarrow \max(0, \lambda_c + (\Delta - \langle A_c, W\rangle)/\|A_c\|_F^2)$,
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
        .forward(w.as_ref())
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    (linalg::fro_norm(w.as_ref()), gmin / p.delta)
}

/// Solver options of the closed-form checks (tight gap, generous budget).
pub(crate) const CHECK_OPTS: SolveOptions = SolveOptions {
    rel_gap: 1e-4,
    max_iter: 50_000,
    feas_iter: 5_000,
};

/// A random instance of the closed-form checks: (T, Δ ∈ [1, 10), pattern, embedding seed).
pub(crate) fn check_instance(
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
pub(crate) fn hildreth_slacks(p: &GapProgram, f: &CostSolution) -> (f64, f64, f64, f64) {
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

/// Theorem check `cost_closed_form`: on random small instances, the solver's
/// certified bracket contains the §6 Frobenius closed form (orthonormal), the
/// nuclear optimum lies between the Frobenius optimum and the §6 witnesses,
/// and on Gaussian embeddings the primal–dual Frobenius value agrees with
/// Hildreth's coordinate ascent. Margin: smallest relative slack of these inequalities.
pub fn check_closed_form(cases: usize, seed: u64) -> crate::check::CheckOutcome {
    let mut out = crate::check::CheckOutcome::new("cost_closed_form", "relative slack");
    let mut rng = StdRng::seed_from_u64(seed);
    let opts = CHECK_OPTS;
    for case in 0..cases {
        let (t, delta, pattern, es) = check_instance(&mut rng, 3..=10);
        let run = || -> Result<(bool, f64, String), CostError> {
            let x = embeddings(EmbeddingKind::Orthonormal, t, t + 2, es)?;
            let p = GapProgram::for_pattern(x.as_ref(), pattern, delta)?;
            let f = solve(&p, NormKind::Fro, opts)?;
            let n = solve(&p, NormKind::Nuclear, opts)?;
            let cf = fro_orthonormal(t, delta);
            let (fl, fu) = (f.lower.unwrap_or(0.0), f.value.unwrap_or(f64::INFINITY));
            let (nl, nu) = (n.lower.unwrap_or(0.0), n.value.unwrap_or(f64::INFINITY));
            let wit = nuclear_witness(pattern, t, delta);
            // Slacks (relative): closed form inside the Frobenius bracket; nuclear upper
            // end ≥ Frobenius lower end (‖W‖_* ≥ ‖W‖_F); nuclear lower end ≤ witness.
            // 1e-9 absorbs rounding of the bracket arithmetic (values are O(10–100)).
            let s1 = (cf - fl) / cf + 1e-9;
            let s2 = (fu - cf) / cf + 1e-9;
            let s3 = (nu - fl) / cf + 1e-9;
            let s4 = (wit - nl) / wit + 1e-9;
            // Cross-check on Gaussian embeddings (d = T + 3, so the program is feasible):
            // Hildreth's value (after enough sweeps, feasible to 1e-6) must sit in the bracket.
            let g = embeddings(EmbeddingKind::Gaussian, t, t + 3, es)?;
            let pg = GapProgram::for_pattern(g.as_ref(), pattern, delta)?;
            let fg = solve(&pg, NormKind::Fro, opts)?;
            let (gl, gu) = (fg.lower.unwrap_or(0.0), fg.value.unwrap_or(f64::INFINITY));
            let (s5, s6, hv, hgap) = hildreth_slacks(&pg, &fg);
            let m = s1.min(s2).min(s3).min(s4).min(s5).min(s6);
            Ok((
                m >= 0.0 && hgap > 0.0,
                m,
                format!(
                    "case {case}: T={t} Δ={delta:.3} {pattern}: fro [{fl:.6},{fu:.6}] vs closed {cf:.6}; nuclear [{nl:.6},{nu:.6}] witness {wit:.6}; gaussian fro [{gl:.6},{gu:.6}] hildreth {hv:.6} (gap {hgap:.8})"
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

    #[test]
    fn delta_fixture() {
        // THEORY §1 fixture: Δ_0.01(63) = 8.738255.
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
