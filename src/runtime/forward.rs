//! Native f32 forward pass with capture points.
//!
//! For every layer the block computes, on row-major `[T, ·]` buffers,
//! `a = N₁(x)`, `q, k, v = a W_{Q,K,V}ᵀ (+ b)`, (q/k norms), RoPE, per head
//! `A_h = softmax(q_h k_{g(h)}ᵀ · scale + mask)`, `o_h = A_h v_{g(h)}` (`g(h) = h / (H/H_kv)`,
//! grouped-query attention), `attn = [o_0 … o_{H−1}] W_Oᵀ (+ b)`, `r = x + attn`,
//! `m = MLP(N₂(r))`, `y = r + m` (with Gemma 3's sandwich norms, or BERT's post-norms; a
//! learned sink logit in each row's softmax for gpt-oss; a mixture of experts for the MLP of
//! Qwen3-MoE and gpt-oss, [`moe_forward`]).
//! After each layer the observer sees every intermediate tensor of that layer
//! ([`LayerTensors`]) while it still exists; nothing is kept unless the observer copies it, so
//! memory stays O(model + T·d + H·T²) for one layer at a time.

use super::RealError;
use super::moe;
use super::pretrained::{Act, Ffn, Linear, Matmul, Mlp, Moe, NormLayer, Pretrained, Rope};
use super::weights::Storage;
use crate::backend::simd;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

/// Replacement of one head's attention pattern (the A2 intervention).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Replace {
    /// `A = I` (each query attends to itself only).
    Identity,
    /// `A = U`, uniform over the visible keys.
    Uniform,
}

/// Replace head `head` of layer `layer` by `with`.
#[derive(Debug, Clone, Copy)]
pub struct Intervention {
    /// Layer index.
    pub layer: usize,
    /// Query-head index.
    pub head: usize,
    /// Replacement pattern.
    pub with: Replace,
}

/// Everything one layer computed, shown to the observer (row-major buffers).
#[derive(Debug)]
pub struct LayerTensors<'a> {
    /// Layer index l.
    pub layer: usize,
    /// Number of new positions T_n (rows of the activations).
    pub t: usize,
    /// Number of keys T_k = past + T_n.
    pub t_keys: usize,
    /// Absolute position of the first new row.
    pub pos0: usize,
    /// Residual stream entering the layer `[T_n, d]`.
    pub x_in: &'a [f32],
    /// Input of the attention projections, `N₁(x)` (equal to `x_in` for post-norm BERT) `[T_n, d]`.
    pub attn_in: &'a [f32],
    /// Queries after norm and RoPE `[T_n, H·d_head]`.
    pub q: &'a [f32],
    /// Keys after norm and RoPE, all positions `[T_k, H_kv·d_head]`.
    pub k: &'a [f32],
    /// Values, all positions `[T_k, H_kv·d_head]`.
    pub v: &'a [f32],
    /// Attention probabilities `[H, T_n, T_k]`; empty when no observer of the pass
    /// [wants the layer's maps](LayerObserver::wants_layer_maps) and they are larger than
    /// 2¹⁶ floats (each head's map is then shown to [`LayerObserver::head`] only).
    pub attn: &'a [f32],
    /// Head outputs before W_O, `o_h = A_h v_{g(h)}`, `[T_n, H·d_head]`.
    pub head_out: &'a [f32],
    /// Attention-block output added to the residual `[T_n, d]` (after Gemma's post-attention norm).
    pub attn_out: &'a [f32],
    /// Residual stream between attention and MLP `[T_n, d]` (after BERT's first LayerNorm).
    pub resid_mid: &'a [f32],
    /// MLP output added to the residual `[T_n, d]` (after Gemma's post-FFN norm).
    pub mlp_out: &'a [f32],
    /// Residual stream after the layer `[T_n, d]`.
    pub x_out: &'a [f32],
}

/// One head's attention map, shown to [`LayerObserver::head`] as soon as it is computed.
#[derive(Debug)]
pub struct HeadMap<'a> {
    /// Layer index l.
    pub layer: usize,
    /// Query-head index.
    pub head: usize,
    /// Number of new positions T_n (rows of the map).
    pub t: usize,
    /// Number of keys T_k (columns of the map).
    pub t_keys: usize,
    /// Absolute position of the first row.
    pub pos0: usize,
    /// Attention probabilities `[T_n, T_k]`.
    pub map: &'a [f32],
    /// Keys after norm and RoPE, all positions `[T_k, H_kv·d_head]`.
    pub k: &'a [f32],
    /// Values, all positions `[T_k, H_kv·d_head]`.
    pub v: &'a [f32],
}

