//! # Half-space theorem (docs/theory.md §3, claim A1 of arXiv:2605.08453; formalization ours)
//!
//! **Setting.** Queries $Q\subset\mathbb R^d$ (finite, non-empty), a sink key $s$,
//! non-sink keys $K$ ($m = |K|\ge1$), one head with bilinear logits
//! $z(x,k) = x^\top Wk$ and softmax over $\{s\}\cup K$ for every query.
//!
//! **Statement.** There is a $W$ with $x^\top W(s-k) > 0$ for all $x\in Q$,
//! $k\in K$ — equivalently, for every $\varepsilon\in(0, m/(m+1))$ a $W$ with sink
//! mass $A_{x,s}\ge1-\varepsilon$ on every query — **iff**
//! (a) $0\notin\mathrm{conv}(Q)$ and (b) $s\notin\mathrm{conv}(K)$.
//! When both hold, $W = c\,ab^\top$ with the max-margin directions $a$, $b$,
//! $\gamma_a = \min_x a\cdot x$, $\gamma_b = \min_k b\cdot(s-k)$ and
//! $c = \Delta_\varepsilon(m)/(\gamma_a\gamma_b)$, $\Delta_\varepsilon(m) = \ln(m(1-\varepsilon)/\varepsilon)$,
//! is a witness of cost $\|W\|_F = \|W\|_* = c\|a\|\|b\|$.
//! **Corollary.** $\cos(s,x)<0$ on $Q$ and $\cos(s,k)\le0$ on $K$ ⇒ $W=-c\,ss^\top$ is a witness.
//! **Biases.** With query/key biases (homogenized $\tilde x = (x,1)$), (a) holds
//! for free and the verdict depends on (b) alone.
//!
//! **What is checked.** `half_space_verdict` returns a witness (verified by
//! computing the attention it produces) or convex weights (verified by
//! arithmetic: $\lambda\ge0$, $\sum\lambda=1$, residual $\le10^{-9}\cdot$scale).
//! On configurations *built* to satisfy or violate (a) and (b) — half-spaces with
//! relative margins down to $10^{-6}$, planted convex combinations (also on the
//! hull's boundary), nearly collinear sets, $d\in[2,64]$, up to 256 points — the
//! verdict must match the construction every time and every certificate must
//! verify. Negative controls: wrong certificates must fail verification.

use proptest::prelude::*;
use sinklab::geometry::check::{corollary_config, judge, run_corollary, run_half_space};
use sinklab::geometry::sample::{SetKind, draw_config};
use sinklab::geometry::{
    HullVerdict, Obstruction, Verdict, corollary_witness, half_space_verdict,
    half_space_verdict_biased, half_space_verdict_rows, homogenize, hull_verdict,
    verify_sink_witness,
};
use sinklab::linalg::{fro_norm, from_rows, nuclear_norm};

fn slices(v: &[Vec<f64>]) -> Vec<&[f64]> {
    v.iter().map(Vec::as_slice).collect()
}

fn query_kind() -> impl Strategy<Value = SetKind> {
    prop_oneof![
        prop::sample::select(vec![1e-6, 1e-4, 1e-2, 0.3])
            .prop_map(|margin| SetKind::Separated { margin }),
        (2usize..=66, any::<bool>())
            .prop_map(|(support, boundary)| SetKind::Planted { support, boundary }),
        any::<bool>().prop_map(|boundary| SetKind::Planted {
            support: 2,
            boundary
        }),
    ]
}

fn key_kind() -> impl Strategy<Value = SetKind> {
    prop_oneof![
        prop::sample::select(vec![1e-6, 1e-4, 1e-2, 0.3])
            .prop_map(|margin| SetKind::Separated { margin }),
        (1usize..=66, any::<bool>())
            .prop_map(|(support, boundary)| SetKind::Planted { support, boundary }),
    ]
}

