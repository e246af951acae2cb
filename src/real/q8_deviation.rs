//! What the opt-in q8 product ([`Matmul::Q8`]) changes on one input, measured against the
//! exact product on the same model and tokens.
//!
//! Reported: the largest `|Δ logit|`, the largest `|Δ A[h, i, 0]|` (attention to the first
//! token, every layer, head and query), the change of the mean next-token loss, and the
//! largest ratio `|Δ y| / bound` over the projections q, k, v, o, gate and up of every layer,
//! each recomputed in both modes on the q8 run's own inputs (rows 0 and T−1), where the bound
//! is [`q8_bound`]'s rigorous per-output bound from the Q8 rounding. The ratio is ≤ 1 by
//! construction of that bound; the downstream deviations (logits, attention, loss) have no
//! such bound through the nonlinear layers and are reported as measured.

use crate::runtime::RealError;
use crate::runtime::forward::{LayerObserver, LayerTensors, linear_with};
use crate::runtime::pretrained::{Linear, Matmul, Pretrained};
use crate::runtime::weights::{WeightType, q8_bound};
use candle_core::quantized::GgmlDType;

/// Deviation of the q8 mode from the exact mode on one input.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Q8Deviation {
    /// Projections whose weights are quantized (the only ones q8 changes).
    pub quantized_projections: usize,
    /// `max |logit_q8 − logit_exact|` over all positions and the vocabulary (None: no LM head).
    pub max_abs_logit: Option<f64>,
    /// `max |A_q8[h,i,0] − A_exact[h,i,0]|` over layers, heads and queries.
    pub max_abs_attn_first: f64,
    /// Mean next-token loss, exact mode (nats; None without an LM head or with one token).
    pub loss_exact: Option<f64>,
    /// Mean next-token loss, q8 mode.
    pub loss_q8: Option<f64>,
    /// `max |Δ y| / bound` over the checked projection outputs (≤ 1 when the bound holds).
    pub max_bound_ratio: f64,
}

/// Attention to the first key of every layer, and the bound check of the projections.
struct Probe {
    first: Vec<f32>,
    ratio: f64,
    check: bool,
}

fn ratio_of(lin: &Linear, x: &[f32], t: usize, ratio: &mut f64) {
    if !lin.w.is_quantized() {
        return;
    }
    let d = lin.inp;
    let rows: Vec<usize> = if t > 1 { vec![0, t - 1] } else { vec![0] };
    let mut w = vec![0f32; d];
    for i in rows {
        let xi = &x[i * d..(i + 1) * d];
        let (e, q) = (
            linear_with(xi, 1, lin, Matmul::Exact),
            linear_with(xi, 1, lin, Matmul::Q8),
        );
        for r in 0..lin.out {
            lin.w.row_f32(r, &mut w);
            let WeightType::Ggml(dt) = lin.w.dtype() else {
                return;
            };
            let b = q8_bound(dt, &w, xi);
            let dev = (q[r] as f64 - e[r] as f64).abs();
            if dev > 0.0 {
                *ratio = ratio.max(if b > 0.0 { dev / b } else { f64::INFINITY });
            }
        }
    }
}

impl LayerObserver for Probe {
    fn layer(&mut self, m: &Pretrained, t: &LayerTensors<'_>) {
        let h = m.cfg.n_head;
        for hh in 0..h {
            for i in 0..t.t {
                self.first.push(t.attn[(hh * t.t + i) * t.t_keys]);
            }
        }
        if !self.check {
            return;
        }
        let ly = &m.layers[t.layer];
        for lin in [&ly.wq, &ly.wk, &ly.wv] {
            ratio_of(lin, t.attn_in, t.t, &mut self.ratio);
        }
        ratio_of(&ly.wo, t.head_out, t.t, &mut self.ratio);
        if !m.cfg.post_norm {
            let mut m_in = t.resid_mid.to_vec();
            if let Some(n) = &ly.ffn_norm {
                n.apply(&mut m_in);
            }
            if let Some(mlp) = ly.ffn.dense() {
                for lin in mlp.gate.iter().chain([&mlp.up]) {
                    ratio_of(lin, &m_in, t.t, &mut self.ratio);
                }
            }
        }
    }
}

