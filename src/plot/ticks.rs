//! Axis ticks at numbers a person writes: steps of $\lbrace 1, 2, 5\rbrace \times 10^k$ on
//! linear axes; decades (with minor ticks at $2..9 \times 10^k$) on log axes, or
//! $\lbrace 1, 2, 5\rbrace \times 10^k$ where a log panel spans less than two decades.
//!
//! Positions are in axis coordinates: the value itself on a linear axis,
//! $\log_{10}$ of it on a log axis. Labels use the `^{…}` superscript markup of
//! [`super::text`] (e.g. `10^{3}`).

/// Ticks of one axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Ticks {
    /// Labelled tick positions (axis coordinates).
    pub major: Vec<f64>,
    /// Label of each major tick.
    pub labels: Vec<String>,
    /// Unlabelled minor tick positions (axis coordinates).
    pub minor: Vec<f64>,
}

/// The step $m \times 10^k$, $m \in \lbrace 1, 2, 5\rbrace$, nearest (in ratio) to
/// `span / target`: about `target` intervals over `span`.
pub fn nice_step(span: f64, target: usize) -> f64 {
    let raw = span.abs().max(f64::MIN_POSITIVE) / target.max(1) as f64;
    let base = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * base)
        .min_by(|a, b| (a / raw).ln().abs().total_cmp(&(b / raw).ln().abs()))
        .expect("four candidates")
}

/// Whether `v` is $m \times 10^k$ with $m \in \lbrace 1, 2, 5\rbrace$ (up to rounding).
pub fn is_one_two_five(v: f64) -> bool {
    if !(v.is_finite() && v > 0.0) {
        return false;
    }
    let m = v / 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().any(|c| (m - c).abs() < 1e-6)
}

/// Ticks of a linear axis over `[lo, hi]`, about `target` intervals.
pub fn linear(lo: f64, hi: f64, target: usize) -> Ticks {
    let (step, major) = at_least_three(lo, hi, nice_step(hi - lo, target));
    let labels = major
        .iter()
        .map(|&v| label_linear(v, step, &major))
        .collect();
    Ticks {
        major,
        labels,
        minor: Vec::new(),
    }
}

/// The next smaller 1-2-5 step.
fn smaller(step: f64) -> f64 {
    let base = 10f64.powf(step.log10().floor());
    let m = (step / base).round();
    if m >= 5.0 {
        2.0 * base
    } else if m >= 2.0 {
        base
    } else {
        0.5 * base
    }
}

/// Shrinks `step` until at least three of its multiples lie in `[lo, hi]`.
fn at_least_three(lo: f64, hi: f64, mut step: f64) -> (f64, Vec<f64>) {
    let mut major = multiples(lo, hi, step);
    while major.len() < 3 && hi > lo && step > (hi - lo) * 1e-6 {
        step = smaller(step);
        major = multiples(lo, hi, step);
    }
    (step, major)
}

fn multiples(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let eps = 1e-9 * step;
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last)
        .map(|k| {
            let v = k as f64 * step;
            if v.abs() < eps { 0.0 } else { v }
        })
        .collect()
}

/// Ticks of a log axis whose axis coordinates span `[lo, hi]` ($\log_{10}$ of the values).
pub fn log(lo: f64, hi: f64, target: usize) -> Ticks {
    let eps = 1e-9;
    let d0 = (lo - eps).ceil() as i32;
    let d1 = (hi + eps).floor() as i32;
    let n_dec = (d1 - d0 + 1).max(0) as usize;
    if n_dec >= 2 {
        let stride = n_dec.div_ceil(target.max(2)).max(1) as i32;
        let mut major = Vec::new();
        let mut minor = Vec::new();
        let start = d0 + (d0.rem_euclid(stride) != 0) as i32 * (stride - d0.rem_euclid(stride));
        for k in (lo.floor() as i32 - 1)..=(hi.ceil() as i32) {
            if k >= d0 && k <= d1 && (k - start).rem_euclid(stride) == 0 {
                major.push(k as f64);
            } else if stride > 1 && k >= d0 && k <= d1 {
                minor.push(k as f64);
            }
            if stride == 1 {
                for m in 2..10 {
                    let p = k as f64 + (m as f64).log10();
                    if p >= lo - eps && p <= hi + eps {
                        minor.push(p);
                    }
                }
            }
        }
        let labels = major.iter().map(|&p| label_log(p)).collect();
        return Ticks {
            major,
            labels,
            minor,
        };
    }
    // Less than two decades: 1-2-5 mantissas, the other integers as minor ticks.
    let mut major = Vec::new();
    let mut minor = Vec::new();
    for k in (lo.floor() as i32 - 1)..=(hi.ceil() as i32) {
        for m in 1..10 {
            let p = k as f64 + (m as f64).log10();
            if p < lo - eps || p > hi + eps {
                continue;
            }
            if [1, 2, 5].contains(&m) {
                major.push(p);
            } else {
                minor.push(p);
            }
        }
    }
    if major.len() >= 3 {
        let labels = major.iter().map(|&p| label_log(p)).collect();
        return Ticks {
            major,
            labels,
            minor,
        };
    }
    // A narrow range: 1-2-5 steps of the values themselves, placed on the log axis.
    let (a, b) = (10f64.powf(lo), 10f64.powf(hi));
    let (step, vals) = at_least_three(a, b, nice_step(b - a, target.min(4)));
    let labels = vals.iter().map(|&v| label_linear(v, step, &vals)).collect();
    Ticks {
        major: vals.iter().map(|v| v.log10()).collect(),
        labels,
        minor: Vec::new(),
    }
}

