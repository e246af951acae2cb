//! Weights kept in their storage format (`sinklab::runtime::weights`): quantized GGUF blocks and
//! f16/bf16 safetensors, dequantized inside the product (or, for a few rows of Q8_0/Q4_1, in
//! the fused kernels of `sinklab::quant::fused`, which the t = 1 and 3 product checks below
//! exercise under the same bound).
//!
//! Tolerances. Every f32 dot product of length k computed in any summation order lies within
//! $\gamma_k\sum_i|x_i w_i|$ of the real value ($\gamma_k = ku/(1-ku)$, $u = 2^{-24}$, the standard
//! forward error bound; FMA only tightens it), so two f32 products of the same values differ by
//! at most twice that: the tiled product is held to exactly this bound against an f64
//! reference. Row slices and permutations move bytes, so they are compared exactly. The q8
//! product is held to `q8_bound` (derivation in its doc comment) and must differ from the exact
//! one somewhere, so the check can fail both ways. Whole-model comparisons (two layers, tiny
//! shapes) use 1e-4 relative to the largest logit: each projection differs by ≤ 2γ_k ≈ 3e-5
//! relative (k ≤ 256), and two pre-norm layers of random N(0, 1/k) weights do not amplify it
//! by more than a small factor (the measured gap is printed).

#[path = "support/cli.rs"]
mod cli;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use cli::bin;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sinklab::real::q8_deviation;
use sinklab::runtime::arch::llama::unpermute_rows;
use sinklab::runtime::load;
use sinklab::runtime::pretrained::Pretrained;
use sinklab::runtime::weights::{Bytes, Matmul, Storage, StoredMatrix, q8_bound, scale_offsets};
use sinklab::synth::{SynthDtype, SynthShape, write_gguf};
use std::path::Path;

const QUANT: &[GgmlDType] = &[
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::Q8K,
];

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    // Mostly uniform, with a few large entries so block scales vary.
    (0..n)
        .map(|i| {
            let v = rng.random::<f32>() * 2.0 - 1.0;
            if i % 37 == 5 { 6.0 * v } else { v }
        })
        .collect()
}

