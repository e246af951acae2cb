//! `sinklab real --model M --file inputs.jsonl [--results R.jsonl]`: many inputs through one
//! loaded model.
//!
//! Each non-blank line of the input is one of: a JSON string (a text), an array of token ids,
//! or an object with `"text"` or `"tokens"` and an optional `"id"`. Each finished input appends
//! one JSON line `{"line", "id", "key", "report"}` to the results file with a single write, so
//! a killed run loses at most the input in flight; a rerun skips every input whose key (a
//! SHA-256 of the model path, the BOS policy, the analyses asked for and the line itself) is
//! already there, and drops a partial last line. A malformed line stops the run naming the file
//! and line before any model work is done. The results file is locked for the run (the
//! sweep's lock), must not be the input, and must be ours ([`done_keys`]) before it is
//! appended to or rewritten.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use sinklab::runtime::LoadedModel;
use sinklab::runtime::tokenizer::{Bos, apply_bos};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One input line.
pub struct Input {
    /// 1-based line number in the input file.
    pub line: usize,
    /// The caller's id (`"id"`), or the line number.
    pub id: serde_json::Value,
    /// What to run.
    pub what: What,
    /// Resume key.
    pub key: String,
}

/// A text or token ids.
pub enum What {
    /// Text to tokenize with the model's tokenizer.
    Text(String),
    /// Token ids (the BOS policy still applies).
    Tokens(Vec<u32>),
}

fn ids(v: &serde_json::Value, file: &Path, line: usize) -> Result<Vec<u32>> {
    let arr = v
        .as_array()
        .with_context(|| format!("{}:{line}: \"tokens\" must be an array", file.display()))?;
    arr.iter()
        .map(|x| {
            x.as_u64()
                .filter(|&t| t <= u32::MAX as u64)
                .map(|t| t as u32)
                .with_context(|| {
                    format!(
                        "{}:{line}: token id {x} is not an integer in [0, 2^32)",
                        file.display()
                    )
                })
        })
        .collect()
}

/// Parses every line of `file` (nothing is run before the whole file is valid); a line longer
/// than `max_line` bytes is refused before it is parsed or tokenized.
pub fn read_inputs(file: &Path, salt: &str, max_line: usize) -> Result<Vec<Input>> {
    let text = sinklab::budget::read_text(file, sinklab::budget::MAX_INPUT_BYTES)
        .with_context(|| format!("reading {}", file.display()))?;
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.len() > max_line {
            bail!(
                "{}:{line}: the line holds {} bytes, over the limit of {max_line} bytes for this \
                 model's context (refused before tokenizing)",
                file.display(),
                raw.len()
            );
        }
        if raw.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(raw)
            .with_context(|| format!("{}:{line}: not a JSON value", file.display()))?;
        let (what, id) = match &v {
            serde_json::Value::String(s) => (What::Text(s.clone()), None),
            serde_json::Value::Array(_) => (What::Tokens(ids(&v, file, line)?), None),
            serde_json::Value::Object(m) => {
                if let Some(k) = m
                    .keys()
                    .find(|k| !matches!(k.as_str(), "text" | "tokens" | "id"))
                {
                    bail!(
                        "{}:{line}: unknown key \"{k}\" (text, tokens, id)",
                        file.display()
                    );
                }
                let what = match (m.get("text"), m.get("tokens")) {
                    (Some(serde_json::Value::String(s)), None) => What::Text(s.clone()),
                    (None, Some(t)) => What::Tokens(ids(t, file, line)?),
                    _ => bail!(
                        "{}:{line}: need exactly one of \"text\" (a string) or \"tokens\"",
                        file.display()
                    ),
                };
                (what, m.get("id").cloned())
            }
            _ => bail!(
                "{}:{line}: expected a string, an array of token ids or an object",
                file.display()
            ),
        };
        let mut h = Sha256::new();
        h.update(salt.as_bytes());
        h.update([0]);
        h.update(raw.trim().as_bytes());
        let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        out.push(Input {
            line,
            id: id.unwrap_or_else(|| serde_json::Value::from(line)),
            what,
            key,
        });
    }
    if out.is_empty() {
        bail!("{}: no inputs (every line is blank)", file.display());
    }
    Ok(out)
}

