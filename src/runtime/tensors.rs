//! A native run's tensors as whole arrays: what transformers returns for
//! `model(ids, output_hidden_states=True, output_attentions=True)`, and what `sinklab real
//! --dump` writes.
//!
//! For a model with $L$ layers, $H$ query heads, $H_{kv}$ key/value heads of width $d_h$ and a
//! residual width $d$, on $T$ tokens (all row-major, f32):
//! - `hidden` `[L+1, T, d]`: $h^0$ the embedding output, $h^l$ the raw residual stream after
//!   block $l$ (before any final norm);
//! - `attention` `[L, H, T, T]`: the attention probabilities $A^l_h$;
//! - `queries` `[L, H, T, d_h]`, `keys` and `values` `[L, H_kv, T, d_h]`: after q/k norms
//!   and RoPE, as the logits $q_i^\top k_j$ see them;
//! - `mlp_out` `[L, T, d]`: the MLP's contribution to the residual stream;
//! - `nll` `[T-1]`: $-\log p(x_{i+1} \mid x_{\le i})$ in nats (models with a language-model head).
//!
//! A [`TensorWriter`] observer writes each layer's tensors straight into buffers allocated once
//! for the whole run, after [`RunTensors::bytes_needed`] is checked against the memory budget
//! ([`crate::budget`]): a run too large is refused with its size named, before anything is
//! allocated.
//!
//! [`RunTensors::safetensors_bytes`] writes the crate's activation schema (the one
//! [`super::activation_file`] reads): `hidden.{l}` = $h^{l+1}$ `[T, d]` for $l = 0..L-1$,
//! `attn.{l}`, `mlp_out.{l}`, `keys.{l}`, `values.{l}`, `tokens`; and, beside the schema
//! (the reader ignores them), `embedding` = $h^0$ `[T, d]`, `queries.{l}` `[H, T, d_h]` and
//! `nll` `[T-1]`.

use super::RealError;
use super::forward::{LayerObserver, LayerTensors};
use super::pretrained::Pretrained;
use crate::budget::{Budget, Need, fmt_bytes};
use safetensors::{Dtype, tensor::TensorView};
use std::collections::HashMap;

/// Which tensors a run keeps (hidden states and the loss are cheap; the rest scale with
/// $L H T^2$ or $L H T d_h$).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorRequest {
    /// `hidden` `[L+1, T, d]`.
    pub hidden: bool,
    /// `attention` `[L, H, T, T]`.
    pub attention: bool,
    /// `queries`, `keys`, `values`.
    pub qkv: bool,
    /// `mlp_out` `[L, T, d]`.
    pub mlp: bool,
    /// `nll` `[T-1]`: the language-model head over every position (for small models as costly
    /// as a large part of the forward).
    pub nll: bool,
}

impl Default for TensorRequest {
    /// Hidden states only.
    fn default() -> Self {
        TensorRequest {
            hidden: true,
            attention: false,
            qkv: false,
            mlp: false,
            nll: true,
        }
    }
}

impl TensorRequest {
    /// Everything.
    pub fn all() -> Self {
        TensorRequest {
            hidden: true,
            attention: true,
            qkv: true,
            mlp: true,
            nll: true,
        }
    }

    /// Parses a comma-separated list of `hidden`, `attn`, `qkv`, `mlp` (`--what`); an unknown
    /// name is refused with the list.
    pub fn parse(s: &str) -> Result<Self, RealError> {
        let mut r = TensorRequest {
            hidden: false,
            attention: false,
            qkv: false,
            mlp: false,
            nll: true,
        };
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match w {
                "hidden" => r.hidden = true,
                "attn" | "attention" => r.attention = true,
                "qkv" => r.qkv = true,
                "mlp" | "mlp_out" => r.mlp = true,
                other => {
                    return Err(RealError::Input(format!(
                        "unknown tensor `{other}`: give a comma-separated list of hidden, attn, qkv, mlp"
                    )));
                }
            }
        }
        if !(r.hidden || r.attention || r.qkv || r.mlp) {
            return Err(RealError::Input(
                "no tensor named: give a comma-separated list of hidden, attn, qkv, mlp".into(),
            ));
        }
        Ok(r)
    }
}

