//! Chat templates rendered by minijinja against transformers' `apply_chat_template(…,
//! add_generation_prompt=True, tokenize=True)` on the same model files
//! (`scripts/make_chat_fixtures.py` → `tests/fixtures/chat_template_ids.json`): identical ids
//! (tokenization is discrete: no tolerance) on every packaged model that ships a template, and
//! a refusal naming the model on every one that does not.

#[path = "support/models.rs"]
mod models;
use models::model_or_skip;
use sinklab::runtime::chat_template::ChatTemplate;
use sinklab::runtime::load;
use std::path::PathBuf;
use std::process::Command;

fn fixture() -> serde_json::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat_template_ids.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Every message of the fixture, for one model: same ids as transformers, or (fixture `null`)
/// the refusal.
fn check(name: &str) {
    let Some(path) = model_or_skip(name) else {
        return;
    };
    let fx = fixture();
    let lm = load(&path).unwrap();
    let tok = lm.tok.as_ref().unwrap();
    let msgs = fx["messages"].as_array().unwrap();
    match fx["ids"][name].as_array() {
        Some(want) => {
            assert!(tok.chat.is_some(), "{name}: template not read");
            for (m, w) in msgs.iter().zip(want) {
                let w: Vec<u32> = w
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as u32)
                    .collect();
                let got = tok.encode_chat(m.as_str().unwrap(), &path).unwrap();
                assert_eq!(got, w, "{name}: ids differ on {m}");
            }
        }
        None => {
            assert!(tok.chat.is_none(), "{name}: transformers finds no template");
            let e = tok.encode_chat("x", &path).unwrap_err().to_string();
            assert!(
                e.contains("no chat template") && e.contains(&path.display().to_string()),
                "{name}: {e}"
            );
        }
    }
}

#[test]
fn smollm2_chat_ids_match_transformers() {
    check("smollm2");
}

#[test]
fn qwen_chat_ids_match_transformers() {
    check("qwen2.5-coder-0.5b");
}

#[test]
fn gemma3_without_template_is_refused() {
    check("gemma3-270m");
}

#[test]
fn minilm_without_template_is_refused() {
    check("minilm");
}

/// The CLI refuses `--chat` on a model without a template with a message naming it, exit ≠ 0.
#[test]
fn cli_chat_refuses_a_model_without_template() {
    let Some(path) = model_or_skip("minilm") else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_sinklab"))
        .args([
            "real",
            "--model",
            path.to_str().unwrap(),
            "--chat",
            "--text",
            "hi",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no chat template"), "{err}");
}

fn template(src: &str) -> ChatTemplate {
    ChatTemplate {
        source: src.into(),
        bos_token: "<s>".into(),
        eos_token: "</s>".into(),
        origin: "test".into(),
    }
}

/// transformers' whitespace rules: `trim_blocks` drops the newline after a block tag,
/// `lstrip_blocks` the indentation before one; `.strip()` comes from pycompat.
#[test]
fn renders_with_transformers_whitespace_rules_and_python_methods() {
    let src = "{{ bos_token }}{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content.strip() }}]\n    {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}>{% endif %}";
    assert_eq!(template(src).render_user("  hi ").unwrap(), "<s>[hi]\n>");
}

/// A template the engine cannot parse, or one that raises, is refused with the reason.
#[test]
fn refuses_what_the_engine_cannot_render() {
    let e = template("{% for m in messages %}")
        .render_user("x")
        .unwrap_err();
    assert!(e.to_string().contains("cannot parse"), "{e}");
    let e = template("{{ raise_exception('no system role') }}")
        .render_user("x")
        .unwrap_err();
    assert!(e.to_string().contains("no system role"), "{e}");
}
