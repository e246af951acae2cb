//! Tokenizers through the `tokenizers` crate: built from a GGUF file's vocabulary
//! (`tokenizer.ggml.model = gpt2`: byte-level BPE with the file's merges; `llama` for Gemma:
//! SentencePiece-style BPE with byte fallback, merges recovered from the vocabulary in file
//! order), or read from a `tokenizer.json`.
//!
//! BOS is handled here, not by a post-processor: [`Tok::encode`] takes a [`Bos`] policy.

use super::RealError;
use super::gguf::GgufFile;
use candle_core::quantized::gguf_file::Value;
use std::path::Path;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecSeq;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSeq;
use tokenizers::pre_tokenizers::split::Split;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// Whether to put a BOS token first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Bos {
    /// The model's own default (GGUF `add_bos_token`, BERT's `[CLS] … [SEP]` template).
    Auto,
    /// Always prepend BOS (if not already first).
    Yes,
    /// Never.
    No,
}

/// A tokenizer plus its BOS conventions.
pub struct Tok {
    /// The underlying tokenizer.
    pub inner: Tokenizer,
    /// BOS id (decoders).
    pub bos_id: Option<u32>,
    /// Whether BOS is added by default.
    pub add_bos: bool,
    /// Special tokens come from a post-processor template (BERT's `[CLS] … [SEP]`).
    pub template: bool,
    /// The model's chat template, when its files carry one ([`super::chat_template`]).
    pub chat: Option<super::chat_template::ChatTemplate>,
}

fn strings(g: &GgufFile, key: &str, path: &Path) -> Result<Vec<String>, RealError> {
    match g.meta(key) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                _ => Err(RealError::file(path, format!("`{key}` holds a non-string"))),
            })
            .collect(),
        _ => Err(RealError::file(
            path,
            format!("missing tokenizer metadata `{key}`"),
        )),
    }
}

fn int_of(v: &Value) -> Option<u32> {
    match v {
        Value::U8(x) => Some(*x as u32),
        Value::I8(x) => Some(*x as u32),
        Value::U16(x) => Some(*x as u32),
        Value::I16(x) => Some(*x as u32),
        Value::U32(x) => Some(*x),
        Value::I32(x) => Some(*x as u32),
        Value::U64(x) => Some(*x as u32),
        Value::I64(x) => Some(*x as u32),
        _ => None,
    }
}

