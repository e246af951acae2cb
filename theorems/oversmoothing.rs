//! # Oversmoothing by one mixing step (claim A2; formalization ours, docs/theory.md §7)
//!
//! **Model.** $x_0,\dots,x_{n-1} \overset{\text{iid}}\sim \mathcal N(\mu,\Sigma)$ in $\mathbb R^d$,
//! $A_\lambda = (1-\lambda)I + \lambda U$ ($U$ uniform over visible keys, bidirectional
//! or causal), $y_i = N(x_i + W(A_\lambda X)_i)$ with $N$ ∈ {identity, RMSNorm,
//! LayerNorm} (no gain/bias, any $\epsilon > 0$). Statistic: mean pairwise cosine
//! $\bar c_n = \frac{2}{n(n-1)}\sum_{i<j}\cos(y_i,y_j)$.
//!
//! **Limit (exact).** Bidirectional, $n\to\infty$: $\bar x\to\mu$ a.s., so
//! $x_i + W(A_\lambda X)_i \to u_i = Bx_i + \lambda W\mu$, $B = I + (1-\lambda)W$, i.i.d.
//! $\mathcal N(m, B\Sigma B^\top)$, $m = (I+W)\mu$ for every $\lambda$. RMSNorm does not change
//! cosines; LayerNorm changes them exactly as $u\mapsto Pu$, $P = I - \mathbf 1\mathbf 1^\top/d$.
//! So with $z = Lu$ ($L = I$ or $P$), $\bar c_n \to c_\infty = \mathbb E\cos(z,z') = \|\mathbb E\hat z\|^2$.
//!
//! **Prediction (approximate).** $\rho_0 = \|m'\|^2/(\|m'\|^2 + \operatorname{tr}C')$ with
//! $m' = Lm$, $C' = LB\Sigma B^\top L^\top$: the ratio of expectations
//! $\mathbb E[z\cdot z']/\mathbb E\|z\|^2$. It equals $c_\infty$ only when $\|z\|$ concentrates; the
//! delta method gives $c_\infty = \rho_2 + O(\rho_0 r^{-2})$ with $\rho_2 - \rho_0 = O(\rho_0/r)$,
//! $r = (\operatorname{tr}C')^2/\operatorname{tr}C'^2$. Two different errors, measured separately:
//! 1. *approximation error* $|\rho_0 - c_\infty|$: a fixed-$d$ quantity, independent of $n$,
//!    shrinking like $1/r$ for spread spectra. Checked: it is explained by the first-order
//!    delta-method term, $|\rho_2 - c_\infty| \le \rho_0/r^2 + 4\,\mathrm{SE}$ (random instances with
//!    Marchenko–Pastur $\Sigma$; a spiked $C$ aligned with $m$ can make the terms larger);
//! 2. *Monte Carlo error* $|\bar c_n - c_\infty|$: vanishes as $n\to\infty$, RMS $\propto n^{-1/2}$
//!    generically ($n^{-1}$ when $\mathbb E\hat z = 0$); checked by a fitted log–log slope over $n$.
//!
//! **Sign condition (of the prediction).** $m'$ does not depend on $\lambda$ and $\rho_0$
//! decreases in $\operatorname{tr}C'$, which is $\operatorname{tr}(L\Sigma L^\top)$ at $\lambda=1$ and
//! $\operatorname{tr}(L(I+W)\Sigma(I+W)^\top L^\top)$ at $\lambda = 0$. So if $m'\neq 0$, dense is
//! predicted to smooth more than identity iff $\operatorname{tr}(L(I+W)\Sigma(I+W)^\top L^\top) >
//! \operatorname{tr}(L\Sigma L^\top)$ — for identity/RMSNorm exactly the theory's (docs/theory.md §7)
//! $\operatorname{tr}((I+W)\Sigma(I+W)^\top) > \operatorname{tr}\Sigma$, for LayerNorm the $P$-projected one.
//! For the *true* $c_\infty$ (or finite $n$) it is claimed only when the predicted gap is
//! not tiny ($\ge 0.02$), since both ends carry an approximation error of order $\rho_0/r$.
//! It compares the endpoints only ($\operatorname{tr}C'$ is convex quadratic in $1-\lambda$).
//!
//! **Causal.** No closed form is claimed: token $i$ mixes only $x_{\le i}$, so early tokens
//! see less averaging; the simulated causal $\bar c_n$ is compared with the bidirectional limit.

