//! GGUF metadata that changes the math, or would size an allocation, is checked before use:
//! each bad value is refused with a message naming the key and the file (issue 12), and
//! truncated files say what was truncated.

use candle_core::Device;
use candle_core::quantized::QTensor;
use candle_core::quantized::gguf_file::{Content, Value, write};
use sinklab::real::load;
use sinklab::real::synth::{SynthSpec, write_gguf};
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
    write_gguf(&p, &SynthSpec::default(), 7).unwrap();
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
