//! Seeded configurations built to satisfy or to violate the conditions of the
//! half-space theorem: (a) $0\notin\mathrm{conv}(Q)$, (b) $s\notin\mathrm{conv}(K)$.
//!
//! Satisfying sets are drawn in an open half-space with a chosen relative
//! margin $\mu$ (down to $10^{-6}$): every point has $u\cdot x \ge \mu R$ for a
//! unit $u$ and the data radius $R$, so the distance to the hull is at least
//! $\mu R$. Violating sets contain a *planted* convex combination equal to the
//! target (0 for queries, $s$ for keys), optionally on the boundary of the hull
//! (the planted points in the hyperplane $u^\perp$, all others strictly on one side).
//! "Nearly collinear" sets put every point within $10^{-6}R$ of a 2-plane.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;

/// How a point set relates to its target (0 for queries, $s$ for keys).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SetKind {
    /// Target strictly separated with relative margin `margin` (condition holds).
    Separated {
        /// Relative margin $\mu$ (distance to the hull $\ge \mu R$).
        margin: f64,
    },
    /// Target a planted convex combination of `support` points (condition fails).
    Planted {
        /// Number of points in the combination (1 = the target is a point of the set).
        support: usize,
        /// Planted points in a supporting hyperplane: target on the hull's boundary.
        boundary: bool,
    },
}

impl SetKind {
    /// True iff the condition of the theorem holds for this kind.
    pub fn holds(&self) -> bool {
        matches!(self, SetKind::Separated { .. })
    }
}

/// An instance of the half-space theorem: queries, sink, non-sink keys, and what was built.
#[derive(Clone, Debug)]
pub struct Instance {
    /// Query vectors.
    pub queries: Vec<Vec<f64>>,
    /// Sink key.
    pub sink: Vec<f64>,
    /// Non-sink keys.
    pub keys: Vec<Vec<f64>>,
    /// How the queries were built (target 0).
    pub query_kind: SetKind,
    /// How the keys were built (target $s$).
    pub key_kind: SetKind,
    /// Nearly collinear construction.
    pub collinear: bool,
}

impl Instance {
    /// Queries as slices.
    pub fn q(&self) -> Vec<&[f64]> {
        self.queries.iter().map(Vec::as_slice).collect()
    }
    /// Keys as slices.
    pub fn k(&self) -> Vec<&[f64]> {
        self.keys.iter().map(Vec::as_slice).collect()
    }
    /// Short description for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "d={} |Q|={} |K|={} queries {:?} keys {:?}{}",
            self.sink.len(),
            self.queries.len(),
            self.keys.len(),
            self.query_kind,
            self.key_kind,
            if self.collinear {
                " nearly-collinear"
            } else {
                ""
            }
        )
    }
}

fn gauss(rng: &mut StdRng, d: usize, scale: f64) -> Vec<f64> {
    (0..d)
        .map(|_| scale * rng.sample::<f64, _>(StandardNormal))
        .collect()
}

