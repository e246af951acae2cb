//! `sinklab view --model M (--text S | --file F | --tokens IDS) [--bos …] [--heads L.H,…]
//! [--max-res R] --out page.html`, or `sinklab view --activations F --out page.html`: one
//! self-contained HTML page of the run (`sinklab::view`).

use anyhow::{Context, Result};
use sinklab::runtime::tokenizer::{Bos, apply_bos};
use sinklab::runtime::{fetch, load};
use sinklab::view::assemble::{ViewError, from_activations, from_model};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  One text through SmolLM2, two heads embedded exactly:
    sinklab view --model smollm2 --text \"The cat sat on the mat.\" --heads 3.1,7.0 --out v.html
  With each head's realised-sink fraction as the grid's second statistic:
    sinklab view --model smollm2 --file text.txt --a1 --out v.html
  From captured activations with attention maps:
    sinklab view --activations acts.safetensors --out v.html

The page's data is one JSON blob, <script type=\"application/json\" id=\"sinklab-data\">, \
fields: schema, source, n_layer, n_head, t, causal, res, bos_first, tokens, token_text, \
layers (exactly the layers of sinklab real --json: per head alpha_first = Gu's α₀, …), \
maps_q8 (base64 of each head's 8-bit max-pooled cells, index l·H + h, lower triangle row-major \
when causal), exact ([{layer, head, f32}]: base64 little-endian f32 cells), detector \
({variant, error, bos, window, sinks: [{position, label, creation_layer, lifetime, layers}], \
bos_entry, frac_flagged, saturated}), token_curves ({bos, norm_f32, cos_f32}: [L, T] f32), \
realised (with --a1: {\"Ok\": [L][H] realised-sink fraction or null} or {\"Err\": why}). \
Open page.html#selftest to run the page's own checks (result in <pre id=\"selftest-result\">).")]
pub struct Args {
    #[command(flatten)]
    input: super::real::ModelText,
    /// Input text file.
    #[arg(long, conflicts_with = "tokens", value_name = "FILE")]
    file: Option<PathBuf>,
    /// Token ids, comma or space separated.
    #[arg(long, value_name = "IDS")]
    tokens: Option<String>,
    /// BOS policy: the model's default, always, never
    ///
    /// auto: the model's own default (GGUF add_bos_token, BERT's [CLS] … [SEP] template);
    /// yes: always put BOS first (if not already first); no: never.
    #[arg(long, value_enum, hide_possible_values = true, value_name = "auto|yes|no", default_value_t = Bos::Auto)]
    bos: Bos,
    /// Activations file with attn.{l} maps instead of a model
    ///
    /// safetensors: hidden.{l} [T, d] and attn.{l}, as for `sinklab real --activations`.
    #[arg(long, conflicts_with_all = ["model", "text", "file", "tokens", "bos"], value_name = "FILE")]
    activations: Option<PathBuf>,
    /// Heads embedded exactly, e.g. 3.1,7.0 (layer.head, from 0)
    ///
    /// These heads' maps are stored as f32, T × T; all others are max-pooled to --max-res
    /// and quantised to 8 bits.
    #[arg(long, value_name = "L.H,...")]
    heads: Option<String>,
    /// Cap of the pooled maps: min(T, R) cells a side.
    #[arg(long, value_name = "R", default_value_t = sinklab::view::DEFAULT_MAX_RES)]
    max_res: usize,
    /// Also each head's realised-sink fraction, the grid's second statistic
    ///
    /// The pooled head-space analysis of `sinklab real --a1`, on this one text.
    #[arg(long, conflicts_with = "activations")]
    a1: bool,
    /// The page to write.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// A bad argument: the message, exit status 2.
fn refuse(msg: &str) -> Result<i32> {
    errln!("error: {msg}");
    Ok(2)
}

fn ids(s: &str) -> Result<Vec<u32>, String> {
    s.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .map_err(|_| format!("--tokens: `{s}` is not a token id"))
        })
        .collect()
}

