//! The secondary-sink detector of paper B (Wong et al. 2025, *On the Existence
//! and Behaviour of Secondary Attention Sinks*, arXiv:2512.22213), as its
//! public code does it (THEORY.md §8):
//!
//! 1. **BOS.** $b$ is the single candidate, or among several candidates the one
//!    with the largest mean norm $\frac1L\sum_l \|h^l_p\|$ (first on ties).
//! 2. **Window.** $n_l = \|h^l_b\|$, $D_l = n_{l+1}-n_l$ ($l = 0..L-2$);
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

use super::hidden::{HiddenStates, Scalar, dot_and_sq};
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

/// Which layers the detector scans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
pub enum WindowMode {
    /// The window between the largest rise and the following largest drop of the BOS norm.
    #[default]
    BosNormJumps,
    /// Every layer (the no-window variant).
    AllLayers,
}

/// Label rule: thresholds on the lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DetectorParams {
    /// Cosine threshold τ (flag iff |cos| > τ).
    pub tau: f64,
    /// Candidate BOS positions.
    pub bos_candidates: Vec<usize>,
    /// Which layers to scan.
    pub window: WindowMode,
    /// Lifetime → label rule.
    pub labels: LabelRule,
}

impl Default for DetectorParams {
    fn default() -> Self {
        Self {
            tau: PAPER_TAU,
            bos_candidates: vec![0],
            window: WindowMode::BosNormJumps,
            labels: LabelRule::default(),
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
#[derive(Clone, Debug, PartialEq, Serialize)]
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

/// Result of running the detector on one sequence.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Detection {
    /// Chosen BOS position $b$.
    pub bos: usize,
    /// Scanned layers $[l_{start}, l_{end})$.
    pub window: Range<usize>,
    /// $\|h^l_b\|$ for every layer.
    pub bos_norms: Vec<f64>,
    /// Number of layers $L$.
    pub layers: usize,
    /// Every flagged position, by increasing position.
    pub sinks: Vec<Sink>,
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
pub fn choose_bos<S: Scalar>(
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
pub fn detect<S: Scalar>(
    h: &HiddenStates<S>,
    p: &DetectorParams,
) -> Result<Detection, DetectError> {
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
    // Per scanned layer: the flagged (position, cosine) pairs.
    let flags: Vec<(usize, Vec<(usize, f64)>)> = window
        .clone()
        .into_par_iter()
        .map(|l| {
            let hb = h.state(l, b);
            let nb = bos_norms[l];
            let mut out = Vec::new();
            if nb > 0.0 && nb.is_finite() {
                for t in b + 1..h.tokens() {
                    let (dot, sq) = dot_and_sq(h.state(l, t), hb);
                    if sq > 0.0 {
                        let c = dot / (sq.sqrt() * nb);
                        if c.abs() > tau {
                            out.push((t, c.clamp(-1.0, 1.0)));
                        }
                    }
                }
            }
            (l, out)
        })
        .collect();
    let mut by_pos: BTreeMap<usize, (Vec<usize>, Vec<f64>)> = BTreeMap::new();
    for (l, v) in flags {
        for (t, c) in v {
            let e = by_pos.entry(t).or_default();
            e.0.push(l);
            e.1.push(c);
        }
    }
    let sinks = by_pos
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
    Ok(Detection {
        bos: b,
        window,
        bos_norms,
        layers,
        sinks,
    })
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
