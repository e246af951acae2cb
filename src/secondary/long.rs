//! Paper B's setting: long greedy generations (KV cache) after reasoning prompts
//! ([`PromptSet`]: the step-by-step set, or competition-style problems with the
//! authors' "final answer in \boxed{}" instruction), optionally inside the model's chat
//! template, on a configurable list of models, as a resumable
//! study: the generated ids of each sequence are kept under
//! `out/secondary_long/<model>/ids/`, so an interrupted run regenerates nothing it
//! already has; a model whose `claims.json` matches the request is skipped.

use super::detector::{DetectorParams, LabelRule};
use super::run::{RunError, StudyOptions, standard_variants, study, write_outputs};
use crate::runtime::tokenizer::Bos;
use crate::runtime::{fetch, load};
use std::path::{Path, PathBuf};

/// Models of the long study by default (paper B's Qwen family, and SmolLM2).
pub const LONG_MODELS: [&str; 2] = ["qwen2.5-coder-0.5b", "smollm2"];
/// New tokens per prompt.
pub const LONG_GENERATE: usize = 1024;
/// Prompts of `sims/secondary_prompts.txt` used (the first N).
pub const LONG_PROMPTS: usize = 4;

/// The prompts of the secondary-sink runs, the report's and the long traces'.
pub const REPORT_PROMPTS: &str = include_str!("../../sims/secondary_prompts.txt");

/// Which prompts a long run generates after.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum PromptSet {
    /// `sims/secondary_prompts.txt`: step-by-step reasoning requests (the original set).
    #[default]
    Steps,
    /// `sims/secondary_math_prompts.txt`: competition-style problems, each ending in
    /// "Please reason step by step, and put your final answer within \boxed{}." (paper B's format).
    Math,
}

/// The competition-style prompt set (`sims/secondary_math_prompts.txt`).
pub const MATH_PROMPTS: &str = include_str!("../../sims/secondary_math_prompts.txt");

/// The prompts of a set, one per non-comment line.
pub fn prompts_of(set: PromptSet) -> Vec<String> {
    match set {
        PromptSet::Steps => REPORT_PROMPTS,
        PromptSet::Math => MATH_PROMPTS,
    }
    .lines()
    .map(str::trim)
    .filter(|l| !l.is_empty() && !l.starts_with('#'))
    .map(String::from)
    .collect()
}

/// How the prompts of a long run are presented to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// BOS policy of plain prompts (ignored under `chat`: the template writes its own).
    pub bos: Bos,
    /// Wrap each prompt in the model's chat template (one user turn, generation prompt on),
    /// and use the authors' chat-setting BOS candidates `[0, 1, 2]`.
    pub chat: bool,
    /// The prompt set.
    pub set: PromptSet,
}

/// Paper B's own setting: the model's chat template (one user turn, generation prompt on,
/// BOS candidates `[0, 1, 2]`) around the competition-style problems.
pub const PAPER_SETTING: Setting = Setting {
    bos: Bos::Auto,
    chat: true,
    set: PromptSet::Math,
};

impl Default for Setting {
    /// The model's BOS default, no template, the step-by-step set.
    fn default() -> Self {
        Self {
            bos: Bos::Auto,
            chat: false,
            set: PromptSet::Steps,
        }
    }
}

