//! One secondary-sink study on a real model: greedy generation after each prompt
//! (native forward pass, KV cache), capture, the §8 detector, the B1–B6
//! measurements, the activation-patching experiment, and the output directory
//! (`records.jsonl`, `claims.json`, `patching.json`, figures). Shared by
//! `sinklab secondary --model` and the report's secondary section.

use super::detector::{DetectError, Label};
use super::figures::{levels_heatmap, norm_points, norm_scatters, primary_vs_secondary};
use super::findings::{analyse_sequence, pool};
use super::native::{LastLayer, generate_with_progress};
use super::native::{NativeError, PatchOutcome, capture, patch_sinks};
use super::records::{Analysis, SinkRecord};
use super::{DetectorParams, WindowMode};
use crate::plot::PlotError;
use crate::runtime::tokenizer::Bos;
use crate::runtime::{LoadedModel, RealError};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Errors of a model study.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Loading, tokenizing.
    #[error(transparent)]
    Real(#[from] RealError),
    /// Forward pass, generation, patching.
    #[error(transparent)]
    Native(#[from] NativeError),
    /// The detector.
    #[error(transparent)]
    Detect(#[from] DetectError),
    /// A figure.
    #[error(transparent)]
    Plot(#[from] PlotError),
    /// Writing the outputs.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Bad input (no tokenizer, empty prompt).
    #[error("{0}")]
    Invalid(String),
}

/// What to run.
#[derive(Clone, Debug)]
pub struct StudyOptions {
    /// Tokens greedily generated after each prompt (0: analyse the prompt alone).
    pub generate: usize,
    /// Sinks patched per sequence (0: no patching).
    pub patch: usize,
    /// Bootstrap resamples of the Spearman intervals.
    pub boot: usize,
    /// Seed of the bootstrap.
    pub seed: u64,
    /// Which state stands for the last layer.
    pub last: LastLayer,
    /// Named variants analysed beside the primary configuration (same captures).
    pub variants: Vec<DetectorParams>,
    /// Where generated token ids are kept (`seq_{k}.json`), so that a long run resumes
    /// without regenerating; `None`: keep nothing.
    pub ids_dir: Option<PathBuf>,
    /// BOS policy of the prompts (`Auto`: the model's own default; Qwen's adds none, so its
    /// first position is then an ordinary prompt token).
    pub bos: Bos,
    /// Wrap each prompt in the model's chat template (one user turn, generation prompt on;
    /// [`crate::runtime::chat_template`]); `bos` is then unused.
    pub chat: bool,
}

impl Default for StudyOptions {
    fn default() -> Self {
        Self {
            generate: 0,
            patch: 0,
            boot: 2000,
            seed: 0,
            last: LastLayer::FinalNorm,
            variants: Vec::new(),
            ids_dir: None,
            bos: Bos::Auto,
            chat: false,
        }
    }
}

/// The variants the reports run beside the faithful detector: `all-layers` (no
/// window) and `centered` (anisotropy-corrected, [`super::detector::Centering::MeanToken`]).
pub fn standard_variants(primary: &DetectorParams) -> Vec<DetectorParams> {
    use super::detector::Centering;
    vec![
        DetectorParams {
            window: WindowMode::AllLayers,
            ..primary.clone()
        },
        DetectorParams {
            centering: Centering::MeanToken,
            ..primary.clone()
        },
        DetectorParams {
            window: WindowMode::AllLayers,
            centering: Centering::MeanToken,
            ..primary.clone()
        },
    ]
}

pub use super::findings::VariantResult;

/// The outcome of a study.
pub struct Study {
    /// Layers of the model.
    pub layers: usize,
    /// The primary configuration first, then the variants.
    pub variants: Vec<VariantResult>,
    /// The patching experiment.
    pub patches: Vec<PatchOutcome>,
    /// The variant whose sinks were patched.
    pub patch_variant: Option<String>,
    /// Tokens generated (this run, resumed sequences excluded) and seconds spent generating.
    pub generated: (usize, f64),
    /// Tokens per sequence.
    pub seq_tokens: Vec<usize>,
}

impl Study {
    /// Generation speed (tokens/s), when tokens were generated.
    pub fn tokens_per_s(&self) -> Option<f64> {
        (self.generated.0 > 0).then(|| self.generated.0 as f64 / self.generated.1.max(1e-9))
    }
    /// The primary configuration.
    pub fn primary(&self) -> &VariantResult {
        &self.variants[0]
    }
}

fn load_ids(path: &Path, prompt: &[u32], n_new: usize) -> Option<Vec<u32>> {
    let v: Vec<u32> = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    (v.len() >= prompt.len() && v[..prompt.len()] == *prompt && v.len() - prompt.len() == n_new)
        .then_some(v)
}

/// Runs the study on `texts` (one sequence each) under `p` and `o.variants`;
/// `progress` receives one line per event (generation every 128 tokens, each sequence).
pub fn study(
    lm: &LoadedModel,
    texts: &[String],
    p: &DetectorParams,
    o: &StudyOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Study, RunError> {
    let tok = lm.tok.as_ref().ok_or_else(|| {
        RunError::Invalid(format!(
            "{}: no tokenizer in the model files",
            lm.path.display()
        ))
    })?;
    if texts.is_empty() {
        return Err(RunError::Invalid("no prompt to run".into()));
    }
    let encode = |text: &str| -> Result<Vec<u32>, RealError> {
        if o.chat {
            tok.encode_chat(text, &lm.path)
        } else {
            tok.encode(text, o.bos)
        }
    };
    let params: Vec<DetectorParams> = std::iter::once(p.clone())
        .chain(o.variants.iter().cloned())
        .collect();
    let mut analyses: Vec<Vec<Analysis>> = vec![Vec::new(); params.len()];
    let mut patches = Vec::new();
    let mut patch_variant = None;
    let mut seq_tokens = Vec::new();
    let (mut gen_tokens, mut gen_secs) = (0usize, 0.0f64);
    if o.generate > 0 {
        // Every sequence must fit the context before any generation starts (the decoder
        // would stop at the context silently, after the time of the whole run).
        let ctx = lm.model.cfg.max_context;
        for (k, text) in texts.iter().enumerate() {
            let n = encode(text)?.len();
            if n + o.generate > ctx {
                return Err(RunError::Invalid(format!(
                    "prompt {k} ({n} tokens) + {} generated tokens = {} tokens, over the context of {} ({ctx} tokens)",
                    o.generate,
                    n + o.generate,
                    lm.path.display()
                )));
            }
        }
    }
    if let Some(d) = &o.ids_dir {
        std::fs::create_dir_all(d).map_err(io(d))?;
    }
    for (k, text) in texts.iter().enumerate() {
        let prompt = encode(text)?;
        if prompt.len() < 2 {
            return Err(RunError::Invalid(format!(
                "prompt {k} encodes to {} token(s); the detector needs a BOS and at least one more",
                prompt.len()
            )));
        }
        let ids_path = o.ids_dir.as_ref().map(|d| d.join(format!("seq_{k}.json")));
        let cached = ids_path
            .as_ref()
            .and_then(|pth| load_ids(pth, &prompt, o.generate));
        let ids = match cached {
            Some(v) => {
                progress(&format!(
                    "sequence {k}: {} tokens reused from {}",
                    v.len(),
                    ids_path
                        .as_ref()
                        .map_or(String::new(), |x| x.display().to_string())
                ));
                v
            }
            None if o.generate > 0 => {
                let t0 = std::time::Instant::now();
                let v = generate_with_progress(lm, &prompt, o.generate, 128, &mut |n| {
                    let s = t0.elapsed().as_secs_f64();
                    progress(&format!(
                        "sequence {k}: generated {n}/{} tokens ({:.1} tokens/s)",
                        o.generate,
                        n as f64 / s.max(1e-9)
                    ))
                })?;
                gen_secs += t0.elapsed().as_secs_f64();
                gen_tokens += v.len() - prompt.len();
                if let Some(pth) = &ids_path {
                    crate::atomic::write(pth, serde_json::to_string(&v).unwrap_or_default())
                        .map_err(io(pth))?;
                }
                v
            }
            None => prompt.clone(),
        };
        let (act, ex) = capture(lm, &ids, true, o.last)?;
        for (pi, mut an) in analyse_sequence(&act, &ex, &params, k)?
            .into_iter()
            .enumerate()
        {
            for r in &mut an.records {
                r.token_text = r.token.map(|t| tok.decode(&[t as u32]));
            }
            analyses[pi].push(an);
        }
        if o.patch > 0 {
            // The first configuration (primary, then the variants) with a non-saturated
            // detection and sinks: secondary sinks first, else the other non-BOS sinks.
            for (pi, pp) in params.iter().enumerate() {
                let an = &analyses[pi][k];
                if an.detection.validity.saturated || an.records.is_empty() {
                    continue;
                }
                let mut v =
                    patch_sinks(lm, &ids, &act, pp, &[Label::Secondary], k, o.patch, o.last)?;
                if v.is_empty() {
                    v = patch_sinks(
                        lm,
                        &ids,
                        &act,
                        pp,
                        &[Label::Noise, Label::BosSink],
                        k,
                        o.patch,
                        o.last,
                    )?;
                }
                if !v.is_empty() {
                    patch_variant.get_or_insert_with(|| pp.variant_name());
                    patches.extend(v);
                    break;
                }
            }
        }
        seq_tokens.push(ids.len());
        progress(&format!(
            "sequence {} of {} analysed: {} tokens",
            k + 1,
            texts.len(),
            ids.len()
        ));
    }
    let layers = lm.model.cfg.n_layer;
    let variants = pool(params, analyses, layers, o.boot, o.seed);
    Ok(Study {
        layers,
        variants,
        patches,
        patch_variant,
        generated: (gen_tokens, gen_secs),
        seq_tokens,
    })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `records.jsonl` (primary configuration), `records_<variant>.jsonl`,
/// `claims.json` (every configuration: parameters, B1–B6, validity, per-sequence
/// summaries), `patching.json` and the figures (`levels`, `norm_scatter`,
/// `primary_vs_secondary`, SVG + PNG, each when it has data, from the first
/// non-saturated configuration with secondary sinks) into `dir`; returns the figure paths.
pub fn write_outputs(
    dir: &Path,
    model: &str,
    o: &StudyOptions,
    s: &Study,
) -> Result<Vec<PathBuf>, RunError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let json = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    for (i, v) in s.variants.iter().enumerate() {
        let rec_path = if i == 0 {
            dir.join("records.jsonl")
        } else {
            dir.join(format!(
                "records_{}.jsonl",
                v.name.replace(['+', '/', '='], "_")
            ))
        };
        crate::atomic::write_with(
            &rec_path,
            |f| {
                for r in &v.records {
                    let line = serde_json::to_string(r).unwrap_or_default();
                    writeln!(f, "{line}")?;
                }
                Ok(())
            },
            |e| e,
        )
        .map_err(io(&rec_path))?;
    }
    let variants: Vec<serde_json::Value> = s
        .variants
        .iter()
        .map(|v| {
            let summaries: Vec<_> = v.analyses.iter().map(|an| &an.summary).collect();
            serde_json::json!({
                "name": v.name, "params": v.params, "claims": v.measures, "sequences": summaries,
                "bos_entries": v.analyses.iter().map(|a| &a.detection.bos_entry).collect::<Vec<_>>(),
            })
        })
        .collect();
    let claims = dir.join("claims.json");
    crate::atomic::write(
        &claims,
        json(&serde_json::json!({
            "model": model, "generate": o.generate, "last_layer": o.last,
            "layers": s.layers, "sequence_tokens": s.seq_tokens,
            "generation_tokens_per_s": s.tokens_per_s(),
            "patch_variant": s.patch_variant,
            "variants": variants,
        })),
    )
    .map_err(io(&claims))?;
    let pp = dir.join("patching.json");
    crate::atomic::write(&pp, json(&serde_json::json!(s.patches))).map_err(io(&pp))?;
    let mut figs = Vec::new();
    let Some(v) = s
        .variants
        .iter()
        .find(|v| !v.measures.validity.saturated && v.measures.label_counts.1 > 0)
    else {
        return Ok(figs);
    };
    let tag = format!("{model}, {}", v.name);
    let cells: Vec<(usize, usize)> = v
        .records
        .iter()
        .filter(|r| r.label == Label::Secondary)
        .map(|r| (r.creation_layer, r.lifetime))
        .collect();
    figs.extend(levels_heatmap(
        &dir.join("levels"),
        &format!("secondary sinks, {tag}"),
        &cells,
        s.layers,
    )?);
    let m = &v.measures;
    let pop: Vec<&SinkRecord> = v
        .records
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
        figs.extend(norm_scatters(
            &dir.join("norm_scatter"),
            &format!("MLP-output norm at creation, {tag}"),
            (sc, &m.b3_norm_vs_score),
            (li, &m.b3_norm_vs_lifetime),
        )?);
    }
    if m.b4_primary_strength.is_some() {
        figs.extend(primary_vs_secondary(
            &dir.join("primary_vs_secondary"),
            &format!("primary strength vs secondary count, {tag}"),
            m,
        )?);
    }
    Ok(figs)
}
