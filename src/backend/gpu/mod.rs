//! GPU backend: wgpu compute shaders in f32.
//!
//! One concept per file: `adapter.rs` (discovery, options, opening a device),
//! `tensor.rs` (buffers, upload, read-back), `pipeline.rs` (shader modules
//! assembled from the host's kernel descriptions, compiled once per device),
//! `batch.rs` (recording, the parameter ring, bind-group cache, submission),
//! `errors.rs` (error scopes, device health) and `kernels/` (each kernel's
//! host side in `<name>.rs` beside its `<name>.wgsl`). This file holds the
//! device and its [`Backend`] implementation, which hands each op to its kernel.
//!
//! Tensors are device buffers ([`GpuTensor`]) created once and overwritten by
//! the kernels. Kernels are *recorded*, not submitted one by one: every
//! dispatch goes into one open compute pass of one command encoder, and the
//! batch is submitted (one `queue.submit`) when the host needs a result or
//! hands data over ([`Backend::read`], [`Backend::write`], [`Backend::sync`]),
//! on [`Backend::flush`] (once per training step in `train::device`), or when
//! the parameter ring (`batch.rs`) is full. Order is kept: wgpu makes every dispatch
//! of a compute pass its own usage scope and inserts the barriers between a
//! dispatch that writes a buffer and a later one that reads it, and
//! `queue.write_buffer` data lands before the commands of the *next* submit,
//! which is why `write` submits the recorded batch first.
//!
//! The steady state of a training loop creates no wgpu object but one command
//! encoder per submit: each kernel's per-op parameters go into a slot of one
//! uniform *ring* buffer bound with a dynamic offset (uploaded with one
//! `write_buffer` per submit), and bind groups are cached by the kernel and
//! the tensors they bind (a loop repeats the same ops on the same buffers).
//!
//! The host waits only in `read` and `sync`; every wait has a timeout. Error
//! scopes (out-of-memory, validation, internal) are checked once per submit
//! (and around allocations and cache misses), so a lost device, an
//! out-of-memory or a validation failure becomes a [`BackendError`](super::BackendError) rather
//! than a panic or a hang — reported by the call that submits the batch, not
//! necessarily by the op that caused it. Buffer sizes are checked against
//! the device's `max_buffer_size` and `max_storage_buffer_binding_size`
//! before allocation.

mod adapter;
mod batch;
mod errors;
mod kernels;
mod pipeline;
mod tensor;

use std::sync::Mutex;
use std::time::Duration;

pub use adapter::{GpuOptions, MatmulKernel, adapters, describe_adapter};
pub use batch::{GpuStats, PARAM_RING_SLOTS};
pub use tensor::GpuTensor;

use super::{AdamWHyper, Backend, Op, Result, Shape, SoftmaxMask, check_len};
use batch::Batch;
use errors::Health;
use pipeline::Pipelines;

/// The wgpu backend (f32).
pub struct Wgpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    /// The kernel set compiled: [`MatmulKernel::Tiled`] or [`MatmulKernel::Direct`].
    set: MatmulKernel,
    pipelines: Pipelines,
    health: Health,
    timeout: Duration,
    /// Uniform ring: one slot of `batch::PARAM_BYTES` per recorded dispatch.
    ring: wgpu::Buffer,
    /// Bytes between ring slots.
    slot_stride: usize,
    batch: Mutex<Batch>,
}

impl std::fmt::Debug for Wgpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wgpu")
            .field("adapter", &self.info.name)
            .finish()
    }
}

impl Wgpu {
    /// Opens the best adapter allowed by `opts` (see [`adapters`] for the order).
    pub fn new(opts: &GpuOptions) -> Result<Self> {
        Self::from_adapter(adapter::best_adapter(opts)?, opts)
    }

    /// Opens a device on `adapter`, with the adapter's own limits (only
    /// `opts.timeout` and `opts.matmul` are used), and compiles every kernel.
    pub fn from_adapter(adapter: wgpu::Adapter, opts: &GpuOptions) -> Result<Self> {
        let info = adapter.get_info();
        let (device, queue, limits, health) = adapter::open_device(&adapter)?;
        let set = opts.matmul.resolve(info.device_type);
        let shaders: Vec<_> = kernels::ALL.iter().map(|k| k.pick(set)).collect();
        let pipelines = Pipelines::build(&device, &shaders)?;
        let (ring, slot_stride) = batch::param_ring(&device, &limits);
        Ok(Self {
            device,
            queue,
            info,
            limits,
            set,
            pipelines,
            health,
            timeout: opts.timeout,
            ring,
            slot_stride,
            batch: Mutex::new(Batch::default()),
        })
    }

