//! A training loop that lives entirely on a [`Backend`]: one causal
//! self-attention head fitted with AdamW to a planted teacher head (an experiment
//! on the kernels, kept out of the kernel layer `crate::backend`).
//!
//! Inputs $X_b \in \mathbb{R}^{T\times d}$ ($b < B$), student weights
//! $W_Q, W_K, W_V \in \mathbb{R}^{d\times d}$:
//! $Q_b = X_b W_Q$, $K_b = X_b W_K$, $V_b = X_b W_V$,
//! $A_b = \mathrm{softmax}\_{\text{causal}}(Q_b K_b^\top/\sqrt d)$, $O_b = A_b V_b$,
//! loss $L = \frac{1}{2N}\sum_b \lVert O_b - Y_b\rVert_F^2$ with $N = B T d$ and $Y$ the
//! output of a teacher head with other weights. Backward:
//! $\partial O = (O - Y)/N$, $\partial A = \partial O\thinspace V^\top$, $\partial V = A^\top \partial O$,
//! $\partial S$ = softmax backward, $\partial Q = \partial S\thinspace K$, $\partial K = \partial S^\top Q$,
//! $\partial W_Q = \sum_b X_b^\top \partial Q_b$ (one product over the reshaped batch), etc.
//!
//! Weights, moments, activations and gradients are allocated once on the
//! backend and overwritten every step; the only read-back is the output $O$
//! when the caller asks for the loss. The same code runs on every backend,
//! so it is the end-to-end check that CPU and GPU train alike
//! (`tests/backend.rs`) and the "one training step" of `benches/backend.rs`.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::backend::{AdamWHyper, Backend, Op, Real, Result, Shape, SoftmaxMask};

/// Sizes and optimiser of an [`AttnFit`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnFitConfig {
    /// Sequences per step $B$.
    pub batch: usize,
    /// Sequence length $T$.
    pub t: usize,
    /// Width $d$.
    pub d: usize,
    /// Seed of the inputs, the teacher and the initial student.
    pub seed: u64,
    /// Optimiser.
    pub adamw: AdamWHyper,
}

/// One attention head and its training state, resident on a backend.
pub struct AttnFit<B: Backend> {
    cfg: AttnFitConfig,
    y_host: Vec<f64>,
    x: B::Tensor,
    y: B::Tensor,
    w: [B::Tensor; 3],
    g: [B::Tensor; 3],
    m: [B::Tensor; 3],
    v: [B::Tensor; 3],
    /// Q, K, V, then dQ, dK, dV (each B×T×d).
    qkv: [B::Tensor; 3],
    dqkv: [B::Tensor; 3],
    a: B::Tensor,
    /// Scores S, reused for dA in the backward pass.
    s: B::Tensor,
    ds: B::Tensor,
    o: B::Tensor,
    d_o: B::Tensor,
    steps: u64,
}

fn weights(rng: &mut StdRng, d: usize, scale: f64) -> Vec<f64> {
    (0..d * d)
        .map(|_| scale * rng.random_range(-1.0..1.0))
        .collect()
}

impl<B: Backend> AttnFit<B> {
    /// Draws inputs and teacher/student weights from `cfg.seed` (identical on
    /// every backend, up to rounding to its precision) and computes the targets.
    pub fn new(be: &B, cfg: AttnFitConfig) -> Result<Self> {
        let (b, t, d) = (cfg.batch, cfg.t, cfg.d);
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let act = Shape::new(b, t, d);
        let wsh = Shape::mat(d, d);
        let x: Vec<f64> = (0..act.len())
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let x = be.upload_f64(act, &x)?;
        // Teacher weights of scale 2/√d: sharp but not saturated attention.
        let ws = 2.0 / (d as f64).sqrt();
        let teacher = [
            weights(&mut rng, d, ws),
            weights(&mut rng, d, ws),
            weights(&mut rng, d, ws),
        ];
        let student = [
            weights(&mut rng, d, ws),
            weights(&mut rng, d, ws),
            weights(&mut rng, d, ws),
        ];
        let z = |s: Shape| be.zeros(s);
        let mut me = Self {
            cfg,
            y_host: Vec::new(),
            y: z(act)?,
            w: [
                be.upload_f64(wsh, &teacher[0])?,
                be.upload_f64(wsh, &teacher[1])?,
                be.upload_f64(wsh, &teacher[2])?,
            ],
            g: [z(wsh)?, z(wsh)?, z(wsh)?],
            m: [z(wsh)?, z(wsh)?, z(wsh)?],
            v: [z(wsh)?, z(wsh)?, z(wsh)?],
            qkv: [z(act)?, z(act)?, z(act)?],
            dqkv: [z(act)?, z(act)?, z(act)?],
            a: z(Shape::new(b, t, t))?,
            s: z(Shape::new(b, t, t))?,
            ds: z(Shape::new(b, t, t))?,
            o: z(act)?,
            d_o: z(act)?,
            x,
            steps: 0,
        };
        // Targets: the teacher's output, computed on this backend.
        me.forward(be)?;
        me.y_host = be.read_f64(&me.o)?;
        me.y = be.upload_f64(act, &me.y_host)?;
        for (w, s) in me.w.iter_mut().zip(&student) {
            be.write(
                w,
                &s.iter().map(|&v| B::Elem::from_f64(v)).collect::<Vec<_>>(),
            )?;
        }
        Ok(me)
    }

