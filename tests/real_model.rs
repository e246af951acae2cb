//! The native forward pass on synthetic GGUF models (seeded random weights, written with candle's
//! GGUF writer and read back by the real loader): invariants that any correct causal transformer
//! satisfies, checked without the real model cache.
//!
//! Tolerance 1e-5 relative where two f32 computations of the same quantity differ only in the
//! number of rows in a GEMM (blocking changes the summation order: errors ~ √d·2⁻²⁴ per op).

use sinklab::real::stats::StatsObserver;
use sinklab::runtime::arch::llama::unpermute_rows;
use sinklab::runtime::capture::{Capture, Captured};
use sinklab::runtime::forward::{Intervention, KvCache, Replace};
use sinklab::runtime::{RealError, load};
use sinklab::synth::{SynthShape, write_gguf};

fn synth(spec: &SynthShape, seed: u64) -> (tempfile::TempDir, sinklab::runtime::LoadedModel) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    write_gguf(&p, spec, seed).unwrap();
    let lm = load(&p).unwrap();
    (dir, lm)
}

fn rel(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

const TOKENS: [u32; 12] = [1, 5, 9, 3, 17, 22, 5, 9, 30, 2, 11, 7];

#[test]
fn causal_prefix_rows_do_not_depend_on_later_tokens() {
    for gemma in [false, true] {
        let spec = SynthShape {
            arch: if gemma { "gemma3" } else { "llama" },
            ..SynthShape::default()
        };
        let (_d, lm) = synth(&spec, 7);
        let full = lm.model.forward(&TOKENS, &mut (), None).unwrap();
        let d = lm.model.cfg.d_model;
        for k in [1, 5, 11] {
            let pre = lm.model.forward(&TOKENS[..k], &mut (), None).unwrap();
            let r = rel(&pre.hidden, &full.hidden[..k * d]);
            assert!(r < 1e-5, "gemma={gemma} prefix {k}: {r:e}");
        }
        // And a change of the last token changes the last row only.
        let mut other = TOKENS;
        other[11] = 33;
        let o = lm.model.forward(&other, &mut (), None).unwrap();
        assert!(rel(&o.hidden[..11 * d], &full.hidden[..11 * d]) < 1e-5);
        assert!(rel(&o.hidden[11 * d..], &full.hidden[11 * d..]) > 1e-3);
    }
}

#[test]
fn kv_cache_decoding_equals_the_full_pass() {
    for gemma in [false, true] {
        let spec = SynthShape {
            arch: if gemma { "gemma3" } else { "llama" },
            ctx: 64,
            ..SynthShape::default()
        };
        let (_d, lm) = synth(&spec, 11);
        let full = lm.model.forward(&TOKENS, &mut (), None).unwrap();
        let mut cache = KvCache::default();
        let d = lm.model.cfg.d_model;
        let first = lm
            .model
            .forward_cached(&TOKENS[..4], &mut cache, &mut (), None, true)
            .unwrap();
        assert!(rel(&first.hidden, &full.hidden[..4 * d]) < 1e-5);
        for (i, &t) in TOKENS.iter().enumerate().skip(4) {
            let o = lm
                .model
                .forward_cached(&[t], &mut cache, &mut (), None, true)
                .unwrap();
            let r = rel(&o.hidden, &full.hidden[i * d..(i + 1) * d]);
            assert!(r < 1e-5, "gemma={gemma} position {i}: {r:e}");
        }
        assert_eq!(cache.len, TOKENS.len());
    }
}

#[test]
fn sliding_window_hides_far_keys_in_local_gemma_layers() {
    // window = ctx/4 = 4 on local layers (l+1 not a multiple of 6): A_ij = 0 for i − j ≥ 4.
    let spec = SynthShape {
        arch: "gemma3",
        ctx: 16,
        ..SynthShape::default()
    };
    let (_d, lm) = synth(&spec, 3);
    let mut cap = Captured::new(Capture {
        attn: true,
        ..Capture::default()
    });
    lm.model.forward(&TOKENS, &mut cap, None).unwrap();
    let t = TOKENS.len();
    let a = cap.layers[0].attn.as_ref().unwrap();
    for h in 0..lm.model.cfg.n_head {
        for i in 0..t {
            let row = &a[(h * t + i) * t..(h * t + i + 1) * t];
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            for (j, &p) in row.iter().enumerate() {
                if j > i || i - j >= 4 {
                    assert_eq!(p, 0.0, "head {h} ({i},{j})");
                } else {
                    assert!(p > 0.0);
                }
            }
        }
    }
}

#[test]
fn identity_intervention_makes_the_head_output_its_own_value() {
    let spec = SynthShape::default();
    let (_d, lm) = synth(&spec, 5);
    let c = &lm.model.cfg;
    let (h, hk, dh) = (c.n_head, c.n_kv_head, c.head_dim);
    for with in [Replace::Identity, Replace::Uniform] {
        let mut cap = Captured::new(Capture {
            qkv: true,
            head_out: true,
            attn: true,
            ..Capture::default()
        });
        let iv = Intervention {
            layer: 1,
            head: 3,
            with,
        };
        lm.model.forward(&TOKENS, &mut cap, Some(iv)).unwrap();
        let lc = &cap.layers[1];
        let (v, o) = (lc.v.as_ref().unwrap(), lc.head_out.as_ref().unwrap());
        let g = 3 / (h / hk);
        for i in 0..TOKENS.len() {
            let oi = &o[i * h * dh + 3 * dh..i * h * dh + 4 * dh];
            let want: Vec<f32> = match with {
                Replace::Identity => v[i * hk * dh + g * dh..i * hk * dh + (g + 1) * dh].to_vec(),
                Replace::Uniform => (0..dh)
                    .map(|r| {
                        (0..=i).map(|j| v[j * hk * dh + g * dh + r]).sum::<f32>() / (i + 1) as f32
                    })
                    .collect(),
            };
            assert!(rel(oi, &want) < 1e-5, "{with:?} row {i}");
        }
        // Other heads keep a softmax pattern (not the identity): row 5 of head 0 is spread.
        let a = lc.attn.as_ref().unwrap();
        let t = TOKENS.len();
        assert!(a[5 * t + 5] < 0.999);
    }
}

#[test]
fn gguf_row_unpermutation_inverts_llama_cpp_permutation() {
    // llama.cpp: w.reshape(n_head, 2, dh/2, cols).swapaxes(1, 2): GGUF row h·dh + 2j + s holds HF row h·dh + s·dh/2 + j.
    let (nh, dh, cols) = (3, 8, 5);
    let hf: Vec<f32> = (0..nh * dh * cols).map(|v| v as f32).collect();
    let mut gg = vec![0f32; hf.len()];
    for h in 0..nh {
        for s in 0..2 {
            for j in 0..dh / 2 {
                let src = h * dh + s * dh / 2 + j;
                let dst = h * dh + 2 * j + s;
                gg[dst * cols..(dst + 1) * cols].copy_from_slice(&hf[src * cols..(src + 1) * cols]);
            }
        }
    }
    assert_eq!(unpermute_rows(&gg, nh, dh, cols), hf);
    assert_ne!(gg, hf);
}

#[test]
fn greedy_generation_with_cache_matches_argmax_of_full_passes() {
    let spec = SynthShape::default();
    let (_d, lm) = synth(&spec, 9);
    let out = lm.model.generate_greedy(&TOKENS[..5], 4, &mut ()).unwrap();
    assert_eq!(out.len(), 9);
    // Recompute each step without a cache.
    for k in 5..9 {
        let o = lm.model.forward(&out[..k], &mut (), None).unwrap();
        let d = lm.model.cfg.d_model;
        let lg = lm.model.logits(&o.normed[(k - 1) * d..]).unwrap();
        let am = lg
            .iter()
            .enumerate()
            .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
            .0 as u32;
        assert_eq!(out[k], am, "step {k}");
    }
}

#[test]
fn statistics_are_consistent_with_captured_tensors() {
    let spec = SynthShape::default();
    let (_d, lm) = synth(&spec, 13);
    let mut cap = Captured::new(Capture {
        hidden: true,
        attn: true,
        ..Capture::default()
    });
    let mut st = StatsObserver::default();
    struct Both<'a>(&'a mut Captured, &'a mut StatsObserver);
    impl sinklab::runtime::forward::LayerObserver for Both<'_> {
        fn layer(
            &mut self,
            m: &sinklab::runtime::pretrained::Pretrained,
            t: &sinklab::runtime::forward::LayerTensors<'_>,
        ) {
            self.0.layer(m, t);
            self.1.layer(m, t);
        }
    }
    lm.model
        .forward(&TOKENS, &mut Both(&mut cap, &mut st), None)
        .unwrap();
    let (t, d, h) = (TOKENS.len(), lm.model.cfg.d_model, lm.model.cfg.n_head);
    for l in 0..2 {
        let a = cap.layers[l].attn.as_ref().unwrap();
        let mean: f64 = (0..h)
            .map(|hh| (1..t).map(|i| a[(hh * t + i) * t] as f64).sum::<f64>() / (t - 1) as f64)
            .sum::<f64>()
            / h as f64;
        assert!((st.layers[l].attn_to_first.unwrap() - mean).abs() < 1e-12);
        let hid = cap.hidden(l).unwrap();
        let n0 = hid[..d]
            .iter()
            .map(|v| (*v as f64).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!((st.layers[l].hidden_norm_first - n0).abs() < 1e-9 * n0);
        let s = &st.layers[l];
        assert!((0.0..=1.0).contains(&s.bos_cos_frac_nonpos));
        assert!(s.bos_cos_q[0] <= s.bos_cos_q[1] && s.bos_cos_q[1] <= s.bos_cos_q[2]);
    }
}

#[test]
fn input_errors_are_typed_not_panics() {
    let spec = SynthShape {
        ctx: 16,
        ..SynthShape::default()
    };
    let (_d, lm) = synth(&spec, 1);
    let long: Vec<u32> = (0..17).map(|i| i % 30).collect();
    let e = lm.model.forward(&long, &mut (), None).unwrap_err();
    assert!(
        matches!(e, RealError::Input(_))
            && e.to_string().contains("longer than the model's context"),
        "{e}"
    );
    let e = lm.model.forward(&[1, 99], &mut (), None).unwrap_err();
    assert!(e.to_string().contains("outside the vocabulary"), "{e}");
    let e = lm.model.forward(&[], &mut (), None).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    let e = lm
        .model
        .forward(
            &[1, 2],
            &mut (),
            Some(Intervention {
                layer: 9,
                head: 0,
                with: Replace::Uniform,
            }),
        )
        .unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

/// Records how a pass showed its maps to an observer that does not ask for the layer's.
#[derive(Default)]
struct MapsSeen {
    heads: usize,
    empty_layer_maps: usize,
}

impl sinklab::runtime::forward::LayerObserver for MapsSeen {
    fn layer(
        &mut self,
        _: &sinklab::runtime::pretrained::Pretrained,
        t: &sinklab::runtime::forward::LayerTensors<'_>,
    ) {
        self.empty_layer_maps += t.attn.is_empty() as usize;
    }

    fn wants_layer_maps(&self) -> bool {
        false
    }

    fn head(
        &mut self,
        _: &sinklab::runtime::pretrained::Pretrained,
        m: &sinklab::runtime::forward::HeadMap<'_>,
    ) {
        assert_eq!(m.map.len(), m.t * m.t_keys);
        self.heads += 1;
    }
}

/// The statistics computed head by head (no observer reads the layer's maps, and they exceed
/// the small-maps size: 4 heads × 200² floats) are those computed from the whole layer's maps
/// (a capture of the maps forces that mode) to the bit: the two modes run the same blocks of
/// the same products. And the A1 corollary of the layer inputs streamed from the pass equals
/// the one computed from captured inputs afterwards.
#[test]
fn head_by_head_maps_give_the_statistics_of_whole_layer_maps() {
    use sinklab::real::{analysis, head_space};
    for arch in ["llama", "gemma3"] {
        let spec = SynthShape {
            arch,
            ctx: 256,
            ..SynthShape::default()
        };
        let (_d, lm) = synth(&spec, 13);
        let tokens: Vec<u32> = (0..200).map(|i| (i * 7 % 39 + 1) as u32).collect();
        let mut seen = MapsSeen::default();
        let per_head = analysis::analyze(&lm, &tokens, false, &mut seen).unwrap();
        let (l, h) = (lm.model.cfg.n_layer, lm.model.cfg.n_head);
        assert_eq!(
            (seen.heads, seen.empty_layer_maps),
            (l * h, l),
            "{arch}: not head by head"
        );
        let mut cap = Captured::new(Capture {
            attn: true,
            ..Capture::default()
        });
        let whole = analysis::analyze(&lm, &tokens, false, &mut cap).unwrap();
        assert_eq!(
            cap.layers[0].attn.as_ref().map(Vec::len),
            Some(h * 200 * 200)
        );
        assert!(per_head.layers.iter().all(|s| s.heads.len() == h), "{arch}");
        assert_eq!(
            serde_json::to_string(&per_head.layers).unwrap(),
            serde_json::to_string(&whole.layers).unwrap(),
            "{arch}"
        );
        let inputs = head_space::inputs(&lm.model, &tokens).unwrap();
        assert_eq!(inputs.len(), per_head.a1.len());
        for (x, c) in inputs.iter().zip(&per_head.a1) {
            assert_eq!(
                format!("{:?}", head_space::corollary(x)),
                format!("{c:?}"),
                "{arch}"
            );
        }
    }
}