use faer::Mat;
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sinklab::attention::{Mask, Norm};
use sinklab::oversmoothing::checks::ramp_setup;
use sinklab::oversmoothing::checks::{self, Variant};
use sinklab::oversmoothing::mixing::{self, Setup};
use sinklab::oversmoothing::predict;

#[test]
fn registered_prediction_check_holds() {
    // 6 cases = 2 per norm; the CLI default runs 24.
    let o = checks::prediction_check(6, 11);
    assert!(o.ok(), "{o:?}");
    assert!(o.worst_margin > 0.0);
}

#[test]
fn registered_sign_check_holds() {
    let o = checks::sign_check(24, 12);
    assert!(o.ok(), "{o:?}");
    assert_eq!(o.cases, 24);
}

#[test]
fn flipped_sign_condition_is_caught() {
    // Expected failure: the condition the wrong way round must fail on every
    // tested case (same instances and simulations as the correct variant, which holds).
    let good = checks::sign_check_with(24, 12, Variant::Correct);
    let bad = checks::sign_check_with(24, 12, Variant::FlippedSign);
    assert!(good.ok());
    assert_eq!(bad.failed, bad.cases, "{bad:?}");
    assert!(bad.worst_margin < 0.0);
}

#[test]
fn unprojected_layer_norm_prediction_is_caught() {
    // Expected failure: predicting LayerNorm without the centring projection.
    // Only LayerNorm cases (k ≡ 2 mod 3) are affected; 9 cases hold three of them.
    let bad = checks::prediction_check_with(9, 11, Variant::LayerNormUnprojected);
    assert!(bad.failed >= 1, "{bad:?}");
}

/// A fixed non-degenerate instance for the rate tests (seeded).
fn fixed_setup(d: usize, norm: Norm, seed: u64) -> Setup {
    let mut rng = StdRng::seed_from_u64(seed);
    Setup {
        norm,
        ..checks::random_setup(&mut rng, d, norm, 0.3)
    }
}

#[test]
fn monte_carlo_error_shrinks_like_inverse_sqrt_n() {
    // Per norm: RMS deviation of the finite-n mean cosine from the simulated limit
    // at n = 16, 64, 256, 1024 (32 sequences each). Generic rate n^{-1/2}; with
    // 32 replicates the RMS has ~12% relative noise, i.e. ±0.1 on the fitted slope
    // over a 64× range, so [−0.8, −0.3] is a 2σ-wide band around −0.5 that still
    // excludes "no decay" (0) and the bias-only rate (−1).
    let ns = [16usize, 64, 256, 1024];
    for (k, norm) in [
        Norm::Identity,
        Norm::Rms { eps: 1e-6 },
        Norm::Layer { eps: 1e-6 },
    ]
    .into_iter()
    .enumerate()
    {
        let s = fixed_setup(16, norm, 100 + k as u64);
        let mut rng = StdRng::seed_from_u64(200 + k as u64);
        let lim = mixing::limit_cosine(&s, 0.5, 200_000, &mut rng).unwrap();
        let rms: Vec<f64> = ns
            .iter()
            .map(|&n| {
                checks::finite_n_deviation(&s, 0.5, Mask::Bidirectional, n, 32, lim.value, &mut rng)
                    .unwrap()
                    .1
            })
            .collect();
        let xs: Vec<f64> = ns.iter().map(|&n| n as f64).collect();
        let slope = checks::loglog_slope(&xs, &rms);
        assert!(
            (-0.8..=-0.3).contains(&slope),
            "{norm:?}: slope {slope}, rms {rms:?}"
        );
        // The limit's own error must be far below the smallest RMS deviation.
        assert!(
            lim.se < 0.2 * rms[3],
            "{norm:?}: SE {} vs rms {}",
            lim.se,
            rms[3]
        );
    }
}

