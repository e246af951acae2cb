//! Small statistics shared by the measurements: ranks, Spearman and Pearson
//! correlation, ordinary least squares, and seeded percentile-bootstrap
//! confidence intervals.
//!
//! Pure functions on slices; every random draw takes an explicit seed.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Errors of the statistics routines.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StatsError {
    /// The two samples have different lengths.
    #[error("samples of different lengths ({0} and {1})")]
    Length(usize, usize),
    /// Too few points for the statistic.
    #[error("need at least {need} points, got {got}")]
    TooFew {
        /// Points required.
        need: usize,
        /// Points given.
        got: usize,
    },
    /// A value is NaN or infinite.
    #[error("non-finite value in the sample")]
    NonFinite,
    /// A sample is constant, so the correlation is undefined.
    #[error("a sample is constant: correlation undefined")]
    Constant,
    /// A bad parameter (level outside (0, 1), zero resamples, ...).
    #[error("bad parameter: {0}")]
    Param(String),
}

fn check_pair(x: &[f64], y: &[f64], need: usize) -> Result<(), StatsError> {
    if x.len() != y.len() {
        return Err(StatsError::Length(x.len(), y.len()));
    }
    if x.len() < need {
        return Err(StatsError::TooFew { need, got: x.len() });
    }
    if x.iter().chain(y).any(|v| !v.is_finite()) {
        return Err(StatsError::NonFinite);
    }
    Ok(())
}

/// Fractional ranks (1-based; ties get the mean of the ranks they span).
pub fn ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        // Positions i..=j (0-based) hold equal values: mean rank (i+j)/2 + 1.
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Pearson correlation $r = \frac{\sum (x_i-\bar x)(y_i-\bar y)}{\sqrt{\sum (x_i-\bar x)^2 \sum (y_i-\bar y)^2}}$.
pub fn pearson(x: &[f64], y: &[f64]) -> Result<f64, StatsError> {
    check_pair(x, y, 2)?;
    let n = x.len() as f64;
    let mx = x.iter().sum::<f64>() / n;
    let my = y.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        return Err(StatsError::Constant);
    }
    Ok((sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0))
}

/// Spearman rank correlation $\rho$: the Pearson correlation of the
/// fractional ranks (exact with ties).
pub fn spearman(x: &[f64], y: &[f64]) -> Result<f64, StatsError> {
    check_pair(x, y, 2)?;
    pearson(&ranks(x), &ranks(y))
}

/// A least-squares line $y \approx a + b x$ with its coefficient of determination.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct LineFit {
    /// Intercept $a$.
    pub intercept: f64,
    /// Slope $b$.
    pub slope: f64,
    /// $R^2 = 1 - \mathrm{SS}\_{res}/\mathrm{SS}\_{tot}$.
    pub r2: f64,
}

/// The least-squares line of `y` on `x` before any check: $b = S_{xy}/S_{xx}$,
/// $a = \bar y - b\bar x$, and $S_{xx} = \sum_i (x_i - \bar x)^2$, which the caller
/// compares with its own degeneracy threshold (with $S_{xx} = 0$ the slope is not finite).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeastSquares {
    /// Intercept $a$.
    pub intercept: f64,
    /// Slope $b$.
    pub slope: f64,
    /// $S_{xx}$.
    pub sxx: f64,
}

/// The one least-squares line of the crate (see [`LeastSquares`]); `x` and `y` have
/// equal lengths.
pub fn least_squares(x: &[f64], y: &[f64]) -> LeastSquares {
    let n = x.len() as f64;
    let mx = x.iter().sum::<f64>() / n;
    let my = y.iter().sum::<f64>() / n;
    let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let slope = sxy / sxx;
    LeastSquares {
        intercept: my - slope * mx,
        slope,
        sxx,
    }
}

