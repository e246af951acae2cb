//! One analysis for every entry point of paper B (`secondary --activations`, `--model`,
//! `--long`, the report): per-sequence [`Analysis`] under each detector configuration,
//! pooled into [`VariantResult`]s (B1–B6 and the run validity: quantiles of
//! $|\cos(h^l_t, h^l_b)|$, fraction flagged, the saturation rule), then read into the same
//! lines: one validity line per configuration and one verdict sentence per claim
//! ([`super::verdict::verdicts`]), from the `claims` object that `claims.json` stores, so a
//! run read back from disk gets exactly the sentences of the run that wrote it.

use super::activations::Activations;
use super::detector::{DetectError, DetectorParams};
use super::native::Extras;
use super::records::{Analysis, ClaimMeasures, SinkRecord, analyse_with, claim_measures};
use serde_json::Value;

/// One detector configuration over a whole run.
pub struct VariantResult {
    /// [`DetectorParams::variant_name`].
    pub name: String,
    /// The configuration.
    pub params: DetectorParams,
    /// Per-sequence analyses.
    pub analyses: Vec<Analysis>,
    /// Every record, sequence by sequence.
    pub records: Vec<SinkRecord>,
    /// B1–B6 and the validity.
    pub measures: ClaimMeasures,
}

/// Analyses sequence `k` (captured `act`, reduced `ex`) under every configuration of `params`.
pub fn analyse_sequence(
    act: &Activations,
    ex: &Extras,
    params: &[DetectorParams],
    k: usize,
) -> Result<Vec<Analysis>, DetectError> {
    params.iter().map(|p| analyse_with(act, p, k, ex)).collect()
}

/// Pools per-sequence analyses (`analyses[i]`: configuration `params[i]`, one entry per
/// sequence) into one [`VariantResult`] each (bootstrap: `boot` resamples, seeded).
pub fn pool(
    params: Vec<DetectorParams>,
    analyses: Vec<Vec<Analysis>>,
    layers: usize,
    boot: usize,
    seed: u64,
) -> Vec<VariantResult> {
    params
        .into_iter()
        .zip(analyses)
        .map(|(pp, an)| {
            let records: Vec<SinkRecord> = an.iter().flat_map(|a| a.records.clone()).collect();
            VariantResult {
                name: pp.variant_name(),
                measures: claim_measures(&an, layers, boot, seed),
                params: pp,
                analyses: an,
                records,
            }
        })
        .collect()
}

/// The `--activations` entry point: one captured sequence (an activation file) under
/// `params` (primary first), through [`analyse_sequence`] and [`pool`] like a native run.
/// Sink scores come from the file's attention maps when it has them.
pub fn from_activations(
    act: &Activations,
    params: &[DetectorParams],
    boot: usize,
    seed: u64,
) -> Result<Vec<VariantResult>, DetectError> {
    let an = analyse_sequence(act, &Extras::default(), params, 0)?;
    let per_variant: Vec<Vec<Analysis>> = an.into_iter().map(|a| vec![a]).collect();
    Ok(pool(
        params.to_vec(),
        per_variant,
        act.hidden.layers(),
        boot,
        seed,
    ))
}

/// The `{name, claims}` objects of `claims.json`'s `variants`, for these results.
pub fn claims_json(variants: &[VariantResult]) -> Vec<Value> {
    variants
        .iter()
        .map(|v| serde_json::json!({"name": v.name, "claims": v.measures}))
        .collect()
}

/// One validity line of a configuration's `claims`: positions flagged and the saturation
/// rule. `records_follow`: the records printed next are the ones the rule speaks of.
pub fn validity_line(name: &str, claims: &Value, records_follow: bool) -> String {
    let v = &claims["validity"];
    let positions = v["positions"].as_u64().unwrap_or(0);
    let frac = v["frac_flagged"].as_f64().unwrap_or(f64::NAN);
    let sat = match (v["saturated"].as_bool().unwrap_or(false), records_follow) {
        (false, _) => "",
        (true, false) => "; saturated: anisotropy, not sinks",
        (true, true) => {
            "; saturated: anisotropy, not sinks (the records below are not secondary sinks)"
        }
    };
    format!(
        "{name}: {} of {positions} positions flagged ({frac:.3}){sat}",
        (frac * positions as f64).round()
    )
}

/// The verdict sentences of a configuration's `claims`: `"Bk: <status> — <reason>"`.
pub fn verdict_sentences(claims: &Value) -> Vec<String> {
    super::verdict::verdicts(claims)
        .into_iter()
        .map(|(k, st, text)| format!("{k}: {} — {text}", st.as_str()))
        .collect()
}

/// Every line a run prints: the validity line of each configuration, then the verdict
/// sentences of the primary (first) one. `variants` are `claims.json`'s `{name, claims}`.
pub fn summary_lines(variants: &[Value], records_follow: bool) -> Vec<String> {
    let mut out: Vec<String> = variants
        .iter()
        .enumerate()
        .map(|(i, v)| {
            validity_line(
                v["name"].as_str().unwrap_or("?"),
                &v["claims"],
                records_follow && i == 0,
            )
        })
        .collect();
    if let Some(p) = variants.first() {
        out.extend(
            verdict_sentences(&p["claims"])
                .into_iter()
                .map(|s| format!("{} {s}", p["name"].as_str().unwrap_or("?"))),
        );
    }
    out
}

/// [`summary_lines`] of a finished run's `claims.json` (the `--long` and report path).
pub fn summary_lines_of_file(path: &std::path::Path) -> Result<Vec<String>, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&s).map_err(|e| format!("{}: {e}", path.display()))?;
    let vars = v["variants"]
        .as_array()
        .ok_or_else(|| format!("{}: no `variants` (old format)", path.display()))?;
    Ok(summary_lines(vars, false))
}
