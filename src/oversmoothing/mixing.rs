//! The mixing block of docs/theory.md §7 and its Monte Carlo.
//!
//! $A_\lambda = (1-\lambda)I + \lambda U$ with $U_{ij} = 1/|\mathcal V_i|$ on the visible
//! keys $\mathcal V_i$ (all $n$ keys bidirectional, $j \le i$ causal);
//! $y_i = N(x_i + W(A_\lambda X)\_i)$; the smoothing statistic is the mean pairwise
//! cosine $\frac{2}{n(n-1)}\sum_{i<j}\cos(y_i, y_j)$. Tokens are rows.

use super::OversmoothingError as E;
use crate::attention::{Mask, Norm};
use crate::linalg;
use faer::{Mat, MatRef};
use rand::{Rng, RngExt};
use rand_distr::StandardNormal;

/// The Gaussian token law and the block weights: $x_i \sim \mathcal N(\mu, FF^\top)$, $W$, $N$.
#[derive(Clone, Debug)]
pub struct Setup {
    /// $W$ ($= W_{VO}$, $d \times d$).
    pub w: Mat<f64>,
    /// Token mean $\mu \in \mathbb R^d$.
    pub mu: Vec<f64>,
    /// Covariance factor $F$ ($d\times k$), $\Sigma = FF^\top$.
    pub factor: Mat<f64>,
    /// The norm $N$.
    pub norm: Norm,
}

impl Setup {
    /// Model dimension $d$.
    pub fn dim(&self) -> usize {
        self.mu.len()
    }

    /// Checks shapes and finiteness.
    pub fn validate(&self) -> Result<(), E> {
        let d = self.mu.len();
        if d == 0 {
            return Err(E::Shape("d = 0".into()));
        }
        if self.w.nrows() != d || self.w.ncols() != d {
            return Err(E::Shape(format!(
                "W is {}x{}, expected {d}x{d}",
                self.w.nrows(),
                self.w.ncols()
            )));
        }
        if self.factor.nrows() != d {
            return Err(E::Shape(format!(
                "covariance factor has {} rows, expected {d}",
                self.factor.nrows()
            )));
        }
        let finite =
            |m: &Mat<f64>| (0..m.nrows()).all(|i| (0..m.ncols()).all(|j| m[(i, j)].is_finite()));
        if !self.mu.iter().all(|v| v.is_finite()) || !finite(&self.w) || !finite(&self.factor) {
            return Err(E::NonFinite("mu, W or covariance factor".into()));
        }
        Ok(())
    }

    /// $\Sigma = FF^\top$.
    pub fn sigma(&self) -> Mat<f64> {
        &self.factor * self.factor.transpose()
    }

    /// Draws $n$ tokens $x_i = \mu + F\xi_i$, $\xi_i \sim \mathcal N(0, I_k)$ (rows of the result).
    pub fn sample<R: Rng + ?Sized>(&self, n: usize, rng: &mut R) -> Mat<f64> {
        gaussian_rows(&self.mu, self.factor.as_ref(), n, rng)
    }
}

/// $n$ rows $a + G\xi_i$ with $\xi_i \sim \mathcal N(0, I_k)$, $G \in \mathbb R^{d\times k}$.
pub fn gaussian_rows<R: Rng + ?Sized>(
    a: &[f64],
    g: MatRef<'_, f64>,
    n: usize,
    rng: &mut R,
) -> Mat<f64> {
    let k = g.ncols();
    let xi = Mat::from_fn(n, k, |_, _| rng.sample::<f64, _>(StandardNormal));
    let mut x = &xi * g.transpose();
    for i in 0..n {
        for (j, aj) in a.iter().enumerate() {
            x[(i, j)] += aj;
        }
    }
    x
}

fn check_lambda(lambda: f64) -> Result<(), E> {
    if (0.0..=1.0).contains(&lambda) {
        Ok(())
    } else {
        Err(E::Param(format!("λ = {lambda} is outside [0, 1]")))
    }
}

/// The explicit $n\times n$ mixing matrix $A_\lambda$ (for tests and small $n$).
pub fn mixing_matrix(n: usize, lambda: f64, mask: Mask) -> Mat<f64> {
    Mat::from_fn(n, n, |i, j| {
        let u = if mask.visible(i, j) {
            1.0 / mask.n_visible(i, n) as f64
        } else {
            0.0
        };
        let id = if i == j { 1.0 } else { 0.0 };
        (1.0 - lambda) * id + lambda * u
    })
}