/// A quantized `[rows, cols]` matrix (through candle's quantizer) and candle's own dequantization.
fn quantized(dt: GgmlDType, rows: usize, cols: usize, seed: u64) -> (StoredMatrix, Vec<f32>) {
    let t = Tensor::from_vec(random(rows * cols, seed), (rows, cols), &Device::Cpu).unwrap();
    let q = QTensor::quantize(&t, dt).unwrap();
    let bytes = q.data().unwrap();
    let w = StoredMatrix::from_bytes(dt, Bytes::owned(&bytes), rows, cols).unwrap();
    let deq = q
        .dequantize(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    (w, deq)
}

fn gamma(k: usize) -> f64 {
    let ku = k as f64 * 2f64.powi(-24);
    ku / (1.0 - ku)
}

/// `|y − x Wᵀ|` (f64 reference) within `γ_k Σ|x||w|` for every entry.
fn assert_f32_product(
    y: &[f32],
    x: &[f32],
    w: &[f32],
    t: usize,
    rows: usize,
    cols: usize,
    what: &str,
) {
    for i in 0..t {
        for r in 0..rows {
            let (xi, wr) = (&x[i * cols..(i + 1) * cols], &w[r * cols..(r + 1) * cols]);
            let exact: f64 = xi.iter().zip(wr).map(|(a, b)| *a as f64 * *b as f64).sum();
            let mag: f64 = xi
                .iter()
                .zip(wr)
                .map(|(a, b)| (*a as f64 * *b as f64).abs())
                .sum();
            let got = y[i * rows + r] as f64;
            assert!(
                (got - exact).abs() <= gamma(cols) * mag,
                "{what}: entry ({i}, {r}) = {got}, exact {exact}, bound {}",
                gamma(cols) * mag
            );
        }
    }
}

#[test]
fn block_dequantization_is_candles() {
    for (s, &dt) in QUANT.iter().enumerate() {
        let (w, deq) = quantized(dt, 5, 512, 10 + s as u64);
        assert!(w.is_quantized() && w.dtype() == dt);
        assert_eq!(
            w.storage_bytes(),
            5 * 512 / dt.block_size() * dt.type_size()
        );
        assert_eq!(&*w.to_f32(), &deq[..], "{dt:?}");
        let mut row = vec![0f32; 512];
        w.row_f32(3, &mut row);
        assert_eq!(&row[..], &deq[3 * 512..4 * 512], "{dt:?} row 3");
    }
}

#[test]
fn tiled_product_equals_dequantize_then_multiply_to_f32_rounding() {
    // 70 rows: two tiles, the second partial. t = 240 crosses the parallel threshold
    // (70·256·240 > 2²²); t = 1 and 3 stay sequential.
    for (s, &dt) in QUANT.iter().enumerate() {
        let (w, deq) = quantized(dt, 70, 256, 40 + s as u64);
        for t in [1usize, 3, 240] {
            let x = random(t * 256, 90 + t as u64);
            let y = w.matmul_t(&x, t, Matmul::Exact);
            assert_f32_product(&y, &x, &deq, t, 70, 256, &format!("{dt:?} t={t}"));
        }
    }
}

#[test]
fn row_slices_and_permutations_on_bytes_equal_those_on_f32() {
    let mut rng = StdRng::seed_from_u64(7);
    for (s, &dt) in QUANT.iter().enumerate() {
        let (rows, cols) = (24, 256);
        let (w, deq) = quantized(dt, rows, cols, 60 + s as u64);
        let sl = w.rows(5, 11);
        assert_eq!((sl.n_rows(), sl.n_cols()), (11, cols));
        assert_eq!(
            &*sl.to_f32(),
            &deq[5 * cols..16 * cols],
            "{dt:?} rows 5..16"
        );
        let mut perm: Vec<usize> = (0..rows).collect();
        for i in (1..rows).rev() {
            perm.swap(i, rng.random_range(0..=i));
        }
        let p = w.permute_rows(&perm);
        let want: Vec<f32> = perm
            .iter()
            .flat_map(|&r| deq[r * cols..(r + 1) * cols].to_vec())
            .collect();
        assert_eq!(&*p.to_f32(), &want[..], "{dt:?} permutation");
        // llama.cpp's q/k interleaving undone on bytes = undone on the f32 matrix.
        let un = w.permute_rows(&sinklab::runtime::arch::llama::unpermute_perm(3, 8));
        assert_eq!(
            &*un.to_f32(),
            &unpermute_rows(&deq, 3, 8, cols)[..],
            "{dt:?}"
        );
    }
}

#[test]
fn q8_product_is_within_its_rounding_bound_and_not_exact() {
    for (s, &dt) in QUANT.iter().enumerate() {
        let (rows, cols) = (40, 512);
        let (w, deq) = quantized(dt, rows, cols, 120 + s as u64);
        let t = 3;
        let x = random(t * cols, 130 + s as u64);
        let exact = w.matmul_t(&x, t, Matmul::Exact);
        let q8 = w.matmul_t(&x, t, Matmul::Q8);
        let mut max_dev = 0f64;
        let mut max_ratio = 0f64;
        for i in 0..t {
            for r in 0..rows {
                let b = q8_bound(
                    dt,
                    &deq[r * cols..(r + 1) * cols],
                    &x[i * cols..(i + 1) * cols],
                );
                let dev = (q8[i * rows + r] as f64 - exact[i * rows + r] as f64).abs();
                assert!(dev <= b, "{dt:?} ({i}, {r}): |Δ| {dev} > bound {b}");
                max_dev = max_dev.max(dev);
                max_ratio = max_ratio.max(dev / b);
            }
        }
        assert!(
            max_dev > 0.0,
            "{dt:?}: q8 equals exact: the activations were not quantized"
        );
        eprintln!("{dt:?}: max |Δ| {max_dev:.3e}, max |Δ|/bound {max_ratio:.3}");
    }
}

#[test]
fn block_scales_are_exactly_the_fields_that_make_values_non_finite() {
    for &dt in QUANT {
        let (w, _) = quantized(dt, 1, dt.block_size(), 5);
        let Storage::Quantized { bytes, .. } = w.storage() else {
            panic!("not quantized")
        };
        let blk = bytes.as_slice().to_vec();
        // Q8_K's scale is an f32; the other types' are f16.
        let (step, nan): (usize, &[u8]) = if dt == GgmlDType::Q8K {
            (4, &f32::NAN.to_le_bytes())
        } else {
            (2, &half::f16::NAN.to_le_bytes())
        };
        for o in (0..blk.len()).step_by(step) {
            let mut b = blk.clone();
            b[o..o + step].copy_from_slice(nan);
            let p = StoredMatrix::from_bytes(dt, Bytes::owned(&b), 1, dt.block_size()).unwrap();
            let nonfinite = p.to_f32().iter().any(|v| !v.is_finite());
            assert_eq!(
                nonfinite,
                scale_offsets(dt).contains(&o),
                "{dt:?}: NaN at byte {o} gives non-finite values: {nonfinite}"
            );
            assert_eq!(
                p.first_non_finite_row().is_some(),
                nonfinite,
                "{dt:?} byte {o}"
            );
        }
    }
}

#[test]
fn f16_and_bf16_matrices_convert_in_the_tile() {
    let (rows, cols, t) = (70, 96, 4);
    let v = random(rows * cols, 3);
    let x = random(t * cols, 4);
    for dt in [GgmlDType::F16, GgmlDType::BF16] {
        let (bytes, back): (Vec<u8>, Vec<f32>) = if dt == GgmlDType::F16 {
            let h: Vec<half::f16> = v.iter().map(|&a| half::f16::from_f32(a)).collect();
            (
                h.iter().flat_map(|a| a.to_le_bytes()).collect(),
                h.iter().map(|a| a.to_f32()).collect(),
            )
        } else {
            let h: Vec<half::bf16> = v.iter().map(|&a| half::bf16::from_f32(a)).collect();
            (
                h.iter().flat_map(|a| a.to_le_bytes()).collect(),
                h.iter().map(|a| a.to_f32()).collect(),
            )
        };
        let w = StoredMatrix::from_bytes(dt, Bytes::owned(&bytes), rows, cols).unwrap();
        assert_eq!(w.storage_bytes(), 2 * rows * cols);
        assert_eq!(&*w.to_f32(), &back[..], "{dt:?}");
        assert_eq!(w.first_non_finite_row(), None);
        let y = w.matmul_t(&x, t, Matmul::Exact);
        assert_f32_product(&y, &x, &back, t, rows, cols, &format!("{dt:?}"));
        // Q8 applies to quantized blocks only: a 16-bit matrix keeps the exact product.
        assert_eq!(w.matmul_t(&x, t, Matmul::Q8), y);
        let mut b = bytes.clone();
        let inf = if dt == GgmlDType::F16 {
            half::f16::INFINITY.to_le_bytes()
        } else {
            half::bf16::INFINITY.to_le_bytes()
        };
        b[2 * (33 * cols + 7)..2 * (33 * cols + 8)].copy_from_slice(&inf);
        let p = StoredMatrix::from_bytes(dt, Bytes::owned(&b), rows, cols).unwrap();
        assert_eq!(p.first_non_finite_row(), Some(33), "{dt:?}");
    }
}

fn synth(dir: &Path, name: &str, spec: &SynthShape, seed: u64) -> std::path::PathBuf {
    let p = dir.join(name);
    write_gguf(&p, spec, seed).unwrap();
    p
}

/// The same model with every weight converted to f32 storage.
fn as_f32(m: &Pretrained) -> Pretrained {
    let mut f = m.clone();
    f.make_f32_resident();
    for ly in &f.layers {
        assert_eq!(ly.wq.w.dtype(), GgmlDType::F32);
        assert_eq!(mlp_of(ly).down.w.dtype(), GgmlDType::F32);
    }
    assert_eq!(f.embed.dtype(), GgmlDType::F32);
    f
}

fn logits(m: &Pretrained, toks: &[u32]) -> Vec<f32> {
    let o = m.forward(toks, &mut (), None).unwrap();
    m.logits(&o.normed).unwrap()
}

fn assert_close_logits(a: &[f32], b: &[f32], what: &str) {
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    let gap = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    eprintln!("{what}: max |Δ logit| {gap:.3e} (max |logit| {scale:.3})");
    assert!(
        gap <= 1e-4 * scale,
        "{what}: logits differ by {gap} (scale {scale})"
    );
}

const TOKS: &[u32] = &[1, 5, 9, 3, 17, 22, 8, 30, 2, 11];

fn specs() -> [(GgmlDType, SynthShape); 3] {
    [
        (
            GgmlDType::Q8_0,
            SynthShape {
                d_ff: 64,
                dtype: SynthDtype::Layers(GgmlDType::Q8_0),
                ..SynthShape::default()
            },
        ),
        (
            GgmlDType::Q5_0,
            SynthShape {
                d: 64,
                head_dim: 16,
                d_ff: 64,
                dtype: SynthDtype::Layers(GgmlDType::Q5_0),
                ..SynthShape::default()
            },
        ),
        (
            GgmlDType::Q4K,
            SynthShape {
                d: 256,
                n_head: 4,
                n_kv_head: 2,
                head_dim: 64,
                d_ff: 256,
                dtype: SynthDtype::Layers(GgmlDType::Q4K),
                ..SynthShape::default()
            },
        ),
    ]
}

#[test]
fn quantized_gguf_stays_quantized_in_the_map_and_exact_mode_matches_f32() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, (dt, spec)) in specs().into_iter().enumerate() {
        let p = synth(tmp.path(), &format!("m{k}.gguf"), &spec, 31 + k as u64);
        let lm = load(&p).unwrap();
        let ly = &lm.model.layers[0];
        assert_eq!(ly.wq.w.dtype(), dt);
        assert_eq!(mlp_of(ly).down.w.dtype(), dt);
        // Not permuted: still a range of the file map. q/k rows were un-permuted on bytes (a copy).
        let Storage::Quantized { bytes, .. } = ly.wv.w.storage() else {
            panic!("v projection not quantized")
        };
        assert!(
            bytes.is_mapped(),
            "{dt:?}: v projection was copied out of the map"
        );
        let f = as_f32(&lm.model);
        assert_close_logits(
            &logits(&lm.model, TOKS),
            &logits(&f, TOKS),
            &format!("{dt:?} exact vs f32 copy"),
        );
        // A few rows (≤ `fused::MAX_ROWS`): Q8_0 and Q5_0 projections take the fused
        // dequantize-and-dot kernels, Q4_K the tiles; the same bound against the f32 copy.
        assert_close_logits(
            &logits(&lm.model, &TOKS[..3]),
            &logits(&f, &TOKS[..3]),
            &format!("{dt:?} exact vs f32 copy, 3 tokens"),
        );
    }
}

