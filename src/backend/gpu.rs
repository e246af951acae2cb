//! GPU backend: wgpu compute shaders in f32 (WGSL sources beside this file).
//!
//! Tensors are device buffers ([`GpuTensor`]) created once and overwritten by
//! the kernels. Kernels are *recorded*, not submitted one by one: every
//! dispatch goes into one open compute pass of one command encoder, and the
//! batch is submitted (one `queue.submit`) when the host needs a result or
//! hands data over ([`Backend::read`], [`Backend::write`], [`Backend::sync`]),
//! on [`Backend::flush`] (once per training step in `train::device`), or when
//! the parameter ring below is full. Order is kept: wgpu makes every dispatch
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
//! out-of-memory or a validation failure becomes a [`BackendError`] rather
//! than a panic or a hang — reported by the call that submits the batch, not
//! necessarily by the op that caused it. Buffer sizes are checked against
//! the device's `max_buffer_size` and `max_storage_buffer_binding_size`
//! before allocation.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use super::cpu::AdamWCoeffs;
use super::{
    AdamWHyper, Backend, BackendError, Op, Result, Shape, SoftmaxMask, check_embed, check_len,
    check_same, check_xent, matmul_dims, total_rows,
};

/// Where and how to open a GPU device.
#[derive(Clone, Debug)]
pub struct GpuOptions {
    /// Graphics APIs to search for adapters. Default: Vulkan, Metal, DX12
    /// (not GL, which may be picked silently and compile shaders slowly).
    pub backends: wgpu::Backends,
    /// Whether a software adapter (device type `Cpu`, e.g. llvmpipe) may be taken.
    pub allow_software: bool,
    /// Longest wait for the device before [`BackendError::Timeout`].
    pub timeout: Duration,
    /// Which matmul kernel to compile.
    pub matmul: MatmulKernel,
}

/// The two matmul kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulKernel {
    /// `Direct` on software adapters (device type `Cpu`), `Tiled` elsewhere.
    #[default]
    Auto,
    /// `matmul.wgsl`: 64×64 tiles staged in workgroup memory, 4×4 register blocks.
    Tiled,
    /// `matmul_direct.wgsl`: 4×4 register blocks read straight from storage
    /// (no workgroup memory or barriers; faster on llvmpipe). Also selects
    /// the `*_rowwise.wgsl` row kernels (softmax, its backward, cross-entropy:
    /// one invocation per row instead of one 64-wide workgroup per row with
    /// barrier reductions), for the same reason.
    Direct,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            backends: wgpu::Backends::PRIMARY,
            allow_software: true,
            timeout: Duration::from_secs(120),
            matmul: MatmulKernel::Auto,
        }
    }
}

impl GpuOptions {
    /// Vulkan only (the configuration the tests pin).
    pub fn vulkan() -> Self {
        Self {
            backends: wgpu::Backends::VULKAN,
            ..Self::default()
        }
    }
}

/// Rank of an adapter type: lower is preferred.
fn type_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

/// Every adapter on `backends`, best first (hardware before software).
pub fn adapters(backends: wgpu::Backends) -> Vec<wgpu::AdapterInfo> {
    let inst = instance(backends);
    let mut v: Vec<_> = pollster::block_on(inst.enumerate_adapters(backends))
        .into_iter()
        .map(|a| a.get_info())
        .collect();
    v.sort_by_key(|i| type_rank(i.device_type));
    v
}

/// One-line description of an adapter.
pub fn describe_adapter(i: &wgpu::AdapterInfo) -> String {
    format!(
        "{} ({:?}, {:?}, driver {} {})",
        i.name, i.device_type, i.backend, i.driver, i.driver_info
    )
}

/// A batch of row-major f32 matrices in a device buffer.
#[derive(Debug)]
pub struct GpuTensor {
    buf: wgpu::Buffer,
    shape: Shape,
    /// Unique for the life of the process: the bind-group cache key.
    id: u64,
    /// Liveness token: cache entries hold a `Weak` of it, so the bind groups
    /// of dropped tensors (which keep their buffers alive) can be swept.
    alive: Arc<()>,
}

/// Source of [`GpuTensor::id`].
static NEXT_TENSOR_ID: AtomicU64 = AtomicU64::new(0);

impl GpuTensor {
    /// Shape of the batch.
    pub fn shape(&self) -> Shape {
        self.shape
    }
}

/// One compute pipeline with its explicit bind-group layout: storage
/// buffers at bindings `0..n`, then the uniform parameter block at binding
/// `n` with a dynamic offset into the parameter ring.
struct Kernel {
    /// Index into the bind-group cache key.
    index: u8,
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    /// Storage bindings, `true` where read-only (must match the WGSL).
    storage: &'static [bool],
}

