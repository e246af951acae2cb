//! `sinklab real`: one forward pass with the statistics observer, the next-token loss, and the
//! per-head costs, gathered in a serialisable [`RealReport`].

use super::stats::{LayerStats, StatsObserver};
use crate::runtime::forward::LayerObserver;
use crate::runtime::pretrained::{Arch, Config, NormLayer, Pretrained};
use crate::runtime::{LoadedModel, RealError};
use faer::Mat;

/// Cost of one head (docs/theory.md §1 norms), on the bilinear forms acting on the unit-RMS residual
/// stream: `W_QK = s · diag(g) W_Q^{h⊤} W_K^{g(h)} diag(g)` (g = pre-attention norm gain,
/// s = logit scale) and `W_VO = W_O^{[:,h]} W_V^{g(h)} diag(g)`. Singular values come from the
/// thin factors (QR of each d × d_head factor, then an SVD of the d_head × d_head core), which is
/// exact and cheap. Gemma's q/k norms and BERT's post-norms are not folded in.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HeadNorms {
    /// Layer.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// ‖W_QK‖_F.
    pub qk_fro: f64,
    /// ‖W_QK‖_*.
    pub qk_nuc: f64,
    /// ‖W_VO‖_F.
    pub vo_fro: f64,
    /// ‖W_VO‖_*.
    pub vo_nuc: f64,
}

/// Everything `sinklab real` reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RealReport {
    /// What was loaded.
    pub model: String,
    /// Architecture.
    pub config: Config,
    /// Token ids run.
    pub tokens: Vec<u32>,
    /// Whether position 0 holds the BOS token.
    pub bos_first: bool,
    /// Mean next-token loss in nats (decoders).
    pub nll_mean: Option<f64>,
    /// Per layer (index l = after layer l).
    pub layers: Vec<LayerStats>,
    /// Per head.
    pub head_costs: Vec<HeadNorms>,
    /// A1 per layer (docs/theory.md §3): the corollary's sufficient condition on the real embeddings.
    pub a1: Vec<super::head_space::A1Corollary>,
    /// A1 verdicts per layer through `geometry` (without biases, and homogenised where the model
    /// has q/k biases), when asked for (`sinklab real --a1`: a convex solve per layer).
    pub a1_verdicts: Option<Vec<super::head_space::A1Verdict>>,
    /// A2 per head (docs/theory.md §7), when asked for (`sinklab real --a2`).
    pub a2: Option<(
        Vec<super::oversmooth_real::HeadA2>,
        super::oversmooth_real::A2Summary,
    )>,
    /// A2 with skill figures (`real::oversmooth_real::analyze_skill`), when asked for (`sinklab real --a2`).
    pub a2_skill: Option<super::oversmooth_real::SkillSummary>,
}

fn gain(n: &Option<NormLayer>, d: usize) -> Vec<f64> {
    match n {
        Some(NormLayer::Rms { w, .. }) | Some(NormLayer::Layer { w, .. }) => {
            w.iter().map(|&v| v as f64).collect()
        }
        None => vec![1.0; d],
    }
}

/// Singular values of `A Bᵀ` for thin `A, B` (n × r, r ≤ n), through QR of both.
pub fn thin_product_singular_values(a: &Mat<f64>, b: &Mat<f64>) -> Vec<f64> {
    let ra = crate::linalg::thin_qr_r_seq(a.as_ref());
    let rb = crate::linalg::thin_qr_r_seq(b.as_ref());
    core_singular_values(&ra, &rb)
}

/// Singular values of $A B^\top = Q_A (R_A R_B^\top) Q_B^\top$ from the two R factors: those of
/// the `r × r` core $R_A R_B^\top$.
fn core_singular_values(ra: &Mat<f64>, rb: &Mat<f64>) -> Vec<f64> {
    let core = ra * rb.transpose();
    crate::linalg::singular_values_seq(core.as_ref())
}

/// Per-head costs of every layer: Frobenius and nuclear norms of
/// $W_{QK} = s\thinspace(\mathrm{diag}(g) W_Q^\top)(\mathrm{diag}(g) W_K^\top)^\top$ and
/// $W_{VO} = W_O[:, h]\thinspace(\mathrm{diag}(g) W_V^\top)^\top$ from the `d_head × d_head` cores of
/// their thin factors. The keys' and values' R factors are computed once per KV head (shared by
/// its query group), and the heads of a layer run in parallel, each decomposition sequential.
pub fn head_costs(m: &Pretrained) -> Vec<HeadNorms> {
    use rayon::prelude::*;
    let c: &Config = &m.cfg;
    let (d, dh, h, hk) = (c.d_model, c.head_dim, c.n_head, c.n_kv_head);
    let r_of = |f: Mat<f64>| crate::linalg::thin_qr_r_seq(f.as_ref());
    let mut out = Vec::new();
    for (l, ly) in m.layers.iter().enumerate() {
        let g = gain(&ly.attn_norm, d);
        // Dense f32 copies (borrowed when stored as f32): the factors below index single entries.
        let (wq, wk, wv, wo) = (
            ly.wq.w.to_f32(),
            ly.wk.w.to_f32(),
            ly.wv.w.to_f32(),
            ly.wo.w.to_f32(),
        );
        // Per KV head: R of diag(g) W_Kᵀ and of diag(g) W_Vᵀ (d × d_head factors).
        let kv_r: Vec<(Mat<f64>, Mat<f64>)> = (0..hk)
            .into_par_iter()
            .map(|kv| {
                let fk = Mat::<f64>::from_fn(d, dh, |i, r| g[i] * wk[(kv * dh + r) * d + i] as f64);
                let fv = Mat::<f64>::from_fn(d, dh, |i, r| g[i] * wv[(kv * dh + r) * d + i] as f64);
                (r_of(fk), r_of(fv))
            })
            .collect();
        let layer: Vec<HeadNorms> = (0..h)
            .into_par_iter()
            .map(|hh| {
                let kv = hh / (h / hk);
                // W_QK = s·(diag(g) W_Qᵀ)(diag(g) W_Kᵀ)ᵀ: factors d × d_head.
                let fq = Mat::<f64>::from_fn(d, dh, |i, r| {
                    g[i] * wq[(hh * dh + r) * d + i] as f64 * c.attn_scale as f64
                });
                // W_VO = W_O[:, h] (W_V diag(g)): factors W_O[:, h] and diag(g) W_Vᵀ.
                let fo = Mat::<f64>::from_fn(d, dh, |i, r| wo[i * ly.wo.inp + hh * dh + r] as f64);
                let sqk = core_singular_values(&r_of(fq), &kv_r[kv].0);
                let svo = core_singular_values(&r_of(fo), &kv_r[kv].1);
                HeadNorms {
                    layer: l,
                    head: hh,
                    qk_fro: sqk.iter().map(|s| s * s).sum::<f64>().sqrt(),
                    qk_nuc: sqk.iter().sum(),
                    vo_fro: svo.iter().map(|s| s * s).sum::<f64>().sqrt(),
                    vo_nuc: svo.iter().sum(),
                }
            })
            .collect();
        out.extend(layer);
    }
    out
}

