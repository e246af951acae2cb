//! `sinklab secondary (--model <name|path> (--prompt S | --file F | --prompts F) [--generate N]
//! | --activations F | --long [--models A,B] | --model M --dose-response) [--chat]
//! [--prompt-set steps|math] [--tau X] [--centered] [--json] [--out DIR]`:
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
use sinklab::secondary::findings;
use sinklab::secondary::native::LastLayer;
use sinklab::secondary::records::SinkRecord;
use sinklab::secondary::run::{StudyOptions, standard_variants, study, write_outputs};
use sinklab::secondary::{DetectorParams, LabelRule, WindowMode};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  The detector on one prompt, a table of the sinks found:
    sinklab secondary --model smollm2 --prompt \"Explain step by step why the sky is blue.\"
  Every prompt of a file with 64 generated tokens each; records, B1-B6 and figures in out/sec:
    sinklab secondary --model smollm2 --prompts sims/secondary_prompts.txt --generate 64 --out out/sec
  Paper B's long-generation setting (resumable), chat template and math prompts:
    sinklab secondary --long --chat --prompt-set math
  The causal dose-response on two prompts, as JSON:
    sinklab secondary --model smollm2 --dose-response --json
  Captured activations instead of a model:
    sinklab secondary --activations acts.safetensors --json")]