struct Kernels {
    matmul: Kernel,
    /// Block size (rows = cols of C) one workgroup of `matmul` covers.
    matmul_tile: usize,
    matmul_name: &'static str,
    softmax: Kernel,
    softmax_backward: Kernel,
    axpby: Kernel,
    adamw: Kernel,
    embed: Kernel,
    embed_backward: Kernel,
    relu: Kernel,
    relu_backward: Kernel,
    xent: Kernel,
    /// Rows one workgroup of the row kernels (softmax, its backward,
    /// cross-entropy) covers: 1 (workgroup reductions) or 64 (row-wise).
    rows_per_group: usize,
}

/// The wgpu backend (f32).
pub struct Wgpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    kernels: Kernels,
    lost: Arc<Mutex<Option<String>>>,
    timeout: Duration,
    /// Uniform ring: one slot of [`PARAM_BYTES`] per recorded dispatch.
    ring: wgpu::Buffer,
    /// Bytes between ring slots (`PARAM_BYTES` rounded up to the device's
    /// `min_uniform_buffer_offset_alignment`).
    slot_stride: usize,
    batch: Mutex<Batch>,
}

/// Bytes of a kernel's uniform parameter block as bound (every `*Params`
/// struct below fits; checked at compile time).
const PARAM_BYTES: usize = 64;

/// Dispatches recorded into one submit at most (slots of the parameter ring).
pub const PARAM_RING_SLOTS: usize = 512;

/// Bind-group cache key: kernel and the ids of the tensors bound, in order.
type BindKey = (u8, [u64; 6]);

/// A cached bind group and liveness tokens of the tensors it binds.
struct CachedBind {
    group: wgpu::BindGroup,
    tensors: Vec<Weak<()>>,
}

/// Kernels recorded but not yet submitted, and the bind-group cache.
#[derive(Default)]
struct Batch {
    /// The open compute pass; it must end before `encoder` is finished.
    pass: Option<wgpu::ComputePass<'static>>,
    encoder: Option<wgpu::CommandEncoder>,
    /// Host image of the ring slots used by this batch.
    params: Vec<u8>,
    /// Labels of the recorded kernels (for error messages).
    labels: Vec<&'static str>,
    /// Kernel of the last `set_pipeline` in the open pass.
    bound_kernel: Option<u8>,
    /// Bind groups by (kernel, tensors). A bind group keeps its buffers
    /// alive, so entries of dropped tensors are swept whenever the cache has
    /// doubled since the last sweep: at most about as many dead entries as
    /// live ones are held.
    cache: HashMap<BindKey, CachedBind>,
    /// Cache size that triggers the next sweep of dead entries.
    sweep_at: usize,
    stats: GpuStats,
}

/// Counters of the work a [`Wgpu`] has recorded and submitted since it was
/// opened (to check that a training loop reuses its wgpu objects).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuStats {
    /// Kernel dispatches recorded.
    pub dispatches: u64,
    /// `queue.submit` calls carrying recorded kernels.
    pub submits: u64,
    /// Bind groups created (cache misses).
    pub bind_groups: u64,
}

impl std::fmt::Debug for Wgpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wgpu")
            .field("adapter", &self.info.name)
            .finish()
    }
}

const MATMUL_TILE: usize = 64;
const ELEM_WG: usize = 256;
/// Rows per workgroup of the `*_rowwise.wgsl` kernels (their workgroup size).
const ROWWISE_ROWS: usize = 64;

impl Wgpu {
    /// Opens the best adapter allowed by `opts` (see [`adapters`] for the order).
    pub fn new(opts: &GpuOptions) -> Result<Self> {
        let inst = instance(opts.backends);
        let mut all = pollster::block_on(inst.enumerate_adapters(opts.backends));
        all.sort_by_key(|a| type_rank(a.get_info().device_type));
        let found: Vec<String> = all
            .iter()
            .map(|a| describe_adapter(&a.get_info()))
            .collect();
        let adapter = all
            .into_iter()
            .find(|a| opts.allow_software || a.get_info().device_type != wgpu::DeviceType::Cpu)
            .ok_or_else(|| {
                BackendError::NoAdapter(if found.is_empty() {
                    format!("none on {:?}", opts.backends)
                } else {
                    format!(
                        "only software adapters, not allowed here: {}",
                        found.join("; ")
                    )
                })
            })?;
        Self::from_adapter(adapter, opts)
    }