/// Builds the tokenizer of an open GGUF file.
pub fn from_gguf(g: &GgufFile, path: &Path) -> Result<Tok, RealError> {
    let terr = |e: tokenizers::Error| RealError::file(path, format!("tokenizer: {e}"));
    let kind = g
        .meta_str("tokenizer.ggml.model")
        .ok_or_else(|| RealError::file(path, "missing `tokenizer.ggml.model`"))?
        .to_string();
    let tokens = strings(g, "tokenizer.ggml.tokens", path)?;
    let types: Vec<u32> = match g.meta("tokenizer.ggml.token_type") {
        Some(Value::Array(a)) => a.iter().map(|v| int_of(v).unwrap_or(1)).collect(),
        _ => vec![1; tokens.len()],
    };
    let (bos_id, add_bos) = g.bos(false)?;
    let mut tk = match kind.as_str() {
        "gpt2" => {
            let merges: Vec<(String, String)> = strings(g, "tokenizer.ggml.merges", path)?
                .into_iter()
                .map(|m| {
                    m.split_once(' ')
                        .map(|(a, b)| (a.to_string(), b.to_string()))
                        .ok_or_else(|| RealError::file(path, format!("bad merge `{m}`")))
                })
                .collect::<Result<_, _>>()?;
            let vocab: Vocab = tokens
                .iter()
                .enumerate()
                .map(|(i, t)| (t.clone(), i as u32))
                .collect();
            let bpe = BPE::builder()
                .vocab_and_merges(vocab, merges)
                .build()
                .map_err(terr)?;
            let mut tk = Tokenizer::new(bpe);
            let pre = g.meta_str("tokenizer.ggml.pre").ok_or_else(|| {
                RealError::file(
                    path,
                    "missing `tokenizer.ggml.pre`: the pre-tokenizer split rule of this BPE \
                     vocabulary is unknown (refusing rather than guessing)",
                )
            })?;
            tk.with_pre_tokenizer(Some(bpe_pre_tokenizer(pre, path)?));
            tk.with_decoder(Some(ByteLevel::new(false, true, true)));
            if pre == "llama-bpe" {
                // Llama 3's tokenizer.json sets `ignore_merges`: a word already in the vocabulary
                // is one token.
                if let tokenizers::ModelWrapper::BPE(b) = tk.get_model() {
                    let mut b = b.clone();
                    b.ignore_merges = true;
                    tk.with_model(b);
                }
            }
            tk
        }
        "llama" => {
            match g.meta_str("tokenizer.ggml.pre") {
                None | Some("default") => {}
                Some(other) => {
                    return Err(RealError::file(
                        path,
                        format!(
                            "`tokenizer.ggml.pre` = \"{other}\" with a SentencePiece (`llama`) \
                             vocabulary is not implemented (only `default`)"
                        ),
                    ));
                }
            }
            // SentencePiece BPE (Gemma): tokens of only spaces are spelled with ▁; merges are every
            // split of a token into two vocabulary pieces, ordered by the token's position in the
            // file, then longer left piece, then longer right piece.
            let spelled: Vec<String> = tokens
                .iter()
                .map(|t| {
                    if t.contains(' ') && t.trim().is_empty() {
                        "\u{2581}".repeat(t.chars().count())
                    } else {
                        t.clone()
                    }
                })
                .collect();
            let mut vocab: Vocab = Vocab::with_capacity(spelled.len());
            for (i, t) in spelled.iter().enumerate() {
                vocab.insert(t.clone(), i as u32);
            }
            let mut merges: Vec<(usize, usize, usize, String, String)> = Vec::new();
            for (i, t) in spelled.iter().enumerate() {
                let idx: Vec<usize> = t.char_indices().map(|(b, _)| b).skip(1).collect();
                let nchar = t.chars().count();
                let mut local = Vec::new();
                for (k, &b) in idx.iter().enumerate() {
                    let (l, r) = (&t[..b], &t[b..]);
                    if let (Some(&il), Some(&ir)) = (vocab.get(l), vocab.get(r)) {
                        local.push((il, ir, k + 1, nchar - k - 1, l.to_string(), r.to_string()));
                    }
                }
                local.sort_by_key(|x| (x.0, x.1));
                merges.extend(
                    local
                        .into_iter()
                        .map(|(_, _, ll, lr, l, r)| (i, ll, lr, l, r)),
                );
            }
            merges.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
            let merges: Vec<(String, String)> = merges.into_iter().map(|m| (m.3, m.4)).collect();
            let unk = g
                .meta("tokenizer.ggml.unknown_token_id")
                .and_then(int_of)
                .and_then(|i| spelled.get(i as usize).cloned());
            let mut b = BPE::builder()
                .vocab_and_merges(vocab, merges)
                .byte_fallback(true)
                .fuse_unk(true);
            if let Some(u) = unk {
                b = b.unk_token(u);
            }
            let mut tk = Tokenizer::new(b.build().map_err(terr)?);
            tk.with_normalizer(Some(Replace::new(" ", "\u{2581}").map_err(terr)?));
            tk.with_pre_tokenizer(Some(
                Split::new(" ", SplitDelimiterBehavior::MergedWithPrevious, false).map_err(terr)?,
            ));
            tk.with_decoder(Some(DecSeq::new(vec![
                Replace::new("\u{2581}", " ").map_err(terr)?.into(),
                ByteFallback::new().into(),
                Fuse::new().into(),
            ])));
            tk
        }
        other => {
            return Err(RealError::file(
                path,
                format!("unsupported tokenizer model `{other}` (supported: gpt2, llama)"),
            ));
        }
    };
    // Control tokens (type 3) stay whole.
    let specials: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(_, ty)| **ty == 3)
        .map(|(t, _)| AddedToken::from(t.clone(), true))
        .collect();
    tk.add_special_tokens(&specials);
    // User-defined tokens (type 4) are matched whole, as llama.cpp and transformers do.
    let user: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(t, ty)| **ty == 4 && tk.token_to_id(t).is_some())
        .map(|(t, _)| AddedToken::from(t.clone(), false).normalized(false))
        .collect();
    tk.add_tokens(&user);
    let eos_id = g
        .meta_int_opt("tokenizer.ggml.eos_token_id", u32::MAX as u64)?
        .map(|v| v as u32);
    let chat = super::chat_template::from_gguf_meta(
        g.meta_str("tokenizer.chat_template"),
        &tokens,
        bos_id,
        eos_id,
        path,
    );
    Ok(Tok {
        inner: tk,
        bos_id,
        add_bos,
        template: false,
        chat,
    })
}

