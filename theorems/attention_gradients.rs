//! # The hand-written backward pass of the attention block is the gradient
//!
//! Statement. For the block of docs/theory.md §1 — any of {full, factored} $W_{QK}$ and
//! $W_{VO}$, {causal, bidirectional} mask, {identity, RMSNorm, LayerNorm},
//! {pre, post}-norm, with or without residual — and the scalar loss
//! $L = \sum_{ij} R_{ij} Y_{ij}$ for a fixed random $R$, the gradients returned by
//! `Block::backward` equal the central finite differences
//! $(L(\theta + h e) - L(\theta - h e)) / 2h$ of every parameter and input entry.
//!
//! Tolerance. Central differences have truncation error $O(h^2 \|L'''\|)$ and
//! rounding error $O(\epsilon_{64} |L| / h)$. With $h = 10^{-5}$ and well-conditioned
//! inputs both are below $10^{-8}$; near-degenerate LayerNorm inputs (tiny variance)
//! make $L'''$ large, so we extrapolate (Richardson, steps $h$ and $h/2$) and allow
//! $|g - g_{fd}| \le 10^{-6}(1+|g|) + |g_h - g_{h/2}|$, the second term being the
//! measured truncation error of the coarse step (an upper bound on what remains).

use faer::Mat;
use proptest::prelude::*;
use rand::{RngExt, SeedableRng, rngs::StdRng};
use sinklab::attention::*;

fn rand_mat(rng: &mut StdRng, r: usize, c: usize, s: f64) -> Mat<f64> {
    Mat::from_fn(r, c, |_, _| s * (rng.random::<f64>() * 2.0 - 1.0))
}

fn loss(b: &Block, x: &Mat<f64>, r: &Mat<f64>) -> f64 {
    let y = b.forward(x.as_ref()).output;
    let mut s = 0.0;
    for i in 0..y.nrows() {
        for j in 0..y.ncols() {
            s += y[(i, j)] * r[(i, j)];
        }
    }
    s
}

const H: f64 = 1e-5;

/// Accepts when the backward gradient matches the extrapolated difference to
/// $10^{-6}(1+|g|)$ plus the measured truncation estimate of the coarse step
/// (after extrapolation the remaining error is far below that estimate).
fn close(g: f64, fd: f64, trunc: f64) -> bool {
    (g - fd).abs() <= 1e-6 * (1.0 + g.abs()) + trunc
}

/// Checks every entry of a matrix parameter by central differences.
fn check_param(
    name: &str,
    grad: &Mat<f64>,
    mut perturb: impl FnMut(usize, usize, f64) -> f64,
) -> Result<(), String> {
    for i in 0..grad.nrows() {
        for j in 0..grad.ncols() {
            // Central differences at h and h/2, Richardson-extrapolated; their
            // difference estimates the truncation error of the step h, which grows
            // where the norm is ill-conditioned (small variance ⇒ large curvature).
            let fd_h = (perturb(i, j, H) - perturb(i, j, -H)) / (2.0 * H);
            let fd_h2 = (perturb(i, j, H / 2.0) - perturb(i, j, -H / 2.0)) / H;
            let fd = (4.0 * fd_h2 - fd_h) / 3.0;
            let trunc = (fd_h - fd_h2).abs();
            if !close(grad[(i, j)], fd, trunc) {
                return Err(format!(
                    "{name}[{i},{j}]: backward {} vs finite difference {fd}",
                    grad[(i, j)]
                ));
            }
        }
    }
    Ok(())
}

fn weight(rng: &mut StdRng, factored: bool, d: usize, r: usize) -> Weight {
    if factored {
        Weight::Factored {
            l: rand_mat(rng, d, r, 0.7),
            r: rand_mat(rng, d, r, 0.7),
        }
    } else {
        Weight::Full(rand_mat(rng, d, d, 0.5))
    }
}