proptest! {
    // 256 cases of up to 2 × 256 points in d ≤ 64: a few seconds at opt-level 1.
    #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0003), ..ProptestConfig::default() })]

    /// The verdict matches the construction and its certificate verifies.
    #[test]
    fn verdict_matches_construction(
        seed in any::<u64>(),
        d in 2usize..=64,
        nq in 2usize..=256,
        nk in 1usize..=256,
        qk in query_kind(),
        kk in key_kind(),
        collinear in prop::bool::weighted(0.25),
        eps in prop::sample::select(vec![1e-4, 1e-2, 0.2]),
    ) {
        let cfg = draw_config(seed, d, nq, nk, qk, kk, collinear);
        let j = judge(&cfg, eps);
        prop_assert!(j.ok, "{}: {}", cfg.describe(), j.why);
        prop_assert!(j.margin >= 0.0, "{}: margin {}", cfg.describe(), j.margin);
    }

    /// Representable verdicts: ‖W‖_F = ‖W‖_* = c‖a‖‖b‖, every gap ≥ Δ (to
    /// rounding), and the max-margin directions are the cheapest rank-one
    /// witness: perturbed directions that still separate cost more.
    #[test]
    fn witness_cost_and_optimality(
        seed in any::<u64>(),
        d in 2usize..=12,
        nq in 2usize..=40,
        nk in 1usize..=40,
        margin in prop::sample::select(vec![1e-3, 0.1, 0.5]),
        dirs in prop::collection::vec(-1.0f64..1.0, 24),
    ) {
        let cfg = draw_config(seed, d, nq, nk, SetKind::Separated { margin }, SetKind::Separated { margin }, false);
        let (q, k) = (cfg.q(), cfg.k());
        let v = half_space_verdict_rows(&q, &cfg.sink, &k, 0.01).unwrap();
        let Verdict::Representable(w) = v else { panic!("should be representable: {}", cfg.describe()) };
        let cost = w.cost();
        // Rank one: F and nuclear norms agree with c‖a‖‖b‖ (SVD accuracy ~1e-13 relative).
        prop_assert!((fro_norm(w.w.as_ref()) - cost).abs() <= 1e-10 * cost);
        prop_assert!((nuclear_norm(w.w.as_ref(), faer::Par::Seq) - cost).abs() <= 1e-10 * cost);
        let chk = w.verify(&q, &cfg.sink, &k);
        // Δ up to the relative rounding of the gap (≪ 1e-6 at these margins).
        prop_assert!(chk.ok && chk.min_gap >= w.gap * (1.0 - 1e-6), "{chk:?} Δ={}", w.gap);
        // Perturb a and b by 5 % (relative); normalized margins can only drop.
        let na = w.a.iter().map(|x| x * x).sum::<f64>().sqrt();
        let nb = w.b.iter().map(|x| x * x).sum::<f64>().sqrt();
        let a2: Vec<f64> = w.a.iter().enumerate().map(|(i, x)| x + 0.05 * na * dirs[i % 12] / (d as f64).sqrt()).collect();
        let b2: Vec<f64> = w.b.iter().enumerate().map(|(i, x)| x + 0.05 * nb * dirs[12 + i % 12] / (d as f64).sqrt()).collect();
        let ga = q.iter().map(|x| a2.iter().zip(x.iter()).map(|(p, r)| p * r).sum::<f64>()).fold(f64::INFINITY, f64::min);
        let gb = k.iter().map(|kk| b2.iter().zip(cfg.sink.iter().zip(kk.iter())).map(|(p, (s, r))| p * (s - r)).sum::<f64>()).fold(f64::INFINITY, f64::min);
        if ga > 0.0 && gb > 0.0 {
            let na2 = a2.iter().map(|x| x * x).sum::<f64>().sqrt();
            let nb2 = b2.iter().map(|x| x * x).sum::<f64>().sqrt();
            let cost2 = w.gap * na2 * nb2 / (ga * gb);
            // The solver's directions are optimal to ~1e-10 relative.
            prop_assert!(cost2 >= cost * (1.0 - 1e-8), "perturbed witness cheaper: {cost2} < {cost}");
        }
    }

    /// The corollary witness −c·s sᵀ verifies; +c·s sᵀ (wrong sign) fails.
    #[test]
    fn corollary_witness_verifies(
        seed in any::<u64>(),
        d in 2usize..=64,
        nq in 1usize..=128,
        nk in 1usize..=128,
        eps in prop::sample::select(vec![1e-4, 1e-2, 0.2]),
    ) {
        let (qv, s, kv) = corollary_config(seed, d, nq, nk);
        let (q, k) = (slices(&qv), slices(&kv));
        let w = corollary_witness(&q, &s, &k, eps).unwrap().expect("cosine condition holds by construction");
        let chk = w.verify(&q, &s, &k);
        prop_assert!(chk.ok, "{chk:?}");
        let wrong = w.w.as_ref() * faer::Scale(-1.0);
        let bad = verify_sink_witness(wrong.as_ref(), &q, &s, &k, eps);
        prop_assert!(!bad.ok, "wrong-sign witness accepted: {bad:?}");
    }

    /// Biases: on homogenized data (a) always holds, so the biased verdict
    /// depends on (b) alone — even when the unbiased queries violate (a).
    #[test]
    fn biased_verdict_depends_only_on_b(
        seed in any::<u64>(),
        d in 2usize..=32,
        nq in 2usize..=64,
        nk in 1usize..=64,
        qk in query_kind(),
        kk in key_kind(),
    ) {
        let cfg = draw_config(seed, d, nq, nk, qk, kk, false);
        let (q, k) = (cfg.q(), cfg.k());
        let v = half_space_verdict_biased(&q, &cfg.sink, &k, 0.01).unwrap();
        prop_assert!(!v.queries_fail());
        prop_assert_eq!(v.is_representable(), kk.holds(), "{}", cfg.describe());
        let (hq, hk) = (homogenize(&q), homogenize(&k));
        let hs = homogenize(&[cfg.sink.as_slice()]).pop().unwrap();
        prop_assert!(v.verify(&slices(&hq), &hs, &slices(&hk)));
    }
}