/// Receives each layer's tensors during the forward pass.
pub trait LayerObserver {
    /// Called once per layer, in order.
    fn layer(&mut self, m: &Pretrained, t: &LayerTensors<'_>);

    /// Whether [`Self::layer`] reads [`LayerTensors::attn`], the whole layer's maps. When no
    /// observer of a pass does, the pass holds one head's map at a time (a layer's maps are
    /// $H T^2$ floats: 151 MB for 9 heads at $T = 2048$) and `attn` is empty.
    fn wants_layer_maps(&self) -> bool {
        true
    }

    /// Called for every head of a layer, in order, before [`Self::layer`] of that layer, with
    /// the head's map (in either mode of [`Self::wants_layer_maps`]).
    fn head(&mut self, _m: &Pretrained, _map: &HeadMap<'_>) {}
}

impl LayerObserver for () {
    fn layer(&mut self, _: &Pretrained, _: &LayerTensors<'_>) {}

    fn wants_layer_maps(&self) -> bool {
        false
    }
}

impl<A: LayerObserver, B: LayerObserver> LayerObserver for (A, B) {
    fn layer(&mut self, m: &Pretrained, t: &LayerTensors<'_>) {
        self.0.layer(m, t);
        self.1.layer(m, t);
    }

    fn wants_layer_maps(&self) -> bool {
        self.0.wants_layer_maps() || self.1.wants_layer_maps()
    }

    fn head(&mut self, m: &Pretrained, map: &HeadMap<'_>) {
        self.0.head(m, map);
        self.1.head(m, map);
    }
}

/// Keys (after RoPE) and values of past positions, per layer, for incremental decoding.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    /// Per layer: keys `[T_past, H_kv·d_head]`.
    pub k: Vec<Vec<f32>>,
    /// Per layer: values `[T_past, H_kv·d_head]`.
    pub v: Vec<Vec<f32>>,
    /// Number of cached positions.
    pub len: usize,
    /// Keep only the last $w - 1$ positions of a causal layer with a sliding window $w$ (all a
    /// later query can see): that layer's rows then start at position `len − rows`, and its
    /// maps' key $j$ is position $p_0 + T - T_k + j$ for $T$ new rows after $p_0$ cached ones.
    /// Off (every position kept, key $j$ = position $j$) unless set; greedy generation
    /// ([`Pretrained::generate_greedy`]) sets it.
    pub trim_windows: bool,
}

/// `out[T, out] = x[T, in] · Wᵀ (+ b)`, the exact product ([`Matmul::Exact`]): a quantized or
/// 16-bit `W` is dequantized in row tiles inside the product ([`super::weights`]).
pub fn linear(x: &[f32], t: usize, lin: &Linear) -> Vec<f32> {
    linear_with(x, t, lin, Matmul::Exact)
}

/// `out[T, out] = x[T, in] · Wᵀ (+ b)` computed as `mode` says.
pub fn linear_with(x: &[f32], t: usize, lin: &Linear, mode: Matmul) -> Vec<f32> {
    let mut out = lin.w.matmul_t(x, t, mode);
    if let Some(b) = &lin.b {
        for row in out.chunks_mut(lin.out) {
            for (v, c) in row.iter_mut().zip(b) {
                *v += c;
            }
        }
    }
    out
}

/// Activation rows up to which [`linear_side_by_side`] runs its products together (the
/// generation steps and short prompts); a longer input's products are parallel inside.
const SIDE_BY_SIDE_ROWS: usize = 16;

/// [`linear_with`] of one input `x` with each of `lins` (`q, k, v`; `up, gate`), the same
/// outputs bit for bit (the products share nothing). For at most [`SIDE_BY_SIDE_ROWS`] rows
/// they run in one fork–join region (`rayon::join`, halving the list), so the threads meet
/// once after all of them, not once after each; a thread that finishes its share of one
/// product takes up rows of the others.
pub fn linear_side_by_side<const N: usize>(
    x: &[f32],
    t: usize,
    lins: [&Linear; N],
    mode: Matmul,
) -> [Vec<f32>; N] {
    fn each(x: &[f32], t: usize, lins: &[&Linear], mode: Matmul, out: &mut [Vec<f32>]) {
        debug_assert_eq!(lins.len(), out.len());
        match lins.len() {
            0 => {}
            1 => out[0] = linear_with(x, t, lins[0], mode),
            n => {
                let (lo, hi) = out.split_at_mut(n / 2);
                rayon::join(
                    || each(x, t, &lins[..n / 2], mode, lo),
                    || each(x, t, &lins[n / 2..], mode, hi),
                );
            }
        }
    }
    let mut out: [Vec<f32>; N] = std::array::from_fn(|_| Vec::new());
    if t <= SIDE_BY_SIDE_ROWS {
        each(x, t, &lins, mode, &mut out);
    } else {
        for (o, lin) in out.iter_mut().zip(lins) {
            *o = linear_with(x, t, lin, mode);
        }
    }
    out
}

/// erf in f64 (Numerical Recipes `erfc` Chebyshev fit, |error| < 1.2e-7).
fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398
                                    + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    if x >= 0.0 { 1.0 - r } else { r - 1.0 }
}

/// GELU with the exact erf, $\tfrac12 x (1 + \operatorname{erf}(x/\sqrt2))$, in f64.
fn gelu_erf(x: f32) -> f32 {
    (0.5 * x as f64 * (1.0 + erf(x as f64 / std::f64::consts::SQRT_2))) as f32
}

/// The MLP's hidden activation: `up ← up ⊙ act(gate)` for a gated MLP, else `up ← act(up)`
/// (SiLU and tanh-GELU through the vectorised kernels of [`crate::backend::simd`]).
fn activate(a: Act, up: &mut [f32], gate: Option<&[f32]>) {
    match (a, gate) {
        (Act::Silu, Some(g)) => simd::silu_mul(up, g),
        (Act::Silu, None) => simd::silu_in_place(up),
        (Act::GeluTanh, Some(g)) => simd::gelu_tanh_mul(up, g),
        (Act::GeluTanh, None) => simd::gelu_tanh_in_place(up),
        (Act::GeluErf, Some(g)) => {
            for (u, &gg) in up.iter_mut().zip(g) {
                *u *= gelu_erf(gg);
            }
        }
        (Act::GeluErf, None) => {
            for u in up.iter_mut() {
                *u = gelu_erf(*u);
            }
        }
    }
}

/// The dense MLP on `x` `[t, d]` (consumed, freed before the down projection).
fn dense_mlp(mlp: &Mlp, x: Vec<f32>, t: usize, act: Act, mode: Matmul) -> Vec<f32> {
    let (mut hid, gv) = match &mlp.gate {
        Some(g) => {
            let [up, gate] = linear_side_by_side(&x, t, [&mlp.up, g], mode);
            (up, Some(gate))
        }
        None => (linear_with(&x, t, &mlp.up, mode), None),
    };
    activate(act, &mut hid, gv.as_deref());
    drop(gv);
    drop(x);
    linear_with(&hid, t, &mlp.down, mode)
}

/// The mixture of experts on `x` `[t, d]`: the router's choice per row ([`moe::route`]),
/// then each routed expert on the rows routed to it (gathered, multiplied in the weights'
/// storage format, scattered back), the weighted outputs added per row in increasing expert
/// index as transformers' loop over the experts hit does. `act` gates the experts unless the
/// mixture has gpt-oss's clamp.
pub fn moe_forward(moe: &Moe, x: &[f32], t: usize, act: Act, mode: Matmul) -> Vec<f32> {
    let d = moe.router.inp;
    let z = linear_with(x, t, &moe.router, mode);
    // Rows routed to each expert, with their weights.
    let mut by_expert: Vec<Vec<(usize, f32)>> = vec![Vec::new(); moe.n_experts()];
    for (i, row) in z.chunks(moe.n_experts()).enumerate() {
        for (e, w) in moe::route(row, moe.top_k, moe.routing) {
            by_expert[e].push((i, w));
        }
    }
    let mut out = vec![0f32; t * d];
    for (mlp, rows) in moe.experts.iter().zip(&by_expert) {
        if rows.is_empty() {
            continue;
        }
        let n = rows.len();
        let mut xe = Vec::with_capacity(n * d);
        for &(i, _) in rows {
            xe.extend_from_slice(&x[i * d..(i + 1) * d]);
        }
        let y = match (&moe.clamp, &mlp.gate) {
            (Some(c), Some(gate)) => {
                let [mut up, g] = linear_side_by_side(&xe, n, [&mlp.up, gate], mode);
                c.apply(&mut up, &g);
                linear_with(&up, n, &mlp.down, mode)
            }
            _ => dense_mlp(mlp, xe, n, act, mode),
        };
        for (&(i, w), yr) in rows.iter().zip(y.chunks(d)) {
            for (o, v) in out[i * d..(i + 1) * d].iter_mut().zip(yr) {
                *o += w * v;
            }
        }
    }
    out
}

/// Softmax of one row's visible logits in place, with a learned sink logit $s$ when given:
/// $A_j = e^{z_j} / (e^{s} + \sum_k e^{z_k})$, i.e. the plain softmax times
/// $\sigma(\mathrm{lse}(z) - s)$ (the sink's own column is not kept).
fn softmax_visible(row: &mut [f32], sink: Option<f32>) {
    let lse = simd::softmax_in_place(row);
    if let Some(s) = sink {
        let keep = (1.0 / (1.0 + (s as f64 - lse).exp())) as f32;
        for v in row.iter_mut() {
            *v *= keep;
        }
    }
}

/// Applies half-split RoPE in place to `x` `[T, n_heads·head_dim]`, row r at position
/// `pos0 + r`: within each head, coordinates `(j, j + dim/2)` for `j < dim/2` rotate by `p·ω_j`,
/// scaled by the attention factor; coordinates `≥ dim` pass through (partial rotary).
fn rope(x: &mut [f32], n_heads: usize, head_dim: usize, pos0: usize, r: &Rope, seq_len: usize) {
    let half = r.dim / 2;
    let inv = r.inv_freq_at(seq_len);
    let m = r.attn_factor;
    for (row_i, row) in x.chunks_mut(n_heads * head_dim).enumerate() {
        let p = (pos0 + row_i) as f32;
        for (j, f) in inv.iter().enumerate() {
            let (s, c) = (p * f).sin_cos();
            let (s, c) = (s * m, c * m);
            for h in 0..n_heads {
                let o = h * head_dim;
                let (a, b) = (row[o + j], row[o + j + half]);
                row[o + j] = a * c - b * s;
                row[o + j + half] = b * c + a * s;
            }
        }
    }
}

/// Per-head norm on `[T, n_heads·dim]`.
fn head_norm(x: &mut [f32], n: &NormLayer) {
    n.apply(x); // rows of width `dim` are exactly the heads
}

/// Query rows per block of the attention products (a causal block skips the keys after it).
const Q_BLOCK: usize = 64;

/// Layers whose maps hold at most this many floats (256 KiB) keep them whole even when no
/// observer reads them: the heads then run in parallel (generation's one-row steps), and the
/// memory is small.
const SMALL_MAPS: usize = 1 << 16;

/// Buffers a forward pass reuses from layer to layer.
#[derive(Debug, Default)]
struct Scratch {
    /// Attention probabilities `[H, T_n, T_k]`.
    attn: Vec<f32>,
    /// Per-head outputs `[H, T_n, d_head]`.
    o_heads: Vec<f32>,
}

/// Output of a forward pass.
#[derive(Debug, Clone)]
pub struct Output {
    /// Residual stream after the last layer `[T, d]` (raw, before the final norm).
    pub hidden: Vec<f32>,
    /// After the final norm (decoders), else equal to `hidden`.
    pub normed: Vec<f32>,
}

/// Adds a branch output `b` (attention or MLP) to the residual stream `r` with the block's
/// optional norm `n`: pre-norm blocks normalise the branch first, $r \leftarrow r + N(b)$;
/// post-norm blocks (BERT) normalise the sum, $r \leftarrow N(r + b)$.
fn add_branch(r: &mut [f32], b: &mut [f32], n: Option<&NormLayer>, post_norm: bool) {
    if !post_norm && let Some(n) = n {
        n.apply(b);
    }
    for (ri, bi) in r.iter_mut().zip(b.iter()) {
        *ri += bi;
    }
    if post_norm && let Some(n) = n {
        n.apply(r);
    }
}

impl Pretrained {
    /// Embeds `tokens` at absolute positions `pos0..`.
    pub fn embed(&self, tokens: &[u32], pos0: usize) -> Result<Vec<f32>, RealError> {
        let d = self.cfg.d_model;
        let mut x = Vec::with_capacity(tokens.len() * d);
        for (i, &tok) in tokens.iter().enumerate() {
            let t = tok as usize;
            if t >= self.cfg.vocab {
                return Err(RealError::Input(format!(
                    "token id {tok} at position {i} is outside the vocabulary (size {})",
                    self.cfg.vocab
                )));
            }
            let n = x.len();
            x.resize(n + d, 0.0);
            self.embed.row_f32(t, &mut x[n..]);
            for v in &mut x[n..] {
                *v *= self.cfg.embed_scale;
            }
            if let Some(p) = &self.pos_embed {
                let r = &p[(pos0 + i) * d..(pos0 + i + 1) * d];
                let n = x.len();
                for (a, b) in x[n - d..].iter_mut().zip(r) {
                    *a += b;
                }
            }
            if let Some(te) = &self.type_embed {
                let n = x.len();
                for (a, b) in x[n - d..].iter_mut().zip(te) {
                    *a += b;
                }
            }
        }
        if let Some(n) = &self.embed_norm {
            n.apply(&mut x);
        }
        Ok(x)
    }