/// A number as people write it: `0.5`, `20`, `1500` (no trailing zeros).
pub fn plain(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    for d in 0..=10usize {
        let s = format!("{:.*}", d, v);
        let back: f64 = s.parse().unwrap_or(f64::NAN);
        if (back - v).abs() <= 1e-9 * v.abs() {
            return minus(&s);
        }
    }
    minus(&format!("{v}"))
}

fn minus(s: &str) -> String {
    s.replace('-', "\u{2212}")
}

/// $m \times 10^k$ written with a superscript exponent (`10^{k}` when $m = 1$).
pub fn scientific(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let k = v.abs().log10().floor() as i32;
    let m = v / 10f64.powi(k);
    let m = (m * 1000.0).round() / 1000.0;
    let (m, k) = if m.abs() >= 10.0 {
        (m / 10.0, k + 1)
    } else {
        (m, k)
    };
    let exp = format!("10^{{{}}}", minus(&k.to_string()));
    if (m - 1.0).abs() < 1e-9 {
        exp
    } else if (m + 1.0).abs() < 1e-9 {
        format!("\u{2212}{exp}")
    } else {
        format!("{}×{exp}", plain(m))
    }
}

fn label_linear(v: f64, step: f64, all: &[f64]) -> String {
    let big = all.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    if big >= 1e5 || (big < 1e-2 && big > 0.0) {
        scientific(v)
    } else {
        // Round to the step's decimals so 0.30000000000000004 prints as 0.3.
        let d = (-step.log10().floor()).max(0.0) as usize;
        plain(format!("{:.*}", d, v).parse().unwrap_or(v))
    }
}

/// Label of a log-axis tick at axis coordinate `p`: decades from $10^{-2}$ to
/// $10^{2}$ in plain digits (0.01 … 100), further out as `10^{k}`.
fn label_log(p: f64) -> String {
    let v = 10f64.powf(p);
    let k = p.round();
    if (p - k).abs() < 1e-9 {
        if (-2.0..=2.0).contains(&k) {
            plain(10f64.powi(k as i32))
        } else {
            format!("10^{{{}}}", minus(&(k as i32).to_string()))
        }
    } else if (1e-2..1e4).contains(&v) {
        plain(((v * 1e6).round()) / 1e6)
    } else {
        scientific(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_one_two_five() {
        for span in [0.003, 0.7, 1.0, 3.3, 17.0, 920.0, 4.4e7] {
            let s = nice_step(span, 5);
            assert!(is_one_two_five(s), "{span}: step {s}");
            // Nearest in ratio among 1, 2, 5: within a factor √(5/2) of five intervals.
            let k = span / s / 5.0;
            assert!((1.0 / 1.59..=1.59).contains(&k), "{span}: step {s}");
        }
        assert!(!is_one_two_five(3.0));
        assert!(!is_one_two_five(3.162));
    }

    #[test]
    fn labels_read_like_print() {
        let t = log(1.0_f64.log10(), 5000.0_f64.log10(), 6);
        assert_eq!(t.labels, ["1", "10", "100", "10^{3}"]);
        assert_eq!(t.minor.len(), 8 * 3 + 4); // 2..9 in three decades, 2..5 in the fourth
        let t = log(0.3_f64.log10(), 0.95_f64.log10(), 5);
        // One 1-2-5 mantissa (0.5) is too few: 1-2-5 steps of the values instead.
        assert_eq!(t.labels, ["0.4", "0.6", "0.8"]);
        let t = log(1.1_f64.log10(), 1.9_f64.log10(), 5);
        assert!(t.labels.iter().all(|l| !l.contains('e')), "{:?}", t.labels);
        let t = linear(-0.04, 1.04, 5);
        assert_eq!(t.labels, ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        // A narrow range still gets three labelled ticks.
        assert_eq!(
            linear(0.55, 0.66, 4).labels,
            ["0.56", "0.58", "0.6", "0.62", "0.64", "0.66"]
        );
        let t = linear(-2.0, 2.0, 4);
        assert_eq!(t.labels[0], "\u{2212}2");
        assert_eq!(scientific(2e5), "2×10^{5}");
        assert_eq!(scientific(1e-3), "10^{\u{2212}3}");
        assert_eq!(log(-6.2, 6.2, 5).labels[0], "10^{\u{2212}6}");
    }
}
