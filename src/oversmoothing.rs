//! Oversmoothing by one attention step (docs/theory.md §7, claim A2; the
//! formalization is ours).
//!
//! Tokens $x_0,\dots,x_{n-1} \overset{\text{iid}}{\sim} \mathcal N(\mu, \Sigma)$ pass through
//! one block with a *mixing* attention $A_\lambda = (1-\lambda) I + \lambda U$
//! ($U$ uniform over the visible keys; $\lambda = 0$ identity, $\lambda = 1$ dense):
//! $$y_i = N\big(x_i + W (A_\lambda X)\_i\big), \qquad N \in \lbrace\text{id}, \text{RMSNorm}, \text{LayerNorm}\rbrace.$$
//! Smoothing is measured by the mean pairwise token cosine of the outputs.
//!
//! **Prediction** (bidirectional, $n \to \infty$). $(A_\lambda X)\_i = (1-\lambda)x_i + \lambda\bar x$
//! and $\bar x \to \mu$, so $u_i := x_i + W(A_\lambda X)\_i \to B x_i + \lambda W\mu$ with
//! $B = I + (1-\lambda)W$: the $u_i$ become i.i.d. $\mathcal N(m, C)$ with
//! $m = (I+W)\mu$ (independent of $\lambda$) and $C = B\Sigma B^\top$.
//! Cosines are scale invariant, so RMSNorm (any $\epsilon$) leaves every
//! cosine unchanged and LayerNorm acts on cosines exactly like the centring
//! projection $P = I - \mathbf 1\mathbf 1^\top/d$. For independent $z, z'$,
//! $\mathbb E\cos(z, z') = \lVert\mathbb E\thinspace\hat z\rVert^2$ ($\hat z = z/\lVert z\rVert$) — the *exact* limit,
//! which [`model::limit_cosine`] simulates. The closed form
//! $$\rho_0 = \frac{\lVert m\rVert^2}{\lVert m\rVert^2 + \operatorname{tr}(C)} = \frac{\mathbb E[z\cdot z']}{\mathbb E\lVert z\rVert^2}$$
//! is the **ratio of expectations**: it replaces $\lVert z\rVert$ by $\sqrt{\mathbb E\lVert z\rVert^2}$, which is
//! right when the norm concentrates (large effective rank
//! $r = (\operatorname{tr} C)^2/\operatorname{tr}(C^2)$). Its error is $O(\rho_0/r)$ and does **not**
//! vanish as $n \to \infty$ at fixed $d$; [`predict::second_order`] gives the
//! delta-method correction. What does vanish with $n$ is the finite-$n$ Monte
//! Carlo deviation from the exact limit (typically like $n^{-1/2}$).
//!
//! **Sign condition** (ours). In the prediction, $m$ does not depend on $\lambda$ and
//! $\rho_0$ decreases in $\operatorname{tr}(C)$; $\lambda = 1$ gives $\operatorname{tr}(\Sigma)$, $\lambda = 0$ gives
//! $\operatorname{tr}((I+W)\Sigma(I+W)^\top)$. Hence, if $m \ne 0$ (LayerNorm: $Pm \neq 0$),
//! dense predicts a higher cosine than identity iff
//! $\operatorname{tr}((I+W)\Sigma(I+W)^\top) > \operatorname{tr}(\Sigma)$ (LayerNorm: the same with $P$ on
//! both sides). This compares the endpoints only: $\operatorname{tr}(C)$ is a convex
//! quadratic in $1-\lambda$, so an intermediate $\lambda$ can smooth more than both.
//!
//! Submodules: [`mixing`] (mixing, block, sampling, mean cosine, Monte Carlo),
//! [`predict`] (formulas, sign condition, the real-model entry point
//! [`predict::head_prediction`]), [`checks`] (registered theorem checks and their
//! families). The report section and figure are in [`crate::claims::oversmoothing`].

pub mod checks;
pub mod mixing;
pub mod predict;

/// Errors of the oversmoothing model.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OversmoothingError {
    /// Shapes disagree.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// A parameter is out of range (λ ∉ [0, 1], n too small, ...).
    #[error("invalid parameter: {0}")]
    Param(String),
    /// An input holds NaN or infinity.
    #[error("non-finite input: {0}")]
    NonFinite(String),
    /// A covariance is not symmetric positive semi-definite (within tolerance).
    #[error("not a covariance: {0}")]
    NotCovariance(String),
    /// A token has zero norm after the block, so its cosine is undefined.
    #[error("a token has zero norm after the block; cosine undefined")]
    ZeroToken,
}
