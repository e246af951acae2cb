//! Distance from a point to the convex hull of finitely many points, with a
//! certificate both ways.
//!
//! For points $x_1,\dots,x_n \in \mathbb R^d$ and a target $p$, put
//! $P_i = x_i - p$ and solve the minimum-norm-point problem
//! $$ y^\star = \operatorname*{arg\thinspace min}\_{y \in \operatorname{conv}\lbrace P_i\rbrace} \lVert y\rVert. $$
//! * If $y^\star \neq 0$ then $y^\star\cdot P_i \ge \lVert y^\star\rVert^2 > 0$ for every $i$
//!   (first-order optimality over the simplex), so $a = y^\star$ strictly separates
//!   $p$ from $\operatorname{conv}\lbrace x_i\rbrace$, with the largest normalised margin
//!   $\min_i a\cdot P_i/\lVert a\rVert = \lVert y^\star\rVert$ ([`Separator`]).
//! * If $y^\star = 0$ the optimal convex weights $\lambda$ give
//!   $\sum_i \lambda_i x_i = p$ ([`ConvexWeights`]).
//!
//! The solver is Wolfe's minimum-norm-point algorithm (P. Wolfe, *Finding the
//! nearest point in a polytope*, Math. Programming 11, 1976): an active-set
//! method over affinely independent "corrals" whose affine minimum-norm points
//! are computed from an orthonormal basis (classical Gram–Schmidt applied
//! twice), so the current point $y = (I - QQ^\top)P_{\mathrm{base}}$ is accurate
//! to a few ulps of the data scale whatever the conditioning of the corral.
//!
//! # Tolerance policy
//!
//! Let $S = \max_i \lVert x_i - p\rVert$ be the data scale. The certificates are checked
//! by their own `verify` methods, independently of the solver:
//! * a separator $a$ is accepted iff for every $i$ the computed $a\cdot(x_i-p)$
//!   exceeds its own rounding-error bound $\gamma_{d+2}\thinspace|a|^\top|x_i-p|$
//!   (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1,
//!   $\gamma_n = nu/(1-nu)$): the sign of every margin is then certain;
//! * convex weights are accepted iff $\lambda \ge 0$ exactly,
//!   $|\sum\lambda_i - 1| \le 4n u$ and $\lVert\sum_i\lambda_i x_i - p\rVert \le$
//!   [`HULL_TOL`]$\cdot S$.
//!
//! [`HULL_TOL`] $= 10^{-9}$: the solver's affine solves reach residuals of
//! $u\thinspace\kappa\thinspace S$ with $u \approx 1.1\cdot10^{-16}$ and corral condition numbers
//! $\kappa$ up to $10^{6}$–$10^{7}$ on nearly collinear data, so distances below
//! $10^{-9} S$ cannot be told from 0 reliably. Such a configuration is declared
//! "in the hull" with weights whose residual is below $10^{-9}S$; a separator
//! for it could have margin at most $10^{-9}S$, and a sink witness built from it
//! would need $\lVert W\rVert \gtrsim \Delta/(10^{-9}S)^2$, far outside any trained layer.
//! Between $10^{-9}S/4$ and $10^{-9}S$ either verdict may be returned; whichever it
//! is, its certificate verifies.

use super::GeometryError;

/// Relative tolerance of the "distance is zero" verdict (see the module docs).
pub const HULL_TOL: f64 = 1e-9;

/// Unit roundoff of f64.
const U: f64 = f64::EPSILON / 2.0;

/// $\gamma_n = nu/(1-nu)$, the standard bound on the relative error of an
/// $n$-term floating-point dot product.
pub fn gamma_n(n: usize) -> f64 {
    let nu = n as f64 * U;
    nu / (1.0 - nu)
}

/// A strictly separating direction: $a\cdot(x_i - p) \ge$ `gamma` $> 0$ for all $i$.
#[derive(Clone, Debug, PartialEq)]
pub struct Separator {
    /// The direction $a$ (the minimum-norm point of $\mathrm{conv}\lbrace x_i - p\rbrace$).
    pub a: Vec<f64>,
    /// $\min_i a\cdot(x_i - p)$, computed in f64.
    pub gamma: f64,
    /// $\lVert a\rVert$, the distance from $p$ to the hull (up to solver accuracy).
    pub distance: f64,
}

