//! Planted-sink tests of the paper-B detector (docs/theory.md §8).
//!
//! A synthetic hidden-state tensor is built with a BOS of known direction $u$
//! whose norm is high exactly on a window $[w_s, w_e)$ (so the window rule must
//! recover it), ordinary tokens with $|\cos(h, u)| \le 0.5$, and planted sinks
//! with $|\cos(h, u)| \ge 0.95$ (sign $\pm$) on a chosen set of layers,
//! contiguous or scattered. The detector must find every planted sink whose
//! layers meet the scanned range, with lifetime = number of planted layers in
//! that range, creation layer = the first of them, and the label of the rule,
//! and flag nothing else. The margin between 0.5 and 0.95 is far larger than
//! f32 rounding (~1e-7 relative), so f32 and f64 tensors must agree exactly.

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;
use sinklab::secondary::{DetectorParams, HiddenStates, Label, LabelRule, WindowMode, detect};
use std::collections::BTreeMap;

struct Planted {
    /// Position → (sign, planted layers).
    sinks: BTreeMap<usize, (f64, Vec<usize>)>,
    h: HiddenStates<f64>,
    bos: usize,
    window: (usize, usize),
}

fn unit(rng: &mut StdRng, d: usize) -> Vec<f64> {
    let v: Vec<f64> = (0..d).map(|_| rng.sample(StandardNormal)).collect();
    let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

/// `norm * (c u + sqrt(1-c^2) w)` with `w` a random unit vector orthogonal to `u`.
fn at_cos(rng: &mut StdRng, u: &[f64], c: f64, norm: f64) -> Vec<f64> {
    let mut w = unit(rng, u.len());
    let p: f64 = w.iter().zip(u).map(|(a, b)| a * b).sum();
    w.iter_mut().zip(u).for_each(|(a, b)| *a -= p * b);
    let nw = w.iter().map(|x| x * x).sum::<f64>().sqrt();
    let s = (1.0 - c * c).max(0.0).sqrt();
    u.iter()
        .zip(&w)
        .map(|(a, b)| norm * (c * a + s * b / nw))
        .collect()
}

/// Builds a planted tensor. `plan` maps a position to (sign, planted layers).
fn build(
    seed: u64,
    (l, t, d): (usize, usize, usize),
    window: (usize, usize),
    bos: usize,
    plan: BTreeMap<usize, (f64, Vec<usize>)>,
) -> Planted {
    let mut rng = StdRng::seed_from_u64(seed);
    let u = unit(&mut rng, d);
    let mut data = Vec::with_capacity(l * t * d);
    for layer in 0..l {
        for pos in 0..t {
            let v = if pos == bos {
                // High norm on the window: the largest rise enters w_s, the largest drop leaves w_e - 1.
                let n = if (window.0..window.1).contains(&layer) {
                    80.0
                } else {
                    20.0
                };
                u.iter().map(|x| n * x).collect()
            } else if let Some((s, _)) = plan.get(&pos).filter(|(_, ls)| ls.contains(&layer)) {
                let c = s * rng.random_range(0.95..=1.0);
                let norm = rng.random_range(0.5..10.0);
                at_cos(&mut rng, &u, c, norm)
            } else {
                // Ordinary token (and, before the BOS, a low-norm candidate).
                let c = rng.random_range(-0.5..=0.5);
                let norm = rng.random_range(0.5..5.0);
                at_cos(&mut rng, &u, c, norm)
            };
            data.extend(v);
        }
    }
    Planted {
        sinks: plan,
        h: HiddenStates::new(l, t, d, data).unwrap(),
        bos,
        window,
    }
}

/// Checks the detector against the plan, for f64 and its f32 copy.
fn check(p: &Planted, params: &DetectorParams) -> Result<(), String> {
    let l = p.h.layers();
    let scanned = match params.window {
        WindowMode::BosNormJumps => p.window.0..p.window.1,
        WindowMode::AllLayers => 0..l,
    };
    let mut expected = BTreeMap::new();
    for (&pos, (_, ls)) in &p.sinks {
        let mut inside: Vec<usize> = ls.iter().copied().filter(|x| scanned.contains(x)).collect();
        inside.sort_unstable();
        if !inside.is_empty() {
            let lt = inside.len();
            expected.insert(pos, (inside[0], lt, params.labels.label(lt, l), inside));
        }
    }
    let f32_states = HiddenStates::new(
        l,
        p.h.tokens(),
        p.h.dim(),
        p.h.data().iter().map(|&x| x as f32).collect(),
    )
    .unwrap();
    let d64 = detect(&p.h, params).map_err(|e| e.to_string())?;
    let d32 = detect(&f32_states, params).map_err(|e| e.to_string())?;
    for det in [&d64, &d32] {
        if det.bos != p.bos {
            return Err(format!("BOS {} != {}", det.bos, p.bos));
        }
        if det.window != scanned {
            return Err(format!("window {:?} != {:?}", det.window, scanned));
        }
        let got: BTreeMap<usize, (usize, usize, Label, Vec<usize>)> = det
            .sinks
            .iter()
            .map(|s| {
                (
                    s.position,
                    (s.creation_layer, s.lifetime, s.label, s.layers.clone()),
                )
            })
            .collect();
        if got != expected {
            return Err(format!("detected {got:?}\nplanted {expected:?}"));
        }
        for s in &det.sinks {
            let sign = p.sinks[&s.position].0;
            if s.cosines.iter().any(|c| c * sign < 0.95 - 1e-6) {
                return Err(format!("cosines {:?} do not carry sign {sign}", s.cosines));
            }
        }
    }
    Ok(())
}

#[test]
fn four_kinds_of_planted_sinks_in_a_30_layer_model() {
    // Window [3, 27): 24 scanned layers. Paper labels: bos_sink iff lifetime >= 15,
    // secondary iff 4 < lifetime < 15.
    let mut plan = BTreeMap::new();
    plan.insert(5, (1.0, (4..24).collect::<Vec<_>>())); // aligned, contiguous, 20 -> bos_sink
    plan.insert(9, (-1.0, (10..18).collect())); // anti-aligned, contiguous, 8 -> secondary
    plan.insert(17, (1.0, vec![6, 9, 12, 15, 20, 26])); // aligned, scattered, 6 -> secondary
    plan.insert(30, (-1.0, vec![0, 1, 2, 8, 27, 28, 29])); // anti, scattered, 1 in window -> noise
    plan.insert(41, (1.0, vec![0, 1, 2, 27, 28])); // only outside the window -> not detected
    plan.insert(44, (-1.0, vec![11, 12, 13])); // short -> noise
    let p = build(11, (30, 48, 64), (3, 27), 0, plan);
    let det = detect(&p.h, &DetectorParams::default()).unwrap();
    let got: Vec<(usize, usize, usize, Label)> = det
        .sinks
        .iter()
        .map(|s| (s.position, s.creation_layer, s.lifetime, s.label))
        .collect();
    assert_eq!(
        got,
        vec![
            (5, 4, 20, Label::BosSink),
            (9, 10, 8, Label::Secondary),
            (17, 6, 6, Label::Secondary),
            (30, 8, 1, Label::Noise),
            (44, 11, 3, Label::Noise)
        ]
    );
    check(&p, &DetectorParams::default()).unwrap();
    // The no-window variant sees the layers outside [3, 27) too.
    let nw = DetectorParams {
        window: WindowMode::AllLayers,
        ..Default::default()
    };
    let det = detect(&p.h, &nw).unwrap();
    let p30 = det.sinks.iter().find(|s| s.position == 30).unwrap();
    assert_eq!(
        (p30.creation_layer, p30.lifetime, p30.label),
        (0, 7, Label::Secondary)
    );
    assert!(
        det.sinks
            .iter()
            .any(|s| s.position == 41 && s.lifetime == 5)
    );
    check(&p, &nw).unwrap();
}

#[test]
fn bos_is_the_candidate_with_largest_mean_norm() {
    // BOS at position 1; position 0 is a low-norm candidate and is never scanned.
    let mut plan = BTreeMap::new();
    plan.insert(4, (1.0, (2..9).collect::<Vec<_>>()));
    let p = build(3, (12, 10, 16), (2, 10), 1, plan);
    let params = DetectorParams {
        bos_candidates: vec![0, 1],
        labels: LabelRule {
            bos_margin: 3,
            noise_max: 2,
        },
        ..Default::default()
    };
    check(&p, &params).unwrap();
    let det = detect(&p.h, &params).unwrap();
    assert_eq!(det.bos, 1);
    assert_eq!(det.sinks.len(), 1);
    assert_eq!(det.sinks[0].label, Label::Secondary); // 7 < 12 - 3 = 9 and 7 > 2
}

#[test]
fn threshold_is_strict_and_absolute() {
    // Two layers, BOS = e_0; token 1 at cos 0.9 - 1e-9 (not flagged at tau = 0.9),
    // token 2 at cos -0.9 + tiny (not flagged), token 3 at -0.95 (flagged).
    let d = 2;
    let mk = |c: f64| [c, (1.0 - c * c).sqrt()];
    let mut data = Vec::new();
    for _ in 0..2 {
        data.extend([1.0, 0.0]);
        data.extend(mk(0.9 - 1e-9));
        data.extend(mk(-0.9 + 1e-9));
        data.extend(mk(-0.95));
    }
    let h = HiddenStates::<f64>::new(2, 4, d, data).unwrap();
    let p = DetectorParams {
        window: WindowMode::AllLayers,
        ..Default::default()
    };
    let det = detect(&h, &p).unwrap();
    assert_eq!(
        det.sinks.iter().map(|s| s.position).collect::<Vec<_>>(),
        vec![3]
    );
    let p = DetectorParams { tau: 0.85, ..p };
    assert_eq!(detect(&h, &p).unwrap().sinks.len(), 3);
}

fn plan_strategy() -> impl Strategy<
    Value = (
        u64,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        f64,
        usize,
        bool,
    ),
> {
    (
        any::<u64>(),
        6usize..=24,   // L
        6usize..=40,   // T
        4usize..=40,   // d
        1usize..=4,    // window start
        0usize..=30,   // window length (clipped)
        0usize..=20,   // bos margin
        0usize..=5,    // noise max
        0.55f64..0.94, // tau, strictly between the ordinary (<= 0.5) and planted (>= 0.95) ranges
        0usize..=1,    // BOS position
        any::<bool>(), // window mode
    )
}

proptest! {
    // 64 cases of at most 24 x 40 x 40 values: well under a second in total.
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn every_planted_sink_is_found_and_nothing_else(
        (seed, l, t, d, ws, wl, margin, noise_max, tau, bos, all) in plan_strategy()
    ) {
        let ws = ws.min(l - 2);
        let we = (ws + 1 + wl).min(l - 1);
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let mut plan = BTreeMap::new();
        for pos in bos + 1..t {
            if rng.random::<f64>() < 0.4 {
                let sign = if rng.random::<bool>() { 1.0 } else { -1.0 };
                let layers: Vec<usize> = if rng.random::<bool>() {
                    let a = rng.random_range(0..l);
                    let b = rng.random_range(a..l);
                    (a..=b).collect()
                } else {
                    (0..l).filter(|_| rng.random::<f64>() < 0.4).collect()
                };
                plan.insert(pos, (sign, layers));
            }
        }
        let p = build(seed, (l, t, d), (ws, we), bos, plan);
        let params = DetectorParams {
            tau,
            bos_candidates: if bos == 0 { vec![0] } else { vec![0, 1] },
            window: if all { WindowMode::AllLayers } else { WindowMode::BosNormJumps },
            labels: LabelRule { bos_margin: margin, noise_max },
            ..DetectorParams::default()
        };
        prop_assert!(check(&p, &params).is_ok(), "{}", check(&p, &params).unwrap_err());
    }
}
