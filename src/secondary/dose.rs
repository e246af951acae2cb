//! Causal dose–response for claims B2/B3 (docs/theory.md §8) on a real model, by intervention:
//! at a middle block $l_c$, one ordinary token's MLP output gets
//! $\delta = r \thinspace \lVert h^{l_c}\_{b} \rVert \thinspace u$ added
//! ([`super::native::Addition`]), with $u = h^{l_c}\_b / \lVert h^{l_c}\_b \rVert$ the unit BOS
//! direction at that block, or, as the control, a seeded random unit direction; $r$ runs
//! over a grid. The faithful detector then says whether the token became a sink, with its
//! lifetime; the attention it receives is Gu's $\alpha$ averaged over heads and over the
//! blocks after $l_c$, and its key and value norms are averaged the same way (mean over KV
//! heads). B2/B3 predict: a sink appears above some threshold $r^\ast$ along the BOS
//! direction (not along a random one), and its lifetime and received attention do not
//! decrease as $r$ grows. The monotonicity is measured on the grid, never assumed.

use super::detector::{DetectorParams, detect};
use super::native::{Addition, LastLayer, NativeError, capture, capture_with};
use crate::runtime::LoadedModel;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, StandardNormal};
use serde::Serialize;

/// What to run.
#[derive(Clone, Debug)]
pub struct DoseOptions {
    /// The block $l_c$ (`None`: $\lfloor L/2 \rfloor$).
    pub layer: Option<usize>,
    /// The grid of $r$, increasing, starting at 0 (the unpatched run).
    pub grid: Vec<f64>,
    /// Ordinary tokens patched per sequence (evenly spaced among the unflagged positions).
    pub tokens: usize,
    /// Seed of the random control directions (one per sequence).
    pub seed: u64,
    /// Which state stands for the last layer.
    pub last: LastLayer,
}

/// The default grid of $r$.
pub const DOSE_GRID: [f64; 12] = [
    0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
];

impl Default for DoseOptions {
    fn default() -> Self {
        Self {
            layer: None,
            grid: DOSE_GRID.to_vec(),
            tokens: 3,
            seed: 0,
            last: LastLayer::FinalNorm,
        }
    }
}

/// The measurement at one $r$.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DosePoint {
    /// $r$.
    pub r: f64,
    /// The detector flags the token (any label).
    pub sink: bool,
    /// Its label, when flagged.
    pub label: Option<&'static str>,
    /// Its lifetime (0 when not flagged).
    pub lifetime: usize,
    /// Mean over the blocks after $l_c$ of Gu's $\alpha$ of the token (mean over heads).
    pub attention: f64,
    /// Mean over the blocks after $l_c$ of its key norm (mean over KV heads).
    pub key_norm: f64,
    /// The same for its value norm.
    pub value_norm: f64,
}

/// One token's curve along one direction.
#[derive(Clone, Debug, Serialize)]
pub struct DoseCurve {
    /// Sequence index.
    pub sequence: usize,
    /// The patched position.
    pub position: usize,
    /// `"bos"` or `"random"`.
    pub direction: &'static str,
    /// One point per grid value.
    pub points: Vec<DosePoint>,
    /// Smallest $r$ of the grid at which the token is a sink.
    pub threshold: Option<f64>,
    /// Lifetime non-decreasing along the grid.
    pub lifetime_monotone: bool,
    /// Received attention non-decreasing along the grid (up to [`ATTN_REL_TOL`]).
    pub attention_monotone: bool,
}

/// Relative tolerance of the attention monotonicity: a step down smaller than this fraction
/// of the curve's largest value is f32 rounding (attention rows are f32 softmaxes, relative
/// error about $10^{-7}$ per entry), not a decrease.
pub const ATTN_REL_TOL: f64 = 1e-5;

/// Pooled over the curves of one direction.
#[derive(Clone, Debug, Serialize)]
pub struct DirectionSummary {
    /// `"bos"` or `"random"`.
    pub direction: &'static str,
    /// Curves (tokens × sequences).
    pub curves: usize,
    /// Curves on which a sink appears somewhere on the grid.
    pub with_sink: usize,
    /// Median threshold over those curves.
    pub median_threshold: Option<f64>,
    /// Curves with a non-decreasing lifetime.
    pub lifetime_monotone: usize,
    /// Curves with non-decreasing received attention.
    pub attention_monotone: usize,
    /// Per grid value: ($r$, fraction of curves with a sink, mean lifetime, mean attention, mean key
    /// norm, mean value norm).
    pub per_r: Vec<(f64, f64, f64, f64, f64, f64)>,
}

