//! A2 on real models (THEORY §7): per head, the §7 condition with the head's real W_VO and the
//! real hidden-state statistics, against the measured change of mean token cosine when the
//! head's attention is replaced by the identity or by uniform attention (intervention).
//!
//! Mapping to the §7 model (an approximation, stated): the head reads the normed residual
//! `a_i = N₁(x_i)`; take `x := a` with mean μ and covariance Σ over the positions i ≥ 1 (the
//! sink row excluded), and `W := W_VO^h = W_O^{[:,h]} W_V^{g(h)}`. Dense attention smooths more
//! than the identity iff `tr((I+W)Σ(I+W)ᵀ) > tr(Σ)`, i.e. iff `2 tr(WΣ) + tr(WΣWᵀ) > 0`.
//! Measured: `Δ = cos_U − cos_I`, the mean pairwise cosine of the residual stream after the
//! layer with the head uniform minus with it identity (positions i ≥ 1; everything else real).
//!
//! The report's A2 is [`super::a2_skill`] (the condition at the attention output, scored
//! against the constant predictor); this module is the earlier `x := a` form, kept because
//! `sinklab real --a2 --json` writes both (`a2` beside `a2_skill`).

use super::stats::mean_pairwise_cos;
use crate::runtime::RealError;
use crate::runtime::capture::{Capture, Captured};
use crate::runtime::forward::{Intervention, KvCache, Replace};
use crate::runtime::model::Pretrained;
use faer::Mat;

/// A2 result of one head.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HeadA2 {
    /// Layer.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// `tr(Σ)` of the head input.
    pub tr_sigma: f64,
    /// `tr((I+W)Σ(I+W)ᵀ)`.
    pub tr_b_sigma_b: f64,
    /// §7 prediction: dense smooths more than identity.
    pub predicted_dense_smooths_more: bool,
    /// Mean token cosine after the layer with the head replaced by the identity.
    pub cos_identity: f64,
    /// … replaced by uniform attention.
    pub cos_uniform: f64,
    /// … unchanged (real attention).
    pub cos_real: f64,
}

impl HeadA2 {
    /// Measured: uniform raised the cosine over identity.
    pub fn measured_dense_smooths_more(&self) -> bool {
        self.cos_uniform > self.cos_identity
    }
}

/// Summary over heads.
#[derive(Debug, Clone, serde::Serialize)]
pub struct A2Summary {
    /// Heads analysed.
    pub heads: usize,
    /// Fraction where the §7 condition predicts that dense attention smooths more.
    pub predicted_frac: f64,
    /// Fraction where the intervention measured it.
    pub measured_frac: f64,
    /// Fraction where prediction and measurement agree.
    pub agreement: f64,
    /// Mean of cos_U − cos_I.
    pub mean_delta: f64,
}

fn excluding_first(x: &[f32], t: usize, d: usize) -> Vec<Vec<f64>> {
    (1..t)
        .map(|i| x[i * d..(i + 1) * d].iter().map(|&v| v as f64).collect())
        .collect()
}

/// $\operatorname{tr}((I+W)\Sigma(I+W)^\top)$ for a low-rank head $W = F_o F_v^\top$
/// ($F_o, F_v \in \mathbb R^{d\times d_h}$) in $O(d^2 d_h)$ instead of $O(d^3)$:
/// $\operatorname{tr}\Sigma + 2\operatorname{tr}(W\Sigma) + \operatorname{tr}((F_o^\top F_o)(F_v^\top\Sigma F_v))$.
/// The identity-attention noise of `oversmoothing::predict::sign_condition` with $L = I$
/// (checked equal in the tests below).
pub fn noise_trace_identity(fo: &Mat<f64>, fv: &Mat<f64>, sigma: &Mat<f64>) -> f64 {
    let (d, dh) = (fo.nrows(), fo.ncols());
    let tr_sigma: f64 = (0..d).map(|p| sigma[(p, p)]).sum();
    let sfv = sigma * fv; // Σ Fv
    // tr(WΣ) = tr(Fo Fvᵀ Σ) = Σ_{i,r} Fo_ir (Σ Fv)_ir.
    let tr_ws: f64 = (0..d)
        .flat_map(|i| (0..dh).map(move |r| (i, r)))
        .map(|(i, r)| fo[(i, r)] * sfv[(i, r)])
        .sum();
    let gram_o = fo.transpose() * fo;
    let core = fv.transpose() * &sfv;
    let tr_wsw: f64 = (0..dh)
        .flat_map(|i| (0..dh).map(move |r| (i, r)))
        .map(|(i, r)| gram_o[(i, r)] * core[(r, i)])
        .sum();
    tr_sigma + 2.0 * tr_ws + tr_wsw
}

