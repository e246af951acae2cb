//! The $n\to\infty$ prediction of §7, its delta-method correction, the sign
//! condition, and the entry point for real models.
//!
//! Every norm acts on cosines through a linear *readout* $L$: identity and
//! RMSNorm (any $\epsilon$) give $L = I$; LayerNorm gives the centring projection
//! $L = P = I - \mathbf 1\mathbf 1^\top/d$; a learned gain $g$ multiplies on the
//! left, $L = \operatorname{diag}(g)$ or $\operatorname{diag}(g)P$ (a learned bias is not
//! covered: it breaks scale invariance). With $m' = L(I+W)\mu$ and
//! $C' = LB\Sigma B^\top L^\top$, $B = I + (1-\lambda)W$:
//! $$\rho_0 = \frac{\lVert m'\rVert^2}{M}, \quad M = \lVert m'\rVert^2 + \operatorname{tr} C'.$$

use super::OversmoothingError as E;
use crate::attention::Norm;
use faer::{Mat, MatRef};

/// The prediction at one $\lambda$.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// Ratio of expectations $\rho_0 = \lVert m'\rVert^2/(\lVert m'\rVert^2 + \operatorname{tr}C')$.
    pub rho0: f64,
    /// Delta-method (second-order in $\delta = \lVert z\rVert^2/M - 1$) value $\rho_2$, see [`second_order`].
    pub rho2: f64,
    /// Scale of the first-order error of $\rho_0$: the sum of the absolute values
    /// of the two correction terms in $\rho_2 - \rho_0$.
    pub eta: f64,
    /// $\lVert m'\rVert^2$.
    pub mean_sq: f64,
    /// $\operatorname{tr} C'$.
    pub trace: f64,
    /// Effective rank $(\operatorname{tr}C')^2/\operatorname{tr}(C'^2)$ of the noise.
    pub eff_rank: f64,
}

/// The linear map through which $N$ (with optional gain) acts on cosines.
pub fn readout(norm: Norm, gain: Option<&[f64]>, d: usize) -> Result<Mat<f64>, E> {
    let p = match norm {
        Norm::Identity => {
            if gain.is_some() {
                return Err(E::Param("the identity norm has no gain".into()));
            }
            Mat::identity(d, d)
        }
        Norm::Rms { .. } => Mat::identity(d, d),
        Norm::Layer { .. } => {
            Mat::from_fn(d, d, |i, j| if i == j { 1.0 } else { 0.0 } - 1.0 / d as f64)
        }
    };
    Ok(match gain {
        None => p,
        Some(g) => {
            if g.len() != d {
                return Err(E::Shape(format!(
                    "gain has length {}, expected {d}",
                    g.len()
                )));
            }
            if !g.iter().all(|v| v.is_finite()) {
                return Err(E::NonFinite("gain".into()));
            }
            Mat::from_fn(d, d, |i, j| g[i] * p[(i, j)])
        }
    })
}

fn trace(a: MatRef<'_, f64>) -> f64 {
    (0..a.nrows()).map(|i| a[(i, i)]).sum()
}

fn quad(a: MatRef<'_, f64>, x: &[f64]) -> f64 {
    crate::linalg::bilinear(x, a, x)
}