pub struct Args {
    /// Model: a fetched name or a GGUF file / HF directory
    ///
    /// A name installed by `sinklab fetch` (smollm2, gemma3-270m) or a path: a GGUF file or a
    /// Hugging Face model directory.
    #[arg(long, conflicts_with = "activations", value_name = "NAME|PATH")]
    model: Option<String>,
    /// Prompt text.
    #[arg(long, conflicts_with_all = ["file", "prompts"], value_name = "TEXT")]
    prompt: Option<String>,
    /// Text file, analysed as one sequence.
    #[arg(long, conflicts_with = "prompts")]
    file: Option<PathBuf>,
    /// File of prompts, one per line (one sequence each)
    ///
    /// E.g. sims/secondary_prompts.txt.
    #[arg(long, value_name = "FILE")]
    prompts: Option<PathBuf>,
    /// Greedy-generate N tokens after each prompt first
    ///
    /// Generation uses the KV cache; the analysis then runs on prompt and generated tokens.
    #[arg(long, default_value_t = 0, value_name = "N")]
    generate: usize,
    /// Activation file instead of a model
    ///
    /// safetensors: hidden.{l} [T, d], optional attn.{l}, mlp_out.{l}, keys.{l},
    /// values.{l}, tokens.
    #[arg(long, conflicts_with_all = ["prompt", "file", "prompts", "generate"], value_name = "FILE")]
    activations: Option<PathBuf>,
    /// Cosine threshold of the detector
    ///
    /// Position t is flagged at layer l iff |cos(h_t, h_bos)| > tau.
    #[arg(long, default_value_t = sinklab::secondary::detector::PAPER_TAU)]
    tau: f64,
    /// Candidate BOS positions (comma-separated)
    ///
    /// The one of largest mean norm is used. Default: the authors' 0,1, or 0,1,2 under
    /// --chat (their chat-template setting).
    #[arg(long, value_delimiter = ',', value_name = "POS")]
    bos_candidates: Option<Vec<usize>>,
    /// Wrap each prompt in the model's chat template
    ///
    /// One user turn, generation prompt on (as transformers' apply_chat_template; a model
    /// without one is refused), and the BOS candidates default to 0,1,2. With --long the
    /// runs go to <model>+chat.
    #[arg(long, conflicts_with_all = ["activations", "bos", "file"])]
    chat: bool,
    /// Prompt set of --long and --dose-response
    ///
    /// steps: sims/secondary_prompts.txt, step-by-step reasoning requests. math:
    /// sims/secondary_math_prompts.txt, competition-style problems that ask for the final
    /// answer in a box (paper B's format); --long runs go to <model>+math.
    #[arg(long, value_enum, hide_possible_values = true, default_value_t = sinklab::secondary::long::PromptSet::Steps, value_name = "steps|math")]
    prompt_set: sinklab::secondary::long::PromptSet,
    /// Causal dose-response (B2/B3 by intervention)
    ///
    /// On --model, at --dose-layer, add r·‖h_BOS‖·u to an ordinary token's MLP output (u:
    /// the unit BOS direction there; a seeded random unit direction as the control) for r on
    /// --dose-grid, and run the faithful detector. Prompts: --prompt/--prompts, else the
    /// first --dose-prompts of --prompt-set.
    ///
    /// --json: one JSON object (fields layers, layer, grid, seed, bos_norm, curves[]
    /// {sequence, position, direction, points[] {r, sink, label, lifetime, attention,
    /// key_norm, value_norm}, threshold, lifetime_monotone, attention_monotone}, summary[]
    /// per direction {direction, curves, with_sink, median_threshold, lifetime_monotone,
    /// attention_monotone, per_r [r, sink fraction, lifetime, attention, key norm, value
    /// norm]}); --out DIR also writes DIR/dose_response.json.
    #[arg(long, conflicts_with_all = ["activations", "long", "generate", "file"])]
    dose_response: bool,
    /// Block of the dose-response addition (default: L/2).
    #[arg(long, value_name = "L")]
    dose_layer: Option<usize>,
    /// Grid of r (comma-separated, from 0, increasing).
    #[arg(long, value_delimiter = ',', value_name = "R")]
    dose_grid: Option<Vec<f64>>,
    /// Ordinary tokens patched per prompt (default 3).
    #[arg(long, value_name = "N")]
    dose_tokens: Option<usize>,
    /// Prompts of --prompt-set used by --dose-response (default 2).
    #[arg(long, value_name = "N")]
    dose_prompts: Option<usize>,
    /// Anisotropy-corrected: cosines after removing the mean state
    ///
    /// The cosines are taken after removing the mean token state (the anisotropy-corrected
    /// variant of the detector).
    #[arg(long)]
    centered: bool,
    /// Raw residual for the last layer, not the final-norm output
    ///
    /// The authors' choice: the last layer's state is the residual stream before the final
    /// norm.
    #[arg(long)]
    raw_last_layer: bool,
    /// Also analyse the standard variants (all-layers, centered).
    #[arg(long)]
    with_variants: bool,
    /// Paper B's setting: long greedy generations on --models
    ///
    /// Into out/secondary_long/<model> (resumable: generated ids are kept), faithful
    /// detector and its variants.
    #[arg(long, conflicts_with_all = ["model", "activations", "prompt", "file", "prompts", "generate"])]
    long: bool,
    /// Resident weights of --model: as stored, or f32
    ///
    /// As stored in the file, or converted to f32 at load (faster generation when memory
    /// allows; `sinklab real --help` says more).
    #[arg(long, value_enum, hide_possible_values = true, value_name = "file|f32", default_value_t = super::real::WeightsArg::File, conflicts_with_all = ["long", "activations"])]
    weights: super::real::WeightsArg,
    /// Memory limit for --weights f32 and --boot (e.g. 12G)
    ///
    /// Default: the SINKLAB_MAX_MEM environment variable, or the built-in limit.
    #[arg(long, value_name = "SIZE")]
    max_mem: Option<String>,
    /// Models of --long (default qwen2.5-coder-0.5b,smollm2)
    ///
    /// Comma-separated names or paths.
    #[arg(long, value_delimiter = ',', value_name = "MODELS")]
    models: Option<Vec<String>>,
    /// Prompts of --long (the first N of the prompt set; default 4).
    #[arg(long, value_name = "N")]
    long_prompts: Option<usize>,
    /// New tokens per prompt in --long (default 1024).
    #[arg(long, value_name = "N")]
    long_generate: Option<usize>,
    /// BOS policy of the prompts
    ///
    /// auto: the model's own default; yes: always put BOS first; no: never. A run with a
    /// non-default policy goes to <model>+bos-yes|no.
    #[arg(long, value_enum, hide_possible_values = true, value_name = "auto|yes|no", default_value_t = sinklab::runtime::tokenizer::Bos::Auto)]
    bos: sinklab::runtime::tokenizer::Bos,
    /// Scan every layer instead of the window from the BOS-norm jumps.
    #[arg(long)]
    no_window: bool,
    /// Label bos_sink iff lifetime >= L - BOS_MARGIN.
    #[arg(long, default_value_t = sinklab::secondary::detector::PAPER_BOS_MARGIN)]
    bos_margin: usize,
    /// Label secondary only if lifetime > NOISE_MAX.
    #[arg(long, default_value_t = sinklab::secondary::detector::PAPER_NOISE_MAX)]
    noise_max: usize,
    /// One JSON record per detected sink (JSON lines), not a table.
    #[arg(long)]
    json: bool,
    /// Write records, B1-B6, patching and figures here (model runs).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Sinks patched per sequence (0: no patching)
    ///
    /// The patching experiment patches this many sinks per sequence; 0 skips it.
    #[arg(long, default_value_t = 4, value_name = "N")]
    patch: usize,
    /// Bootstrap resamples for the Spearman intervals.
    #[arg(long, default_value_t = 2000, value_name = "N")]
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
        bos_candidates: match &a.bos_candidates {
            Some(v) => v.clone(),
            None if a.chat => sinklab::secondary::detector::PAPER_CHAT_BOS_CANDIDATES.to_vec(),
            None => sinklab::secondary::detector::PAPER_BOS_CANDIDATES.to_vec(),
        },
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

/// The line saying how many positions the detector's layer window excluded (flagged at a
/// layer outside it only), over `analyses`; None when it excluded none.
fn window_note(analyses: &[&sinklab::secondary::records::Analysis]) -> Option<String> {
    let n: usize = analyses.iter().map(|a| a.detection.outside_window).sum();
    (n > 0).then(|| {
        format!(
            "note: the layer window excluded {n} position(s) whose |cos| with the BOS state \
             exceeds tau only at layers outside it; --no-window scans every layer"
        )
    })
}

fn print_records(records: &[SinkRecord], json: bool) -> Result<()> {
    if records.is_empty() && !json {
        outln!("no position flagged");
        return Ok(());
    }
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

/// Ordinary tokens patched per prompt by `--dose-response` without `--dose-tokens`.
const DOSE_TOKENS: usize = 3;
/// Prompts of `--prompt-set` used by `--dose-response` without `--dose-prompts`.
const DOSE_PROMPTS: usize = 2;

pub fn run(a: Args) -> Result<i32> {
    use sinklab::secondary::long::{LONG_GENERATE, LONG_MODELS, LONG_PROMPTS};
    super::only_with(
        ("--dose-response", a.dose_response),
        &[
            ("--dose-layer", a.dose_layer.is_some()),
            ("--dose-grid", a.dose_grid.is_some()),
            ("--dose-tokens", a.dose_tokens.is_some()),
            ("--dose-prompts", a.dose_prompts.is_some()),
        ],
    )?;
    super::only_with(
        ("--long", a.long),
        &[
            ("--models", a.models.is_some()),
            ("--long-prompts", a.long_prompts.is_some()),
            ("--long-generate", a.long_generate.is_some()),
        ],
    )?;
    if a.activations.is_some() && a.out.is_some() {
        bail!(
            "--out writes the B1-B6 measurements, patching and figures of a model run; with \
             --activations there is no model to patch: drop --out (the records print on stdout)"
        );
    }
    let long_models: Vec<String> = a
        .models
        .clone()
        .unwrap_or_else(|| LONG_MODELS.map(String::from).to_vec());
    let long_prompts = a.long_prompts.unwrap_or(LONG_PROMPTS);
    let long_generate = a.long_generate.unwrap_or(LONG_GENERATE);
    let p = params(&a)?;
    // Sizes before work: the bootstrap's resamples and the generation length.
    if a.boot == 0 {
        bail!(
            "--boot 0: the confidence intervals need at least one bootstrap resample (they \
             would all be null); give --boot 1 or more"
        );
    }
    sinklab::budget::check_bootstrap_flag(a.max_mem.as_deref(), "--boot", a.boot, 1, 3)?;
    // A generation length is refused past MAX_GENERATE, the refusal naming its flag.
    let generate_size = |flag: &str, n: usize| {
        sinklab::budget::size(
            &format!("{flag} {n}"),
            n,
            MAX_GENERATE,
            "the most new tokens a run generates",
        )
    };
    generate_size("--generate", a.generate)?;
    if a.long {
        generate_size("--long-generate", long_generate)?;
        let n = sinklab::secondary::long::prompts_of(a.prompt_set).len();
        sinklab::budget::size(
            &format!("--long-prompts {long_prompts}"),
            long_prompts,
            n,
            &format!("--long has {n} prompts"),
        )?;
        let root = sinklab::secondary::long::long_dir(
            &a.out.clone().unwrap_or_else(|| PathBuf::from("out")),
        );
        let mut failed = 0;
        let setting = sinklab::secondary::long::Setting {
            bos: a.bos,
            chat: a.chat,
            set: a.prompt_set,
        };
        for m in &long_models {
            let dir = sinklab::secondary::long::setting_dir(&root, m, setting);
            let r = sinklab::secondary::long::run_model_in(
                m,
                &dir,
                long_prompts,
                long_generate,
                a.seed,
                setting,
                &mut |l: &str| errln!("{l}"),
            );
            if let Err(e) = r {
                errln!("{m}: {e:#}");
                failed += 1;
            }
        }
        return Ok(if failed == long_models.len() { 1 } else { 0 });
    }
    if let Some(path) = &a.activations {
        let act = Activations::read(path)
            .map_err(|e| super::named_once("reading activations", path, e))?;
        let params: Vec<DetectorParams> = std::iter::once(p.clone())
            .chain(if a.with_variants {
                standard_variants(&p)
            } else {
                Vec::new()
            })
            .collect();
        let vars = findings::from_activations(&act, &params, a.boot, a.seed)
            .context("running the detector")?;
        note_labels(&p, act.hidden.layers());
        let an = &vars[0].analyses[0];
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
        // The same lines as every other path: validity (with the saturation rule) and the
        // verdict sentences.
        for l in findings::summary_lines(&findings::claims_json(&vars), true) {
            errln!("{l}");
        }
        print_records(&vars[0].records, a.json)?;
        if let Some(l) = window_note(&vars[0].analyses.iter().collect::<Vec<_>>()) {
            errln!("{l}");
        }
        return Ok(0);
    }
    let Some(name) = &a.model else {
        bail!("give --model NAME|PATH, --activations FILE or --long");
    };
    let path = fetch::resolve(name)?;
    let mut lm = load(&path).map_err(|e| super::named_once("loading", &path, e))?;
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
        (None, None, None) if a.dose_response => sinklab::secondary::long::prompts_of(a.prompt_set)
            .into_iter()
            .take(a.dose_prompts.unwrap_or(DOSE_PROMPTS))
            .collect(),
        (Some(t), _, _) => vec![t.clone()],
        (None, Some(f), _) => {
            vec![
                sinklab::budget::read_text(f, sinklab::budget::MAX_INPUT_BYTES)
                    .with_context(|| format!("reading {}", f.display()))?,
            ]
        }
        (None, None, Some(f)) => sinklab::budget::read_text(f, sinklab::budget::MAX_INPUT_BYTES)
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
    if a.dose_response {
        return dose(&a, &lm, &texts, &p);
    }
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
        chat: a.chat,
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
    for l in findings::summary_lines(&findings::claims_json(&st.variants), false) {
        errln!("{l}");
    }
    if let Some(l) = window_note(&st.primary().analyses.iter().collect::<Vec<_>>()) {
        errln!("{l}");
    }
    if let Some(dir) = &a.out {
        errln!("wrote {}", dir.display());
        // With --json, stdout holds JSON only: the measures are its last line.
        if a.json {
            outln!(
                "{}",
                serde_json::to_string(&serde_json::json!({ "measures": &st.primary().measures }))?
            );
        } else {
            errln!("{}", serde_json::to_string_pretty(&st.primary().measures)?);
        }
    }
    Ok(0)
}

/// Most values of `--dose-grid` (the default grid has a handful).
const MAX_DOSE_GRID: usize = 256;

fn dose(
    a: &Args,
    lm: &sinklab::runtime::LoadedModel,
    texts: &[String],
    p: &DetectorParams,
) -> Result<i32> {
    use sinklab::secondary::dose::{DOSE_GRID, DoseOptions, dose_response, table};
    let tok = lm
        .tok
        .as_ref()
        .with_context(|| format!("{}: no tokenizer in the model files", lm.path.display()))?;
    let seqs = sinklab::secondary::dose::encode_prompts(tok, &lm.path, texts, a.chat, a.bos)?;
    let nl = lm.model.cfg.n_layer;
    if let Some(l) = a.dose_layer
        && l + 1 >= nl
    {
        bail!("--dose-layer {l}: needs a block after it (the model has L = {nl})");
    }
    let grid = a.dose_grid.clone().unwrap_or_else(|| DOSE_GRID.to_vec());
    sinklab::budget::size(
        &format!("--dose-grid of {} values", grid.len()),
        grid.len(),
        MAX_DOSE_GRID,
        "each value is one patched forward pass per prompt and direction",
    )?;
    if grid.first() != Some(&0.0) || grid.windows(2).any(|w| w[1] <= w[0]) {
        bail!("--dose-grid {grid:?}: must start at 0 and increase");
    }
    let o = DoseOptions {
        layer: a.dose_layer,
        grid,
        tokens: a.dose_tokens.unwrap_or(DOSE_TOKENS),
        seed: a.seed,
        last: if a.raw_last_layer {
            LastLayer::Raw
        } else {
            LastLayer::FinalNorm
        },
    };
    let res = dose_response(lm, &seqs, p, &o, &mut |l: &str| errln!("{l}"))?;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let f = dir.join("dose_response.json");
        sinklab::atomic::write(&f, serde_json::to_string_pretty(&res)?)
            .with_context(|| format!("writing {}", f.display()))?;
        errln!("wrote {}", f.display());
    }
    if a.json {
        outln!("{}", serde_json::to_string(&res)?);
    } else {
        out!("{}", table(&res));
    }
    Ok(0)
}