#[test]
fn antipodal_queries_fail_unbiased_but_not_biased() {
    // x and −2x: 0 = (2/3)x + (1/3)(−2x) ∈ conv(Q), (a) fails without biases.
    let q = vec![
        vec![1.0, 0.5, -0.25],
        vec![-2.0, -1.0, 0.5],
        vec![0.3, 0.1, 0.9],
    ];
    let s = vec![2.0, 2.0, 2.0];
    let k = vec![vec![0.0, 0.0, 0.0], vec![1.0, -1.0, 0.5]];
    let v = half_space_verdict_rows(&slices(&q), &s, &slices(&k), 0.01).unwrap();
    assert!(v.queries_fail() && !v.sink_fails(), "{v:?}");
    let Verdict::NotRepresentable(obs) = &v else {
        unreachable!()
    };
    let Obstruction::QueriesNotInHalfSpace { lambda } = &obs[0] else {
        panic!("{obs:?}")
    };
    assert!(
        (lambda.lambda[0] - 2.0 / 3.0).abs() < 1e-12
            && (lambda.lambda[1] - 1.0 / 3.0).abs() < 1e-12
    );
    let vb = half_space_verdict_biased(&slices(&q), &s, &slices(&k), 0.01).unwrap();
    assert!(vb.is_representable(), "{vb:?}");
    // Planting s in conv(K) breaks the biased verdict too.
    let k2 = vec![vec![4.0, 4.0, 4.0], vec![0.0, 0.0, 0.0]];
    let vb2 = half_space_verdict_biased(&slices(&q), &s, &slices(&k2), 0.01).unwrap();
    assert!(vb2.sink_fails() && !vb2.queries_fail(), "{vb2:?}");
}

#[test]
fn wrong_witness_fails_verification() {
    // cos(s, x) < 0 and cos(s, k) ≤ 0: W = −c s sᵀ works, W = +c s sᵀ must not.
    let s = vec![1.0, 0.0];
    let q = vec![vec![-1.0, 0.3], vec![-0.5, -2.0]];
    let k = vec![vec![0.0, 1.0], vec![-1.0, -1.0], vec![-3.0, 0.2]];
    let w = corollary_witness(&slices(&q), &s, &slices(&k), 0.01)
        .unwrap()
        .unwrap();
    let good = w.verify(&slices(&q), &s, &slices(&k));
    assert!(good.ok && good.worst_sink_mass >= 0.99, "{good:?}");
    let wrong = from_rows(&[vec![w.c, 0.0], vec![0.0, 0.0]]);
    let bad = verify_sink_witness(wrong.as_ref(), &slices(&q), &s, &slices(&k), 0.01);
    assert!(!bad.ok && bad.worst_sink_mass < 0.5, "{bad:?}");
    // A witness for ε = 0.01 does not certify ε = 1e-6.
    let strict = verify_sink_witness(w.w.as_ref(), &slices(&q), &s, &slices(&k), 1e-6);
    assert!(!strict.ok, "{strict:?}");
}

#[test]
fn matrix_api_matches_rows_api() {
    let cfg = draw_config(
        7,
        8,
        30,
        20,
        SetKind::Separated { margin: 0.1 },
        SetKind::Separated { margin: 0.1 },
        false,
    );
    let v1 = half_space_verdict(
        from_rows(&cfg.queries).as_ref(),
        &cfg.sink,
        from_rows(&cfg.keys).as_ref(),
        0.01,
    )
    .unwrap();
    let v2 = half_space_verdict_rows(&cfg.q(), &cfg.sink, &cfg.k(), 0.01).unwrap();
    match (v1, v2) {
        (Verdict::Representable(a), Verdict::Representable(b)) => assert_eq!(a.w, b.w),
        other => panic!("{other:?}"),
    }
}

#[test]
fn hull_certificates_on_tiny_margins() {
    // Point at relative distance 1e-6 outside a segment: separated, not "inside".
    let pts = vec![vec![1.0, 1e-6], vec![-1.0, 1e-6]];
    match hull_verdict(&slices(&pts), &[0.0, 0.0]).unwrap() {
        HullVerdict::Outside(s) => {
            assert!((s.distance - 1e-6).abs() < 1e-15, "{}", s.distance);
            assert!(s.verify(&slices(&pts), &[0.0, 0.0]).ok);
        }
        v => panic!("{v:?}"),
    }
}

#[test]
fn registered_checks_pass() {
    let o = run_half_space(60, 11);
    assert!(o.ok(), "{o:?}");
    assert!(o.worst_margin >= 0.0);
    let c = run_corollary(30, 11);
    assert!(c.ok(), "{c:?}");
}

/// Regression (found by proptest): sink planted on the boundary of a needle-like
/// key hull (width 1e-6 of its length). Wolfe's iteration makes progress below
/// f64's resolution of ‖y‖² for a few steps there; it must not stop early.
#[test]
fn needle_regression() {
    let cfg = draw_config(
        8771943862856865585,
        24,
        199,
        62,
        SetKind::Planted {
            support: 24,
            boundary: false,
        },
        SetKind::Planted {
            support: 28,
            boundary: true,
        },
        true,
    );
    match hull_verdict(&cfg.k(), &cfg.sink).unwrap() {
        HullVerdict::Inside(mu) => assert!(mu.verify(&cfg.k(), &cfg.sink).ok),
        v => panic!("{v:?}"),
    }
}
