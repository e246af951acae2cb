//! The synthetic analogue of claim B3 (docs/theory.md §8): a multi-layer residual
//! model (f64) whose MLP at one layer maps a cone of inputs onto $\pm r\thinspace u$,
//! with $u$ the sink (BOS) direction. We measure, as functions of $r$, the
//! attention the created sinks receive and their lifetime under the §8 detector.
//!
//! **Model.** Orthonormal $u = e_0$ (sink direction) and $a = e_1$ (cone axis).
//! - BOS: $h^l_0 = n_l\thinspace u$ with $n_l = \rho_{hi}$ on $[l_{up}, l_{down})$ and $\rho_{lo}$
//!   elsewhere, so the detector's window is exactly $[l_{up}, l_{down})$.
//! - Tokens $t \ge 1$: embedding $x_t \perp u$, $\lVert x_t\rVert = 1$; "cone" tokens have
//!   $|\cos(x_t, a)| \ge \kappa_0 > \kappa$, the others $|\cos(x_t,a)| \le \kappa/2$.
//! - Layer $l$: $h^l_t = h^{l-1}\_t + m_l(h^{l-1}\_t) + \xi_{l,t}$ ($h^{-1}\_t = x_t$), with writes
//!   $\xi_{l,t} \sim \mathcal N(0, \eta^2 I/(d-2))$ in $\lbrace u, a\rbrace^\perp$ for $l \ge l_c$ and
//!   $0$ before (fixed by the seed, independent of $r$), and $m_l = 0$ except at the creation layer $l_c$:
//!   $$m_{l_c}(h) = r\thinspace\operatorname{sign}(a\cdot h)\thinspace u \thickspace\text{ if } |\cos(h, a)| \ge \kappa, \quad 0 \text{ otherwise.}$$
//!   (the limit of a steep ReLU pair gating on the cone).
//! - Probe head at every layer: a query bias $\beta u$ against RMS-normalised keys,
//!   $z^l_{ij} = \beta \cos(h^l_j, u)$ for $j \le i$, $A^l = $ causal row-softmax$(z^l)$.
//!   The head only reads (its output is not written back), so the residual
//!   stream, hence every non-cone token, does not depend on $r$.
//!
//! **Why monotone.** A cone token has $h^l_t = s\thinspace r\thinspace u + p^l_t$ for $l \ge l_c$
//! with $p^l_t \perp u$ independent of $r$, so $|\cos(h^l_t, h^l_0)| = r/\sqrt{r^2+\lVert p^l_t\rVert^2}$
//! grows with $r$ at every layer: the flagged set, hence the lifetime, can
//! only grow. With the other sinks' norms held fixed, for $s = +1$ its logit
//! $\beta\cos$ grows while every other logit is fixed, so each $A^l_{it}$, hence Gu's $\alpha_t$, grows; for $s = -1$ the
//! head (which reads $+u$) attends it less: the detector's $|\cos|$ flags it,
//! yet this head does not route mass to it.

use super::detector::{DetectError, DetectorParams, detect};
use super::hidden::HiddenStates;
use crate::patterns::gu_alpha;
use faer::Mat;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;
use serde::Serialize;

/// Configuration of the synthetic model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SyntheticConfig {
    /// Width $d$ (≥ 4).
    pub dim: usize,
    /// Positions $T$ (BOS included, ≥ 3).
    pub tokens: usize,
    /// Layers $L$.
    pub layers: usize,
    /// Creation layer $l_c$ (inside the window).
    pub creation_layer: usize,
    /// First layer of the BOS high-norm window.
    pub window_start: usize,
    /// End (exclusive) of the BOS high-norm window.
    pub window_end: usize,
    /// Cone half-width: the MLP fires iff $|\cos(h, a)| \ge \kappa$.
    pub kappa: f64,
    /// Number of cone tokens.
    pub cone_tokens: usize,
    /// Norm scale $\eta$ of each layer's write.
    pub noise: f64,
    /// Probe-head inverse temperature $\beta$.
    pub beta: f64,
    /// BOS norm outside / inside the window.
    pub rho: (f64, f64),
    /// Seed of embeddings, cone signs and writes.
    pub seed: u64,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        Self {
            dim: 32,
            tokens: 48,
            layers: 16,
            creation_layer: 5,
            window_start: 2,
            window_end: 14,
            kappa: 0.8,
            cone_tokens: 8,
            noise: 1.0,
            beta: 8.0,
            rho: (10.0, 60.0),
            seed: 0,
        }
    }
}

