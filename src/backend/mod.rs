//! Dense kernels behind one trait, so that training and forward passes run
//! unchanged on the CPU (faer, f64 or f32) and on a GPU (wgpu, f32).
//!
//! A tensor is a *batch* of equal-shaped row-major matrices, `Shape { batch,
//! rows, cols }`. The kernels are the ones a small attention model spends its
//! time in:
//!
//! - batched matmul with optional transposes,
//!   $C_b \leftarrow \alpha\thinspace\mathrm{op}(A_b)\thinspace\mathrm{op}(B_b) + \beta\thinspace C_b$,
//!   where an operand with batch 1 is broadcast over the batch of `C`
//!   (one weight matrix against a batch of activations);
//! - row softmax $Y = \mathrm{softmax}\_{\text{row}}(s\thinspace X)$ with an optional
//!   causal mask (key $j$ visible to query $i$ iff $j \le i$; masked entries
//!   are exactly 0), and its backward
//!   $\partial X = s\thinspace Y \odot (\partial Y - \mathrm{rowsum}(Y \odot \partial Y))$;
//! - `axpby` ($y \leftarrow a x + b y$) and the fused AdamW update, so weights,
//!   gradients and optimiser moments can stay on the device across steps;
//! - what a token model needs besides: embedding gather (+ positional rows)
//!   and its scatter-add backward, ReLU and its backward, and softmax
//!   cross-entropy with its gradient, so the training model of
//!   [`crate::train`] runs a whole step on the device (`train::device`).
//!
//! Token ids travel as tensors of [`Backend::Elem`] holding integers (exact
//! below $2^{24}$ in f32; callers check ids against the vocabulary).
//!
//! Tensors live where the backend computes ([`Backend::Tensor`]): the GPU
//! backend's [`gpu::GpuTensor`] is a device buffer, created once and
//! overwritten by every kernel that writes it; only [`Backend::read`] copies
//! back to the host. Which backend runs is chosen at run time with
//! [`BackendKind`] (`cpu | gpu | auto`) and [`select`].

pub mod cpu;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod real;
pub mod simd;

use std::fmt;
use std::str::FromStr;

pub use cpu::{Cpu, CpuTensor};
#[cfg(feature = "gpu")]
pub use gpu::{GpuOptions, GpuStats, GpuTensor, MatmulKernel, Wgpu};
pub use real::Real;
pub use simd::exp_f32;

/// Errors of the dense backends. GPU failures (no adapter, lost device,
/// out-of-memory, a buffer over the adapter's limits, a wait that never ends)
/// come back as values, never as panics or hangs.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Operand shapes do not fit the kernel.
    #[error("shape mismatch in {op}: {detail}")]
    Shape { op: &'static str, detail: String },
    /// Host data length differs from the tensor's element count.
    #[error("data of length {got} for a tensor of {expected} elements")]
    DataLength { expected: usize, got: usize },
    /// Unknown `--backend` value.
    #[error("unknown backend {0:?}: expected cpu, gpu or auto")]
    Parse(String),
    /// No usable GPU adapter on this machine.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    /// The adapter refused to create a device.
    #[error("could not open a device on {adapter}: {reason}")]
    RequestDevice { adapter: String, reason: String },
    /// The device was lost (driver reset, device removed, destroyed).
    #[error("GPU device lost: {0}")]
    DeviceLost(String),
    /// The device ran out of memory.
    #[error("GPU out of memory during {0}")]
    OutOfMemory(String),
    /// A buffer would exceed one of the adapter's limits.
    #[error("{what} needs a buffer of {bytes} bytes, over the device limit {which} = {limit}")]
    BufferTooLarge {
        what: String,
        bytes: u64,
        which: &'static str,
        limit: u64,
    },
    /// A dispatch would exceed the device's workgroup-count limit.
    #[error("{what} needs {groups} workgroups in one dimension, over the device limit {limit}")]
    TooManyWorkgroups {
        what: String,
        groups: u64,
        limit: u32,
    },
    /// The device did not finish within the configured timeout.
    #[error("GPU did not finish {what} within {secs:.1} s")]
    Timeout { what: String, secs: f64 },
    /// wgpu reported a validation or internal error (a bug in this crate or
    /// the driver, reported instead of aborting).
    #[error("GPU error during {what}: {msg}")]
    Gpu { what: String, msg: String },
    /// `gpu` asked of a build without the `gpu` feature (no wgpu compiled in).
    #[error("backend gpu: this build of sinklab has no GPU backend (enable its `gpu` feature)")]
    NotBuilt,
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, BackendError>;

/// Shape of a batch of equal-shaped row-major matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    pub batch: usize,
    pub rows: usize,
    pub cols: usize,
}

