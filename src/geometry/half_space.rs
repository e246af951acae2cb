//! The half-space theorem (docs/theory.md §3, claim A1; the formalization is ours).
//!
//! Queries $Q$, sink key $s$, non-sink keys $K$ ($m = |K|$), bilinear logits
//! $z(x, k) = x^\top W k$. There is a $W$ with $x^\top W(s-k) > 0$ for all
//! $x\in Q$, $k\in K$ (hence, after scaling, sink mass $\ge 1-\varepsilon$ on every
//! query for every $\varepsilon$) **iff**
//! (a) $0\notin\mathrm{conv}(Q)$ and (b) $s\notin\mathrm{conv}(K)$.
//!
//! *Necessity.* If $\sum_i\lambda_ix_i = 0$ then $\sum_i\lambda_i x_i^\top W(s-k) = 0$
//! for every $k$, so not all gaps are positive; if $\sum_k\mu_k k = s$ then
//! $\sum_k\mu_k x^\top W(s-k) = 0$.
//! *Sufficiency.* With $a\cdot x\ge\gamma_a>0$ and $b\cdot(s-k)\ge\gamma_b>0$,
//! $W = c\thinspace ab^\top$ has gaps $c\thinspace(a\cdot x)(b\cdot(s-k)) \ge c\gamma_a\gamma_b$, and
//! $c = \Delta/(\gamma_a\gamma_b)$ with $\Delta = \Delta_\varepsilon(m) = \ln(m(1-\varepsilon)/\varepsilon)$
//! gives sink mass $\ge 1/(1+me^{-\Delta}) = 1-\varepsilon$. Its cost is
//! $\lVert W\rVert_F = \lVert W\rVert_\ast = c\lVert a\rVert\lVert b\rVert = \Delta/\big((\gamma_a/\lVert a\rVert)(\gamma_b/\lVert b\rVert)\big)$,
//! smallest among rank-one witnesses when $a, b$ are the max-margin directions,
//! i.e. the minimum-norm points that [`hull_verdict`] returns.

use super::GeometryError;
use super::hull::{ConvexWeights, HullVerdict, WeightsCheck, gamma_n, hull_verdict};
use crate::patterns::concentration_gap;
use faer::{Mat, MatRef};

/// A rank-one sink witness $W = c\thinspace ab^\top$ (docs/theory.md §3, sufficiency).
#[derive(Clone, Debug)]
pub struct SinkWitness {
    /// The witness $W = c\thinspace ab^\top$ ($d\times d$; logits $x^\top W k$).
    pub w: Mat<f64>,
    /// Query direction: $a\cdot x \ge \gamma_a$ for every query.
    pub a: Vec<f64>,
    /// Key direction: $b\cdot(s-k)\ge\gamma_b$ for every non-sink key.
    pub b: Vec<f64>,
    /// $\gamma_a = \min_{x\in Q} a\cdot x$.
    pub gamma_a: f64,
    /// $\gamma_b = \min_{k\in K} b\cdot(s-k)$.
    pub gamma_b: f64,
    /// Scale $c = \Delta/(\gamma_a\gamma_b)$.
    pub c: f64,
    /// Target gap $\Delta = \Delta_\varepsilon(m)$.
    pub gap: f64,
    /// The ε the witness was built for.
    pub eps: f64,
}

impl SinkWitness {
    /// Builds $W = c\thinspace ab^\top$ with $c = \Delta/(\gamma_a\gamma_b)$.
    fn build(a: Vec<f64>, b: Vec<f64>, gamma_a: f64, gamma_b: f64, gap: f64, eps: f64) -> Self {
        let c = gap / (gamma_a * gamma_b);
        let w = Mat::from_fn(a.len(), b.len(), |i, j| c * a[i] * b[j]);
        Self {
            w,
            a,
            b,
            gamma_a,
            gamma_b,
            c,
            gap,
            eps,
        }
    }