    /// Runs the whole model on `tokens` (no cache), calling `obs` after each layer.
    pub fn forward(
        &self,
        tokens: &[u32],
        obs: &mut dyn LayerObserver,
        iv: Option<Intervention>,
    ) -> Result<Output, RealError> {
        let mut cache = KvCache::default();
        self.forward_cached(tokens, &mut cache, obs, iv, false)
    }

    /// Runs the new `tokens` after the `cache.len` cached positions; appends their keys/values
    /// to the cache when `keep` is true.
    pub fn forward_cached(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        obs: &mut dyn LayerObserver,
        iv: Option<Intervention>,
        keep: bool,
    ) -> Result<Output, RealError> {
        let c = &self.cfg;
        if tokens.is_empty() {
            return Err(RealError::Input("empty token sequence".into()));
        }
        let pos0 = cache.len;
        if pos0 + tokens.len() > c.max_context {
            return Err(RealError::Input(format!(
                "input of {} tokens (+{pos0} cached) is longer than the model's context of {}",
                tokens.len(),
                c.max_context
            )));
        }
        if let Some(iv) = iv
            && (iv.layer >= c.n_layer || iv.head >= c.n_head)
        {
            return Err(RealError::Input(format!(
                "intervention on layer {} head {} is out of range",
                iv.layer, iv.head
            )));
        }
        if cache.k.len() < c.n_layer {
            cache.k.resize(c.n_layer, Vec::new());
            cache.v.resize(c.n_layer, Vec::new());
        }
        let mut x = self.embed(tokens, pos0)?;
        let mut ws = Scratch::default();
        for l in 0..c.n_layer {
            let ivl = iv.filter(|i| i.layer == l);
            x = self.layer_forward_in(l, &x, pos0, cache, obs, ivl, keep, &mut ws)?;
        }
        if keep {
            cache.len += tokens.len();
        }
        let mut normed = x.clone();
        if let Some(n) = &self.final_norm {
            n.apply(&mut normed);
        }
        Ok(Output { hidden: x, normed })
    }