impl Shape {
    /// A batch of `batch` matrices of `rows × cols`.
    pub const fn new(batch: usize, rows: usize, cols: usize) -> Self {
        Self { batch, rows, cols }
    }
    /// One `rows × cols` matrix.
    pub const fn mat(rows: usize, cols: usize) -> Self {
        Self::new(1, rows, cols)
    }
    /// Elements per matrix.
    pub const fn mat_len(&self) -> usize {
        self.rows * self.cols
    }
    /// Elements in the whole batch.
    pub const fn len(&self) -> usize {
        self.batch * self.rows * self.cols
    }
    /// True when the tensor holds no element.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}×{}×{}", self.batch, self.rows, self.cols)
    }
}

/// Whether a matmul operand enters as stored (`N`) or transposed (`T`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    N,
    T,
}

impl Op {
    /// `(rows, cols)` of `op(X)` for a stored `rows × cols` matrix.
    pub fn dims(self, s: Shape) -> (usize, usize) {
        match self {
            Op::N => (s.rows, s.cols),
            Op::T => (s.cols, s.rows),
        }
    }
}

/// Attention mask of the row softmax.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SoftmaxMask {
    /// Every key visible.
    None,
    /// Key $j$ visible to query $i$ iff $j \le i$ (row index inside its matrix).
    Causal,
    /// Causal, and key 0 hidden from every query $i \ge 1$: key $j$ visible iff
    /// $j \le i$ and ($j \ge 1$ or $i = 0$) (a model whose BOS key is unavailable as a sink).
    CausalNoFirstKey,
}

impl SoftmaxMask {
    /// The visible keys `lo..hi` of query row `i` among `cols` keys.
    pub fn visible(self, i: usize, cols: usize) -> (usize, usize) {
        match self {
            SoftmaxMask::None => (0, cols),
            SoftmaxMask::Causal => (0, (i + 1).min(cols)),
            SoftmaxMask::CausalNoFirstKey => (usize::from(i >= 1), (i + 1).min(cols)),
        }
    }
}

/// Hyper-parameters of decoupled-weight-decay Adam (AdamW, Loshchilov &
/// Hutter, "Decoupled Weight Decay Regularization", arXiv:1711.05101).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWHyper {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWHyper {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// Shape checks shared by every backend: returns `(m, n, k)` of
/// `C = op(A) op(B)` after checking the batch broadcast rule.
pub fn matmul_dims(
    a: Shape,
    op_a: Op,
    b: Shape,
    op_b: Op,
    c: Shape,
) -> Result<(usize, usize, usize)> {
    let (m, k) = op_a.dims(a);
    let (kb, n) = op_b.dims(b);
    let err = |detail: String| {
        Err(BackendError::Shape {
            op: "matmul",
            detail,
        })
    };
    if k != kb {
        return err(format!(
            "inner dimensions differ: op(A) is {m}×{k}, op(B) is {kb}×{n}"
        ));
    }
    if (c.rows, c.cols) != (m, n) {
        return err(format!(
            "C is {}×{}, op(A)·op(B) is {m}×{n}",
            c.rows, c.cols
        ));
    }
    for (name, s) in [("A", a), ("B", b)] {
        if s.batch != c.batch && s.batch != 1 {
            return err(format!(
                "{name} has batch {}, C has batch {} (need equal or 1)",
                s.batch, c.batch
            ));
        }
    }
    Ok((m, n, k))
}

/// One AdamW step ([`Backend::adamw`], step number `t`) of every parameter `p[k]` with its
/// gradient `g[k]`, moments `m[k]`, `v[k]` and hyper-parameters `hyper(k)`, in order of `k`.
pub fn adamw_each<B: Backend>(
    be: &B,
    hyper: impl Fn(usize) -> AdamWHyper,
    t: u64,
    p: &mut [B::Tensor],
    g: &[B::Tensor],
    m: &mut [B::Tensor],
    v: &mut [B::Tensor],
) -> Result<()> {
    for (k, (((p, g), m), v)) in p.iter_mut().zip(g).zip(m).zip(v).enumerate() {
        be.adamw(&hyper(k), t, p, g, m, v)?;
    }
    Ok(())
}

/// The dense kernels. Every op writes into a caller-owned output tensor, so a
/// training loop allocates its buffers once and reuses them every step.
pub trait Backend {
    /// Scalar type the backend computes in.
    type Elem: Real;
    /// A batch of matrices resident where this backend computes.
    type Tensor;