#[test]
fn approximation_error_does_not_vanish_with_n_but_shrinks_with_d() {
    // At fixed d the gap ρ0 − c∞ is a property of the formula, not of n: at d = 4
    // it is many standard errors away from 0 and larger than the finite-n RMS error
    // at n = 2048. Across d = 4…64 it shrinks; first-order theory says ≈ 1/(8d) for
    // this family. Tolerance: at d = 4 the 1/r² terms still bend the curve, and at
    // d = 64 the error (~2e-3) is ~5 SE, hence a band [−1.4, −0.6] around −1.
    let mut rng = StdRng::seed_from_u64(7);
    let mut ds = vec![];
    let mut errs = vec![];
    let mut corrected_better = 0;
    for d in [4usize, 8, 16, 32, 64] {
        let s = ramp_setup(d);
        let l = predict::readout(Norm::Identity, None, d).unwrap();
        let p = predict::predict(s.w.as_ref(), &s.mu, s.sigma().as_ref(), 0.5, l.as_ref()).unwrap();
        let lim = mixing::limit_cosine(&s, 0.5, 200_000, &mut rng).unwrap();
        let err = (p.rho0 - lim.value).abs();
        if d == 4 {
            assert!(err > 10.0 * lim.se, "d=4: err {err} vs SE {}", lim.se);
            let (_, rms) = checks::finite_n_deviation(
                &s,
                0.5,
                Mask::Bidirectional,
                2048,
                8,
                lim.value,
                &mut rng,
            )
            .unwrap();
            assert!(
                rms < err,
                "finite-n RMS {rms} at n=2048 vs approximation error {err}"
            );
        }
        if (p.rho2 - lim.value).abs() < err {
            corrected_better += 1;
        }
        ds.push(d as f64);
        errs.push(err);
    }
    let slope = checks::loglog_slope(&ds, &errs);
    assert!(
        (-1.4..=-0.6).contains(&slope),
        "slope {slope}, errors {errs:?}"
    );
    // The delta-method correction captures the leading error.
    assert!(
        corrected_better >= 4,
        "ρ2 better than ρ0 in only {corrected_better}/5"
    );
}

#[test]
fn causal_converges_to_the_same_limit_more_slowly() {
    // Causal token i averages only x_{≤i}: its effective mixing is (I + (1−λ)W + λW/(i+1))
    // on itself plus λW times the mean of i earlier tokens. The early-token effects decay
    // like 1/i, so the causal mean cosine tends to the bidirectional limit, but its mean
    // deviation (bias) at small n is larger than the bidirectional one.
    let s = fixed_setup(16, Norm::Identity, 300);
    let mut rng = StdRng::seed_from_u64(301);
    let lam = 1.0;
    let lim = mixing::limit_cosine(&s, lam, 200_000, &mut rng).unwrap();
    let (b_bi16, _) =
        checks::finite_n_deviation(&s, lam, Mask::Bidirectional, 16, 64, lim.value, &mut rng)
            .unwrap();
    let (b_ca16, _) =
        checks::finite_n_deviation(&s, lam, Mask::Causal, 16, 64, lim.value, &mut rng).unwrap();
    let (_, r_ca1024) =
        checks::finite_n_deviation(&s, lam, Mask::Causal, 1024, 16, lim.value, &mut rng).unwrap();
    let (_, r_ca32) =
        checks::finite_n_deviation(&s, lam, Mask::Causal, 32, 16, lim.value, &mut rng).unwrap();
    assert!(
        r_ca1024 < 0.5 * r_ca32,
        "causal RMS {r_ca32} (n=32) → {r_ca1024} (n=1024)"
    );
    assert!(
        b_ca16.abs() > b_bi16.abs(),
        "causal bias {b_ca16} vs bidirectional {b_bi16}"
    );
}