/// Ratio of expectations and its delta-method correction for $z, z'$ i.i.d.
/// $\mathcal N(m, C)$.
///
/// With $M = \lVert m\rVert^2 + \operatorname{tr}C$ and $\delta = \lVert z\rVert^2/M - 1$
/// ($\mathbb E\delta = 0$, $\mathbb E\delta^2 = (2\operatorname{tr}C^2 + 4m^\top Cm)/M^2$),
/// expanding $\lVert z\rVert^{-1} = M^{-1/2}(1 - \delta/2 + 3\delta^2/8 - \dots)$ and using Gaussian
/// moments ($\mathbb E[z\delta] = 2Cm/M$) gives
/// $\sqrt M\thinspace\mathbb E\hat z \approx m - Cm/M + \tfrac38 m\thinspace\mathbb E\delta^2$, hence
/// $$\mathbb E\cos \approx \rho_2 = \frac1M\Big(\lVert m\rVert^2 - \frac{2m^\top Cm}{M} +
///   \frac34\lVert m\rVert^2\frac{2\operatorname{tr}C^2 + 4m^\top Cm}{M^2}\Big),$$
/// dropping terms of relative order $1/r^2$ ($r$ the effective rank). Sanity
/// limit: $C = \sigma^2 I$, $\sigma \to 0$ gives $1 - (d-1)\sigma^2/\lVert m\rVert^2$, the exact
/// small-noise value (where $\rho_0$ has $d$ instead of $d-1$).
pub fn second_order(m: &[f64], c: MatRef<'_, f64>) -> Result<Prediction, E> {
    let mean_sq = crate::linalg::dot(m, m);
    let tr = trace(c);
    let big_m = mean_sq + tr;
    if big_m <= 0.0 || !big_m.is_finite() {
        return Err(E::Param(
            "‖m‖² + tr C is zero or not finite: every token is the zero vector".into(),
        ));
    }
    let tr_c2 = c.squared_norm_l2(); // tr(C²) = ‖C‖_F² for symmetric C
    let mcm = quad(c, m);
    let rho0 = mean_sq / big_m;
    let t1 = 2.0 * mcm / big_m;
    let t2 = 0.75 * mean_sq * (2.0 * tr_c2 + 4.0 * mcm) / (big_m * big_m);
    Ok(Prediction {
        rho0,
        rho2: (mean_sq - t1 + t2) / big_m,
        eta: (t1.abs() + t2.abs()) / big_m,
        mean_sq,
        trace: tr,
        eff_rank: if tr_c2 > 0.0 {
            tr * tr / tr_c2
        } else {
            f64::INFINITY
        },
    })
}

/// Mean and covariance $(m', C')$ of $Lu$, $u = Bx + \lambda W\mu$ the $n\to\infty$
/// limit of $x_i + W(A_\lambda X)\_i$ (bidirectional).
pub fn limit_moments(
    w: MatRef<'_, f64>,
    mu: &[f64],
    sigma: MatRef<'_, f64>,
    lambda: f64,
    l: MatRef<'_, f64>,
) -> (Vec<f64>, Mat<f64>) {
    let d = mu.len();
    let id = Mat::<f64>::identity(d, d);
    let b = &id + w * (1.0 - lambda);
    let lb = l * &b;
    let c = &lb * sigma * lb.transpose();
    let m = crate::linalg::matvec((l * (&id + w)).as_ref(), mu);
    (m, c)
}

/// The prediction at mixing $\lambda$ for readout `l` (see [`readout`]).
pub fn predict(
    w: MatRef<'_, f64>,
    mu: &[f64],
    sigma: MatRef<'_, f64>,
    lambda: f64,
    l: MatRef<'_, f64>,
) -> Result<Prediction, E> {
    if !(0.0..=1.0).contains(&lambda) {
        return Err(E::Param(format!("λ = {lambda} is outside [0, 1]")));
    }
    let (m, c) = limit_moments(w, mu, sigma, lambda, l);
    second_order(&m, c.as_ref())
}

/// The sign condition: does dense ($\lambda=1$) predict more smoothing than identity ($\lambda=0$)?
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SignVerdict {
    /// $\operatorname{tr}(L(I+W)\Sigma(I+W)^\top L^\top)$: the noise of the identity block.
    pub tr_identity: f64,
    /// $\operatorname{tr}(L\Sigma L^\top)$: the noise of the dense block.
    pub tr_dense: f64,
    /// $\lVert L(I+W)\mu\rVert^2$, the same at both ends.
    pub mean_sq: f64,
    /// `Some(true)` iff $\lVert m'\rVert^2 > 0$ and `tr_identity > tr_dense`; `Some(false)` iff
    /// $\lVert m'\rVert^2 > 0$ and `tr_identity < tr_dense`; `None` when the prediction is the
    /// same at both ends (then the condition says nothing).
    pub dense_smooths_more: Option<bool>,
    /// Predicted gap $\rho_0(\lambda{=}1) - \rho_0(\lambda{=}0)$.
    pub gap: f64,
}