/// Runs the per-head A2 analysis on `tokens` (decoders and encoders alike).
pub fn analyze(m: &Pretrained, tokens: &[u32]) -> Result<(Vec<HeadA2>, A2Summary), RealError> {
    let c = &m.cfg;
    let (d, dh, h, hk) = (c.d_model, c.head_dim, c.n_head, c.n_kv_head);
    let t = tokens.len();
    if t < 3 {
        return Err(RealError::Input("A2 needs at least 3 tokens".into()));
    }
    let mut cap = Captured::new(Capture {
        hidden_in: true,
        hidden: true,
        ..Capture::default()
    });
    m.forward(tokens, &mut cap, None)?;
    let mut out = Vec::new();
    for (l, ly) in m.layers.iter().enumerate() {
        let x_in = cap.layers[l].hidden_in.clone().unwrap_or_default();
        let real = mean_pairwise_cos(&excluding_first(cap.hidden(l).unwrap_or_default(), t, d));
        // Head input a = N₁(x); its mean and covariance over i ≥ 1.
        let mut a = x_in.clone();
        if let Some(n) = &ly.attn_norm {
            n.apply(&mut a);
        }
        let rows = excluding_first(&a, t, d);
        let n = rows.len() as f64;
        let mu: Vec<f64> = (0..d)
            .map(|j| rows.iter().map(|r| r[j]).sum::<f64>() / n)
            .collect();
        let sigma = Mat::<f64>::from_fn(d, d, |p, q| {
            rows.iter()
                .map(|r| (r[p] - mu[p]) * (r[q] - mu[q]))
                .sum::<f64>()
                / n
        });
        let tr_sigma: f64 = (0..d).map(|p| sigma[(p, p)]).sum();
        let (wo, wv) = (ly.wo.w.to_f32(), ly.wv.w.to_f32());
        for hh in 0..h {
            let g = hh / (h / hk);
            // W = Fo Fvᵀ with Fo = W_O[:, h] (d × dh), Fv = W_Vᵀ rows of group g (d × dh).
            let fo = Mat::<f64>::from_fn(d, dh, |i, r| wo[i * ly.wo.inp + hh * dh + r] as f64);
            let fv = Mat::<f64>::from_fn(d, dh, |i, r| wv[(g * dh + r) * d + i] as f64);
            let tr_b = noise_trace_identity(&fo, &fv, &sigma);
            let mut cosv = [0.0; 2];
            for (k, with) in [Replace::Identity, Replace::Uniform]
                .into_iter()
                .enumerate()
            {
                let mut cache = KvCache::default();
                let y = m.layer_forward(
                    l,
                    &x_in,
                    0,
                    &mut cache,
                    &mut (),
                    Some(Intervention {
                        layer: l,
                        head: hh,
                        with,
                    }),
                    false,
                )?;
                cosv[k] = mean_pairwise_cos(&excluding_first(&y, t, d));
            }
            out.push(HeadA2 {
                layer: l,
                head: hh,
                tr_sigma,
                tr_b_sigma_b: tr_b,
                predicted_dense_smooths_more: tr_b > tr_sigma,
                cos_identity: cosv[0],
                cos_uniform: cosv[1],
                cos_real: real,
            });
        }
    }
    let nh = out.len() as f64;
    let s = A2Summary {
        heads: out.len(),
        predicted_frac: out
            .iter()
            .filter(|x| x.predicted_dense_smooths_more)
            .count() as f64
            / nh,
        measured_frac: out
            .iter()
            .filter(|x| x.measured_dense_smooths_more())
            .count() as f64
            / nh,
        agreement: out
            .iter()
            .filter(|x| x.measured_dense_smooths_more() == x.predicted_dense_smooths_more)
            .count() as f64
            / nh,
        mean_delta: out
            .iter()
            .map(|x| x.cos_uniform - x.cos_identity)
            .sum::<f64>()
            / nh,
    };
    Ok((out, s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oversmoothing::predict::sign_condition;

    #[test]
    fn low_rank_trace_is_the_shared_sign_condition() {
        // Deterministic pseudo-random factors and a PSD Σ = G Gᵀ / d.
        let (d, dh) = (7, 3);
        let f = |a: usize, b: usize, s: f64| ((a * 31 + b * 17) as f64 * s).sin();
        let fo = Mat::<f64>::from_fn(d, dh, |i, r| f(i, r, 0.37));
        let fv = Mat::<f64>::from_fn(d, dh, |i, r| f(i, r, 0.91));
        let g = Mat::<f64>::from_fn(d, d, |i, j| f(i, j, 1.3));
        let sigma = (&g * g.transpose()) * (1.0 / d as f64);
        let w = &fo * fv.transpose();
        let mu = vec![0.5; d];
        let id = Mat::<f64>::identity(d, d);
        let v = sign_condition(w.as_ref(), &mu, sigma.as_ref(), id.as_ref()).unwrap();
        let ours = noise_trace_identity(&fo, &fv, &sigma);
        // Same quantity by two summation orders: agreement to f64 rounding of O(d²) terms.
        assert!(
            (ours - v.tr_identity).abs() <= 1e-12 * v.tr_identity.abs().max(1.0),
            "{ours} vs {}",
            v.tr_identity
        );
        let tr_sigma: f64 = (0..d).map(|p| sigma[(p, p)]).sum();
        assert!((tr_sigma - v.tr_dense).abs() <= 1e-12 * tr_sigma.max(1.0));
    }
}
