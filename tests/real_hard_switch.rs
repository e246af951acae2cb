//! A3 on real heads (`real::hard_switch_real`): structure and invariants of the mass split
//! through the forward pass, on a tiny seeded model and on Qwen2.5-Coder-0.5B with its no-sink
//! first token (skipped when not fetched; required under `SINKLAB_REQUIRE_MODELS=1`). The split
//! of a single row, where the answer is constructed (a zero-value key at position 0 or later,
//! and a zero by cancellation), is tested in the module's unit tests.
//!
//! Tolerances: the three shares are divided by the row total in f64, so they sum to 1 up to a
//! few ulps (1e-12); the triangle inequality a_i ≥ z_i holds for the f32 head output up to f32
//! rounding of the sum over keys (relative 1e-4 covers T ≤ 64 terms of 2⁻²⁴ each, with margin);
//! the sink share against the captured attention: the same f32 numbers, divided by the same
//! f64 total (1e-12).

#[path = "support/models.rs"]
mod models;

use sinklab::real::hard_switch_real::{
    PairMass, RANDOM_PAIRS, Run, SMALL, STATISTICS, analyze, control_tokens, study,
};
use sinklab::runtime::capture::{Capture, Captured};
use sinklab::runtime::load;
use sinklab::runtime::pretrained::Pretrained;
use sinklab::synth::{SynthShape, write_gguf};

/// The invariants of one run: pair count, shares summing to 1, a ≥ z, off pairs below the
/// threshold, the summaries' counts.
fn check_run(m: &Pretrained, r: &Run) {
    let c = &m.cfg;
    assert_eq!(r.n_pairs, c.n_layer * c.n_head * (r.n_tokens - 1));
    assert_eq!(r.heads.len(), c.n_layer * c.n_head);
    assert_eq!(r.off.n, r.off_pairs.len());
    assert_eq!(r.random.n, RANDOM_PAIRS.min(r.n_pairs));
    assert!(r.off_sink_value_low <= r.off.n);
    for s in [&r.off, &r.random] {
        assert_eq!(s.dominant.iter().sum::<usize>(), s.n);
        assert!(s.top_key_mode.1 <= s.n);
        if s.n > 0 {
            assert!(
                (s.sink + s.learned_sink + s.low_value + s.spread - 1.0).abs() < 1e-9,
                "{s:?}"
            );
            assert!((0.0..=1.0).contains(&s.entropy_norm), "{s:?}");
        }
    }
    let ok = |p: &PairMass, off: bool| {
        (p.sink + p.learned_sink + p.low_value + p.spread - 1.0).abs() < 1e-12
            && [p.sink, p.learned_sink, p.low_value, p.spread, p.zero_value]
                .iter()
                .all(|x| (0.0..=1.0 + 1e-12).contains(x))
            && p.zero_value <= p.sink + p.learned_sink + p.low_value + 1e-12
            && (m.layers[p.layer].sinks.is_some() || p.learned_sink == 0.0)
            && p.attended_value >= p.size * (1.0 - 1e-4)
            && (!off || p.size <= SMALL)
            && p.query >= 1
            && p.top_key <= p.query
    };
    if let Some(p) = r.off_pairs.iter().find(|p| !ok(p, true)) {
        panic!("off pair breaks an invariant: {p:?}");
    }
    if let Some(p) = r.random_pairs.iter().find(|p| !ok(p, false)) {
        panic!("random pair breaks an invariant: {p:?}");
    }
    // The off pairs are exactly the sampled pairs below the threshold.
    let sampled_off = r.random_pairs.iter().filter(|p| p.size <= SMALL).count();
    assert!(sampled_off <= r.off.n);
}

/// The sink share of the first off pair (or the first sampled pair when none is off) equals
/// the captured attention to position 0.
fn check_against_capture(m: &Pretrained, tokens: &[u32], r: &Run) {
    let p = r.off_pairs.first().or(r.random_pairs.first()).unwrap();
    let mut cap = Captured::new(Capture {
        attn: true,
        ..Capture::default()
    });
    m.forward(tokens, &mut cap, None).unwrap();
    let t = tokens.len();
    let a = cap.layers[p.layer].attn.as_ref().unwrap();
    let row = &a[(p.head * t + p.query) * t..(p.head * t + p.query) * t + p.query + 1];
    let total: f64 = row.iter().map(|&x| x as f64).sum();
    // A head with a learned sink keeps its row as it is (the rest is the sink logit's).
    let total = if m.layers[p.layer].sinks.is_some() {
        assert!((1.0 - total - p.learned_sink).abs() < 1e-12, "{p:?}");
        1.0
    } else {
        total
    };
    assert!(
        (row[0] as f64 / total - p.sink).abs() < 1e-12,
        "{p:?} against {}",
        row[0] as f64 / total
    );
}

