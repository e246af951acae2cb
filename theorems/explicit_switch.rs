//! # Explicit switches: a learned sink logit and an output gate (docs/theory.md §11)
//!
//! Each check holds on seeded cases with its assumption and fails without it: the sink-logit
//! bound needs the sink column to carry no value; the selective gate needs the on- and
//! off-queries to be affinely separable, and where they are not, the failure comes with convex
//! weights that verify by arithmetic.

use sinklab::explicit_switch::{
    Gate, GateVerdict, check_gate_switch, check_sink_logit_switch, gate_cost_orthonormal,
    gate_obstructions_verified, gate_verdict, sink_logit_for_context, sink_logit_softmax,
    switch_logit,
};
use sinklab::switch::Assumption;

#[test]
fn sink_logit_switch_holds_with_a_valueless_sink_column() {
    let o = check_sink_logit_switch(400, 0, Assumption::Kept);
    assert!(o.ok(), "{}", o.detail);
    assert!(o.worst_margin >= 0.0, "worst margin {}", o.worst_margin);
}

#[test]
fn sink_logit_switch_fails_when_the_sink_column_carries_a_value() {
    let o = check_sink_logit_switch(200, 0, Assumption::Dropped);
    assert!(o.failed > o.cases / 2, "{} of {} failed", o.failed, o.cases);
}

#[test]
fn gate_switch_holds_on_separable_queries() {
    let o = check_gate_switch(400, 0, Assumption::Kept);
    assert!(o.ok(), "{}", o.detail);
}

#[test]
fn gate_switch_fails_on_inseparable_queries_with_a_verified_obstruction() {
    let o = check_gate_switch(200, 0, Assumption::Dropped);
    assert_eq!(o.failed, o.cases, "{}", o.detail);
    let (verified, n) = gate_obstructions_verified(200, 0);
    assert_eq!(
        verified, n,
        "every XOR instance must carry verified convex weights"
    );
}

#[test]
fn xor_has_no_gate_and_a_threshold_has_one() {
    let l = switch_logit(1e-3);
    let (a, b, c, d) = ([1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]);
    let v = gate_verdict(&[&a, &b], &[&c, &d], l).unwrap();
    assert!(matches!(v, GateVerdict::Inseparable(_)), "{v:?}");
    let v = gate_verdict(&[&a, &c], &[&b, &d], l).unwrap();
    let GateVerdict::Separable(Gate { .. }) = v else {
        panic!("{v:?}")
    };
}

#[test]
fn sink_logit_cost_grows_like_log_t_and_gate_cost_like_sqrt_t() {
    let eps = 0.01;
    // ln(T(1−ε)/ε): doubling T adds ln 2 exactly.
    for t in [8usize, 64, 512] {
        let step = sink_logit_for_context(2 * t, eps) - sink_logit_for_context(t, eps);
        assert!((step - 2f64.ln()).abs() < 1e-12, "{step}");
        let (_, p) = sink_logit_softmax(&vec![0.0; t], sink_logit_for_context(t, eps));
        assert!((1.0 - p - eps).abs() < 1e-12, "visible mass {}", 1.0 - p);
    }
    // A quarter of the queries on: 2L√(N·¼·¾) = L√(3N)/2, so ×4 in N doubles it.
    let l = switch_logit(eps);
    let c = |n: usize| gate_cost_orthonormal(n / 4, n - n / 4, l);
    assert!((c(256) / c(64) - 2.0).abs() < 1e-12);
    assert!((c(64) - l * (3.0f64 * 64.0).sqrt() / 2.0).abs() < 1e-12 * c(64));
}

// ---- The selective sink-logit program on the copy-paste head (`cost::sink_logit`) ----

use faer::Mat;
use sinklab::cost::NormKind;
use sinklab::cost::head::sources;
use sinklab::cost::sink_logit::{
    SinkLogitProgram, counts, fro_assumption, fro_closed_form, fro_optimum, nuclear_closed_form,
    nuclear_optimum, previous_token_everywhere,
};

/// Copy-paste sources at `rate` with both closed forms' assumptions (the first seed from
/// `seed` on that has them).
fn sources_with_assumptions(
    t: usize,
    rate: f64,
    seed: u64,
    d_on: f64,
    d_off: f64,
) -> Vec<Option<usize>> {
    (seed..seed + 200)
        .map(|s| sources(t, rate, s).unwrap())
        .find(|pi| {
            let x = Mat::<f64>::identity(t, t);
            let p = SinkLogitProgram::new(x.as_ref(), pi, d_on, d_off).unwrap();
            fro_assumption(pi, d_on, d_off) && p.nuclear_dual().is_some()
        })
        .expect("a source map with both assumptions")
}

