//! A model's own chat template (a Jinja program shipped with the weights: GGUF
//! `tokenizer.chat_template`, or `chat_template` in a Hugging Face directory's
//! `tokenizer_config.json`), rendered with the `minijinja` engine the way transformers'
//! `apply_chat_template` renders it: `trim_blocks` and `lstrip_blocks` on, loop controls,
//! Python string methods (`.strip()`, `.startswith()`, …), `raise_exception`, and the context
//! `messages = [{role: "user", content: …}]`, `add_generation_prompt = true`, `bos_token`,
//! `eos_token`. The rendered text is then tokenized with special tokens recognised and no
//! BOS added ([`super::tokenizer::Tok::encode_chat`]): the template writes its own.
//!
//! A model without a template, or a template the engine cannot parse or render, is refused
//! with the model file and the engine's message; nothing is guessed.
//!
//! A template is untrusted input (it ships inside a model file), so it is rendered under
//! bounds: at most [`MAX_SOURCE_BYTES`] of source, the engine's fuel ([`FUEL`]: instructions
//! and allocated bytes, so `'x' * 10**9`, `batch(10**9)`, `indent(10**6)` or nested
//! `range(100000)` loops stop early), its recursion limit ([`RECURSION_LIMIT`]), on a thread
//! with a [`STACK_BYTES`] stack (so deeply chained filters cannot overflow the caller's), and
//! an output of at most [`MAX_OUTPUT_BYTES`]. Real templates use a small fraction of each.

use super::RealError;
use minijinja::value::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A chat template and the special-token strings it is rendered with.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    /// The Jinja source.
    pub source: String,
    /// `bos_token` in the rendering context (empty when the model has none).
    pub bos_token: String,
    /// `eos_token` in the rendering context (empty when the model has none).
    pub eos_token: String,
    /// Where the template was read (file and key), for messages.
    pub origin: String,
}

/// Why no chat text could be made.
pub fn no_template(path: &Path, where_: &str) -> RealError {
    RealError::file(
        path,
        format!(
            "this model ships no chat template ({where_}); --chat needs the model's own \
             template (refusing rather than inventing one)"
        ),
    )
}

/// Largest template source accepted (256 KiB; real templates are a few kB).
pub const MAX_SOURCE_BYTES: usize = 256 << 10;
/// The engine's fuel for one render (about one unit per instruction or per 64 bytes
/// allocated: at most about 640 MB and a few seconds).
pub const FUEL: u64 = 10_000_000;
/// The engine's recursion limit (its default, 500, is the most it allows without stack
/// growth; nested blocks and macros of real templates stay below 20).
pub const RECURSION_LIMIT: usize = 200;
/// Stack of the thread a template is parsed and rendered on (the parser and compiler recurse
/// over nested expressions).
pub const STACK_BYTES: usize = 256 << 20;
/// Largest rendered text accepted, besides the user's own content (1 MiB).
pub const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// Widest `tojson(indent=…)` accepted (the engine builds the whole text before charging its
/// fuel, and the indent repeats on every line and level).
pub const MAX_JSON_INDENT: usize = 64;

/// Widest padding a Python string method may ask for (`center`, `ljust`, `rjust`, `zfill`,
/// `expandtabs`, a width in `str.format`): these build their text before any fuel is charged.
pub const MAX_PAD_WIDTH: i64 = 65_536;

/// Refuses a Python string method whose padding width is over [`MAX_PAD_WIDTH`].
fn padded_width_ok(value: &Value, method: &str, args: &[Value]) -> Result<(), minijinja::Error> {
    let over = |w: String| {
        Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            format!("`{method}` with width {w} is over the limit of {MAX_PAD_WIDTH}"),
        ))
    };
    match method {
        "center" | "ljust" | "rjust" | "zfill" | "expandtabs" => {
            for a in args {
                if let Ok(w) = i64::try_from(a.clone())
                    && w > MAX_PAD_WIDTH
                {
                    return over(w.to_string());
                }
            }
        }
        "format" => {
            // A width or precision in a replacement field: the longest digit run.
            let s = value.as_str().unwrap_or_default();
            let digits = s
                .split(|c: char| !c.is_ascii_digit())
                .map(str::len)
                .max()
                .unwrap_or(0);
            if digits > 5 {
                return over(format!("of {digits} digits"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// The transformers-compatible environment: whitespace control as transformers sets it,
/// loop controls, Python string methods and `raise_exception`.
fn environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .expect("the default delimiters are valid");
    env.set_syntax(syntax);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION_LIMIT);
    env.add_filter(
        "tojson",
        |value: Value,
         indent: Option<Value>,
         kwargs: minijinja::value::Kwargs|
         -> Result<Value, minijinja::Error> {
            let given = match &indent {
                Some(v) => Some(v.clone()),
                None => kwargs.get::<Option<Value>>("indent")?,
            };
            if let Some(w) = given.and_then(|v| usize::try_from(v).ok())
                && w > MAX_JSON_INDENT
            {
                return Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    format!("tojson(indent={w}) is over the limit of {MAX_JSON_INDENT}"),
                ));
            }
            minijinja::filters::tojson(&value, indent, kwargs)
        },
    );
    env.set_unknown_method_callback(|state, value, method, args| {
        padded_width_ok(value, method, args)?;
        minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
    });
    env.add_function(
        "raise_exception",
        |msg: String| -> Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                format!("the template raised: {msg}"),
            ))
        },
    );
    env
}