/// The start of every line this command writes (the results' schema is `{"line", "id", "key",
/// "report"}` in that order, written by [`run`]).
const RECORD_PREFIX: &str = "{\"line\":";

/// The key of one results line when it is one of ours: an object with exactly `line` (≥ 1),
/// `id`, `key` (64 hex digits) and `report` (an object).
fn record_key(v: &serde_json::Value) -> Option<&str> {
    let m = v.as_object()?;
    let ours = m.len() == 4
        && m.get("line")?.as_u64()? >= 1
        && m.contains_key("id")
        && m.get("report")?.is_object();
    let key = m.get("key")?.as_str()?;
    (ours && key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit())).then_some(key)
}

/// Whether `l` (whitespace removed) is the beginning of one of our lines: a write cut short.
fn partial_record(l: &str) -> bool {
    let t: String = l.chars().filter(|c| !c.is_whitespace()).collect();
    !t.is_empty() && (t.starts_with(RECORD_PREFIX) || RECORD_PREFIX.starts_with(&t))
}

/// Refuses `--results` naming an input of the run (the `--file` or the model file: same path
/// or the same file by inode) or an existing non-regular file (a device, a FIFO, a directory).
pub fn refuse_same_file(file: &Path, model: &Path, results: &Path) -> Result<()> {
    sinklab::atomic::check_not_input(results, &[("--file", file), ("--model", model)])
        .map_err(|e| anyhow::anyhow!("--results: {e}"))
}

/// Keys already in `results`, after checking that the file is ours: every line is one of our
/// records, a damaged line (not JSON: a bad sector, an edit) or a partial last line (a killed
/// run). A JSON line of another schema (a sweep's `results.jsonl`, any other JSONL), or a file
/// with no record of ours and no cut-short write, is refused before anything is changed. The
/// damaged and partial lines are dropped by rewriting the file (temporary file, then rename)
/// with every good line kept, so their inputs alone are recomputed.
pub fn done_keys(results: &Path) -> Result<std::collections::HashSet<String>> {
    let mut keys = std::collections::HashSet::new();
    let bytes = match std::fs::read(results) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(keys),
        Err(e) => return Err(e).with_context(|| format!("reading {}", results.display())),
    };
    let text = String::from_utf8_lossy(&bytes);
    let not_ours = |why: String| {
        anyhow::anyhow!(
            "--results {}: {why}; not a `sinklab real --file` results file, so it is neither \
             appended to nor cut: give another --results",
            results.display()
        )
    };
    let mut good = String::new();
    let (mut damaged, mut partial) = (0usize, false);
    let n_lines = text.split_inclusive('\n').count();
    for (i, l) in text.split_inclusive('\n').enumerate() {
        let complete = l.ends_with('\n');
        let v: Option<serde_json::Value> = serde_json::from_str(l.trim_end()).ok();
        match v.as_ref().map(|v| (record_key(v), v)) {
            Some((Some(k), _)) if complete => {
                keys.insert(k.to_string());
                good.push_str(l);
            }
            Some((None, _)) if !l.trim().is_empty() => {
                return Err(not_ours(format!(
                    "line {} is JSON without the keys line, id, key, report",
                    i + 1
                )));
            }
            _ if !complete && i + 1 == n_lines && partial_record(l) => partial = true,
            _ => damaged += 1,
        }
    }
    if keys.is_empty() && damaged > 0 {
        return Err(not_ours("no line is a result record".into()));
    }
    if damaged > 0 || partial {
        rewrite(results, good.as_bytes())?;
    }
    Ok(keys)
}

