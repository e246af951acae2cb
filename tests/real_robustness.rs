//! Bad model files and bad activations files give a typed error that names the file and the
//! problem, never a panic: truncations at every cut point, flipped bytes, unknown architecture,
//! mismatched shapes, non-finite weights, malformed activations.

use candle_core::quantized::gguf_file::{Value, write};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use sinklab::real::activations;
use sinklab::runtime::load;
use sinklab::synth::{SynthShape, write_gguf};
use std::path::Path;

fn expect_err(p: &Path, needle: &str) -> String {
    let r = std::panic::catch_unwind(|| load(p).err().map(|e| e.to_string()));
    let msg = r
        .unwrap_or_else(|_| panic!("loader panicked on {}", p.display()))
        .unwrap_or_else(|| panic!("{} loaded without error", p.display()));
    assert!(
        msg.contains(&p.display().to_string()),
        "error does not name the file: {msg}"
    );
    assert!(
        msg.contains(needle),
        "error `{msg}` does not say `{needle}`"
    );
    // A user-facing message, not a stack trace (candle may attach one to its errors).
    assert!(
        !msg.contains("candle_core::") && msg.lines().count() <= 3,
        "error carries a backtrace: {msg}"
    );
    msg
}

#[test]
fn truncated_gguf_at_every_cut_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    write_gguf(&p, &SynthShape::default(), 1).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    let cut = dir.path().join("cut.gguf");
    // Every cut in the header region, then a stride through the tensor data.
    let cuts: Vec<usize> = (0..2048.min(bytes.len()))
        .chain((2048..bytes.len()).step_by(997))
        .collect();
    for n in cuts {
        std::fs::write(&cut, &bytes[..n]).unwrap();
        expect_err(&cut, "");
    }
}

#[test]
fn corrupted_gguf_bytes_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    write_gguf(&p, &SynthShape::default(), 2).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    let bad = dir.path().join("bad.gguf");
    // Flip one byte at positions across the header (seeded stride), load, accept Ok or Err.
    for k in (0..bytes.len().min(4096)).step_by(7) {
        let mut b = bytes.clone();
        b[k] ^= 0xA5;
        std::fs::write(&bad, &b).unwrap();
        let r = std::panic::catch_unwind(|| load(&bad).map(|_| ()));
        assert!(r.is_ok(), "panic with byte {k} flipped");
        if let Ok(Err(e)) = r {
            assert!(e.to_string().contains(&bad.display().to_string()), "{e}");
        }
    }
    let mut b = bytes.clone();
    b[0] = b'X';
    std::fs::write(&bad, &b).unwrap();
    expect_err(&bad, "neither a GGUF file");
}

fn write_custom(
    p: &Path,
    arch: &str,
    tweak: impl Fn(&str, Vec<f32>, (usize, usize)) -> (Vec<f32>, (usize, usize)),
) {
    write_custom_with(p, arch, tweak, Vec::new(), None);
}

/// [`write_custom`] with `extra` metadata appended and the tensor `dup` written twice.
fn write_custom_with(
    p: &Path,
    arch: &str,
    tweak: impl Fn(&str, Vec<f32>, (usize, usize)) -> (Vec<f32>, (usize, usize)),
    extra: Vec<(String, Value)>,
    dup: Option<&str>,
) {
    // A well-formed tiny llama written by hand so that single tensors can be altered.
    let s = SynthShape::default();
    let mut t: Vec<(String, QTensor)> = Vec::new();
    let mut add = |name: String, out: usize, inp: usize| {
        let v: Vec<f32> = (0..out * inp)
            .map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 0.3)
            .collect();
        let (v, (o, i)) = tweak(&name, v, (out, inp));
        let ten = if i == 1 {
            Tensor::from_vec(v, o, &Device::Cpu)
        } else {
            Tensor::from_vec(v, (o, i), &Device::Cpu)
        }
        .unwrap();
        t.push((name, QTensor::quantize(&ten, GgmlDType::F32).unwrap()));
    };
    add("token_embd.weight".into(), s.vocab, s.d);
    for l in 0..s.n_layer {
        add(format!("blk.{l}.attn_q.weight"), s.n_head * s.head_dim, s.d);
        add(
            format!("blk.{l}.attn_k.weight"),
            s.n_kv_head * s.head_dim,
            s.d,
        );
        add(
            format!("blk.{l}.attn_v.weight"),
            s.n_kv_head * s.head_dim,
            s.d,
        );
        add(
            format!("blk.{l}.attn_output.weight"),
            s.d,
            s.n_head * s.head_dim,
        );
        add(format!("blk.{l}.ffn_gate.weight"), s.d_ff, s.d);
        add(format!("blk.{l}.ffn_up.weight"), s.d_ff, s.d);
        add(format!("blk.{l}.ffn_down.weight"), s.d, s.d_ff);
        add(format!("blk.{l}.attn_norm.weight"), s.d, 1);
        add(format!("blk.{l}.ffn_norm.weight"), s.d, 1);
    }
    add("output_norm.weight".into(), s.d, 1);
    if let Some(d) = dup {
        let copy = t.iter().find(|(n, _)| n == d).map(|(n, q)| {
            let v = q.dequantize(&Device::Cpu).unwrap();
            (n.clone(), QTensor::quantize(&v, GgmlDType::F32).unwrap())
        });
        t.extend(copy);
    }
    let k = |x: &str| format!("{arch}.{x}");
    let mut meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        (k("block_count"), Value::U32(s.n_layer as u32)),
        (k("context_length"), Value::U32(64)),
        (k("embedding_length"), Value::U32(s.d as u32)),
        (k("attention.head_count"), Value::U32(s.n_head as u32)),
        (k("attention.head_count_kv"), Value::U32(s.n_kv_head as u32)),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(
                (0..s.vocab)
                    .map(|i| Value::String(format!("t{i}")))
                    .collect(),
            ),
        ),
        ("tokenizer.ggml.merges".into(), Value::Array(vec![])),
    ];
    meta.extend(extra);
    let mr: Vec<(&str, &Value)> = meta.iter().map(|(a, b)| (a.as_str(), b)).collect();
    let tr: Vec<(&str, &QTensor)> = t.iter().map(|(a, b)| (a.as_str(), b)).collect();
    let mut f = std::fs::File::create(p).unwrap();
    write(&mut f, &mr, &tr).unwrap();
}