/// Ordinary least squares of `y` on `x`, with $R^2$.
pub fn line_fit(x: &[f64], y: &[f64]) -> Result<LineFit, StatsError> {
    check_pair(x, y, 2)?;
    let n = x.len() as f64;
    let my = y.iter().sum::<f64>() / n;
    let LeastSquares {
        intercept,
        slope,
        sxx,
    } = least_squares(x, y);
    if sxx == 0.0 {
        return Err(StatsError::Constant);
    }
    let ss_tot: f64 = y.iter().map(|b| (b - my) * (b - my)).sum();
    let ss_res: f64 = x
        .iter()
        .zip(y)
        .map(|(a, b)| (b - intercept - slope * a).powi(2))
        .sum();
    let r2 = if ss_tot == 0.0 {
        1.0
    } else {
        1.0 - ss_res / ss_tot
    };
    Ok(LineFit {
        intercept,
        slope,
        r2,
    })
}

/// A point estimate with a bootstrap confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Estimate {
    /// The statistic on the full sample.
    pub value: f64,
    /// Lower end of the interval.
    pub lo: f64,
    /// Upper end of the interval.
    pub hi: f64,
    /// Confidence level (e.g. 0.95).
    pub level: f64,
    /// Resamples on which the statistic was defined (others are skipped).
    pub resamples: usize,
    /// Sample size.
    pub n: usize,
}

/// Percentile bootstrap of a paired statistic: resample the pairs with
/// replacement `b` times (seeded), compute `stat` on each, and return the
/// $(1-\text{level})/2$ and $(1+\text{level})/2$ empirical quantiles.
/// Resamples on which `stat` fails (e.g. a constant resample) are skipped;
/// if fewer than half succeed the interval is reported as an error.
pub fn bootstrap_paired(
    x: &[f64],
    y: &[f64],
    stat: impl Fn(&[f64], &[f64]) -> Result<f64, StatsError>,
    b: usize,
    level: f64,
    seed: u64,
) -> Result<Estimate, StatsError> {
    check_pair(x, y, 3)?;
    check_interval(b, level)?;
    let value = stat(x, y)?;
    let vals = bootstrap_resamples(x, y, |a, b| stat(a, b).ok(), b, seed);
    percentile_interval(value, vals, b, level, x.len(), "statistic")
}

fn check_interval(b: usize, level: f64) -> Result<(), StatsError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(StatsError::Param(format!("level {level} not in (0, 1)")));
    }
    if b == 0 {
        return Err(StatsError::Param("zero resamples".into()));
    }
    Ok(())
}

/// The percentile interval of `b` bootstrap values (sorted, the undefined ones already left
/// out); an error when fewer than half of the resamples gave a value.
fn percentile_interval(
    value: f64,
    vals: Vec<f64>,
    b: usize,
    level: f64,
    n: usize,
    what: &str,
) -> Result<Estimate, StatsError> {
    if vals.len() * 2 < b {
        return Err(StatsError::Param(format!(
            "{what} undefined on {} of {b} resamples",
            b - vals.len()
        )));
    }
    let q = |p: f64| quantile_sorted(&vals, p);
    Ok(Estimate {
        value,
        lo: q((1.0 - level) / 2.0),
        hi: q((1.0 + level) / 2.0),
        level,
        resamples: vals.len(),
        n,
    })
}

/// The one pairs bootstrap of the crate: `b` resamples of the pairs $(x_i, y_i)$ with
/// replacement, each position drawing one uniform index from a generator seeded by
/// `seed`, and the statistic on each resample where it is defined (`None` skips it),
/// sorted ascending. [`bootstrap_paired`] and `fit::fit_power_law` take their
/// percentile intervals from it.
pub fn bootstrap_resamples(
    x: &[f64],
    y: &[f64],
    stat: impl Fn(&[f64], &[f64]) -> Option<f64>,
    b: usize,
    seed: u64,
) -> Vec<f64> {
    let n = x.len();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut xs = vec![0.0; n];
    let mut ys = vec![0.0; n];
    let mut vals = Vec::with_capacity(b);
    for _ in 0..b {
        for k in 0..n {
            let i = rng.random_range(0..n);
            xs[k] = x[i];
            ys[k] = y[i];
        }
        if let Some(v) = stat(&xs, &ys) {
            vals.push(v);
        }
    }
    vals.sort_by(f64::total_cmp);
    vals
}