impl ChatTemplate {
    /// Renders one user turn with the generation prompt on (the assistant's turn opened),
    /// under the bounds of the module documentation.
    pub fn render_user(&self, content: &str) -> Result<String, RealError> {
        if self.source.len() > MAX_SOURCE_BYTES {
            return Err(RealError::Input(format!(
                "chat template of {}: {} bytes, over the limit of {MAX_SOURCE_BYTES} bytes \
                 (refusing to parse it)",
                self.origin,
                self.source.len()
            )));
        }
        let out = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("chat-template".into())
                .stack_size(STACK_BYTES)
                .spawn_scoped(s, || self.render_bounded(content))
                .map_err(|e| RealError::Input(format!("chat template: no render thread: {e}")))?
                .join()
                .map_err(|_| {
                    RealError::Input(format!(
                        "chat template of {}: the engine failed while rendering it",
                        self.origin
                    ))
                })?
        })?;
        let cap = MAX_OUTPUT_BYTES.saturating_add(content.len().saturating_mul(2));
        if out.len() > cap {
            return Err(RealError::Input(format!(
                "chat template of {}: the rendered text holds {} bytes, over the limit of {cap} \
                 (1 MiB besides twice the message)",
                self.origin,
                out.len()
            )));
        }
        Ok(out)
    }

    fn render_bounded(&self, content: &str) -> Result<String, RealError> {
        let fail = |what: &str, e: minijinja::Error| {
            RealError::Input(format!(
                "chat template of {}: the engine cannot {what} it: {e:#}",
                self.origin
            ))
        };
        let mut env = environment();
        env.add_template_owned("chat_template", self.source.clone())
            .map_err(|e| fail("parse", e))?;
        let t = env
            .get_template("chat_template")
            .map_err(|e| fail("load", e))?;
        let msg: BTreeMap<&str, Value> = [
            ("role", Value::from("user")),
            ("content", Value::from(content)),
        ]
        .into();
        let ctx: BTreeMap<&str, Value> = [
            ("messages", Value::from(vec![Value::from(msg)])),
            ("add_generation_prompt", Value::from(true)),
            ("bos_token", Value::from(self.bos_token.as_str())),
            ("eos_token", Value::from(self.eos_token.as_str())),
        ]
        .into();
        t.render(Value::from(ctx)).map_err(|e| fail("render", e))
    }
}

/// The template of a GGUF file's metadata: `tokenizer.chat_template`, with `bos_token` and
/// `eos_token` the vocabulary entries of `tokenizer.ggml.{bos,eos}_token_id`.
pub fn from_gguf_meta(
    source: Option<&str>,
    tokens: &[String],
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    path: &Path,
) -> Option<ChatTemplate> {
    let tok = |id: Option<u32>| {
        id.and_then(|i| tokens.get(i as usize).cloned())
            .unwrap_or_default()
    };
    source.map(|s| ChatTemplate {
        source: s.to_string(),
        bos_token: tok(bos_id),
        eos_token: tok(eos_id),
        origin: format!("{} (`tokenizer.chat_template`)", path.display()),
    })
}

/// The template of a Hugging Face directory: `chat_template` of `tokenizer_config.json`
/// (a string; the list form of named templates is refused), or a `chat_template.jinja` file;
/// `bos_token`/`eos_token` from `tokenizer_config.json` (a string or `{content: …}`).
pub fn from_hf_dir(dir: &Path) -> Result<Option<ChatTemplate>, RealError> {
    let cfg_path: PathBuf = dir.join("tokenizer_config.json");
    let cfg: serde_json::Value = if cfg_path.exists() {
        let s = crate::budget::read_text(&cfg_path, crate::budget::MAX_CONFIG_BYTES)
            .map_err(|e| RealError::io(&cfg_path, e))?;
        serde_json::from_str(&s)
            .map_err(|e| RealError::file(&cfg_path, format!("not JSON: {e}")))?
    } else {
        serde_json::Value::Null
    };
    let special = |k: &str| match &cfg[k] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => o
            .get("content")
            .and_then(|c| c.as_str())
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    };
    let jinja = dir.join("chat_template.jinja");
    let (source, origin) = match &cfg["chat_template"] {
        serde_json::Value::String(s) => (
            s.clone(),
            format!("{} (`chat_template`)", cfg_path.display()),
        ),
        serde_json::Value::Null if jinja.exists() => (
            crate::budget::read_text(&jinja, crate::budget::MAX_TEMPLATE_BYTES)
                .map_err(|e| RealError::io(&jinja, e))?,
            jinja.display().to_string(),
        ),
        serde_json::Value::Null => return Ok(None),
        _ => {
            return Err(RealError::file(
                &cfg_path,
                "`chat_template` is not a single string (named templates are not implemented)",
            ));
        }
    };
    Ok(Some(ChatTemplate {
        source,
        bos_token: special("bos_token"),
        eos_token: special("eos_token"),
        origin,
    }))
}
