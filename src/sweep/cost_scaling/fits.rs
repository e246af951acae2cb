//! Exponent fits of the cost-scaling records: one power law per
//! (source, embedding, norm, pattern, setting) group, and which records enter a fit.

use super::point::Record;
use crate::fit::{PowerFit, fit_power_law};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A fitted exponent for one group of records.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupFit {
    /// `exact` or `trained`.
    pub source: String,
    /// Pattern.
    pub pattern: String,
    /// Cost definition.
    pub norm: String,
    /// Embedding family.
    pub embedding: String,
    /// The records' setting (width and gap rules, or the training configuration; see
    /// [`Record::setting`]): records of two settings are two fits, never one.
    #[serde(default)]
    pub setting: String,
    /// The power-law fit of value against T.
    pub fit: PowerFit,
    /// T range.
    pub t_min: usize,
    /// T range.
    pub t_max: usize,
    /// The T of every point in the fit (repeats included), what the exact curve's slope is
    /// compared over (`cost::exact::verdict_fits`); empty in fits written before it existed.
    #[serde(default)]
    pub ts: Vec<usize>,
    /// Points that were infeasible, failed, did not converge (trained) or whose certified
    /// bracket is wider than [`MAX_FIT_GAP`] (exact): excluded from the fit.
    pub excluded: usize,
}

/// (source, embedding, norm, pattern, setting): every parameter of a record that changes the
/// math except T (the fit's abscissa) and the seed (its replicates).
pub(super) type GroupKey = (String, String, String, String, String);

pub(super) fn groups(records: &[Record]) -> BTreeMap<GroupKey, Vec<&Record>> {
    let mut g: BTreeMap<GroupKey, Vec<&Record>> = BTreeMap::new();
    for r in records {
        g.entry((
            r.source.clone(),
            r.embedding.clone(),
            r.norm.clone(),
            r.pattern.clone(),
            r.setting.clone(),
        ))
        .or_default()
        .push(r);
    }
    g
}

/// Fits every (source, embedding, norm, pattern, setting) group; bootstrap seeded by `seed`.
///
/// The records are sorted by (point id, norm) first, so the bootstrap draws, hence the CIs,
/// do not depend on the order they were written in (thread count, resumes, merges).
pub fn fit_all(records: &[Record], n_boot: usize, seed: u64) -> Vec<GroupFit> {
    let mut sorted = records.to_vec();
    sorted.sort_by(|a, b| (&a.id, &a.norm).cmp(&(&b.id, &b.norm)));
    let mut out = Vec::new();
    for ((source, embedding, norm, pattern, setting), rs) in groups(&sorted) {
        let pts: Vec<(f64, f64)> = rs
            .iter()
            .filter(|r| usable(r))
            .filter_map(|r| {
                r.value
                    .filter(|v| *v > 0.0 && v.is_finite())
                    .map(|v| (r.t as f64, v))
            })
            .collect();
        let excluded = rs.len() - pts.len();
        if let Ok(fit) = fit_power_law(&pts, n_boot, 0.95, seed) {
            // The T range the fit actually covers (excluded points do not count).
            let t_min = pts.iter().map(|p| p.0 as usize).min().unwrap_or(0);
            let t_max = pts.iter().map(|p| p.0 as usize).max().unwrap_or(0);
            out.push(GroupFit {
                source,
                pattern,
                norm,
                embedding,
                setting,
                fit,
                t_min,
                t_max,
                ts: pts.iter().map(|p| p.0 as usize).collect(),
                excluded,
            });
        }
    }
    out
}

/// Widest certified bracket, (upper − lower)/upper, of an exact point that enters a fit:
/// beyond it the solver has not located the optimum (the value is only an upper bound).
pub const MAX_FIT_GAP: f64 = 0.05;

/// Whether a record enters fits and figures: a trained run that met its convergence
/// criterion (or had none), an exact point whose bracket is at most [`MAX_FIT_GAP`] wide.
pub fn usable(r: &Record) -> bool {
    r.converged != Some(false) && r.rel_gap.is_none_or(|g| g <= MAX_FIT_GAP)
}

#[cfg(feature = "plot")] // the figures' per-T means
pub(super) fn mean_by_t(rs: &[&Record]) -> Vec<(f64, f64)> {
    let mut m: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    for r in rs.iter().filter(|r| usable(r)) {
        if let Some(v) = r.value.filter(|v| *v > 0.0 && v.is_finite()) {
            let e = m.entry(r.t).or_default();
            e.0 += v.ln();
            e.1 += 1.0;
        }
    }
    m.into_iter()
        .map(|(t, (s, n))| (t as f64, (s / n).exp()))
        .collect()
}