/// Evaluates the sign condition for readout `l`.
pub fn sign_condition(
    w: MatRef<'_, f64>,
    mu: &[f64],
    sigma: MatRef<'_, f64>,
    l: MatRef<'_, f64>,
) -> Result<SignVerdict, E> {
    let p0 = predict(w, mu, sigma, 0.0, l)?;
    let p1 = predict(w, mu, sigma, 1.0, l)?;
    let dense_smooths_more = if p0.mean_sq > 0.0 && p0.trace != p1.trace {
        Some(p0.trace > p1.trace)
    } else {
        None
    };
    Ok(SignVerdict {
        tr_identity: p0.trace,
        tr_dense: p1.trace,
        mean_sq: p0.mean_sq,
        dense_smooths_more,
        gap: p1.rho0 - p0.rho0,
    })
}

/// What [`head_prediction`] returns for one head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadPrediction {
    /// Prediction with the head's attention replaced by the identity ($\lambda = 0$).
    pub identity: Prediction,
    /// Prediction with the head's attention replaced by uniform attention ($\lambda = 1$).
    pub uniform: Prediction,
    /// The sign condition.
    pub sign: SignVerdict,
}

/// Entry point for real models: given a head's $W_{VO}$ ($d\times d$), the mean
/// $\mu$ and covariance $\Sigma$ of its input hidden states, the norm after the
/// residual (and its learned gain, if any), returns the predicted mean token
/// cosine for identity and uniform attention and the sign-condition verdict.
///
/// $\Sigma$ must be symmetric (to $10^{-8}$ relative) and positive semi-definite
/// (smallest eigenvalue $\ge -10^{-8}\max|\Sigma_{ij}|$): an estimate from fewer
/// samples than $d$ is singular, which is fine.
pub fn head_prediction(
    w_vo: MatRef<'_, f64>,
    mu: &[f64],
    sigma: MatRef<'_, f64>,
    norm: Norm,
    gain: Option<&[f64]>,
) -> Result<HeadPrediction, E> {
    let d = mu.len();
    if d == 0 {
        return Err(E::Shape("d = 0".into()));
    }
    for (name, m) in [("W_VO", w_vo), ("Σ", sigma)] {
        if m.nrows() != d || m.ncols() != d {
            return Err(E::Shape(format!(
                "{name} is {}x{}, expected {d}x{d}",
                m.nrows(),
                m.ncols()
            )));
        }
        if !(0..d).all(|i| (0..d).all(|j| m[(i, j)].is_finite())) {
            return Err(E::NonFinite(name.into()));
        }
    }
    if !mu.iter().all(|v| v.is_finite()) {
        return Err(E::NonFinite("μ".into()));
    }
    let scale = sigma.norm_max().max(f64::MIN_POSITIVE);
    let asym = (sigma - sigma.transpose()).norm_max();
    if asym > 1e-8 * scale {
        return Err(E::NotCovariance(format!("asymmetric by {asym:.3e}")));
    }
    let sym = (sigma + sigma.transpose()) * 0.5;
    let ev = sym
        .self_adjoint_eigenvalues(faer::Side::Lower)
        .map_err(|e| E::NotCovariance(format!("eigenvalues failed: {e:?}")))?;
    let min_ev = ev.iter().copied().fold(f64::INFINITY, f64::min);
    if min_ev < -1e-8 * scale {
        return Err(E::NotCovariance(format!(
            "smallest eigenvalue {min_ev:.3e} < 0"
        )));
    }
    let l = readout(norm, gain, d)?;
    Ok(HeadPrediction {
        identity: predict(w_vo, mu, sym.as_ref(), 0.0, l.as_ref())?,
        uniform: predict(w_vo, mu, sym.as_ref(), 1.0, l.as_ref())?,
        sign: sign_condition(w_vo, mu, sym.as_ref(), l.as_ref())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isotropic_closed_form() {
        // W = 0, Σ = σ²I: ρ0 = ‖μ‖²/(‖μ‖² + dσ²) for every λ.
        let d = 4;
        let mu = vec![1.0, 2.0, 0.0, -1.0];
        let s = Mat::<f64>::identity(d, d) * 0.25;
        let l = readout(Norm::Identity, None, d).unwrap();
        let w = Mat::<f64>::zeros(d, d);
        let p = predict(w.as_ref(), &mu, s.as_ref(), 0.3, l.as_ref()).unwrap();
        assert!((p.rho0 - 6.0 / 7.0).abs() < 1e-15);
        assert!((p.eff_rank - 4.0).abs() < 1e-12);
    }

    #[test]
    fn layer_norm_kills_the_all_ones_direction() {
        // μ ∝ 1 and W = 0: LayerNorm removes the mean entirely, prediction 0.
        let d = 3;
        let mu = vec![2.0; d];
        let s = Mat::<f64>::identity(d, d);
        let w = Mat::<f64>::zeros(d, d);
        let l = readout(Norm::Layer { eps: 1e-5 }, None, d).unwrap();
        let p = predict(w.as_ref(), &mu, s.as_ref(), 1.0, l.as_ref()).unwrap();
        assert!(p.rho0.abs() < 1e-15);
        let v = sign_condition(w.as_ref(), &mu, s.as_ref(), l.as_ref()).unwrap();
        assert_eq!(v.dense_smooths_more, None);
    }

    #[test]
    fn head_prediction_rejects_bad_covariances() {
        let d = 2;
        let w = Mat::<f64>::zeros(d, d);
        let mu = [1.0, 0.0];
        let asym = Mat::from_fn(2, 2, |i, j| if i < j { 1.0 } else { 0.0 });
        assert!(matches!(
            head_prediction(w.as_ref(), &mu, asym.as_ref(), Norm::Identity, None),
            Err(E::NotCovariance(_))
        ));
        let indef = Mat::from_fn(2, 2, |i, j| if i == j { [1.0, -1.0][i] } else { 0.0 });
        assert!(matches!(
            head_prediction(w.as_ref(), &mu, indef.as_ref(), Norm::Identity, None),
            Err(E::NotCovariance(_))
        ));
        let ok = Mat::<f64>::identity(2, 2);
        assert!(matches!(
            head_prediction(w.as_ref(), &mu[..1], ok.as_ref(), Norm::Identity, None),
            Err(E::Shape(_))
        ));
        assert!(matches!(
            head_prediction(
                w.as_ref(),
                &mu,
                ok.as_ref(),
                Norm::Identity,
                Some(&[1.0, 1.0])
            ),
            Err(E::Param(_))
        ));
    }

    #[test]
    fn rms_and_identity_predict_the_same() {
        let d = 3;
        let w = Mat::from_fn(d, d, |i, j| 0.3 * (i as f64) - 0.2 * (j as f64));
        let mu = [0.5, -1.0, 0.3];
        let s = Mat::from_fn(d, d, |i, j| if i == j { 1.0 } else { 0.2 });
        let a = head_prediction(w.as_ref(), &mu, s.as_ref(), Norm::Identity, None).unwrap();
        let b =
            head_prediction(w.as_ref(), &mu, s.as_ref(), Norm::Rms { eps: 1e-6 }, None).unwrap();
        assert_eq!(a, b);
    }
}
