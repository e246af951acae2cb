//! The map of cost definitions (claim A5, docs/theory.md §6): the report section
//! `cost_definitions` and `sinklab cost --definitions`. The math and the verdict are in
//! [`crate::cost::definitions`]; here the measured cells are solved (or read from their cache
//! in `out/cost_definitions/`, keyed by the options), and the trained and real cells are read
//! from the results the cost-scaling sweep (`out/sweeps/cost_scaling*/results.jsonl`) and the
//! real-model section (`out/cost_real/*.json`) left in the same output directory.

use crate::cost::definitions::{
    self, External, Family, MAX_FIT_GAP, MeasureOptions, MeasuredPoint, Series, Table,
};
use crate::cost::{Method, NormKind, Pattern, SolveOptions};
use crate::section::{ReportCtx, ReportSection, SectionError};
use std::path::Path;

/// The leak of the $\Delta(T,\varepsilon)$ columns.
pub const EPS: f64 = 0.01;

/// Bootstrap resamples of every fit.
pub const N_BOOT: usize = 1000;

/// The measured cells' grids: Frobenius T = 8, 16, 32, nuclear T = 8, 12, 16 (within the
/// interior-point SDP's reach, order 2T ≤ 50), seeds 0 and 1; quick: seed 0 alone. Sized for the
/// report (its 10 minutes on 2 cores hold every section): the default solves in about 40 CPU
/// seconds, once, then reads its cache. The interior-point solver (brackets ≈ 1e-8); the
/// first-order solver to 1e-3 where it fails.
pub fn options(quick: bool) -> MeasureOptions {
    MeasureOptions {
        grid: vec![8, 16, 32],
        grid_nuclear: vec![8, 12, 16],
        seeds: if quick { vec![0] } else { vec![0, 1] },
        on_rate: crate::cost::head::DEFAULT_ON_RATE,
        solve: SolveOptions {
            rel_gap: 1e-3,
            max_iter: 20_000,
            method: Method::preferred(),
            ..SolveOptions::default()
        },
    }
}

