//! A1 on real models (THEORY §3): at each layer, are the real queries in an open half-space, and
//! is the BOS (position-0) key separable from the other keys?
//!
//! The embeddings are the vectors the attention logits are bilinear in: the normed residual
//! stream `a_i = N₁(x_i)` entering the layer (post-norm BERT: `x_i`). Queries Q = {a_i : i ≥ 1},
//! non-sink keys K = {a_j : j ≥ 1}, sink s = a_0. "With biases" homogenises (appends a constant
//! coordinate 1), which makes (a) hold for free (THEORY §3); models with q/k biases are judged
//! with it, the others without. (RoPE makes the real logits position-dependent; the theorem is
//! about the existence of one position-free W and is applied to the embeddings as such.)
//!
//! Also the empirical sufficient condition (the corollary): cos(s, a_i) < 0 for every query and
//! ≤ 0 for every key makes `W = −c·s sᵀ` a witness; its truth and the largest cosine are reported.

use crate::runtime::RealError;
use crate::runtime::capture::{Capture, Captured};
use crate::runtime::model::Pretrained;

/// The A1 inputs of one layer (f64 rows).
#[derive(Debug, Clone)]
pub struct A1Inputs {
    /// Layer.
    pub layer: usize,
    /// Queries a_i, i ≥ 1.
    pub queries: Vec<Vec<f64>>,
    /// Non-sink keys a_j, j ≥ 1.
    pub keys: Vec<Vec<f64>>,
    /// Sink key a_0.
    pub sink: Vec<f64>,
}

/// Corollary check of one layer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct A1Corollary {
    /// Layer.
    pub layer: usize,
    /// max_{i≥1} cos(s, a_i).
    pub max_cos: f64,
    /// Whether all cosines are < 0 (then W = −c s sᵀ is a witness).
    pub holds: bool,
    /// Null control: the fraction of ordinary tokens m ≥ 1 for which every cos(a_m, a_i) < 0
    /// (i ≠ m) — how often the condition holds for a token that is not the sink.
    pub null_rate: f64,
}

/// Collects the A1 inputs of every layer on `tokens`.
pub fn inputs(m: &Pretrained, tokens: &[u32]) -> Result<Vec<A1Inputs>, RealError> {
    if tokens.len() < 2 {
        return Err(RealError::Input("A1 needs at least 2 tokens".into()));
    }
    let mut cap = Captured::new(Capture {
        hidden_in: true,
        ..Capture::default()
    });
    m.forward(tokens, &mut cap, None)?;
    Ok(inputs_from(m, &cap, tokens.len()))
}

/// The A1 inputs from a capture holding `hidden_in` of every layer.
pub fn inputs_from(m: &Pretrained, cap: &Captured, t: usize) -> Vec<A1Inputs> {
    let d = m.cfg.d_model;
    m.layers
        .iter()
        .enumerate()
        .map(|(l, ly)| {
            let mut a = cap.layers[l].hidden_in.clone().unwrap_or_default();
            if let Some(n) = &ly.attn_norm {
                n.apply(&mut a);
            }
            let row = |i: usize| {
                a[i * d..(i + 1) * d]
                    .iter()
                    .map(|&v| v as f64)
                    .collect::<Vec<f64>>()
            };
            let rest: Vec<Vec<f64>> = (1..t).map(row).collect();
            A1Inputs {
                layer: l,
                queries: rest.clone(),
                keys: rest,
                sink: row(0),
            }
        })
        .collect()
}