fn unit(rng: &mut StdRng, d: usize) -> Vec<f64> {
    loop {
        let g = gauss(rng, d, 1.0);
        let n = g.iter().map(|v| v * v).sum::<f64>().sqrt();
        if n > 1e-3 {
            return g.iter().map(|v| v / n).collect();
        }
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `g` with its component along the unit `u` removed.
fn perp(g: &[f64], u: &[f64]) -> Vec<f64> {
    let c = dot(g, u);
    g.iter().zip(u).map(|(x, y)| x - c * y).collect()
}

/// A point orthogonal to `u` (up to rounding) of typical norm `r`: a generic
/// direction, or (nearly collinear) $t\thinspace v + 10^{-6} r\thinspace g$ with a fixed unit $v\perp u$.
fn lateral(rng: &mut StdRng, u: &[f64], v: Option<&[f64]>, r: f64) -> Vec<f64> {
    let d = u.len();
    match v {
        None => perp(&gauss(rng, d, r / (d as f64).sqrt()), u),
        Some(v) => {
            let t = rng.random_range(-1.0..1.0) * r;
            let g = perp(&gauss(rng, d, 1e-6 * r / (d as f64).sqrt()), u);
            v.iter().zip(&g).map(|(a, b)| t * a + b).collect()
        }
    }
}

/// Builds `n` points around `target` of the given kind, along the unit
/// normal `u` (points lie on the side `sign·u·(x − target) > 0` when separated).
fn build_set(
    rng: &mut StdRng,
    n: usize,
    target: &[f64],
    kind: SetKind,
    sign: f64,
    collinear: bool,
    r: f64,
) -> Vec<Vec<f64>> {
    let d = target.len();
    let u = unit(rng, d);
    let v = collinear.then(|| {
        let w = perp(&unit(rng, d), &u);
        let nw = w.iter().map(|x| x * x).sum::<f64>().sqrt();
        w.iter().map(|x| x / nw).collect::<Vec<f64>>()
    });
    let vr = v.as_deref();
    // A point at signed height h along u (relative to target).
    let at = |rng: &mut StdRng, h: f64| -> Vec<f64> {
        let l = lateral(rng, &u, vr, r);
        l.iter()
            .zip(&u)
            .zip(target)
            .map(|((a, b), t)| t + a + sign * h * b)
            .collect()
    };
    let mut pts: Vec<Vec<f64>> = Vec::with_capacity(n);
    match kind {
        SetKind::Separated { margin } => {
            // Heights in [μR, …]: the first at exactly μR, the others either all
            // near it (thin slab) or spread over [μR, μR + R].
            let thin = rng.random::<bool>();
            for i in 0..n {
                let h = if i == 0 {
                    margin * r
                } else if thin {
                    margin * r * (1.0 + 9.0 * rng.random::<f64>())
                } else {
                    margin * r + r * rng.random::<f64>()
                };
                pts.push(at(rng, h));
            }
        }
        SetKind::Planted { support, boundary } => {
            let k = support.clamp(1, n);
            // Planted offsets y_i from the target with Σ λ_i y_i = 0.
            let mut ys: Vec<Vec<f64>> = Vec::with_capacity(k);
            let lam: Vec<f64> = (0..k).map(|_| 0.2 + rng.random::<f64>()).collect();
            for _ in 0..k.saturating_sub(1) {
                let y = if boundary {
                    lateral(rng, &u, vr, r)
                } else {
                    gauss(rng, d, r / (d as f64).sqrt())
                };
                ys.push(y);
            }
            let mut last = vec![0.0; d];
            for (y, l) in ys.iter().zip(&lam) {
                for (a, b) in last.iter_mut().zip(y) {
                    *a -= l * b;
                }
            }
            let lk = lam[k - 1];
            ys.push(last.iter().map(|a| a / lk).collect());
            for y in ys {
                pts.push(y.iter().zip(target).map(|(a, t)| a + t).collect());
            }
            for _ in k..n {
                if boundary {
                    let h = r * (0.01 + rng.random::<f64>());
                    pts.push(at(rng, h));
                } else {
                    let g = gauss(rng, d, r / (d as f64).sqrt());
                    pts.push(g.iter().zip(target).map(|(a, t)| a + t).collect());
                }
            }
            // Shuffle so the planted points are not first.
            for i in (1..pts.len()).rev() {
                let j = rng.random_range(0..=i);
                pts.swap(i, j);
            }
        }
    }
    pts
}

/// Draws a configuration: `nq` queries of `query_kind` (target 0), a sink and
/// `nk` keys of `key_kind` (target $s$), in dimension `d`, from `seed`.
pub fn draw_config(
    seed: u64,
    d: usize,
    nq: usize,
    nk: usize,
    query_kind: SetKind,
    key_kind: SetKind,
    collinear: bool,
) -> Instance {
    let mut rng = StdRng::seed_from_u64(seed);
    let r = 10f64.powf(rng.random_range(-1.0..1.0));
    let zero = vec![0.0; d];
    let queries = build_set(&mut rng, nq, &zero, query_kind, 1.0, collinear, r);
    let r_k = 10f64.powf(rng.random_range(-1.0..1.0));
    let sink = gauss(&mut rng, d, r_k / (d as f64).sqrt());
    // Keys on the side u·(k − s) < 0 when separable: b = u separates s above them.
    let keys = build_set(&mut rng, nk, &sink, key_kind, -1.0, collinear, r_k);
    Instance {
        queries,
        sink,
        keys,
        query_kind,
        key_kind,
        collinear,
    }
}

/// Draws the kinds and sizes too: dimension in 2..=`max_d`, up to `max_n`
/// points per set, each condition holding with probability ½, margins
/// $10^{-6}$–$1$, a quarter nearly collinear.
pub fn draw_random_config(seed: u64, max_d: usize, max_n: usize) -> Instance {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x9E37_79B9_7F4A_7C15);
    let d = rng.random_range(2..=max_d.max(2));
    let kind = |rng: &mut StdRng, n: usize| {
        if rng.random::<bool>() {
            let margin = [1e-6, 1e-4, 1e-2, 0.3][rng.random_range(0..4usize)];
            SetKind::Separated { margin }
        } else {
            let support = if rng.random::<bool>() {
                2
            } else {
                rng.random_range(1..=n.clamp(1, d + 2))
            };
            SetKind::Planted {
                support,
                boundary: rng.random::<bool>(),
            }
        }
    };
    let nq = rng.random_range(2..=max_n.max(2));
    let nk = rng.random_range(1..=max_n.max(1));
    let qk = kind(&mut rng, nq);
    // A query set planted with support 1 would contain 0 itself; keep ≥ 2 there.
    let qk = match qk {
        SetKind::Planted { support, boundary } => SetKind::Planted {
            support: support.max(2),
            boundary,
        },
        other => other,
    };
    let kk = kind(&mut rng, nk);
    let collinear = rng.random_range(0..4u32) == 0;
    draw_config(rng.random(), d, nq, nk, qk, kk, collinear)
}
