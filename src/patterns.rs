//! Attention patterns (docs/theory.md §2) and the metrics of earlier work (§9).
//!
//! One implementation per metric, shared by the synthetic and the real-model
//! paths. Attention matrices are $T\times T$ row-stochastic `MatRef<f64>`s
//! (row = query, column = key); hidden states are $T\times d$ (row = token).

use crate::linalg::{cosine, row};
use faer::MatRef;
use serde::Serialize;

/// Gap a target logit needs over each of `m` others so that softmax puts mass
/// $\ge 1-\varepsilon$ on it: $\Delta_\varepsilon(m) = \ln(m(1-\varepsilon)/\varepsilon)$.
pub fn concentration_gap(m: usize, eps: f64) -> f64 {
    (m as f64 * (1.0 - eps) / eps).ln()
}

/// Mass on a target ahead of `m` others by gap `delta`: $1/(1 + m e^{-\Delta})$.
pub fn concentration_mass(m: usize, delta: f64) -> f64 {
    1.0 / (1.0 + m as f64 * (-delta).exp())
}

/// ε-sink on query set `q`: $A_{i0} \ge 1-\varepsilon$ for all $i \in Q$.
pub fn is_eps_sink(a: MatRef<'_, f64>, q: &[usize], eps: f64) -> bool {
    q.iter().all(|&i| a[(i, 0)] >= 1.0 - eps)
}

/// ε-diagonal on query set `q`: $A_{ii} \ge 1-\varepsilon$ for all $i \in Q$.
pub fn is_eps_diagonal(a: MatRef<'_, f64>, q: &[usize], eps: f64) -> bool {
    q.iter().all(|&i| a[(i, i)] >= 1.0 - eps)
}

/// Gu et al.'s key importance for causal attention:
/// $\alpha_k = \frac{1}{T-k}\sum_{i\ge k} A_{ik}$ (0-based keys).
pub fn gu_alpha(a: MatRef<'_, f64>) -> Vec<f64> {
    let t = a.nrows();
    (0..t)
        .map(|k| (k..t).map(|i| a[(i, k)]).sum::<f64>() / (t - k) as f64)
        .collect()
}

/// Gu's sink rate: the fraction of (sample, layer, head) scores $\alpha_k$
/// strictly above `eps` (Gu et al. use ε = 0.3, Barbero et al. 0.8).
/// Returns `None` for an empty slice.
pub fn sink_rate(alphas: &[f64], eps: f64) -> Option<f64> {
    if alphas.is_empty() {
        return None;
    }
    Some(alphas.iter().filter(|&&a| a > eps).count() as f64 / alphas.len() as f64)
}

/// The dominant column of an attention map and how strongly it is used.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DominantColumn {
    /// $s = \arg\max_j \overline{A_{\cdot j}}$.
    pub col: usize,
    /// Mean attention it receives, $\frac1T\sum_i A_{is}$.
    pub mass: f64,
    /// Fraction of queries with $A_{is} \ge 0.5$.
    pub routed_frac: f64,
    /// $\min_i A_{is}$ over the queries that can see $s$.
    pub min_a: f64,
}

/// Finds the dominant column over the queries `rows` (all rows when `None`).
pub fn dominant_column(a: MatRef<'_, f64>, rows: Option<&[usize]>) -> Option<DominantColumn> {
    let all: Vec<usize> = (0..a.nrows()).collect();
    let rows = rows.unwrap_or(&all);
    if rows.is_empty() || a.ncols() == 0 {
        return None;
    }
    let n = rows.len() as f64;
    let means: Vec<f64> = (0..a.ncols())
        .map(|j| rows.iter().map(|&i| a[(i, j)]).sum::<f64>() / n)
        .collect();
    let col = (0..means.len()).max_by(|&x, &y| means[x].total_cmp(&means[y]).then(y.cmp(&x)))?;
    let routed = rows.iter().filter(|&&i| a[(i, col)] >= 0.5).count() as f64 / n;
    let min_a = rows
        .iter()
        .filter(|&&i| i >= col || a.nrows() != a.ncols())
        .map(|&i| a[(i, col)])
        .fold(f64::INFINITY, f64::min);
    Some(DominantColumn {
        col,
        mass: means[col],
        routed_frac: routed,
        min_a,
    })
}

/// Class of a sink head by its value norms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ValueClass {
    /// $\lVert v_s\rVert / \overline{\lVert v_j\rVert} \le 0.2$: the sink writes (almost) nothing.
    NopLike,
    /// Ratio $\ge 0.5$: the sink broadcasts its value.
    Broadcast,
    /// In between.
    Intermediate,
}

