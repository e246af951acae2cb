//! The secondary-sink detector of paper B (Wong et al. 2025, *On the Existence
//! and Behaviour of Secondary Attention Sinks*, arXiv:2512.22213), as its
//! public code does it (docs/theory.md §8):
//!
//! 1. **BOS.** $b$ is the single candidate, or among several candidates the one
//!    with the largest mean norm $\frac1L\sum_l \lVert h^l_p\rVert$ (first on ties).
//! 2. **Window.** $n_l = \lVert h^l_b\rVert$, $D_l = n_{l+1}-n_l$ ($l = 0..L-2$);
//!    $l_{start} = \arg\max_l D_l + 1$, $l_{end} = \arg\min_{l\ge l_{start}} D_l + 1$;
//!    layers $l_{start} \le l < l_{end}$ are scanned (first index on ties).
//!    The no-window variant scans all layers.
//! 3. **Flags.** Position $t > b$ is flagged at layer $l$ iff
//!    $|\cos(h^l_t, h^l_b)| > \tau$ (absolute value: anti-aligned states count).
//!    A zero state has no cosine and is never flagged.
//! 4. **Lifetime** = number of flagged layers (not necessarily contiguous);
//!    **creation layer** = first flagged layer.
//! 5. **Label** from the lifetime $\ell$: `bos_sink` if $\ell \ge L - m$,
//!    `secondary` if $n < \ell < L - m$, `noise` otherwise, with the paper's
//!    $m = 15$, $n = 4$ as defaults (both parameters).
//! 6. **Levels**: recurring (creation layer, lifetime) cells.
//!
//! Conventions of the authors' `src/hidden_state_base.py` matched by default:
//! BOS candidates $\lbrace 0, 1\rbrace$ (their `[0, 1, 2]` under a chat template is a
//! parameter), and the BOS's own entry (lifetime = the window length, or $L$ when
//! several candidates are scanned without a window) labelled by the same rule
//! ([`Detection::bos_entry`]). Named variants: [`Centering::MeanToken`]
//! (anisotropy-corrected cosines) and [`WindowMode::AllLayers`].
//!
//! **Validity.** Every detection carries [`Validity`]: the per-layer distribution of
//! $|\cos(h^l_t, h^l_b)|$ over the positions $t > b$ (all, and the ordinary ones,
//! never flagged), the fraction flagged, and the saturation rule: a run is
//! *saturated (anisotropy, not sinks)* iff more than [`SATURATION_FRAC`] of the
//! positions $t > b$ are flagged at some scanned layer, or at some scanned layer
//! the median of $|\cos|$ over $t > b$ exceeds $\tau$.

use super::hidden::{HiddenStates, Real, dot_and_sq};
use crate::stats::quantile_sorted;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::Range;

/// The paper's cosine threshold (its code uses 0.9).
pub const PAPER_TAU: f64 = 0.9;
/// The paper's BOS margin: `bos_sink` iff lifetime ≥ L − 15.
pub const PAPER_BOS_MARGIN: usize = 15;
/// The paper's noise bound: `secondary` needs lifetime > 4.
pub const PAPER_NOISE_MAX: usize = 4;
/// The authors' BOS candidates without a chat template (`[0, 1, 2]` with one).
pub const PAPER_BOS_CANDIDATES: [usize; 2] = [0, 1];
/// The authors' BOS candidates under a chat template (its opening special tokens).
pub const PAPER_CHAT_BOS_CANDIDATES: [usize; 3] = [0, 1, 2];
/// Saturation rule: more than this fraction of the positions after the BOS flagged.
pub const SATURATION_FRAC: f64 = 0.5;

/// How the cosine against the BOS state is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Centering {
    /// $\cos(h^l_t, h^l_b)$, the authors' detector.
    #[default]
    None,
    /// Anisotropy-corrected: $\cos(h^l_t - \mu^l, h^l_b - \mu^l)$ with $\mu^l$ the mean
    /// state over the positions that are not BOS candidates (removes the common
    /// direction that makes every state look like the BOS in an anisotropic stream).
    MeanToken,
}