fn run_case(seed: u64, t: usize, d: usize, cfg: u8) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let norm = match cfg % 3 {
        0 => Norm::Identity,
        1 => Norm::Rms { eps: 1e-6 },
        _ => Norm::Layer { eps: 1e-6 },
    };
    let placement = if cfg & 4 == 0 {
        Placement::Post
    } else {
        Placement::Pre
    };
    let mask = if cfg & 8 == 0 {
        Mask::Causal
    } else {
        Mask::Bidirectional
    };
    let residual = cfg & 16 == 0;
    let fq = cfg & 32 != 0;
    let fv = cfg & 64 != 0;
    let r = 2.min(d);
    let block = Block {
        head: Head {
            qk: weight(&mut rng, fq, d, r),
            vo: weight(&mut rng, fv, d, r),
            mask,
        },
        norm,
        placement,
        residual,
    };
    let x = rand_mat(&mut rng, t, d, 1.0);
    let rr = rand_mat(&mut rng, t, d, 1.0);
    let f = block.forward(x.as_ref());
    let g = block.backward(&f, rr.as_ref());
    check_param("X", &g.x, |i, j, h| {
        let mut xp = x.clone();
        xp[(i, j)] += h;
        loss(&block, &xp, &rr)
    })?;
    for (which, grad) in [("qk", &g.qk), ("vo", &g.vo)] {
        fn pick<'a>(b: &'a mut Block, which: &str) -> &'a mut Weight {
            if which == "qk" {
                &mut b.head.qk
            } else {
                &mut b.head.vo
            }
        }
        match grad {
            WeightGrad::Full(gw) => check_param(which, gw, |i, j, h| {
                let mut b = block.clone();
                if let Weight::Full(w) = pick(&mut b, which) {
                    w[(i, j)] += h;
                }
                loss(&b, &x, &rr)
            })?,
            WeightGrad::Factored { l, r } => {
                check_param(&format!("{which}.l"), l, |i, j, h| {
                    let mut b = block.clone();
                    if let Weight::Factored { l, .. } = pick(&mut b, which) {
                        l[(i, j)] += h;
                    }
                    loss(&b, &x, &rr)
                })?;
                check_param(&format!("{which}.r"), r, |i, j, h| {
                    let mut b = block.clone();
                    if let Weight::Factored { r, .. } = pick(&mut b, which) {
                        r[(i, j)] += h;
                    }
                    loss(&b, &x, &rr)
                })?;
            }
        }
    }
    Ok(())
}