    /// Human-readable description (device, adapter, precision).
    fn describe(&self) -> String;
    /// Shape of a tensor.
    fn shape(&self, t: &Self::Tensor) -> Shape;
    /// A zero-filled tensor.
    fn zeros(&self, shape: Shape) -> Result<Self::Tensor>;
    /// Overwrites a tensor with host data (row-major, batch-major).
    fn write(&self, t: &mut Self::Tensor, data: &[Self::Elem]) -> Result<()>;
    /// Copies a tensor back to the host.
    fn read(&self, t: &Self::Tensor) -> Result<Vec<Self::Elem>>;

    /// $C_b \leftarrow \alpha\thinspace\mathrm{op}(A_b)\thinspace\mathrm{op}(B_b) + \beta\thinspace C_b$
    /// for each matrix $b$ of `c`; an operand with batch 1 is broadcast. With
    /// $\beta = 0$ the old contents of `c` are never read (NaN-safe).
    #[allow(clippy::too_many_arguments)]
    fn matmul(
        &self,
        alpha: f64,
        a: &Self::Tensor,
        op_a: Op,
        b: &Self::Tensor,
        op_b: Op,
        beta: f64,
        c: &mut Self::Tensor,
    ) -> Result<()>;

    /// $Y = \mathrm{softmax}\_{\text{row}}(s\thinspace X)$ under `mask`; masked entries are 0.
    fn softmax_rows(
        &self,
        x: &Self::Tensor,
        scale: f64,
        mask: SoftmaxMask,
        y: &mut Self::Tensor,
    ) -> Result<()>;

    /// Backward of [`Backend::softmax_rows`] given its output $Y$:
    /// $\partial X = s\thinspace Y \odot (\partial Y - \mathrm{rowsum}(Y \odot \partial Y))$.
    fn softmax_rows_backward(
        &self,
        y: &Self::Tensor,
        dy: &Self::Tensor,
        scale: f64,
        dx: &mut Self::Tensor,
    ) -> Result<()>;

    /// $y \leftarrow a\thinspace x + b\thinspace y$ elementwise (equal shapes).
    fn axpby(&self, a: f64, x: &Self::Tensor, b: f64, y: &mut Self::Tensor) -> Result<()>;

    /// One AdamW step at step number `t ≥ 1` on parameters `p` with gradient
    /// `g` and moments `m`, `v`:
    /// $m \leftarrow \beta_1 m + (1-\beta_1) g$, $v \leftarrow \beta_2 v + (1-\beta_2) g^2$,
    /// $p \leftarrow p - \eta\thinspace\big(\hat m / (\sqrt{\hat v} + \epsilon) + \lambda p\big)$
    /// with $\hat m = m/(1-\beta_1^t)$, $\hat v = v/(1-\beta_2^t)$.
    fn adamw(
        &self,
        h: &AdamWHyper,
        t: u64,
        p: &mut Self::Tensor,
        g: &Self::Tensor,
        m: &mut Self::Tensor,
        v: &mut Self::Tensor,
    ) -> Result<()>;

    /// Embedding gather with positional rows: for ids `B×T×1`, table `emb`
    /// (`V×d`) and positions `pos` (`P×d`, $P \ge T$), writes `out` (`B×T×d`)
    /// $H_{b,i,:} = E_{\mathrm{id}\_{b,i},:} + P_{i,:}$. Ids must be integers in
    /// `0..V` (the CPU checks; the GPU writes a zero embedding row for an id
    /// outside the table, so callers check first).
    fn embed(
        &self,
        emb: &Self::Tensor,
        pos: &Self::Tensor,
        ids: &Self::Tensor,
        out: &mut Self::Tensor,
    ) -> Result<()>;

    /// Backward of [`Backend::embed`] (scatter-add, written as a gather so it
    /// needs no atomics): $\partial E_{v,:} = \sum_{(b,i):\thinspace\mathrm{id}\_{b,i} = v} \partial H_{b,i,:}$,
    /// $\partial P_{i,:} = \sum_b \partial H_{b,i,:}$ for $i < T$ and $0$ for
    /// $i \ge T$; both outputs are overwritten, sums run in row order.
    fn embed_backward(
        &self,
        dh: &Self::Tensor,
        ids: &Self::Tensor,
        d_emb: &mut Self::Tensor,
        d_pos: &mut Self::Tensor,
    ) -> Result<()>;

    /// $y = \max(x, 0)$ elementwise (equal shapes).
    fn relu(&self, x: &Self::Tensor, y: &mut Self::Tensor) -> Result<()>;