/// Which layers the detector scans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
pub enum WindowMode {
    /// The window between the largest rise and the following largest drop of the BOS norm.
    #[default]
    BosNormJumps,
    /// Every layer (the no-window variant).
    AllLayers,
}

/// Label rule: thresholds on the lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LabelRule {
    /// `bos_sink` iff lifetime ≥ L − `bos_margin` (signed: for L ≤ margin every lifetime qualifies, as in the paper's code).
    pub bos_margin: usize,
    /// `secondary` needs lifetime > `noise_max`.
    pub noise_max: usize,
}

impl Default for LabelRule {
    fn default() -> Self {
        Self {
            bos_margin: PAPER_BOS_MARGIN,
            noise_max: PAPER_NOISE_MAX,
        }
    }
}

/// Kind of a detected sink.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    /// Lives as long as the BOS sink.
    BosSink,
    /// Intermediate lifetime: a secondary sink.
    Secondary,
    /// Too short-lived.
    Noise,
}

impl Label {
    /// The paper's string for the label.
    pub fn as_str(self) -> &'static str {
        match self {
            Label::BosSink => "bos_sink",
            Label::Secondary => "secondary",
            Label::Noise => "noise",
        }
    }
}

impl LabelRule {
    /// Label of a sink with `lifetime` flagged layers in a model of `layers` layers.
    pub fn label(&self, lifetime: usize, layers: usize) -> Label {
        let bos_min = layers as i64 - self.bos_margin as i64;
        if lifetime as i64 >= bos_min {
            Label::BosSink
        } else if lifetime > self.noise_max {
            Label::Secondary
        } else {
            Label::Noise
        }
    }

    /// Whether a `secondary` label is possible at all in a model of `layers` layers
    /// (false for the paper's constants when L ≤ 20, e.g. Gemma-3-270M with L = 18).
    pub fn secondary_possible(&self, layers: usize) -> bool {
        (self.noise_max as i64 + 1) < layers as i64 - self.bos_margin as i64
    }
}

/// Detector parameters; `Default` gives the paper's values.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct DetectorParams {
    /// Cosine threshold τ (flag iff |cos| > τ).
    pub tau: f64,
    /// Candidate BOS positions.
    pub bos_candidates: Vec<usize>,
    /// Which layers to scan.
    pub window: WindowMode,
    /// Lifetime → label rule.
    pub labels: LabelRule,
    /// Plain (authors') or mean-removed cosines.
    #[serde(default)]
    pub centering: Centering,
}

impl DetectorParams {
    /// Short name of the configuration, for reports: `faithful` for the authors' one,
    /// else the differences joined by `+`.
    pub fn variant_name(&self) -> String {
        let mut v = Vec::new();
        if self.window == WindowMode::AllLayers {
            v.push("all-layers".to_string());
        }
        if self.centering == Centering::MeanToken {
            v.push("centered".to_string());
        }
        if self.tau != PAPER_TAU {
            v.push(format!("tau={}", self.tau));
        }
        // Both of the authors' candidate lists (plain and chat template) are faithful.
        if self.bos_candidates != PAPER_BOS_CANDIDATES
            && self.bos_candidates != PAPER_CHAT_BOS_CANDIDATES
        {
            v.push(format!("bos={:?}", self.bos_candidates));
        }
        if self.labels != LabelRule::default() {
            v.push(format!(
                "labels={}/{}",
                self.labels.bos_margin, self.labels.noise_max
            ));
        }
        if v.is_empty() {
            "faithful".into()
        } else {
            v.join("+")
        }
    }
}

impl DetectorParams {
    /// The authors' configuration under a chat template: BOS candidates
    /// [`PAPER_CHAT_BOS_CANDIDATES`], the rest as [`Default`].
    pub fn chat() -> Self {
        Self {
            bos_candidates: PAPER_CHAT_BOS_CANDIDATES.to_vec(),
            ..Self::default()
        }
    }
}