/// The whole experiment on one model.
#[derive(Clone, Debug, Serialize)]
pub struct DoseResult {
    /// Layers of the model.
    pub layers: usize,
    /// The block $l_c$.
    pub layer: usize,
    /// The grid.
    pub grid: Vec<f64>,
    /// Seed of the random directions.
    pub seed: u64,
    /// Mean over sequences of $\lVert h^{l_c}\_b \rVert$.
    pub bos_norm: f64,
    /// Every curve.
    pub curves: Vec<DoseCurve>,
    /// BOS direction first, then the random control.
    pub summary: Vec<DirectionSummary>,
}

fn norm(v: &[f32]) -> f64 {
    v.iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt()
}

fn head_norm_mean(t: &super::activations::HeadTensor, pos: usize) -> f64 {
    (0..t.heads)
        .map(|h| {
            let at = (h * t.tokens + pos) * t.width;
            norm(&t.data[at..at + t.width])
        })
        .sum::<f64>()
        / t.heads as f64
}

fn non_decreasing(v: &[f64], tol: f64) -> bool {
    v.windows(2).all(|w| w[1] >= w[0] - tol)
}

/// Runs the experiment on each token sequence of `seqs`; `progress` gets one line per curve.
pub fn dose_response(
    lm: &LoadedModel,
    seqs: &[Vec<u32>],
    p: &DetectorParams,
    o: &DoseOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<DoseResult, NativeError> {
    let c = &lm.model.cfg;
    let (nl, d) = (c.n_layer, c.d_model);
    let lc = o.layer.unwrap_or(nl / 2);
    if lc + 1 >= nl {
        return Err(NativeError::Capture(format!(
            "dose-response layer {lc}: needs a block after it (L = {nl})"
        )));
    }
    if o.grid.first() != Some(&0.0) || o.grid.windows(2).any(|w| w[1] <= w[0]) {
        return Err(NativeError::Capture(format!(
            "dose-response grid {:?}: must start at 0 and increase",
            o.grid
        )));
    }
    let mut curves = Vec::new();
    let mut bos_norms = Vec::new();
    for (k, ids) in seqs.iter().enumerate() {
        let (base, _) = capture(lm, ids, false, o.last)?;
        let det = detect(&base.hidden, p)?;
        let b = det.bos;
        let hb = base.hidden.state(lc, b);
        let nb = norm(hb);
        bos_norms.push(nb);
        let u_bos: Vec<f64> = hb.iter().map(|&x| x as f64 / nb).collect();
        let mut rng = StdRng::seed_from_u64(o.seed.wrapping_add(k as u64));
        let g: Vec<f64> = (0..d).map(|_| StandardNormal.sample(&mut rng)).collect();
        let ng = g.iter().map(|x| x * x).sum::<f64>().sqrt();
        let u_rand: Vec<f64> = g.iter().map(|x| x / ng).collect();
        let ordinary: Vec<usize> = (b + 1..ids.len())
            .filter(|&t| det.sinks.iter().all(|s| s.position != t))
            .collect();
        let n = o.tokens.min(ordinary.len());
        let picks: Vec<usize> = (0..n)
            .map(|i| ordinary[(i + 1) * ordinary.len() / (n + 1)])
            .collect();
        for &pos in &picks {
            for (dir, u) in [("bos", &u_bos), ("random", &u_rand)] {
                let mut points = Vec::with_capacity(o.grid.len());
                for &r in &o.grid {
                    let add = Addition {
                        layer: lc,
                        position: pos,
                        delta: u.iter().map(|x| (r * nb * x) as f32).collect(),
                    };
                    let (act, ex) = capture_with(lm, ids, true, o.last, Some(&add))?;
                    let det2 = detect(&act.hidden, p)?;
                    let s = det2.sinks.iter().find(|s| s.position == pos);
                    let later = lc + 1..nl;
                    let mean_over = |f: &dyn Fn(usize) -> f64| {
                        later.clone().map(f).sum::<f64>() / later.len() as f64
                    };
                    let attention = ex
                        .sink_scores
                        .as_ref()
                        .map_or(f64::NAN, |sc| mean_over(&|l| sc[l][pos]));
                    let (keys, values) = (
                        act.keys
                            .as_ref()
                            .ok_or_else(|| NativeError::Capture("no keys".into()))?,
                        act.values
                            .as_ref()
                            .ok_or_else(|| NativeError::Capture("no values".into()))?,
                    );
                    points.push(DosePoint {
                        r,
                        sink: s.is_some(),
                        label: s.map(|s| s.label.as_str()),
                        lifetime: s.map_or(0, |s| s.lifetime),
                        attention,
                        key_norm: mean_over(&|l| head_norm_mean(&keys[l], pos)),
                        value_norm: mean_over(&|l| head_norm_mean(&values[l], pos)),
                    });
                }
                let life: Vec<f64> = points.iter().map(|q| q.lifetime as f64).collect();
                let att: Vec<f64> = points.iter().map(|q| q.attention).collect();
                let amax = att.iter().cloned().fold(0.0, f64::max);
                let curve = DoseCurve {
                    sequence: k,
                    position: pos,
                    direction: dir,
                    threshold: points.iter().find(|q| q.sink).map(|q| q.r),
                    lifetime_monotone: non_decreasing(&life, 0.0),
                    attention_monotone: non_decreasing(&att, ATTN_REL_TOL * amax),
                    points,
                };
                progress(&format!(
                    "sequence {k} position {pos} {dir}: threshold {}",
                    curve.threshold.map_or("none".into(), |t| format!("{t}"))
                ));
                curves.push(curve);
            }
        }
    }
    let summary = ["bos", "random"]
        .into_iter()
        .map(|dir| summarise(dir, &curves, &o.grid))
        .collect();
    Ok(DoseResult {
        layers: nl,
        layer: lc,
        grid: o.grid.clone(),
        seed: o.seed,
        bos_norm: bos_norms.iter().sum::<f64>() / bos_norms.len().max(1) as f64,
        curves,
        summary,
    })
}

fn summarise(dir: &'static str, curves: &[DoseCurve], grid: &[f64]) -> DirectionSummary {
    let cs: Vec<&DoseCurve> = curves.iter().filter(|c| c.direction == dir).collect();
    let th: Vec<f64> = cs.iter().filter_map(|c| c.threshold).collect();
    let n = cs.len().max(1) as f64;
    let per_r = grid
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            let m =
                |f: &dyn Fn(&DosePoint) -> f64| cs.iter().map(|c| f(&c.points[i])).sum::<f64>() / n;
            (
                r,
                m(&|q| q.sink as u8 as f64),
                m(&|q| q.lifetime as f64),
                m(&|q| q.attention),
                m(&|q| q.key_norm),
                m(&|q| q.value_norm),
            )
        })
        .collect();
    DirectionSummary {
        direction: dir,
        curves: cs.len(),
        with_sink: th.len(),
        median_threshold: (!th.is_empty()).then(|| super::records::median(th.clone())),
        lifetime_monotone: cs.iter().filter(|c| c.lifetime_monotone).count(),
        attention_monotone: cs.iter().filter(|c| c.attention_monotone).count(),
        per_r,
    }
}