#[test]
fn hand_written_gguf_loads_and_each_defect_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    write_custom(&p, "llama", |_, v, s| (v, s));
    load(&p).expect("the unaltered file loads");
    write_custom(&p, "mamba", |_, v, s| (v, s));
    expect_err(&p, "unknown architecture `mamba`");
    write_custom(&p, "llama", |n, mut v, s| {
        if n == "blk.1.attn_q.weight" {
            v[17] = f32::NAN;
        }
        (v, s)
    });
    expect_err(&p, "non-finite");
    write_custom(&p, "llama", |n, v, (o, i)| {
        if n == "blk.0.ffn_down.weight" {
            (v[..o * (i - 16)].to_vec(), (o, i - 16))
        } else {
            (v, (o, i))
        }
    });
    expect_err(&p, "blk.0.ffn_down.weight");
    write_custom(&p, "llama", |n, v, (o, i)| {
        if n == "blk.1.attn_k.weight" {
            (v[..(o - 8) * i].to_vec(), (o - 8, i))
        } else {
            (v, (o, i))
        }
    });
    expect_err(&p, "blk.1.attn_k.weight");
}

#[test]
fn corrupt_safetensors_and_config_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("config.json"),
        r#"{"model_type": "bert", "hidden_size": 8}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("model.safetensors"),
        b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}",
    )
    .unwrap();
    let e = load(d).err().unwrap().to_string();
    assert!(
        e.contains("model.safetensors") && e.contains("not a valid safetensors"),
        "{e}"
    );
    std::fs::write(d.join("config.json"), "{").unwrap();
    let e = load(d).err().unwrap().to_string();
    assert!(
        e.contains("config.json") && e.contains("invalid JSON"),
        "{e}"
    );
    let data: Vec<u8> = vec![0; 16];
    let st = safetensors::serialize(
        [(
            "x",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4], &data).unwrap(),
        )],
        None,
    )
    .unwrap();
    std::fs::write(d.join("model.safetensors"), st).unwrap();
    std::fs::write(d.join("config.json"), r#"{"model_type": "t5"}"#).unwrap();
    let e = load(d).err().unwrap().to_string();
    assert!(
        e.contains("unknown architecture") && e.contains("t5"),
        "{e}"
    );
    std::fs::write(d.join("config.json"), r#"{"model_type": "bert", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10, "max_position_embeddings": 4}"#).unwrap();
    let e = load(d).err().unwrap().to_string();
    assert!(
        e.contains("missing tensor") && e.contains("word_embeddings"),
        "{e}"
    );
}

#[test]
fn malformed_activations_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.safetensors");
    let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let h0 = f(&[1.0; 12]);
    let att = f(&[0.25; 2 * 3 * 4]);
    let st = safetensors::serialize(
        [
            (
                "hidden.0",
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![3, 4], &h0)
                    .unwrap(),
            ),
            (
                "attn.0",
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 3, 4], &att)
                    .unwrap(),
            ),
        ],
        None,
    )
    .unwrap();
    std::fs::write(&p, st).unwrap();
    let e = activations::analyze_file(&p).err().unwrap().to_string();
    assert!(
        e.contains("attn.0") && e.contains("expected [H, 3, 3]"),
        "{e}"
    );
    let st = safetensors::serialize(
        [(
            "hiddenX",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![3, 4], &h0).unwrap(),
        )],
        None,
    )
    .unwrap();
    std::fs::write(&p, st).unwrap();
    let e = activations::analyze_file(&p).err().unwrap().to_string();
    assert!(e.contains("no `hidden.0`"), "{e}");
}