/// The tensors of one run (`None` where not requested; `nll` `None` for a model without a
/// language-model head).
#[derive(Clone, Debug, PartialEq)]
pub struct RunTensors {
    /// The token ids.
    pub tokens: Vec<u32>,
    /// Layers L.
    pub n_layer: usize,
    /// Residual width d.
    pub d_model: usize,
    /// Query heads H.
    pub n_head: usize,
    /// Key/value heads H_kv.
    pub n_kv_head: usize,
    /// Head width d_h.
    pub head_dim: usize,
    /// `[L+1, T, d]`.
    pub hidden: Option<Vec<f32>>,
    /// `[L, H, T, T]`.
    pub attention: Option<Vec<f32>>,
    /// `[L, H, T, d_h]`.
    pub queries: Option<Vec<f32>>,
    /// `[L, H_kv, T, d_h]`.
    pub keys: Option<Vec<f32>>,
    /// `[L, H_kv, T, d_h]`.
    pub values: Option<Vec<f32>>,
    /// `[L, T, d]`.
    pub mlp_out: Option<Vec<f32>>,
    /// `[T-1]` nats.
    pub nll: Option<Vec<f64>>,
}

impl RunTensors {
    /// Bytes the requested tensors of a run on `t` tokens hold, plus the forward's own
    /// working set (one layer's maps $H T^2$ when attention is kept, the `[T, ·]` buffers).
    pub fn bytes_needed(m: &Pretrained, t: usize, r: TensorRequest) -> f64 {
        let c = &m.cfg;
        let (l, t, d) = (c.n_layer as f64, t as f64, c.d_model as f64);
        let (h, hk, dh) = (c.n_head as f64, c.n_kv_head as f64, c.head_dim as f64);
        let mut n = 0.0;
        if r.hidden {
            n += (l + 1.0) * t * d;
        }
        if r.attention {
            n += l * h * t * t + h * t * t;
        }
        if r.qkv {
            n += l * (h + 2.0 * hk) * t * dh;
        }
        if r.mlp {
            n += l * t * d;
        }
        // The forward's [T, ·] buffers (residual, norms, q/k/v, MLP width ≤ 8d) and one
        // head's map.
        n += 16.0 * t * d + t * t;
        4.0 * n
    }
}

/// Observer writing each layer's tensors into the [`RunTensors`] buffers (one pass, no cache:
/// every layer sees all `T` positions).
#[derive(Debug)]
pub struct TensorWriter {
    /// The buffers, filled while the forward runs.
    pub out: RunTensors,
    t: usize,
}