    /// One block on `x` `[T_n, d]` (positions `pos0..`), past keys/values from `cache`.
    #[allow(clippy::too_many_arguments)]
    pub fn layer_forward(
        &self,
        l: usize,
        x: &[f32],
        pos0: usize,
        cache: &mut KvCache,
        obs: &mut dyn LayerObserver,
        iv: Option<Intervention>,
        keep: bool,
    ) -> Result<Vec<f32>, RealError> {
        let mut ws = Scratch::default();
        self.layer_forward_in(l, x, pos0, cache, obs, iv, keep, &mut ws)
    }

    /// [`Self::layer_forward`] with the layer's largest buffers (the attention maps and the
    /// per-head outputs) taken from `ws`, so a forward pass reuses them layer after layer
    /// instead of faulting in fresh pages for each.
    #[allow(clippy::too_many_arguments)]
    fn layer_forward_in(
        &self,
        l: usize,
        x: &[f32],
        pos0: usize,
        cache: &mut KvCache,
        obs: &mut dyn LayerObserver,
        iv: Option<Intervention>,
        keep: bool,
        ws: &mut Scratch,
    ) -> Result<Vec<f32>, RealError> {
        let c = &self.cfg;
        let ly = &self.layers[l];
        let d = c.d_model;
        let t = x.len() / d;
        let (h, hk, dh) = (c.n_head, c.n_kv_head, c.head_dim);
        let group = h / hk;
        let mut a = x.to_vec();
        if let Some(n) = &ly.attn_norm {
            n.apply(&mut a);
        }
        let [mut q, mut k_new, v_new] =
            linear_side_by_side(&a, t, [&ly.wq, &ly.wk, &ly.wv], self.matmul);
        if let Some(n) = &ly.q_norm {
            head_norm(&mut q, n);
        }
        if let Some(n) = &ly.k_norm {
            head_norm(&mut k_new, n);
        }
        if let Some(r) = &ly.rope {
            rope(&mut q, h, dh, pos0, r, pos0 + t);
            rope(&mut k_new, hk, dh, pos0, r, pos0 + t);
        }
        let past = cache.k.get(l).map(|v| v.len() / (hk * dh)).unwrap_or(0);
        debug_assert!(past <= pos0);
        // Position of key 0: past rows a trimmed window cache dropped.
        let k0 = pos0 - past;
        // Keys and values of every position: appended to the cache in place when it is kept
        // (no copy of the past per decoded token), else the new rows alone or a joined copy.
        let joined: Option<(Vec<f32>, Vec<f32>)> = if keep {
            cache.k[l].extend_from_slice(&k_new);
            cache.v[l].extend_from_slice(&v_new);
            None
        } else if past == 0 {
            Some((k_new, v_new))
        } else {
            let mut k = cache.k[l].clone();
            k.extend_from_slice(&k_new);
            let mut v = cache.v[l].clone();
            v.extend_from_slice(&v_new);
            Some((k, v))
        };
        let (k, v): (&[f32], &[f32]) = match &joined {
            Some((k, v)) => (k, v),
            None => (&cache.k[l], &cache.v[l]),
        };
        let tk = past + t;
        // Per head: logits, mask, softmax, and o_h = A_h v_g.
        let scale = c.attn_scale;
        let softcap = c.attn_softcap;
        let causal = c.causal;
        let window = ly.window;
        // Query rows in blocks: a causal block of rows `i0..i1` sees keys below `pos0 + i1`
        // only, so the logits and `A v` of the keys after it (zeros of the map) are not
        // computed. One block of head `hh`: its map rows `sb` and output rows `ob`.
        let rep_of = |hh: usize| iv.filter(|i| i.head == hh).map(|i| i.with);
        let block = |hh: usize, b: usize, sb: &mut [f32], ob: &mut [f32]| {
            let g = hh / group;
            let i0 = b * Q_BLOCK;
            let n = sb.len() / tk;
            let kh = if causal { (past + i0 + n).min(tk) } else { tk };
            let qm = MatRef::from_row_major_slice_with_stride(&q[hh * dh..], t, dh, h * dh);
            let km = MatRef::from_row_major_slice_with_stride(&k[g * dh..], tk, dh, hk * dh);
            let vm = MatRef::from_row_major_slice_with_stride(&v[g * dh..], tk, dh, hk * dh);
            // Into the block's first `n · kh` entries (a contiguous destination: faer 0.24
            // wrote past a strided destination's end here), then each row moved to its
            // place, the last first (the moves only go forward).
            faer::linalg::matmul::matmul(
                MatMut::from_row_major_slice_mut(&mut sb[..n * kh], n, kh),
                Accum::Replace,
                qm.subrows(i0, n),
                km.subrows(0, kh).transpose(),
                scale,
                Par::Seq,
            );
            crate::linalg::clean_upper_state();
            if kh < tk {
                for r in (1..n).rev() {
                    sb.copy_within(r * kh..(r + 1) * kh, r * tk);
                }
            }
            let rep = rep_of(hh);
            let sink = ly.sinks.as_ref().map(|s| s[hh]);
            for (r, row) in sb.chunks_mut(tk).enumerate() {
                // Absolute query position, then key indices (position − k0).
                let qa = pos0 + i0 + r;
                let qi = qa - k0;
                let lo = window
                    .map(|w| (qa + 1).saturating_sub(w))
                    .unwrap_or(0)
                    .saturating_sub(k0);
                let hi = if causal { qi + 1 } else { tk };
                match rep {
                    Some(Replace::Identity) => {
                        row.fill(0.0);
                        row[qi] = 1.0;
                    }
                    Some(Replace::Uniform) => {
                        row.fill(0.0);
                        let u = 1.0 / (hi - lo) as f32;
                        row[lo..hi].fill(u);
                    }
                    None => {
                        if let Some(cap) = softcap {
                            for z in &mut row[lo..hi] {
                                *z = cap * (*z / cap).tanh();
                            }
                        }
                        softmax_visible(&mut row[lo..hi], sink);
                        row[..lo].fill(0.0);
                        row[hi..].fill(0.0);
                    }
                }
            }
            faer::linalg::matmul::matmul(
                MatMut::from_row_major_slice_mut(ob, n, dh),
                Accum::Replace,
                MatRef::from_row_major_slice_with_stride(&sb[..], n, kh, tk),
                vm.subrows(0, kh),
                1.0f32,
                Par::Seq,
            );
            crate::linalg::clean_upper_state();
        };
        // Head `hh` into its map `s` `[T_n, T_k]` and output `o` `[T_n, d_head]`, its row
        // blocks in parallel when `par`.
        let one_head = |hh: usize, s: &mut [f32], o: &mut [f32], par: bool| {
            if par {
                s.par_chunks_mut(Q_BLOCK * tk)
                    .zip(o.par_chunks_mut(Q_BLOCK * dh))
                    .enumerate()
                    .for_each(|(b, (sb, ob))| block(hh, b, sb, ob));
            } else {
                let blocks = s.chunks_mut(Q_BLOCK * tk).zip(o.chunks_mut(Q_BLOCK * dh));
                for (b, (sb, ob)) in blocks.enumerate() {
                    block(hh, b, sb, ob);
                }
            }
        };
        // The maps of the whole layer in one buffer (heads in parallel) when an observer reads
        // them at the end of the layer; else one head's map at a time (its row blocks in
        // parallel), each shown to `obs.head` and overwritten by the next. Every element is
        // overwritten (products with `Accum::Replace`, masked entries filled), so a reused
        // buffer needs no clearing; `resize` only zeroes new capacity.
        let layer_maps = obs.wants_layer_maps() || h * t * tk <= SMALL_MAPS;
        // Each head's `HeadMap` is this one with its index and map.
        let shown = HeadMap {
            layer: l,
            head: 0,
            t,
            t_keys: tk,
            pos0,
            map: &[],
            k,
            v,
        };
        let Scratch { attn, o_heads } = ws;
        o_heads.resize(h * t * dh, 0.0);
        let o_heads = &mut o_heads[..h * t * dh];
        let attn: &[f32] = if layer_maps {
            attn.resize(h * t * tk, 0.0);
            let maps = &mut attn[..h * t * tk];
            maps.par_chunks_mut(t * tk)
                .zip(o_heads.par_chunks_mut(t * dh))
                .enumerate()
                .for_each(|(hh, (s, o))| one_head(hh, s, o, false));
            for hh in 0..h {
                let map = &maps[hh * t * tk..(hh + 1) * t * tk];
                obs.head(
                    self,
                    &HeadMap {
                        head: hh,
                        map,
                        ..shown
                    },
                );
            }
            maps
        } else {
            attn.resize(t * tk, 0.0);
            let map = &mut attn[..t * tk];
            for (hh, o) in o_heads.chunks_mut(t * dh).enumerate() {
                one_head(hh, map, o, t > Q_BLOCK);
                obs.head(
                    self,
                    &HeadMap {
                        head: hh,
                        map,
                        ..shown
                    },
                );
            }
            &[]
        };
        let mut head_out = vec![0f32; t * h * dh];
        for (hh, o) in o_heads.chunks_exact(t * dh).enumerate() {
            for i in 0..t {
                head_out[i * h * dh + hh * dh..i * h * dh + (hh + 1) * dh]
                    .copy_from_slice(&o[i * dh..(i + 1) * dh]);
            }
        }
        let mut attn_out = linear_with(&head_out, t, &ly.wo, self.matmul);
        let mut resid = x.to_vec();
        add_branch(
            &mut resid,
            &mut attn_out,
            ly.post_attn_norm.as_ref(),
            c.post_norm,
        );
        // MLP.
        let mut m_in = resid.clone();
        if let Some(n) = &ly.ffn_norm {
            n.apply(&mut m_in);
        }
        let mut mlp_out = match &ly.ffn {
            Ffn::Dense(mlp) => dense_mlp(mlp, m_in, t, c.act, self.matmul),
            Ffn::Moe(moe) => moe_forward(moe, &m_in, t, c.act, self.matmul),
        };
        let mut y = resid.clone();
        add_branch(&mut y, &mut mlp_out, ly.post_ffn_norm.as_ref(), c.post_norm);
        if y.iter().any(|v| !v.is_finite()) {
            return Err(RealError::Input(format!(
                "layer {l}: the residual stream became non-finite"
            )));
        }
        let trim = (keep && cache.trim_windows && causal)
            .then_some(window)
            .flatten()
            .map(|w| w.saturating_sub(1))
            .filter(|&w1| tk > w1);
        obs.layer(
            self,
            &LayerTensors {
                layer: l,
                t,
                t_keys: tk,
                pos0,
                x_in: x,
                attn_in: &a,
                q: &q,
                k,
                v,
                attn,
                head_out: &head_out,
                attn_out: &attn_out,
                resid_mid: &resid,
                mlp_out: &mlp_out,
                x_out: &y,
            },
        );
        if let Some(w1) = trim {
            let drop = (tk - w1) * hk * dh;
            cache.k[l].drain(..drop);
            cache.v[l].drain(..drop);
        }
        Ok(y)
    }