/// The prompts of the secondary-sink runs (`sims/secondary_prompts.txt`).
pub fn prompts() -> Vec<String> {
    REPORT_PROMPTS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// Directory of the long study under an output root.
pub fn long_dir(out: &Path) -> PathBuf {
    out.join("secondary_long")
}

/// The configurations every real-model run reports: the faithful detector first, then
/// the standard variants, and, when the paper's label constants leave no lifetime that
/// can be `secondary` (L ≤ 20), the same with `bos_margin = L/2`, `noise_max = 2`.
pub fn configurations(layers: usize) -> (DetectorParams, Vec<DetectorParams>) {
    configurations_with(layers, &DetectorParams::default())
}

/// [`configurations`] around a given faithful configuration (e.g. the chat-setting BOS
/// candidates).
pub fn configurations_with(
    layers: usize,
    faithful: &DetectorParams,
) -> (DetectorParams, Vec<DetectorParams>) {
    let faithful = faithful.clone();
    let mut v = standard_variants(&faithful);
    if !faithful.labels.secondary_possible(layers) {
        let scaled = DetectorParams {
            labels: LabelRule {
                bos_margin: layers / 2,
                noise_max: 2,
            },
            ..faithful.clone()
        };
        v.push(scaled.clone());
        v.extend(standard_variants(&scaled));
    }
    (faithful, v)
}

/// Whether `dir/claims.json` holds a finished run of `n` sequences with `generate` new tokens.
pub fn finished(dir: &Path, n: usize, generate: usize) -> bool {
    let Ok(s) = std::fs::read_to_string(dir.join("claims.json")) else {
        return false;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&s) else {
        return false;
    };
    v["generate"].as_u64() == Some(generate as u64)
        && v["sequence_tokens"].as_array().map(Vec::len) == Some(n)
}

/// Runs (or resumes) one model of the study into `dir`; `progress` gets one line per event.
pub fn run_model(
    model: &str,
    dir: &Path,
    n_prompts: usize,
    generate: usize,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<(), RunError> {
    run_model_with_bos(model, dir, n_prompts, generate, seed, Bos::Auto, progress)
}

/// Directory of one model's long run: `root/<model>`, or `root/<model>+bos-yes|no` when the
/// BOS policy is not the model's default (so runs of different policies never share ids).
pub fn model_dir(root: &Path, model: &str, bos: Bos) -> PathBuf {
    setting_dir(
        root,
        model,
        Setting {
            bos,
            ..Setting::default()
        },
    )
}

/// Directory of one model's long run under a [`Setting`]: `root/<model>` for the default
/// (model's BOS, no template, step-by-step set), else suffixed `+bos-yes|no`, `+chat`,
/// `+math`, so runs of different settings never share ids.
pub fn setting_dir(root: &Path, model: &str, s: Setting) -> PathBuf {
    let mut name = model.to_string();
    if s.chat {
        name.push_str("+chat");
    } else {
        match s.bos {
            Bos::Auto => {}
            Bos::Yes => name.push_str("+bos-yes"),
            Bos::No => name.push_str("+bos-no"),
        }
    }
    if s.set == PromptSet::Math {
        name.push_str("+math");
    }
    root.join(name)
}

/// [`run_model`] with an explicit BOS policy for the prompts.
pub fn run_model_with_bos(
    model: &str,
    dir: &Path,
    n_prompts: usize,
    generate: usize,
    seed: u64,
    bos: Bos,
    progress: &mut dyn FnMut(&str),
) -> Result<(), RunError> {
    let s = Setting {
        bos,
        ..Setting::default()
    };
    run_model_in(model, dir, n_prompts, generate, seed, s, progress)
}

/// [`run_model`] under a [`Setting`] (prompt set, chat template, BOS policy).
pub fn run_model_in(
    model: &str,
    dir: &Path,
    n_prompts: usize,
    generate: usize,
    seed: u64,
    setting: Setting,
    progress: &mut dyn FnMut(&str),
) -> Result<(), RunError> {
    let texts: Vec<String> = prompts_of(setting.set)
        .into_iter()
        .take(n_prompts)
        .collect();
    if finished(dir, texts.len(), generate) {
        progress(&format!("{model}: finished run found in {}", dir.display()));
        if let Ok(lines) = super::findings::summary_lines_of_file(&dir.join("claims.json")) {
            for l in lines {
                progress(&format!("{model}: {l}"));
            }
        }
        return Ok(());
    }
    let path = fetch::fetch(model, None, &mut |line: &str| {
        progress(&format!("fetch: {line}"))
    })
    .map_err(|e| RunError::Invalid(format!("{model}: fetch failed ({e})")))?;
    let lm = load(&path)?;
    let base = if setting.chat {
        DetectorParams::chat()
    } else {
        DetectorParams::default()
    };
    let (p, variants) = configurations_with(lm.model.cfg.n_layer, &base);
    let o = StudyOptions {
        generate,
        patch: 4,
        boot: 2000,
        seed,
        variants,
        ids_dir: Some(dir.join("ids")),
        bos: setting.bos,
        chat: setting.chat,
        ..StudyOptions::default()
    };
    let t0 = std::time::Instant::now();
    let st = study(&lm, &texts, &p, &o, &mut |line| {
        progress(&format!("{model}: {line}"))
    })?;
    write_outputs(dir, model, &o, &st)?;
    for l in super::findings::summary_lines(&super::findings::claims_json(&st.variants), false) {
        progress(&format!("{model}: {l}"));
    }
    progress(&format!(
        "{model}: done in {:.0} s, wrote {}",
        t0.elapsed().as_secs_f64(),
        dir.display()
    ));
    Ok(())
}
