//! A transformers-saved SmolLM2 directory gives the same numbers as the SmolLM2 GGUF.
//!
//! `tests/fixtures/smollm2_hf/` holds the `config.json` (transformers ≥ 5 layout: the RoPE base
//! under `rope_parameters.rope_theta`), `tokenizer.json` (a `TemplateProcessing` without special
//! tokens) and `tokenizer_config.json` that transformers writes for this model
//! (`scripts/make_smollm2_hf_fixture.py`). The test writes the weights: the GGUF's tensors, as
//! loaded (dequantized to f32, q/k rows in Hugging Face order), under Hugging Face names. The two
//! loads then share weights and differ only in what the formats decide — hyper-parameters from
//! config.json vs GGUF metadata, tokenizer.json vs the GGUF vocabulary, BOS policy — so every
//! statistic must agree to f32 round-off of identical computations (1e-6); before RoPE was read
//! from `rope_parameters`, attention to the first token differed by 0.05.

use safetensors::tensor::{Dtype, TensorView};
use sinklab::real::stats::StatsObserver;
use sinklab::runtime::tokenizer::Bos;
use sinklab::runtime::{fetch, load};
use std::path::{Path, PathBuf};

const TEXTS: &[&str] = &[
    "The quick brown fox jumps over the lazy dog. Attention sinks, 1234 times over.",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
];

fn write_hf_dir(m: &sinklab::runtime::pretrained::Pretrained, dir: &Path) {
    let fx = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smollm2_hf");
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fx.join(f), dir.join(f)).unwrap();
    }
    let mut t: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut put = |name: String, shape: Vec<usize>, v: &[f32]| {
        t.push((
            name,
            shape,
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ));
    };
    let c = &m.cfg;
    put(
        "model.embed_tokens.weight".into(),
        vec![c.vocab, c.d_model],
        &m.embed.to_f32(),
    );
    let gain = |n: &Option<sinklab::runtime::pretrained::NormLayer>| match n {
        Some(sinklab::runtime::pretrained::NormLayer::Rms { w, .. }) => w.clone(),
        _ => panic!("SmolLM2 uses RMSNorm"),
    };
    put(
        "model.norm.weight".into(),
        vec![c.d_model],
        &gain(&m.final_norm),
    );
    for (l, ly) in m.layers.iter().enumerate() {
        let b = format!("model.layers.{l}.");
        put(
            format!("{b}input_layernorm.weight"),
            vec![c.d_model],
            &gain(&ly.attn_norm),
        );
        put(
            format!("{b}post_attention_layernorm.weight"),
            vec![c.d_model],
            &gain(&ly.ffn_norm),
        );
        for (n, lin) in [
            ("self_attn.q_proj", &ly.wq),
            ("self_attn.k_proj", &ly.wk),
            ("self_attn.v_proj", &ly.wv),
            ("self_attn.o_proj", &ly.wo),
            ("mlp.gate_proj", mlp_of(ly).gate.as_ref().unwrap()),
            ("mlp.up_proj", &mlp_of(ly).up),
            ("mlp.down_proj", &mlp_of(ly).down),
        ] {
            put(
                format!("{b}{n}.weight"),
                vec![lin.out, lin.inp],
                &lin.w.to_f32(),
            );
        }
    }
    let views: Vec<(String, TensorView<'_>)> = t
        .iter()
        .map(|(n, s, d)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), d).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

#[test]
fn transformers_saved_smollm2_directory_matches_the_gguf() {
    let Some(gguf) = fetch::cached("smollm2") else {
        assert!(
            std::env::var("SINKLAB_REQUIRE_MODELS").as_deref() != Ok("1"),
            "smollm2 not in the cache"
        );
        eprintln!("SKIP: smollm2 not in the cache (run `sinklab fetch smollm2`)");
        return;
    };
    let a = load(&gguf).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    write_hf_dir(&a.model, tmp.path());
    let b = load(tmp.path()).unwrap();
    let (ta, tb) = (a.tok.as_ref().unwrap(), b.tok.as_ref().unwrap());
    for text in TEXTS {
        for bos in [Bos::Auto, Bos::Yes, Bos::No] {
            let (ia, ib) = (ta.encode(text, bos).unwrap(), tb.encode(text, bos).unwrap());
            assert_eq!(ia, ib, "token ids differ with --bos {bos:?} on {text:?}");
        }
        let toks = ta.encode(text, Bos::Yes).unwrap();
        assert_eq!(
            toks[0], 1,
            "--bos yes puts SmolLM2's BOS <|im_start|> first"
        );
        let mut sa = StatsObserver::default();
        let mut sb = StatsObserver::default();
        let oa = a.model.forward(&toks, &mut sa, None).unwrap();
        let ob = b.model.forward(&toks, &mut sb, None).unwrap();
        for (l, (x, y)) in sa.layers.iter().zip(&sb.layers).enumerate() {
            let (ax, ay) = (x.attn_to_first.unwrap(), y.attn_to_first.unwrap());
            assert!(
                (ax - ay).abs() <= 1e-6,
                "layer {l}: attn_to_first {ax} vs {ay}"
            );
            assert!(
                (x.bos_cos_mean - y.bos_cos_mean).abs() <= 1e-6,
                "layer {l}: BOS cosine {} vs {}",
                x.bos_cos_mean,
                y.bos_cos_mean
            );
        }
        let na = a.model.next_token_nll(&oa.normed, &toks).unwrap();
        let nb = b.model.next_token_nll(&ob.normed, &toks).unwrap();
        let (ma, mb) = (
            na.iter().sum::<f64>() / na.len() as f64,
            nb.iter().sum::<f64>() / nb.len() as f64,
        );
        assert!((ma - mb).abs() <= 1e-6, "next-token loss {ma} vs {mb}");
    }
}

/// The dense MLP of a layer (these models have no mixture-of-experts layers).
fn mlp_of(ly: &sinklab::runtime::pretrained::Layer) -> &sinklab::runtime::pretrained::Mlp {
    ly.ffn.dense().expect("a dense MLP")
}