/// The corollary's sufficient condition on one layer.
pub fn corollary(x: &A1Inputs) -> A1Corollary {
    let max_cos = x
        .queries
        .iter()
        .map(|q| crate::linalg::cosine(&x.sink, q).unwrap_or(0.0))
        .fold(f64::NEG_INFINITY, f64::max);
    let all: Vec<&Vec<f64>> = std::iter::once(&x.sink).chain(&x.queries).collect();
    let cos = |a: &[f64], b: &[f64]| crate::linalg::cosine(a, b).unwrap_or(0.0);
    let passing = (1..all.len())
        .filter(|&m| {
            (0..all.len())
                .filter(|&i| i != m)
                .all(|i| cos(all[m], all[i]) < 0.0)
        })
        .count();
    A1Corollary {
        layer: x.layer,
        max_cos,
        // With no token besides the sink the condition is untestable, not vacuously true.
        holds: !x.queries.is_empty() && max_cos < 0.0,
        null_rate: passing as f64 / (all.len() - 1).max(1) as f64,
    }
}

/// Appends the constant coordinate 1 (the homogenisation of q/k biases).
pub fn homogenise(v: &[f64]) -> Vec<f64> {
    let mut o = v.to_vec();
    o.push(1.0);
    o
}

/// A1 verdict of one layer through `geometry` (THEORY §3), with its certificate re-verified.
#[derive(Debug, Clone, serde::Serialize)]
pub struct A1Verdict {
    /// Layer.
    pub layer: usize,
    /// Homogenised (q/k biases) or not.
    pub biased: bool,
    /// (a) the queries lie in an open half-space.
    pub queries_in_half_space: bool,
    /// (b) the sink is strictly separable from the other keys.
    pub sink_separable: bool,
    /// A witness W = c·a bᵀ (ε = [`A1_EPS`]) exists; its cost ‖W‖_F = ‖W‖_* when it does.
    pub witness_cost: Option<f64>,
    /// The certificate (witness attention or convex weights) checked independently of the solver.
    pub certificate_verified: bool,
    /// Number of queries and the embedding dimension (with T−1 ≤ d generic points (a) and (b)
    /// hold trivially: the verdict says something only for T − 1 > d).
    pub n_points: usize,
    /// Embedding dimension (after homogenisation).
    pub dim: usize,
    /// Null control of (b): ordinary keys in the sink's place ([`super::head_space::separation_test`],
    /// [`NULL_DRAWS`] draws); None when the solver was inconclusive.
    pub null: Option<super::head_space::SeparationTest>,
}

/// Ordinary tokens tried in the sink's place per layer.
pub const NULL_DRAWS: usize = 6;

/// The ε of the witness (sink mass ≥ 1 − ε on every query).
pub const A1_EPS: f64 = 0.01;

/// Runs the half-space verdict on one layer's inputs.
pub fn verdict(x: &A1Inputs, biased: bool) -> Result<A1Verdict, RealError> {
    use crate::geometry::{Verdict, half_space_verdict_rows, homogenize};
    let (q, k, s) = if biased {
        let q: Vec<&[f64]> = x.queries.iter().map(Vec::as_slice).collect();
        let k: Vec<&[f64]> = x.keys.iter().map(Vec::as_slice).collect();
        (homogenize(&q), homogenize(&k), homogenise(&x.sink))
    } else {
        (x.queries.clone(), x.keys.clone(), x.sink.clone())
    };
    let qs: Vec<&[f64]> = q.iter().map(Vec::as_slice).collect();
    let ks: Vec<&[f64]> = k.iter().map(Vec::as_slice).collect();
    let v = half_space_verdict_rows(&qs, &s, &ks, A1_EPS)
        .map_err(|e| RealError::Input(format!("layer {}: half-space verdict: {e}", x.layer)))?;
    Ok(A1Verdict {
        layer: x.layer,
        biased,
        queries_in_half_space: !v.queries_fail(),
        sink_separable: !v.sink_fails(),
        witness_cost: match &v {
            Verdict::Representable(w) => Some(w.cost()),
            Verdict::NotRepresentable(_) => None,
        },
        certificate_verified: v.verify(&qs, &s, &ks),
        n_points: qs.len(),
        dim: s.len(),
        null: super::head_space::separation_test(&k, &s, NULL_DRAWS, 14 ^ x.layer as u64),
    })
}