    /// Cost $\lVert W\rVert_F = \lVert W\rVert_\ast = c\lVert a\rVert\lVert b\rVert$ (rank one).
    pub fn cost(&self) -> f64 {
        self.c * norm(&self.a) * norm(&self.b)
    }

    /// Computes the attention this witness produces (see [`verify_sink_witness`]).
    pub fn verify(&self, queries: &[&[f64]], sink: &[f64], keys: &[&[f64]]) -> WitnessCheck {
        verify_sink_witness(self.w.as_ref(), queries, sink, keys, self.eps)
    }
}

/// What a witness check measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WitnessCheck {
    /// $\min_{x\in Q} A_{x,s}$: the smallest computed sink mass over queries.
    pub worst_sink_mass: f64,
    /// Smallest computed gap $z(x,s) - z(x,k)$.
    pub min_gap: f64,
    /// Largest rounding bound on a computed sink mass.
    pub rounding_bound: f64,
    /// $\min_x (A_{x,s} + \rho_x - (1-\varepsilon))/\varepsilon$: fraction of the
    /// allowance ε left at the worst query (≥ 0 iff accepted).
    pub margin: f64,
    /// True iff every query's sink mass is $\ge 1-\varepsilon$ up to its rounding bound.
    pub ok: bool,
}

/// Verifies a candidate sink witness by computing the attention it produces:
/// for each query $x$ the softmax over $\lbrace s\rbrace\cup K$ of the logits $x^\top W k$,
/// whose sink entry is $A_{x,s} = 1/(1+\sum_{k\in K} e^{z(x,k)-z(x,s)})$.
///
/// Accepts iff $A_{x,s} \ge 1-\varepsilon-\rho_x$ for every query, where $\rho_x$
/// is a rigorous bound on the rounding error of the computed $A_{x,s}$: each
/// logit $\sum_l(\sum_i x_iW_{il})k_l$ is off by at most
/// $e_k = \gamma_{2d+1}\thinspace|x|^\top|W||k|$ (Higham §3.1), so with
/// $\delta = \max_k(e_s + e_k + 2u|z_k - z_s|)$ the exact mass lies within
/// $(1-A_{x,s})(e^{\delta}-1)$ of the computed one, plus $2(m+4)u$ for the
/// exponentials and the sum. The tolerance is the computation's own error,
/// not a chosen constant. Any $W$ may be checked (not only rank one); bad
/// shapes give `ok = false`.
pub fn verify_sink_witness(
    w: MatRef<'_, f64>,
    queries: &[&[f64]],
    sink: &[f64],
    keys: &[&[f64]],
    eps: f64,
) -> WitnessCheck {
    let d_q = w.nrows();
    let d_k = w.ncols();
    let fail = WitnessCheck {
        worst_sink_mass: f64::NAN,
        min_gap: f64::NAN,
        rounding_bound: f64::NAN,
        margin: f64::NEG_INFINITY,
        ok: false,
    };
    if queries.is_empty()
        || sink.len() != d_k
        || queries.iter().any(|x| x.len() != d_q)
        || keys.iter().any(|k| k.len() != d_k)
        || !(eps > 0.0 && eps < 1.0)
    {
        return fail;
    }
    let u = f64::EPSILON / 2.0;
    let g = 1.01 * gamma_n(2 * d_q.max(d_k) + 1);
    let m = keys.len();
    let mut worst_mass = f64::INFINITY;
    let mut min_gap = f64::INFINITY;
    let mut max_rho: f64 = 0.0;
    let mut margin = f64::INFINITY;
    let mut ok = true;
    let mut v = vec![0.0; d_k];
    let mut va = vec![0.0; d_k];
    for x in queries {
        // v = Wᵀx and |W|ᵀ|x|.
        for l in 0..d_k {
            let (mut s, mut sa) = (0.0, 0.0);
            for (i, xi) in x.iter().enumerate() {
                let wil = w[(i, l)];
                s += xi * wil;
                sa += (xi * wil).abs();
            }
            v[l] = s;
            va[l] = sa;
        }
        let logit = |k: &[f64]| -> (f64, f64) {
            let (mut z, mut e) = (0.0, 0.0);
            for l in 0..d_k {
                z += v[l] * k[l];
                e += va[l] * k[l].abs();
            }
            (z, g * e)
        };
        let (z0, e0) = logit(sink);
        let mut sum = 0.0;
        let mut delta: f64 = 0.0;
        for k in keys {
            let (z, e) = logit(k);
            let diff = z - z0;
            min_gap = min_gap.min(-diff);
            sum += diff.exp();
            delta = delta.max(e0 + e + 2.0 * u * diff.abs());
        }
        let mass = 1.0 / (1.0 + sum);
        let rho = (1.0 - mass) * delta.exp_m1() * 1.01 + 2.0 * (m as f64 + 4.0) * u;
        let mass = if mass.is_finite() { mass } else { 0.0 };
        worst_mass = worst_mass.min(mass);
        max_rho = max_rho.max(rho);
        let mq = (mass + rho - (1.0 - eps)) / eps;
        margin = margin.min(mq);
        if mq.is_nan() || mq < 0.0 {
            ok = false;
        }
    }
    WitnessCheck {
        worst_sink_mass: worst_mass,
        min_gap,
        rounding_bound: max_rho,
        margin,
        ok,
    }
}

