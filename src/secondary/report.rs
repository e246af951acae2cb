//! The report section `secondary`: the synthetic analogue of B3 (sweep of the
//! MLP norm $r$, and a population of sinks with random $r$ run through the
//! same record/claim pipeline as real activations), with its figures.

use super::detector::LabelRule;
use super::figures::{levels_heatmap, norm_points, norm_scatters, primary_vs_secondary};
use super::records::{SinkRecord, analyse, claim_measures};
use super::synthetic::{SyntheticConfig, SyntheticModel, monotone_sweep, r_grid};
use super::{DetectorParams, WindowMode};
use crate::plot::{Panel, Series, Style, render};
use crate::section::{ReportCtx, ReportSection, SectionError};
use crate::stats::spearman_ci;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::fmt::Write as _;

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { s / n as f64 }
}

/// Builds the section.
pub fn section(ctx: &ReportCtx) -> Result<ReportSection, SectionError> {
    let mut md = String::new();
    let mut figures = Vec::new();
    let fig = ctx.fig_dir();

    // 1. Sweep of r on the default model.
    let cfg = SyntheticConfig {
        seed: ctx.seed,
        ..Default::default()
    };
    let model = SyntheticModel::new(cfg.clone())?;
    let rs = r_grid(&cfg);
    let rep = monotone_sweep(&model, &rs, rs[rs.len() / 2], &DetectorParams::default())?;
    let curve = |sign: i8, f: &dyn Fn(&super::synthetic::SinkMeasure) -> f64| -> Vec<(f64, f64)> {
        rs.iter()
            .zip(&rep.measures)
            .map(|(&r, ms)| (r, mean(ms.iter().filter(|m| m.sign == sign).map(f))))
            .collect()
    };
    let panels = [
        Panel {
            title: "attention received (mean ᾱ over layers ≥ l_c)".into(),
            x_label: "r = ‖MLP output‖".into(),
            y_label: "ᾱ".into(),
            series: vec![
                Series::new(
                    "aligned (+u)",
                    curve(1, &|m| m.attention),
                    Style::LinePoints,
                    0,
                ),
                Series::new(
                    "anti-aligned (−u)",
                    curve(-1, &|m| m.attention),
                    Style::LinePoints,
                    1,
                ),
            ],
            ..Default::default()
        },
        Panel {
            title: "lifetime under the §8 detector".into(),
            x_label: "r = ‖MLP output‖".into(),
            y_label: "lifetime (layers)".into(),
            series: vec![
                Series::new(
                    "aligned (+u)",
                    curve(1, &|m| m.lifetime as f64),
                    Style::LinePoints,
                    0,
                ),
                Series::new(
                    "anti-aligned (−u)",
                    curve(-1, &|m| m.lifetime as f64),
                    Style::LinePoints,
                    1,
                ),
            ],
            ..Default::default()
        },
    ];
    figures.extend(render(
        &fig.join("secondary_synthetic"),
        "synthetic secondary sinks: MLP norm r",
        &panels,
    )?);
    writeln!(
        md,
        "Synthetic analogue of B3 (model in `secondary::synthetic`, L = {}, T = {}, d = {}, creation layer {}, window [{}, {}), \
         {} aligned and {} anti-aligned cone tokens, seed {}). Over {} values of r in [0, {:.1}]: smallest step of aligned-sink \
         attention {:.2e}, smallest lifetime step {}, largest step of anti-aligned attention {:.2e} (the +u-reading head \
         repels them although |cos| flags them); spurious detections: {}.\n",
        cfg.layers,
        cfg.tokens,
        cfg.dim,
        cfg.creation_layer,
        cfg.window_start,
        cfg.window_end,
        rep.counts.0,
        rep.counts.1,
        cfg.seed,
        rs.len(),
        rs.last().copied().unwrap_or(0.0),
        rep.min_step_attention_aligned,
        rep.min_step_lifetime,
        rep.max_step_attention_anti,
        rep.spurious.len()
    )?;

    // 2. A population of sinks with random r, through the record/claim pipeline.
    let tokens = if ctx.quick { 96 } else { 256 };
    let pcfg = SyntheticConfig {
        tokens,
        cone_tokens: tokens / 4,
        seed: ctx.seed.wrapping_add(1),
        ..Default::default()
    };
    let pmodel = SyntheticModel::new(pcfg.clone())?;
    let r_max = rs.last().copied().unwrap_or(1.0) * 0.6;
    let mut rng = StdRng::seed_from_u64(ctx.seed.wrapping_add(2));
    let rr: Vec<f64> = (0..tokens).map(|_| r_max * rng.random::<f64>()).collect();
    let act = pmodel.activations(&rr);
    // L = 16: the paper's L − 15 would call every sink bos_sink; scale the rule to the depth.
    let labels = LabelRule {
        bos_margin: pcfg.layers / 2,
        noise_max: 1,
    };
    let p = DetectorParams {
        labels,
        ..Default::default()
    };
    let an = analyse(&act, &p, 0)?;
    let m = claim_measures(std::slice::from_ref(&an), pcfg.layers, 200, ctx.seed);
    let cells: Vec<(usize, usize)> = an
        .records
        .iter()
        .map(|r| (r.creation_layer, r.lifetime))
        .collect();
    figures.extend(levels_heatmap(
        &fig.join("secondary_levels_synthetic"),
        "synthetic sinks",
        &cells,
        pcfg.layers,
    )?);
    // Aligned sinks (cos with the BOS > 0 at creation) for the score; every sink for the lifetime.
    let all: Vec<&SinkRecord> = an.records.iter().collect();
    let aligned: Vec<&SinkRecord> = all
        .iter()
        .copied()
        .filter(|r| r.cos_bos.first().is_some_and(|&c| c > 0.0))
        .collect();
    let anti: Vec<&SinkRecord> = all
        .iter()
        .copied()
        .filter(|r| r.cos_bos.first().is_some_and(|&c| c < 0.0))
        .collect();
    let boot = if ctx.quick { 300 } else { 2000 };
    let sp = |pts: &[(f64, f64)], k: u64| {
        let (x, y): (Vec<f64>, Vec<f64>) = pts.iter().copied().unzip();
        spearman_ci(&x, &y, boot, 0.95, ctx.seed.wrapping_add(k)).ok()
    };
    let (score_al, _) = norm_points(&aligned);
    let (score_anti, _) = norm_points(&anti);
    let (_, life_all) = norm_points(&all);
    let (e_al, e_anti, e_life) = (sp(&score_al, 10), sp(&score_anti, 11), sp(&life_all, 12));
    figures.extend(norm_scatters(
        &fig.join("secondary_norm_synthetic"),
        "synthetic: MLP-output norm at creation (score: aligned sinks; lifetime: all)",
        (score_al, &e_al),
        (life_all, &e_life),
    )?);
    figures.extend(primary_vs_secondary(
        &fig.join("secondary_primary_synthetic"),
        "synthetic: primary vs secondary",
        &m,
    )?);
    let est = |e: &Option<crate::stats::Estimate>| {
        e.map_or("n/a".to_string(), |e| {
            format!(
                "{:.3} (95% CI [{:.3}, {:.3}], n = {})",
                e.value, e.lo, e.hi, e.n
            )
        })
    };
    writeln!(
        md,
        "Population run: {} cone tokens with r uniform in [0, {:.1}] (T = {tokens}), analysed by the same code as real \
         activations (labels: bos_sink iff lifetime ≥ L − {}, secondary iff lifetime > {}). Sinks: {} bos_sink, {} secondary, \
         {} noise. Spearman(‖MLP output‖, mean sink score): aligned sinks {}, anti-aligned {}; \
         Spearman(‖MLP output‖, lifetime), all sinks: {}. Primary strength vs secondary count over layers: Spearman {}.\n",
        pcfg.cone_tokens,
        r_max,
        labels.bos_margin,
        labels.noise_max,
        m.label_counts.0,
        m.label_counts.1,
        m.label_counts.2,
        est(&e_al),
        est(&e_anti),
        est(&e_life),
        m.b4_spearman.map_or("n/a".into(), |v| format!("{v:.3}"))
    )?;
    if !ctx.quick {
        run_report_models(ctx, &mut md)?;
    }
    real_models(ctx, &mut md, &mut figures)?;
    Ok(ReportSection {
        title: "Secondary sinks (paper B)".into(),
        markdown: md,
        figures,
    })
}