/// Replaces `path` by `bytes` through [`sinklab::atomic::write`], so a failure leaves the old
/// file whole.
fn rewrite(path: &Path, bytes: &[u8]) -> Result<()> {
    sinklab::atomic::write(path, bytes).with_context(|| format!("replacing {}", path.display()))
}

/// Runs every input of `file` through `lm`, appending to `results`; returns the exit code.
pub fn run(
    lm: &LoadedModel,
    model_path: &Path,
    file: &Path,
    results: Option<PathBuf>,
    bos: Bos,
    a1: bool,
    a2: bool,
) -> Result<i32> {
    // Results are keyed by the model's content, not its path: another model put at the same
    // path recomputes every input.
    let model_hash = sinklab::runtime::content_hash(model_path)?;
    let salt = format!(
        "{model_hash}|{bos:?}|a1={a1}|a2={a2}|{}",
        env!("CARGO_PKG_VERSION")
    );
    let inputs = read_inputs(
        file,
        &salt,
        sinklab::budget::max_line_bytes(lm.model.cfg.max_context),
    )?;
    let results = results.unwrap_or_else(|| file.with_extension("results.jsonl"));
    refuse_same_file(file, model_path, &results)?;
    // One writer per results file (the sweep's lock), held until the last line is written.
    let _lock = sinklab::sweep::lock::acquire_for_file(
        &results,
        "`sinklab real --file` run",
        "wait for it to finish or give another --results",
    )?;
    let done = done_keys(&results)?;
    let todo: Vec<&Input> = inputs.iter().filter(|i| !done.contains(&i.key)).collect();
    errln!(
        "{}: {} inputs, {} already in {}, {} to run",
        file.display(),
        inputs.len(),
        inputs.len() - todo.len(),
        results.display(),
        todo.len()
    );
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&results)
        .with_context(|| format!("opening {}", results.display()))?;
    let bar = indicatif::ProgressBar::new(todo.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} inputs, eta {eta}")
            .expect("static template"),
    );
    let mut failed = 0usize;
    for inp in todo {
        let tokens = match &inp.what {
            What::Tokens(t) => {
                let mut t = t.clone();
                apply_bos(&mut t, bos, lm.model.cfg.bos_id, lm.model.cfg.add_bos)?;
                Ok(t)
            }
            What::Text(s) => match lm.tok.as_ref() {
                Some(tok) => tok.encode(s, bos).map_err(anyhow::Error::from),
                None => Err(anyhow::anyhow!(
                    "{}: no tokenizer in the model files; give token ids",
                    model_path.display()
                )),
            },
        };
        let rep = tokens.and_then(|t| {
            if t.is_empty() {
                bail!("no tokens to run");
            }
            let mut rep = sinklab::real::analysis::analyze(lm, &t, a1, &mut ())?;
            if a2 {
                rep.a2 = Some(sinklab::real::oversmooth_real::analyze_input_form(
                    &lm.model, &t,
                )?);
                rep.a2_skill =
                    Some(sinklab::real::oversmooth_real::analyze_skill(&lm.model, &t)?.1);
            }
            Ok(rep)
        });
        match rep {
            Ok(rep) => {
                // The report is serialised directly (not through a `Value`), so its numbers
                // are written exactly as `sinklab real --json` writes them.
                let line = format!(
                    "{{\"line\":{},\"id\":{},\"key\":\"{}\",\"report\":{}}}\n",
                    inp.line,
                    inp.id,
                    inp.key,
                    serde_json::to_string(&rep)?
                );
                out.write_all(line.as_bytes())
                    .with_context(|| format!("writing {}", results.display()))?;
            }
            Err(e) => {
                failed += 1;
                bar.suspend(|| errln!("{}:{}: {e:#}", file.display(), inp.line));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    errln!("wrote {}", results.display());
    if failed > 0 {
        errln!("{failed} inputs failed (rerun to retry them)");
        return Ok(1);
    }
    Ok(0)
}