impl Default for DetectorParams {
    fn default() -> Self {
        Self {
            tau: PAPER_TAU,
            bos_candidates: PAPER_BOS_CANDIDATES.to_vec(),
            window: WindowMode::BosNormJumps,
            labels: LabelRule::default(),
            centering: Centering::None,
        }
    }
}

/// Errors of the detector.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DetectError {
    /// τ outside [0, 1].
    #[error("tau must lie in [0, 1], got {0}")]
    Tau(f64),
    /// No BOS candidate was given.
    #[error("no BOS candidate position given")]
    NoCandidate,
    /// A BOS candidate lies outside the sequence.
    #[error("BOS candidate {pos} outside a sequence of {tokens} tokens")]
    Candidate {
        /// Candidate.
        pos: usize,
        /// Sequence length.
        tokens: usize,
    },
}

/// One detected sink position.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Sink {
    /// Position $t > b$.
    pub position: usize,
    /// Flagged layers, increasing.
    pub layers: Vec<usize>,
    /// $\cos(h^l_t, h^l_b)$ at each flagged layer (signed).
    pub cosines: Vec<f64>,
    /// First flagged layer.
    pub creation_layer: usize,
    /// Number of flagged layers.
    pub lifetime: usize,
    /// Label from the lifetime.
    pub label: Label,
}

/// Is the detector informative on this sequence? (module doc, "Validity").
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Validity {
    /// Positions $t > b$.
    pub positions: usize,
    /// Per layer (all $L$): 10 %, 50 %, 90 % quantiles of $|\cos(h^l_t, h^l_b)|$ over $t > b$.
    pub abs_cos_quantiles: Vec<[f64; 3]>,
    /// Per layer: median of $|\cos|$ over the ordinary positions (never flagged; NaN when none).
    pub ordinary_median: Vec<f64>,
    /// Per layer: fraction of the positions $t > b$ flagged there (0 outside the window).
    pub frac_flagged_per_layer: Vec<f64>,
    /// Fraction of the positions $t > b$ flagged at some layer.
    pub frac_flagged: f64,
    /// The saturation rule (module doc).
    pub saturated: bool,
}

/// Result of running the detector on one sequence.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Detection {
    /// Chosen BOS position $b$.
    pub bos: usize,
    /// Scanned layers $[l_{start}, l_{end})$.
    pub window: Range<usize>,
    /// $\lVert h^l_b\rVert$ for every layer.
    pub bos_norms: Vec<f64>,
    /// Number of layers $L$.
    pub layers: usize,
    /// Every flagged position, by increasing position.
    pub sinks: Vec<Sink>,
    /// The BOS's own entry as the authors' code labels it: flagged at every window layer
    /// (or every layer when several candidates are scanned without a window); `None` with a
    /// single candidate and no window, where their code makes no entry.
    pub bos_entry: Option<Sink>,
    /// Whether the detector is informative here.
    pub validity: Validity,
    /// Positions $t > b$ with $|\cos(h^l_t, h^l_b)| > \tau$ at some layer outside the window
    /// and at none inside it: what the window excluded (0 without a window). A run that
    /// reports them says so, since `--no-window` would flag them.
    #[serde(default)]
    pub outside_window: usize,
}

impl Detection {
    /// Sinks with a given label.
    pub fn with_label(&self, label: Label) -> impl Iterator<Item = &Sink> {
        self.sinks.iter().filter(move |s| s.label == label)
    }

    /// Number of sinks of `label` flagged at each layer (length L).
    pub fn count_per_layer(&self, label: Label) -> Vec<usize> {
        let mut c = vec![0; self.layers];
        for s in self.with_label(label) {
            for &l in &s.layers {
                c[l] += 1;
            }
        }
        c
    }
}

/// First index of the maximum (NaN never wins).
fn argmax_first(v: &[f64]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &x) in v.iter().enumerate() {
        if !x.is_nan() && best.is_none_or(|b| x > v[b]) {
            best = Some(i);
        }
    }
    best
}

/// First index of the minimum (NaN never wins).
fn argmin_first(v: &[f64]) -> Option<usize> {
    let neg: Vec<f64> = v.iter().map(|x| -x).collect();
    argmax_first(&neg)
}