    /// Opens a device on `adapter`, with the adapter's own limits (only
    /// `opts.timeout` and `opts.matmul` are used).
    pub fn from_adapter(adapter: wgpu::Adapter, opts: &GpuOptions) -> Result<Self> {
        let timeout = opts.timeout;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let desc = wgpu::DeviceDescriptor {
            label: Some("sinklab"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc)).map_err(|e| {
            BackendError::RequestDevice {
                adapter: describe_adapter(&info),
                reason: e.to_string(),
            }
        })?;
        let lost = Arc::new(Mutex::new(None));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut g) = flag.lock() {
                *g = Some(format!("{reason:?}: {msg}"));
            }
        });
        // Errors outside our scopes must not abort the process: they are
        // recorded as a lost device and surface on the next call.
        let flag = lost.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut g) = flag.lock() {
                g.get_or_insert_with(|| format!("uncaptured error: {e}"));
            }
        }));
        let scope = ErrorScopes::push(&device);
        let mut next_index = 0u8;
        let mut kernel = |label: &str, src: &str, storage: &'static [bool]| {
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(label),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
            let buffer = |binding: usize, ty: wgpu::BufferBindingType, dynamic: bool| {
                wgpu::BindGroupLayoutEntry {
                    binding: binding as u32,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty,
                        has_dynamic_offset: dynamic,
                        min_binding_size: None,
                    },
                    count: None,
                }
            };
            let mut entries: Vec<_> = storage
                .iter()
                .enumerate()
                .map(|(i, &read_only)| {
                    buffer(i, wgpu::BufferBindingType::Storage { read_only }, false)
                })
                .collect();
            entries.push(buffer(
                storage.len(),
                wgpu::BufferBindingType::Uniform,
                true,
            ));
            let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(label),
                entries: &entries,
            });
            let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(label),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
            let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
            next_index += 1;
            Kernel {
                index: next_index,
                pipeline,
                layout,
                storage,
            }
        };
        // Storage bindings, read-only (`R`) or read-write (`W`), as declared
        // in each WGSL file.
        const R: bool = true;
        const W: bool = false;
        // Software adapters (llvmpipe) run the workgroup-memory-free kernel:
        // there the CPU caches tile, and barriers cost more than they save.
        let direct = match opts.matmul {
            MatmulKernel::Auto => info.device_type == wgpu::DeviceType::Cpu,
            MatmulKernel::Tiled => false,
            MatmulKernel::Direct => true,
        };
        let (matmul, matmul_tile) = if direct {
            (
                kernel(
                    "matmul_direct",
                    include_str!("matmul_direct.wgsl"),
                    &[R, R, W],
                ),
                32,
            )
        } else {
            (
                kernel("matmul", include_str!("matmul.wgsl"), &[R, R, W]),
                MATMUL_TILE,
            )
        };
        let kernels = Kernels {
            matmul,
            matmul_tile,
            matmul_name: if direct { "direct" } else { "tiled" },
            softmax: if direct {
                kernel(
                    "softmax_rowwise",
                    include_str!("softmax_rowwise.wgsl"),
                    &[R, W],
                )
            } else {
                kernel("softmax", include_str!("softmax.wgsl"), &[R, W])
            },
            softmax_backward: if direct {
                kernel(
                    "softmax_backward_rowwise",
                    include_str!("softmax_backward_rowwise.wgsl"),
                    &[R, R, W],
                )
            } else {
                kernel(
                    "softmax_backward",
                    include_str!("softmax_backward.wgsl"),
                    &[R, R, W],
                )
            },
            axpby: kernel("axpby", include_str!("axpby.wgsl"), &[R, W]),
            adamw: kernel("adamw", include_str!("adamw.wgsl"), &[W, R, W, W]),
            embed: kernel("embed", include_str!("embed.wgsl"), &[R, R, R, W]),
            embed_backward: kernel(
                "embed_backward",
                include_str!("embed_backward.wgsl"),
                &[R, R, W, W],
            ),
            relu: kernel("relu", include_str!("relu.wgsl"), &[R, W]),
            relu_backward: kernel(
                "relu_backward",
                include_str!("relu_backward.wgsl"),
                &[R, R, W],
            ),
            xent: if direct {
                kernel(
                    "xent_rowwise",
                    include_str!("xent_rowwise.wgsl"),
                    &[R, R, R, W, W],
                )
            } else {
                kernel("xent", include_str!("xent.wgsl"), &[R, R, R, W, W])
            },
            rows_per_group: if direct { ROWWISE_ROWS } else { 1 },
        };
        let align = (limits.min_uniform_buffer_offset_alignment as usize).max(1);
        let slot_stride = PARAM_BYTES.div_ceil(align) * align;
        let ring = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("parameter ring"),
            size: (slot_stride * PARAM_RING_SLOTS) as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        scope.pop("compiling the WGSL kernels")?;
        Ok(Self {
            device,
            queue,
            info,
            limits,
            kernels,
            lost,
            timeout,
            ring,
            slot_stride,
            batch: Mutex::new(Batch {
                sweep_at: MIN_SWEEP,
                ..Batch::default()
            }),
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

    fn check_alive(&self) -> Result<()> {
        match self.lost.lock() {
            Ok(g) => match g.as_ref() {
                Some(msg) => Err(BackendError::DeviceLost(msg.clone())),
                None => Ok(()),
            },
            Err(_) => Err(BackendError::DeviceLost("device-lost flag poisoned".into())),
        }
    }

    /// Bytes of a buffer holding `len` f32, checked against the device limits.
    fn buffer_bytes(&self, what: &str, len: usize) -> Result<u64> {
        let bytes = (len.max(1) as u64).saturating_mul(4);
        let checks = [
            ("max_buffer_size", self.limits.max_buffer_size),
            (
                "max_storage_buffer_binding_size",
                self.limits.max_storage_buffer_binding_size,
            ),
        ];
        for (which, limit) in checks {
            if bytes > limit {
                return Err(BackendError::BufferTooLarge {
                    what: what.to_string(),
                    bytes,
                    which,
                    limit,
                });
            }
        }
        // Kernels index with u32.
        if len > u32::MAX as usize {
            return Err(BackendError::BufferTooLarge {
                what: what.to_string(),
                bytes,
                which: "u32 element index",
                limit: u32::MAX as u64 * 4,
            });
        }
        Ok(bytes)
    }

    /// Splits `groups` workgroups into a 2-D grid within the per-dimension limit.
    fn grid(&self, what: &str, groups: usize) -> Result<(u32, u32)> {
        let lim = self.limits.max_compute_workgroups_per_dimension as usize;
        if groups <= lim {
            return Ok((groups.max(1) as u32, 1));
        }
        let y = groups.div_ceil(lim);
        if y > lim {
            return Err(BackendError::TooManyWorkgroups {
                what: what.into(),
                groups: groups as u64,
                limit: lim as u32,
            });
        }
        Ok((lim as u32, y as u32))
    }

    /// Counters of recorded and submitted work since the device was opened.
    pub fn stats(&self) -> GpuStats {
        self.batch.lock().map(|b| b.stats).unwrap_or_default()
    }

    fn lock_batch(&self) -> Result<MutexGuard<'_, Batch>> {
        self.batch.lock().map_err(|_| BackendError::Gpu {
            what: "recording kernels".into(),
            msg: "batch state poisoned by a panic on another thread".into(),
        })
    }

    /// Records one dispatch of `kernel` over `tensors` (bindings `0..`) with
    /// the uniform block `params` (last binding, a slot of the ring) into the
    /// open batch. Nothing is submitted unless the ring is full.
    fn dispatch(
        &self,
        what: &'static str,
        kernel: &Kernel,
        tensors: &[&GpuTensor],
        params: &[u8],
        groups: (u32, u32, u32),
    ) -> Result<()> {
        debug_assert_eq!(tensors.len(), kernel.storage.len(), "{what}: bindings");
        debug_assert!(params.len() <= PARAM_BYTES, "{what}: parameter block");
        self.check_alive()?;
        let mut guard = self.lock_batch()?;
        let b = &mut *guard;
        if b.labels.len() == PARAM_RING_SLOTS {
            self.submit_locked(b)?;
        }
        let mut ids = [u64::MAX; 6];
        for (slot, t) in ids.iter_mut().zip(tensors) {
            *slot = t.id;
        }
        let key = (kernel.index, ids);
        if !b.cache.contains_key(&key) {
            let group = self.bind_group(what, kernel, tensors)?;
            if b.cache.len() >= b.sweep_at {
                b.cache
                    .retain(|_, e| e.tensors.iter().all(|w| w.strong_count() > 0));
                b.sweep_at = (2 * b.cache.len()).max(MIN_SWEEP);
            }
            b.cache.insert(
                key,
                CachedBind {
                    group,
                    tensors: tensors.iter().map(|t| Arc::downgrade(&t.alive)).collect(),
                },
            );
            b.stats.bind_groups += 1;
        }
        let offset = b.labels.len() * self.slot_stride;
        b.params.resize(offset + self.slot_stride, 0);
        b.params[offset..offset + params.len()].copy_from_slice(params);
        b.labels.push(what);
        b.stats.dispatches += 1;
        if b.pass.is_none() {
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("kernels"),
                });
            let pass = enc
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("kernels"),
                    timestamp_writes: None,
                })
                .forget_lifetime();
            b.encoder = Some(enc);
            b.pass = Some(pass);
            b.bound_kernel = None;
        }
        let pass = b.pass.as_mut().expect("pass opened above");
        if b.bound_kernel != Some(kernel.index) {
            pass.set_pipeline(&kernel.pipeline);
            b.bound_kernel = Some(kernel.index);
        }
        let group = &b.cache[&key].group;
        pass.set_bind_group(0, group, &[offset as u32]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
        Ok(())
    }

    /// A bind group of `kernel` over `tensors` and the parameter ring,
    /// inside error scopes (a cache miss, not the steady state).
    fn bind_group(
        &self,
        what: &str,
        kernel: &Kernel,
        tensors: &[&GpuTensor],
    ) -> Result<wgpu::BindGroup> {
        let scope = ErrorScopes::push(&self.device);
        let mut entries: Vec<wgpu::BindGroupEntry> = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: t.buf.as_entire_binding(),
            })
            .collect();
        entries.push(wgpu::BindGroupEntry {
            binding: tensors.len() as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &self.ring,
                offset: 0,
                size: NonZeroU64::new(PARAM_BYTES as u64),
            }),
        });
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(what),
            layout: &kernel.layout,
            entries: &entries,
        });
        scope.pop(&format!("binding the buffers of {what}"))?;
        Ok(group)
    }

    /// Submits the recorded batch (if any) without waiting: one upload of
    /// the ring slots it uses, one command buffer, error scopes checked once.
    fn submit_locked(&self, b: &mut Batch) -> Result<()> {
        // The pass borrows the encoder's recording: end it first.
        drop(b.pass.take());
        b.bound_kernel = None;
        let Some(enc) = b.encoder.take() else {
            return Ok(());
        };
        let scope = ErrorScopes::push(&self.device);
        if !b.params.is_empty() {
            self.queue.write_buffer(&self.ring, 0, &b.params);
        }
        self.queue.submit([enc.finish()]);
        b.stats.submits += 1;
        let what = batch_label(&b.labels);
        b.params.clear();
        b.labels.clear();
        scope.pop(&what)?;
        // A submit to a lost device is dropped and reported only through the
        // device-lost callback, which runs when the device is polled: poll
        // once (non-blocking) so that such a batch is an error here.
        let _ = self.device.poll(wgpu::PollType::Poll);
        self.check_alive()
    }

    /// Submits the recorded batch (see [`Backend::flush`]).
    fn submit(&self) -> Result<()> {
        let mut guard = self.lock_batch()?;
        self.submit_locked(&mut guard)
    }

    /// The grid of a row kernel over `rows` rows.
    fn row_grid(&self, what: &str, rows: usize) -> Result<(u32, u32)> {
        self.grid(what, rows.div_ceil(self.kernels.rows_per_group))
    }

    /// Blocks until the queue is idle, or [`BackendError::Timeout`].
    fn wait(&self, what: &str) -> Result<()> {
        let r = self.device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: Some(self.timeout),
        });
        match r {
            Ok(_) => self.check_alive(),
            Err(wgpu::PollError::Timeout) => Err(BackendError::Timeout {
                what: what.to_string(),
                secs: self.timeout.as_secs_f64(),
            }),
            Err(e) => {
                self.check_alive()?;
                Err(BackendError::Gpu {
                    what: what.to_string(),
                    msg: e.to_string(),
                })
            }
        }
    }
}

