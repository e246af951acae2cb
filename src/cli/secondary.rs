//! `sinklab secondary (--model <name|path> (--prompt S | --file F | --prompts F) [--generate N]
//! | --activations F | --long [--models A,B]) [--tau X] [--centered] [--json] [--out DIR]`:
//! the paper-B secondary-sink
//! detector on a real model's native forward pass or on captured activations;
//! one JSON record per detected sink (`--json`, JSON lines on stdout) or a table.
//! With `--out`, also the B1–B6 measurements (`claims.json`), the patching
//! experiment (`patching.json`), the records (`records.jsonl`) and the figures.

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use sinklab::runtime::activation_file::Activations;
use sinklab::runtime::{fetch, load};
use sinklab::secondary::detector::Centering;
use sinklab::secondary::native::LastLayer;
use sinklab::secondary::records::{SinkRecord, analyse};
use sinklab::secondary::run::{StudyOptions, standard_variants, study, write_outputs};
use sinklab::secondary::{DetectorParams, LabelRule, WindowMode};
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
    #[arg(long, conflicts_with_all = ["prompt", "file", "prompts", "generate"])]
    activations: Option<PathBuf>,
    /// Cosine threshold: position t is flagged at layer l iff |cos(h_t, h_bos)| > tau.
    #[arg(long, default_value_t = sinklab::secondary::detector::PAPER_TAU)]
    tau: f64,
    /// Candidate BOS positions (comma-separated); the one of largest mean norm is used.
    /// (The authors' default is 0,1; 0,1,2 under a chat template.)
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    bos_candidates: Vec<usize>,
    /// Anisotropy-corrected variant: cosines after removing the mean token state.
    #[arg(long)]
    centered: bool,
    /// Use the raw residual for the last layer instead of the final-norm output (the authors').
    #[arg(long)]
    raw_last_layer: bool,
    /// Also analyse the standard variants (all-layers, centered) beside the given configuration.
    #[arg(long)]
    with_variants: bool,
    /// Paper B's setting: long greedy generations on --models into out/secondary_long/<model>
    /// (resumable: generated ids are kept), faithful detector and its variants.
    #[arg(long, conflicts_with_all = ["model", "activations", "prompt", "file", "prompts", "generate"])]
    long: bool,
    /// Resident weights of --model: as stored in the file, or converted to f32 at load (faster
    /// generation when memory allows; `sinklab real --help` says more).
    #[arg(long, value_enum, default_value_t = super::real::WeightsArg::File, conflicts_with_all = ["long", "activations"])]
    weights: super::real::WeightsArg,
    /// Memory limit for `--weights f32` and `--boot` (default: SINKLAB_MAX_MEM or the built-in).
    #[arg(long)]
    max_mem: Option<String>,
    /// Models of --long (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = sinklab::secondary::long::LONG_MODELS.map(String::from))]
    models: Vec<String>,
    /// Prompts of --long (the first N of sims/secondary_prompts.txt).
    #[arg(long, default_value_t = sinklab::secondary::long::LONG_PROMPTS)]
    long_prompts: usize,
    /// New tokens per prompt in --long.
    #[arg(long, default_value_t = sinklab::secondary::long::LONG_GENERATE)]
    long_generate: usize,
    /// BOS policy of the prompts: the model's default, always, never (a run with a
    /// non-default policy goes to `<model>+bos-yes|no`).
    #[arg(long, value_enum, default_value_t = sinklab::runtime::tokenizer::Bos::Auto)]
    bos: sinklab::runtime::tokenizer::Bos,
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
        centering: if a.centered {
            Centering::MeanToken
        } else {
            Centering::None
        },
    })
}

fn print_records(records: &[SinkRecord], json: bool) -> Result<()> {
    if json {
        for r in records {
            outln!("{}", serde_json::to_string(r)?);
        }
    } else {
        outln!(
            "{:>4} {:>6} {:>14} {:>8} {:>6} {:<10} {:>10} {:>10} {:>8}",
            "seq",
            "pos",
            "token",
            "created",
            "life",
            "label",
            "|h|@lc",
            "|mlp|@lc",
            "score"
        );
        for r in records {
            let f = |v: Option<f64>| v.map_or("—".to_string(), |x| format!("{x:.3}"));
            let tok = r
                .token_text
                .clone()
                .map(|s| format!("{s:?}"))
                .or(r.token.map(|t| t.to_string()))
                .unwrap_or("—".into());
            outln!(
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
            );
        }
    }
    Ok(())
}

fn note_labels(p: &DetectorParams, l: usize) {
    if !p.labels.secondary_possible(l) {
        errln!(
            "note: with L = {l}, bos_margin {} and noise_max {} no lifetime can be labelled secondary; lower --bos-margin",
            p.labels.bos_margin,
            p.labels.noise_max
        );
    }
}

/// Most tokens `--generate` asks for, whatever the model (the context check after loading is
/// the tighter one).
pub const MAX_GENERATE: usize = 1 << 20;