    /// The adapter this backend runs on.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The device limits in force.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// Destroys the device now (frees its memory); every later call on this
    /// backend returns an error.
    pub fn destroy(&self) {
        self.device.destroy();
    }

    /// True when the direct / row-wise kernels run (software adapters).
    fn direct(&self) -> bool {
        self.set == MatmulKernel::Direct
    }
}

impl Backend for Wgpu {
    type Elem = f32;
    type Tensor = GpuTensor;

    fn describe(&self) -> String {
        let kind = if self.direct() { "direct" } else { "tiled" };
        let adapter = describe_adapter(&self.info);
        format!("wgpu f32 ({kind} matmul) on {adapter}")
    }

    fn shape(&self, t: &GpuTensor) -> Shape {
        t.shape
    }

    fn zeros(&self, shape: Shape) -> Result<GpuTensor> {
        self.alloc(shape)
    }

    fn write(&self, t: &mut GpuTensor, data: &[f32]) -> Result<()> {
        self.upload_into(t, data)
    }

    fn read(&self, t: &GpuTensor) -> Result<Vec<f32>> {
        self.download(t)
    }

    fn matmul(
        &self,
        alpha: f64,
        a: &GpuTensor,
        op_a: Op,
        b: &GpuTensor,
        op_b: Op,
        beta: f64,
        c: &mut GpuTensor,
    ) -> Result<()> {
        kernels::matmul::run(self, alpha, a, op_a, b, op_b, beta, c)
    }

    fn softmax_rows(&self, x: &GpuTensor, s: f64, m: SoftmaxMask, y: &mut GpuTensor) -> Result<()> {
        kernels::softmax::run(self, x, s, m, y)
    }

    fn softmax_rows_backward(
        &self,
        y: &GpuTensor,
        dy: &GpuTensor,
        scale: f64,
        dx: &mut GpuTensor,
    ) -> Result<()> {
        kernels::softmax_backward::run(self, y, dy, scale, dx)
    }

    fn axpby(&self, a: f64, x: &GpuTensor, b: f64, y: &mut GpuTensor) -> Result<()> {
        kernels::axpby::run(self, a, x, b, y)
    }

    fn adamw(
        &self,
        h: &AdamWHyper,
        t: u64,
        p: &mut GpuTensor,
        g: &GpuTensor,
        m: &mut GpuTensor,
        v: &mut GpuTensor,
    ) -> Result<()> {
        kernels::adamw::run(self, h, t, p, g, m, v)
    }

    fn embed(
        &self,
        emb: &GpuTensor,
        pos: &GpuTensor,
        ids: &GpuTensor,
        out: &mut GpuTensor,
    ) -> Result<()> {
        kernels::embed::run(self, emb, pos, ids, out)
    }

    fn embed_backward(
        &self,
        dh: &GpuTensor,
        ids: &GpuTensor,
        d_emb: &mut GpuTensor,
        d_pos: &mut GpuTensor,
    ) -> Result<()> {
        kernels::embed_backward::run(self, dh, ids, d_emb, d_pos)
    }

    fn relu(&self, x: &GpuTensor, y: &mut GpuTensor) -> Result<()> {
        kernels::relu::run(self, x, y)
    }

    fn relu_backward(&self, x: &GpuTensor, dy: &GpuTensor, dx: &mut GpuTensor) -> Result<()> {
        kernels::relu_backward::run(self, x, dy, dx)
    }

    fn softmax_xent(
        &self,
        logits: &GpuTensor,
        targets: &GpuTensor,
        coef: &GpuTensor,
        dlogits: &mut GpuTensor,
        loss: &mut GpuTensor,
    ) -> Result<()> {
        kernels::xent::run(self, logits, targets, coef, dlogits, loss)
    }

    fn flush(&self) -> Result<()> {
        self.health.check()?;
        self.submit()
    }

    fn sync(&self) -> Result<()> {
        self.health.check()?;
        self.submit()?;
        self.wait("sync")
    }

    fn reshape(&self, t: &mut GpuTensor, shape: Shape) -> Result<()> {
        check_len(t.shape, shape.len())?;
        t.shape = shape;
        Ok(())
    }
}
