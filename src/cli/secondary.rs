//! `sinklab secondary (--model <name|path> (--prompt S | --file F | --prompts F) [--generate N]
//! | --activations F) [--tau X] [--json] [--out DIR]`: the paper-B secondary-sink
//! detector on a real model's native forward pass or on captured activations;
//! one JSON record per detected sink (`--json`, JSON lines on stdout) or a table.
//! With `--out`, also the B1–B6 measurements (`claims.json`), the patching
//! experiment (`patching.json`), the records (`records.jsonl`) and the figures.

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use sinklab::real::tokenizer::Bos;
use sinklab::real::{fetch, load};
use sinklab::secondary::activations::Activations;
use sinklab::secondary::detector::Label;
use sinklab::secondary::figures::{
    levels_heatmap, norm_points, norm_scatters, primary_vs_secondary,
};
use sinklab::secondary::native::{capture, generate, patch_sinks};
use sinklab::secondary::records::{Analysis, SinkRecord, analyse, claim_measures};
use sinklab::secondary::{DetectorParams, LabelRule, WindowMode};
use std::io::Write as _;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model: a fetched name (smollm2, gemma3-270m) or a path (GGUF file, HF directory).
    #[arg(long, conflicts_with = "activations")]
    model: Option<String>,
    /// Prompt text.
    #[arg(long, conflicts_with_all = ["file", "prompts"])]
    prompt: Option<String>,
    /// Text file, analysed as one sequence.
    #[arg(long, conflicts_with = "prompts")]
    file: Option<PathBuf>,
    /// File of prompts, one per line (e.g. sims/secondary_prompts.txt): one sequence each.
    #[arg(long)]
    prompts: Option<PathBuf>,
    /// Greedy-generate N tokens after each prompt (KV cache) before the analysis.
    #[arg(long, default_value_t = 0)]
    generate: usize,
    /// Activation file (safetensors: `hidden.{l}` [T,d], optional `attn.{l}`,
    /// `mlp_out.{l}`, `keys.{l}`, `values.{l}`, `tokens`).
    #[arg(long)]
    activations: Option<PathBuf>,
    /// Cosine threshold: position t is flagged at layer l iff |cos(h_t, h_bos)| > tau.
    #[arg(long, default_value_t = sinklab::secondary::detector::PAPER_TAU)]
    tau: f64,
    /// Candidate BOS positions (comma-separated); the one of largest mean norm is used.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    bos_candidates: Vec<usize>,
    /// Scan every layer instead of the window from the BOS-norm jumps.
    #[arg(long)]
    no_window: bool,
    /// `bos_sink` iff lifetime >= L - BOS_MARGIN.
    #[arg(long, default_value_t = sinklab::secondary::detector::PAPER_BOS_MARGIN)]
    bos_margin: usize,
    /// `secondary` needs lifetime > NOISE_MAX.
    #[arg(long, default_value_t = sinklab::secondary::detector::PAPER_NOISE_MAX)]
    noise_max: usize,
    /// Print one JSON record per detected sink (JSON lines) instead of a table.
    #[arg(long)]
    json: bool,
    /// Write records, B1–B6, patching and figures into this directory (model runs).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Sinks patched per sequence in the patching experiment (0: skip it).
    #[arg(long, default_value_t = 4)]
    patch: usize,
    /// Bootstrap resamples for the Spearman intervals.
    #[arg(long, default_value_t = 2000)]
    boot: usize,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn params(a: &Args) -> Result<DetectorParams> {
    if !(0.0..=1.0).contains(&a.tau) {
        bail!("--tau must lie in [0, 1], got {}", a.tau);
    }
    Ok(DetectorParams {
        tau: a.tau,
        bos_candidates: a.bos_candidates.clone(),
        window: if a.no_window {
            WindowMode::AllLayers
        } else {
            WindowMode::BosNormJumps
        },
        labels: LabelRule {
            bos_margin: a.bos_margin,
            noise_max: a.noise_max,
        },
    })
}

fn print_records(records: &[SinkRecord], json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        for r in records {
            writeln!(out, "{}", serde_json::to_string(r)?)?;
        }
    } else {
        writeln!(
            out,
            "{:>4} {:>6} {:>14} {:>8} {:>6} {:<10} {:>10} {:>10} {:>8}",
            "seq", "pos", "token", "created", "life", "label", "|h|@lc", "|mlp|@lc", "score"
        )?;
        for r in records {
            let f = |v: Option<f64>| v.map_or("—".to_string(), |x| format!("{x:.3}"));
            let tok = r
                .token_text
                .clone()
                .map(|s| format!("{s:?}"))
                .or(r.token.map(|t| t.to_string()))
                .unwrap_or("—".into());
            writeln!(
                out,
                "{:>4} {:>6} {:>14} {:>8} {:>6} {:<10} {:>10.2} {:>10} {:>8}",
                r.sequence,
                r.position,
                tok.chars().take(14).collect::<String>(),
                r.creation_layer,
                r.lifetime,
                r.label.as_str(),
                r.hidden_norm[r.creation_layer],
                f(r.mlp_out_norm_at_creation),
                f(r.mean_score()),
            )?;
        }
    }
    Ok(())
}

fn note_labels(p: &DetectorParams, l: usize) {
    if !p.labels.secondary_possible(l) {
        eprintln!(
            "note: with L = {l}, bos_margin {} and noise_max {} no lifetime can be labelled secondary; lower --bos-margin",
            p.labels.bos_margin, p.labels.noise_max
        );
    }
}

