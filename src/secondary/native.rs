//! Secondary sinks on real models, with the native forward pass of
//! [`crate::real`]: greedy generation (KV cache), one capture pass over the
//! whole text into [`Activations`], and the activation-patching experiment
//! (replace a sink's MLP output at its creation layer by an ordinary token's
//! and run the detector again).
//!
//! Conventions: the last layer's hidden state is the final-norm output by default
//! ([`LastLayer::FinalNorm`], as transformers' `hidden_states[-1]` that the authors'
//! code reads); key norms are taken on the keys the attention uses (after the
//! per-head k-norm of Gemma 3, after RoPE, which keeps norms), and, for models with
//! a k-norm, also before it ([`Extras::key_norm_pre_knorm`]). Sink scores are
//! reduced layer by layer during the capture pass, so long sequences never hold the
//! $L \times H \times T^2$ attention tensor.

use super::activations::{Activations, HeadTensor};
use super::detector::{DetectorParams, detect};
use super::hidden::HiddenStates;
use crate::runtime::LoadedModel;
use crate::runtime::RealError;
use crate::runtime::capture::{Capture, Captured};
use crate::runtime::forward::{KvCache, LayerObserver, LayerTensors, linear};
use crate::runtime::pretrained::Pretrained;
use serde::Serialize;

/// Which state stands for the last layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LastLayer {
    /// After the model's final norm (transformers' `hidden_states[-1]`; the authors').
    #[default]
    FinalNorm,
    /// The raw residual stream after the last block.
    Raw,
}

/// Per-layer quantities reduced during the capture pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Extras {
    /// Sink score $\alpha^l_t$ (Gu's importance, mean over heads), `[L][T]`.
    pub sink_scores: Option<Vec<Vec<f64>>>,
    /// Mean over KV heads of the key norm before the per-head k-norm, `[L][T]`
    /// (only for models with a k-norm; elsewhere it equals the key norm).
    pub key_norm_pre_knorm: Option<Vec<Vec<f64>>>,
}

/// Observer computing [`Extras`] layer by layer (one pass without cache).
struct ExtrasObserver {
    scores: bool,
    out: Extras,
}

impl LayerObserver for ExtrasObserver {
    fn layer(&mut self, m: &Pretrained, t: &LayerTensors<'_>) {
        let c = &m.cfg;
        let (n, nk) = (t.t, t.t_keys);
        if self.scores {
            let mut acc = vec![0.0; nk];
            for h in 0..c.n_head {
                let a = &t.attn[h * n * nk..(h + 1) * n * nk];
                let mat = faer::Mat::<f64>::from_fn(n, nk, |i, j| a[i * nk + j] as f64);
                for (s, v) in acc.iter_mut().zip(crate::patterns::gu_alpha(mat.as_ref())) {
                    *s += v / c.n_head as f64;
                }
            }
            self.out.sink_scores.get_or_insert_with(Vec::new).push(acc);
        }
        let ly = &m.layers[t.layer];
        if ly.k_norm.is_some() {
            let k = linear(t.attn_in, n, &ly.wk);
            let (hk, dh) = (c.n_kv_head, c.head_dim);
            let v: Vec<f64> = (0..n)
                .map(|i| {
                    (0..hk)
                        .map(|h| {
                            k[i * hk * dh + h * dh..i * hk * dh + (h + 1) * dh]
                                .iter()
                                .map(|&x| (x as f64) * (x as f64))
                                .sum::<f64>()
                                .sqrt()
                        })
                        .sum::<f64>()
                        / hk as f64
                })
                .collect();
            self.out
                .key_norm_pre_knorm
                .get_or_insert_with(Vec::new)
                .push(v);
        }
    }
}

/// Calls `f(tokens done)` every `every` generated tokens (counted at layer 0).
pub struct GenProgress<'a> {
    /// Prompt length (the first layer-0 call covers it).
    pub prompt: usize,
    /// Report period in tokens.
    pub every: usize,
    /// The callback.
    pub f: &'a mut dyn FnMut(usize),
    done: usize,
}

impl<'a> GenProgress<'a> {
    /// A progress observer.
    pub fn new(prompt: usize, every: usize, f: &'a mut dyn FnMut(usize)) -> Self {
        Self {
            prompt,
            every: every.max(1),
            f,
            done: 0,
        }
    }
}

impl LayerObserver for GenProgress<'_> {
    fn layer(&mut self, _: &Pretrained, t: &LayerTensors<'_>) {
        if t.layer == 0 && t.pos0 >= self.prompt {
            self.done += t.t;
            if self.done.is_multiple_of(self.every) {
                (self.f)(self.done);
            }
        }
    }

    fn wants_layer_maps(&self) -> bool {
        false
    }
}

/// Greedy continuation with a progress callback every `every` tokens.
pub fn generate_with_progress(
    lm: &LoadedModel,
    prompt: &[u32],
    n_new: usize,
    every: usize,
    f: &mut dyn FnMut(usize),
) -> Result<Vec<u32>, NativeError> {
    let mut obs = GenProgress::new(prompt.len(), every, f);
    Ok(lm.model.generate_greedy(prompt, n_new, &mut obs)?)
}

