//! The gap program: constraints $x_i^\top W (x_{t(i)} - x_j) \ge \Delta$ in reduced
//! coordinates, its operator $\mathcal A$ and adjoint, and the primal and dual norms.

use super::*;

/// `a·b` on the caller's parallelism `par`, used only when some dimension reaches 256
/// (below it faer's threads cost more than they save on 2 cores: sequential).
pub(super) fn mm(a: MatRef<'_, f64>, b: MatRef<'_, f64>, par: Par) -> Mat<f64> {
    let mut c = Mat::zeros(a.nrows(), b.ncols());
    let big = a.nrows().max(a.ncols()).max(b.ncols()) >= 256;
    let par = if big { par } else { Par::Seq };
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
    pub(super) e: Option<(Mat<f64>, Mat<f64>)>,
    pub(super) t: usize,
    pub(super) targets: Vec<Option<usize>>,
    /// Constraints $(i, j)$: row $i$ prefers its target over key $j$.
    pub(super) cons: Vec<(u32, u32)>,
    /// Required gap $\Delta$.
    pub delta: f64,
    pub(super) op_norm: f64,
}

/// Reduced basis $E = U S$ of the thin SVD $X = U S V^\top$ (rank-truncated at $10^{-10}\sigma_{\max}$),
/// and $\sigma_{\max}$.
pub(super) fn reduce(x: MatRef<'_, f64>) -> Result<(Mat<f64>, f64), CostError> {
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

pub(super) fn check_finite(x: MatRef<'_, f64>) -> Result<(), CostError> {
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
        let gram = mm(xk, xk.transpose(), Par::Seq);
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

    /// The program on the constraints `idx` (indices into this program's constraints) alone:
    /// a relaxation (its value is at most this program's). Used by the working set (`ipm`).
    #[cfg(feature = "ipm")]
    pub(super) fn subset(&self, idx: &[usize]) -> Self {
        Self {
            e: self.e.clone(),
            t: self.t,
            targets: self.targets.clone(),
            cons: idx.iter().map(|&c| self.cons[c]).collect(),
            delta: self.delta,
            op_norm: self.op_norm,
        }
    }

    /// Reduced embeddings $(E_q, E_k)$, the identity for orthonormal rows (where the variable is
    /// the logits matrix itself).
    #[cfg(feature = "ipm")]
    pub(super) fn reduced_or_identity(&self) -> (Mat<f64>, Mat<f64>) {
        match &self.e {
            Some((q, k)) => (q.clone(), k.clone()),
            None => (Mat::identity(self.t, self.t), Mat::identity(self.t, self.t)),
        }
    }

    /// Constraints `idx` as $(i, t(i), j)$: query row, its target, the competing key.
    #[cfg(feature = "ipm")]
    pub(super) fn triples(&self, idx: &[usize]) -> Vec<(usize, usize, usize)> {
        idx.iter()
            .map(|&c| {
                let (i, j) = (self.cons[c].0 as usize, self.cons[c].1 as usize);
                (i, self.targets[i].unwrap_or(i), j)
            })
            .collect()
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

    pub(super) fn logits(&self, w: MatRef<'_, f64>, par: Par) -> Mat<f64> {
        match &self.e {
            None => w.to_owned(),
            Some((q, k)) => mm(mm(q.as_ref(), w, par).as_ref(), k.transpose(), par),
        }
    }

    /// $\mathcal A(W)$: the gap of every constraint (products on the caller's `par`).
    pub fn forward(&self, w: MatRef<'_, f64>, par: Par) -> Vec<f64> {
        let m = self.logits(w, par);
        self.cons
            .iter()
            .map(|&(i, j)| {
                let (i, j) = (i as usize, j as usize);
                let ti = self.targets[i].unwrap_or(i);
                m[(i, ti)] - m[(i, j)]
            })
            .collect()
    }

    /// $\mathcal A^\ast\lambda = E_q^\top L E_k$ with $L_{i,t(i)} = \sum_j \lambda_{ij}$, $L_{ij} = -\lambda_{ij}$.
    /// Products on the caller's `par`.
    pub fn adjoint(&self, lam: &[f64], par: Par) -> Mat<f64> {
        let mut l = Mat::<f64>::zeros(self.t, self.t);
        for (&(i, j), &v) in self.cons.iter().zip(lam) {
            let (i, j) = (i as usize, j as usize);
            let ti = self.targets[i].unwrap_or(i);
            l[(i, ti)] += v;
            l[(i, j)] -= v;
        }
        match &self.e {
            None => l,
            Some((q, k)) => mm(mm(q.transpose(), l.as_ref(), par).as_ref(), k.as_ref(), par),
        }
    }

    /// The constraint matrix $A_c$ has Frobenius norm $\lVert e^q_i\rVert\thinspace\lVert e^k_{t(i)} - e^k_j\rVert$; its maximum.
    pub(super) fn max_constraint_norm(&self, par: Par) -> f64 {
        let grams = self.e.as_ref().map(|(q, k)| {
            (
                mm(q.as_ref(), q.transpose(), par),
                mm(k.as_ref(), k.transpose(), par),
            )
        });
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

    /// Embeds a reduced variable back as the logits matrix $M = E W E^\top$ ($T\times T$),
    /// the products on the caller's `par`.
    pub fn logits_of(&self, w: MatRef<'_, f64>, par: Par) -> Mat<f64> {
        self.logits(w, par)
    }
}

/// Norm of a reduced variable (equal to the norm of the full $W$); a nuclear norm's SVD
/// runs on the caller's `par`.
pub fn norm_of(kind: NormKind, w: MatRef<'_, f64>, par: Par) -> f64 {
    match kind {
        NormKind::Fro => linalg::fro_norm(w),
        NormKind::Nuclear => linalg::nuclear_norm(w, par),
    }
}

pub(super) fn dual_norm(kind: NormKind, z: MatRef<'_, f64>, par: Par) -> f64 {
    match kind {
        NormKind::Fro => linalg::fro_norm(z),
        NormKind::Nuclear => linalg::spectral_norm(z, par),
    }
}