pub fn run(a: Args) -> Result<i32> {
    let p = params(&a)?;
    if let Some(path) = &a.activations {
        let act = Activations::read(path)
            .with_context(|| format!("reading activations {}", path.display()))?;
        let an = analyse(&act, &p, 0).context("running the detector")?;
        note_labels(&p, act.hidden.layers());
        let s = &an.summary;
        eprintln!(
            "L = {}, T = {}, BOS = {}, window = [{}, {}), sinks: {} bos_sink, {} secondary, {} noise",
            act.hidden.layers(),
            s.tokens,
            s.bos,
            s.window.0,
            s.window.1,
            s.label_counts.0,
            s.label_counts.1,
            s.label_counts.2
        );
        print_records(&an.records, a.json)?;
        return Ok(0);
    }
    let Some(name) = &a.model else {
        bail!("give --model NAME|PATH or --activations FILE");
    };
    let path = fetch::resolve(name)?;
    let lm = load(&path).with_context(|| format!("loading {}", path.display()))?;
    let tok = lm
        .tok
        .as_ref()
        .with_context(|| format!("{}: no tokenizer in the model files", path.display()))?;
    let texts: Vec<String> = match (&a.prompt, &a.file, &a.prompts) {
        (Some(t), _, _) => vec![t.clone()],
        (None, Some(f), _) => {
            vec![std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?]
        }
        (None, None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading {}", f.display()))?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect(),
        _ => bail!("give one of --prompt, --file, --prompts"),
    };
    if texts.is_empty() {
        bail!("no prompt to run");
    }
    let nl = lm.model.cfg.n_layer;
    note_labels(&p, nl);
    let pb = ProgressBar::new(texts.len() as u64);
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} sequences {elapsed} {msg}")
            .expect("static template"),
    );
    let mut analyses: Vec<Analysis> = Vec::new();
    let mut patches = Vec::new();
    let mut gen_secs = 0.0;
    let mut gen_tokens = 0usize;
    for (k, text) in texts.iter().enumerate() {
        let prompt = tok.encode(text, Bos::Auto)?;
        if prompt.is_empty() {
            bail!("prompt {k} encodes to no tokens");
        }
        let t0 = std::time::Instant::now();
        let ids = if a.generate > 0 {
            generate(&lm, &prompt, a.generate)?
        } else {
            prompt.clone()
        };
        gen_secs += t0.elapsed().as_secs_f64();
        gen_tokens += ids.len() - prompt.len();
        pb.set_message(format!("seq {k}: {} tokens", ids.len()));
        let act = capture(&lm, &ids, true)?;
        let mut an = analyse(&act, &p, k)?;
        for r in &mut an.records {
            r.token_text = r.token.map(|t| tok.decode(&[t as u32]));
        }
        if a.patch > 0 && a.out.is_some() {
            // Secondary sinks first; where there are none, the other non-BOS sinks.
            let mut v = patch_sinks(&lm, &ids, &act, &p, &[Label::Secondary], k, a.patch)?;
            if v.is_empty() {
                v = patch_sinks(
                    &lm,
                    &ids,
                    &act,
                    &p,
                    &[Label::Noise, Label::BosSink],
                    k,
                    a.patch,
                )?;
            }
            patches.extend(v);
        }
        analyses.push(an);
        pb.inc(1);
    }
    pb.finish_and_clear();
    if a.generate > 0 {
        eprintln!(
            "generated {gen_tokens} tokens in {gen_secs:.2} s ({:.1} tokens/s, greedy, KV cache)",
            gen_tokens as f64 / gen_secs.max(1e-9)
        );
    }
    let records: Vec<SinkRecord> = analyses.iter().flat_map(|an| an.records.clone()).collect();
    print_records(&records, a.json)?;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut f = std::fs::File::create(dir.join("records.jsonl"))?;
        for r in &records {
            writeln!(f, "{}", serde_json::to_string(r)?)?;
        }
        let m = claim_measures(&analyses, nl, a.boot, a.seed);
        let summaries: Vec<_> = analyses.iter().map(|an| &an.summary).collect();
        std::fs::write(
            dir.join("claims.json"),
            serde_json::to_string_pretty(&serde_json::json!({
                "model": path.display().to_string(), "params": p, "generate": a.generate,
                "generation_tokens_per_s": if gen_secs > 0.0 { Some(gen_tokens as f64 / gen_secs) } else { None },
                "claims": m, "sequences": summaries,
            }))?,
        )?;
        std::fs::write(
            dir.join("patching.json"),
            serde_json::to_string_pretty(&patches)?,
        )?;
        let cells: Vec<(usize, usize)> = records
            .iter()
            .filter(|r| r.label == Label::Secondary)
            .map(|r| (r.creation_layer, r.lifetime))
            .collect();
        let stem = |s: &str| dir.join(s);
        if !cells.is_empty() {
            levels_heatmap(&stem("levels"), "secondary sinks", &cells, nl)?;
        }
        let pop: Vec<&SinkRecord> = records
            .iter()
            .filter(|r| {
                if m.b3_population == "secondary" {
                    r.label == Label::Secondary
                } else {
                    r.label != Label::BosSink
                }
            })
            .collect();
        let (sc, li) = norm_points(&pop);
        if sc.len() >= 2 || li.len() >= 2 {
            norm_scatters(
                &stem("norm_scatter"),
                "MLP-output norm at creation",
                (sc, &m.b3_norm_vs_score),
                (li, &m.b3_norm_vs_lifetime),
            )?;
        }
        if m.b4_primary_strength.is_some() {
            primary_vs_secondary(
                &stem("primary_vs_secondary"),
                "primary strength vs secondary count",
                &m,
            )?;
        }
        eprintln!("wrote {}", dir.display());
        eprintln!("{}", serde_json::to_string_pretty(&m)?);
    }
    Ok(0)
}
