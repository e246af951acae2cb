//! Secondary sinks on real models, with the native forward pass of
//! [`crate::real`]: greedy generation (KV cache), one capture pass over the
//! whole text into [`Activations`], and the activation-patching experiment
//! (replace a sink's MLP output at its creation layer by an ordinary token's
//! and run the detector again).

use super::activations::{Activations, HeadTensor};
use super::detector::{DetectorParams, detect};
use super::hidden::HiddenStates;
use crate::real::LoadedModel;
use crate::real::RealError;
use crate::real::capture::{Capture, Captured};
use crate::real::forward::KvCache;
use serde::Serialize;

/// Errors of the real-model runs.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// From the real-model stack.
    #[error(transparent)]
    Real(#[from] RealError),
    /// From the detector.
    #[error(transparent)]
    Detect(#[from] super::detector::DetectError),
    /// A capture came back incomplete.
    #[error("capture: {0}")]
    Capture(String),
}

/// Greedy continuation of `prompt` by `n_new` tokens (KV cache; the model's own routine).
pub fn generate(lm: &LoadedModel, prompt: &[u32], n_new: usize) -> Result<Vec<u32>, NativeError> {
    Ok(lm.model.generate_greedy(prompt, n_new, &mut ())?)
}

/// `[T, H·X]` rows → `[H, T, X]`.
fn rows_to_heads(x: &[f32], heads: usize, t: usize, width: usize) -> HeadTensor {
    let mut data = vec![0f32; x.len()];
    for i in 0..t {
        for h in 0..heads {
            let src = &x[i * heads * width + h * width..i * heads * width + (h + 1) * width];
            data[(h * t + i) * width..(h * t + i + 1) * width].copy_from_slice(src);
        }
    }
    HeadTensor {
        heads,
        tokens: t,
        width,
        data,
    }
}

/// One forward pass over `tokens`, capturing hidden states, MLP outputs, keys,
/// values and (when `attn`) the attention probabilities of every layer.
pub fn capture(lm: &LoadedModel, tokens: &[u32], attn: bool) -> Result<Activations, NativeError> {
    let m = &lm.model;
    let c = &m.cfg;
    let what = Capture {
        hidden: true,
        mlp_out: true,
        attn,
        qkv: true,
        ..Capture::default()
    };
    let mut cap = Captured::new(what);
    m.forward(tokens, &mut cap, None)?;
    let (nl, t, d) = (c.n_layer, tokens.len(), c.d_model);
    let miss = |w: &str, l: usize| NativeError::Capture(format!("no {w} for layer {l}"));
    let mut hidden = Vec::with_capacity(nl * t * d);
    let mut mlp = Vec::with_capacity(nl * t * d);
    let mut att = Vec::new();
    let mut keys = Vec::new();
    let mut values = Vec::new();
    for l in 0..nl {
        let lc = cap.layers.get(l).ok_or_else(|| miss("capture", l))?;
        hidden.extend_from_slice(lc.hidden.as_deref().ok_or_else(|| miss("hidden", l))?);
        mlp.extend_from_slice(lc.mlp_out.as_deref().ok_or_else(|| miss("mlp_out", l))?);
        if attn {
            let a = lc.attn.clone().ok_or_else(|| miss("attn", l))?;
            att.push(HeadTensor {
                heads: c.n_head,
                tokens: t,
                width: t,
                data: a,
            });
        }
        keys.push(rows_to_heads(
            lc.k.as_deref().ok_or_else(|| miss("keys", l))?,
            c.n_kv_head,
            t,
            c.head_dim,
        ));
        values.push(rows_to_heads(
            lc.v.as_deref().ok_or_else(|| miss("values", l))?,
            c.n_kv_head,
            t,
            c.head_dim,
        ));
    }
    let shape = |e: super::hidden::ShapeError| NativeError::Capture(e.to_string());
    Ok(Activations {
        hidden: HiddenStates::new(nl, t, d, hidden).map_err(shape)?,
        attn: attn.then_some(att),
        mlp_out: Some(HiddenStates::new(nl, t, d, mlp).map_err(shape)?),
        keys: Some(keys),
        values: Some(values),
        tokens: Some(tokens.iter().map(|&x| x as i64).collect()),
        metadata: [("model".to_string(), lm.path.display().to_string())].into(),
    })
}

/// Outcome of patching one sink.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PatchOutcome {
    /// Sequence index.
    pub sequence: usize,
    /// The sink's position.
    pub position: usize,
    /// The ordinary token whose MLP output was used.
    pub donor: usize,
    /// Creation layer (where the patch is applied).
    pub creation_layer: usize,
    /// Lifetime before the patch.
    pub lifetime_before: usize,
    /// Lifetime after the patch (0: the sink disappeared).
    pub lifetime_after: usize,
    /// ‖MLP output‖ of the sink and of the donor at the creation layer.
    pub mlp_norms: (f64, f64),
}