/// Why no sink is representable: convex weights certifying a failed condition.
#[derive(Clone, Debug, PartialEq)]
pub enum Obstruction {
    /// (a) fails: $\lambda\ge0$, $\sum\lambda=1$, $\sum_i\lambda_i x_i\approx 0$.
    QueriesNotInHalfSpace {
        /// Weights over the queries.
        lambda: ConvexWeights,
    },
    /// (b) fails: $\mu\ge0$, $\sum\mu=1$, $\sum_k\mu_k k\approx s$.
    SinkNotSeparable {
        /// Weights over the non-sink keys.
        mu: ConvexWeights,
    },
}

impl Obstruction {
    /// Checks the weights by arithmetic on the data (see [`ConvexWeights::verify`]).
    pub fn verify(&self, queries: &[&[f64]], sink: &[f64], keys: &[&[f64]]) -> WeightsCheck {
        match self {
            Obstruction::QueriesNotInHalfSpace { lambda } => {
                lambda.verify(queries, &vec![0.0; sink.len()])
            }
            Obstruction::SinkNotSeparable { mu } => mu.verify(keys, sink),
        }
    }
}

/// The verdict of the half-space theorem, with its certificate.
#[derive(Clone, Debug)]
pub enum Verdict {
    /// (a) and (b) hold: a verified witness.
    Representable(SinkWitness),
    /// (a) or (b) fails: one verified obstruction per failed condition
    /// ((a) first when both fail).
    NotRepresentable(Vec<Obstruction>),
}

impl Verdict {
    /// Re-verifies the certificate against the data: the witness by its
    /// attention, the obstructions by arithmetic.
    pub fn verify(&self, queries: &[&[f64]], sink: &[f64], keys: &[&[f64]]) -> bool {
        match self {
            Verdict::Representable(w) => w.verify(queries, sink, keys).ok,
            Verdict::NotRepresentable(obs) => {
                !obs.is_empty() && obs.iter().all(|o| o.verify(queries, sink, keys).ok)
            }
        }
    }

    /// True for [`Verdict::Representable`].
    pub fn is_representable(&self) -> bool {
        matches!(self, Verdict::Representable(_))
    }

    /// True iff the verdict says (a) fails.
    pub fn queries_fail(&self) -> bool {
        matches!(self, Verdict::NotRepresentable(o) if o.iter().any(|x| matches!(x, Obstruction::QueriesNotInHalfSpace { .. })))
    }