/// The A1 corollary (and, when `verdicts`, the half-space verdicts, plain and homogenised when
/// the model has q/k biases) of each layer, computed from the layer's attention input while the
/// forward pass shows it, so one layer's rows are held at a time instead of every layer's.
struct A1Layers {
    verdicts: bool,
    biased: bool,
    corollaries: Vec<super::head_space::A1Corollary>,
    results: Vec<super::head_space::A1Verdict>,
    /// The first verdict that failed (returned after the pass; later layers are skipped).
    err: Option<RealError>,
}

impl LayerObserver for A1Layers {
    fn layer(&mut self, m: &Pretrained, t: &crate::runtime::forward::LayerTensors<'_>) {
        use super::head_space::{corollary, input_verdict, layer_inputs};
        if self.err.is_some() {
            return;
        }
        let x = layer_inputs(t.layer, t.attn_in, t.t, m.cfg.d_model);
        self.corollaries.push(corollary(&x));
        if self.verdicts {
            for biased in [false, true] {
                if biased && !self.biased {
                    continue;
                }
                match input_verdict(&x, biased) {
                    Ok(v) => self.results.push(v),
                    Err(e) => {
                        self.err = Some(e);
                        return;
                    }
                }
            }
        }
    }

    fn wants_layer_maps(&self) -> bool {
        false
    }
}

/// Runs the model on `tokens` and gathers the report (with the A1 convex solves when `with_a1`);
/// `extra` observes the same pass.
pub fn analyze(
    lm: &LoadedModel,
    tokens: &[u32],
    with_a1: bool,
    extra: &mut dyn LayerObserver,
) -> Result<RealReport, RealError> {
    let m = &lm.model;
    let mut stats = StatsObserver::default();
    let biased = m
        .layers
        .iter()
        .any(|l| l.wq.b.is_some() || l.wk.b.is_some());
    let mut a1 = A1Layers {
        verdicts: with_a1,
        biased,
        corollaries: Vec::new(),
        results: Vec::new(),
        err: None,
    };
    struct Both<'a> {
        a: &'a mut StatsObserver,
        c: &'a mut A1Layers,
        b: &'a mut dyn LayerObserver,
    }
    impl LayerObserver for Both<'_> {
        fn layer(&mut self, m: &Pretrained, t: &crate::runtime::forward::LayerTensors<'_>) {
            self.a.layer(m, t);
            self.c.layer(m, t);
            self.b.layer(m, t);
        }

        fn wants_layer_maps(&self) -> bool {
            self.a.wants_layer_maps() || self.c.wants_layer_maps() || self.b.wants_layer_maps()
        }

        fn head(&mut self, m: &Pretrained, map: &crate::runtime::forward::HeadMap<'_>) {
            self.a.head(m, map);
            self.c.head(m, map);
            self.b.head(m, map);
        }
    }
    let out = m.forward(
        tokens,
        &mut Both {
            a: &mut stats,
            c: &mut a1,
            b: extra,
        },
        None,
    )?;
    if let Some(e) = a1.err {
        return Err(e);
    }
    let a1_verdicts = with_a1.then_some(a1.results);
    let a1 = a1.corollaries;
    let nll_mean = if m.has_lm_head && tokens.len() > 1 {
        let v = m.next_token_nll(&out.normed, tokens)?;
        Some(v.iter().sum::<f64>() / v.len() as f64)
    } else {
        None
    };
    let bos_first = match m.cfg.arch {
        Arch::Bert => true,
        _ => m.cfg.bos_id.is_some_and(|b| tokens.first() == Some(&b)),
    };
    Ok(RealReport {
        model: lm.path.display().to_string(),
        config: m.cfg.clone(),
        tokens: tokens.to_vec(),
        bos_first,
        nll_mean,
        layers: stats.layers,
        head_costs: head_costs(m),
        a1,
        a1_verdicts,
        a2: None,
        a2_skill: None,
    })
}