/// One schema reader: the checks the real-model analysis used to make on its own (contiguous
/// layers, finite hidden states, integral token ids) now hold for both consumers, the
/// per-layer statistics and the secondary-sink detector.
#[test]
fn one_activation_reader_for_both_consumers() {
    use safetensors::Dtype;
    use safetensors::tensor::TensorView;
    use sinklab::runtime::activation_file::Activations;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.safetensors");
    let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let h = f(&[0.5; 12]);
    let mut bad = [0.5f32; 12];
    bad[7] = f32::NAN;
    let hbad = f(&bad);
    let tok_ok = f(&[1.0, 2.0, 3.0]);
    let tok_bad = f(&[1.0, 2.5, 3.0]);
    let write = |items: Vec<(&str, Vec<usize>, &Vec<u8>)>| {
        let views: Vec<(&str, TensorView<'_>)> = items
            .iter()
            .map(|(n, s, b)| (*n, TensorView::new(Dtype::F32, s.clone(), b).unwrap()))
            .collect();
        std::fs::write(&p, safetensors::serialize(views, None).unwrap()).unwrap();
    };
    let errs = || {
        (
            activations::analyze_file(&p).err().map(|e| e.to_string()),
            Activations::read(&p).err().map(|e| e.to_string()),
        )
    };
    // Layers 0 and 2 without 1.
    write(vec![
        ("hidden.0", vec![3, 4], &h),
        ("hidden.2", vec![3, 4], &h),
    ]);
    let (a, b) = errs();
    for e in [a.unwrap(), b.unwrap()] {
        assert!(
            e.contains("hidden.2") && e.contains("not contiguous"),
            "{e}"
        );
    }
    // A NaN in layer 1.
    write(vec![
        ("hidden.0", vec![3, 4], &h),
        ("hidden.1", vec![3, 4], &hbad),
    ]);
    let (a, b) = errs();
    for e in [a.unwrap(), b.unwrap()] {
        assert!(e.contains("hidden.1") && e.contains("non-finite"), "{e}");
    }
    // Float token ids: integral ones are read, a fractional one is an error.
    write(vec![
        ("hidden.0", vec![3, 4], &h),
        ("tokens", vec![3], &tok_ok),
    ]);
    assert_eq!(
        activations::analyze_file(&p).unwrap().tokens,
        Some(vec![1, 2, 3])
    );
    assert_eq!(Activations::read(&p).unwrap().tokens, Some(vec![1, 2, 3]));
    write(vec![
        ("hidden.0", vec![3, 4], &h),
        ("tokens", vec![3], &tok_bad),
    ]);
    let (a, b) = errs();
    for e in [a.unwrap(), b.unwrap()] {
        assert!(e.contains("tokens") && e.contains("2.5"), "{e}");
    }
}

// ---- issue 25: the GGUF header checked against the data ---------------------------------------

/// Where the data offset of tensor `name` sits in the tensor directory of a GGUF v2 file
/// (an info is: u64 name length, name, u32 n_dims, u64 dims, u32 dtype, u64 offset).
fn offset_at(b: &[u8], name: &str) -> usize {
    let mut pat = (name.len() as u64).to_le_bytes().to_vec();
    pat.extend_from_slice(name.as_bytes());
    let s = b
        .windows(pat.len())
        .position(|w| w == pat)
        .expect("tensor info");
    let end = s + pat.len();
    let nd = u32::from_le_bytes(b[end..end + 4].try_into().unwrap()) as usize;
    end + 4 + 8 * nd + 4
}

fn offset_of(b: &[u8], name: &str) -> u64 {
    let at = offset_at(b, name);
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Rewrites the data offset of tensor `name`: `f(file bytes)` gives the new one.
fn patch_offset(p: &Path, name: &str, f: impl Fn(&[u8]) -> u64) {
    let mut b = std::fs::read(p).unwrap();
    let (at, new) = (offset_at(&b, name), f(&b));
    b[at..at + 8].copy_from_slice(&new.to_le_bytes());
    std::fs::write(p, b).unwrap();
}

#[test]
fn gguf_alignment_offsets_and_names_are_checked_against_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    let same = |_: &str, v: Vec<f32>, s: (usize, usize)| (v, s);
    let align = |v: Value| vec![("general.alignment".to_string(), v)];
    // The control: an explicit alignment of 32 (what candle's writer uses) loads.
    write_custom_with(&p, "llama", same, align(Value::U32(32)), None);
    load(&p).expect("general.alignment = 32 loads");
    // Zero: a division by zero inside candle before; now refused.
    write_custom_with(&p, "llama", same, align(Value::U32(0)), None);
    expect_err(&p, "`general.alignment` = 0");
    // A u64 alignment was ignored (candle's default 32 used instead).
    write_custom_with(&p, "llama", same, align(Value::U64(32)), None);
    expect_err(&p, "`general.alignment` is a uint64");
    write_custom_with(&p, "llama", same, align(Value::U32(12)), None);
    expect_err(
        &p,
        "`general.alignment` = 12: must be a positive multiple of 8",
    );
    // The same tensor twice (the second used to win).
    write_custom_with(&p, "llama", same, Vec::new(), Some("blk.0.attn_v.weight"));
    expect_err(&p, "tensor `blk.0.attn_v.weight` appears twice");
    // The same metadata key twice.
    let twice = vec![("llama.context_length".to_string(), Value::U32(32))];
    write_custom_with(&p, "llama", same, twice, None);
    expect_err(&p, "metadata key `llama.context_length` appears twice");
    // A misaligned offset, and one tensor's offset pointing into another's bytes.
    write_custom(&p, "llama", same);
    patch_offset(&p, "blk.0.attn_k.weight", |b| {
        offset_of(b, "blk.0.attn_k.weight") + 4
    });
    expect_err(&p, "tensor `blk.0.attn_k.weight` starts at data offset");
    write_custom(&p, "llama", same);
    patch_offset(&p, "blk.0.attn_k.weight", |b| {
        offset_of(b, "blk.0.attn_q.weight") + 32
    });
    expect_err(&p, "overlap");
}

#[test]
fn gguf_token_ids_of_the_wrong_type_or_range_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    let same = |_: &str, v: Vec<f32>, s: (usize, usize)| (v, s);
    let bos = |v: Value| vec![("tokenizer.ggml.bos_token_id".to_string(), v)];
    write_custom_with(&p, "llama", same, bos(Value::U32(1)), None);
    let m = load(&p).expect("a u32 BOS id loads");
    assert_eq!(m.model.cfg.bos_id, Some(1));
    for v in [
        Value::String("1".into()),
        Value::I32(-1),
        Value::U64((1u64 << 32) + 1),
        Value::F32(1.0),
    ] {
        write_custom_with(&p, "llama", same, bos(v), None);
        expect_err(&p, "`tokenizer.ggml.bos_token_id`");
    }
}

