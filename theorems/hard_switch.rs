//! # Hard switch ⇒ sink (docs/theory.md §4, claim A3; our formalization)
//!
//! Statement. Let the key values $v_j = W_{VO}x_j$ satisfy the *cone condition*:
//! some unit $u$ and $\gamma > 0$ with $u\cdot v_j \ge \gamma\|v_j\|$ for all $j$.
//! Then for every query $i$ and attention row $A_{i\cdot}$,
//! $$\sum_j A_{ij}\|v_j\| \le \|o_i\|/\gamma, \qquad o_i = \textstyle\sum_j A_{ij}v_j,$$
//! so the mass on keys with $\|v_j\|\ge\eta$ is at most $\|o_i\|/(\gamma\eta)$: as
//! $\delta\to0$, a δ-hard switch must put its mass on keys of (near) zero value,
//! i.e. on a sink. Converse: $W_{VO}s=0$ and $A_{i0}\ge1-\varepsilon$ imply
//! $\|o_i\|\le\varepsilon\max_j\|v_j\|$.
//! Without the cone condition the statement is false ($v_1=-v_2$, equal weights).
//!
//! Checks. (1) the inequality on random heads (random tokens, random and
//! sink-pulled $W_{QK}$, values drawn in a cone of random $\gamma\in[0.05,0.95]$);
//! (2) the converse on heads built with the rank-one sink witness and
//! $s\in\ker W_{VO}$; (3) both checks *fail* when their assumption is dropped;
//! (4) a property-based search finds (and shrinks) a counterexample when the
//! cone condition is dropped, and never finds one when it holds.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use sinklab::switch::{Assumption, check_hard_switch_bound, check_hard_switch_converse};

#[test]
fn bound_holds_on_random_heads() {
    let o = check_hard_switch_bound(300, 1, Assumption::Kept);
    assert!(o.ok(), "{o:?}");
    assert!(
        o.cases > 300,
        "every query of every case is a case: {}",
        o.cases
    );
}

#[test]
fn bound_fails_without_the_cone_condition() {
    let o = check_hard_switch_bound(100, 1, Assumption::Dropped);
    assert!(
        o.failed > 0,
        "dropping the cone condition should break the bound: {o:?}"
    );
}

#[test]
fn converse_holds_and_needs_the_zero_sink_value() {
    let o = check_hard_switch_converse(200, 2, Assumption::Kept);
    assert!(o.ok(), "{o:?}");
    let o = check_hard_switch_converse(200, 2, Assumption::Dropped);
    assert!(
        o.failed > 0,
        "a sink with a non-zero value should give a non-zero output: {o:?}"
    );
}

/// One query over three keys in the plane, integer data for readable shrinks.
#[derive(Clone, Debug)]
struct Instance {
    values: [(f64, f64); 3],
    logits: [f64; 3],
}

impl Instance {
    fn attention(&self) -> [f64; 3] {
        let m = self
            .logits
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = self.logits.iter().map(|z| (z - m).exp()).collect();
        let s: f64 = e.iter().sum();
        [e[0] / s, e[1] / s, e[2] / s]
    }
}

const DELTA: f64 = 0.25; // the switch is "off": ‖o‖ ≤ δ
const ETA: f64 = 1.0; // "large" value: ‖v‖ ≥ η
const GAMMA: f64 = 0.5; // nominal cone parameter

/// The theorem's conclusion on one instance: ‖o‖ ≤ δ ⇒ mass on large values ≤ δ/(γη).
fn conclusion(inst: &Instance) -> Result<(), TestCaseError> {
    let a = inst.attention();
    let o = (0..3).fold((0.0, 0.0), |acc, j| {
        (
            acc.0 + a[j] * inst.values[j].0,
            acc.1 + a[j] * inst.values[j].1,
        )
    });
    let on = (o.0 * o.0 + o.1 * o.1).sqrt();
    if on <= DELTA {
        let large: f64 = (0..3)
            .filter(|&j| inst.values[j].0.hypot(inst.values[j].1) >= ETA)
            .map(|j| a[j])
            .sum();
        if large > DELTA / (GAMMA * ETA) + 1e-12 {
            return Err(TestCaseError::fail(format!(
                "‖o‖ = {on:.3} ≤ δ but mass {large:.3} on ‖v‖ ≥ η"
            )));
        }
    }
    Ok(())
}

fn free_values() -> impl Strategy<Value = Instance> {
    (
        prop::array::uniform3((-4i8..=4, -4i8..=4)),
        prop::array::uniform3(-3i8..=3),
    )
        .prop_map(|(v, z)| Instance {
            values: v.map(|(a, b)| (a as f64, b as f64)),
            logits: z.map(f64::from),
        })
}

/// Values in the cone around u = (1, 0) with γ = cos θ_max ≥ 0.5 (|θ| ≤ 60°).
fn cone_values() -> impl Strategy<Value = Instance> {
    (
        prop::array::uniform3((0u8..=4, -60i16..=60)),
        prop::array::uniform3(-3i8..=3),
    )
        .prop_map(|(v, z)| Instance {
            values: v.map(|(r, deg)| {
                let th = (deg as f64).to_radians();
                (r as f64 * th.cos(), r as f64 * th.sin())
            }),
            logits: z.map(f64::from),
        })
}

#[test]
fn search_finds_a_counterexample_without_the_cone_condition() {
    let mut runner = TestRunner::new(Config {
        cases: 4000,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0004),
        ..Config::default()
    });
    match runner.run(&free_values(), |inst| conclusion(&inst)) {
        Err(TestError::Fail(why, shrunk)) => {
            // The shrunk instance really violates the conclusion.
            assert!(conclusion(&shrunk).is_err());
            eprintln!("counterexample (shrunk): {shrunk:?}: {why}");
        }
        other => panic!("no counterexample found without the cone condition: {other:?}"),
    }
}

#[test]
fn search_never_finds_one_under_the_cone_condition() {
    let mut runner = TestRunner::new(Config {
        cases: 4000,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0004),
        ..Config::default()
    });
    runner
        .run(&cone_values(), |inst| conclusion(&inst))
        .expect("the theorem holds under the cone condition");
}