/// The prompts of the report's own runs (`sims/secondary_prompts.txt`).
pub const REPORT_PROMPTS: &str = include_str!("../../sims/secondary_prompts.txt");

/// The full report's own real-model runs: model, window mode, `bos_margin`, `noise_max`,
/// tokens generated per prompt. SmolLM2 scans every layer (its BOS-norm window is always
/// [11, 28) and holds no sink at τ = 0.9); Gemma-3-270M has 18 layers, so the paper's
/// `bos_margin` of 15 would leave no lifetime that can be secondary and it uses 9 / 2.
pub const REPORT_RUNS: [(&str, WindowMode, usize, usize, usize); 2] = [
    (
        "smollm2",
        WindowMode::AllLayers,
        super::detector::PAPER_BOS_MARGIN,
        super::detector::PAPER_NOISE_MAX,
        96,
    ),
    ("gemma3-270m", WindowMode::BosNormJumps, 9, 2, 48),
];

/// Runs [`REPORT_RUNS`] whose directory `out/secondary/<model>/` has no `claims.json` yet
/// (fetching a model that is not cached, like the real-model section), so the full report
/// measures B1–B6 on a fresh machine; existing runs are reused.
fn run_report_models(ctx: &ReportCtx, md: &mut String) -> Result<(), SectionError> {
    use crate::real::{fetch, load};
    let texts: Vec<String> = REPORT_PROMPTS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    for (name, window, bos_margin, noise_max, generate) in REPORT_RUNS {
        let dir = ctx.out_dir.join("secondary").join(name);
        if dir.join("claims.json").exists() {
            continue;
        }
        // `fetch` returns a verified cached copy at once, and downloads only what is missing.
        let path = match fetch::fetch(name, None, &mut |line: &str| eprintln!("fetch: {line}")) {
            Ok(p) => p,
            Err(e) => {
                writeln!(
                    md,
                    "{name}: not in the cache and the fetch failed ({e}); run `sinklab fetch {name}`.\n"
                )?;
                continue;
            }
        };
        let lm = load(&path)?;
        let p = DetectorParams {
            window,
            labels: LabelRule {
                bos_margin,
                noise_max,
            },
            ..DetectorParams::default()
        };
        let o = super::run::StudyOptions {
            generate,
            patch: 4,
            boot: 2000,
            seed: ctx.seed,
        };
        eprintln!(
            "secondary: {name}, {} prompts × {generate} generated tokens",
            texts.len()
        );
        let st = super::run::study(&lm, &texts, &p, &o, &mut |k, n| {
            eprintln!("secondary: {name} sequence {k}: {n} tokens")
        })?;
        super::run::write_outputs(&dir, name, &p, &o, &st)?;
        writeln!(
            md,
            "Ran {name} now: {} prompts of `sims/secondary_prompts.txt`, {generate} tokens generated greedily \
             after each ({:.1} tokens/s), window {:?}, τ = {}, bos_margin {bos_margin}, noise_max {noise_max}; \
             patching: {}.\n",
            texts.len(),
            st.tokens_per_s().unwrap_or(f64::NAN),
            window,
            p.tau,
            if st.patches.is_empty() {
                "no sink could be patched (no ordinary, unflagged token to donate an MLP output)"
                    .to_string()
            } else {
                format!(
                    "{} of {} patched sinks disappear",
                    st.patches.iter().filter(|x| x.lifetime_after == 0).count(),
                    st.patches.len()
                )
            }
        )?;
    }
    Ok(())
}