/// Quantile of an ascending slice by linear interpolation between order statistics
/// (Hyndman–Fan type 7): with $h = q(n-1)$,
/// $x_{(\lfloor h\rfloor)} + (h - \lfloor h\rfloor)(x_{(\lceil h\rceil)} - x_{(\lfloor h\rfloor)})$;
/// `q` is clamped to $[0, 1]$, and an empty slice gives NaN.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (pos - lo as f64) * (sorted[hi] - sorted[lo])
}

/// Spearman correlation with a seeded percentile-bootstrap interval.
pub fn spearman_ci(
    x: &[f64],
    y: &[f64],
    b: usize,
    level: f64,
    seed: u64,
) -> Result<Estimate, StatsError> {
    bootstrap_paired(x, y, spearman, b, level, seed)
}

/// ROC AUC of scores `pos` against scores `neg` (the Mann–Whitney statistic):
/// $\text{AUC} = \frac{1}{n_+ n_-}\sum_{i,j}\left([x_i > y_j] + \tfrac12[x_i = y_j]\right)$, the
/// probability that a positive outscores a negative, ties counted one half. Computed from
/// the fractional [`ranks`] of the pooled sample: $(R_+ - n_+(n_+ + 1)/2)/(n_+ n_-)$.
pub fn roc_auc(pos: &[f64], neg: &[f64]) -> Result<f64, StatsError> {
    if pos.is_empty() || neg.is_empty() {
        return Err(StatsError::TooFew {
            need: 1,
            got: pos.len().min(neg.len()),
        });
    }
    if pos.iter().chain(neg).any(|v| !v.is_finite()) {
        return Err(StatsError::NonFinite);
    }
    let pooled: Vec<f64> = pos.iter().chain(neg).copied().collect();
    let r = ranks(&pooled);
    let (np, nn) = (pos.len() as f64, neg.len() as f64);
    let rp: f64 = r[..pos.len()].iter().sum();
    Ok((rp - np * (np + 1.0) / 2.0) / (np * nn))
}