    /// Backward of [`Backend::relu`] at its input $x$:
    /// $\partial x = \partial y \cdot \[x > 0\]$ elementwise.
    fn relu_backward(
        &self,
        x: &Self::Tensor,
        dy: &Self::Tensor,
        dx: &mut Self::Tensor,
    ) -> Result<()>;

    /// Weighted softmax cross-entropy of each row $r$ of `logits` (rows
    /// stacked over the batch, `cols` = classes) against target class
    /// $y_r$ (`targets`, one integer per row) with weight $c_r$ (`coef`):
    /// $\ell_r = c_r\thinspace(\log\sum_j e^{z_{rj}} - z_{r y_r})$ into `loss` and
    /// $\partial z_{rj} = c_r\thinspace(\mathrm{softmax}(z_r)\_j - [j = y_r])$ into
    /// `dlogits`. Rows with $c_r = 0$ give exactly 0 (their target is not read).
    /// `targets`, `coef` and `loss` hold one value per row.
    fn softmax_xent(
        &self,
        logits: &Self::Tensor,
        targets: &Self::Tensor,
        coef: &Self::Tensor,
        dlogits: &mut Self::Tensor,
        loss: &mut Self::Tensor,
    ) -> Result<()>;

    /// Starts the kernels called so far without waiting for them. Results do
    /// not depend on it: every op's output is visible to later ops and to
    /// [`Backend::read`] either way. The GPU backend records kernels into one
    /// command buffer and submits it when the host reads, writes or syncs, when
    /// its parameter ring is full, or here; a training loop calls this once per
    /// step so the device works while the host prepares the next step. A
    /// no-op on the CPU, which computes each op when called.
    fn flush(&self) -> Result<()>;

    /// Waits until every kernel called so far has finished (a no-op on the CPU).
    fn sync(&self) -> Result<()>;

    /// Reinterprets a tensor in place as another shape with the same number
    /// of elements (no copy): e.g. a batch `B×T×d` as one `1×(B·T)×d` matrix,
    /// so $\sum_b X_b^\top G_b$ is a single product.
    fn reshape(&self, t: &mut Self::Tensor, shape: Shape) -> Result<()>;

    /// A tensor holding host data.
    fn upload(&self, shape: Shape, data: &[Self::Elem]) -> Result<Self::Tensor> {
        let mut t = self.zeros(shape)?;
        self.write(&mut t, data)?;
        Ok(t)
    }
    /// A tensor holding f64 host data rounded to [`Backend::Elem`].
    fn upload_f64(&self, shape: Shape, data: &[f64]) -> Result<Self::Tensor> {
        let v: Vec<Self::Elem> = data.iter().map(|&x| Self::Elem::from_f64(x)).collect();
        self.upload(shape, &v)
    }
    /// A tensor read back and widened to f64.
    fn read_f64(&self, t: &Self::Tensor) -> Result<Vec<f64>> {
        Ok(self.read(t)?.into_iter().map(Real::to_f64).collect())
    }
}

pub(crate) fn check_len(shape: Shape, got: usize) -> Result<()> {
    if shape.len() != got {
        return Err(BackendError::DataLength {
            expected: shape.len(),
            got,
        });
    }
    Ok(())
}

/// Rows of a tensor stacked over its batch.
pub(crate) fn total_rows(s: Shape) -> usize {
    s.batch * s.rows
}

/// Checks the shapes of [`Backend::embed`] / [`Backend::embed_backward`]:
/// ids `B×T×1`, activations `B×T×d`, `emb` `V×d`, `pos` `P×d` with `P ≥ T`.
pub(crate) fn check_embed(
    op: &'static str,
    emb: Shape,
    pos: Shape,
    ids: Shape,
    h: Shape,
) -> Result<()> {
    let ok = ids.cols == 1
        && (h.batch, h.rows) == (ids.batch, ids.rows)
        && emb.batch == 1
        && pos.batch == 1
        && emb.cols == h.cols
        && pos.cols == h.cols
        && pos.rows >= ids.rows;
    if !ok {
        return Err(BackendError::Shape {
            op,
            detail: format!("emb {emb}, pos {pos}, ids {ids}, activations {h}"),
        });
    }
    Ok(())
}

/// Checks the shapes of [`Backend::softmax_xent`]: one value per row of `logits`.
pub(crate) fn check_xent(
    logits: Shape,
    targets: Shape,
    coef: Shape,
    dlogits: Shape,
    loss: Shape,
) -> Result<()> {
    check_same("softmax_xent", logits, dlogits)?;
    let rows = total_rows(logits);
    for s in [targets, coef, loss] {
        if s.len() != rows {
            return Err(BackendError::Shape {
                op: "softmax_xent",
                detail: format!("{s} for {rows} rows of logits {logits}"),
            });
        }
    }
    Ok(())
}

