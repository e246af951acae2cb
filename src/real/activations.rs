//! Activations dumped elsewhere (`scripts/dump_activations.py`), analysed like a native run.
//!
//! Schema (a safetensors file; f32, f16 or bf16; the schema is stable):
//! - `hidden.{l}` `[T, d]`: residual stream after layer l, l = 0..L−1 (required, contiguous l);
//! - `attn.{l}` `[H, T, T]`: attention probabilities (optional);
//! - `mlp_out.{l}` `[T, d]`: MLP output (optional; carried, not used by the per-layer stats);
//! - `keys.{l}`, `values.{l}` `[H_kv, T, d_head]` (optional);
//! - `tokens` `[T]` (optional, any integer or float dtype).
//!
//! A missing optional tensor only removes the statistics that need it (they become `null`).

use super::RealError;
use super::safetensors::StFile;
use super::stats::{Dims, LayerStats, layer_stats};
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

/// Reads and analyses an activations file.
pub fn analyze_file(path: &Path) -> Result<ActivationsReport, RealError> {
    let st = StFile::open(path)?;
    let names = st.names();
    let n_layer = (0..)
        .take_while(|l| names.iter().any(|n| *n == format!("hidden.{l}")))
        .count();
    if n_layer == 0 {
        return Err(RealError::file(
            path,
            "no `hidden.0` tensor: not an activations file (schema: hidden.{l} [T, d], ...)",
        ));
    }
    if let Some(extra) = names.iter().find(|n| {
        n.strip_prefix("hidden.")
            .and_then(|s| s.parse::<usize>().ok())
            .is_some_and(|l| l >= n_layer)
    }) {
        return Err(RealError::file(
            path,
            format!("`{extra}` present but layers are not contiguous from 0 (only 0..{n_layer})"),
        ));
    }
    let tokens = if names.iter().any(|n| n == "tokens") {
        let (v, s) = st.tensor("tokens")?;
        if s.len() != 1 {
            return Err(RealError::file(
                path,
                format!("`tokens` has shape {s:?}, expected [T]"),
            ));
        }
        Some(v.iter().map(|&x| x as u32).collect::<Vec<_>>())
    } else {
        None
    };
    let mut layers = Vec::with_capacity(n_layer);
    for l in 0..n_layer {
        let (hid, hs) = st.tensor(&format!("hidden.{l}"))?;
        if hs.len() != 2 || hs[0] == 0 {
            return Err(RealError::file(
                path,
                format!("`hidden.{l}` has shape {hs:?}, expected [T, d]"),
            ));
        }
        if let Some(k) = hid.iter().position(|v| !v.is_finite()) {
            return Err(RealError::file(
                path,
                format!("`hidden.{l}` has a non-finite value at index {k}"),
            ));
        }
        let (t, d) = (hs[0], hs[1]);
        if let Some(tok) = &tokens
            && tok.len() != t
        {
            return Err(RealError::file(
                path,
                format!(
                    "`tokens` has {} entries but `hidden.{l}` has T = {t}",
                    tok.len()
                ),
            ));
        }
        let an = format!("attn.{l}");
        let attn = if names.contains(&an) {
            let (a, s) = st.tensor(&an)?;
            if s.len() != 3 || s[1] != t || s[2] != t || s[0] == 0 {
                return Err(RealError::file(
                    path,
                    format!("`{an}` has shape {s:?}, expected [H, {t}, {t}]"),
                ));
            }
            Some((a, s[0]))
        } else {
            None
        };
        let kv = |name: String| -> Result<Option<(Vec<f32>, usize, usize)>, RealError> {
            if !names.contains(&name) {
                return Ok(None);
            }
            let (x, s) = st.tensor(&name)?;
            if s.len() != 3 || s[1] != t || s[0] == 0 || s[2] == 0 {
                return Err(RealError::file(
                    path,
                    format!("`{name}` has shape {s:?}, expected [H_kv, {t}, d_head]"),
                ));
            }
            Ok(Some((heads_to_rows(&x, s[0], t, s[2]), s[0], s[2])))
        };
        let keys = kv(format!("keys.{l}"))?;
        let values = kv(format!("values.{l}"))?;
        let (hk, dh) = keys
            .as_ref()
            .or(values.as_ref())
            .map(|x| (x.1, x.2))
            .unwrap_or((1, 1));
        if let (Some(k), Some(v)) = (&keys, &values)
            && (k.1 != v.1 || k.2 != v.2)
        {
            return Err(RealError::file(
                path,
                format!(
                    "layer {l}: keys [{}, T, {}] and values [{}, T, {}] disagree",
                    k.1, k.2, v.1, v.2
                ),
            ));
        }
        let h = attn.as_ref().map(|a| a.1).unwrap_or(hk);
        if h % hk != 0 {
            return Err(RealError::file(
                path,
                format!("layer {l}: {h} attention heads not a multiple of {hk} kv heads"),
            ));
        }
        let dm = Dims {
            t,
            t_keys: t,
            d,
            h,
            h_kv: hk,
            d_head: dh,
            causal: true,
            window: None,
            pos0: 0,
        };
        layers.push(layer_stats(
            l,
            dm,
            &hid,
            attn.as_ref().map(|a| a.0.as_slice()),
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