fn options_key(o: &MeasureOptions) -> String {
    use sha2::{Digest, Sha256};
    let desc = format!(
        "v1 {:?} {:?} {:?} {} {} {} {} {}",
        o.grid,
        o.grid_nuclear,
        o.seeds,
        o.on_rate,
        o.solve.rel_gap,
        o.solve.max_iter,
        o.solve.method,
        definitions::FIXED_D
    );
    Sha256::digest(desc.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The measured points, read from `out_dir/cost_definitions/measured-<key>.json` when present,
/// else solved now and written there. Returns the points and whether they were cached.
pub fn measured(
    out_dir: &Path,
    o: &MeasureOptions,
) -> Result<(Vec<MeasuredPoint>, bool), SectionError> {
    let dir = out_dir.join("cost_definitions");
    let file = dir.join(format!("measured-{}.json", options_key(o)));
    if let Some(p) = std::fs::read_to_string(&file)
        .ok()
        .and_then(|s| serde_json::from_str::<Vec<MeasuredPoint>>(&s).ok())
    {
        return Ok((p, true));
    }
    let pts = definitions::measure(o);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    crate::atomic::write(&file, serde_json::to_string(&pts)?)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok((pts, false))
}

fn parse(pattern: &str, norm: &str) -> Option<(Pattern, NormKind)> {
    let p = match pattern {
        "sink" => Pattern::Sink,
        "diagonal" => Pattern::Diagonal,
        _ => return None,
    };
    let n = match norm {
        "fro" => NormKind::Fro,
        "nuclear" => NormKind::Nuclear,
        _ => return None,
    };
    Some((p, n))
}

/// The trained and real series found in `out_dir`: the cost-scaling sweep's exact programs on
/// trained embeddings (one group per setting), and the real-model section's cached A5 results
/// (one group per model and layer).
pub fn external(out_dir: &Path) -> External {
    let mut ext = External::default();
    // Trained: the full sweep's results, else the quick one's.
    let sweeps = out_dir.join("sweeps");
    let records = ["cost_scaling", "cost_scaling_quick"]
        .iter()
        .map(|n| sweeps.join(n).join("results.jsonl"))
        .find(|p| p.exists())
        .and_then(|p| crate::sweep::cost_scaling::read_results(&p).ok())
        .unwrap_or_default();
    let mut settings: Vec<String> = Vec::new();
    let mut trained: Vec<(NormKind, Pattern, Series)> = Vec::new();
    for r in records
        .iter()
        .filter(|r| r.source == "exact" && r.embedding == "trained")
    {
        let Some((pattern, norm)) = parse(&r.pattern, &r.norm) else {
            continue;
        };
        let g = match settings.iter().position(|s| *s == r.setting) {
            Some(g) => g,
            None => {
                settings.push(r.setting.clone());
                settings.len() - 1
            }
        } as u32;
        let idx = match trained.iter().position(|e| e.0 == norm && e.1 == pattern) {
            Some(i) => i,
            None => {
                trained.push((norm, pattern, Series::default()));
                trained.len() - 1
            }
        };
        let s = &mut trained[idx].2;
        match (r.value, r.rel_gap) {
            (Some(v), g_rel)
                if crate::sweep::cost_scaling::usable(r) && v > 0.0 && v.is_finite() =>
            {
                s.points.push((g, r.t, v));
                s.worst_gap = s.worst_gap.max(g_rel.unwrap_or(0.0));
            }
            _ => {
                s.excluded += 1;
                s.infeasible += usize::from(r.feasible == Some(false));
            }
        }
    }
    if trained.is_empty() {
        ext.missing.push((
            Family::Trained,
            "no cost-scaling results on trained embeddings in this output directory (the full \
             report's cost_scaling section computes them)"
                .into(),
        ));
    }
    ext.series.extend(
        trained
            .into_iter()
            .map(|(n, p, s)| (Family::Trained, n, p, s)),
    );
    // Real: every cached A5 result, one group per (file, layer).
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(out_dir.join("cost_real"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut real: Vec<(NormKind, Pattern, Series)> = Vec::new();
    let mut n_files = 0;
    for (fi, f) in files.iter().enumerate() {
        let Some(r) = std::fs::read_to_string(f)
            .ok()
            .and_then(|s| serde_json::from_str::<crate::real::cost_real::A5Real>(&s).ok())
        else {
            continue;
        };
        n_files += 1;
        for p in &r.points {
            let idx = match real.iter().position(|e| e.0 == p.norm && e.1 == p.pattern) {
                Some(i) => i,
                None => {
                    real.push((p.norm, p.pattern, Series::default()));
                    real.len() - 1
                }
            };
            let s = &mut real[idx].2;
            match p.upper {
                Some(v) if p.fitted(MAX_FIT_GAP) && v > 0.0 => {
                    s.points.push(((fi * 1000 + p.layer) as u32, p.t, v));
                    s.worst_gap = s.worst_gap.max(p.rel_gap.unwrap_or(0.0));
                }
                _ => {
                    s.excluded += 1;
                    s.infeasible += usize::from(!p.feasible && !p.undetermined);
                }
            }
        }
    }
    if n_files == 0 {
        ext.missing.push((
            Family::Real,
            "no cached real-input A5 results in out/cost_real (the full report's real_models \
             section computes them on the packaged decoders)"
                .into(),
        ));
    }
    ext.series
        .extend(real.into_iter().map(|(n, p, s)| (Family::Real, n, p, s)));
    ext
}

/// The table for an output directory: measured cells solved or read from their cache, the
/// trained and real cells from the results found there.
pub fn table(out_dir: &Path, quick: bool, seed: u64) -> Result<(Table, bool), SectionError> {
    let o = options(quick);
    let (pts, cached) = measured(out_dir, &o)?;
    let ext = external(out_dir);
    Ok((
        definitions::build(&o, &pts, &ext, EPS, N_BOOT, seed)?,
        cached,
    ))
}

/// Report section `cost_definitions`.
pub fn section(ctx: &ReportCtx) -> Result<ReportSection, SectionError> {
    let start = std::time::Instant::now();
    let (t, cached) = table(&ctx.out_dir, ctx.quick, ctx.seed)?;
    let md = format!(
        "The sink and diagonal exponents of the §6 programs under every definition of cost a \
         reader could mean (docs/theory.md §6): what is priced (W_QK alone, W_VO alone, the whole \
         head on copy-paste), the norm (Frobenius or nuclear, squared or not), the gap (fixed Δ or \
         the ε-sink gap Δ(T,ε) = ln((T−1)(1−ε)/ε)) and the embeddings (orthonormal, Gaussian with d \
         fixed or d = 2T, trained, real). Measured cells {} ({:.1} s); trained and real cells from \
         the cost-scaling sweep and the real-model section of this report. Same table: \
         `sinklab cost --definitions{}`.\n\n{}",
        if cached {
            "read from their cache in `cost_definitions/`"
        } else {
            "solved now and cached in `cost_definitions/`"
        },
        start.elapsed().as_secs_f64(),
        if ctx.quick { " --quick" } else { "" },
        definitions::markdown(&t)
    );
    Ok(ReportSection {
        title: "Cost definitions: which one gives T vs T^{3/2} (A5)".into(),
        markdown: md,
        figures: Vec::new(),
    })
}