    /// Logits `[T, vocab]` of a normed hidden state `[T, d]` (decoders only).
    pub fn logits(&self, normed: &[f32]) -> Result<Vec<f32>, RealError> {
        let c = &self.cfg;
        if !self.has_lm_head {
            return Err(RealError::Input(
                "this model has no language-model head".into(),
            ));
        }
        let t = normed.len() / c.d_model;
        let mut lg = match &self.lm_head {
            Some(lin) => linear_with(normed, t, lin, self.matmul),
            None => self.embed.matmul_t(normed, t, self.matmul),
        };
        if let Some(cap) = c.final_softcap {
            for z in &mut lg {
                *z = cap * (*z / cap).tanh();
            }
        }
        Ok(lg)
    }

    /// Next-token loss in nats at each position i < T−1 (`−log p(tokens[i+1] | ≤ i)`),
    /// computed in chunks of rows so the `[T, vocab]` logits never exist at once.
    pub fn next_token_nll(&self, normed: &[f32], tokens: &[u32]) -> Result<Vec<f64>, RealError> {
        let d = self.cfg.d_model;
        let t = normed.len() / d;
        let head = self.lm_head.as_ref().map_or(&self.embed, |h| &h.w);
        if self.has_lm_head && !matches!(head.storage(), Storage::F32(_)) && t > 1 {
            return self.next_token_nll_streamed(head, normed, tokens);
        }
        let mut out = Vec::with_capacity(t.saturating_sub(1));
        let chunk = 64;
        let mut i0 = 0;
        let mut scratch = Vec::new();
        while i0 + 1 < t {
            let i1 = (i0 + chunk).min(t - 1);
            let lg = self.logits(&normed[i0 * d..i1 * d])?;
            for (r, row) in lg.chunks(self.cfg.vocab).enumerate() {
                let lse = simd::log_sum_exp(row, &mut scratch);
                out.push(lse - row[tokens[i0 + r + 1] as usize] as f64);
            }
            i0 = i1;
        }
        Ok(out)
    }

