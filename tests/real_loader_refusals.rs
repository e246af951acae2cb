//! GGUF metadata that changes the math, or would size an allocation, is checked before use:
//! each bad value is refused with a message naming the key and the file (issue 12), and
//! truncated files say what was truncated.

use candle_core::Device;
use candle_core::quantized::QTensor;
use candle_core::quantized::gguf_file::{Content, Value, write};
use sinklab::runtime::load;
use sinklab::synth::{SynthShape, write_gguf};
use std::path::Path;

/// Rewrites `src` to `dst` with metadata edited by `edit`.
fn rewrite(src: &Path, dst: &Path, edit: impl FnOnce(&mut Vec<(String, Value)>)) {
    let mut r = std::io::BufReader::new(std::fs::File::open(src).unwrap());
    let c = Content::read(&mut r).unwrap();
    let mut names: Vec<String> = c.tensor_infos.keys().cloned().collect();
    names.sort();
    let tensors: Vec<(String, QTensor)> = names
        .iter()
        .map(|n| (n.clone(), c.tensor(&mut r, n, &Device::Cpu).unwrap()))
        .collect();
    let mut meta: Vec<(String, Value)> = c.metadata.into_iter().collect();
    meta.sort_by(|a, b| a.0.cmp(&b.0));
    edit(&mut meta);
    let mr: Vec<(&str, &Value)> = meta.iter().map(|(a, b)| (a.as_str(), b)).collect();
    let tr: Vec<(&str, &QTensor)> = tensors.iter().map(|(a, b)| (a.as_str(), b)).collect();
    write(&mut std::fs::File::create(dst).unwrap(), &mr, &tr).unwrap();
}

fn set(meta: &mut [(String, Value)], key: &str, v: Value) {
    let e = meta
        .iter_mut()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key}"));
    e.1 = v;
}

fn refused(p: &Path, needles: &[&str]) -> String {
    let r = std::panic::catch_unwind(|| load(p).err().map(|e| e.to_string()));
    let msg = r
        .unwrap_or_else(|_| panic!("loader panicked"))
        .unwrap_or_else(|| panic!("loaded without error, expected {needles:?}"));
    assert!(msg.contains(&p.display().to_string()), "no file in: {msg}");
    for n in needles {
        assert!(msg.contains(n), "`{msg}` does not mention `{n}`");
    }
    msg
}

fn synth(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("base.gguf");
    write_gguf(&p, &SynthShape::default(), 7).unwrap();
    load(&p).expect("the unaltered file loads");
    p
}

#[test]
fn huge_block_count_is_refused_before_allocating() {
    let d = tempfile::tempdir().unwrap();
    let base = synth(d.path());
    let p = d.path().join("m.gguf");
    for n in [0xFFFF_FFFFu32, 3, 0] {
        rewrite(&base, &p, |m| set(m, "llama.block_count", Value::U32(n)));
        refused(&p, &["llama.block_count"]);
    }
    for key in ["llama.embedding_length", "llama.attention.head_count"] {
        rewrite(&base, &p, |m| set(m, key, Value::U32(0xFFFF_FFFF)));
        refused(&p, &[key]);
    }
}

#[test]
fn nan_eps_and_zero_rope_base_are_refused_naming_the_key() {
    let d = tempfile::tempdir().unwrap();
    let base = synth(d.path());
    let p = d.path().join("m.gguf");
    rewrite(&base, &p, |m| {
        set(
            m,
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(f32::NAN),
        )
    });
    refused(&p, &["llama.attention.layer_norm_rms_epsilon"]);
    rewrite(&base, &p, |m| {
        set(m, "llama.rope.freq_base", Value::F32(0.0))
    });
    refused(&p, &["llama.rope.freq_base"]);
}

#[test]
fn unknown_metadata_and_pre_tokenizer_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let base = synth(d.path());
    let p = d.path().join("m.gguf");
    rewrite(&base, &p, |m| {
        m.push(("llama.expert_count".into(), Value::U32(8)))
    });
    refused(&p, &["llama.expert_count"]);
    rewrite(&base, &p, |m| {
        set(
            m,
            "tokenizer.ggml.pre",
            Value::String("deepseek-llm".into()),
        )
    });
    refused(&p, &["tokenizer.ggml.pre", "deepseek-llm"]);
    rewrite(&base, &p, |m| m.retain(|(k, _)| k != "tokenizer.ggml.pre"));
    refused(&p, &["tokenizer.ggml.pre"]);
    rewrite(&base, &p, |m| {
        m.push((
            "llama.rope.scaling.type".into(),
            Value::String("yarn".into()),
        ))
    });
    refused(&p, &["llama.rope.scaling.type", "yarn"]);
}

