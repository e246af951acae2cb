//! Activations dumped elsewhere (`scripts/dump_activations.py`), analysed like a native run.
//!
//! Schema (a safetensors file; f32, f16 or bf16; the schema is stable):
//! - `hidden.{l}` `[T, d]`: residual stream after layer l, l = 0..L−1 (required, contiguous l);
//! - `attn.{l}` `[H, T, T]`: attention probabilities (optional);
//! - `mlp_out.{l}` `[T, d]`: MLP output (optional; carried, not used by the per-layer stats);
//! - `keys.{l}`, `values.{l}` `[H_kv, T, d_head]` (optional);
//! - `tokens` `[T]` (optional, any integer or float dtype);
//! - metadata `causal`, `sliding_window`, `learned_sinks` (optional: how the model attends,
//!   [`crate::runtime::activation_file::AttentionLayout`]; absent, a causal model with full
//!   windows and no learned sinks).
//!
//! A missing optional tensor only removes the statistics that need it (they become `null`).

use super::stats::{Dims, LayerStats, layer_stats};
use crate::runtime::RealError;
use std::path::Path;

/// The statistics of an activations file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ActivationsReport {
    /// The file.
    pub file: String,
    /// Token ids, when stored.
    pub tokens: Option<Vec<u32>>,
    /// Per layer.
    pub layers: Vec<LayerStats>,
}

/// `[H_kv, T, d_head]` → `[T, H_kv·d_head]`.
fn heads_to_rows(x: &[f32], hk: usize, t: usize, dh: usize) -> Vec<f32> {
    let mut o = vec![0f32; x.len()];
    for g in 0..hk {
        for i in 0..t {
            o[i * hk * dh + g * dh..i * hk * dh + (g + 1) * dh]
                .copy_from_slice(&x[(g * t + i) * dh..(g * t + i + 1) * dh]);
        }
    }
    o
}

/// Reads and analyses an activations file (parsed by the crate's one schema reader,
/// [`crate::runtime::activation_file::Activations`]).
pub fn analyze_file(path: &Path) -> Result<ActivationsReport, RealError> {
    use crate::runtime::activation_file::{ActivationError, Activations, HeadTensor};
    let a = Activations::read(path).map_err(|e| match e {
        ActivationError::Missing(n) if n == "hidden.0" => RealError::file(
            path,
            "no `hidden.0` tensor: not an activations file (schema: hidden.{l} [T, d], ...)",
        ),
        e => RealError::file(path, e.to_string()),
    })?;
    let (n_layer, t, d) = (a.hidden.layers(), a.hidden.tokens(), a.hidden.dim());
    let layout = a
        .layout()
        .map_err(|e| RealError::file(path, e.to_string()))?;
    let tokens = a
        .tokens
        .as_ref()
        .map(|v| v.iter().map(|&x| x as u32).collect::<Vec<_>>());
    let kv = |x: &Option<Vec<HeadTensor>>, l: usize| {
        x.as_ref().map(|v| {
            let h = &v[l];
            (
                heads_to_rows(&h.data, h.heads, t, h.width),
                h.heads,
                h.width,
            )
        })
    };
    let mut layers = Vec::with_capacity(n_layer);
    for l in 0..n_layer {
        let hid = &a.hidden.data()[l * t * d..(l + 1) * t * d];
        let attn = a.attn.as_ref().map(|v| (&v[l].data, v[l].heads));
        let (keys, values) = (kv(&a.keys, l), kv(&a.values, l));
        let (hk, dh) = keys
            .as_ref()
            .or(values.as_ref())
            .map(|x| (x.1, x.2))
            .unwrap_or((1, 1));
        let h = attn.as_ref().map(|a| a.1).unwrap_or(hk);
        let dm = Dims {
            t,
            t_keys: t,
            d,
            h,
            h_kv: hk,
            d_head: dh,
            causal: layout.causal,
            window: layout.windows[l],
            pos0: 0,
            learned_sink: layout.learned_sinks,
        };
        layers.push(layer_stats(
            l,
            dm,
            hid,
            attn.map(|a| a.0.as_slice()),
            keys.as_ref().map(|k| k.0.as_slice()),
            values.as_ref().map(|v| v.0.as_slice()),
        ));
    }
    Ok(ActivationsReport {
        file: path.display().to_string(),
        tokens,
        layers,
    })
}