/// candle's q8 dot product of Q5_0 (and Q4_1, Q5_1) pairs blocks: a row of one block used to
/// panic inside it; the q8 mode now refuses the model, naming the matrix. The control: the
/// same model in the exact mode runs.
#[test]
fn q8_mode_refuses_rows_of_an_odd_number_of_paired_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = SynthShape {
        d_ff: 64,
        dtype: SynthDtype::Layers(GgmlDType::Q5_0),
        ..SynthShape::default()
    };
    let p = synth(tmp.path(), "odd.gguf", &spec, 5);
    let mut lm = load(&p).unwrap();
    assert!(lm.model.forward(TOKS, &mut (), None).is_ok());
    let e = q8_deviation::measure(&mut lm.model, TOKS)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("layer 0: q projection") && e.contains("odd number") && e.contains("Q5_0"),
        "{e}"
    );
}

#[test]
fn q8_mode_deviation_is_measured_bounded_and_nonzero() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, (dt, spec)) in specs().into_iter().enumerate() {
        let p = synth(tmp.path(), &format!("q{k}.gguf"), &spec, 51 + k as u64);
        let mut lm = load(&p).unwrap();
        let dev = q8_deviation::measure(&mut lm.model, TOKS).unwrap();
        eprintln!("{dt:?}: {}", dev.line());
        assert_eq!(lm.model.matmul, Matmul::Exact, "mode restored");
        assert_eq!(dev.quantized_projections, 7 * spec.n_layer);
        let dl = dev.max_abs_logit.unwrap();
        assert!(dl > 0.0 && dl.is_finite(), "{dt:?}: Δ logit {dl}");
        assert!(dev.max_abs_attn_first.is_finite());
        let (a, b) = (dev.loss_exact.unwrap(), dev.loss_q8.unwrap());
        assert!(
            a.is_finite() && b.is_finite() && a != b,
            "{dt:?}: loss {a} vs {b}"
        );
        assert!(
            dev.max_bound_ratio > 0.0 && dev.max_bound_ratio <= 1.0,
            "{dt:?}: a projection left its Q8 rounding bound: ratio {}",
            dev.max_bound_ratio
        );
    }
}