#[test]
fn truncated_files_say_what_was_truncated() {
    let d = tempfile::tempdir().unwrap();
    let base = synth(d.path());
    let bytes = std::fs::read(&base).unwrap();
    let p = d.path().join("cut.gguf");
    // Cuts inside the header (metadata, tensor directory) and inside the tensor data.
    for n in [10, 40, 200, 600, bytes.len() / 2, bytes.len() - 3] {
        std::fs::write(&p, &bytes[..n]).unwrap();
        let m = refused(&p, &[]);
        assert!(
            !m.contains("failed to fill whole buffer"),
            "cut at {n}: bare I/O message `{m}`"
        );
        assert!(m.contains("truncated"), "cut at {n}: `{m}`");
    }
}

/// A copy of `tests/fixtures/tiny/llama_default` in `dst` whose tensors (name, dtype, shape,
/// bytes) `edit` may change, and whose config `cfg` may change.
fn hf_copy(
    dst: &Path,
    edit: impl FnOnce(&mut Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>),
    cfg: impl FnOnce(&mut serde_json::Value),
) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny/llama_default");
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut ts: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    ts.sort_by(|a, b| a.0.cmp(&b.0));
    edit(&mut ts);
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = ts
        .iter()
        .map(|(n, dt, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*dt, s.clone(), b).unwrap(),
            )
        })
        .collect();
    std::fs::create_dir_all(dst).unwrap();
    std::fs::write(
        dst.join("model.safetensors"),
        safetensors::serialize(views, None).unwrap(),
    )
    .unwrap();
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg(&mut c);
    std::fs::write(dst.join("config.json"), c.to_string()).unwrap();
}

/// Issue 25: `tie_word_embeddings: true` beside a stored `lm_head.weight` uses the stored head
/// (transformers 5.24 ties only a head the checkpoint lacks); sinklab tied it.
#[test]
fn a_stored_lm_head_is_used_even_when_the_config_says_tie() {
    let d = tempfile::tempdir().unwrap();
    let (vocab, dm) = (64usize, 32usize);
    let head: Vec<u8> = (0..vocab * dm)
        .flat_map(|k| (((k * 7919) % 97) as f32 / 97.0 - 0.5).to_le_bytes())
        .collect();
    let with_head = |ts: &mut Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>| {
        assert!(
            !ts.iter().any(|t| t.0 == "lm_head.weight"),
            "fixture is tied"
        );
        ts.push((
            "lm_head.weight".into(),
            safetensors::Dtype::F32,
            vec![vocab, dm],
            head.clone(),
        ));
    };
    let tied = d.path().join("tied");
    hf_copy(&tied, with_head, |_| {});
    let untied = d.path().join("untied");
    hf_copy(&untied, with_head, |c| {
        c["tie_word_embeddings"] = false.into();
    });
    let a = load(&tied).unwrap();
    let b = load(&untied).unwrap();
    assert!(
        a.model.lm_head.is_some(),
        "the stored lm_head was ignored (tied)"
    );
    let x: Vec<f32> = (0..dm).map(|k| (k as f32 * 0.37).sin()).collect();
    let (la, lb) = (a.model.logits(&x).unwrap(), b.model.logits(&x).unwrap());
    assert_eq!(
        la, lb,
        "tie_word_embeddings changed the logits of a stored head"
    );
    // Without a stored head the config's tie stands (the control).
    let plain = d.path().join("plain");
    hf_copy(&plain, |_| {}, |_| {});
    let c = load(&plain).unwrap();
    assert!(c.model.lm_head.is_none());
    assert_ne!(c.model.logits(&x).unwrap(), la);
}

/// Issue 25: a weight stored with an integer dtype (F32 bits labelled I32/U32) is refused
/// naming the tensor and the dtype; it was decoded as integers.
#[test]
fn integer_dtypes_where_a_float_weight_is_expected_are_refused() {
    let d = tempfile::tempdir().unwrap();
    for dt in [
        safetensors::Dtype::I32,
        safetensors::Dtype::U32,
        safetensors::Dtype::I64,
    ] {
        let p = d.path().join(format!("{dt:?}"));
        let name = "model.layers.0.self_attn.q_proj.weight";
        hf_copy(
            &p,
            |ts| {
                let t = ts.iter_mut().find(|t| t.0 == name).unwrap();
                t.1 = dt;
                if dt == safetensors::Dtype::I64 {
                    let last = t.2.len() - 1;
                    t.2[last] /= 2;
                }
            },
            |_| {},
        );
        let msg = load(&p).err().map(|e| e.to_string()).expect("loaded");
        for n in [name, &format!("{dt:?}"), "model.safetensors"] {
            assert!(msg.contains(n), "`{msg}` does not mention `{n}`");
        }
    }
}