/// [`roc_auc`] with a seeded percentile-bootstrap interval: the (score, label) pairs are
/// resampled by [`bootstrap_resamples`] (resamples with one class only are skipped).
pub fn roc_auc_ci(
    pos: &[f64],
    neg: &[f64],
    b: usize,
    level: f64,
    seed: u64,
) -> Result<Estimate, StatsError> {
    let value = roc_auc(pos, neg)?;
    check_interval(b, level)?;
    let x: Vec<f64> = pos.iter().chain(neg).copied().collect();
    let y: Vec<f64> = (0..x.len())
        .map(|i| f64::from(u8::from(i < pos.len())))
        .collect();
    let split = |x: &[f64], y: &[f64]| {
        let (mut p, mut n) = (Vec::new(), Vec::new());
        for (v, l) in x.iter().zip(y) {
            if *l > 0.5 { p.push(*v) } else { n.push(*v) }
        }
        roc_auc(&p, &n).ok()
    };
    let vals = bootstrap_resamples(&x, &y, split, b, seed);
    percentile_interval(value, vals, b, level, x.len(), "AUC")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand count: pos = (3, 2, 2), neg = (2, 1). Pairs: 3 beats 2 and 1 (2); each 2 ties
    /// the 2 (½) and beats the 1 (1): 2 + 1.5 + 1.5 = 5 of 6 pairs, AUC = 5/6.
    #[test]
    fn roc_auc_hand_case_with_ties() {
        let a = roc_auc(&[3.0, 2.0, 2.0], &[2.0, 1.0]).unwrap();
        assert!((a - 5.0 / 6.0).abs() < 1e-15, "{a}");
        // Symmetry: swapping the classes gives 1 − AUC; all tied gives ½.
        let b = roc_auc(&[2.0, 1.0], &[3.0, 2.0, 2.0]).unwrap();
        assert!((b - 1.0 / 6.0).abs() < 1e-15, "{b}");
        assert_eq!(roc_auc(&[1.0, 1.0], &[1.0]).unwrap(), 0.5);
        assert!(roc_auc(&[], &[1.0]).is_err());
        // Perfect separation: the interval is the point; the seeded interval is reproducible.
        let e = roc_auc_ci(&[5.0, 6.0, 7.0], &[1.0, 2.0], 200, 0.95, 3).unwrap();
        assert_eq!((e.value, e.lo, e.hi), (1.0, 1.0, 1.0));
        let p: Vec<f64> = (0..40).map(|i| f64::from(i % 7)).collect();
        let n: Vec<f64> = (0..30).map(|i| f64::from(i % 5)).collect();
        let (e1, e2) = (
            roc_auc_ci(&p, &n, 300, 0.9, 11).unwrap(),
            roc_auc_ci(&p, &n, 300, 0.9, 11).unwrap(),
        );
        assert_eq!(e1, e2);
        assert!(e1.lo <= e1.value && e1.value <= e1.hi && e1.lo < e1.hi);
    }

    #[test]
    fn ranks_with_ties() {
        assert_eq!(ranks(&[10.0, 20.0, 10.0, 30.0]), vec![1.5, 3.0, 1.5, 4.0]);
    }

    #[test]
    fn spearman_known_values() {
        // Monotone but non-linear: rho = 1 exactly, Pearson < 1.
        let x: Vec<f64> = (1..=10).map(f64::from).collect();
        let y: Vec<f64> = x.iter().map(|v| v.powi(3)).collect();
        assert_eq!(spearman(&x, &y).unwrap(), 1.0);
        assert!(pearson(&x, &y).unwrap() < 0.99);
        let yr: Vec<f64> = y.iter().rev().copied().collect();
        assert_eq!(spearman(&x, &yr).unwrap(), -1.0);
        // Textbook case without ties: d = (0, -2, 1, 1, 0), sum d^2 = 6,
        // rho = 1 - 6*6/(5*24) = 0.7.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [1.0, 4.0, 2.0, 3.0, 5.0];
        assert!((spearman(&a, &b).unwrap() - 0.7).abs() < 1e-12);
        assert_eq!(spearman(&a, &[1.0; 5]), Err(StatsError::Constant));
        assert_eq!(spearman(&a, &b[..4]), Err(StatsError::Length(5, 4)));
    }

    #[test]
    fn line_fit_recovers_line() {
        let x: Vec<f64> = (0..20).map(f64::from).collect();
        let y: Vec<f64> = x.iter().map(|v| 2.0 - 0.5 * v).collect();
        let f = line_fit(&x, &y).unwrap();
        // Exact data: only rounding error, O(1e-15) relative.
        assert!(
            (f.slope + 0.5).abs() < 1e-12
                && (f.intercept - 2.0).abs() < 1e-12
                && (f.r2 - 1.0).abs() < 1e-12
        );
    }

    #[test]
    fn bootstrap_is_seeded_and_brackets() {
        let mut rng = StdRng::seed_from_u64(7);
        let x: Vec<f64> = (0..200).map(|_| rng.random::<f64>()).collect();
        let y: Vec<f64> = x.iter().map(|v| v + 0.3 * rng.random::<f64>()).collect();
        let e1 = spearman_ci(&x, &y, 500, 0.95, 1).unwrap();
        let e2 = spearman_ci(&x, &y, 500, 0.95, 1).unwrap();
        assert_eq!(e1, e2);
        assert!(e1.lo <= e1.value && e1.value <= e1.hi, "{e1:?}");
        assert!(e1.lo > 0.8, "strongly dependent sample, {e1:?}");
        // Independent sample: the interval must contain 0.
        let z: Vec<f64> = (0..200).map(|_| rng.random::<f64>()).collect();
        let e3 = spearman_ci(&x, &z, 500, 0.95, 2).unwrap();
        assert!(e3.lo < 0.0 && e3.hi > 0.0, "{e3:?}");
    }
}