#[test]
fn non_finite_block_scale_is_refused_at_load_without_dequantizing() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, spec) = specs()[0].clone();
    let p = synth(tmp.path(), "nan.gguf", &spec, 77);
    let mut f = std::fs::File::open(&p).unwrap();
    let c = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let ti = &c.tensor_infos["blk.1.attn_v.weight"];
    let off = (c.tensor_data_offset + ti.offset) as usize;
    let mut bytes = std::fs::read(&p).unwrap();
    // Block 2 of row 0 (Q8_0 blocks are 34 bytes: an f16 scale then 32 int8 quants).
    bytes[off + 2 * 34..off + 2 * 34 + 2].copy_from_slice(&half::f16::NAN.to_le_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let e = format!("{:#}", load(&p).err().expect("a NaN scale must be refused"));
    assert!(
        e.contains("layer 1: v projection") && e.contains("non-finite") && e.contains("nan.gguf"),
        "{e}"
    );
}

/// A tiny Llama checkpoint directory in transformers' layout, weights in `dtype`.
fn write_hf(m: &Pretrained, dir: &Path, dtype: safetensors::Dtype) {
    let c = &m.cfg;
    let cfg = serde_json::json!({
        "model_type": "llama",
        "hidden_size": c.d_model,
        "num_hidden_layers": c.n_layer,
        "num_attention_heads": c.n_head,
        "num_key_value_heads": c.n_kv_head,
        "head_dim": c.head_dim,
        "intermediate_size": mlp_of(&m.layers[0]).up.out,
        "vocab_size": c.vocab,
        "max_position_embeddings": c.max_context,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": true,
        "hidden_act": "silu",
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let enc = |v: &[f32]| -> Vec<u8> {
        match dtype {
            safetensors::Dtype::F16 => v
                .iter()
                .flat_map(|a| half::f16::from_f32(*a).to_le_bytes())
                .collect(),
            safetensors::Dtype::BF16 => v
                .iter()
                .flat_map(|a| half::bf16::from_f32(*a).to_le_bytes())
                .collect(),
            _ => v.iter().flat_map(|a| a.to_le_bytes()).collect(),
        }
    };
    let gain = |n: &Option<sinklab::runtime::pretrained::NormLayer>| match n {
        Some(sinklab::runtime::pretrained::NormLayer::Rms { w, .. }) => w.clone(),
        _ => panic!("Llama uses RMSNorm"),
    };
    let mut t: Vec<(String, Vec<usize>, Vec<u8>, safetensors::Dtype)> = Vec::new();
    let f32d = safetensors::Dtype::F32;
    t.push((
        "model.embed_tokens.weight".into(),
        vec![c.vocab, c.d_model],
        enc(&m.embed.to_f32()),
        dtype,
    ));
    let fnorm = gain(&m.final_norm);
    let f32b = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|a| a.to_le_bytes()).collect() };
    t.push((
        "model.norm.weight".into(),
        vec![c.d_model],
        f32b(&fnorm),
        f32d,
    ));
    for (l, ly) in m.layers.iter().enumerate() {
        let b = format!("model.layers.{l}.");
        for (n, g) in [
            ("input_layernorm", &ly.attn_norm),
            ("post_attention_layernorm", &ly.ffn_norm),
        ] {
            t.push((
                format!("{b}{n}.weight"),
                vec![c.d_model],
                f32b(&gain(g)),
                f32d,
            ));
        }
        for (n, lin) in [
            ("self_attn.q_proj", &ly.wq),
            ("self_attn.k_proj", &ly.wk),
            ("self_attn.v_proj", &ly.wv),
            ("self_attn.o_proj", &ly.wo),
            ("mlp.gate_proj", mlp_of(ly).gate.as_ref().unwrap()),
            ("mlp.up_proj", &mlp_of(ly).up),
            ("mlp.down_proj", &mlp_of(ly).down),
        ] {
            t.push((
                format!("{b}{n}.weight"),
                vec![lin.out, lin.inp],
                enc(&lin.w.to_f32()),
                dtype,
            ));
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = t
        .iter()
        .map(|(n, s, d, dt)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*dt, s.clone(), d).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

#[test]
fn sixteen_bit_safetensors_stay_sixteen_bit_and_match_their_f32_conversion() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = SynthShape {
        d_ff: 64,
        ..SynthShape::default()
    };
    let base = load(&synth(tmp.path(), "f32.gguf", &spec, 91))
        .unwrap()
        .model;
    for (name, dt, gdt) in [
        ("f16", safetensors::Dtype::F16, GgmlDType::F16),
        ("bf16", safetensors::Dtype::BF16, GgmlDType::BF16),
    ] {
        let dir = tmp.path().join(name);
        write_hf(&base, &dir, dt);
        let m = load(&dir).unwrap().model;
        assert_eq!(
            m.layers[0].wq.w.dtype(),
            gdt,
            "{name}: q projection not kept 16-bit"
        );
        assert_eq!(m.embed.dtype(), gdt, "{name}: embedding not kept 16-bit");
        // The f32 conversion of the same 16-bit values, as a second checkpoint.
        let conv = as_f32(&m);
        let dir32 = tmp.path().join(format!("{name}-as-f32"));
        write_hf(&conv, &dir32, safetensors::Dtype::F32);
        let m32 = load(&dir32).unwrap().model;
        assert_eq!(m32.layers[0].wq.w.dtype(), GgmlDType::F32);
        assert_close_logits(&logits(&m, TOKS), &logits(&m32, TOKS), name);
    }
}

#[test]
fn streamed_loss_over_a_quantized_head_equals_the_chunked_loss_of_its_f32_copy() {
    // 5000 tokens: two vocabulary tiles of the streamed log-sum-exp (4096 rows each).
    let tmp = tempfile::tempdir().unwrap();
    let spec = SynthShape {
        d_ff: 64,
        vocab: 5000,
        ..SynthShape::default()
    };
    let mut m = load(&synth(tmp.path(), "v.gguf", &spec, 17)).unwrap().model;
    let e = Tensor::from_vec(m.embed.to_f32().into_owned(), (5000, 32), &Device::Cpu).unwrap();
    let q = QTensor::quantize(&e, GgmlDType::Q8_0).unwrap();
    m.embed = StoredMatrix::from_bytes(GgmlDType::Q8_0, Bytes::owned(&q.data().unwrap()), 5000, 32)
        .unwrap();
    let f = as_f32(&m);
    let toks: Vec<u32> = (0..60).map(|i| (i * 71 + 3) % 5000).collect();
    let (oq, of) = (
        m.forward(&toks, &mut (), None).unwrap(),
        f.forward(&toks, &mut (), None).unwrap(),
    );
    let (a, b) = (
        m.next_token_nll(&oq.normed, &toks).unwrap(),
        f.next_token_nll(&of.normed, &toks).unwrap(),
    );
    assert_eq!(a.len(), 59);
    // Same logits up to f32 summation order (≤ 2γ_32 relative, ~4e-6 of |logit| ≤ 3), then a
    // log-sum-exp in f64: 1e-5 nats.
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-5,
            "position {i}: streamed {x} vs chunked {y}"
        );
    }
}