/// $A_\lambda X$ in $O(nd)$: $(1-\lambda)x_i + \lambda\thinspace\bar x$ (bidirectional) or
/// $(1-\lambda)x_i + \lambda\thinspace\overline{x_{\le i}}$ (causal, prefix means).
pub fn mix(x: MatRef<'_, f64>, lambda: f64, mask: Mask) -> Mat<f64> {
    let (n, d) = (x.nrows(), x.ncols());
    let mut out = Mat::zeros(n, d);
    let mut acc = vec![0.0; d];
    if mask == Mask::Bidirectional {
        for i in 0..n {
            for (j, a) in acc.iter_mut().enumerate() {
                *a += x[(i, j)];
            }
        }
    }
    for i in 0..n {
        if mask == Mask::Causal {
            for (j, a) in acc.iter_mut().enumerate() {
                *a += x[(i, j)];
            }
        }
        let cnt = mask.n_visible(i, n) as f64;
        for (j, a) in acc.iter().enumerate() {
            out[(i, j)] = (1.0 - lambda) * x[(i, j)] + lambda * a / cnt;
        }
    }
    out
}

/// The block $Y = N(X + A_\lambda X W^\top)$ (rows $y_i = N(x_i + W(A_\lambda X)\_i)$).
pub fn block_output(
    x: MatRef<'_, f64>,
    w: MatRef<'_, f64>,
    lambda: f64,
    mask: Mask,
    norm: Norm,
) -> Result<Mat<f64>, E> {
    check_lambda(lambda)?;
    if w.nrows() != x.ncols() || w.ncols() != x.ncols() {
        return Err(E::Shape(format!(
            "W is {}x{} but tokens have d = {}",
            w.nrows(),
            w.ncols(),
            x.ncols()
        )));
    }
    let u = x + mix(x, lambda, mask) * w.transpose();
    Ok(norm.apply_rows(u.as_ref()))
}

/// Unit rows $\hat y_i = y_i/\lVert y_i\rVert$; error if a row is zero.
fn unit_rows(y: MatRef<'_, f64>) -> Result<Vec<Vec<f64>>, E> {
    (0..y.nrows()).map(|i| unit(linalg::row(y, i))).collect()
}

/// $y/\lVert y\rVert$; error if $y$ is zero (or not finite).
fn unit(r: Vec<f64>) -> Result<Vec<f64>, E> {
    let nr = linalg::norm(&r);
    if nr > 0.0 && nr.is_finite() {
        Ok(r.into_iter().map(|v| v / nr).collect())
    } else {
        Err(E::ZeroToken)
    }
}

/// Mean pairwise cosine $\frac{2}{n(n-1)}\sum_{i<j}\hat y_i\cdot\hat y_j
/// = \frac{\lVert\sum_i \hat y_i\rVert^2 - n}{n(n-1)}$, in $O(nd)$.
pub fn mean_pairwise_cosine(y: MatRef<'_, f64>) -> Result<f64, E> {
    mean_pairwise_cosine_rows((0..y.nrows()).map(|i| linalg::row(y, i)))
}

/// [`mean_pairwise_cosine`] of the given rows (the one definition; `real::stats` uses it too).
pub fn mean_pairwise_cosine_rows(rows: impl IntoIterator<Item = Vec<f64>>) -> Result<f64, E> {
    let mut s: Vec<f64> = Vec::new();
    let mut n = 0usize;
    for r in rows {
        let u = unit(r)?;
        if s.is_empty() {
            s = vec![0.0; u.len()];
        }
        for (a, b) in s.iter_mut().zip(&u) {
            *a += b;
        }
        n += 1;
    }
    if n < 2 {
        return Err(E::Param(format!("need at least 2 tokens, got {n}")));
    }
    let nf = n as f64;
    Ok((linalg::dot(&s, &s) - nf) / (nf * (nf - 1.0)))
}

