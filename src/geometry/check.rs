//! Registered theorem checks for docs/theory.md §3 (`half_space`, `half_space_corollary`);
//! the report section and its 2-D figure are in [`crate::claims::half_space`].

use super::half_space::{Verdict, corollary_witness, half_space_verdict_rows, verify_sink_witness};
use super::sample::{Instance, draw_random_config};
use crate::outcome::CheckOutcome;
use faer::Mat;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;

/// Unit of the margins recorded by both checks.
pub const MARGIN_UNIT: &str = "fraction of the allowance left: (sink mass − (1−ε))/ε for witnesses, 1 − residual/(1e-9·scale) for convex weights";

/// Per-case seed: distinct, deterministic.
fn case_seed(seed: u64, case: usize) -> u64 {
    seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
        .wrapping_add(case as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Outcome of judging one configuration against its construction.
#[derive(Clone, Debug)]
pub struct Judged {
    /// Verdict matches the construction and every certificate verified.
    pub ok: bool,
    /// Margin in [`MARGIN_UNIT`].
    pub margin: f64,
    /// What went wrong (empty when ok).
    pub why: String,
}

/// Runs the half-space verdict on a built configuration and checks that the
/// verdict matches the construction and that every certificate verifies.
pub fn judge(cfg: &Instance, eps: f64) -> Judged {
    let (q, k) = (cfg.q(), cfg.k());
    let a_holds = cfg.query_kind.holds();
    let b_holds = cfg.key_kind.holds();
    let v = match half_space_verdict_rows(&q, &cfg.sink, &k, eps) {
        Ok(v) => v,
        Err(e) => {
            return Judged {
                ok: false,
                margin: f64::NEG_INFINITY,
                why: format!("error: {e}"),
            };
        }
    };
    match &v {
        Verdict::Representable(w) => {
            let chk = w.verify(&q, &cfg.sink, &k);
            let ok = a_holds && b_holds && chk.ok;
            let why = if ok {
                String::new()
            } else {
                format!("representable verdict, check {chk:?}")
            };
            Judged {
                ok,
                margin: chk.margin,
                why,
            }
        }
        Verdict::NotRepresentable(obs) => {
            let mut margin = f64::INFINITY;
            let mut all_ok = !obs.is_empty();
            for o in obs {
                let c = o.verify(&q, &cfg.sink, &k);
                all_ok &= c.ok;
                margin = margin.min(if c.allowed > 0.0 {
                    1.0 - c.residual / c.allowed
                } else if c.ok {
                    1.0
                } else {
                    -1.0
                });
            }
            let ok = all_ok && v.queries_fail() != a_holds && v.sink_fails() != b_holds;
            let why = if ok {
                String::new()
            } else {
                format!(
                    "not representable (queries fail {}, sink fails {}), certificates ok {all_ok}",
                    v.queries_fail(),
                    v.sink_fails()
                )
            };
            Judged {
                ok,
                margin: if ok { margin } else { margin.min(-1.0) },
                why,
            }
        }
    }
}

/// The ε of case `i` (cycled; all below ½ so that $\Delta_\varepsilon(m) > 0$ for every $m\ge1$).
fn eps_for(i: usize) -> f64 {
    [1e-2, 1e-4, 0.2][i % 3]
}

/// Check `half_space` (claim A1): random configurations built to satisfy or
/// violate (a) and (b), d in 2..=64, up to 256 points per set, margins down to
/// 1e-6 relative, some nearly collinear; the verdict must match the
/// construction and every certificate must verify.
pub fn run_half_space(cases: usize, seed: u64) -> CheckOutcome {
    let mut out = CheckOutcome::new("half_space", MARGIN_UNIT);
    for i in 0..cases {
        let cfg = draw_random_config(case_seed(seed, i), 64, 256);
        let eps = eps_for(i);
        let j = judge(&cfg, eps);
        out.record(j.ok, j.margin, || {
            format!("case {i}: {} (ε={eps}): {}", cfg.describe(), j.why)
        });
    }
    out
}

/// A configuration meeting the corollary's cosine condition: $s\cdot x < 0$
/// for every query (relative margin down to $10^{-6}$) and $s\cdot k\le 0$ for
/// every key, a third of the keys exactly orthogonal to $s$ (coordinate 0 of
/// $s$ is 0 and those keys live on it) and one key zero.
pub fn corollary_config(
    seed: u64,
    d: usize,
    nq: usize,
    nk: usize,
) -> (Vec<Vec<f64>>, Vec<f64>, Vec<Vec<f64>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let g = |rng: &mut StdRng, n: usize, s: f64| -> Vec<f64> {
        (0..n)
            .map(|_| s * rng.sample::<f64, _>(StandardNormal))
            .collect()
    };
    let mut sink = g(&mut rng, d, 1.0);
    sink[0] = 0.0;
    if sink.iter().all(|&v| v == 0.0) {
        sink[d - 1] = 1.0;
    }
    let ns = sink.iter().map(|v| v * v).sum::<f64>().sqrt();
    let unit: Vec<f64> = sink.iter().map(|v| v / ns).collect();
    let r = 10f64.powf(rng.random_range(-1.0..1.0));
    let margin = [1e-6, 1e-3, 0.1, 1.0][rng.random_range(0..4usize)];
    let along = |rng: &mut StdRng, h: f64| -> Vec<f64> {
        let x = g(rng, d, r / (d as f64).sqrt());
        let c: f64 = x.iter().zip(&unit).map(|(a, b)| a * b).sum();
        x.iter()
            .zip(&unit)
            .map(|(a, b)| a - c * b - h * b)
            .collect()
    };
    let queries: Vec<Vec<f64>> = (0..nq)
        .map(|i| {
            let h = if i == 0 {
                margin * r
            } else {
                margin * r + r * rng.random::<f64>()
            };
            along(&mut rng, h)
        })
        .collect();
    let keys: Vec<Vec<f64>> = (0..nk)
        .map(|i| {
            if i == 0 {
                vec![0.0; d]
            } else if i % 3 == 0 {
                let mut k = vec![0.0; d];
                k[0] = r * rng.sample::<f64, _>(StandardNormal);
                k
            } else {
                let h = r * (1e-3 + rng.random::<f64>());
                along(&mut rng, h)
            }
        })
        .collect();
    (queries, sink, keys)
}

/// Check `half_space_corollary`: on configurations with $\cos(s,x)<0$ for every
/// query and $\cos(s,k)\le0$ for every key, $W=-c\thinspace ss^\top$ puts sink mass
/// $\ge 1-\varepsilon$ on every query (verified by computing the attention), the
/// general verdict agrees (representable), and the wrong-sign $+c\thinspace ss^\top$ fails.
pub fn run_corollary(cases: usize, seed: u64) -> CheckOutcome {
    let mut out = CheckOutcome::new("half_space_corollary", MARGIN_UNIT);
    for i in 0..cases {
        let mut rng = StdRng::seed_from_u64(case_seed(seed ^ 0xC0_11A7, i));
        let d = rng.random_range(2..=64usize);
        let nq = rng.random_range(1..=256usize);
        let nk = rng.random_range(1..=256usize);
        let (qv, s, kv) = corollary_config(rng.random(), d, nq, nk);
        let q: Vec<&[f64]> = qv.iter().map(Vec::as_slice).collect();
        let k: Vec<&[f64]> = kv.iter().map(Vec::as_slice).collect();
        let eps = eps_for(i);
        let w = match corollary_witness(&q, &s, &k, eps) {
            Ok(Some(w)) => w,
            other => {
                out.record(false, -1.0, || {
                    format!("case {i}: corollary witness not built: {other:?}")
                });
                continue;
            }
        };
        let chk = w.verify(&q, &s, &k);
        let wrong = Mat::from_fn(d, d, |a, b| -w.w[(a, b)]);
        let wrong_chk = verify_sink_witness(wrong.as_ref(), &q, &s, &k, eps);
        let general = half_space_verdict_rows(&q, &s, &k, eps);
        let general_ok = matches!(&general, Ok(v) if v.is_representable() && v.verify(&q, &s, &k));
        let ok = chk.ok && !wrong_chk.ok && general_ok;
        out.record(ok, chk.margin, || {
            format!(
                "case {i} d={d} |Q|={nq} |K|={nk} ε={eps}: witness {chk:?}, wrong sign accepted {}, general verdict ok {general_ok}",
                wrong_chk.ok
            )
        });
    }
    out
}