/// Value-norm ratio $\lVert v_s\rVert / \mathrm{mean}\_{j\ne s}\lVert v_j\rVert$ (`None` if undefined).
pub fn value_norm_ratio(value_norms: &[f64], s: usize) -> Option<f64> {
    if s >= value_norms.len() || value_norms.len() < 2 {
        return None;
    }
    let others: f64 = value_norms
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != s)
        .map(|(_, v)| v)
        .sum::<f64>()
        / (value_norms.len() - 1) as f64;
    (others > 0.0).then(|| value_norms[s] / others)
}

/// Classifies a value-norm ratio (thresholds 0.2 and 0.5 of docs/theory.md §9).
pub fn value_class(ratio: f64) -> ValueClass {
    if ratio <= 0.2 {
        ValueClass::NopLike
    } else if ratio >= 0.5 {
        ValueClass::Broadcast
    } else {
        ValueClass::Intermediate
    }
}

/// The entropy term $-p \ln p$ of one probability; `None` for $p \le 0$ (and NaN), which
/// add nothing.
fn entropy_term(p: f64) -> Option<f64> {
    (p > 0.0).then(|| -p * p.ln())
}

/// The mass a learned sink logit takes from one attention row over the visible keys,
/// $p_{i\varnothing} = 1 - \sum_j A_{ij}$ (docs/theory.md §11; about 0 for a head without one).
pub fn learned_sink_mass(row: impl IntoIterator<Item = f64>) -> f64 {
    1.0 - row.into_iter().sum::<f64>()
}

/// Shannon entropy of row `i` over its `n_visible` keys, normalised by
/// $\ln n_{\text{visible}}$; `None` when only one key is visible.
pub fn row_entropy(a: MatRef<'_, f64>, i: usize, n_visible: usize) -> Option<f64> {
    if n_visible < 2 {
        return None;
    }
    let h: f64 = (0..a.ncols()).filter_map(|j| entropy_term(a[(i, j)])).sum();
    Some(h / (n_visible as f64).ln())
}

/// Mean normalised row entropy over rows with at least two visible keys,
/// where `n_visible(i)` gives the number of keys row `i` sees: the mean of [`row_entropy`].
///
/// A column-major matrix is read column by column, each row's sum taking its terms in the
/// same order $j = 0, 1, \dots$ from the same start as `Iterator::sum` (−0), so the values are
/// [`row_entropy`]'s bit for bit (tested). Reading it row by row strides the whole matrix for
/// each row: at $T = 2048$ that was most of `sinklab real`'s time on a CPU whose TLB does not
/// hold the 2048 pages a row touches. It starts with [`crate::linalg::clean_upper_state`]: the
/// map comes straight from the forward's products, and `ln` is a libm call.
pub fn mean_row_entropy(a: MatRef<'_, f64>, n_visible: impl Fn(usize) -> usize) -> Option<f64> {
    crate::linalg::clean_upper_state();
    let v: Vec<f64> = if a.row_stride() == 1 {
        let mut h = vec![-0.0f64; a.nrows()];
        for j in 0..a.ncols() {
            for (i, hi) in h.iter_mut().enumerate() {
                if let Some(e) = entropy_term(a[(i, j)]) {
                    *hi += e;
                }
            }
        }
        h.iter()
            .enumerate()
            .filter(|&(i, _)| n_visible(i) >= 2)
            .map(|(i, hi)| hi / (n_visible(i) as f64).ln())
            .collect()
    } else {
        (0..a.nrows())
            .filter_map(|i| row_entropy(a, i, n_visible(i)))
            .collect()
    };
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Entropy of the column-mass distribution $c_j = \frac1T\sum_i A_{ij}$,
/// normalised by $\ln T$ (1 = uniform use of keys, 0 = one key takes all).
pub fn column_entropy(a: MatRef<'_, f64>) -> Option<f64> {
    let (t, k) = (a.nrows(), a.ncols());
    if t == 0 || k < 2 {
        return None;
    }
    let h: f64 = (0..k)
        .map(|j| (0..t).map(|i| a[(i, j)]).sum::<f64>() / t as f64)
        .filter(|&c| c > 0.0)
        .map(|c| -c * c.ln())
        .sum();
    Some(h / (k as f64).ln())
}

/// Massive activations of one hidden state (Sun et al.): indices and values
/// with $|h_k| > 100$ and $|h_k| \ge 1000\cdot\mathrm{median}\_j |h_j|$.
pub fn massive_activations(h: &[f64]) -> Vec<(usize, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut abs: Vec<f64> = h.iter().map(|v| v.abs()).collect();
    abs.sort_by(f64::total_cmp);
    let n = abs.len();
    let median = if n % 2 == 1 {
        abs[n / 2]
    } else {
        0.5 * (abs[n / 2 - 1] + abs[n / 2])
    };
    h.iter()
        .enumerate()
        .filter(|&(_, v)| v.abs() > 100.0 && v.abs() >= 1000.0 * median)
        .map(|(k, &v)| (k, v))
        .collect()
}

/// Over-mixing $\mu(V) = \lVert V - \mathbf 1 \bar v^\top\rVert_F$ (Barbero et al.), rows = tokens.
pub fn over_mixing(v: MatRef<'_, f64>) -> f64 {
    let (t, d) = (v.nrows(), v.ncols());
    if t == 0 {
        return 0.0;
    }
    let mut s = 0.0;
    for j in 0..d {
        let m = (0..t).map(|i| v[(i, j)]).sum::<f64>() / t as f64;
        s += (0..t).map(|i| (v[(i, j)] - m).powi(2)).sum::<f64>();
    }
    s.sqrt()
}

/// Summary of $\cos(h_{\text{bos}}, h_i)$ over the other positions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CosSummary {
    /// Positions with a defined cosine.
    pub n: usize,
    /// Mean cosine.
    pub mean: f64,
    /// 10 % quantile.
    pub q10: f64,
    /// Median.
    pub q50: f64,
    /// 90 % quantile.
    pub q90: f64,
    /// Fraction of cosines $\le 0$ (the A1 condition holds where this is 1).
    pub frac_nonpos: f64,
}