#[test]
fn head_prediction_from_estimated_moments_matches_the_truth() {
    // The real-model entry point fed with the sample mean and covariance of 20 000
    // tokens must agree with the prediction from the true (μ, Σ) to sampling accuracy:
    // relative error of a covariance from N samples ~ √(2/N) ≈ 1%, so 0.02 in cosine.
    let s = fixed_setup(12, Norm::Layer { eps: 1e-6 }, 400);
    let mut rng = StdRng::seed_from_u64(401);
    let x = s.sample(20_000, &mut rng);
    let (n, d) = (x.nrows(), x.ncols());
    let mu: Vec<f64> = (0..d)
        .map(|j| (0..n).map(|i| x[(i, j)]).sum::<f64>() / n as f64)
        .collect();
    let xc = Mat::from_fn(n, d, |i, j| x[(i, j)] - mu[j]);
    let sigma_hat = xc.transpose() * &xc * (1.0 / (n as f64 - 1.0));
    let est =
        predict::head_prediction(s.w.as_ref(), &mu, sigma_hat.as_ref(), s.norm, None).unwrap();
    let tru =
        predict::head_prediction(s.w.as_ref(), &s.mu, s.sigma().as_ref(), s.norm, None).unwrap();
    assert!((est.identity.rho0 - tru.identity.rho0).abs() < 0.02);
    assert!((est.uniform.rho0 - tru.uniform.rho0).abs() < 0.02);
    assert_eq!(est.sign.dense_smooths_more, tru.sign.dense_smooths_more);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0002), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rms_norm_leaves_cosines_unchanged(seed in 0u64..1_000_000, lam in 0.0f64..=1.0, causal: bool) {
        // Same tokens through identity and RMSNorm: cosines are scale invariant, so the
        // mean cosines agree to rounding (n = 64 sums of unit-vector products: 1e-12).
        let mask = if causal { Mask::Causal } else { Mask::Bidirectional };
        let s = fixed_setup(6, Norm::Identity, seed);
        let a = mixing::simulate(&s, 64, lam, mask, &mut StdRng::seed_from_u64(seed)).unwrap();
        let r = Setup { norm: Norm::Rms { eps: 1e-3 }, ..s };
        let b = mixing::simulate(&r, 64, lam, mask, &mut StdRng::seed_from_u64(seed)).unwrap();
        prop_assert!((a - b).abs() < 1e-12);
    }

    #[test]
    fn layer_norm_acts_on_cosines_as_the_centring_projection(seed in 0u64..1_000_000, lam in 0.0f64..=1.0) {
        let d = 5;
        let s = fixed_setup(d, Norm::Layer { eps: 1e-4 }, seed);
        let mut rng = StdRng::seed_from_u64(seed);
        let x = s.sample(32, &mut rng);
        let y = mixing::block_output(x.as_ref(), s.w.as_ref(), lam, Mask::Bidirectional, s.norm).unwrap();
        let u = mixing::block_output(x.as_ref(), s.w.as_ref(), lam, Mask::Bidirectional, Norm::Identity).unwrap();
        let p = predict::readout(s.norm, None, d).unwrap();
        let pu = &u * p.transpose();
        let a = mixing::mean_pairwise_cosine(y.as_ref()).unwrap();
        let b = mixing::mean_pairwise_cosine(pu.as_ref()).unwrap();
        prop_assert!((a - b).abs() < 1e-12);
    }

    #[test]
    fn sign_verdict_matches_the_predicted_gap(seed in 0u64..1_000_000, k in 0usize..3) {
        // The verdict (a trace comparison) and the sign of ρ0(1) − ρ0(0) must agree.
        let s = fixed_setup(8, checks::norm_of_case(k), seed);
        let l = predict::readout(s.norm, None, 8).unwrap();
        let v = predict::sign_condition(s.w.as_ref(), &s.mu, s.sigma().as_ref(), l.as_ref()).unwrap();
        if let Some(dense_more) = v.dense_smooths_more {
            prop_assert_eq!(dense_more, v.gap > 0.0);
        }
    }
}

#[test]
fn report_section_writes_figure_and_table() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = sinklab::report::ReportCtx {
        out_dir: dir.path().to_path_buf(),
        seed: 5,
        quick: true,
    };
    let s = sinklab::claims::oversmoothing::section(&ctx).unwrap();
    assert!(s.figures.iter().any(|p| p.ends_with("oversmoothing.svg")));
    for f in &s.figures {
        assert!(std::fs::metadata(f).unwrap().len() > 1000, "{f:?}");
    }
    assert!(s.markdown.contains("| LayerNorm | 1.00 |"));
    assert!(
        sinklab::report::sections()
            .iter()
            .any(|(n, _)| *n == "oversmoothing")
    );
    let names: Vec<_> = sinklab::registry::registry()
        .iter()
        .map(|t| t.name)
        .collect();
    assert!(names.contains(&"oversmoothing_prediction") && names.contains(&"oversmoothing_sign"));
}