/// Errors of the synthetic model.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SyntheticError {
    /// Inconsistent configuration.
    #[error("synthetic model: {0}")]
    Config(String),
    /// The detector refused the states.
    #[error(transparent)]
    Detect(#[from] DetectError),
}

/// The drawn model: embeddings and writes, fixed once; $r$ varies per run.
#[derive(Clone, Debug)]
pub struct SyntheticModel {
    cfg: SyntheticConfig,
    /// Embeddings $x_t$, `[T][d]` (row 0 unused: the BOS is $n_l u$).
    emb: Vec<Vec<f64>>,
    /// Writes $\xi_{l,t}$, `[L][T][d]`.
    writes: Vec<Vec<Vec<f64>>>,
}

/// One measured token at one $r$.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SinkMeasure {
    /// Position.
    pub position: usize,
    /// Sign $s$ of the MLP output ($+1$ aligned with the BOS, $-1$ anti-aligned); 0 if the MLP did not fire.
    pub sign: i8,
    /// Lifetime under the detector (0 if never flagged).
    pub lifetime: usize,
    /// Creation layer under the detector (`None` if never flagged).
    pub creation_layer: Option<usize>,
    /// Attention received: Gu's $\alpha_t$ averaged over layers $l_c..L-1$.
    pub attention: f64,
}

fn unit_perp(rng: &mut StdRng, d: usize, avoid: usize) -> Vec<f64> {
    // Gaussian vector in span{e_avoid..e_{d-1}} (coordinates < avoid are zero), normalised.
    loop {
        let mut w: Vec<f64> = (0..d)
            .map(|i| {
                if i < avoid {
                    0.0
                } else {
                    rng.sample(StandardNormal)
                }
            })
            .collect();
        let n = crate::linalg::norm(&w);
        if n > 1e-8 {
            w.iter_mut().for_each(|v| *v /= n);
            return w;
        }
    }
}