/// One finite-$n$ simulation: draw $n$ tokens, run the block, return the mean
/// pairwise cosine of the outputs.
pub fn simulate<R: Rng + ?Sized>(
    setup: &Setup,
    n: usize,
    lambda: f64,
    mask: Mask,
    rng: &mut R,
) -> Result<f64, E> {
    setup.validate()?;
    let x = setup.sample(n, rng);
    let y = block_output(x.as_ref(), setup.w.as_ref(), lambda, mask, setup.norm)?;
    mean_pairwise_cosine(y.as_ref())
}

/// Mean pairwise cosine of the dense ($\lambda = 1$) and identity ($\lambda = 0$)
/// blocks on the *same* tokens (common random numbers: their difference has a
/// much smaller variance than two independent draws). Returns (identity, dense).
pub fn simulate_endpoints<R: Rng + ?Sized>(
    setup: &Setup,
    n: usize,
    mask: Mask,
    rng: &mut R,
) -> Result<(f64, f64), E> {
    setup.validate()?;
    let x = setup.sample(n, rng);
    let y0 = block_output(x.as_ref(), setup.w.as_ref(), 0.0, mask, setup.norm)?;
    let y1 = block_output(x.as_ref(), setup.w.as_ref(), 1.0, mask, setup.norm)?;
    Ok((
        mean_pairwise_cosine(y0.as_ref())?,
        mean_pairwise_cosine(y1.as_ref())?,
    ))
}

/// A Monte Carlo estimate with its standard error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MonteCarlo {
    /// Point estimate.
    pub value: f64,
    /// Standard error.
    pub se: f64,
}