/// A tiny seeded model: every invariant, and the same seed gives the same random sample.
#[test]
fn invariants_on_a_tiny_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_gguf(&path, &SynthShape::default(), 11).unwrap();
    let lm = load(&path).unwrap();
    let toks: Vec<u32> = (0..24).map(|i| 1 + (i * 7) % 39).collect();
    let r = analyze(&lm.model, &toks, 5).unwrap();
    check_run(&lm.model, &r);
    check_against_capture(&lm.model, &toks, &r);
    let again = analyze(&lm.model, &toks, 5).unwrap();
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        serde_json::to_string(&again).unwrap()
    );
    // Too short an input is refused.
    assert!(analyze(&lm.model, &toks[..2], 5).is_err());
}

/// gpt-oss with a strong learned sink: every pair's learned-sink share is its row's missing
/// mass (checked against the captured maps), shares still sum to 1, and the learned sink is the
/// dominant destination of some pairs; the same weights with sink logits of −1e4 report none.
#[test]
fn a_learned_sink_is_a_destination_on_gpt_oss() {
    let fixture = |n: &str| {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/tiny/{n}"))
    };
    let toks: Vec<u32> = (0..12).map(|i| 1 + (i * 5) % 37).collect();
    let lm = load(&fixture("gpt_oss_strong_sink")).unwrap();
    let r = analyze(&lm.model, &toks, 3).unwrap();
    check_run(&lm.model, &r);
    check_against_capture(&lm.model, &toks, &r);
    assert!(r.random.learned_sink > 0.05, "{:?}", r.random);
    assert!(r.random.dominant[1] > 0, "{:?}", r.random);
    let lm = load(&fixture("gpt_oss_no_sink")).unwrap();
    let r = analyze(&lm.model, &toks, 3).unwrap();
    check_run(&lm.model, &r);
    // Sink logits of −1e4: rows sum to 1 up to f32 rounding (a few ulps over 12 keys).
    assert!(r.random.learned_sink < 1e-6, "{:?}", r.random);
    assert_eq!(r.random.dominant[1], 0);
}

/// Qwen2.5-Coder-0.5B, the report's text with `<|endoftext|>` (no sink) as the control: both
/// runs satisfy the invariants, the control input is the same length with the token at
/// position 0, and each comparison has an AUC inside its interval for every statistic that has
/// pairs on both sides.
#[test]
fn structure_on_qwen_with_the_no_sink_control() {
    let Some(path) = models::model_or_skip("qwen2.5-coder-0.5b") else {
        return;
    };
    let lm = load(&path).unwrap();
    let tok = lm.tok.as_ref().unwrap();
    let mut toks = tok
        .encode(
            sinklab::real::section::REPORT_TEXT,
            sinklab::runtime::tokenizer::Bos::Auto,
        )
        .unwrap();
    toks.truncate(32);
    let eot = sinklab::real::head_space::first_token(&lm, "<|endoftext|>").unwrap();
    let s = study(&lm.model, &toks, Some(eot), 0).unwrap();
    check_run(&lm.model, &s.sink);
    let n = s.nosink.as_ref().unwrap();
    check_run(&lm.model, n);
    let ct = control_tokens(&toks, lm.model.cfg.bos_id, eot);
    assert_eq!((ct.len(), ct[0], n.first_token), (toks.len(), eot, eot));
    check_against_capture(&lm.model, &toks, &s.sink);
    check_against_capture(&lm.model, &ct, n);
    assert_eq!(s.comparisons.len(), 3);
    for c in &s.comparisons {
        if s.sink.off.n > 0 && n.off.n > 0 {
            assert_eq!(c.separations.len(), STATISTICS.len(), "{}", c.name);
        }
        for x in &c.separations {
            assert!(
                x.auc.lo <= x.auc.value
                    && x.auc.value <= x.auc.hi
                    && (0.0..=1.0).contains(&x.auc.value),
                "{}: {x:?}",
                c.name
            );
        }
    }
}
