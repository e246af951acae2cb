//! Command batching and submission: kernels are recorded into one open
//! compute pass, their parameter blocks into slots of one uniform ring, and
//! the batch goes to the queue in one `queue.submit`; bind groups are cached
//! by kernel and tensors.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::{Arc, MutexGuard, Weak};

use super::Wgpu;
use super::errors::ErrorScopes;
use super::pipeline::{Kernel, Shader};
use super::tensor::GpuTensor;
use crate::backend::{BackendError, Result};

/// Bytes of a kernel's uniform parameter block as bound (every parameter
/// struct of `kernels/` fits; checked at compile time by `kernels::params!`).
pub(crate) const PARAM_BYTES: usize = 64;

/// Dispatches recorded into one submit at most (slots of the parameter ring).
pub const PARAM_RING_SLOTS: usize = 512;

/// Storage bindings a kernel may have at most (size of the cache key).
const MAX_BINDINGS: usize = 6;

/// Cache size below which dead bind groups are not swept.
const MIN_SWEEP: usize = 256;

/// Bind-group cache key: kernel and the ids of the tensors bound, in order.
type BindKey = (u8, [u64; MAX_BINDINGS]);

/// A cached bind group and liveness tokens of the tensors it binds.
struct CachedBind {
    group: wgpu::BindGroup,
    tensors: Vec<Weak<()>>,
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

/// Kernels recorded but not yet submitted, and the bind-group cache.
pub(super) struct Batch {
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
    pub(super) stats: GpuStats,
}

impl Default for Batch {
    fn default() -> Self {
        Self {
            pass: None,
            encoder: None,
            params: Vec::new(),
            labels: Vec::new(),
            bound_kernel: None,
            cache: HashMap::new(),
            sweep_at: MIN_SWEEP,
            stats: GpuStats::default(),
        }
    }
}

/// The uniform parameter ring of a device and its slot stride
/// (`PARAM_BYTES` rounded up to `min_uniform_buffer_offset_alignment`).
pub(super) fn param_ring(device: &wgpu::Device, limits: &wgpu::Limits) -> (wgpu::Buffer, usize) {
    let align = (limits.min_uniform_buffer_offset_alignment as usize).max(1);
    let slot_stride = PARAM_BYTES.div_ceil(align) * align;
    let ring = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("parameter ring"),
        size: (slot_stride * PARAM_RING_SLOTS) as u64,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    (ring, slot_stride)
}

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

impl Wgpu {
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

    /// Records one dispatch of `shader` over `tensors` (bindings `0..`) with
    /// the uniform block `params` (last binding, a slot of the ring) into the
    /// open batch. Nothing is submitted unless the ring is full.
    pub(super) fn dispatch<P: bytemuck::Pod>(
        &self,
        what: &'static str,
        shader: &Shader,
        tensors: &[&GpuTensor],
        params: &P,
        groups: (u32, u32, u32),
    ) -> Result<()> {
        let params = bytemuck::bytes_of(params);
        let kernel = self.pipelines.get(shader)?;
        debug_assert_eq!(tensors.len(), kernel.storage, "{what}: bindings");
        debug_assert!(params.len() <= PARAM_BYTES, "{what}: parameter block");
        self.health.check()?;
        let mut guard = self.lock_batch()?;
        let b = &mut *guard;
        if b.labels.len() == PARAM_RING_SLOTS {
            self.submit_locked(b)?;
        }
        let mut ids = [u64::MAX; MAX_BINDINGS];
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
        self.health.check()
    }

    /// Submits the recorded batch (see [`crate::backend::Backend::flush`]).
    pub(super) fn submit(&self) -> Result<()> {
        let mut guard = self.lock_batch()?;
        self.submit_locked(&mut guard)
    }

    /// Blocks until the queue is idle, or [`BackendError::Timeout`].
    pub(super) fn wait(&self, what: &str) -> Result<()> {
        let r = self.device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: Some(self.timeout),
        });
        match r {
            Ok(_) => self.health.check(),
            Err(wgpu::PollError::Timeout) => Err(BackendError::Timeout {
                what: what.to_string(),
                secs: self.timeout.as_secs_f64(),
            }),
            Err(e) => {
                self.health.check()?;
                Err(BackendError::Gpu {
                    what: what.to_string(),
                    msg: e.to_string(),
                })
            }
        }
    }
}