/// A table a person reads: one row per $r$ and direction, then the summary lines.
pub fn table(res: &DoseResult) -> String {
    let mut s = format!(
        "dose-response at block {} of {} (mean ‖h_BOS‖ there {:.1}), seed {}\n{:>7} {:>7} {:>9} {:>9} {:>11} {:>9} {:>9}\n",
        res.layer,
        res.layers,
        res.bos_norm,
        res.seed,
        "r",
        "dir",
        "sink frac",
        "lifetime",
        "attention",
        "|k|",
        "|v|"
    );
    for ds in &res.summary {
        for &(r, f, l, a, k, v) in &ds.per_r {
            s.push_str(&format!(
                "{r:>7} {:>7} {f:>9.2} {l:>9.2} {a:>11.5} {k:>9.3} {v:>9.3}\n",
                ds.direction
            ));
        }
    }
    for ds in &res.summary {
        s.push_str(&format!(
            "{}: sink on {} of {} curves (median threshold r = {}), lifetime non-decreasing on {}, attention non-decreasing on {}\n",
            ds.direction,
            ds.with_sink,
            ds.curves,
            ds.median_threshold
                .map_or("none".into(), |t| format!("{t:.2}")),
            ds.lifetime_monotone,
            ds.attention_monotone
        ));
    }
    s
}

/// One of the report's dose–response runs.
#[derive(Clone, Copy, Debug)]
pub struct ReportDose {
    /// Packaged model name.
    pub model: &'static str,
    /// How the prompts are presented (the prompt set, the chat template).
    pub setting: super::long::Setting,
    /// Prompts of the set used (the first N).
    pub prompts: usize,
    /// Run only by `sinklab report --full` (the default report shows it when present).
    pub full_only: bool,
}

