//! One secondary-sink study on a real model: greedy generation after each prompt
//! (native forward pass, KV cache), capture, the §8 detector, the B1–B6
//! measurements, the activation-patching experiment, and the output directory
//! (`records.jsonl`, `claims.json`, `patching.json`, figures). Shared by
//! `sinklab secondary --model` and the report's secondary section.

use super::DetectorParams;
use super::detector::{DetectError, Label};
use super::figures::{levels_heatmap, norm_points, norm_scatters, primary_vs_secondary};
use super::native::{NativeError, PatchOutcome, capture, generate, patch_sinks};
use super::records::{Analysis, ClaimMeasures, SinkRecord, analyse, claim_measures};
use crate::plot::PlotError;
use crate::real::tokenizer::Bos;
use crate::real::{LoadedModel, RealError};
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
}

/// The outcome of a study.
pub struct Study {
    /// Layers of the model.
    pub layers: usize,
    /// Per-sequence analyses.
    pub analyses: Vec<Analysis>,
    /// Every record, sequence by sequence.
    pub records: Vec<SinkRecord>,
    /// B1–B6.
    pub measures: ClaimMeasures,
    /// The patching experiment.
    pub patches: Vec<PatchOutcome>,
    /// Tokens generated and seconds spent generating.
    pub generated: (usize, f64),
}

impl Study {
    /// Generation speed (tokens/s), when tokens were generated.
    pub fn tokens_per_s(&self) -> Option<f64> {
        (self.generated.0 > 0).then(|| self.generated.0 as f64 / self.generated.1.max(1e-9))
    }
}

/// Runs the study on `texts` (one sequence each); `progress(k, tokens)` after each sequence.
pub fn study(
    lm: &LoadedModel,
    texts: &[String],
    p: &DetectorParams,
    o: &StudyOptions,
    progress: &mut dyn FnMut(usize, usize),
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
    let mut analyses = Vec::new();
    let mut patches = Vec::new();
    let (mut gen_tokens, mut gen_secs) = (0usize, 0.0f64);
    for (k, text) in texts.iter().enumerate() {
        let prompt = tok.encode(text, Bos::Auto)?;
        if prompt.is_empty() {
            return Err(RunError::Invalid(format!(
                "prompt {k} encodes to no tokens"
            )));
        }
        let t0 = std::time::Instant::now();
        let ids = if o.generate > 0 {
            generate(lm, &prompt, o.generate)?
        } else {
            prompt.clone()
        };
        gen_secs += t0.elapsed().as_secs_f64();
        gen_tokens += ids.len() - prompt.len();
        let act = capture(lm, &ids, true)?;
        let mut an = analyse(&act, p, k)?;
        for r in &mut an.records {
            r.token_text = r.token.map(|t| tok.decode(&[t as u32]));
        }
        if o.patch > 0 {
            // Secondary sinks first; where there are none, the other non-BOS sinks.
            let mut v = patch_sinks(lm, &ids, &act, p, &[Label::Secondary], k, o.patch)?;
            if v.is_empty() {
                v = patch_sinks(
                    lm,
                    &ids,
                    &act,
                    p,
                    &[Label::Noise, Label::BosSink],
                    k,
                    o.patch,
                )?;
            }
            patches.extend(v);
        }
        analyses.push(an);
        progress(k, ids.len());
    }
    let layers = lm.model.cfg.n_layer;
    let records: Vec<SinkRecord> = analyses.iter().flat_map(|an| an.records.clone()).collect();
    let measures = claim_measures(&analyses, layers, o.boot, o.seed);
    Ok(Study {
        layers,
        analyses,
        records,
        measures,
        patches,
        generated: (gen_tokens, gen_secs),
    })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `records.jsonl`, `claims.json`, `patching.json` and the figures (`levels`,
/// `norm_scatter`, `primary_vs_secondary`, SVG + PNG, each when it has data) into `dir`;
/// returns the figure paths.
pub fn write_outputs(
    dir: &Path,
    model: &str,
    p: &DetectorParams,
    o: &StudyOptions,
    s: &Study,
) -> Result<Vec<PathBuf>, RunError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let json = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let rec_path = dir.join("records.jsonl");
    let mut f = std::fs::File::create(&rec_path).map_err(io(&rec_path))?;
    for r in &s.records {
        let line = serde_json::to_string(r).unwrap_or_default();
        writeln!(f, "{line}").map_err(io(&rec_path))?;
    }
    let summaries: Vec<_> = s.analyses.iter().map(|an| &an.summary).collect();
    let claims = dir.join("claims.json");
    std::fs::write(
        &claims,
        json(&serde_json::json!({
            "model": model, "params": p, "generate": o.generate,
            "generation_tokens_per_s": s.tokens_per_s(),
            "claims": s.measures, "sequences": summaries,
        })),
    )
    .map_err(io(&claims))?;
    let pp = dir.join("patching.json");
    std::fs::write(&pp, json(&serde_json::json!(s.patches))).map_err(io(&pp))?;
    let mut figs = Vec::new();
    let cells: Vec<(usize, usize)> = s
        .records
        .iter()
        .filter(|r| r.label == Label::Secondary)
        .map(|r| (r.creation_layer, r.lifetime))
        .collect();
    if !cells.is_empty() {
        figs.extend(levels_heatmap(
            &dir.join("levels"),
            &format!("secondary sinks, {model}"),
            &cells,
            s.layers,
        )?);
    }
    let m = &s.measures;
    let pop: Vec<&SinkRecord> = s
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
            &format!("MLP-output norm at creation, {model}"),
            (sc, &m.b3_norm_vs_score),
            (li, &m.b3_norm_vs_lifetime),
        )?);
    }
    if m.b4_primary_strength.is_some() {
        figs.extend(primary_vs_secondary(
            &dir.join("primary_vs_secondary"),
            &format!("primary strength vs secondary count, {model}"),
            m,
        )?);
    }
    Ok(figs)
}
