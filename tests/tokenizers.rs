//! Tokenizers built from GGUF metadata against each model's own Hugging Face tokenizer
//! (transformers loading the same GGUF, `scripts/make_qwen_fixtures.py` →
//! `tests/fixtures/tokenizer_ids.json`) on texts with code, indentation, tabs, newlines and CRLF,
//! digits, punctuation, contractions and non-ASCII: one test per packaged GGUF, i.e. per
//! pre-tokenizer rule in use (`qwen2`, `smollm`, SentencePiece `default` for Gemma). Ids must be
//! identical (no tolerance: tokenization is discrete). Plus the BOS policy on both formats.

#[path = "support/models.rs"]
mod models;
use models::model_or_skip;
use sinklab::runtime::load;
use sinklab::runtime::tokenizer::Bos;
use std::path::PathBuf;

fn fixture() -> serde_json::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer_ids.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn same_ids_as_transformers(name: &str) {
    let Some(path) = model_or_skip(name) else {
        return;
    };
    let fx = fixture();
    let lm = load(&path).unwrap();
    let tok = lm.tok.as_ref().unwrap();
    let texts = fx["texts"].as_array().unwrap();
    let want = fx["ids"][name].as_array().unwrap();
    for (t, w) in texts.iter().zip(want) {
        let t = t.as_str().unwrap();
        let w: Vec<u32> = w
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(t, Bos::No).unwrap();
        assert_eq!(got, w, "{name}: ids differ on {t:?}");
        assert_eq!(
            tok.decode(&got),
            t,
            "{name}: decode does not round-trip {t:?}"
        );
    }
}

#[test]
fn qwen2_pre_tokenizer_matches_transformers() {
    same_ids_as_transformers("qwen2.5-coder-0.5b");
}

#[test]
fn smollm_pre_tokenizer_matches_transformers() {
    same_ids_as_transformers("smollm2");
}

#[test]
fn gemma_sentencepiece_matches_transformers() {
    same_ids_as_transformers("gemma3-270m");
}

#[test]
fn bos_yes_prepends_the_models_bos_on_gguf() {
    let Some(path) = model_or_skip("qwen2.5-coder-0.5b") else {
        return;
    };
    let lm = load(&path).unwrap();
    let tok = lm.tok.as_ref().unwrap();
    let auto = tok.encode("def f():", Bos::Auto).unwrap();
    let yes = tok.encode("def f():", Bos::Yes).unwrap();
    // Qwen's GGUF says add_bos_token = false; --bos yes adds its bos_token_id (151643).
    assert_eq!(yes[0], 151643);
    assert_eq!(&yes[1..], &auto[..]);
    assert_eq!(tok.encode("def f():", Bos::No).unwrap(), auto);
}

/// A character the vocabulary cannot encode (no token, no byte fallback, no unknown token) used
/// to vanish from the ids; now the text is refused naming it. The control: a text of known
/// words, and an unknown word where the vocabulary has an unknown token, both encode.
#[test]
fn characters_the_vocabulary_cannot_encode_are_refused_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let tok = |unk: bool| {
        let (unk_entry, unk_token) = if unk {
            (r#", "[UNK]": 4"#, r#""[UNK]""#)
        } else {
            ("", "null")
        };
        let model = format!(
            r#"{{"type": "BPE", "vocab": {{"a": 0, "b": 1, "c": 2, "d": 3{unk_entry}}},
                "merges": [], "unk_token": {unk_token}, "dropout": null,
                "continuing_subword_prefix": null, "end_of_word_suffix": null,
                "fuse_unk": false, "byte_fallback": false}}"#
        );
        let p = dir.path().join(format!("tokenizer{unk}.json"));
        let json = format!(
            r#"{{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
                "normalizer": null, "pre_tokenizer": {{"type": "Whitespace"}},
                "post_processor": null, "decoder": null, "model": {model}}}"#
        );
        std::fs::write(&p, json).unwrap();
        sinklab::runtime::tokenizer::from_json(&p).unwrap()
    };
    let plain = tok(false);
    assert_eq!(
        plain.encode("ab cd  ab", Bos::No).unwrap(),
        [0, 1, 2, 3, 0, 1]
    );
    let e = plain.encode("ab zz cd", Bos::No).unwrap_err().to_string();
    assert!(
        e.contains("cannot encode 'z' (character 4 of the text)"),
        "{e}"
    );
    let with_unk = tok(true);
    assert_eq!(
        with_unk.encode("ab zz cd", Bos::No).unwrap(),
        [0, 1, 4, 4, 2, 3]
    );
}
