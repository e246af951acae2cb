//! Registered theorem checks for THEORY.md §3 (`half_space`, `half_space_corollary`)
//! and the report section `half_space` with its 2-D figure.

use super::half_space::{Verdict, corollary_witness, half_space_verdict_rows, verify_sink_witness};
use super::hull::{HullVerdict, hull_verdict};
use super::sample::{Config, SetKind, draw_config, draw_random_config};
use crate::check::CheckOutcome;
use crate::plot::{Panel, Series, Style, render};
use crate::report::{ReportCtx, ReportSection, SectionError};
use faer::Mat;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;
use std::fmt::Write as _;

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
pub fn judge(cfg: &Config, eps: f64) -> Judged {
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
/// query and $\cos(s,k)\le0$ for every key, $W=-c\,ss^\top$ puts sink mass
/// $\ge 1-\varepsilon$ on every query (verified by computing the attention), the
/// general verdict agrees (representable), and the wrong-sign $+c\,ss^\top$ fails.
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

fn pts(v: &[Vec<f64>]) -> Vec<(f64, f64)> {
    v.iter().map(|p| (p[0], p[1])).collect()
}

/// A segment of the line $\{x : n\cdot x = t\}$ within radius `r` of `centre`'s projection.
fn line_segment(n: &[f64], t: f64, r: f64) -> Vec<(f64, f64)> {
    let nn = (n[0] * n[0] + n[1] * n[1]).sqrt();
    let (ux, uy) = (n[0] / nn, n[1] / nn);
    let (px, py) = (ux * t / nn, uy * t / nn);
    vec![(px - r * uy, py + r * ux), (px + r * uy, py - r * ux)]
}

fn arrow(from: (f64, f64), dir: &[f64], len: f64) -> Vec<(f64, f64)> {
    let n = (dir[0] * dir[0] + dir[1] * dir[1]).sqrt();
    let to = (from.0 + len * dir[0] / n, from.1 + len * dir[1] / n);
    // Shaft plus a small head.
    let (bx, by) = (-dir[0] / n * 0.15 * len, -dir[1] / n * 0.15 * len);
    let rot = |x: f64, y: f64, c: f64, s: f64| (x * c - y * s, x * s + y * c);
    let (h1x, h1y) = rot(bx, by, 0.94, 0.34);
    let (h2x, h2y) = rot(bx, by, 0.94, -0.34);
    vec![
        from,
        to,
        (to.0 + h1x, to.1 + h1y),
        to,
        (to.0 + h2x, to.1 + h2y),
    ]
}

/// Report section `half_space`: a 2-D illustration (queries in a half-space
/// with their max-margin direction $a$; keys, sink and direction $b$; an
/// obstruction with its convex weights) and the witness numbers.
pub fn report_section(ctx: &ReportCtx) -> Result<ReportSection, SectionError> {
    let eps = 0.01;
    let good = draw_config(
        ctx.seed ^ 0x4A1,
        2,
        14,
        10,
        SetKind::Separated { margin: 0.4 },
        SetKind::Separated { margin: 0.4 },
        false,
    );
    let (q, k) = (good.q(), good.k());
    let Verdict::Representable(w) = half_space_verdict_rows(&q, &good.sink, &k, eps)? else {
        return Err("the illustrative configuration should be representable".into());
    };
    let chk = w.verify(&q, &good.sink, &k);
    let rq = good
        .queries
        .iter()
        .map(|p| p[0].hypot(p[1]))
        .fold(0.0, f64::max);
    let p1 = Panel {
        title: "(a) queries in an open half-space".into(),
        x_label: "x₁".into(),
        y_label: "x₂".into(),
        series: vec![
            Series::new("queries Q", pts(&good.queries), Style::Points, 0),
            Series::new("origin", vec![(0.0, 0.0)], Style::Points, 7),
            Series::new("{a·x = 0}", line_segment(&w.a, 0.0, rq), Style::Dashed, 3),
            Series::new(
                format!("a (min a·x/‖a‖ = {:.3})", w.gamma_a / w.a[0].hypot(w.a[1])),
                arrow((0.0, 0.0), &w.a, 0.6 * rq),
                Style::Line,
                2,
            ),
        ],
        ..Default::default()
    };
    let s = (good.sink[0], good.sink[1]);
    let rk = good
        .keys
        .iter()
        .map(|p| (p[0] - s.0).hypot(p[1] - s.1))
        .fold(0.0, f64::max);
    let bs = w.b[0] * s.0 + w.b[1] * s.1;
    let mut sep_line = line_segment(&w.b, bs - 0.5 * w.gamma_b, 1.2 * rk);
    // Centre the separating line near the sink.
    let shift = {
        let bn = w.b[0].hypot(w.b[1]);
        let (tx, ty) = (-w.b[1] / bn, w.b[0] / bn);
        s.0 * tx + s.1 * ty
    };
    let bn = w.b[0].hypot(w.b[1]);
    for p in sep_line.iter_mut() {
        p.0 += shift * (-w.b[1] / bn);
        p.1 += shift * (w.b[0] / bn);
    }
    let p2 = Panel {
        title: "(b) sink strictly separated from the keys".into(),
        x_label: "x₁".into(),
        y_label: "x₂".into(),
        series: vec![
            Series::new("keys K", pts(&good.keys), Style::Points, 0),
            Series::new("sink s", vec![s], Style::Points, 1),
            Series::new("{b·x = b·s − γ_b/2}", sep_line, Style::Dashed, 3),
            Series::new(
                format!(
                    "b (min b·(s−k)/‖b‖ = {:.3})",
                    w.gamma_b / w.b[0].hypot(w.b[1])
                ),
                arrow(s, &w.b, 0.5 * rk),
                Style::Line,
                2,
            ),
        ],
        ..Default::default()
    };
    let bad = draw_config(
        ctx.seed ^ 0xBAD,
        2,
        12,
        6,
        SetKind::Planted {
            support: 2,
            boundary: true,
        },
        SetKind::Separated { margin: 0.2 },
        false,
    );
    let bq = bad.q();
    let zero = [0.0, 0.0];
    let HullVerdict::Inside(lam) = hull_verdict(&bq, &zero)? else {
        return Err("the planted configuration should contain 0 in conv(Q)".into());
    };
    let lam_chk = lam.verify(&bq, &zero);
    let support: Vec<usize> = (0..bq.len()).filter(|&i| lam.lambda[i] > 0.0).collect();
    let mut series = vec![
        Series::new("queries Q", pts(&bad.queries), Style::Points, 0),
        Series::new("origin", vec![(0.0, 0.0)], Style::Points, 7),
    ];
    // One path 0 → x_i → 0 → x_j … through the support of λ.
    let mut path = vec![(0.0, 0.0)];
    for &i in &support {
        path.push((bad.queries[i][0], bad.queries[i][1]));
        path.push((0.0, 0.0));
    }
    series.push(Series::new(
        "support of λ (Σλᵢxᵢ = 0)",
        path,
        Style::Line,
        1,
    ));
    let p3 = Panel {
        title: "obstruction: 0 ∈ conv(Q), no W exists".into(),
        x_label: "x₁".into(),
        y_label: "x₂".into(),
        series,
        ..Default::default()
    };
    let figures = render(
        &ctx.fig_dir().join("half_space"),
        "Half-space theorem (A1)",
        &[p1, p2, p3],
    )?;
    let fro = crate::linalg::fro_norm(w.w.as_ref());
    let nuc = crate::linalg::nuclear_norm(w.w.as_ref());
    let mut md = String::new();
    writeln!(
        md,
        "A bilinear head can make the sink an ε-sink for every query iff (a) 0 ∉ conv(Q) and \
         (b) s ∉ conv(K) (THEORY.md §3). The figure shows a 2-D representable configuration \
         (seeded) with the max-margin directions found by the minimum-norm-point solver, and an \
         obstruction: a convex combination of queries equal to 0.\n"
    )?;
    writeln!(md, "| quantity | value |\n|---|---|")?;
    writeln!(md, "| ε, m, Δ_ε(m) | {eps}, {}, {:.6} |", k.len(), w.gap)?;
    writeln!(md, "| γ_a, γ_b | {:.6}, {:.6} |", w.gamma_a, w.gamma_b)?;
    writeln!(md, "| c = Δ/(γ_a γ_b) | {:.6} |", w.c)?;
    writeln!(
        md,
        "| c‖a‖‖b‖, ‖W‖_F, ‖W‖_* | {:.6}, {:.6}, {:.6} |",
        w.cost(),
        fro,
        nuc
    )?;
    writeln!(
        md,
        "| worst sink mass (verified) | {:.8} ≥ {} |",
        chk.worst_sink_mass,
        1.0 - eps
    )?;
    writeln!(
        md,
        "| obstruction: support of λ, residual ‖Σλx‖ (allowed) | {:?}, {:.2e} ({:.2e}) |",
        support, lam_chk.residual, lam_chk.allowed
    )?;
    if !chk.ok || !lam_chk.ok {
        return Err("a certificate of the illustration failed verification".into());
    }
    Ok(ReportSection {
        title: "Half-space theorem (A1)".into(),
        markdown: md,
        figures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_section_writes_the_figure() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ReportCtx {
            out_dir: dir.path().to_path_buf(),
            seed: 0,
            quick: true,
        };
        let s = report_section(&ctx).unwrap();
        assert_eq!(s.figures.len(), 2);
        for f in &s.figures {
            assert!(std::fs::metadata(f).unwrap().len() > 1000, "{f:?}");
        }
        assert!(s.markdown.contains("γ_a"));
        if let Ok(keep) = std::env::var("HALF_SPACE_FIG_DIR") {
            for f in &s.figures {
                std::fs::copy(f, std::path::Path::new(&keep).join(f.file_name().unwrap())).unwrap();
            }
            std::fs::write(
                std::path::Path::new(&keep).join("half_space.md"),
                &s.markdown,
            )
            .unwrap();
        }
    }
}