/// Split rule of Qwen2's `tokenizer.json` (one digit per piece, contractions
/// case-insensitive, newlines grouped).
pub const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Split rule of Llama 3's `tokenizer.json` (`llama-bpe`: digits in groups of up to three).
pub const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer of a byte-level BPE vocabulary, by `tokenizer.ggml.pre`:
/// `gpt2` (GPT-2's own regex inside ByteLevel), `smollm` (digits one by one, then GPT-2),
/// `qwen2` ([`QWEN2_SPLIT`]), `llama-bpe` ([`LLAMA3_SPLIT`]); anything else is refused.
pub fn bpe_pre_tokenizer(
    pre: &str,
    path: &Path,
) -> Result<tokenizers::PreTokenizerWrapper, RealError> {
    let terr = |e: tokenizers::Error| RealError::file(path, format!("tokenizer: {e}"));
    let split = |re: &str| -> Result<tokenizers::PreTokenizerWrapper, RealError> {
        let sp = Split::new(
            tokenizers::pre_tokenizers::split::SplitPattern::Regex(re.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(terr)?;
        Ok(PreSeq::new(vec![sp.into(), ByteLevel::new(false, true, false).into()]).into())
    };
    Ok(match pre {
        "gpt2" => ByteLevel::new(false, true, true).into(),
        "smollm" => PreSeq::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])
        .into(),
        "qwen2" => split(QWEN2_SPLIT)?,
        "llama-bpe" => split(LLAMA3_SPLIT)?,
        other => {
            return Err(RealError::file(
                path,
                format!(
                    "`tokenizer.ggml.pre` = \"{other}\" is not implemented (gpt2, smollm, qwen2, \
                     llama-bpe): its split rule would be guessed"
                ),
            ));
        }
    })
}

/// Reads a `tokenizer.json` (padding and truncation switched off).
pub fn from_json(path: &Path) -> Result<Tok, RealError> {
    let text = crate::budget::read_text(path, crate::budget::MAX_TOKENIZER_BYTES)
        .map_err(|e| RealError::io(path, e))?;
    let mut tk: Tokenizer = text
        .parse()
        .map_err(|e| RealError::file(path, format!("tokenizer: {e}")))?;
    tk.with_padding(None);
    tk.with_truncation(None)
        .map_err(|e| RealError::file(path, format!("tokenizer: {e}")))?;
    // A post-processor counts as a template only if it really adds tokens: transformers writes
    // a `TemplateProcessing` with no special tokens for many decoders, and treating that as a
    // template would make `--bos yes` a no-op.
    let adds = |t: &Tokenizer| -> Result<bool, RealError> {
        let e = |e: tokenizers::Error| RealError::file(path, format!("tokenizer: {e}"));
        let with = t.encode("a", true).map_err(e)?.get_ids().len();
        let without = t.encode("a", false).map_err(e)?.get_ids().len();
        Ok(with != without)
    };
    let template = tk.get_post_processor().is_some() && adds(&tk)?;
    let bos_id = [
        "[CLS]",
        "<s>",
        "<|begin_of_text|>",
        "<bos>",
        "<|endoftext|>",
        "<|im_start|>",
    ]
    .iter()
    .find_map(|t| tk.token_to_id(t));
    let chat = match path.parent() {
        Some(dir) => super::chat_template::from_hf_dir(dir)?,
        None => None,
    };
    Ok(Tok {
        inner: tk,
        bos_id,
        add_bos: template,
        template,
        chat,
    })
}