/// Both closed forms are proved by their dual certificates (primal feasible, dual bound equal to
/// the value to 1e-10) on copy-paste instances up to T = 128, and the nuclear one is the
/// formula δ + (δ+Δ)Σ_c√n_c.
#[test]
fn selective_sink_logit_closed_forms_are_proved_by_their_duals() {
    for (t, rate, d_on, d_off) in [
        (6, 0.3, 1.0, 1.0),
        (16, 0.25, 2.0, 0.7),
        (40, 0.25, 1.0, 3.0),
        (128, 0.25, 1.0, 1.0),
    ] {
        let pi = sources_with_assumptions(t, rate, 7, d_on, d_off);
        let x = Mat::<f64>::identity(t, t);
        let p = SinkLogitProgram::new(x.as_ref(), &pi, d_on, d_off).unwrap();
        let (m, s) = fro_optimum(&pi, d_on, d_off);
        let c = p.check_pair(NormKind::Fro, m.as_ref(), s, &p.fro_dual());
        assert!(c.optimal, "T={t} Frobenius: {c:?}");
        let cf = fro_closed_form(&pi, d_on, d_off);
        assert!((c.primal - cf).abs() <= 1e-12 * cf, "{} vs {cf}", c.primal);
        let (m, s) = nuclear_optimum(&pi, d_on, d_off);
        let lam = p.nuclear_dual().unwrap();
        let c = p.check_pair(NormKind::Nuclear, m.as_ref(), s, &lam);
        assert!(c.optimal, "T={t} nuclear: {c:?}");
        let cn = nuclear_closed_form(&pi, d_on, d_off);
        let k = counts(&pi);
        assert!((cn - (d_off + (d_off + d_on) * k.sqrt_sum)).abs() <= 1e-12 * cn);
        assert!((c.primal - cn).abs() <= 1e-10 * cn, "{} vs {cn}", c.primal);
    }
}

/// Without their assumptions the closed forms' certificates do not verify: on the
/// previous-token map (one off-query) the Frobenius point has s* < 0 and breaks the on-queries'
/// routes, and the nuclear assignment does not exist.
#[test]
fn selective_sink_logit_certificates_fail_without_their_assumptions() {
    for t in [5usize, 8, 12] {
        let pi = previous_token_everywhere(t);
        assert!(!fro_assumption(&pi, 1.0, 1.0));
        let x = Mat::<f64>::identity(t, t);
        let p = SinkLogitProgram::new(x.as_ref(), &pi, 1.0, 1.0).unwrap();
        let (m, s) = fro_optimum(&pi, 1.0, 1.0);
        assert!(s < 0.0, "s* = {s}");
        let c = p.check_pair(NormKind::Fro, m.as_ref(), s, &p.fro_dual());
        // The on-queries' sources sit s* + Δ < Δ above their other keys: a route is broken.
        assert!(c.min_ratio < 1.0 - 1e-3 && !c.optimal, "T={t}: {c:?}");
        assert!(p.nuclear_dual().is_none());
    }
}

/// A perturbed optimum violates a constraint: the sink logit moved by 1e-6 either way breaks an
/// off-query's or an on-query's margin, and so does one off-query logit raised by 1e-6; a
/// feasible point off the optimum (noise, rescaled to feasibility) no longer meets the dual bound.
#[test]
fn perturbed_selective_sink_logit_optima_are_rejected() {
    use rand::{RngExt, SeedableRng};
    let t = 12;
    let (d_on, d_off) = (1.5, 1.0);
    let pi = sources_with_assumptions(t, 0.3, 3, d_on, d_off);
    let x = Mat::<f64>::identity(t, t);
    let p = SinkLogitProgram::new(x.as_ref(), &pi, d_on, d_off).unwrap();
    let par = faer::Par::Seq;
    for (m, s, lam, kind) in [
        {
            let (m, s) = fro_optimum(&pi, d_on, d_off);
            (m, s, p.fro_dual(), NormKind::Fro)
        },
        {
            let (m, s) = nuclear_optimum(&pi, d_on, d_off);
            (m, s, p.nuclear_dual().unwrap(), NormKind::Nuclear)
        },
    ] {
        assert!(p.min_ratio(m.as_ref(), s, par) >= 1.0 - 1e-12);
        // Both optima leave every off-query's margin and every on-query's margin over the
        // sink tight, so s moved either way, or an off-query logit raised, breaks one.
        assert!(
            p.min_ratio(m.as_ref(), s + 1e-6, par) < 1.0,
            "{kind}: raised s"
        );
        assert!(
            p.min_ratio(m.as_ref(), s - 1e-6, par) < 1.0,
            "{kind}: lowered s"
        );
        let off = (1..t).find(|&i| pi[i].is_none()).unwrap();
        let mut up = m.clone();
        up[(off, 0)] += 1e-6;
        assert!(
            p.min_ratio(up.as_ref(), s, par) < 1.0,
            "{kind}: raised off logit"
        );
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let noise = Mat::from_fn(t, t, |_, _| 1e-3 * (rng.random::<f64>() - 0.5));
        let mp = &m + &noise;
        let theta = p.min_ratio(mp.as_ref(), s, par);
        let mp = mp * faer::Scale(1.0 / theta);
        let c = p.check_pair(kind, mp.as_ref(), s / theta, &lam);
        assert!(c.min_ratio >= 1.0 - 1e-12 && !c.optimal, "{kind}: {c:?}");
        assert!(c.dual < c.primal);
    }
}