pub fn run(a: Args) -> Result<i32> {
    if a.max_res < 1 {
        return refuse("--max-res must be at least 1");
    }
    // The page never replaces an input of the run (nor a device, FIFO or directory).
    let mut inputs: Vec<(&str, PathBuf)> = Vec::new();
    if let Some(f) = &a.file {
        inputs.push(("--file", f.clone()));
    }
    if let Some(f) = &a.activations {
        inputs.push(("--activations", f.clone()));
    }
    if let Some(m) = a.input.model.as_deref() {
        let p = std::path::Path::new(m);
        let model = if p.exists() {
            Some(p.to_path_buf())
        } else {
            fetch::cached(m)
        };
        if let Some(p) = model {
            // A model directory: every file in it is an input (config, tokenizer, weights).
            if let Ok(rd) = std::fs::read_dir(&p) {
                for e in rd.flatten().take(10_000) {
                    inputs.push(("--model", e.path()));
                }
            }
            inputs.push(("--model", p));
        }
    }
    let named: Vec<(&str, &std::path::Path)> =
        inputs.iter().map(|(f, p)| (*f, p.as_path())).collect();
    if let Err(e) = sinklab::atomic::check_not_input(&a.out, &named) {
        return refuse(&format!("--out: {e}"));
    }
    let heads_of = |l: usize, h: usize| match &a.heads {
        Some(s) => sinklab::view::parse_heads(s, l, h),
        None => Ok(Vec::new()),
    };
    let data = if let Some(f) = &a.activations {
        match from_activations(f, a.max_res, &heads_of) {
            Err(ViewError::Input(m)) => return refuse(&m),
            r => r?,
        }
    } else {
        let name = a.input.model.as_deref().unwrap_or_default();
        let path = fetch::resolve(name)?;
        let lm = load(&path).map_err(|e| super::named_once("loading", &path, e))?;
        let c = &lm.model.cfg;
        let exact = match heads_of(c.n_layer, c.n_head) {
            Ok(v) => v,
            Err(m) => return refuse(&m),
        };
        let tokens = if let Some(t) = &a.tokens {
            let mut v = match ids(t) {
                Ok(v) => v,
                Err(m) => return refuse(&m),
            };
            apply_bos(&mut v, a.bos, c.bos_id, c.add_bos)?;
            v
        } else {
            let text = match (&a.input.text, &a.file) {
                (Some(t), _) => t.clone(),
                (None, Some(f)) => sinklab::budget::read_text(f, sinklab::budget::MAX_INPUT_BYTES)
                    .with_context(|| format!("reading {}", f.display()))?,
                _ => return refuse("give one of --text, --file, --tokens"),
            };
            if text.is_empty() {
                return refuse("the input text is empty");
            }
            let tok = lm.tok.as_ref().with_context(|| {
                format!(
                    "{}: no tokenizer in the model files; use --tokens",
                    path.display()
                )
            })?;
            tok.encode(&text, a.bos)?
        };
        if tokens.is_empty() {
            return refuse("no tokens to run");
        }
        if tokens.len() > c.max_context {
            return refuse(&format!(
                "{} tokens exceed the context of {}, {} tokens",
                tokens.len(),
                path.display(),
                c.max_context
            ));
        }
        let need =
            sinklab::budget::view_page(c.n_layer, c.n_head, tokens.len(), a.max_res, exact.len());
        if let Err(e) = sinklab::budget::Budget::default().check(
            &format!("view: T = {} with --max-res {}", tokens.len(), a.max_res),
            need,
            false,
        ) {
            return refuse(&e.to_string());
        }
        errln!(
            "view: {} tokens through {} ({} layers × {} heads): statistics and pooled maps",
            tokens.len(),
            path.display(),
            c.n_layer,
            c.n_head
        );
        let mut progress = |l: usize, n: usize| {
            err!("\rview: layer {l}/{n}");
            if l == n {
                errln!(", then the detector's pass");
            }
        };
        let mut d = match from_model(&lm, &tokens, a.max_res, exact, &mut progress) {
            Err(ViewError::Input(m)) => return refuse(&m),
            r => r?,
        };
        if a.a1 {
            errln!("view: the head-space analysis (--a1)");
            d.realised = Some(sinklab::view::realised_grid(&lm.model, &tokens)?);
        }
        d
    };
    let html = sinklab::view::render(&data)?;
    sinklab::atomic::write(&a.out, &html)
        .with_context(|| format!("writing {}", a.out.display()))?;
    let payload = sinklab::view::payload_bytes(
        data.n_layer,
        data.n_head,
        data.t,
        a.max_res,
        data.causal,
        data.exact.len(),
    );
    outln!(
        "wrote {}: {} bytes (maps and curves {} bytes: {} heads at {}×{}{}), T = {}",
        a.out.display(),
        html.len(),
        payload,
        data.n_layer * data.n_head,
        data.res,
        data.res,
        if data.exact.is_empty() {
            String::new()
        } else {
            format!(", {} exact", data.exact.len())
        },
        data.t
    );
    Ok(0)
}