    /// [`Self::next_token_nll`] for a head kept quantized or 16-bit: the vocabulary is visited in
    /// row tiles, each dequantized once for all positions, with a running log-sum-exp per
    /// position ([`simd::lse_update`]: $m \leftarrow \max(m, \max z)$,
    /// $s \leftarrow s\thinspace e^{m_{old}-m} + \sum e^{z-m}$, the exponentials in f32, the sums in
    /// f64), so neither the `[T, vocab]` logits nor T/64 dequantizations of the head happen.
    fn next_token_nll_streamed(
        &self,
        head: &super::weights::StoredMatrix,
        normed: &[f32],
        tokens: &[u32],
    ) -> Result<Vec<f64>, RealError> {
        let c = &self.cfg;
        let d = c.d_model;
        let n = normed.len() / d - 1;
        let x = &normed[..n * d];
        let mut lse = vec![(f64::NEG_INFINITY, 0f64); n];
        let mut target = vec![0f64; n];
        let mut scratch = Vec::new();
        const VTILE: usize = 4096;
        let mut v0 = 0;
        while v0 < c.vocab {
            let nv = VTILE.min(c.vocab - v0);
            let mut lg = head.rows(v0, nv).matmul_t(x, n, self.matmul);
            if let Some(cap) = c.final_softcap {
                for z in &mut lg {
                    *z = cap * (*z / cap).tanh();
                }
            }
            for (i, row) in lg.chunks(nv).enumerate() {
                lse[i] = simd::lse_update(lse[i], row, &mut scratch);
                let tok = tokens[i + 1] as usize;
                if (v0..v0 + nv).contains(&tok) {
                    target[i] = row[tok - v0] as f64;
                }
            }
            v0 += nv;
        }
        Ok((0..n)
            .map(|i| lse[i].0 + lse[i].1.ln() - target[i])
            .collect())
    }