/// Summarises the real-model runs found under `out/secondary/<model>/claims.json`
/// (written by `sinklab secondary --model M --prompts F --generate N --out out/secondary/M`).
fn real_models(
    ctx: &ReportCtx,
    md: &mut String,
    figures: &mut Vec<std::path::PathBuf>,
) -> Result<(), SectionError> {
    let root = ctx.out_dir.join("secondary");
    let mut dirs: Vec<std::path::PathBuf> = match std::fs::read_dir(&root) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("claims.json").exists())
            .collect(),
        Err(_) => Vec::new(),
    };
    dirs.sort();
    if dirs.is_empty() {
        writeln!(
            md,
            "Real models: no run found under `{}`. Produce one with `sinklab secondary --model smollm2 --prompts \
             sims/secondary_prompts.txt --generate 256 --out {}/smollm2` and re-run the report.",
            root.display(),
            root.display()
        )?;
        return Ok(());
    }
    writeln!(
        md,
        "Real models (B1–B6; one row per run directory under `{}`):\n",
        root.display()
    )?;
    writeln!(
        md,
        "| model | seqs | bos_sink / secondary / noise | B1 middle-third frac | B2 median abs cos (MLP, pre-MLP) | B3 ρ(norm, score) | B3 ρ(norm, lifetime) | B4 ρ(primary, #secondary) | B5 levels (frac in levels) | B6 hidden / key / value ratio | gen tok/s |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for d in &dirs {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("claims.json"))?)?;
        let c = &v["claims"];
        let f = |x: &serde_json::Value| x.as_f64().map_or("n/a".to_string(), |y| format!("{y:.3}"));
        let e = |x: &serde_json::Value| {
            if x.is_null() {
                "n/a".to_string()
            } else {
                format!(
                    "{} [{}, {}] (n = {})",
                    f(&x["value"]),
                    f(&x["lo"]),
                    f(&x["hi"]),
                    x["n"]
                )
            }
        };
        let lc = &c["label_counts"];
        writeln!(
            md,
            "| {} | {} | {} / {} / {} | {} | {}, {} | {} | {} | {} | {} ({}) | {} / {} / {} | {} |",
            d.file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
            c["sequences"],
            lc[0],
            lc[1],
            lc[2],
            f(&c["b1_frac_middle_third"]),
            f(&c["b2_median_abs_cos_mlp"]),
            f(&c["b2_median_abs_cos_pre"]),
            e(&c["b3_norm_vs_score"]),
            e(&c["b3_norm_vs_lifetime"]),
            f(&c["b4_spearman"]),
            c["b5_levels"]["levels"],
            f(&c["b5_levels"]["frac_in_levels"]),
            f(&c["b6_hidden_ratio"]),
            f(&c["b6_key_ratio"]),
            f(&c["b6_value_ratio"]),
            f(&v["generation_tokens_per_s"]),
        )?;
        for fig in ["levels", "norm_scatter", "primary_vs_secondary"] {
            let png = d.join(format!("{fig}.png"));
            if png.exists() {
                figures.push(png);
            }
        }
    }
    writeln!(md)?;
    Ok(())
}