/// Re-runs `tokens` with the MLP output of `pos` at layer `lc` replaced by that of
/// `donor` (both from `act`); returns the patched hidden states.
///
/// The MLP output enters the residual stream only by addition at its own
/// position, so the patch is $h^{l_c}_{pos} \leftarrow h^{l_c}_{pos} - m_{pos} + m_{donor}$,
/// after which the remaining layers run normally.
pub fn patched_hidden(
    lm: &LoadedModel,
    tokens: &[u32],
    act: &Activations,
    pos: usize,
    donor: usize,
    lc: usize,
) -> Result<HiddenStates<f32>, NativeError> {
    let m = &lm.model;
    let (nl, d, t) = (m.cfg.n_layer, m.cfg.d_model, tokens.len());
    let mlp = act
        .mlp_out
        .as_ref()
        .ok_or_else(|| NativeError::Capture("no mlp_out".into()))?;
    let mut cache = KvCache {
        k: vec![Vec::new(); nl],
        v: vec![Vec::new(); nl],
        len: 0,
    };
    let mut x = m.embed(tokens, 0)?;
    let mut hidden = Vec::with_capacity(nl * t * d);
    for l in 0..nl {
        x = m.layer_forward(l, &x, 0, &mut cache, &mut (), None, false)?;
        if l == lc {
            let (mp, md) = (mlp.state(lc, pos), mlp.state(lc, donor));
            for ((xv, a), b) in x[pos * d..(pos + 1) * d].iter_mut().zip(mp).zip(md) {
                *xv += b - a;
            }
        }
        hidden.extend_from_slice(&x);
    }
    HiddenStates::new(nl, t, d, hidden).map_err(|e| NativeError::Capture(e.to_string()))
}

/// The patching experiment on every sink of `act` whose label is in `labels`:
/// the donor is the nearest ordinary position (never flagged, not the BOS).
pub fn patch_sinks(
    lm: &LoadedModel,
    tokens: &[u32],
    act: &Activations,
    p: &DetectorParams,
    labels: &[super::detector::Label],
    sequence: usize,
    max_sinks: usize,
) -> Result<Vec<PatchOutcome>, NativeError> {
    let det = detect(&act.hidden, p)?;
    let flagged: Vec<bool> = (0..tokens.len())
        .map(|t| t == det.bos || det.sinks.iter().any(|s| s.position == t))
        .collect();
    let mlp = act
        .mlp_out
        .as_ref()
        .ok_or_else(|| NativeError::Capture("no mlp_out".into()))?;
    let mut out = Vec::new();
    for s in det
        .sinks
        .iter()
        .filter(|s| labels.contains(&s.label))
        .take(max_sinks)
    {
        let donor = (1..tokens.len())
            .flat_map(|k| [s.position.checked_sub(k), Some(s.position + k)])
            .flatten()
            .find(|&o| o > det.bos && o < tokens.len() && !flagged[o]);
        let Some(donor) = donor else { continue };
        let h = patched_hidden(lm, tokens, act, s.position, donor, s.creation_layer)?;
        let after = detect(&h, p)?;
        let life = after
            .sinks
            .iter()
            .find(|x| x.position == s.position)
            .map_or(0, |x| x.lifetime);
        let nrm = |v: &[f32]| {
            v.iter()
                .map(|&x| (x as f64) * (x as f64))
                .sum::<f64>()
                .sqrt()
        };
        out.push(PatchOutcome {
            sequence,
            position: s.position,
            donor,
            creation_layer: s.creation_layer,
            lifetime_before: s.lifetime,
            lifetime_after: life,
            mlp_norms: (
                nrm(mlp.state(s.creation_layer, s.position)),
                nrm(mlp.state(s.creation_layer, donor)),
            ),
        });
    }
    Ok(out)
}