#[test]
fn cli_matmul_q8_prints_its_measured_deviation_and_refuses_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, spec) = specs()[1].clone();
    let p = synth(tmp.path(), "cli.gguf", &spec, 5);
    let bin = || bin();
    let o = bin()
        .args(["real", "--model"])
        .arg(&p)
        .args(["--tokens", "1,5,9,3,17,22", "--matmul", "q8", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", cli::stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &v["q8_deviation"];
    assert_eq!(d["quantized_projections"], 14);
    let dl = d["max_abs_logit"].as_f64().unwrap();
    assert!(dl > 0.0 && dl.is_finite(), "{d}");
    let r = d["max_bound_ratio"].as_f64().unwrap();
    assert!(r > 0.0 && r <= 1.0, "{d}");
    let inputs = tmp.path().join("in.jsonl");
    std::fs::write(&inputs, "[1, 2, 3]\n").unwrap();
    let o = bin()
        .args(["real", "--model"])
        .arg(&p)
        .args(["--matmul", "q8", "--file"])
        .arg(&inputs)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(cli::stderr(&o).contains("--matmul q8"));
}

/// Every number of two JSON reports, paired by path.
fn json_numbers(v: &serde_json::Value, path: String, out: &mut Vec<(String, f64)>) {
    match v {
        serde_json::Value::Number(n) => out.push((path, n.as_f64().unwrap())),
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                json_numbers(x, format!("{path}[{i}]"), out);
            }
        }
        serde_json::Value::Object(o) => {
            for (k, x) in o {
                json_numbers(x, format!("{path}.{k}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn cli_weights_f32_reports_what_the_file_format_reports_and_is_budgeted() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, spec) = specs()[1].clone();
    let p = synth(tmp.path(), "w.gguf", &spec, 6);
    let run = |extra: &[&str]| {
        bin()
            .args(["real", "--model"])
            .arg(&p)
            .args(["--tokens", "1,5,9,3,17,22,4,8", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let file = run(&[]);
    let f32 = run(&["--weights", "f32"]);
    assert!(file.status.success(), "{}", cli::stderr(&file));
    assert!(f32.status.success(), "{}", cli::stderr(&f32));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    json_numbers(
        &serde_json::from_slice(&file.stdout).unwrap(),
        String::new(),
        &mut a,
    );
    json_numbers(
        &serde_json::from_slice(&f32.stdout).unwrap(),
        String::new(),
        &mut b,
    );
    assert_eq!(a.len(), b.len());
    assert!(a.len() > 50, "too few statistics to compare: {}", a.len());
    // The two runs multiply the same f32 values (the tile dequantizes exactly what the f32
    // conversion stores); only the blocking of the products may differ, i.e. the summation
    // order of dot products of length ≤ d_ff: relative effects of order γ_{d_ff} ≈ 1e-5 per
    // product, a few products deep in this 2-layer model.
    for ((ka, x), (kb, y)) in a.iter().zip(&b) {
        assert_eq!(ka, kb);
        assert!(
            (x - y).abs() <= 1e-4 * (1.0 + x.abs().max(y.abs())),
            "{ka}: file {x} vs f32 {y}"
        );
    }
    let small = run(&["--weights", "f32", "--max-mem", "1K"]);
    assert!(!small.status.success());
    let err = cli::stderr(&small);
    assert!(
        err.contains("--weights f32") && err.contains("--max-mem"),
        "{err}"
    );
}

#[test]
fn weights_flag_is_refused_where_no_model_is_loaded_by_it() {
    // `secondary --long` loads its own models and `--activations` loads none: a `--weights`
    // there would be silently ignored, so the command line is refused, naming the flag.
    let run = |args: &[&str]| bin().args(args).output().unwrap();
    for args in [
        &["secondary", "--long", "--weights", "f32"][..],
        &[
            "secondary",
            "--activations",
            "x.safetensors",
            "--weights",
            "f32",
        ][..],
        &["real", "--activations", "x.safetensors", "--weights", "f32"][..],
        &["real", "--activations", "x.safetensors", "--matmul", "q8"][..],
    ] {
        let o = run(args);
        assert!(!o.status.success(), "{args:?} was accepted");
        let err = cli::stderr(&o);
        assert!(
            err.contains("--weights") || err.contains("--matmul"),
            "{args:?}: {err}"
        );
        assert!(err.contains("cannot be used with"), "{args:?}: {err}");
    }
}

/// The dense MLP of a layer (these models have no mixture-of-experts layers).
fn mlp_of(ly: &sinklab::runtime::pretrained::Layer) -> &sinklab::runtime::pretrained::Mlp {
    ly.ffn.dense().expect("a dense MLP")
}