impl SyntheticModel {
    /// Draws a model from its configuration.
    pub fn new(cfg: SyntheticConfig) -> Result<Self, SyntheticError> {
        let c = &cfg;
        let bad = |m: &str| Err(SyntheticError::Config(m.to_string()));
        if c.dim < 4 || c.tokens < 3 || c.layers < 2 {
            return bad("need dim >= 4, tokens >= 3, layers >= 2");
        }
        if !(c.window_start >= 1 && c.window_start < c.window_end && c.window_end <= c.layers) {
            return bad("need 1 <= window_start < window_end <= layers");
        }
        if !(c.window_start..c.window_end).contains(&c.creation_layer) {
            return bad("creation layer outside the window");
        }
        if !(c.kappa > 0.0 && c.kappa < 1.0) || c.cone_tokens >= c.tokens {
            return bad("need 0 < kappa < 1 and cone_tokens < tokens");
        }
        if !(c.noise >= 0.0 && c.beta.is_finite() && c.rho.0 > 0.0 && c.rho.1 > c.rho.0) {
            return bad("need noise >= 0, finite beta, 0 < rho_lo < rho_hi");
        }
        let mut rng = StdRng::seed_from_u64(c.seed);
        let d = c.dim;
        // Cone positions: a seeded sample of 1..T without replacement.
        let mut pos: Vec<usize> = (1..c.tokens).collect();
        for i in 0..c.cone_tokens {
            let j = rng.random_range(i..pos.len());
            pos.swap(i, j);
        }
        let cone: Vec<usize> = pos[..c.cone_tokens].to_vec();
        // Cone tokens sit at |cos| >= kappa0 = (1 + kappa)/2 > kappa with the axis,
        // the others at |cos| <= kappa/2; nothing is written before l_c, so the MLP
        // fires exactly on the cone tokens.
        let kappa0 = 0.5 * (1.0 + c.kappa);
        let mut emb = vec![vec![0.0; d]; c.tokens];
        for (t, e) in emb.iter_mut().enumerate().skip(1) {
            let w = unit_perp(&mut rng, d, 2);
            let ca = if cone.contains(&t) {
                let s = if rng.random::<bool>() { 1.0 } else { -1.0 };
                s * (kappa0 + (1.0 - kappa0) * rng.random::<f64>())
            } else {
                0.5 * c.kappa * (2.0 * rng.random::<f64>() - 1.0)
            };
            e[1] = ca;
            let sa = (1.0 - ca * ca).sqrt();
            for i in 2..d {
                e[i] = sa * w[i];
            }
        }
        let sd = c.noise / ((d - 2) as f64).sqrt();
        let writes = (0..c.layers)
            .map(|l| {
                (0..c.tokens)
                    .map(|t| {
                        (0..d)
                            .map(|i| {
                                if t == 0 || i < 2 || l < c.creation_layer {
                                    0.0
                                } else {
                                    sd * rng.sample::<f64, _>(StandardNormal)
                                }
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        Ok(Self { cfg, emb, writes })
    }

    /// The configuration.
    pub fn config(&self) -> &SyntheticConfig {
        &self.cfg
    }

    /// Runs the model with MLP norm `r`: hidden states $h^l_t$ and the sign the
    /// MLP gave each token (0 where it did not fire).
    pub fn forward(&self, r: f64) -> (HiddenStates<f64>, Vec<i8>) {
        self.forward_each(&vec![r; self.cfg.tokens])
    }

    /// Runs the model with MLP norm `rs[t]` for token `t` (`rs.len()` must be T).
    pub fn forward_each(&self, rs: &[f64]) -> (HiddenStates<f64>, Vec<i8>) {
        let c = &self.cfg;
        assert_eq!(rs.len(), c.tokens, "one r per position");
        let (d, tn, ln) = (c.dim, c.tokens, c.layers);
        let mut data = vec![0.0; ln * tn * d];
        let mut signs = vec![0i8; tn];
        for (t, sign) in signs.iter_mut().enumerate().skip(1) {
            let mut h = self.emb[t].clone();
            for l in 0..ln {
                if l == c.creation_layer {
                    let n = crate::linalg::norm(&h);
                    if n > 0.0 && (h[1] / n).abs() >= c.kappa {
                        let s = if h[1] >= 0.0 { 1.0 } else { -1.0 };
                        h[0] += s * rs[t];
                        *sign = s as i8;
                    }
                }
                for (hv, w) in h.iter_mut().zip(&self.writes[l][t]) {
                    *hv += w;
                }
                let o = (l * tn + t) * d;
                data[o..o + d].copy_from_slice(&h);
            }
        }
        for l in 0..ln {
            let in_window = (c.window_start..c.window_end).contains(&l);
            data[l * tn * d] = if in_window { c.rho.1 } else { c.rho.0 };
        }
        (
            HiddenStates::new(ln, tn, d, data).expect("shape is consistent by construction"),
            signs,
        )
    }

    /// Attention of the probe head at layer `l`: $A_{ij} \propto \exp(\beta\cos(h^l_j, u))$, $j \le i$.
    pub fn attention(&self, h: &HiddenStates<f64>, l: usize) -> Mat<f64> {
        let tn = h.tokens();
        let z: Vec<f64> = (0..tn)
            .map(|j| {
                let s = h.state(l, j);
                let n = crate::linalg::norm(s);
                if n > 0.0 {
                    self.cfg.beta * s[0] / n
                } else {
                    0.0
                }
            })
            .collect();
        let mut a = Mat::<f64>::zeros(tn, tn);
        for i in 0..tn {
            let mut row = z[..=i].to_vec();
            crate::linalg::softmax_in_place(&mut row);
            for (j, v) in row.into_iter().enumerate() {
                a[(i, j)] = v;
            }
        }
        a
    }

    /// The model's activations in the crate's file schema, with MLP norm `rs[t]`
    /// for token `t`: hidden states, the probe head's attention (one head),
    /// the MLP outputs (non-zero only at the creation layer), token ids = positions.
    pub fn activations(&self, rs: &[f64]) -> super::activations::Activations {
        use super::activations::{Activations, HeadTensor};
        let (h, signs) = self.forward_each(rs);
        let (ln, tn, d) = (h.layers(), h.tokens(), h.dim());
        let attn = (0..ln)
            .map(|l| {
                let a = self.attention(&h, l);
                HeadTensor {
                    heads: 1,
                    tokens: tn,
                    width: tn,
                    data: (0..tn * tn).map(|k| a[(k / tn, k % tn)] as f32).collect(),
                }
            })
            .collect();
        let mut mlp = vec![0.0f32; ln * tn * d];
        for (t, &s) in signs.iter().enumerate() {
            if s != 0 {
                mlp[(self.cfg.creation_layer * tn + t) * d] = (s as f64 * rs[t]) as f32;
            }
        }
        Activations {
            hidden: HiddenStates::new(ln, tn, d, h.data().iter().map(|&v| v as f32).collect())
                .expect("same shape"),
            attn: Some(attn),
            mlp_out: Some(HiddenStates::new(ln, tn, d, mlp).expect("same shape")),
            keys: None,
            values: None,
            tokens: Some((0..tn as i64).collect()),
            metadata: [(
                "model".to_string(),
                "sinklab synthetic secondary-sink model".to_string(),
            )]
            .into(),
        }
    }

    /// Measures every token at MLP norm `r` with the detector parameters `p`
    /// (its BOS candidates are forced to position 0).
    pub fn measure(&self, r: f64, p: &DetectorParams) -> Result<Vec<SinkMeasure>, SyntheticError> {
        self.measure_each(&vec![r; self.cfg.tokens], p)
    }

    /// Measures every token with MLP norm `rs[t]` for token `t`.
    pub fn measure_each(
        &self,
        rs: &[f64],
        p: &DetectorParams,
    ) -> Result<Vec<SinkMeasure>, SyntheticError> {
        let (h, signs) = self.forward_each(rs);
        let p = DetectorParams {
            bos_candidates: vec![0],
            ..p.clone()
        };
        let det = detect(&h, &p)?;
        let lc = self.cfg.creation_layer;
        let alphas: Vec<Vec<f64>> = (lc..h.layers())
            .map(|l| gu_alpha(self.attention(&h, l).as_ref()))
            .collect();
        let n_l = alphas.len() as f64;
        Ok((1..h.tokens())
            .map(|t| {
                let s = det.sinks.iter().find(|s| s.position == t);
                SinkMeasure {
                    position: t,
                    sign: signs[t],
                    lifetime: s.map_or(0, |s| s.lifetime),
                    creation_layer: s.map(|s| s.creation_layer),
                    attention: alphas.iter().map(|a| a[t]).sum::<f64>() / n_l,
                }
            })
            .collect())
    }
}

/// Outcome of one monotonicity check (one model, a grid of $r$).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MonotoneReport {
    /// The grid of $r$.
    pub rs: Vec<f64>,
    /// Per $r$: the measures of the cone tokens (each at its own sweep point).
    pub measures: Vec<Vec<SinkMeasure>>,
    /// Smallest step of the attention of aligned sinks along the grid (≥ 0 iff non-decreasing).
    pub min_step_attention_aligned: f64,
    /// Largest step of the attention of anti-aligned sinks (≤ 0 iff non-increasing).
    pub max_step_attention_anti: f64,
    /// Smallest step of any sink's lifetime (≥ 0 iff non-decreasing).
    pub min_step_lifetime: i64,
    /// Tokens the detector flagged whose MLP did not fire (must be empty).
    pub spurious: Vec<usize>,
    /// Aligned / anti-aligned cone tokens.
    pub counts: (usize, usize),
}

/// Sweeps `rs` (increasing) on one model and collects the steps.
///
/// Each cone token's MLP norm runs over `rs` while every other cone token's
/// stays at `others`: the statement is per sink, the other sinks fixed (when
/// all sinks grow together they compete for the same queries, and one sink's
/// share can fall).
pub fn monotone_sweep(
    model: &SyntheticModel,
    rs: &[f64],
    others: f64,
    p: &DetectorParams,
) -> Result<MonotoneReport, SyntheticError> {
    let tn = model.cfg.tokens;
    // Cone membership is decided before the creation layer, so it does not depend on r.
    let cone: Vec<usize> = model
        .forward(0.0)
        .1
        .iter()
        .enumerate()
        .filter(|(_, s)| **s != 0)
        .map(|(t, _)| t)
        .collect();
    let mut measures: Vec<Vec<SinkMeasure>> = vec![Vec::with_capacity(cone.len()); rs.len()];
    let mut spurious = Vec::new();
    for &t in &cone {
        for (k, &r) in rs.iter().enumerate() {
            let mut each = vec![others; tn];
            each[t] = r;
            let m = model.measure_each(&each, p)?;
            spurious.extend(
                m.iter()
                    .filter(|s| s.sign == 0 && s.lifetime > 0)
                    .map(|s| s.position),
            );
            measures[k].push(m[t - 1].clone());
        }
    }
    spurious.sort_unstable();
    spurious.dedup();
    let (mut min_a, mut max_anti, mut min_l) = (f64::INFINITY, f64::NEG_INFINITY, i64::MAX);
    for w in measures.windows(2) {
        for (a, b) in w[0].iter().zip(&w[1]) {
            debug_assert_eq!(a.position, b.position);
            let da = b.attention - a.attention;
            if a.sign > 0 {
                min_a = min_a.min(da);
            } else {
                max_anti = max_anti.max(da);
            }
            min_l = min_l.min(b.lifetime as i64 - a.lifetime as i64);
        }
    }
    let first = measures.first().map_or(&[][..], |v| &v[..]);
    let counts = (
        first.iter().filter(|s| s.sign > 0).count(),
        first.iter().filter(|s| s.sign < 0).count(),
    );
    Ok(MonotoneReport {
        rs: rs.to_vec(),
        measures,
        min_step_attention_aligned: min_a,
        max_step_attention_anti: max_anti,
        min_step_lifetime: if min_l == i64::MAX { 0 } else { min_l },
        spurious,
        counts,
    })
}

/// A random configuration for case `seed` of the monotonicity check.
pub fn random_config(seed: u64) -> SyntheticConfig {
    let mut rng = StdRng::seed_from_u64(seed);
    let layers = rng.random_range(8..=24);
    let window_start = rng.random_range(1..=3);
    let window_end = rng.random_range(window_start + 3..=layers - 1);
    let creation_layer = rng.random_range(window_start..window_end - 1);
    let tokens = rng.random_range(12..=64);
    SyntheticConfig {
        dim: rng.random_range(8..=48),
        tokens,
        layers,
        creation_layer,
        window_start,
        window_end,
        kappa: rng.random_range(0.5..0.9),
        cone_tokens: rng.random_range(2..=6).min(tokens - 2),
        noise: rng.random_range(0.3..2.0),
        beta: rng.random_range(2.0..12.0),
        rho: (10.0, rng.random_range(30.0..100.0)),
        seed: rng.random(),
    }
}

/// The grid of $r$ used by the check: 0 to $4(1 + \eta\sqrt{L})$ in 25 steps, far
/// enough that $r/\sqrt{r^2+\lVert p\rVert^2} > 0.9$ on every layer after creation
/// ($\lVert p\rVert^2 \approx 1 + \eta^2 (L - l_c)$).
pub fn r_grid(cfg: &SyntheticConfig) -> Vec<f64> {
    let r_max = 4.0 * (1.0 + cfg.noise * (cfg.layers as f64).sqrt());
    (0..25).map(|k| r_max * k as f64 / 24.0).collect()
}

/// Theorem check `secondary_monotone` (claim B3, synthetic): on random
/// synthetic models, along an increasing grid of $r$, the attention received
/// by aligned sinks never decreases, the lifetime of every cone sink never
/// decreases, it is 0 at $r = 0$ and positive at the top of the grid, and the
/// detector flags no token the MLP did not write.
pub fn check_monotone(cases: usize, seed: u64) -> crate::outcome::CheckOutcome {
    // Softmax and averages in f64 over <= 64 terms: rounding <= 1e-14, so a
    // step below -1e-12 is a real decrease, not rounding.
    const TOL: f64 = 1e-12;
    let mut out = crate::outcome::CheckOutcome::new(
        "secondary_monotone",
        "smallest step of aligned-sink attention along r",
    );
    for k in 0..cases {
        let cfg = random_config(
            seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(k as u64),
        );
        let rs = r_grid(&cfg);
        let others = rs[rs.len() / 2];
        let res = SyntheticModel::new(cfg.clone())
            .and_then(|m| monotone_sweep(&m, &rs, others, &DetectorParams::default()));
        match res {
            Err(e) => out.record(false, f64::NAN, || format!("case {k}: {e}")),
            Ok(rep) => {
                let first = rep.measures.first().cloned().unwrap_or_default();
                let last = rep.measures.last().cloned().unwrap_or_default();
                let vacuous = first.iter().any(|s| s.lifetime != 0)
                    || last.iter().any(|s| s.lifetime == 0)
                    || last.is_empty();
                let ok = rep.min_step_attention_aligned >= -TOL
                    && rep.min_step_lifetime >= 0
                    && rep.spurious.is_empty()
                    && !vacuous;
                let margin = if rep.min_step_lifetime < 0 {
                    rep.min_step_lifetime as f64
                } else {
                    rep.min_step_attention_aligned
                };
                out.record(ok, margin, || {
                    format!(
                        "case {k} ({cfg:?}): attention step {:.3e}, lifetime step {}, spurious {:?}, vacuous {vacuous}",
                        rep.min_step_attention_aligned, rep.min_step_lifetime, rep.spurious
                    )
                });
            }
        }
    }
    out
}