impl Tok {
    /// Token ids of `text` under the BOS policy.
    pub fn encode(&self, text: &str, bos: Bos) -> Result<Vec<u32>, RealError> {
        let with_template = self.template && bos != Bos::No;
        let enc = self
            .inner
            .encode(text, with_template)
            .map_err(|e| RealError::Input(format!("tokenizer: {e}")))?;
        refuse_dropped(text, enc.get_offsets())?;
        let mut ids = enc.get_ids().to_vec();
        if !self.template {
            apply_bos(&mut ids, bos, self.bos_id, self.add_bos)?;
        }
        if ids.is_empty() {
            return Err(RealError::Input("the text tokenizes to no tokens".into()));
        }
        Ok(ids)
    }
    /// Token ids of one user turn `text` under the model's chat template, generation prompt
    /// on ([`super::chat_template`]): special tokens in the rendered text are recognised,
    /// and no BOS is added (the template writes its own), as transformers'
    /// `apply_chat_template(…, tokenize=True)` does. `model` names the model in the refusal.
    pub fn encode_chat(&self, text: &str, model: &Path) -> Result<Vec<u32>, RealError> {
        let Some(ct) = &self.chat else {
            return Err(super::chat_template::no_template(
                model,
                "no `tokenizer.chat_template` in a GGUF file, no `chat_template` in \
                 tokenizer_config.json",
            ));
        };
        let rendered = ct.render_user(text)?;
        let ids = self
            .inner
            .encode(rendered.as_str(), false)
            .map_err(|e| RealError::Input(format!("tokenizer: {e}")))?
            .get_ids()
            .to_vec();
        if ids.is_empty() {
            return Err(RealError::Input(
                "the chat text tokenizes to no tokens".into(),
            ));
        }
        Ok(ids)
    }
    /// Decodes ids to text.
    pub fn decode(&self, ids: &[u32]) -> String {
        self.inner.decode(ids, false).unwrap_or_default()
    }
}

/// Refuses a text with a character no token covers (byte offsets of the encoding): a
/// vocabulary with no token and no byte fallback for it would drop it silently, and the
/// statistics would be those of another text. White space may go unencoded (pre-tokenizers
/// split on it); an unknown-token replacement covers its character and passes.
fn refuse_dropped(text: &str, offsets: &[(usize, usize)]) -> Result<(), RealError> {
    let mut covered = vec![false; text.len()];
    for &(s, e) in offsets {
        for c in &mut covered[s.min(text.len())..e.min(text.len())] {
            *c = true;
        }
    }
    match text
        .char_indices()
        .enumerate()
        .find(|(_, (b, ch))| !ch.is_whitespace() && !covered[*b])
    {
        None => Ok(()),
        Some((n, (_, ch))) => Err(RealError::Input(format!(
            "the tokenizer cannot encode {ch:?} (character {} of the text): its vocabulary has \
             no token for it and no byte fallback; sinklab does not drop characters",
            n + 1
        ))),
    }
}

/// Applies a BOS policy to a token sequence (used for `--tokens` too).
pub fn apply_bos(
    ids: &mut Vec<u32>,
    bos: Bos,
    bos_id: Option<u32>,
    add_bos: bool,
) -> Result<(), RealError> {
    let want = match bos {
        Bos::Auto => add_bos,
        Bos::Yes => true,
        Bos::No => false,
    };
    match (want, bos_id) {
        (true, Some(b)) if ids.first() != Some(&b) => ids.insert(0, b),
        (true, None) if bos == Bos::Yes => {
            return Err(RealError::Input(
                "--bos yes: this model has no BOS token".into(),
            ));
        }
        _ => {}
    }
    Ok(())
}
