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
