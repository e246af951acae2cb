//! `fit.json` and the figures of the cost-scaling sweep.

use super::fits::{GroupFit, fit_all, groups, mean_by_t, usable};
use super::point::Record;
use super::read_results;
use crate::plot::{self, Aggregate, Fit, Panel, Sample, Series, Style};
use crate::sweep::{SweepError, io};
use std::path::{Path, PathBuf};

/// Writes `fit.json` and the figures (`cost_scaling.svg/png`: one panel per cost
/// definition; `cost_ratio.svg/png`: diagonal/sink against T). Returns the fits and figure paths.
pub fn analyze(
    dir: &Path,
    fig_dir: &Path,
    n_boot: usize,
    seed: u64,
) -> Result<(Vec<GroupFit>, Vec<PathBuf>), SweepError> {
    let records = read_results(&dir.join("results.jsonl"))?;
    let fits = fit_all(&records, n_boot, seed);
    let fit_path = dir.join("fit.json");
    let json = serde_json::to_string_pretty(&fits).map_err(|e| SweepError::Spec(e.to_string()))?;
    crate::atomic::write(&fit_path, json).map_err(io(&fit_path))?;
    let mut figs = Vec::new();
    if records.iter().all(|r| r.value.is_none()) {
        return Ok((fits, figs));
    }
    let g = groups(&records);
    let norms: Vec<String> = {
        let mut v: Vec<String> = records.iter().map(|r| r.norm.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let several = |source: &str| {
        let mut s: Vec<&str> = records
            .iter()
            .filter(|r| r.source == source)
            .map(|r| r.setting.as_str())
            .collect();
        s.sort_unstable();
        s.dedup();
        s.len() > 1
    };
    let mut panels = Vec::new();
    for norm in &norms {
        let mut series = Vec::new();
        let mut closed = Vec::new();
        let mut color = 0;
        for ((source, emb, n, pattern, setting), rs) in &g {
            if n != norm {
                continue;
            }
            let pts = mean_by_t(rs);
            if pts.is_empty() {
                continue;
            }
            // The setting is named only where this panel holds two of one source.
            let mut label = if several(source) {
                format!("{pattern} ({source}, {emb}; {setting})")
            } else {
                format!("{pattern} ({source}, {emb})")
            };
            if let Some(f) = fits.iter().find(|f| {
                &f.source == source
                    && &f.embedding == emb
                    && &f.norm == n
                    && &f.pattern == pattern
                    && &f.setting == setting
            }) {
                // Fitted line pivoting at the centre of the log-T range; band from the slope CI.
                let lx: Vec<f64> = pts.iter().map(|p| p.0.ln()).collect();
                let cx = lx.iter().sum::<f64>() / lx.len() as f64;
                let cy = f.fit.intercept + f.fit.exponent * cx;
                let line: Vec<(f64, f64)> = pts
                    .iter()
                    .map(|p| (p.0, (cy + f.fit.exponent * (p.0.ln() - cx)).exp()))
                    .collect();
                // Line and points share one legend entry: the label carries the fit.
                label = format!(
                    "{label}: T^{{{:.2}}} [{:.2}, {:.2}]",
                    f.fit.exponent, f.fit.ci_low, f.fit.ci_high
                );
                let mut s = Series::new(label.clone(), line, Style::Dashed, color);
                s.fit = Some(Fit::Power {
                    exponent: f.fit.exponent,
                    intercept: f.fit.intercept,
                    ci_low: f.fit.ci_low,
                    ci_high: f.fit.ci_high,
                    level: f.fit.level,
                    n: f.fit.n,
                });
                s.band = pts
                    .iter()
                    .map(|p| {
                        let dx = p.0.ln() - cx;
                        let a = (cy + f.fit.ci_low * dx).exp();
                        let b = (cy + f.fit.ci_high * dx).exp();
                        (p.0, a.min(b), a.max(b))
                    })
                    .collect();
                series.push(s);
            }
            // §6 exact minima on orthonormal embeddings ([`crate::cost::exact`]): Frobenius
            // Δ√(T − H_T) for both patterns (drawn once), nuclear per pattern.
            if (source.as_str(), emb.as_str()) == ("exact", "orthonormal")
                && let Some(delta) = rs.iter().find_map(|r| r.delta)
                && let Some((norm_kind, label)) = closed_form(n, pattern)
                && !closed.iter().any(|s: &Series| s.name == label)
            {
                let (t0, t1) = (pts[0].0 as usize, pts[pts.len() - 1].0 as usize);
                let curve = (t0.max(2)..=t1)
                    .map(|t| (t as f64, norm_kind(t, delta)))
                    .collect();
                closed.push(Series::new(
                    label,
                    curve,
                    Style::Line,
                    plot::REFERENCE_COLOR,
                ));
            }
            let mut s = Series::new(label, pts, Style::Points, color);
            s.aggregate = Some(Aggregate::GeometricMean {
                samples: samples(rs, None),
            });
            series.push(s);
            color += 1;
        }
        series.extend(closed);
        if !series.is_empty() {
            // Reference slopes of the claim (A5): T^1 and T^{3/2}, through the data's centre.
            let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.clone()).collect();
            series.extend(plot::slope_guide("T^{1} (guide)", 1.0, &all, true));
            series.extend(plot::slope_guide("T^{3/2} (guide)", 1.5, &all, false));
            panels.push(Panel {
                title: format!("cost: {norm}"),
                x_label: "T".into(),
                y_label: "minimal / trained cost".into(),
                log_x: true,
                log_y: true,
                x_unit: "tokens".into(),
                y_unit: "1".into(),
                series,
            });
        }
    }
    if !panels.is_empty() {
        figs.extend(plot::render(
            &fig_dir.join("cost_scaling"),
            "Cost of sink vs diagonal against T",
            &panels,
        )?);
    }
    // Ratio diagonal/sink per (source, embedding, norm), mean over seeds per T.
    let mut rseries = Vec::new();
    let mut color = 0;
    for ((source, emb, norm, pattern, setting), rs) in &g {
        if pattern != "diagonal" {
            continue;
        }
        let Some(sink) = g.get(&(
            source.clone(),
            emb.clone(),
            norm.clone(),
            "sink".to_string(),
            setting.clone(),
        )) else {
            continue;
        };
        let (d, s) = (mean_by_t(rs), mean_by_t(sink));
        let pts: Vec<(f64, f64)> = d
            .iter()
            .filter_map(|&(t, v)| s.iter().find(|q| q.0 == t).map(|q| (t, v / q.1)))
            .collect();
        if !pts.is_empty() {
            let xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
            let mut s = Series::new(
                if several(source) {
                    format!("{norm} ({source}, {emb}; {setting})")
                } else {
                    format!("{norm} ({source}, {emb})")
                },
                pts,
                Style::LinePoints,
                color,
            );
            s.aggregate = Some(Aggregate::RatioOfGeometricMeans {
                numerator: samples(rs, Some(&xs)),
                denominator: samples(sink, Some(&xs)),
            });
            rseries.push(s);
            color += 1;
        }
    }
    if !rseries.is_empty() {
        let panel = Panel {
            title: "diagonal / sink cost".into(),
            x_label: "T".into(),
            y_label: "ratio".into(),
            log_x: true,
            log_y: true,
            x_unit: "tokens".into(),
            y_unit: "1".into(),
            series: rseries,
        };
        figs.extend(plot::render(&fig_dir.join("cost_ratio"), "", &[panel])?);
    }
    Ok((fits, figs))
}

/// The per-seed values behind the geometric means of [`mean_by_t`]: every usable record
/// with a positive finite value (at the abscissas `only`, when given), ordered by (T, seed).
fn samples(rs: &[&Record], only: Option<&[f64]>) -> Vec<Sample> {
    let mut v: Vec<Sample> = rs
        .iter()
        .filter(|r| usable(r))
        .filter(|r| only.is_none_or(|xs| xs.contains(&(r.t as f64))))
        .filter_map(|r| {
            r.value
                .filter(|v| *v > 0.0 && v.is_finite())
                .map(|y| Sample {
                    x: r.t as f64,
                    y,
                    seed: r.seed,
                })
        })
        .collect();
    v.sort_by(|a, b| a.x.total_cmp(&b.x).then(a.seed.cmp(&b.seed)));
    v
}

/// An exact closed form of the §6 minimum on orthonormal embeddings for (`norm`, `pattern`)
/// and its legend label, if there is one.
#[allow(clippy::type_complexity)]
fn closed_form(norm: &str, pattern: &str) -> Option<(Box<dyn Fn(usize, f64) -> f64>, String)> {
    use crate::cost::{Pattern, exact::nuclear_orthonormal, fro_orthonormal};
    Some(match (norm, pattern) {
        ("fro", _) => (
            Box::new(fro_orthonormal),
            "Δ√(T − H_T) (§6 closed form)".to_string(),
        ),
        ("nuclear", "sink") => (
            Box::new(|t, delta| nuclear_orthonormal(Pattern::Sink, t, delta)),
            "Δ(T − 1)/√T (exact, sink)".to_string(),
        ),
        ("nuclear", "diagonal") => (
            Box::new(|t, delta| nuclear_orthonormal(Pattern::Diagonal, t, delta)),
            "Δ Σ √(i/(i+1)) (exact, diagonal)".to_string(),
        ),
        _ => return None,
    })
}