/// The scan window from the BOS norms $n_0..n_{L-1}$ (step 2 of the module doc).
///
/// Edge cases the paper's code leaves undefined: with L = 1 the window is the
/// single layer; when the largest rise enters the last layer, the window is
/// that layer alone.
pub fn window_from_norms(norms: &[f64]) -> Range<usize> {
    let l = norms.len();
    if l <= 1 {
        return 0..l;
    }
    let diffs: Vec<f64> = norms.windows(2).map(|w| w[1] - w[0]).collect();
    let Some(amax) = argmax_first(&diffs) else {
        return 0..l;
    };
    let start = amax + 1;
    if start >= diffs.len() {
        return start..l;
    }
    let end = argmin_first(&diffs[start..]).map_or(l, |k| start + k + 1);
    start..end
}

/// Picks the BOS position among the candidates (largest mean norm over layers, first on ties).
pub fn choose_bos<S: Real>(
    h: &HiddenStates<S>,
    candidates: &[usize],
) -> Result<usize, DetectError> {
    match candidates {
        [] => Err(DetectError::NoCandidate),
        _ => {
            if let Some(&pos) = candidates.iter().find(|&&p| p >= h.tokens()) {
                return Err(DetectError::Candidate {
                    pos,
                    tokens: h.tokens(),
                });
            }
            if candidates.len() == 1 {
                return Ok(candidates[0]);
            }
            let means: Vec<f64> = candidates
                .iter()
                .map(|&p| (0..h.layers()).map(|l| h.norm(l, p)).sum::<f64>() / h.layers() as f64)
                .collect();
            Ok(candidates[argmax_first(&means).unwrap_or(0)])
        }
    }
}