/// Convex weights placing $p$ in the hull: $\lambda\ge 0$, $\sum\lambda = 1$,
/// $\sum_i\lambda_i x_i \approx p$.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvexWeights {
    /// One weight per point (most are 0; at most $d+1$ are positive).
    pub lambda: Vec<f64>,
    /// $\lVert\sum_i\lambda_i x_i - p\rVert$ as computed when the certificate was made.
    pub residual: f64,
    /// The data scale $S = \max_i\lVert x_i - p\rVert$.
    pub scale: f64,
}

/// The outcome of [`hull_verdict`].
#[derive(Clone, Debug, PartialEq)]
pub enum HullVerdict {
    /// $p \notin \mathrm{conv}\lbrace x_i\rbrace$, with a separating direction.
    Outside(Separator),
    /// $p \in \mathrm{conv}\lbrace x_i\rbrace$ (to [`HULL_TOL`]), with convex weights.
    Inside(ConvexWeights),
}

/// Result of checking a [`Separator`] against data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeparatorCheck {
    /// $\min_i a\cdot(x_i-p)$ computed in f64.
    pub min_margin: f64,
    /// Smallest value of (computed margin − its rounding bound) over the points;
    /// positive iff every margin is certainly positive.
    pub certified_slack: f64,
    /// True iff `certified_slack > 0` and `a` is finite and non-zero.
    pub ok: bool,
}

/// Result of checking [`ConvexWeights`] against data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WeightsCheck {
    /// $\lVert\sum_i\lambda_i x_i - p\rVert$.
    pub residual: f64,
    /// Allowed residual [`HULL_TOL`]$\cdot S$.
    pub allowed: f64,
    /// $|\sum\lambda_i - 1|$.
    pub sum_error: f64,
    /// Smallest weight.
    pub min_weight: f64,
    /// True iff all the conditions of the tolerance policy hold.
    pub ok: bool,
}

/// Row-major copy of the shifted points $P_i = x_i - p$.
struct Shifted {
    n: usize,
    d: usize,
    data: Vec<f64>,
}