/// A zeroed buffer of `n` floats for a run's tensors, backed by transparent huge pages where
/// the kernel offers them. The buffers are large ($L H T^2$ attention floats: 283 MB for
/// SmolLM2 at $T = 512$), fresh for every run (the caller keeps them) and written once, so in
/// 4 KiB pages each would cost one page fault per 4 KiB on first write: measured from Python
/// (`ru_minflt` around `Model.run(hidden, attention)`, SmolLM2, T = 512), 78 k faults a run,
/// with glibc's allocator tuned or not. The advice (Linux `madvise(MADV_HUGEPAGE)` on the
/// buffer's 2 MiB-aligned interior) changes no value: the memory is zero either way.
fn output_buffer(n: usize) -> Vec<f32> {
    let v = vec![0f32; n];
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const HUGE: usize = 2 << 20;
        let (p, len) = (v.as_ptr() as usize, std::mem::size_of_val(&v[..]));
        let start = p.next_multiple_of(HUGE);
        let end = (p + len) / HUGE * HUGE;
        if end > start {
            // SAFETY: the range lies inside `v`'s allocation, which outlives the call;
            // MADV_HUGEPAGE sets the paging policy of the range and changes no byte of it.
            // A kernel without transparent huge pages refuses it (EINVAL), which is harmless.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    v
}

/// `[T, G·d_h]` rows → `[G, T, d_h]` head-major, written into `dst`.
fn rows_to_heads_into(dst: &mut [f32], x: &[f32], g: usize, t: usize, dh: usize) {
    for i in 0..t {
        for h in 0..g {
            let s = (i * g + h) * dh;
            let o = (h * t + i) * dh;
            dst[o..o + dh].copy_from_slice(&x[s..s + dh]);
        }
    }
}

impl TensorWriter {
    /// Buffers for `r` on `tokens` (zeroed; call only after the budget check).
    pub fn new(m: &Pretrained, tokens: &[u32], r: TensorRequest) -> Self {
        let c = &m.cfg;
        let t = tokens.len();
        let (l, d, h, hk, dh) = (c.n_layer, c.d_model, c.n_head, c.n_kv_head, c.head_dim);
        let buf = |on: bool, n: usize| on.then(|| output_buffer(n));
        TensorWriter {
            out: RunTensors {
                tokens: tokens.to_vec(),
                n_layer: l,
                d_model: d,
                n_head: h,
                n_kv_head: hk,
                head_dim: dh,
                hidden: buf(r.hidden, (l + 1) * t * d),
                attention: buf(r.attention, l * h * t * t),
                queries: buf(r.qkv, l * h * t * dh),
                keys: buf(r.qkv, l * hk * t * dh),
                values: buf(r.qkv, l * hk * t * dh),
                mlp_out: buf(r.mlp, l * t * d),
                nll: None,
            },
            t,
        }
    }
}

impl LayerObserver for TensorWriter {
    fn layer(&mut self, _m: &Pretrained, x: &LayerTensors<'_>) {
        let o = &mut self.out;
        let (t, d, l) = (self.t, o.d_model, x.layer);
        let (h, hk, dh) = (o.n_head, o.n_kv_head, o.head_dim);
        if let Some(hid) = &mut o.hidden {
            if l == 0 {
                hid[..t * d].copy_from_slice(x.x_in);
            }
            hid[(l + 1) * t * d..(l + 2) * t * d].copy_from_slice(x.x_out);
        }
        if let Some(a) = &mut o.attention {
            a[l * h * t * t..(l + 1) * h * t * t].copy_from_slice(x.attn);
        }
        if let Some(q) = &mut o.queries {
            rows_to_heads_into(&mut q[l * h * t * dh..(l + 1) * h * t * dh], x.q, h, t, dh);
        }
        let kv = l * hk * t * dh..(l + 1) * hk * t * dh;
        if let Some(k) = &mut o.keys {
            rows_to_heads_into(&mut k[kv.clone()], x.k, hk, t, dh);
        }
        if let Some(v) = &mut o.values {
            rows_to_heads_into(&mut v[kv], x.v, hk, t, dh);
        }
        if let Some(mo) = &mut o.mlp_out {
            mo[l * t * d..(l + 1) * t * d].copy_from_slice(x.mlp_out);
        }
    }

    fn wants_layer_maps(&self) -> bool {
        self.out.attention.is_some()
    }
}

/// Runs `m` on `tokens` once and returns the requested tensors and the loss, after checking
/// [`RunTensors::bytes_needed`] against `budget` (refused with the size named, and the
/// environment variable that raises the limit).
pub fn run_tensors(
    m: &Pretrained,
    tokens: &[u32],
    r: TensorRequest,
    budget: &Budget,
) -> Result<RunTensors, RealError> {
    let t = tokens.len();
    if t == 0 {
        return Err(RealError::Input("empty token sequence".into()));
    }
    let need = RunTensors::bytes_needed(m, t, r);
    budget
        .check(
            &format!(
                "the run's tensors ({} on T = {t} tokens: {})",
                fmt_bytes(need),
                describe(r)
            ),
            Need::bytes(need),
            false,
        )
        .map_err(|e| RealError::Input(e.to_string()))?;
    let mut w = TensorWriter::new(m, tokens, r);
    let out = m.forward(tokens, &mut w, None)?;
    if r.nll && m.has_lm_head && m.cfg.causal && t > 1 {
        w.out.nll = Some(m.next_token_nll(&out.normed, tokens)?);
    }
    Ok(w.out)
}

fn describe(r: TensorRequest) -> String {
    let mut v = Vec::new();
    for (on, n) in [
        (r.hidden, "hidden"),
        (r.attention, "attn"),
        (r.qkv, "qkv"),
        (r.mlp, "mlp"),
    ] {
        if on {
            v.push(n);
        }
    }
    v.join(",")
}

impl RunTensors {
    /// Positions T.
    pub fn t(&self) -> usize {
        self.tokens.len()
    }

    /// The activation-schema file (module doc); the hidden states are required by the schema,
    /// so a run without them is refused. `metadata` is stored as the file's string metadata.
    pub fn safetensors_bytes(
        &self,
        metadata: HashMap<String, String>,
    ) -> Result<Vec<u8>, RealError> {
        let (t, d, l) = (self.t(), self.d_model, self.n_layer);
        let (h, hk, dh) = (self.n_head, self.n_kv_head, self.head_dim);
        let hidden = self.hidden.as_ref().ok_or_else(|| {
            RealError::Input(
                "an activation file needs the hidden states (`hidden.{l}`): add hidden to --what"
                    .into(),
            )
        })?;
        let f32b = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut named: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
        named.push((
            "embedding".into(),
            Dtype::F32,
            vec![t, d],
            f32b(&hidden[..t * d]),
        ));
        for ly in 0..l {
            let s = (ly + 1) * t * d;
            named.push((
                format!("hidden.{ly}"),
                Dtype::F32,
                vec![t, d],
                f32b(&hidden[s..s + t * d]),
            ));
        }
        let per_layer = |named: &mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>,
                         prefix: &str,
                         x: &Option<Vec<f32>>,
                         shape: Vec<usize>| {
            if let Some(x) = x {
                let n: usize = shape.iter().product();
                for ly in 0..l {
                    named.push((
                        format!("{prefix}.{ly}"),
                        Dtype::F32,
                        shape.clone(),
                        f32b(&x[ly * n..(ly + 1) * n]),
                    ));
                }
            }
        };
        per_layer(&mut named, "attn", &self.attention, vec![h, t, t]);
        per_layer(&mut named, "queries", &self.queries, vec![h, t, dh]);
        per_layer(&mut named, "keys", &self.keys, vec![hk, t, dh]);
        per_layer(&mut named, "values", &self.values, vec![hk, t, dh]);
        per_layer(&mut named, "mlp_out", &self.mlp_out, vec![t, d]);
        named.push((
            "tokens".into(),
            Dtype::I64,
            vec![t],
            self.tokens
                .iter()
                .flat_map(|&x| (x as i64).to_le_bytes())
                .collect(),
        ));
        if let Some(nll) = &self.nll {
            named.push((
                "nll".into(),
                Dtype::F64,
                vec![nll.len()],
                nll.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ));
        }
        let views: Vec<(String, TensorView<'_>)> = named
            .iter()
            .map(|(n, dt, s, b)| TensorView::new(*dt, s.clone(), b).map(|v| (n.clone(), v)))
            .collect::<Result<_, _>>()
            .map_err(|e| RealError::Input(format!("writing the activation file: {e}")))?;
        let meta = (!metadata.is_empty()).then_some(metadata);
        safetensors::serialize(views, meta)
            .map_err(|e| RealError::Input(format!("writing the activation file: {e}")))
    }

    /// Writes [`Self::safetensors_bytes`] to `path` atomically.
    pub fn write(
        &self,
        path: &std::path::Path,
        metadata: HashMap<String, String>,
    ) -> Result<(), RealError> {
        let b = self.safetensors_bytes(metadata)?;
        crate::atomic::write(path, b).map_err(|e| RealError::io(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_refuse() {
        let r = TensorRequest::parse("hidden, attn,qkv").unwrap();
        assert!(r.hidden && r.attention && r.qkv && !r.mlp);
        assert!(TensorRequest::parse("mlp").unwrap().mlp);
        let e = TensorRequest::parse("hidden,logits")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`logits`"), "{e}");
        assert!(TensorRequest::parse(" , ").is_err());
    }

    #[test]
    fn rows_become_heads() {
        // T = 2 rows of G = 2 heads of width 3: row i, head h, entry j = 100 i + 10 h + j.
        let x: Vec<f32> = (0..2)
            .flat_map(|i| {
                (0..2).flat_map(move |h| (0..3).map(move |j| (100 * i + 10 * h + j) as f32))
            })
            .collect();
        let mut y = vec![0f32; 12];
        rows_to_heads_into(&mut y, &x, 2, 2, 3);
        assert_eq!(
            y,
            vec![
                0., 1., 2., 100., 101., 102., 10., 11., 12., 110., 111., 112.
            ]
        );
    }
}
