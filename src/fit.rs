//! Exponent fits: $\log y = a + b \log T$ by least squares, with a seeded
//! pairs-bootstrap percentile confidence interval for the slope $b$.

use crate::stats;
use serde::{Deserialize, Serialize};

/// Errors of the fitter.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// Fewer than two distinct positive x values, or a non-positive y.
    #[error("cannot fit a power law: {0}")]
    Degenerate(String),
}

/// A fitted power law $y \approx e^{a} x^{b}$.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PowerFit {
    /// Exponent $b$ (slope on log–log axes).
    pub exponent: f64,
    /// Intercept $a$ (natural log).
    pub intercept: f64,
    /// Lower end of the bootstrap CI of the exponent.
    pub ci_low: f64,
    /// Upper end of the bootstrap CI of the exponent.
    pub ci_high: f64,
    /// Confidence level of the CI (e.g. 0.95).
    pub level: f64,
    /// Points used.
    pub n: usize,
    /// Distinct x values.
    pub n_x: usize,
    /// Residual standard deviation on the log scale.
    pub resid_sd: f64,
}

impl PowerFit {
    /// The fitted curve at `x`.
    pub fn predict(&self, x: f64) -> f64 {
        (self.intercept + self.exponent * x.ln()).exp()
    }
}

/// The least-squares line $(a, b)$ of [`stats::least_squares`], `None` when
/// $S_{xx} \le 10^{-12} n$ (all $x$ equal up to rounding: no slope is identified).
fn ols(x: &[f64], y: &[f64]) -> Option<(f64, f64)> {
    let f = stats::least_squares(x, y);
    (f.sxx > 1e-12 * x.len() as f64).then_some((f.intercept, f.slope))
}

/// Fits $\log y = a + b\log x$ to `(x, y)` points (x, y > 0); CI by `n_boot`
/// pairs-bootstrap resamples drawn from `seed`, percentile interval at `level`.
///
/// When every resample is degenerate or the data are noise-free the CI
/// collapses onto the point estimate.
pub fn fit_power_law(
    points: &[(f64, f64)],
    n_boot: usize,
    level: f64,
    seed: u64,
) -> Result<PowerFit, FitError> {
    if let Some(p) = points
        .iter()
        .find(|p| !(p.0 > 0.0 && p.1 > 0.0 && p.0.is_finite() && p.1.is_finite()))
    {
        return Err(FitError::Degenerate(format!(
            "point ({}, {}) is not positive and finite",
            p.0, p.1
        )));
    }
    if !(level > 0.0 && level < 1.0) {
        return Err(FitError::Degenerate(format!(
            "confidence level {level} not in (0, 1)"
        )));
    }
    let logs: Vec<(f64, f64)> = points.iter().map(|p| (p.0.ln(), p.1.ln())).collect();
    let (lx, ly): (Vec<f64>, Vec<f64>) = logs.iter().copied().unzip();
    let mut xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let (a, b) = ols(&lx, &ly)
        .ok_or_else(|| FitError::Degenerate("fewer than two distinct x values".into()))?;
    let resid_sd = if logs.len() > 2 {
        (logs
            .iter()
            .map(|p| (p.1 - a - b * p.0).powi(2))
            .sum::<f64>()
            / (logs.len() - 2) as f64)
            .sqrt()
    } else {
        0.0
    };
    let slopes = stats::bootstrap_resamples(&lx, &ly, |x, y| ols(x, y).map(|f| f.1), n_boot, seed);
    let (ci_low, ci_high) = if slopes.is_empty() {
        (b, b)
    } else {
        let alpha = (1.0 - level) / 2.0;
        (
            stats::quantile_sorted(&slopes, alpha).min(b),
            stats::quantile_sorted(&slopes, 1.0 - alpha).max(b),
        )
    };
    Ok(PowerFit {
        exponent: b,
        intercept: a,
        ci_low,
        ci_high,
        level,
        n: points.len(),
        n_x: xs.len(),
        resid_sd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_power_law_is_recovered_exactly() {
        let pts: Vec<(f64, f64)> = [8.0, 16.0, 32.0, 64.0]
            .iter()
            .map(|&t: &f64| (t, 3.0 * t.powf(1.5)))
            .collect();
        let f = fit_power_law(&pts, 200, 0.95, 1).unwrap();
        assert!((f.exponent - 1.5).abs() < 1e-12);
        assert!((f.intercept - 3f64.ln()).abs() < 1e-10);
    }

    #[test]
    fn degenerate_inputs_are_errors() {
        assert!(fit_power_law(&[(2.0, 1.0), (2.0, 3.0)], 10, 0.95, 0).is_err());
        assert!(fit_power_law(&[(2.0, -1.0), (4.0, 3.0)], 10, 0.95, 0).is_err());
    }
}