/// Out-of-memory, validation and internal error scopes around a piece of work.
struct ErrorScopes {
    oom: wgpu::ErrorScopeGuard,
    validation: wgpu::ErrorScopeGuard,
    internal: wgpu::ErrorScopeGuard,
}

impl ErrorScopes {
    fn push(device: &wgpu::Device) -> Self {
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
        Self {
            oom,
            validation,
            internal,
        }
    }

    /// Pops in reverse order; the first error found becomes the result.
    fn pop(self, what: &str) -> Result<()> {
        let internal = pollster::block_on(self.internal.pop());
        let validation = pollster::block_on(self.validation.pop());
        let oom = pollster::block_on(self.oom.pop());
        if oom.is_some() {
            return Err(BackendError::OutOfMemory(what.to_string()));
        }
        if let Some(e) = validation.or(internal) {
            return Err(BackendError::Gpu {
                what: what.to_string(),
                msg: e.to_string(),
            });
        }
        Ok(())
    }
}

/// Cache size below which dead bind groups are not swept.
const MIN_SWEEP: usize = 256;

/// "a batch of N kernels (a, b, …)" for error messages: the kernel names in
/// first-seen order.
fn batch_label(labels: &[&'static str]) -> String {
    let mut kinds: Vec<&str> = Vec::new();
    for l in labels {
        if !kinds.contains(l) {
            kinds.push(l);
        }
    }
    format!("a batch of {} kernels ({})", labels.len(), kinds.join(", "))
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct MatmulParams {
    m: u32,
    n: u32,
    k: u32,
    trans_a: u32,
    trans_b: u32,
    stride_a: u32,
    stride_b: u32,
    stride_c: u32,
    batch_offset: u32,
    alpha: f32,
    beta: f32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SoftmaxParams {
    rows: u32,
    cols: u32,
    total_rows: u32,
    causal: u32,
    scale: f32,
    pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SoftmaxBackwardParams {
    cols: u32,
    total_rows: u32,
    scale: f32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct AxpbyParams {
    len: u32,
    a: f32,
    b: f32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct AdamWParams {
    len: u32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    wd: f32,
    c1: f32,
    c2: f32,
    one_minus_beta1: f32,
    one_minus_beta2: f32,
    pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct EmbedParams {
    total: u32,
    d: u32,
    t: u32,
    vocab: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct EmbedBackwardParams {
    rows: u32,
    d: u32,
    t: u32,
    vocab: u32,
    pos_rows: u32,
    pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct LenParams {
    len: u32,
    pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct XentParams {
    cols: u32,
    total_rows: u32,
    pad: [u32; 2],
}

// Every parameter block fits the bound uniform range.
const _: () = {
    use std::mem::size_of;
    let sizes = [
        size_of::<MatmulParams>(),
        size_of::<SoftmaxParams>(),
        size_of::<SoftmaxBackwardParams>(),
        size_of::<AxpbyParams>(),
        size_of::<AdamWParams>(),
        size_of::<EmbedParams>(),
        size_of::<EmbedBackwardParams>(),
        size_of::<LenParams>(),
        size_of::<XentParams>(),
    ];
    let mut i = 0;
    while i < sizes.len() {
        assert!(sizes[i] <= PARAM_BYTES && sizes[i].is_multiple_of(16));
        i += 1;
    }
};

impl Wgpu {
    /// One elementwise dispatch (256 invocations per workgroup) over `len` elements.
    fn elementwise(
        &self,
        what: &'static str,
        kernel: &Kernel,
        tensors: &[&GpuTensor],
        len: usize,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (gx, gy) = self.grid(what, len.div_ceil(ELEM_WG))?;
        let params = LenParams {
            len: len as u32,
            pad: [0; 3],
        };
        self.dispatch(
            what,
            kernel,
            tensors,
            bytemuck::bytes_of(&params),
            (gx, gy, 1),
        )
    }
}

impl Backend for Wgpu {
    type Elem = f32;
    type Tensor = GpuTensor;

    fn describe(&self) -> String {
        format!(
            "wgpu f32 ({} matmul) on {}",
            self.kernels.matmul_name,
            describe_adapter(&self.info)
        )
    }

    fn shape(&self, t: &GpuTensor) -> Shape {
        t.shape
    }

    fn zeros(&self, shape: Shape) -> Result<GpuTensor> {
        self.check_alive()?;
        let what = format!("tensor {shape}");
        let size = self.buffer_bytes(&what, shape.len())?;
        let scope = ErrorScopes::push(&self.device);
        // wgpu zero-initialises new buffers.
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tensor"),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        scope.pop(&format!("allocating {what}"))?;
        Ok(GpuTensor {
            buf,
            shape,
            id: NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed),
            alive: Arc::new(()),
        })
    }

    fn write(&self, t: &mut GpuTensor, data: &[f32]) -> Result<()> {
        check_len(t.shape, data.len())?;
        self.check_alive()?;
        if data.is_empty() {
            return Ok(());
        }
        // `write_buffer` lands before the commands of the next submit: the
        // kernels recorded so far must go first, or they would see the new data.
        self.submit()?;
        let scope = ErrorScopes::push(&self.device);
        self.queue
            .write_buffer(&t.buf, 0, bytemuck::cast_slice(data));
        scope.pop("uploading a tensor")
    }

    fn read(&self, t: &GpuTensor) -> Result<Vec<f32>> {
        self.check_alive()?;
        let len = t.shape.len();
        if len == 0 {
            return Ok(Vec::new());
        }
        self.submit()?;
        let bytes = len as u64 * 4;
        let scope = ErrorScopes::push(&self.device);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read-back"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("read-back"),
            });
        enc.copy_buffer_to_buffer(&t.buf, 0, &staging, 0, bytes);
        self.queue.submit([enc.finish()]);
        let done: Arc<Mutex<Option<std::result::Result<(), wgpu::BufferAsyncError>>>> =
            Arc::new(Mutex::new(None));
        let d2 = done.clone();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            if let Ok(mut g) = d2.lock() {
                *g = Some(r);
            }
        });
        scope.pop("reading a tensor back")?;
        self.wait("reading a tensor back")?;
        // With several threads on one device, another thread's poll may be
        // the one running our map callback: wait for it, within the timeout.
        let deadline = std::time::Instant::now() + self.timeout;
        let mut status = done.lock().ok().and_then(|mut g| g.take());
        while status.is_none() && std::time::Instant::now() < deadline {
            self.check_alive()?;
            let _ = self.device.poll(wgpu::PollType::Poll);
            std::thread::yield_now();
            status = done.lock().ok().and_then(|mut g| g.take());
        }
        match status {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                self.check_alive()?;
                return Err(BackendError::Gpu {
                    what: "mapping a read-back buffer".into(),
                    msg: e.to_string(),
                });
            }
            None => {
                self.check_alive()?;
                return Err(BackendError::Gpu {
                    what: "mapping a read-back buffer".into(),
                    msg: format!(
                        "map callback did not run within {:.1} s",
                        self.timeout.as_secs_f64()
                    ),
                });
            }
        }
        let out = {
            let view = staging
                .get_mapped_range(..)
                .map_err(|e| BackendError::Gpu {
                    what: "reading a mapped buffer".into(),
                    msg: e.to_string(),
                })?;
            bytemuck::cast_slice::<u8, f32>(&view).to_vec()
        };
        staging.unmap();
        Ok(out)
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
        let (m, n, k) = matmul_dims(a.shape, op_a, b.shape, op_b, c.shape)?;
        if c.shape.is_empty() {
            return Ok(());
        }
        let stride = |s: Shape| {
            if s.batch == 1 && c.shape.batch > 1 {
                0
            } else {
                s.mat_len() as u32
            }
        };
        let gx = n.div_ceil(self.kernels.matmul_tile);
        let gy = m.div_ceil(self.kernels.matmul_tile);
        let lim = self.limits.max_compute_workgroups_per_dimension as usize;
        if gx > lim || gy > lim {
            return Err(BackendError::TooManyWorkgroups {
                what: format!("matmul {m}×{k}·{k}×{n}"),
                groups: gx.max(gy) as u64,
                limit: lim as u32,
            });
        }
        let mut params = MatmulParams {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            trans_a: (op_a == Op::T) as u32,
            trans_b: (op_b == Op::T) as u32,
            stride_a: stride(a.shape),
            stride_b: stride(b.shape),
            stride_c: c.shape.mat_len() as u32,
            batch_offset: 0,
            alpha: alpha as f32,
            beta: beta as f32,
            pad: 0,
        };
        // Batches beyond the z-dimension limit go in several dispatches.
        let mut done = 0usize;
        while done < c.shape.batch {
            let nz = (c.shape.batch - done).min(lim);
            params.batch_offset = done as u32;
            self.dispatch(
                "matmul",
                &self.kernels.matmul,
                &[a, b, c],
                bytemuck::bytes_of(&params),
                (gx as u32, gy as u32, nz as u32),
            )?;
            done += nz;
        }
        Ok(())
    }

    fn softmax_rows(
        &self,
        x: &GpuTensor,
        scale: f64,
        mask: SoftmaxMask,
        y: &mut GpuTensor,
    ) -> Result<()> {
        check_same("softmax_rows", x.shape, y.shape)?;
        let s = x.shape;
        if s.is_empty() {
            return Ok(());
        }
        let total = s.batch * s.rows;
        let (gx, gy) = self.row_grid("softmax_rows", total)?;
        let params = SoftmaxParams {
            rows: s.rows as u32,
            cols: s.cols as u32,
            total_rows: total as u32,
            causal: match mask {
                SoftmaxMask::None => 0,
                SoftmaxMask::Causal => 1,
                SoftmaxMask::CausalNoFirstKey => 2,
            },
            scale: scale as f32,
            pad: [0; 3],
        };
        self.dispatch(
            "softmax_rows",
            &self.kernels.softmax,
            &[x, y],
            bytemuck::bytes_of(&params),
            (gx, gy, 1),
        )
    }

    fn softmax_rows_backward(
        &self,
        y: &GpuTensor,
        dy: &GpuTensor,
        scale: f64,
        dx: &mut GpuTensor,
    ) -> Result<()> {
        check_same("softmax_rows_backward", y.shape, dy.shape)?;
        check_same("softmax_rows_backward", y.shape, dx.shape)?;
        let s = y.shape;
        if s.is_empty() {
            return Ok(());
        }
        let total = s.batch * s.rows;
        let (gx, gy) = self.row_grid("softmax_rows_backward", total)?;
        let params = SoftmaxBackwardParams {
            cols: s.cols as u32,
            total_rows: total as u32,
            scale: scale as f32,
            pad: 0,
        };
        self.dispatch(
            "softmax_rows_backward",
            &self.kernels.softmax_backward,
            &[y, dy, dx],
            bytemuck::bytes_of(&params),
            (gx, gy, 1),
        )
    }

    fn axpby(&self, a: f64, x: &GpuTensor, b: f64, y: &mut GpuTensor) -> Result<()> {
        check_same("axpby", x.shape, y.shape)?;
        let len = x.shape.len();
        if len == 0 {
            return Ok(());
        }
        let (gx, gy) = self.grid("axpby", len.div_ceil(ELEM_WG))?;
        let params = AxpbyParams {
            len: len as u32,
            a: a as f32,
            b: b as f32,
            pad: 0,
        };
        self.dispatch(
            "axpby",
            &self.kernels.axpby,
            &[x, y],
            bytemuck::bytes_of(&params),
            (gx, gy, 1),
        )
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
        check_same("adamw", p.shape, g.shape)?;
        check_same("adamw", p.shape, m.shape)?;
        check_same("adamw", p.shape, v.shape)?;
        let len = p.shape.len();
        if len == 0 {
            return Ok(());
        }
        let c = AdamWCoeffs::new(h, t);
        let (gx, gy) = self.grid("adamw", len.div_ceil(ELEM_WG))?;
        let params = AdamWParams {
            len: len as u32,
            lr: h.lr as f32,
            beta1: h.beta1 as f32,
            beta2: h.beta2 as f32,
            eps: h.eps as f32,
            wd: h.weight_decay as f32,
            c1: c.inv_bc1 as f32,
            c2: c.inv_bc2 as f32,
            one_minus_beta1: (1.0 - h.beta1) as f32,
            one_minus_beta2: (1.0 - h.beta2) as f32,
            pad: [0; 2],
        };
        self.dispatch(
            "adamw",
            &self.kernels.adamw,
            &[p, g, m, v],
            bytemuck::bytes_of(&params),
            (gx, gy, 1),
        )
    }

    fn embed(
        &self,
        emb: &GpuTensor,
        pos: &GpuTensor,
        ids: &GpuTensor,
        out: &mut GpuTensor,
    ) -> Result<()> {
        check_embed("embed", emb.shape, pos.shape, ids.shape, out.shape)?;
        let len = out.shape.len();
        if len == 0 {
            return Ok(());
        }
        let (gx, gy) = self.grid("embed", len.div_ceil(ELEM_WG))?;
        let params = EmbedParams {
            total: len as u32,
            d: out.shape.cols as u32,
            t: ids.shape.rows as u32,
            vocab: emb.shape.rows as u32,
        };
        self.dispatch(
            "embed",
            &self.kernels.embed,
            &[emb, pos, ids, out],
            bytemuck::bytes_of(&params),
            (gx, gy, 1),
        )
    }

    fn embed_backward(
        &self,
        dh: &GpuTensor,
        ids: &GpuTensor,
        d_emb: &mut GpuTensor,
        d_pos: &mut GpuTensor,
    ) -> Result<()> {
        check_embed(
            "embed_backward",
            d_emb.shape,
            d_pos.shape,
            ids.shape,
            dh.shape,
        )?;
        let len = d_emb.shape.len() + d_pos.shape.len();
        if len == 0 {
            return Ok(());
        }
        let (gx, gy) = self.grid("embed_backward", len.div_ceil(ELEM_WG))?;
        let params = EmbedBackwardParams {
            rows: total_rows(ids.shape) as u32,
            d: dh.shape.cols as u32,
            t: ids.shape.rows as u32,
            vocab: d_emb.shape.rows as u32,
            pos_rows: d_pos.shape.rows as u32,
            pad: [0; 3],
        };
        self.dispatch(
            "embed_backward",
            &self.kernels.embed_backward,
            &[dh, ids, d_emb, d_pos],
            bytemuck::bytes_of(&params),
            (gx, gy, 1),
        )
    }

    fn relu(&self, x: &GpuTensor, y: &mut GpuTensor) -> Result<()> {
        check_same("relu", x.shape, y.shape)?;
        self.elementwise("relu", &self.kernels.relu, &[x, y], x.shape.len())
    }

    fn relu_backward(&self, x: &GpuTensor, dy: &GpuTensor, dx: &mut GpuTensor) -> Result<()> {
        check_same("relu_backward", x.shape, dy.shape)?;
        check_same("relu_backward", x.shape, dx.shape)?;
        self.elementwise(
            "relu_backward",
            &self.kernels.relu_backward,
            &[x, dy, dx],
            x.shape.len(),
        )
    }

    fn softmax_xent(
        &self,
        logits: &GpuTensor,
        targets: &GpuTensor,
        coef: &GpuTensor,
        dlogits: &mut GpuTensor,
        loss: &mut GpuTensor,
    ) -> Result<()> {
        check_xent(
            logits.shape,
            targets.shape,
            coef.shape,
            dlogits.shape,
            loss.shape,
        )?;
        let total = total_rows(logits.shape);
        if total == 0 || logits.shape.cols == 0 {
            return Ok(());
        }
        let (gx, gy) = self.row_grid("softmax_xent", total)?;
        let params = XentParams {
            cols: logits.shape.cols as u32,
            total_rows: total as u32,
            pad: [0; 2],
        };
        self.dispatch(
            "softmax_xent",
            &self.kernels.xent,
            &[logits, targets, coef, dlogits, loss],
            bytemuck::bytes_of(&params),
            (gx, gy, 1),
        )
    }

    fn flush(&self) -> Result<()> {
        self.check_alive()?;
        self.submit()
    }

    fn sync(&self) -> Result<()> {
        self.check_alive()?;
        self.submit()?;
        self.wait("sync")
    }

    fn reshape(&self, t: &mut GpuTensor, shape: Shape) -> Result<()> {
        check_len(t.shape, shape.len())?;
        t.shape = shape;
        Ok(())
    }
}