/// Runs the detector on one sequence of hidden states.
pub fn detect<S: Real>(h: &HiddenStates<S>, p: &DetectorParams) -> Result<Detection, DetectError> {
    if !(0.0..=1.0).contains(&p.tau) {
        return Err(DetectError::Tau(p.tau));
    }
    let b = choose_bos(h, &p.bos_candidates)?;
    let layers = h.layers();
    let bos_norms: Vec<f64> = (0..layers).map(|l| h.norm(l, b)).collect();
    let window = match p.window {
        WindowMode::BosNormJumps => window_from_norms(&bos_norms),
        WindowMode::AllLayers => 0..layers,
    };
    let tau = p.tau;
    let nt = h.tokens();
    let d = h.dim();
    // Per layer: the mean state over the non-candidate positions (centred variant only).
    let mean_state = |l: usize| -> Option<Vec<f64>> {
        if p.centering == Centering::None {
            return None;
        }
        let mut mu = vec![0.0; d];
        let mut n = 0usize;
        for t in (0..nt).filter(|t| !p.bos_candidates.contains(t)) {
            for (m, &x) in mu.iter_mut().zip(h.state(l, t)) {
                *m += x.to_f64();
            }
            n += 1;
        }
        mu.iter_mut().for_each(|m| *m /= n.max(1) as f64);
        Some(mu)
    };
    // Per layer: cos(h_t, h_b) for t > b (None where a state is zero or not finite).
    let cosines: Vec<Vec<Option<f64>>> = (0..layers)
        .into_par_iter()
        .map(|l| {
            let mu = mean_state(l);
            let hb = h.state(l, b);
            match mu {
                None => {
                    let nb = bos_norms[l];
                    (b + 1..nt)
                        .map(|t| {
                            let (dot, sq) = dot_and_sq(h.state(l, t), hb);
                            (nb > 0.0 && nb.is_finite() && sq > 0.0)
                                .then(|| (dot / (sq.sqrt() * nb)).clamp(-1.0, 1.0))
                        })
                        .collect()
                }
                Some(mu) => {
                    let cb: Vec<f64> = hb.iter().zip(&mu).map(|(&x, m)| x.to_f64() - m).collect();
                    let nb = cb.iter().map(|x| x * x).sum::<f64>().sqrt();
                    (b + 1..nt)
                        .map(|t| {
                            let (mut dot, mut sq) = (0.0, 0.0);
                            for ((&x, m), c) in h.state(l, t).iter().zip(&mu).zip(&cb) {
                                let y = x.to_f64() - m;
                                dot += y * c;
                                sq += y * y;
                            }
                            (nb > 0.0 && nb.is_finite() && sq > 0.0)
                                .then(|| (dot / (sq.sqrt() * nb)).clamp(-1.0, 1.0))
                        })
                        .collect()
                }
            }
        })
        .collect();
    let mut by_pos: BTreeMap<usize, (Vec<usize>, Vec<f64>)> = BTreeMap::new();
    for l in window.clone() {
        for (k, c) in cosines[l].iter().enumerate() {
            if let Some(c) = *c
                && c.abs() > tau
            {
                let e = by_pos.entry(b + 1 + k).or_default();
                e.0.push(l);
                e.1.push(c);
            }
        }
    }
    let sinks: Vec<Sink> = by_pos
        .into_iter()
        .map(|(position, (ls, cosines))| {
            let lifetime = ls.len();
            Sink {
                position,
                creation_layer: ls[0],
                lifetime,
                label: p.labels.label(lifetime, layers),
                layers: ls,
                cosines,
            }
        })
        .collect();
    let bos_layers: Option<Vec<usize>> = match p.window {
        WindowMode::BosNormJumps => Some(window.clone().collect()),
        WindowMode::AllLayers => (p.bos_candidates.len() > 1).then(|| (0..layers).collect()),
    };
    let bos_entry = bos_layers.map(|ls| Sink {
        position: b,
        creation_layer: ls.first().copied().unwrap_or(0),
        lifetime: ls.len(),
        label: p.labels.label(ls.len(), layers),
        cosines: vec![1.0; ls.len()],
        layers: ls,
    });
    let validity = validity(&cosines, &sinks, &window, b, tau);
    let outside_window = (0..nt.saturating_sub(b + 1))
        .filter(|&k| {
            sinks
                .binary_search_by_key(&(b + 1 + k), |s| s.position)
                .is_err()
                && (0..layers)
                    .filter(|l| !window.contains(l))
                    .any(|l| cosines[l][k].is_some_and(|c| c.abs() > tau))
        })
        .count();
    Ok(Detection {
        bos: b,
        window,
        bos_norms,
        layers,
        sinks,
        bos_entry,
        validity,
        outside_window,
    })
}

fn validity(
    cosines: &[Vec<Option<f64>>],
    sinks: &[Sink],
    window: &Range<usize>,
    bos: usize,
    tau: f64,
) -> Validity {
    // Row k of `cosines[l]` is position bos + 1 + k.
    let positions = cosines.first().map_or(0, Vec::len);
    let n = positions.max(1) as f64;
    let flagged: std::collections::BTreeSet<usize> = sinks.iter().map(|s| s.position).collect();
    let mut abs_cos_quantiles = Vec::with_capacity(cosines.len());
    let mut ordinary_median = Vec::with_capacity(cosines.len());
    let mut frac_flagged_per_layer = vec![0.0; cosines.len()];
    for s in sinks {
        for &l in &s.layers {
            frac_flagged_per_layer[l] += 1.0 / n;
        }
    }
    for row in cosines {
        let mut all: Vec<f64> = row.iter().map(|c| c.map_or(0.0, f64::abs)).collect();
        all.sort_by(f64::total_cmp);
        abs_cos_quantiles.push([
            quantile_sorted(&all, 0.1),
            quantile_sorted(&all, 0.5),
            quantile_sorted(&all, 0.9),
        ]);
        let mut ord: Vec<f64> = row
            .iter()
            .enumerate()
            .filter(|(k, _)| !flagged.contains(&(bos + 1 + k)))
            .map(|(_, c)| c.map_or(0.0, f64::abs))
            .collect();
        ord.sort_by(f64::total_cmp);
        ordinary_median.push(quantile_sorted(&ord, 0.5));
    }
    let frac_flagged = flagged.len() as f64 / n;
    let saturated = frac_flagged > SATURATION_FRAC
        || window
            .clone()
            .any(|l| abs_cos_quantiles.get(l).is_some_and(|q| q[1] > tau));
    Validity {
        positions,
        abs_cos_quantiles,
        ordinary_median,
        frac_flagged_per_layer,
        frac_flagged,
        saturated,
    }
}

