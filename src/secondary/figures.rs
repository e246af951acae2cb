//! Figures of the secondary-sink measurements: the levels heat-map
//! (creation layer × lifetime, log counts), MLP-norm scatters with a
//! least-squares line and the Spearman interval, and primary-sink strength
//! next to the secondary count per layer.

use super::records::{ClaimMeasures, SinkRecord};
use crate::plot::{Fit, Heatmap, Panel, PlotError, Series, Style, render, render_heatmap};
use crate::stats::{Estimate, line_fit};
use std::path::{Path, PathBuf};

/// A set of (x, y) points.
pub type Points = Vec<(f64, f64)>;

/// Heat-map of (creation layer, lifetime) cells: $\log_{10}$ count, grey where empty.
pub fn levels_heatmap(
    stem: &Path,
    title: &str,
    cells: &[(usize, usize)],
    layers: usize,
) -> Result<Vec<PathBuf>, PlotError> {
    let mut counts = vec![vec![0usize; layers + 1]; layers];
    for &(c, l) in cells {
        if c < layers && l <= layers {
            counts[c][l] += 1;
        }
    }
    let values = counts
        .iter()
        .map(|row| {
            row.iter()
                .map(|&n| if n == 0 { f64::NAN } else { (n as f64).log10() })
                .collect()
        })
        .collect();
    render_heatmap(
        stem,
        &Heatmap {
            title: format!("{title}: log10 count"),
            x_label: "lifetime (layers)".into(),
            y_label: "creation layer".into(),
            value_unit: "1".into(),
            values,
        },
    )
}

fn fmt_est(e: &Option<Estimate>) -> String {
    e.map_or("n/a".into(), |e| {
        format!("ρ = {:.2} [{:.2}, {:.2}]", e.value, e.lo, e.hi)
    })
}

fn scatter_panel(title: String, x_label: &str, y_label: &str, pts: Vec<(f64, f64)>) -> Panel {
    let mut series = vec![Series::new("sinks", pts.clone(), Style::Points, 0)];
    let (xs, ys): (Vec<f64>, Vec<f64>) = pts.iter().copied().unzip();
    if let Ok(f) = line_fit(&xs, &ys) {
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut line = Series::new(
            format!(
                "OLS: {:.3} + {:.3}·x, R² = {:.2}",
                f.intercept, f.slope, f.r2
            ),
            vec![
                (lo, f.intercept + f.slope * lo),
                (hi, f.intercept + f.slope * hi),
            ],
            Style::Line,
            1,
        );
        line.fit = Some(Fit::Linear {
            slope: f.slope,
            intercept: f.intercept,
            r2: f.r2,
            n: xs.len(),
        });
        series.push(line);
    }
    Panel {
        title,
        x_label: x_label.into(),
        y_label: y_label.into(),
        log_x: false,
        log_y: false,
        series,
        ..Default::default()
    }
}

/// MLP-output norm at creation against mean sink score and against lifetime,
/// each with its least-squares line and Spearman interval in the panel title.
pub fn norm_scatters(
    stem: &Path,
    title: &str,
    score: (Vec<(f64, f64)>, &Option<Estimate>),
    life: (Vec<(f64, f64)>, &Option<Estimate>),
) -> Result<Vec<PathBuf>, PlotError> {
    render(
        stem,
        title,
        &[
            scatter_panel(
                format!("score: {}", fmt_est(score.1)),
                "‖MLP output‖ at creation",
                "mean sink score α",
                score.0,
            ),
            scatter_panel(
                format!("lifetime: {}", fmt_est(life.1)),
                "‖MLP output‖ at creation",
                "lifetime (layers)",
                life.0,
            ),
        ],
    )
}

/// The (MLP norm, mean score) and (MLP norm, lifetime) points of a set of records.
pub fn norm_points(recs: &[&SinkRecord]) -> (Points, Points) {
    (
        recs.iter()
            .filter_map(|r| Some((r.mlp_out_norm_at_creation?, r.mean_score()?)))
            .collect(),
        recs.iter()
            .filter_map(|r| Some((r.mlp_out_norm_at_creation?, r.lifetime as f64)))
            .collect(),
    )
}

/// Primary-sink strength per layer next to the number of secondary sinks per layer.
pub fn primary_vs_secondary(
    stem: &Path,
    title: &str,
    m: &ClaimMeasures,
) -> Result<Vec<PathBuf>, PlotError> {
    let prim: Vec<(f64, f64)> = m.b4_primary_strength.as_ref().map_or(Vec::new(), |p| {
        p.iter().enumerate().map(|(l, &v)| (l as f64, v)).collect()
    });
    let cnt: Vec<(f64, f64)> = m
        .b4_secondary_per_layer
        .iter()
        .enumerate()
        .map(|(l, &n)| (l as f64, n as f64))
        .collect();
    render(
        stem,
        title,
        &[
            Panel {
                title: "primary (BOS) sink strength".into(),
                x_label: "layer".into(),
                y_label: "α_BOS (mean over heads)".into(),
                x_unit: "1".into(),
                y_unit: "1".into(),
                series: vec![Series::new("α_BOS", prim, Style::LinePoints, 0)],
                ..Default::default()
            },
            Panel {
                title: format!(
                    "secondary sinks per layer (Spearman vs α_BOS: {})",
                    m.b4_spearman.map_or("n/a".into(), |v| format!("{v:.2}"))
                ),
                x_label: "layer".into(),
                y_label: "count".into(),
                x_unit: "1".into(),
                y_unit: "1".into(),
                series: vec![Series::new("secondary", cnt, Style::LinePoints, 1)],
                ..Default::default()
            },
        ],
    )
}