impl Shifted {
    fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.d..(i + 1) * self.d]
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn check_points(points: &[&[f64]], p: &[f64], what: &'static str) -> Result<(), GeometryError> {
    if points.is_empty() {
        return Err(GeometryError::Empty { what });
    }
    let d = p.len();
    if d == 0 {
        return Err(GeometryError::ZeroDimension { what });
    }
    if let Some(i) = p.iter().position(|v| !v.is_finite()) {
        return Err(GeometryError::NonFinite {
            what,
            row: usize::MAX,
            col: i,
        });
    }
    for (r, x) in points.iter().enumerate() {
        if x.len() != d {
            return Err(GeometryError::Dimension {
                what,
                row: r,
                got: x.len(),
                expected: d,
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
    Ok(())
}

impl Separator {
    /// Checks, by arithmetic on the data only, that $a\cdot(x_i - p) > 0$ for
    /// every point with certainty (each computed margin exceeds its rounding bound).
    pub fn verify(&self, points: &[&[f64]], p: &[f64]) -> SeparatorCheck {
        separator_check(&self.a, points, p)
    }
}

/// Checks that `a` strictly separates `p` from every point: see [`Separator::verify`].
pub fn separator_check(a: &[f64], points: &[&[f64]], p: &[f64]) -> SeparatorCheck {
    let finite = a.iter().all(|v| v.is_finite()) && a.iter().any(|&v| v != 0.0);
    let g = gamma_n(p.len() + 2);
    let mut min_margin = f64::INFINITY;
    let mut slack = f64::INFINITY;
    let mut shapes_ok = a.len() == p.len();
    for x in points {
        if x.len() != p.len() {
            shapes_ok = false;
            break;
        }
        let (mut m, mut abs) = (0.0, 0.0);
        for k in 0..p.len() {
            let diff = x[k] - p[k];
            m += a[k] * diff;
            abs += (a[k] * diff).abs();
        }
        // 1.01: the bound is itself evaluated in f64.
        let bound = 1.01 * g * abs;
        min_margin = min_margin.min(m);
        slack = slack.min(m - bound);
    }
    SeparatorCheck {
        min_margin,
        certified_slack: slack,
        ok: finite && shapes_ok && !points.is_empty() && slack > 0.0,
    }
}

impl ConvexWeights {
    /// Checks, by arithmetic on the data only, that $\lambda\ge0$,
    /// $\sum\lambda = 1$ (to $4nu$) and $\lVert\sum\lambda_i x_i - p\rVert \le$
    /// [`HULL_TOL`]$\cdot\max_i\lVert x_i-p\rVert$.
    pub fn verify(&self, points: &[&[f64]], p: &[f64]) -> WeightsCheck {
        weights_check(&self.lambda, points, p)
    }
}

/// Checks convex weights against data: see [`ConvexWeights::verify`].
pub fn weights_check(lambda: &[f64], points: &[&[f64]], p: &[f64]) -> WeightsCheck {
    let d = p.len();
    let bad = WeightsCheck {
        residual: f64::INFINITY,
        allowed: 0.0,
        sum_error: f64::INFINITY,
        min_weight: f64::NAN,
        ok: false,
    };
    if lambda.len() != points.len() || points.is_empty() || points.iter().any(|x| x.len() != d) {
        return bad;
    }
    let mut acc = vec![0.0; d];
    let mut scale: f64 = 0.0;
    for (x, &l) in points.iter().zip(lambda) {
        let mut n2 = 0.0;
        for k in 0..d {
            let diff = x[k] - p[k];
            acc[k] += l * diff;
            n2 += diff * diff;
        }
        scale = scale.max(n2.sqrt());
    }
    let residual = dot(&acc, &acc).sqrt();
    let sum: f64 = lambda.iter().sum();
    let sum_error = (sum - 1.0).abs();
    let min_weight = lambda.iter().copied().fold(f64::INFINITY, f64::min);
    let allowed = HULL_TOL * scale;
    let ok = lambda.iter().all(|l| l.is_finite())
        && min_weight >= 0.0
        && sum_error <= 4.0 * lambda.len() as f64 * U
        && residual <= allowed;
    WeightsCheck {
        residual,
        allowed,
        sum_error,
        min_weight,
        ok,
    }
}

/// Wolfe's corral: affinely independent points with an orthonormal basis of
/// the directions $P_{i} - P_{\mathrm{base}}$.
struct Corral {
    /// Point indices; `idx[0]` is the base.
    idx: Vec<usize>,
    /// Convex weights, aligned with `idx`.
    w: Vec<f64>,
    /// Orthonormal basis, one vector per non-base member.
    q: Vec<Vec<f64>>,
    /// Upper-triangular factor: `r[j]` holds column j (entries 0..=j).
    r: Vec<Vec<f64>>,
}

/// Relative size below which a new direction counts as affinely dependent.
const DEP_TOL: f64 = 1e-13;

impl Corral {
    /// Appends the direction $P_j - P_{\mathrm{base}}$ to the basis (Gram–Schmidt
    /// twice). Returns false, leaving the basis unchanged, if it is dependent.
    fn push_direction(&mut self, pts: &Shifted, j: usize) -> bool {
        let base = pts.row(self.idx[0]);
        let mut col: Vec<f64> = pts.row(j).iter().zip(base).map(|(x, b)| x - b).collect();
        let n0 = dot(&col, &col).sqrt();
        let mut rcol = vec![0.0; self.q.len() + 1];
        for _pass in 0..2 {
            for (k, qk) in self.q.iter().enumerate() {
                let c = dot(qk, &col);
                for (v, q) in col.iter_mut().zip(qk) {
                    *v -= c * q;
                }
                rcol[k] += c;
            }
        }
        let nr = dot(&col, &col).sqrt();
        if nr.is_nan() || nr <= DEP_TOL * n0.max(f64::MIN_POSITIVE) || self.q.len() >= pts.d {
            return false;
        }
        for v in col.iter_mut() {
            *v /= nr;
        }
        *rcol.last_mut().expect("non-empty") = nr;
        self.q.push(col);
        self.r.push(rcol);
        true
    }

    /// Rebuilds the basis from scratch with the heaviest member as base.
    /// Members whose direction turns out dependent are dropped (their weight
    /// is redistributed by renormalisation).
    fn rebuild(&mut self, pts: &Shifted) {
        let hb = (0..self.idx.len())
            .max_by(|&a, &b| self.w[a].total_cmp(&self.w[b]))
            .unwrap_or(0);
        self.idx.swap(0, hb);
        self.w.swap(0, hb);
        self.q.clear();
        self.r.clear();
        let members: Vec<(usize, f64)> = self
            .idx
            .iter()
            .copied()
            .zip(self.w.iter().copied())
            .collect();
        self.idx.truncate(1);
        self.w.truncate(1);
        for &(j, wj) in &members[1..] {
            if self.push_direction(pts, j) {
                self.idx.push(j);
                self.w.push(wj);
            }
        }
        let s: f64 = self.w.iter().sum();
        for v in self.w.iter_mut() {
            *v /= s;
        }
    }

    /// Affine minimum-norm point of the corral: $y = (I-QQ^\top)P_{\mathrm{base}}$
    /// and affine weights $\alpha$ ($\sum\alpha = 1$, $\sum\alpha_iP_i = y$).
    fn affine_min(&self, pts: &Shifted) -> (Vec<f64>, Vec<f64>) {
        let base = pts.row(self.idx[0]);
        let mut y = base.to_vec();
        let mut t = vec![0.0; self.q.len()];
        for _pass in 0..2 {
            for (k, qk) in self.q.iter().enumerate() {
                let c = dot(qk, &y);
                for (v, q) in y.iter_mut().zip(qk) {
                    *v -= c * q;
                }
                t[k] += c;
            }
        }
        // R beta = -t (back substitution).
        let r = self.q.len();
        let mut beta = vec![0.0; r];
        for i in (0..r).rev() {
            let mut s = -t[i];
            for (j, bj) in beta.iter().enumerate().skip(i + 1) {
                s -= self.r[j][i] * bj;
            }
            beta[i] = s / self.r[i][i];
        }
        let mut alpha = Vec::with_capacity(r + 1);
        alpha.push(1.0 - beta.iter().sum::<f64>());
        alpha.extend(beta);
        (y, alpha)
    }

    /// $\sum_i w_i P_i$.
    fn point(&self, pts: &Shifted) -> Vec<f64> {
        let mut x = vec![0.0; pts.d];
        for (&i, &wi) in self.idx.iter().zip(&self.w) {
            for (v, p) in x.iter_mut().zip(pts.row(i)) {
                *v += wi * p;
            }
        }
        x
    }
}

/// Why the Wolfe iteration stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Optimal,
    Zero,
    Stalled,
}

/// Raw result of the minimum-norm-point iteration.
struct MinNorm {
    y: Vec<f64>,
    lambda: Vec<f64>,
    scale: f64,
    stop: Stop,
    iterations: usize,
}

/// Runs Wolfe's algorithm on the shifted points.
fn min_norm_point(pts: &Shifted) -> MinNorm {
    let norms: Vec<f64> = (0..pts.n)
        .map(|i| dot(pts.row(i), pts.row(i)).sqrt())
        .collect();
    let scale = norms.iter().copied().fold(0.0, f64::max);
    let j0 = (0..pts.n)
        .min_by(|&a, &b| norms[a].total_cmp(&norms[b]))
        .unwrap_or(0);
    let mut c = Corral {
        idx: vec![j0],
        w: vec![1.0],
        q: Vec::new(),
        r: Vec::new(),
    };
    let mut y = pts.row(j0).to_vec();
    let zero = 0.25 * HULL_TOL * scale;
    let max_major = 50 * (pts.n + pts.d) + 100;
    let mut stop = Stop::Stalled;
    let mut iterations = 0;
    let mut proj = vec![0.0; pts.n];
    let mut flat = 0usize;
    'major: while iterations < max_major {
        iterations += 1;
        let ny2 = dot(&y, &y);
        if ny2.sqrt() <= zero {
            stop = Stop::Zero;
            break;
        }
        for (i, pr) in proj.iter_mut().enumerate() {
            *pr = dot(&y, pts.row(i));
        }
        let (j, v) = proj
            .iter()
            .copied()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("non-empty");
        if v >= ny2 * (1.0 - 1e-10) {
            stop = Stop::Optimal;
            break;
        }
        if c.idx.contains(&j) || !c.push_direction(pts, j) {
            break; // numerically stalled: no admissible improving point
        }
        c.idx.push(j);
        c.w.push(0.0);
        // Minor cycles.
        loop {
            let (ya, alpha) = c.affine_min(pts);
            if alpha.iter().all(|&a| a > 0.0) {
                c.w = alpha;
                y = ya;
                break;
            }
            // Move from w towards alpha until the first weight hits 0.
            let mut theta = f64::INFINITY;
            let mut blocking = usize::MAX;
            for (i, (wi, ai)) in c.w.iter().zip(&alpha).enumerate() {
                if *ai <= 0.0 {
                    let t = wi / (wi - ai);
                    if t < theta {
                        theta = t;
                        blocking = i;
                    }
                }
            }
            let theta = theta.clamp(0.0, 1.0);
            if theta == 0.0 && c.idx[blocking] == j {
                // The point just added would leave at once: numerically stalled.
                break 'major;
            }
            for (wi, ai) in c.w.iter_mut().zip(&alpha) {
                *wi = (1.0 - theta) * *wi + theta * ai;
            }
            c.w[blocking] = 0.0;
            let keep: Vec<bool> = c.w.iter().map(|&wi| wi > 0.0).collect();
            c.idx = c
                .idx
                .iter()
                .zip(&keep)
                .filter(|p| *p.1)
                .map(|p| *p.0)
                .collect();
            c.w =
                c.w.iter()
                    .zip(&keep)
                    .filter(|p| *p.1)
                    .map(|p| *p.0)
                    .collect();
            if c.idx.is_empty() {
                break 'major;
            }
            c.rebuild(pts);
            y = c.point(pts);
        }
        if dot(&y, &y) >= ny2 && iterations > 1 {
            // No decrease that f64 resolves: the corral still changed, so allow
            // a few such steps before calling it stalled.
            flat += 1;
            if flat > pts.d + 1 {
                break;
            }
        } else {
            flat = 0;
        }
    }
    let mut lambda = vec![0.0; pts.n];
    for (&i, &wi) in c.idx.iter().zip(&c.w) {
        lambda[i] += wi.max(0.0);
    }
    let s: f64 = lambda.iter().sum();
    for l in lambda.iter_mut() {
        *l /= s;
    }
    MinNorm {
        y,
        lambda,
        scale,
        stop,
        iterations,
    }
}

/// Decides whether $p \in \mathrm{conv}\lbrace x_i\rbrace$ and returns a verified certificate.
///
/// `points` are the $x_i$ (all of the length of `p`). The returned certificate
/// has already passed its own `verify` (see the module docs for the tolerance
/// policy); if neither certificate can be verified the result is
/// [`GeometryError::Inconclusive`].
pub fn hull_verdict(points: &[&[f64]], p: &[f64]) -> Result<HullVerdict, GeometryError> {
    check_points(points, p, "points")?;
    let n = points.len();
    let d = p.len();
    let mut data = Vec::with_capacity(n * d);
    for x in points {
        data.extend(x.iter().zip(p).map(|(a, b)| a - b));
    }
    let pts = Shifted { n, d, data };
    let mn = min_norm_point(&pts);
    let inside = |lambda: &Vec<f64>| {
        let chk = weights_check(lambda, points, p);
        chk.ok.then(|| {
            HullVerdict::Inside(ConvexWeights {
                lambda: lambda.clone(),
                residual: chk.residual,
                scale: mn.scale,
            })
        })
    };
    let outside = |y: &Vec<f64>| {
        let chk = separator_check(y, points, p);
        chk.ok.then(|| {
            HullVerdict::Outside(Separator {
                a: y.clone(),
                gamma: chk.min_margin,
                distance: dot(y, y).sqrt(),
            })
        })
    };
    let first = if mn.stop == Stop::Zero {
        inside(&mn.lambda)
    } else {
        outside(&mn.y)
    };
    if let Some(v) = first {
        return Ok(v);
    }
    let second = if mn.stop == Stop::Zero {
        outside(&mn.y)
    } else {
        inside(&mn.lambda)
    };
    second.ok_or(GeometryError::Inconclusive {
        distance: dot(&mn.y, &mn.y).sqrt(),
        scale: mn.scale,
        iterations: mn.iterations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[Vec<f64>]) -> Vec<&[f64]> {
        v.iter().map(Vec::as_slice).collect()
    }

    #[test]
    fn square_contains_centre_and_not_outside_point() {
        let pts = vec![
            vec![1.0, 1.0],
            vec![-1.0, 1.0],
            vec![-1.0, -1.0],
            vec![1.0, -1.0],
        ];
        match hull_verdict(&rows(&pts), &[0.0, 0.0]).unwrap() {
            HullVerdict::Inside(c) => assert!(c.verify(&rows(&pts), &[0.0, 0.0]).ok),
            v => panic!("{v:?}"),
        }
        match hull_verdict(&rows(&pts), &[3.0, 0.5]).unwrap() {
            HullVerdict::Outside(s) => {
                // Nearest point is (1, 0.5): a = (1,0.5) - (3,0.5) = (-2, 0), distance 2.
                assert!((s.distance - 2.0).abs() < 1e-12, "{}", s.distance);
                assert!(s.verify(&rows(&pts), &[3.0, 0.5]).ok);
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn boundary_point_is_inside() {
        // p on the edge between (1,1) and (1,-1).
        let pts = vec![
            vec![1.0, 1.0],
            vec![-1.0, 1.0],
            vec![-1.0, -1.0],
            vec![1.0, -1.0],
        ];
        let v = hull_verdict(&rows(&pts), &[1.0, 0.25]).unwrap();
        assert!(matches!(v, HullVerdict::Inside(_)), "{v:?}");
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(matches!(
            hull_verdict(&[], &[0.0]),
            Err(GeometryError::Empty { .. })
        ));
        let a = [1.0, f64::NAN];
        assert!(matches!(
            hull_verdict(&[&a], &[0.0, 0.0]),
            Err(GeometryError::NonFinite { .. })
        ));
        let b = [1.0];
        assert!(matches!(
            hull_verdict(&[&b], &[0.0, 0.0]),
            Err(GeometryError::Dimension { .. })
        ));
    }

    #[test]
    fn wrong_certificates_fail() {
        let pts = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        // (1,1) does not separate the origin from itself-containing hull of (1,0),(-1,0).
        let pts2 = vec![vec![1.0, 0.0], vec![-1.0, 0.0]];
        assert!(!separator_check(&[1.0, 1.0], &rows(&pts2), &[0.0, 0.0]).ok);
        assert!(separator_check(&[1.0, 1.0], &rows(&pts), &[0.0, 0.0]).ok);
        // Weights (½,½) put the midpoint (½,½), not the origin.
        assert!(!weights_check(&[0.5, 0.5], &rows(&pts), &[0.0, 0.0]).ok);
        assert!(weights_check(&[0.5, 0.5], &rows(&pts), &[0.5, 0.5]).ok);
        assert!(!weights_check(&[1.5, -0.5], &rows(&pts), &[1.5, -0.5]).ok);
    }
}