/// The report's dose–response runs: SmolLM2 and Qwen2.5-Coder-0.5B in paper B's setting
/// ([`super::long::PAPER_SETTING`]: chat template, the first two math problems), each on the
/// default grid [`DOSE_GRID`] with [`DoseOptions::default`]'s three tokens per prompt
/// (2 × 3 × 2 × 12 = 144 patched forward passes). Qwen's costs about four times SmolLM2's and
/// runs under `report --full`.
pub const REPORT_DOSE: [ReportDose; 2] = [
    ReportDose {
        model: "smollm2",
        setting: super::long::PAPER_SETTING,
        prompts: 2,
        full_only: false,
    },
    ReportDose {
        model: "qwen2.5-coder-0.5b",
        setting: super::long::PAPER_SETTING,
        prompts: 2,
        full_only: true,
    },
];

/// Directory of one report run under the output root: `out/secondary/dose/<model>+chat+math`.
pub fn report_dir(out: &std::path::Path, r: &ReportDose) -> std::path::PathBuf {
    super::long::setting_dir(&out.join("secondary").join("dose"), r.model, r.setting)
}

/// The token ids of each prompt: inside the model's chat template when `chat` (one user
/// turn, generation prompt on), else with the BOS policy `bos`.
pub fn encode_prompts(
    tok: &crate::runtime::tokenizer::Tok,
    model: &std::path::Path,
    texts: &[String],
    chat: bool,
    bos: crate::runtime::tokenizer::Bos,
) -> Result<Vec<Vec<u32>>, crate::runtime::RealError> {
    texts
        .iter()
        .map(|t| {
            if chat {
                tok.encode_chat(t, model)
            } else {
                tok.encode(t, bos)
            }
        })
        .collect()
}

/// The file of one report run: `dir/dose_response.json`, holding the request (model,
/// setting, prompts, seed) beside the [`DoseResult`].
pub const REPORT_FILE: &str = "dose_response.json";

fn request_json(r: &ReportDose, seed: u64) -> serde_json::Value {
    serde_json::json!({
        "model": r.model,
        "chat": r.setting.chat,
        "prompt_set": r.setting.set,
        "prompts": r.prompts,
        "seed": seed,
        "grid": DOSE_GRID.to_vec(),
    })
}

/// Runs one of [`REPORT_DOSE`] into `dir` unless `dir/`[`REPORT_FILE`] already holds the same
/// request; returns the file's JSON (`{"request": …, "result": DoseResult}`).
pub fn report_run(
    r: &ReportDose,
    dir: &std::path::Path,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<serde_json::Value, super::run::RunError> {
    use super::run::RunError;
    let file = dir.join(REPORT_FILE);
    let want = request_json(r, seed);
    if let Ok(s) = std::fs::read_to_string(&file)
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(&s)
        && v["request"] == want
    {
        progress(&format!(
            "{}: dose-response found in {}",
            r.model,
            file.display()
        ));
        return Ok(v);
    }
    let path = crate::runtime::fetch::fetch(r.model, None, &mut |l: &str| {
        progress(&format!("fetch: {l}"))
    })
    .map_err(|e| RunError::Invalid(format!("{}: fetch failed ({e})", r.model)))?;
    let lm = crate::runtime::load(&path)?;
    let tok = lm.tok.as_ref().ok_or_else(|| {
        RunError::Invalid(format!(
            "{}: no tokenizer in the model files",
            path.display()
        ))
    })?;
    let texts: Vec<String> = super::long::prompts_of(r.setting.set)
        .into_iter()
        .take(r.prompts)
        .collect();
    let seqs = encode_prompts(tok, &lm.path, &texts, r.setting.chat, r.setting.bos)?;
    let p = if r.setting.chat {
        DetectorParams::chat()
    } else {
        DetectorParams::default()
    };
    let o = DoseOptions {
        seed,
        ..DoseOptions::default()
    };
    let res = dose_response(&lm, &seqs, &p, &o, &mut |l: &str| {
        progress(&format!("{}: {l}", r.model))
    })?;
    let v = serde_json::json!({ "request": want, "result": res });
    std::fs::create_dir_all(dir).map_err(|e| RunError::Io {
        path: dir.display().to_string(),
        source: e,
    })?;
    let text = serde_json::to_string_pretty(&v).map_err(|e| RunError::Invalid(e.to_string()))?;
    crate::atomic::write(&file, text.as_bytes()).map_err(|e| RunError::Io {
        path: file.display().to_string(),
        source: e,
    })?;
    Ok(v)
}