/// A recurring (creation layer, lifetime) cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Level {
    /// Creation layer.
    pub creation_layer: usize,
    /// Lifetime.
    pub lifetime: usize,
    /// Sinks in the cell.
    pub count: usize,
}

/// Counts of (creation layer, lifetime) cells.
pub fn cell_counts(
    cells: impl IntoIterator<Item = (usize, usize)>,
) -> BTreeMap<(usize, usize), usize> {
    let mut m = BTreeMap::new();
    for c in cells {
        *m.entry(c).or_insert(0) += 1;
    }
    m
}

/// Sink levels: cells holding at least `min_count` sinks, most populated first
/// (ties by creation layer, then lifetime).
pub fn levels(cells: impl IntoIterator<Item = (usize, usize)>, min_count: usize) -> Vec<Level> {
    let mut v: Vec<Level> = cell_counts(cells)
        .into_iter()
        .filter(|&(_, n)| n >= min_count.max(1))
        .map(|((creation_layer, lifetime), count)| Level {
            creation_layer,
            lifetime,
            count,
        })
        .collect();
    v.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.creation_layer.cmp(&b.creation_layer))
            .then(a.lifetime.cmp(&b.lifetime))
    });
    v
}

/// How deterministic the levels are (claim B5).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LevelSummary {
    /// Sinks counted.
    pub sinks: usize,
    /// Distinct cells.
    pub cells: usize,
    /// Recurring cells (levels).
    pub levels: usize,
    /// Fraction of the sinks that lie in a level.
    pub frac_in_levels: f64,
    /// Fraction in the most populated cell.
    pub frac_top_cell: f64,
    /// Shannon entropy of the cell distribution, in bits.
    pub entropy_bits: f64,
}

