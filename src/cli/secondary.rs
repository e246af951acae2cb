//! `sinklab secondary --activations F [--tau X] [--json]`: the paper-B
//! secondary-sink detector on captured activations; one JSON record per
//! detected sink (`--json`, JSON lines on stdout) or a table.

use anyhow::{Context, Result, bail};
use sinklab::secondary::activations::Activations;
use sinklab::secondary::records::{SinkRecord, analyse};
use sinklab::secondary::{DetectorParams, LabelRule, WindowMode};
use std::io::Write as _;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
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
            "{:>6} {:>8} {:>8} {:>8} {:<10} {:>10} {:>10} {:>10}",
            "pos", "token", "created", "life", "label", "|h|@lc", "|mlp|@lc", "score"
        )?;
        for r in records {
            let f = |v: Option<f64>| v.map_or("—".to_string(), |x| format!("{x:.3}"));
            writeln!(
                out,
                "{:>6} {:>8} {:>8} {:>8} {:<10} {:>10.2} {:>10} {:>10}",
                r.position,
                r.token.map_or("—".into(), |t| t.to_string()),
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

pub fn run(a: Args) -> Result<i32> {
    let p = params(&a)?;
    let Some(path) = &a.activations else {
        bail!("give --activations FILE");
    };
    let act = Activations::read(path)
        .with_context(|| format!("reading activations {}", path.display()))?;
    let an = analyse(&act, &p, 0).context("running the detector")?;
    let l = act.hidden.layers();
    if !p.labels.secondary_possible(l) {
        eprintln!(
            "note: with L = {l}, bos_margin {} and noise_max {} no lifetime can be labelled secondary; lower --bos-margin",
            p.labels.bos_margin, p.labels.noise_max
        );
    }
    let s = &an.summary;
    eprintln!(
        "L = {l}, T = {}, BOS = {}, window = [{}, {}), sinks: {} bos_sink, {} secondary, {} noise",
        s.tokens,
        s.bos,
        s.window.0,
        s.window.1,
        s.label_counts.0,
        s.label_counts.1,
        s.label_counts.2
    );
    print_records(&an.records, a.json)?;
    Ok(0)
}