pub fn run(a: Args) -> Result<i32> {
    let p = params(&a)?;
    // Sizes before work: the bootstrap's resamples and the generation length.
    let budget = sinklab::budget::Budget::with(a.max_mem.as_deref(), None)?;
    budget.check(
        &format!("--boot {}", a.boot),
        sinklab::budget::bootstrap(a.boot, 1, 3),
        true,
    )?;
    sinklab::budget::size(
        &format!("--generate {}", a.generate),
        a.generate,
        MAX_GENERATE,
        "the most new tokens a run generates",
    )?;
    if a.long {
        sinklab::budget::size(
            &format!("--long-generate {}", a.long_generate),
            a.long_generate,
            MAX_GENERATE,
            "the most new tokens a run generates",
        )?;
        let n = sinklab::secondary::long::prompts().len();
        sinklab::budget::size(
            &format!("--long-prompts {}", a.long_prompts),
            a.long_prompts,
            n,
            &format!("--long has {n} prompts"),
        )?;
        let root = sinklab::secondary::long::long_dir(
            &a.out.clone().unwrap_or_else(|| PathBuf::from("out")),
        );
        let mut failed = 0;
        for m in &a.models {
            let dir = sinklab::secondary::long::model_dir(&root, m, a.bos);
            let r = sinklab::secondary::long::run_model_with_bos(
                m,
                &dir,
                a.long_prompts,
                a.long_generate,
                a.seed,
                a.bos,
                &mut |l: &str| errln!("{l}"),
            );
            if let Err(e) = r {
                errln!("{m}: {e:#}");
                failed += 1;
            }
        }
        return Ok(if failed == a.models.len() { 1 } else { 0 });
    }
    if let Some(path) = &a.activations {
        let act = Activations::read(path)
            .with_context(|| format!("reading activations {}", path.display()))?;
        let an = analyse(&act, &p, 0).context("running the detector")?;
        note_labels(&p, act.hidden.layers());
        let s = &an.summary;
        errln!(
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
        // The saturation rule guards this path as it guards the native runs: when (nearly)
        // every position is aligned with the BOS, the labels describe anisotropy, not sinks.
        errln!(
            "{}",
            validity_line(
                "faithful",
                an.detection.validity.positions,
                an.detection.validity.frac_flagged,
                an.detection.validity.saturated,
                true
            )
        );
        print_records(&an.records, a.json)?;
        return Ok(0);
    }
    let Some(name) = &a.model else {
        bail!("give --model NAME|PATH, --activations FILE or --long");
    };
    let path = fetch::resolve(name)?;
    let mut lm = load(&path).with_context(|| format!("loading {}", path.display()))?;
    let ctx = lm.model.cfg.max_context;
    sinklab::budget::size(
        &format!("--generate {}", a.generate),
        a.generate,
        ctx.saturating_sub(2),
        &format!(
            "the context of {}, {ctx} tokens, less a BOS and one prompt token",
            path.display()
        ),
    )?;
    super::real::apply_weights(&mut lm, a.weights, a.max_mem.as_deref())?;
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
    let opts = StudyOptions {
        generate: a.generate,
        // Patching needs the output directory to report into.
        patch: if a.out.is_some() { a.patch } else { 0 },
        boot: a.boot,
        seed: a.seed,
        last: if a.raw_last_layer {
            LastLayer::Raw
        } else {
            LastLayer::FinalNorm
        },
        variants: if a.with_variants {
            standard_variants(&p)
        } else {
            Vec::new()
        },
        ids_dir: None,
        bos: a.bos,
    };
    let st = study(&lm, &texts, &p, &opts, &mut |line: &str| {
        if line.contains("analysed") {
            pb.inc(1);
        }
        pb.set_message(line.to_string());
    })?;
    pb.finish_and_clear();
    if let Some(tps) = st.tokens_per_s() {
        errln!(
            "generated {} tokens in {:.2} s ({tps:.1} tokens/s, greedy, KV cache)",
            st.generated.0,
            st.generated.1
        );
    }
    // The files first: a reader of stdout that goes away (`| head`) must not cost them.
    if let Some(dir) = &a.out {
        write_outputs(dir, &path.display().to_string(), &opts, &st)?;
    }
    print_records(&st.primary().records, a.json)?;
    for v in &st.variants {
        let val = &v.measures.validity;
        errln!(
            "{}",
            validity_line(
                &v.name,
                val.positions,
                val.frac_flagged,
                val.saturated,
                false
            )
        );
    }
    if let Some(dir) = &a.out {
        errln!("wrote {}", dir.display());
        errln!("{}", serde_json::to_string_pretty(&st.primary().measures)?);
    }
    Ok(0)
}

/// One line of a detector run's validity: positions flagged and the saturation rule, the same
/// on every path (native runs' variants, pooled, and activation files, one sequence).
/// `records_follow`: the records printed next are the ones the rule speaks of.
fn validity_line(
    name: &str,
    positions: usize,
    frac_flagged: f64,
    saturated: bool,
    records_follow: bool,
) -> String {
    let sat = match (saturated, records_follow) {
        (false, _) => "",
        (true, false) => "; saturated: anisotropy, not sinks",
        (true, true) => {
            "; saturated: anisotropy, not sinks (the records below are not secondary sinks)"
        }
    };
    format!(
        "{name}: {} of {positions} positions flagged ({frac_flagged:.3}){sat}",
        (frac_flagged * positions as f64).round()
    )
}
