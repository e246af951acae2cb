//! Claim A1 (half-space theorem, docs/theory.md §3): report section `half_space`
//! and figure `half_space`. The math is in [`crate::geometry`], the checks in
//! [`crate::geometry::check`].

use crate::geometry::half_space::{Verdict, half_space_verdict_rows};
use crate::geometry::hull::{HullVerdict, hull_verdict};
use crate::geometry::sample::{SetKind, draw_config};
use crate::plot::{Panel, Series, Style, render};
use crate::section::{ReportCtx, ReportSection, SectionError};
use std::fmt::Write as _;

fn pts(v: &[Vec<f64>]) -> Vec<(f64, f64)> {
    v.iter().map(|p| (p[0], p[1])).collect()
}

/// A segment of the line $\lbrace x : n\cdot x = t\rbrace$ within radius `r` of `centre`'s projection.
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
pub fn section(ctx: &ReportCtx) -> Result<ReportSection, SectionError> {
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
    let nuc = crate::linalg::nuclear_norm(w.w.as_ref(), faer::Par::Seq);
    let mut md = String::new();
    writeln!(
        md,
        "A bilinear head can make the sink an ε-sink for every query iff (a) 0 ∉ conv(Q) and \
         (b) s ∉ conv(K) (docs/theory.md §3). The figure shows a 2-D representable configuration \
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
        let s = section(&ctx).unwrap();
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
