//! Selective capture: a [`Capture`] says which tensors to keep; the [`Captured`] observer copies
//! exactly those out of each layer during the forward pass (appending rows across incremental
//! decoding steps).
//!
//! ```no_run
//! # use sinklab::runtime::{capture::{Capture, Captured}, load};
//! let lm = load(std::path::Path::new("model.gguf")).unwrap();
//! let mut cap = Captured::new(Capture { hidden: true, mlp_out: true, kv_norms: true, ..Capture::default() });
//! lm.model.forward(&[1, 2, 3], &mut cap, None).unwrap();
//! let h3 = cap.hidden(3).unwrap(); // [T, d] residual stream after layer 3
//! ```

use super::forward::{LayerObserver, LayerTensors};
use super::pretrained::Pretrained;

/// Which tensors to keep, per layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capture {
    /// Residual stream after the layer, `[T, d]`.
    pub hidden: bool,
    /// Residual stream entering the layer, `[T, d]`.
    pub hidden_in: bool,
    /// Residual stream between attention and MLP, `[T, d]`.
    pub resid_mid: bool,
    /// Attention-block output added to the residual, `[T, d]`.
    pub attn_out: bool,
    /// MLP output added to the residual, `[T, d]`.
    pub mlp_out: bool,
    /// Full attention probabilities `[H, T, T]` (O(L·H·T²) memory: ask only for short inputs).
    pub attn: bool,
    /// Queries `[T, H·d_head]`, keys and values `[T, H_kv·d_head]` (after RoPE).
    pub qkv: bool,
    /// Head outputs before W_O, `[T, H·d_head]`.
    pub head_out: bool,
    /// Key and value norms per kv head and position, `[H_kv, T]`.
    pub kv_norms: bool,
}

impl Capture {
    /// Everything.
    pub fn all() -> Self {
        Capture {
            hidden: true,
            hidden_in: true,
            resid_mid: true,
            attn_out: true,
            mlp_out: true,
            attn: true,
            qkv: true,
            head_out: true,
            kv_norms: true,
        }
    }
}

/// What was kept of one layer (row-major; `None` where not asked for).
#[derive(Debug, Clone, Default)]
pub struct LayerCapture {
    /// See [`Capture::hidden`].
    pub hidden: Option<Vec<f32>>,
    /// See [`Capture::hidden_in`].
    pub hidden_in: Option<Vec<f32>>,
    /// See [`Capture::resid_mid`].
    pub resid_mid: Option<Vec<f32>>,
    /// See [`Capture::attn_out`].
    pub attn_out: Option<Vec<f32>>,
    /// See [`Capture::mlp_out`].
    pub mlp_out: Option<Vec<f32>>,
    /// See [`Capture::attn`] (first call only; `[H, T_n, T_k]`).
    pub attn: Option<Vec<f32>>,
    /// Queries.
    pub q: Option<Vec<f32>>,
    /// Keys (all positions seen so far).
    pub k: Option<Vec<f32>>,
    /// Values (all positions seen so far).
    pub v: Option<Vec<f32>>,
    /// See [`Capture::head_out`].
    pub head_out: Option<Vec<f32>>,
    /// ‖k‖ per kv head and position, `[H_kv, T]`.
    pub k_norms: Option<Vec<Vec<f32>>>,
    /// ‖v‖ per kv head and position, `[H_kv, T]`.
    pub v_norms: Option<Vec<Vec<f32>>>,
}

/// Observer that keeps what a [`Capture`] asks for.
#[derive(Debug, Clone, Default)]
pub struct Captured {
    /// The request.
    pub what: Capture,
    /// Per layer.
    pub layers: Vec<LayerCapture>,
    /// Positions seen.
    pub t: usize,
    /// Residual width.
    pub d: usize,
}

fn keep(slot: &mut Option<Vec<f32>>, data: &[f32]) {
    match slot {
        Some(v) => v.extend_from_slice(data),
        None => *slot = Some(data.to_vec()),
    }
}

fn norms(x: &[f32], t: usize, heads: usize, dh: usize) -> Vec<Vec<f32>> {
    (0..heads)
        .map(|h| {
            (0..t)
                .map(|i| {
                    x[i * heads * dh + h * dh..i * heads * dh + (h + 1) * dh]
                        .iter()
                        .map(|v| v * v)
                        .sum::<f32>()
                        .sqrt()
                })
                .collect()
        })
        .collect()
}

impl Captured {
    /// A fresh observer for `what`.
    pub fn new(what: Capture) -> Self {
        Captured {
            what,
            ..Default::default()
        }
    }
    /// Residual stream after layer `l`, `[T, d]`.
    pub fn hidden(&self, l: usize) -> Option<&[f32]> {
        self.layers.get(l)?.hidden.as_deref()
    }
    /// MLP output of layer `l`, `[T, d]`.
    pub fn mlp_out(&self, l: usize) -> Option<&[f32]> {
        self.layers.get(l)?.mlp_out.as_deref()
    }
}

impl LayerObserver for Captured {
    fn layer(&mut self, m: &Pretrained, t: &LayerTensors<'_>) {
        let c = &m.cfg;
        if self.layers.len() <= t.layer {
            self.layers.resize(t.layer + 1, LayerCapture::default());
        }
        self.d = c.d_model;
        if t.layer == 0 {
            self.t = t.pos0 + t.t;
        }
        let w = self.what;
        let lc = &mut self.layers[t.layer];
        if w.hidden {
            keep(&mut lc.hidden, t.x_out);
        }
        if w.hidden_in {
            keep(&mut lc.hidden_in, t.x_in);
        }
        if w.resid_mid {
            keep(&mut lc.resid_mid, t.resid_mid);
        }
        if w.attn_out {
            keep(&mut lc.attn_out, t.attn_out);
        }
        if w.mlp_out {
            keep(&mut lc.mlp_out, t.mlp_out);
        }
        if w.attn && lc.attn.is_none() {
            lc.attn = Some(t.attn.to_vec());
        }
        if w.head_out {
            keep(&mut lc.head_out, t.head_out);
        }
        if w.qkv {
            keep(&mut lc.q, t.q);
            lc.k = Some(t.k.to_vec());
            lc.v = Some(t.v.to_vec());
        }
        if w.kv_norms {
            lc.k_norms = Some(norms(t.k, t.t_keys, c.n_kv_head, c.head_dim));
            lc.v_norms = Some(norms(t.v, t.t_keys, c.n_kv_head, c.head_dim));
        }
    }

    fn wants_layer_maps(&self) -> bool {
        self.what.attn
    }
}