    /// Greedy decoding with a KV cache: appends `n_new` argmax tokens to `prompt`. Sliding-window
    /// layers keep only their last $w - 1$ positions ([`KvCache::trim_windows`]).
    pub fn generate_greedy(
        &self,
        prompt: &[u32],
        n_new: usize,
        obs: &mut dyn LayerObserver,
    ) -> Result<Vec<u32>, RealError> {
        self.generate_greedy_cached(prompt, n_new, obs, true)
            .map(|(toks, _)| toks)
    }

    /// [`Self::generate_greedy`] with the window trimming chosen (`trim_windows`), returning
    /// the cache as generation left it (for the checks that a trimmed cache holds only the
    /// windows and decodes the same ids as a full one).
    pub fn generate_greedy_cached(
        &self,
        prompt: &[u32],
        n_new: usize,
        obs: &mut dyn LayerObserver,
        trim_windows: bool,
    ) -> Result<(Vec<u32>, KvCache), RealError> {
        let mut cache = KvCache {
            trim_windows,
            ..KvCache::default()
        };
        let mut toks = prompt.to_vec();
        let mut out = self.forward_cached(prompt, &mut cache, obs, None, true)?;
        for _ in 0..n_new {
            let d = self.cfg.d_model;
            let last = &out.normed[out.normed.len() - d..];
            let lg = self.logits(last)?;
            let next = lg
                .iter()
                .enumerate()
                .fold((0usize, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
                    if v > bv { (i, v) } else { (bi, bv) }
                })
                .0 as u32;
            toks.push(next);
            if toks.len() >= self.cfg.max_context {
                break;
            }
            out = self.forward_cached(&[next], &mut cache, obs, None, true)?;
        }
        Ok((toks, cache))
    }
}