/// The exact $n\to\infty$ limit $\mathbb E\cos(y, y') = \lVert\mathbb E\thinspace\hat y\rVert^2$ for the
/// bidirectional block, simulated: draw `samples` i.i.d. $u = m + BF\xi$ (the
/// limit of $x_i + W(A_\lambda X)\_i$), apply $N$, and take the unbiased U-statistic
/// $\frac{\lVert\sum\hat y\rVert^2 - N}{N(N-1)}$. Standard error from Hoeffding's
/// decomposition: $\mathrm{Var} \approx 4\thinspace\mathrm{Var}(\hat y\cdot\mathbb E\hat y)/N + 2/N^2$
/// (the second term bounds the degenerate part, $|\cos| \le 1$).
pub fn limit_cosine<R: Rng + ?Sized>(
    setup: &Setup,
    lambda: f64,
    samples: usize,
    rng: &mut R,
) -> Result<MonteCarlo, E> {
    setup.validate()?;
    check_lambda(lambda)?;
    if samples < 2 {
        return Err(E::Param("need at least 2 samples".into()));
    }
    let d = setup.dim();
    let b = Mat::<f64>::identity(d, d) + setup.w.as_ref() * (1.0 - lambda);
    let g = &b * &setup.factor;
    let m = linalg::matvec(setup.w.as_ref(), &setup.mu)
        .into_iter()
        .zip(&setup.mu)
        .map(|(wm, mu)| wm + mu)
        .collect::<Vec<_>>();
    // Draw in chunks to bound memory.
    let chunk = 50_000;
    let mut s = vec![0.0; d];
    let mut units_all: Vec<Vec<f64>> = Vec::with_capacity(samples);
    let mut left = samples;
    while left > 0 {
        let c = left.min(chunk);
        let u = gaussian_rows(&m, g.as_ref(), c, rng);
        let y = setup.norm.apply_rows(u.as_ref());
        for v in unit_rows(y.as_ref())? {
            for (a, b) in s.iter_mut().zip(&v) {
                *a += b;
            }
            units_all.push(v);
        }
        left -= c;
    }
    let nf = samples as f64;
    let value = (linalg::dot(&s, &s) - nf) / (nf * (nf - 1.0));
    let mean_dir: Vec<f64> = s.iter().map(|v| v / nf).collect();
    let h1: Vec<f64> = units_all
        .iter()
        .map(|u| linalg::dot(u, &mean_dir))
        .collect();
    let h1m = h1.iter().sum::<f64>() / nf;
    let var_h1 = h1.iter().map(|v| (v - h1m) * (v - h1m)).sum::<f64>() / (nf - 1.0);
    let se = (4.0 * var_h1 / nf + 2.0 / (nf * nf)).sqrt();
    Ok(MonteCarlo { value, se })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn rand_mat(rng: &mut StdRng, r: usize, c: usize) -> Mat<f64> {
        Mat::from_fn(r, c, |_, _| rng.sample::<f64, _>(StandardNormal))
    }

    #[test]
    fn mix_equals_the_explicit_mixing_matrix() {
        let mut rng = StdRng::seed_from_u64(1);
        let x = rand_mat(&mut rng, 7, 3);
        for mask in [Mask::Causal, Mask::Bidirectional] {
            for lambda in [0.0, 0.3, 1.0] {
                let a = mixing_matrix(7, lambda, mask);
                let want = &a * &x;
                let got = mix(x.as_ref(), lambda, mask);
                // O(n) additions of O(1) numbers: 1e-12 is far above rounding.
                assert!((&want - &got).norm_max() < 1e-12, "{mask:?} {lambda}");
                for i in 0..7 {
                    let s: f64 = (0..7).map(|j| a[(i, j)]).sum();
                    assert!((s - 1.0).abs() < 1e-14);
                }
            }
        }
    }

    #[test]
    fn mean_pairwise_cosine_matches_brute_force() {
        let mut rng = StdRng::seed_from_u64(2);
        let y = rand_mat(&mut rng, 9, 4);
        let mut s = 0.0;
        for i in 0..9 {
            for j in (i + 1)..9 {
                s += linalg::cosine(&linalg::row(y.as_ref(), i), &linalg::row(y.as_ref(), j))
                    .unwrap();
            }
        }
        let brute = s / 36.0;
        assert!((brute - mean_pairwise_cosine(y.as_ref()).unwrap()).abs() < 1e-13);
        let z = Mat::<f64>::zeros(3, 2);
        assert_eq!(mean_pairwise_cosine(z.as_ref()), Err(E::ZeroToken));
    }

    #[test]
    fn dense_block_equals_the_attention_block_with_zero_logits() {
        // W_QK = 0 makes softmax attention exactly uniform over the visible keys,
        // so `attention::Block` must reproduce the λ = 1 mixing block.
        use crate::attention::{Block, Head, Placement, Weight};
        let mut rng = StdRng::seed_from_u64(3);
        let (n, d) = (6, 5);
        let x = rand_mat(&mut rng, n, d);
        let w = rand_mat(&mut rng, d, d);
        for mask in [Mask::Causal, Mask::Bidirectional] {
            for norm in [
                Norm::Identity,
                Norm::Rms { eps: 1e-6 },
                Norm::Layer { eps: 1e-6 },
            ] {
                let block = Block {
                    head: Head {
                        qk: Weight::Full(Mat::zeros(d, d)),
                        vo: Weight::Full(w.clone()),
                        mask,
                    },
                    norm,
                    placement: Placement::Post,
                    residual: true,
                };
                let want = block.forward(x.as_ref()).output;
                let got = block_output(x.as_ref(), w.as_ref(), 1.0, mask, norm).unwrap();
                assert!((&want - &got).norm_max() < 1e-12);
            }
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Mat::<f64>::zeros(3, 2);
        let w = Mat::<f64>::zeros(3, 3);
        assert!(matches!(
            block_output(x.as_ref(), w.as_ref(), 0.5, Mask::Causal, Norm::Identity),
            Err(E::Shape(_))
        ));
        let w = Mat::<f64>::zeros(2, 2);
        assert!(matches!(
            block_output(x.as_ref(), w.as_ref(), 1.5, Mask::Causal, Norm::Identity),
            Err(E::Param(_))
        ));
        let s = Setup {
            w: Mat::zeros(2, 2),
            mu: vec![f64::NAN, 0.0],
            factor: Mat::identity(2, 2),
            norm: Norm::Identity,
        };
        assert!(matches!(s.validate(), Err(E::NonFinite(_))));
    }

    #[test]
    fn same_seed_same_simulation() {
        let s = Setup {
            w: Mat::from_fn(3, 3, |i, j| 0.1 * (i as f64 - j as f64)),
            mu: vec![1.0, 0.5, -0.2],
            factor: Mat::identity(3, 3),
            norm: Norm::Layer { eps: 1e-6 },
        };
        let a = simulate(&s, 50, 0.5, Mask::Causal, &mut StdRng::seed_from_u64(9)).unwrap();
        let b = simulate(&s, 50, 0.5, Mask::Causal, &mut StdRng::seed_from_u64(9)).unwrap();
        assert_eq!(a.to_bits(), b.to_bits());
    }
}