/// The interior-point brackets contain the closed forms and are at most 1e-8 wide (relative)
/// where the SDP fits (T ≤ 24); on the previous-token map the formulas fall outside them (the
/// Frobenius one below the lower end, the nuclear one above the upper end).
#[cfg(feature = "ipm")]
#[test]
fn selective_sink_logit_solver_meets_the_closed_forms() {
    use sinklab::cost::SolveOptions;
    let opts = SolveOptions::default();
    for (t, d_on, d_off) in [(8usize, 1.0, 1.0), (16, 2.0, 1.0), (24, 1.0, 1.0)] {
        let pi = sources_with_assumptions(t, 0.25, 0, d_on, d_off);
        let x =
            sinklab::cost::embeddings(sinklab::cost::EmbeddingKind::Orthonormal, t, t, 5).unwrap();
        let p = SinkLogitProgram::new(x.as_ref(), &pi, d_on, d_off).unwrap();
        assert!(p.is_orthonormal());
        for (kind, cf) in [
            (NormKind::Fro, fro_closed_form(&pi, d_on, d_off)),
            (NormKind::Nuclear, nuclear_closed_form(&pi, d_on, d_off)),
        ] {
            let s = p.solve(kind, &opts).unwrap();
            assert!(
                s.lower <= cf * (1.0 + 1e-12) && s.upper >= cf * (1.0 - 1e-12),
                "T={t} {kind}: [{}, {}] vs {cf}",
                s.lower,
                s.upper
            );
            assert!(s.rel_gap <= 1e-8, "T={t} {kind}: gap {}", s.rel_gap);
        }
    }
    for t in [6usize, 10] {
        let pi = previous_token_everywhere(t);
        let x = Mat::<f64>::identity(t, t);
        let p = SinkLogitProgram::new(x.as_ref(), &pi, 1.0, 1.0).unwrap();
        let f = p.solve(NormKind::Fro, &opts).unwrap();
        let cf = fro_closed_form(&pi, 1.0, 1.0);
        assert!(
            cf < f.lower * (1.0 - 1e-6),
            "T={t}: formula {cf} vs bracket [{}, {}]",
            f.lower,
            f.upper
        );
        let n = p.solve(NormKind::Nuclear, &opts).unwrap();
        let cn = nuclear_closed_form(&pi, 1.0, 1.0);
        assert!(
            cn > n.upper * (1.0 + 1e-6),
            "T={t}: formula {cn} vs bracket [{}, {}]",
            n.lower,
            n.upper
        );
    }
}

/// The registered check holds with its assumptions and fails on every case without them.
#[cfg(feature = "ipm")]
#[test]
fn sink_logit_selective_check_holds_and_fails_without_its_assumptions() {
    use sinklab::cost::sink_logit::check_sink_logit_selective;
    let o = check_sink_logit_selective(12, 0, Assumption::Kept);
    assert!(o.ok(), "{}", o.detail);
    let o = check_sink_logit_selective(8, 0, Assumption::Dropped);
    assert_eq!(o.failed, o.cases, "{}", o.detail);
}

/// Malformed inputs are refused with the thing named: a source at BOS or after its query,
/// a margin that is not positive, a source map of the wrong length.
#[test]
fn selective_sink_logit_program_refuses_bad_inputs() {
    let x = Mat::<f64>::identity(5, 5);
    let bad = [
        (vec![None, None, Some(0), None, None], 1.0, "BOS"),
        (vec![None, None, Some(2), None, None], 1.0, "source 2"),
        (vec![None, None, Some(1), None, None], 0.0, "margin"),
        (vec![None, None, Some(1)], 1.0, "sources for 5"),
    ];
    for (pi, d, phrase) in bad {
        let e = SinkLogitProgram::new(x.as_ref(), &pi, d, 1.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains(phrase), "{e}");
    }
}