    /// True iff the verdict says (b) fails.
    pub fn sink_fails(&self) -> bool {
        matches!(self, Verdict::NotRepresentable(o) if o.iter().any(|x| matches!(x, Obstruction::SinkNotSeparable { .. })))
    }
}

fn norm(a: &[f64]) -> f64 {
    a.iter().map(|v| v * v).sum::<f64>().sqrt()
}

fn rows_of(m: MatRef<'_, f64>) -> Vec<Vec<f64>> {
    (0..m.nrows())
        .map(|i| (0..m.ncols()).map(|j| m[(i, j)]).collect())
        .collect()
}

fn as_slices(v: &[Vec<f64>]) -> Vec<&[f64]> {
    v.iter().map(Vec::as_slice).collect()
}

fn check_eps(eps: f64, m: usize) -> Result<f64, GeometryError> {
    let gap = concentration_gap(m, eps);
    if !(eps > 0.0 && eps < 1.0 && gap > 0.0 && gap.is_finite()) {
        return Err(GeometryError::Epsilon { eps, m });
    }
    Ok(gap)
}

/// The half-space verdict on matrices (rows = tokens): see [`half_space_verdict_rows`].
pub fn half_space_verdict(
    queries: MatRef<'_, f64>,
    sink: &[f64],
    keys: MatRef<'_, f64>,
    eps: f64,
) -> Result<Verdict, GeometryError> {
    let q = rows_of(queries);
    let k = rows_of(keys);
    half_space_verdict_rows(&as_slices(&q), sink, &as_slices(&k), eps)
}

/// Decides whether a bilinear head can make `sink` an ε-sink for every query
/// (docs/theory.md §3) and returns the certificate, already verified:
/// a witness $W = c\thinspace ab^\top$ whose attention puts mass $\ge 1-\varepsilon$ on the
/// sink for every query, or convex weights for each failed condition.
///
/// Errors: empty queries or keys, shape mismatch, non-finite data,
/// $\varepsilon\notin(0, m/(m+1))$, or (should not happen) an inconclusive solve.
pub fn half_space_verdict_rows(
    queries: &[&[f64]],
    sink: &[f64],
    keys: &[&[f64]],
    eps: f64,
) -> Result<Verdict, GeometryError> {
    if keys.is_empty() {
        return Err(GeometryError::Empty { what: "keys" });
    }
    let gap = check_eps(eps, keys.len())?;
    if let Some((r, x)) = queries
        .iter()
        .enumerate()
        .find(|(_, x)| x.len() != sink.len())
    {
        return Err(GeometryError::Dimension {
            what: "queries",
            row: r,
            got: x.len(),
            expected: sink.len(),
        });
    }
    let zero = vec![0.0; sink.len()];
    let va = hull_verdict(queries, &zero).map_err(|e| rename(e, "queries"))?;
    let vb = hull_verdict(keys, sink).map_err(|e| rename(e, "keys"))?;
    match (va, vb) {
        (HullVerdict::Outside(sa), HullVerdict::Outside(sb)) => {
            let a = sa.a;
            // The solver's direction separates keys − s; b points from the keys to the sink.
            let b: Vec<f64> = sb.a.iter().map(|v| -v).collect();
            let gamma_a = queries
                .iter()
                .map(|x| dot(&a, x))
                .fold(f64::INFINITY, f64::min);
            let gamma_b = keys
                .iter()
                .map(|k| {
                    b.iter()
                        .zip(sink.iter().zip(k.iter()))
                        .map(|(bi, (si, ki))| bi * (si - ki))
                        .sum::<f64>()
                })
                .fold(f64::INFINITY, f64::min);
            let wit = SinkWitness::build(a, b, gamma_a, gamma_b, gap, eps);
            let chk = wit.verify(queries, sink, keys);
            if !chk.ok {
                return Err(GeometryError::WitnessFailed {
                    worst_mass: chk.worst_sink_mass,
                    target: 1.0 - eps,
                });
            }
            Ok(Verdict::Representable(wit))
        }
        (va, vb) => {
            let mut obs = Vec::new();
            if let HullVerdict::Inside(lambda) = va {
                obs.push(Obstruction::QueriesNotInHalfSpace { lambda });
            }
            if let HullVerdict::Inside(mu) = vb {
                obs.push(Obstruction::SinkNotSeparable { mu });
            }
            Ok(Verdict::NotRepresentable(obs))
        }
    }
}