#[test]
fn every_configuration_once() {
    // Every combination of norm (cfg % 3) × placement × mask × residual × factoring.
    for cfg in 0..128u8 {
        run_case(1000 + cfg as u64, 4, 3, cfg).unwrap_or_else(|e| panic!("cfg {cfg}: {e}"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0001), failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn backward_matches_finite_differences(seed in any::<u64>(), t in 1usize..6, d in 2usize..5, cfg in 0u8..128) {
        prop_assert!(run_case(seed, t, d, cfg).is_ok(), "{:?}", run_case(seed, t, d, cfg));
    }
}

#[test]
fn a_wrong_gradient_is_caught() {
    // The check must be able to fail: flip the sign of the VO gradient's
    // contribution by using the transpose of the true gradient of a non-symmetric case.
    let mut rng = StdRng::seed_from_u64(7);
    let block = Block {
        head: Head {
            qk: weight(&mut rng, false, 3, 2),
            vo: weight(&mut rng, false, 3, 2),
            mask: Mask::Causal,
        },
        norm: Norm::Rms { eps: 1e-6 },
        placement: Placement::Post,
        residual: true,
    };
    let x = rand_mat(&mut rng, 4, 3, 1.0);
    let rr = rand_mat(&mut rng, 4, 3, 1.0);
    let f = block.forward(x.as_ref());
    let g = block.backward(&f, rr.as_ref());
    let WeightGrad::Full(gvo) = g.vo else {
        unreachable!()
    };
    let wrong = gvo.transpose().to_owned();
    let res = check_param("vo (transposed)", &wrong, |i, j, h| {
        let mut b = block.clone();
        if let Weight::Full(w) = &mut b.head.vo {
            w[(i, j)] += h;
        }
        loss(&b, &x, &rr)
    });
    assert!(
        res.is_err(),
        "a transposed gradient passed the finite-difference check"
    );
}

// ---------------------------------------------------------------------------
// The explicit switches of the training model (docs/theory.md §11).
//
// Statement. For the training model of `sinklab::train::model` with a learned
// sink logit $s$ per head ($A_{ij} = e^{z_{ij}} / (e^{s} + \sum_k e^{z_{ik}})$,
// the sink column carrying no value), an output gate $G = \sigma(h W_g + b_g)$
// (per head or per output coordinate) multiplying the head output, or both, in
// direct and factored form, with and without the BOS key masked, MLP and depth,
// the gradients of `Model::backward` equal the central finite differences of
// `Model::loss` for every parameter entry ($s$, $W_g$, $b_g$ included; the flow
// into the inputs is checked through the embeddings and through the layers
// below). Same tolerance and Richardson estimate as above.
// ---------------------------------------------------------------------------

use sinklab::train::{AttnForm, GateForm, Model, ModelConfig, Switches};

/// Enumerates the switch variants: bit 0 sink logit, bits 1–2 gate
/// (0 off, 1 per head, 2 element-wise), bit 3 factored, bit 4 BOS key masked,
/// bit 5 a second layer with an MLP.
fn switch_config(v: u8) -> ModelConfig {
    let gate = match (v >> 1) & 3 {
        0 => GateForm::Off,
        1 => GateForm::Head,
        _ => GateForm::Elementwise,
    };
    let two = v & 32 != 0;
    ModelConfig {
        vocab: 5,
        d: 4,
        max_len: 6,
        layers: if two { 2 } else { 1 },
        attn: if v & 8 != 0 {
            AttnForm::Factored { r: 3 }
        } else {
            AttnForm::Direct
        },
        mlp_hidden: if two { 3 } else { 0 },
        mask_bos_key: v & 16 != 0,
        init_scale: 1.0,
        switches: Switches {
            sink_logit: v & 1 != 0,
            gate,
            ..Switches::OFF
        },
    }
}

/// The variants with at least one switch (gate codes 0–2 only).
fn switch_variants() -> impl Iterator<Item = u8> {
    (0..64u8).filter(|v| (v >> 1) & 3 != 3 && (v & 1 != 0 || (v >> 1) & 3 != 0))
}

fn model_loss(m: &Model<f64>, toks: &[u32], b: usize, t: usize, w: &[f64]) -> f64 {
    m.loss(&m.forward(toks, b, t).unwrap(), w)
}

/// A seeded model of variant `v` (switch parameters drawn away from their initial
/// zeros, so every term of their gradients is exercised), a batch and its loss weights.
fn switch_case(seed: u64, v: u8) -> (Model<f64>, Vec<u32>, usize, usize, Vec<f64>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m: Model<f64> = Model::new(switch_config(v), &mut rng).unwrap();
    for (k, name) in m.names.clone().iter().enumerate() {
        if name.ends_with(".sink") || name.ends_with(".bg") {
            let (r, c) = (m.params[k].nrows(), m.params[k].ncols());
            m.params[k] = rand_mat(&mut rng, r, c, 1.5);
        }
    }
    let (b, t) = (2, 5);
    let toks: Vec<u32> = (0..b * t).map(|_| rng.random_range(0..5)).collect();
    let w: Vec<f64> = (0..b * t)
        .map(|r| {
            if r % t + 1 < t {
                0.5 + rng.random::<f64>()
            } else {
                0.0
            }
        })
        .collect();
    (m, toks, b, t, w)
}

fn run_switch_case(seed: u64, v: u8) -> Result<(), String> {
    let (m, toks, b, t, w) = switch_case(seed, v);
    let grads = m.backward(&m.forward(&toks, b, t).unwrap(), &w);
    for (k, g) in grads.iter().enumerate() {
        check_param(&m.names[k], g, |i, j, h| {
            let mut mp = m.clone();
            mp.params[k][(i, j)] += h;
            model_loss(&mp, &toks, b, t, &w)
        })?;
    }
    Ok(())
}

#[test]
fn every_switch_variant_once() {
    let mut n = 0;
    for v in switch_variants() {
        run_switch_case(2000 + v as u64, v).unwrap_or_else(|e| panic!("variant {v}: {e}"));
        n += 1;
    }
    // 2 sink × 3 gate − 1 (neither) = 5 switch settings × 8 shapes.
    assert_eq!(n, 40);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0002), failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn switch_backward_matches_finite_differences(seed in any::<u64>(), i in 0usize..40) {
        let v = switch_variants().nth(i).unwrap();
        prop_assert!(run_switch_case(seed, v).is_ok(), "{:?}", run_switch_case(seed, v));
    }
}

#[test]
fn a_wrong_switch_gradient_is_caught() {
    // The check can fail on the switch parameters: drop the sink column's share of
    // the normaliser from ∂s (flip its sign) and scale ∂b_g, each must be rejected.
    let (m, toks, b, t, w) = switch_case(11, 1 | 2);
    let grads = m.backward(&m.forward(&toks, b, t).unwrap(), &w);
    for (k, name) in m.names.iter().enumerate() {
        if !(name.ends_with(".sink") || name.ends_with(".bg")) {
            continue;
        }
        let mut wrong = grads[k].clone();
        wrong[(0, 0)] = if name.ends_with(".sink") {
            -wrong[(0, 0)]
        } else {
            2.0 * wrong[(0, 0)]
        };
        assert!(wrong[(0, 0)] != grads[k][(0, 0)], "{name}: zero gradient");
        let res = check_param(name, &wrong, |i, j, h| {
            let mut mp = m.clone();
            mp.params[k][(i, j)] += h;
            model_loss(&mp, &toks, b, t, &w)
        });
        assert!(res.is_err(), "{name}: a wrong gradient passed");
    }
}
