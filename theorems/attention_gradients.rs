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