fn rename(e: GeometryError, what: &'static str) -> GeometryError {
    match e {
        GeometryError::Empty { .. } => GeometryError::Empty { what },
        GeometryError::ZeroDimension { .. } => GeometryError::ZeroDimension { what },
        GeometryError::Dimension {
            row, got, expected, ..
        } => GeometryError::Dimension {
            what,
            row,
            got,
            expected,
        },
        GeometryError::NonFinite { row, col, .. } => GeometryError::NonFinite { what, row, col },
        other => other,
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The corollary (docs/theory.md §3): if $\cos(s,x) < 0$ for every query and
/// $\cos(s,k)\le 0$ for every non-sink key, then $W = -c\thinspace ss^\top$ is a witness,
/// with $a = -s$, $b = s$, $\gamma_a = \min_x(-s\cdot x) > 0$,
/// $\gamma_b = \min_k(\lVert s\rVert^2 - s\cdot k) \ge \lVert s\rVert^2 > 0$ and
/// $c = \Delta_\varepsilon(m)/(\gamma_a\gamma_b)$.
///
/// Returns `Ok(None)` when the cosine condition fails (the signs of $s\cdot x$,
/// $s\cdot k$ decide it, as $\lVert s\rVert\thinspace\lVert x\rVert > 0$; a zero query has no cosine and
/// fails it, a zero key satisfies $s\cdot k = 0\le0$). The witness is not
/// verified here: call [`SinkWitness::verify`].
pub fn corollary_witness(
    queries: &[&[f64]],
    sink: &[f64],
    keys: &[&[f64]],
    eps: f64,
) -> Result<Option<SinkWitness>, GeometryError> {
    if queries.is_empty() {
        return Err(GeometryError::Empty { what: "queries" });
    }
    if keys.is_empty() {
        return Err(GeometryError::Empty { what: "keys" });
    }
    let gap = check_eps(eps, keys.len())?;
    for (what, set) in [("queries", queries), ("keys", keys)] {
        for (r, x) in set.iter().enumerate() {
            if x.len() != sink.len() {
                return Err(GeometryError::Dimension {
                    what,
                    row: r,
                    got: x.len(),
                    expected: sink.len(),
                });
            }
            if let Some(c) = x.iter().position(|v| !v.is_finite()) {
                return Err(GeometryError::NonFinite {
                    what,
                    row: r,
                    col: c,
                });
            }
        }
    }
    if let Some(c) = sink.iter().position(|v| !v.is_finite()) {
        return Err(GeometryError::NonFinite {
            what: "sink",
            row: usize::MAX,
            col: c,
        });
    }
    let ss = dot(sink, sink);
    let queries_ok = queries.iter().all(|x| norm(x) > 0.0 && dot(sink, x) < 0.0);
    let keys_ok = keys.iter().all(|k| dot(sink, k) <= 0.0);
    if ss == 0.0 || !queries_ok || !keys_ok {
        return Ok(None);
    }
    let gamma_a = queries
        .iter()
        .map(|x| -dot(sink, x))
        .fold(f64::INFINITY, f64::min);
    let gamma_b = keys
        .iter()
        .map(|k| ss - dot(sink, k))
        .fold(f64::INFINITY, f64::min);
    let a: Vec<f64> = sink.iter().map(|v| -v).collect();
    Ok(Some(SinkWitness::build(
        a,
        sink.to_vec(),
        gamma_a,
        gamma_b,
        gap,
        eps,
    )))
}

/// Appends the constant coordinate 1: $\tilde x = (x, 1)$.
pub fn homogenize(rows: &[&[f64]]) -> Vec<Vec<f64>> {
    rows.iter()
        .map(|x| x.iter().copied().chain(std::iter::once(1.0)).collect())
        .collect()
}

/// The biased case (docs/theory.md §3): logits $(W_Qx+b_Q)^\top(W_Kk+b_K)$ are the
/// bilinear form $\tilde x^\top\tilde W\tilde k$ of the homogenized vectors
/// $\tilde x = (x,1)$. The homogenized queries lie in the open half-space
/// $\lbrace\tilde x_{d+1} > 0\rbrace$, so (a) holds for free, and $\tilde s\notin\mathrm{conv}(\tilde K)$
/// iff $s\notin\mathrm{conv}(K)$ (the last coordinate forces the weights to sum
/// to 1): the verdict depends on (b) alone. The witness is $(d+1)\times(d+1)$
/// and is verified on the homogenized data.
pub fn half_space_verdict_biased(
    queries: &[&[f64]],
    sink: &[f64],
    keys: &[&[f64]],
    eps: f64,
) -> Result<Verdict, GeometryError> {
    let q = homogenize(queries);
    let k = homogenize(keys);
    let s = homogenize(&[sink]).pop().expect("one row");
    half_space_verdict_rows(&as_slices(&q), &s, &as_slices(&k), eps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_fixture() {
        // docs/theory.md §1: Δ_0.01(63) = 8.738255.
        assert!((concentration_gap(63, 0.01) - 8.738_255).abs() < 5e-7);
    }

    #[test]
    fn simple_representable_and_not() {
        let q = [vec![1.0, 0.2], vec![0.5, -0.3]];
        let k = [vec![-1.0, 0.0], vec![0.0, -1.0]];
        let s = [1.0, 1.0];
        let qs = as_slices(&q);
        let ks = as_slices(&k);
        let v = half_space_verdict_rows(&qs, &s, &ks, 0.01).unwrap();
        let Verdict::Representable(w) = &v else {
            panic!("{v:?}")
        };
        let chk = w.verify(&qs, &s, &ks);
        assert!(chk.ok && chk.worst_sink_mass >= 0.99 - 1e-12, "{chk:?}");
        let fro = crate::linalg::fro_norm(w.w.as_ref());
        let nuc = crate::linalg::nuclear_norm(w.w.as_ref(), faer::Par::Seq);
        assert!(
            (fro - w.cost()).abs() <= 1e-10 * w.cost()
                && (nuc - w.cost()).abs() <= 1e-10 * w.cost()
        );
        // Antipodal queries: (a) fails.
        let q2 = [vec![1.0, 0.2], vec![-2.0, -0.4]];
        let v2 = half_space_verdict_rows(&as_slices(&q2), &s, &ks, 0.01).unwrap();
        assert!(v2.queries_fail() && !v2.sink_fails(), "{v2:?}");
        assert!(v2.verify(&as_slices(&q2), &s, &ks));
    }

    #[test]
    fn bad_eps_and_shapes_are_errors() {
        let q = [vec![1.0, 0.0]];
        let k = [vec![0.0, 1.0]];
        let s = [1.0, 1.0];
        // m = 1: need ε < 1/2.
        assert!(matches!(
            half_space_verdict_rows(&as_slices(&q), &s, &as_slices(&k), 0.5),
            Err(GeometryError::Epsilon { .. })
        ));
        assert!(matches!(
            half_space_verdict_rows(&as_slices(&q), &s, &[], 0.1),
            Err(GeometryError::Empty { .. })
        ));
        let bad = [vec![1.0]];
        assert!(matches!(
            half_space_verdict_rows(&as_slices(&bad), &s, &as_slices(&k), 0.1),
            Err(GeometryError::Dimension { .. })
        ));
    }
}