/// Rewrites the u32 value of metadata key `key` (stored as type 4, uint32).
fn patch_meta_u32(p: &Path, key: &str, f: impl Fn(u32) -> u32) {
    let mut b = std::fs::read(p).unwrap();
    let mut pat = (key.len() as u64).to_le_bytes().to_vec();
    pat.extend_from_slice(key.as_bytes());
    let at = b.windows(pat.len()).position(|w| w == pat).expect("key") + pat.len();
    assert_eq!(
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap()),
        4,
        "uint32"
    );
    let v = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap());
    b[at + 4..at + 8].copy_from_slice(&f(v).to_le_bytes());
    std::fs::write(p, b).unwrap();
}

#[test]
fn gguf_tensor_count_and_block_count_must_describe_the_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    let same = |_: &str, v: Vec<f32>, s: (usize, usize)| (v, s);
    // The control: the file as written loads, every tensor used.
    write_custom(&p, "llama", same);
    let full = load(&p).expect("the unaltered file loads");
    assert_eq!(full.model.layers.len(), SynthShape::default().n_layer);
    // `tensor_count` one short (header bytes 8..16 of GGUF v2/v3): the directory then ends one
    // info early, every data offset shifts, and the loader used to run on shifted bytes.
    write_custom(&p, "llama", same);
    let mut b = std::fs::read(&p).unwrap();
    let n = u64::from_le_bytes(b[8..16].try_into().unwrap());
    b[8..16].copy_from_slice(&(n - 1).to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    let msg = std::panic::catch_unwind(|| load(&p).err().map(|e| e.to_string()))
        .expect("no panic")
        .expect("a tensor_count one short is refused");
    assert!(
        msg.contains(&p.display().to_string()) && !msg.contains("candle_core::"),
        "{msg}"
    );
    // A smaller `block_count`: the last layer's tensors used to be ignored, fewer layers run.
    write_custom(&p, "llama", same);
    patch_meta_u32(&p, "llama.block_count", |v| v - 1);
    let last = SynthShape::default().n_layer - 1;
    expect_err(&p, &format!("tensor `blk.{last}."));
    expect_err(&p, "not used by the `llama` loader");
}