fn apply_last(m: &Pretrained, hidden: &mut [f32], nl: usize, t: usize, last: LastLayer) {
    let d = m.cfg.d_model;
    if let (LastLayer::FinalNorm, Some(n)) = (last, &m.final_norm) {
        n.apply(&mut hidden[(nl - 1) * t * d..nl * t * d]);
    }
}

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

/// A vector added to one position's MLP output at one layer. The MLP output is the last term
/// added to the residual stream in a block, so this is
/// $h^{l}\_{pos} \leftarrow h^{l}\_{pos} + \delta$ after block $l$; the later blocks then run
/// on the changed stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Addition {
    /// The block $l$.
    pub layer: usize,
    /// The position.
    pub position: usize,
    /// $\delta$, length $d$.
    pub delta: Vec<f32>,
}

/// One forward pass over `tokens`, capturing hidden states (the last one as `last`
/// says), MLP outputs, keys, values and (when `scores`) the sink scores of every layer.
pub fn capture(
    lm: &LoadedModel,
    tokens: &[u32],
    scores: bool,
    last: LastLayer,
) -> Result<(Activations, Extras), NativeError> {
    capture_with(lm, tokens, scores, last, None)
}

/// [`capture`] with an [`Addition`] to one MLP output (the captured hidden state and MLP
/// output of that layer and position include it). `None` is the model's own forward pass.
pub fn capture_with(
    lm: &LoadedModel,
    tokens: &[u32],
    scores: bool,
    last: LastLayer,
    add: Option<&Addition>,
) -> Result<(Activations, Extras), NativeError> {
    let m = &lm.model;
    let c = &m.cfg;
    let what = Capture {
        hidden: true,
        mlp_out: true,
        qkv: true,
        ..Capture::default()
    };
    let attn = false;
    let mut obs = (
        Captured::new(what),
        ExtrasObserver {
            scores,
            out: Extras::default(),
        },
    );
    let (nl, t, d) = (c.n_layer, tokens.len(), c.d_model);
    match add {
        None => {
            m.forward(tokens, &mut obs, None)?;
        }
        Some(a) => {
            if a.layer >= nl || a.position >= t || a.delta.len() != d {
                return Err(NativeError::Capture(format!(
                    "addition at layer {} position {} (length {}) outside L = {nl}, T = {t}, d = {d}",
                    a.layer,
                    a.position,
                    a.delta.len()
                )));
            }
            let mut cache = KvCache {
                k: vec![Vec::new(); nl],
                v: vec![Vec::new(); nl],
                len: 0,
                ..KvCache::default()
            };
            let mut x = m.embed(tokens, 0)?;
            for l in 0..nl {
                x = m.layer_forward(l, &x, 0, &mut cache, &mut obs, None, false)?;
                if l == a.layer {
                    for (xv, dv) in x[a.position * d..(a.position + 1) * d]
                        .iter_mut()
                        .zip(&a.delta)
                    {
                        *xv += dv;
                    }
                }
            }
        }
    }
    let (cap, ex) = (obs.0, obs.1.out);
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
    if let Some(a) = add {
        // The observer saw block `a.layer` before the addition.
        let at = (a.layer * t + a.position) * d;
        for ((h, mo), dv) in hidden[at..at + d]
            .iter_mut()
            .zip(&mut mlp[at..at + d])
            .zip(&a.delta)
        {
            *h += dv;
            *mo += dv;
        }
    }
    apply_last(m, &mut hidden, nl, t, last);
    let shape = |e: super::hidden::ShapeError| NativeError::Capture(e.to_string());
    let act = Activations {
        hidden: HiddenStates::new(nl, t, d, hidden).map_err(shape)?,
        attn: attn.then_some(att),
        mlp_out: Some(HiddenStates::new(nl, t, d, mlp).map_err(shape)?),
        keys: Some(keys),
        values: Some(values),
        tokens: Some(tokens.iter().map(|&x| x as i64).collect()),
        metadata: [("model".to_string(), lm.path.display().to_string())].into(),
    };
    Ok((act, ex))
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
/// position, so the patch is $h^{l_c}\_{pos} \leftarrow h^{l_c}\_{pos} - m_{pos} + m_{donor}$,
/// after which the remaining layers run normally.
pub fn patched_hidden(
    lm: &LoadedModel,
    tokens: &[u32],
    act: &Activations,
    pos: usize,
    donor: usize,
    lc: usize,
    last: LastLayer,
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
        ..KvCache::default()
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
    apply_last(m, &mut hidden, nl, t, last);
    HiddenStates::new(nl, t, d, hidden).map_err(|e| NativeError::Capture(e.to_string()))
}

/// The patching experiment on every sink of `act` whose label is in `labels`:
/// the donor is the nearest ordinary position (never flagged, not the BOS).
#[allow(clippy::too_many_arguments)]
pub fn patch_sinks(
    lm: &LoadedModel,
    tokens: &[u32],
    act: &Activations,
    p: &DetectorParams,
    labels: &[super::detector::Label],
    sequence: usize,
    max_sinks: usize,
    last: LastLayer,
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
        let h = patched_hidden(lm, tokens, act, s.position, donor, s.creation_layer, last)?;
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