pub(crate) fn check_same(op: &'static str, a: Shape, b: Shape) -> Result<()> {
    if a != b {
        return Err(BackendError::Shape {
            op,
            detail: format!("shapes {a} and {b} differ"),
        });
    }
    Ok(())
}

/// Which backend a run asks for (`--backend`, or `backend = "…"` in a sim).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// faer on the CPU.
    #[default]
    Cpu,
    /// wgpu on the best adapter found, software adapters (llvmpipe) included;
    /// an error when there is none.
    Gpu,
    /// A hardware GPU adapter when there is one, else the CPU. A software
    /// adapter (device type `Cpu`, e.g. Mesa's llvmpipe) is reported but not
    /// taken: it computes on the same cores as faer, ≈ 20× slower, so `auto`
    /// picks faer; `gpu` forces it (that is how CI tests the GPU path).
    Auto,
}

impl FromStr for BackendKind {
    type Err = BackendError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Self::Cpu),
            "gpu" | "wgpu" => Ok(Self::Gpu),
            "auto" => Ok(Self::Auto),
            _ => Err(BackendError::Parse(s.to_string())),
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cpu => "cpu",
            Self::Gpu => "gpu",
            Self::Auto => "auto",
        })
    }
}

/// The outcome of [`select`]: the backend to run on and a one-line note
/// saying what was found and why this one was taken.
#[cfg(feature = "gpu")]
pub enum Selected {
    /// Run on the CPU (faer).
    Cpu { note: String },
    /// Run on this wgpu device.
    Gpu {
        gpu: std::sync::Arc<Wgpu>,
        note: String,
    },
}

#[cfg(feature = "gpu")]
impl Selected {
    /// The line to print to the user.
    pub fn note(&self) -> &str {
        match self {
            Self::Cpu { note } | Self::Gpu { note, .. } => note,
        }
    }
    /// True when the GPU was taken.
    pub fn is_gpu(&self) -> bool {
        matches!(self, Self::Gpu { .. })
    }
    /// The GPU, shared, when one was taken (the caller passes it on explicitly,
    /// e.g. to `train::train_on` or to a sweep's workers).
    pub fn gpu(&self) -> Option<std::sync::Arc<Wgpu>> {
        match self {
            Self::Gpu { gpu, .. } => Some(gpu.clone()),
            Self::Cpu { .. } => None,
        }
    }
}

/// Resolves `kind` to a backend, looking for adapters on `opts.backends`.
///
/// - `cpu`: the CPU, without touching any GPU API.
/// - `gpu`: the best adapter (discrete > integrated > virtual > other >
///   software); any failure is an error.
/// - `auto`: the best *hardware* adapter; falls back to the CPU, with the
///   reason in the note, when there is none or its device cannot be opened.
#[cfg(feature = "gpu")]
pub fn select(kind: BackendKind, opts: &GpuOptions) -> Result<Selected> {
    match kind {
        BackendKind::Cpu => Ok(Selected::Cpu {
            note: "backend: cpu (faer)".into(),
        }),
        BackendKind::Gpu => {
            let gpu = Wgpu::new(opts)?;
            let note = format!("backend: gpu ({})", gpu.describe());
            Ok(Selected::Gpu {
                gpu: std::sync::Arc::new(gpu),
                note,
            })
        }
        BackendKind::Auto => {
            let infos = gpu::adapters(opts.backends);
            let hw = infos.iter().any(|i| i.device_type != wgpu::DeviceType::Cpu);
            if !hw {
                let why = match infos.first() {
                    Some(i) => format!(
                        "only the software adapter {} ({:?}) found; faer is faster on the same cores \
                         (--backend gpu forces it)",
                        i.name, i.backend
                    ),
                    None => "no GPU adapter found".into(),
                };
                return Ok(Selected::Cpu {
                    note: format!("backend: auto → cpu (faer): {why}"),
                });
            }
            let o = GpuOptions {
                allow_software: false,
                ..opts.clone()
            };
            match Wgpu::new(&o) {
                Ok(gpu) => {
                    let note = format!("backend: auto → gpu ({})", gpu.describe());
                    Ok(Selected::Gpu {
                        gpu: std::sync::Arc::new(gpu),
                        note,
                    })
                }
                Err(e) => Ok(Selected::Cpu {
                    note: format!("backend: auto → cpu (faer): GPU unusable: {e}"),
                }),
            }
        }
    }
}
