//! The causal dose–response of `sinklab secondary --dose-response` on SmolLM2 (skipped with a
//! message when the model is not cached, a failure under `SINKLAB_REQUIRE_MODELS=1`), on one
//! short prompt: an addition of zero reproduces the model's own forward pass exactly (every
//! captured f32 equal), the r = 0 point is the unpatched measurement, and the thresholds and
//! monotonicity flags are what the measured points say.

#[path = "support/models.rs"]
mod models;
use models::model_or_skip;
use sinklab::runtime::load;
use sinklab::runtime::tokenizer::Bos;
use sinklab::secondary::DetectorParams;
use sinklab::secondary::dose::{ATTN_REL_TOL, DoseOptions, dose_response};
use sinklab::secondary::native::{Addition, LastLayer, capture, capture_with};

#[test]
fn dose_response_is_measured_and_zero_is_the_unpatched_run() {
    let Some(path) = model_or_skip("smollm2") else {
        return;
    };
    let lm = load(&path).unwrap();
    let tok = lm.tok.as_ref().unwrap();
    let ids = tok
        .encode("Compute 17 times 23, step by step.", Bos::Yes)
        .unwrap();
    let nl = lm.model.cfg.n_layer;
    let d = lm.model.cfg.d_model;
    // Zero addition through the block-by-block path = the model's forward pass, bit for bit.
    let (a0, e0) = capture(&lm, &ids, true, LastLayer::FinalNorm).unwrap();
    let zero = Addition {
        layer: nl / 2,
        position: 3,
        delta: vec![0.0; d],
    };
    let (a1, e1) = capture_with(&lm, &ids, true, LastLayer::FinalNorm, Some(&zero)).unwrap();
    assert_eq!(a0.hidden, a1.hidden);
    assert_eq!(a0.mlp_out, a1.mlp_out);
    assert_eq!(a0.keys, a1.keys);
    assert_eq!(e0, e1);
    let p = DetectorParams::default();
    let o = DoseOptions {
        grid: vec![0.0, 0.5, 2.0],
        tokens: 1,
        ..DoseOptions::default()
    };
    let res = dose_response(&lm, std::slice::from_ref(&ids), &p, &o, &mut |_: &str| {}).unwrap();
    assert_eq!(res.curves.len(), 2);
    assert_eq!(
        (res.curves[0].direction, res.curves[1].direction),
        ("bos", "random")
    );
    let pos = res.curves[0].position;
    // r = 0: the unpatched run's own numbers.
    let sc = e0.sink_scores.as_ref().unwrap();
    let want_att = (nl / 2 + 1..nl).map(|l| sc[l][pos]).sum::<f64>() / (nl - nl / 2 - 1) as f64;
    for c in &res.curves {
        assert_eq!(c.points[0].attention, want_att);
        assert!(!c.points[0].sink, "the patched token was chosen ordinary");
        let life: Vec<usize> = c.points.iter().map(|q| q.lifetime).collect();
        assert_eq!(c.lifetime_monotone, life.windows(2).all(|w| w[1] >= w[0]));
        let att: Vec<f64> = c.points.iter().map(|q| q.attention).collect();
        let amax = att.iter().cloned().fold(0.0, f64::max);
        assert_eq!(
            c.attention_monotone,
            att.windows(2).all(|w| w[1] >= w[0] - ATTN_REL_TOL * amax)
        );
        assert_eq!(c.threshold, c.points.iter().find(|q| q.sink).map(|q| q.r));
    }
    // The BOS-direction addition moves the token: its received attention at r = 2 differs.
    assert_ne!(res.curves[0].points[2].attention, want_att);
}