/// Runs `tokens` in both modes and measures the q8 deviation; `m.matmul` is restored.
pub fn measure(m: &mut Pretrained, tokens: &[u32]) -> Result<Q8Deviation, RealError> {
    // candle's q8 dot products of Q4_1, Q5_0 and Q5_1 take their blocks two at a time: a row
    // of an odd number of blocks is outside what they compute.
    for (what, w) in m.matrices() {
        let WeightType::Ggml(dt) = w.dtype() else {
            continue;
        };
        if matches!(dt, GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1)
            && !(w.n_cols() / 32).is_multiple_of(2)
        {
            return Err(RealError::Input(format!(
                "--matmul q8: the {what} ({dt:?}, {} columns) has an odd number of 32-value \
                 blocks per row, which the q8 dot product of {dt:?} does not handle; use \
                 --matmul exact",
                w.n_cols()
            )));
        }
    }
    let saved = m.matmul;
    let run = |m: &mut Pretrained, mode: Matmul| -> Result<_, RealError> {
        m.matmul = mode;
        let mut p = Probe {
            first: Vec::new(),
            ratio: 0.0,
            check: mode == Matmul::Q8,
        };
        let out = m.forward(tokens, &mut p, None)?;
        let loss = if m.has_lm_head && tokens.len() > 1 {
            let nll = m.next_token_nll(&out.normed, tokens)?;
            Some(nll.iter().sum::<f64>() / nll.len() as f64)
        } else {
            None
        };
        Ok((out, p, loss))
    };
    let res = (|| {
        let (oe, pe, le) = run(m, Matmul::Exact)?;
        let (oq, pq, lq) = run(m, Matmul::Q8)?;
        let max_abs_logit = if m.has_lm_head {
            let d = m.cfg.d_model;
            let mut mx = 0f64;
            for (ce, cq) in oe.normed.chunks(64 * d).zip(oq.normed.chunks(64 * d)) {
                m.matmul = Matmul::Exact;
                let a = m.logits(ce)?;
                m.matmul = Matmul::Q8;
                let b = m.logits(cq)?;
                for (x, y) in a.iter().zip(&b) {
                    mx = mx.max((*x as f64 - *y as f64).abs());
                }
            }
            Some(mx)
        } else {
            None
        };
        let max_abs_attn_first = pe
            .first
            .iter()
            .zip(&pq.first)
            .fold(0f64, |mx, (a, b)| mx.max((*a as f64 - *b as f64).abs()));
        let quantized_projections = m
            .layers
            .iter()
            .flat_map(|ly| {
                [&ly.wq, &ly.wk, &ly.wv, &ly.wo]
                    .into_iter()
                    .chain(ly.ffn.linears().into_iter().map(|(_, l)| l))
            })
            .chain(m.lm_head.as_ref())
            .filter(|l| l.w.is_quantized())
            .count()
            + usize::from(m.lm_head.is_none() && m.has_lm_head && m.embed.is_quantized());
        Ok(Q8Deviation {
            quantized_projections,
            max_abs_logit,
            max_abs_attn_first,
            loss_exact: le,
            loss_q8: lq,
            max_bound_ratio: pq.ratio,
        })
    })();
    m.matmul = saved;
    res
}

impl Q8Deviation {
    /// One line for the terminal.
    pub fn line(&self) -> String {
        let f = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.3e}"));
        let dl = match (self.loss_exact, self.loss_q8) {
            (Some(a), Some(b)) => format!("{:+.3e}", b - a),
            _ => "—".into(),
        };
        format!(
            "q8 matmul vs exact ({} quantized projections): max |Δ logit| {}, max |Δ attention to first token| {:.3e}, Δ loss {dl} nats, max |Δ projection| / Q8 rounding bound {:.3}",
            self.quantized_projections,
            f(self.max_abs_logit),
            self.max_abs_attn_first,
            self.max_bound_ratio
        )
    }
}