/// Summarises the cells of a set of sinks.
pub fn level_summary(
    cells: impl IntoIterator<Item = (usize, usize)>,
    min_count: usize,
) -> LevelSummary {
    let counts = cell_counts(cells);
    let n: usize = counts.values().sum();
    let lv: Vec<usize> = counts
        .values()
        .copied()
        .filter(|&c| c >= min_count.max(1))
        .collect();
    let nf = n.max(1) as f64;
    let entropy_bits = -counts
        .values()
        .map(|&c| c as f64 / nf)
        .map(|p| p * p.log2())
        .sum::<f64>();
    LevelSummary {
        sinks: n,
        cells: counts.len(),
        levels: lv.len(),
        frac_in_levels: lv.iter().sum::<usize>() as f64 / nf,
        frac_top_cell: counts.values().copied().max().unwrap_or(0) as f64 / nf,
        entropy_bits: entropy_bits.max(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_flagged_only_outside_the_window_are_counted() {
        // L = 5, T = 5, d = 3, BOS at 0 along e0 with norms (1, 1, 10, 10, 1): window [2, 4).
        // Position 2 aligns with BOS at layer 0 only (outside the window), position 3 at
        // layers 0 and 2 (inside as well: flagged, not counted), the rest never.
        let (l, t, d) = (5, 5, 3);
        let bos_norm = [1.0f32, 1.0, 10.0, 10.0, 1.0];
        let mut v = vec![0f32; l * t * d];
        for (li, &bn) in bos_norm.iter().enumerate() {
            let at = |tt: usize, k: usize| (li * t + tt) * d + k;
            v[at(0, 0)] = bn;
            for tt in 1..t {
                v[at(tt, 1)] = 1.0;
            }
            if li == 0 {
                v[at(2, 1)] = 0.0;
                v[at(2, 0)] = 1.0;
            }
            if li == 0 || li == 2 {
                v[at(3, 1)] = 0.0;
                v[at(3, 0)] = 1.0;
            }
        }
        let h = HiddenStates::new(l, t, d, v).unwrap();
        let p = DetectorParams {
            bos_candidates: vec![0],
            ..Default::default()
        };
        let det = detect(&h, &p).unwrap();
        assert_eq!(det.window, 2..4);
        assert_eq!(
            det.sinks.iter().map(|s| s.position).collect::<Vec<_>>(),
            vec![3]
        );
        assert_eq!(det.outside_window, 1);
        let all = detect(
            &h,
            &DetectorParams {
                window: WindowMode::AllLayers,
                ..p
            },
        )
        .unwrap();
        assert_eq!(all.sinks.len(), 2);
        assert_eq!(all.outside_window, 0);
    }

    #[test]
    fn window_follows_the_formula() {
        // D = (1, 10, 0, -2, -7, 1): argmax 1 -> start 2; argmin over D[2..] at 4 -> end 5.
        let n = [0.0, 1.0, 11.0, 11.0, 9.0, 2.0, 3.0];
        assert_eq!(window_from_norms(&n), 2..5);
        // Largest rise into the last layer: window is that layer.
        assert_eq!(window_from_norms(&[1.0, 1.0, 5.0]), 2..3);
        assert_eq!(window_from_norms(&[3.0]), 0..1);
        // Ties: first index.
        // D = (1, 1, 0, -1, -1): start 1, argmin over D[1..] first at k = 2 -> end 4.
        assert_eq!(window_from_norms(&[0.0, 1.0, 2.0, 2.0, 1.0, 0.0]), 1..4);
    }

    #[test]
    fn labels_follow_the_paper() {
        let r = LabelRule::default();
        assert_eq!(r.label(15, 30), Label::BosSink);
        assert_eq!(r.label(14, 30), Label::Secondary);
        assert_eq!(r.label(5, 30), Label::Secondary);
        assert_eq!(r.label(4, 30), Label::Noise);
        // L = 18: L - 15 = 3, so lifetime 3 is already bos_sink and no secondary exists.
        assert_eq!(r.label(3, 18), Label::BosSink);
        assert_eq!(r.label(2, 18), Label::Noise);
        assert!(
            !r.secondary_possible(18)
                && r.secondary_possible(30)
                && !r.secondary_possible(20)
                && r.secondary_possible(21)
        );
    }

    #[test]
    fn levels_and_summary() {
        let cells = [(5, 7), (5, 7), (5, 7), (9, 6), (9, 6), (3, 5)];
        let lv = levels(cells, 2);
        assert_eq!(
            lv,
            vec![
                Level {
                    creation_layer: 5,
                    lifetime: 7,
                    count: 3
                },
                Level {
                    creation_layer: 9,
                    lifetime: 6,
                    count: 2
                }
            ]
        );
        let s = level_summary(cells, 2);
        assert_eq!((s.sinks, s.cells, s.levels), (6, 3, 2));
        assert!(
            (s.frac_in_levels - 5.0 / 6.0).abs() < 1e-15 && (s.frac_top_cell - 0.5).abs() < 1e-15
        );
        let h = -(0.5f64 * 0.5f64.log2()
            + (1.0 / 3.0) * (1.0f64 / 3.0).log2()
            + (1.0 / 6.0) * (1.0f64 / 6.0).log2());
        assert!((s.entropy_bits - h).abs() < 1e-12);
    }

    #[test]
    fn bad_parameters_are_errors() {
        let h = HiddenStates::<f32>::new(2, 3, 2, vec![1.0; 12]).unwrap();
        let p = DetectorParams {
            tau: 1.5,
            ..Default::default()
        };
        assert_eq!(detect(&h, &p), Err(DetectError::Tau(1.5)));
        let p = DetectorParams {
            bos_candidates: vec![0, 3],
            ..Default::default()
        };
        assert_eq!(
            detect(&h, &p),
            Err(DetectError::Candidate { pos: 3, tokens: 3 })
        );
        let p = DetectorParams {
            bos_candidates: vec![],
            ..Default::default()
        };
        assert_eq!(detect(&h, &p), Err(DetectError::NoCandidate));
    }
}