/// Quantile of a sorted slice: [`crate::stats::quantile_sorted`] (re-exported here
/// for the metric code that already names it).
pub use crate::stats::quantile_sorted;

/// BOS-cosine summary of hidden states `h` ($T\times d$) against row `bos`.
pub fn bos_cosine_summary(h: MatRef<'_, f64>, bos: usize) -> Option<CosSummary> {
    if bos >= h.nrows() {
        return None;
    }
    let b = row(h, bos);
    let mut c: Vec<f64> = (0..h.nrows())
        .filter(|&i| i != bos)
        .filter_map(|i| cosine(&b, &row(h, i)))
        .collect();
    if c.is_empty() {
        return None;
    }
    c.sort_by(f64::total_cmp);
    let n = c.len();
    Some(CosSummary {
        n,
        mean: c.iter().sum::<f64>() / n as f64,
        q10: quantile_sorted(&c, 0.1),
        q50: quantile_sorted(&c, 0.5),
        q90: quantile_sorted(&c, 0.9),
        frac_nonpos: c.iter().filter(|&&v| v <= 0.0).count() as f64 / n as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linalg::harmonic;
    use faer::Mat;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    fn uniform_causal(t: usize) -> Mat<f64> {
        Mat::from_fn(t, t, |i, j| if j <= i { 1.0 / (i + 1) as f64 } else { 0.0 })
    }

    #[test]
    fn theory_fixtures() {
        // §1: m = 63, Δ = 10 → 0.9971480; Δ_0.01(63) = 8.738255.
        assert!((concentration_mass(63, 10.0) - 0.997_148_0).abs() < 5e-8);
        assert!((concentration_gap(63, 0.01) - 8.738_255).abs() < 5e-7);
        // Round trip: the gap gives exactly mass 1 − ε.
        assert!((concentration_mass(63, concentration_gap(63, 0.01)) - 0.99).abs() < 1e-12);
        // §9: uniform causal attention at T = 64 gives α_0 = H_64/64 = 0.0741233.
        let a = uniform_causal(64);
        let al = gu_alpha(a.as_ref());
        assert!((al[0] - harmonic(64) / 64.0).abs() < 1e-15);
        assert!((al[0] - 0.074_123_3).abs() < 5e-8);
        // Last key: only itself sees it, with weight 1/64.
        assert!((al[63] - 1.0 / 64.0).abs() < 1e-15);
    }

    #[test]
    fn gu_rate_is_strict() {
        assert_eq!(sink_rate(&[0.3, 0.31, 0.1, 0.9], 0.3), Some(0.5));
        assert_eq!(sink_rate(&[], 0.3), None);
    }

    #[test]
    fn perfect_sink_metrics() {
        let t = 5;
        let a = Mat::from_fn(t, t, |_, j| if j == 0 { 1.0 } else { 0.0 });
        let dc = dominant_column(a.as_ref(), None).unwrap();
        assert_eq!(dc.col, 0);
        assert_eq!((dc.mass, dc.routed_frac, dc.min_a), (1.0, 1.0, 1.0));
        assert!(is_eps_sink(a.as_ref(), &[1, 2, 3, 4], 0.0));
        assert!(!is_eps_diagonal(a.as_ref(), &[1], 0.5));
        assert_eq!(column_entropy(a.as_ref()), Some(0.0));
        assert_eq!(mean_row_entropy(a.as_ref(), |i| i + 1), Some(0.0));
        // Uniform causal rows have normalised entropy exactly 1.
        let u = uniform_causal(t);
        assert!((mean_row_entropy(u.as_ref(), |i| i + 1).unwrap() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn mean_row_entropy_is_the_mean_of_row_entropy_bit_for_bit() {
        // A causal map with zeros above the diagonal, tiny entries and a NaN-free mix, read
        // column-major (the fast walk) and through a row-major view (the row walk).
        let t = 37;
        let mut rng = StdRng::seed_from_u64(7);
        let mut a = Mat::<f64>::zeros(t, t);
        for i in 0..t {
            let w: Vec<f64> = (0..=i).map(|_| rng.random::<f64>().powi(8)).collect();
            let s: f64 = w.iter().sum();
            for j in 0..=i {
                a[(i, j)] = w[j] / s;
            }
        }
        let vis = |i: usize| i + 1;
        let rows: Vec<f64> = (0..t)
            .filter_map(|i| row_entropy(a.as_ref(), i, vis(i)))
            .collect();
        let want = rows.iter().sum::<f64>() / rows.len() as f64;
        let got = mean_row_entropy(a.as_ref(), vis).unwrap();
        assert_eq!(got.to_bits(), want.to_bits());
        let at = a.transpose().to_owned();
        let got_rm = mean_row_entropy(at.as_ref().transpose(), vis).unwrap();
        assert_eq!(got_rm.to_bits(), want.to_bits());
        assert!(got > 0.0 && got < 1.0, "{got}");
    }

    #[test]
    fn dominant_column_hand_computed() {
        // Rows: [1,0,0], [0.4,0.6,0], [0.3,0.1,0.6]; column means 1.7/3, 0.7/3, 0.6/3.
        let v = [[1.0, 0.0, 0.0], [0.4, 0.6, 0.0], [0.3, 0.1, 0.6]];
        let a = Mat::from_fn(3, 3, |i, j| v[i][j]);
        let dc = dominant_column(a.as_ref(), None).unwrap();
        assert_eq!(dc.col, 0);
        assert!((dc.mass - 1.7 / 3.0).abs() < 1e-15);
        assert!((dc.routed_frac - 1.0 / 3.0).abs() < 1e-15);
        assert!((dc.min_a - 0.3).abs() < 1e-15);
        // Column entropy: c = (1.7, 0.7, 0.6)/3.
        let c = [1.7 / 3.0, 0.7 / 3.0, 0.6 / 3.0];
        let h: f64 = c.iter().map(|x: &f64| -x * x.ln()).sum::<f64>() / 3f64.ln();
        assert!((column_entropy(a.as_ref()).unwrap() - h).abs() < 1e-14);
    }

    #[test]
    fn value_ratio_classes() {
        let r = value_norm_ratio(&[0.1, 1.0, 1.0, 1.0], 0).unwrap();
        assert!((r - 0.1).abs() < 1e-15);
        assert_eq!(value_class(r), ValueClass::NopLike);
        assert_eq!(value_class(0.5), ValueClass::Broadcast);
        assert_eq!(value_class(0.3), ValueClass::Intermediate);
        assert_eq!(value_norm_ratio(&[1.0], 0), None);
        assert_eq!(value_norm_ratio(&[1.0, 0.0], 0), None);
    }

    #[test]
    fn massive_and_mixing() {
        let mut h = vec![0.01; 101];
        h[7] = -500.0;
        h[8] = 50.0; // large but below 100
        assert_eq!(massive_activations(&h), vec![(7, -500.0)]);
        // Not massive when the median is large: 500 < 1000 × 1.
        assert!(massive_activations(&[1.0, 1.0, 500.0]).is_empty());
        let v = Mat::from_fn(2, 2, |i, j| [[1.0, 0.0], [3.0, 0.0]][i][j]);
        assert!((over_mixing(v.as_ref()) - 2f64.sqrt()).abs() < 1e-15);
        let same = Mat::from_fn(3, 2, |_, j| j as f64);
        assert_eq!(over_mixing(same.as_ref()), 0.0);
    }

    #[test]
    fn bos_cosines() {
        let h = Mat::from_fn(4, 2, |i, j| {
            [[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [1.0, 1.0]][i][j]
        });
        let s = bos_cosine_summary(h.as_ref(), 0).unwrap();
        assert_eq!(s.n, 3);
        let want = (-1.0 + 0.0 + 0.5f64.sqrt()) / 3.0;
        assert!((s.mean - want).abs() < 1e-15);
        assert!((s.frac_nonpos - 2.0 / 3.0).abs() < 1e-15);
        assert_eq!(s.q50, 0.0);
    }
}