    fn scale(&self) -> f64 {
        1.0 / (self.cfg.d as f64).sqrt()
    }

    fn forward(&mut self, be: &B) -> Result<()> {
        for (w, out) in self.w.iter().zip(self.qkv.iter_mut()) {
            be.matmul(1.0, &self.x, Op::N, w, Op::N, 0.0, out)?;
        }
        let [q, k, v] = &self.qkv;
        be.matmul(1.0, q, Op::N, k, Op::T, 0.0, &mut self.s)?;
        be.softmax_rows(&self.s, self.scale(), SoftmaxMask::Causal, &mut self.a)?;
        be.matmul(1.0, &self.a, Op::N, v, Op::N, 0.0, &mut self.o)
    }

    /// One AdamW step (forward, backward, update), with no read-back.
    pub fn step(&mut self, be: &B) -> Result<()> {
        self.forward(be)?;
        let (b, t, d) = (self.cfg.batch, self.cfg.t, self.cfg.d);
        let n = (b * t * d) as f64;
        let scale = self.scale();
        // dO = (O − Y)/N.
        be.axpby(1.0 / n, &self.o, 0.0, &mut self.d_o)?;
        be.axpby(-1.0 / n, &self.y, 1.0, &mut self.d_o)?;
        let [q, k, v] = &self.qkv;
        let [dq, dk, dv] = &mut self.dqkv;
        // dA (into s) and dV.
        be.matmul(1.0, &self.d_o, Op::N, v, Op::T, 0.0, &mut self.s)?;
        be.matmul(1.0, &self.a, Op::T, &self.d_o, Op::N, 0.0, dv)?;
        // dS, then dQ = dS K and dK = dSᵀ Q.
        be.softmax_rows_backward(&self.a, &self.s, scale, &mut self.ds)?;
        be.matmul(1.0, &self.ds, Op::N, k, Op::N, 0.0, dq)?;
        be.matmul(1.0, &self.ds, Op::T, q, Op::N, 0.0, dk)?;
        // dW = Σ_b X_bᵀ dZ_b as one product over the stacked batch.
        let flat = Shape::mat(b * t, d);
        be.reshape(&mut self.x, flat)?;
        for (dz, g) in self.dqkv.iter_mut().zip(self.g.iter_mut()) {
            be.reshape(dz, flat)?;
            be.matmul(1.0, &self.x, Op::T, dz, Op::N, 0.0, g)?;
            be.reshape(dz, Shape::new(b, t, d))?;
        }
        be.reshape(&mut self.x, Shape::new(b, t, d))?;
        self.steps += 1;
        let h = self.cfg.adamw;
        let (w, g, m, v) = (&mut self.w, &self.g, &mut self.m, &mut self.v);
        crate::backend::adamw_each(be, |_| h, self.steps, w, g, m, v)
    }

    /// Loss of the current weights (a forward pass and one read-back of $O$).
    pub fn loss(&mut self, be: &B) -> Result<f64> {
        self.forward(be)?;
        let o = be.read_f64(&self.o)?;
        let n = o.len() as f64;
        Ok(o.iter()
            .zip(&self.y_host)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f64>()
            / (2.0 * n))
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }
}
