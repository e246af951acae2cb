//! `sinklab real --model M --file inputs.jsonl [--results R.jsonl]`: many inputs through one
//! loaded model.
//!
//! Each non-blank line of the input is one of: a JSON string (a text), an array of token ids,
//! or an object with `"text"` or `"tokens"` and an optional `"id"`. Each finished input appends
//! one JSON line `{"line", "id", "key", "report"}` to the results file with a single write, so
//! a killed run loses at most the input in flight; a rerun skips every input whose key (a
//! SHA-256 of the model path, the BOS policy, the analyses asked for and the line itself) is
//! already there, and drops a partial last line. A malformed line stops the run naming the file
//! and line before any model work is done.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use sinklab::real::LoadedModel;
use sinklab::real::tokenizer::{Bos, apply_bos};
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

/// Parses every line of `file` (nothing is run before the whole file is valid).
pub fn read_inputs(file: &Path, salt: &str) -> Result<Vec<Input>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
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

/// Keys already in `results`; a partial last line (no newline, or not JSON) is cut off.
pub fn done_keys(results: &Path) -> Result<std::collections::HashSet<String>> {
    let mut keys = std::collections::HashSet::new();
    let Ok(text) = std::fs::read_to_string(results) else {
        return Ok(keys);
    };
    let mut good = 0usize;
    for l in text.split_inclusive('\n') {
        let complete = l.ends_with('\n');
        let v: Option<serde_json::Value> = serde_json::from_str(l.trim_end()).ok();
        match (complete, v.as_ref().and_then(|v| v["key"].as_str())) {
            (true, Some(k)) => {
                keys.insert(k.to_string());
                good += l.len();
            }
            _ => break,
        }
    }
    if good < text.len() {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(results)
            .with_context(|| format!("opening {}", results.display()))?;
        f.set_len(good as u64)
            .with_context(|| format!("truncating the partial tail of {}", results.display()))?;
    }
    Ok(keys)
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
    let salt = format!(
        "{}|{bos:?}|a1={a1}|a2={a2}|{}",
        model_path.display(),
        env!("CARGO_PKG_VERSION")
    );
    let inputs = read_inputs(file, &salt)?;
    let results = results.unwrap_or_else(|| file.with_extension("results.jsonl"));
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
                rep.a2 = Some(sinklab::real::oversmooth_real::analyze(&lm.model, &t)?);
                rep.a2_skill = Some(sinklab::real::a2_skill::analyze(&lm.model, &t)?.1);
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
