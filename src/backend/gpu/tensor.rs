//! Device tensors: storage buffers of f32, their allocation within the
//! device limits, upload and read-back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::Wgpu;
use super::errors::ErrorScopes;
use crate::backend::{BackendError, Result, Shape, check_len};

/// A batch of row-major f32 matrices in a device buffer.
#[derive(Debug)]
pub struct GpuTensor {
    pub(super) buf: wgpu::Buffer,
    pub(super) shape: Shape,
    /// Unique for the life of the process: the bind-group cache key.
    pub(super) id: u64,
    /// Liveness token: cache entries hold a `Weak` of it, so the bind groups
    /// of dropped tensors (which keep their buffers alive) can be swept.
    pub(super) alive: Arc<()>,
}

/// Source of [`GpuTensor::id`].
static NEXT_TENSOR_ID: AtomicU64 = AtomicU64::new(0);

impl GpuTensor {
    /// Shape of the batch.
    pub fn shape(&self) -> Shape {
        self.shape
    }
}

/// Outcome of a buffer mapping, filled by its callback.
type MapStatus = Arc<Mutex<Option<std::result::Result<(), wgpu::BufferAsyncError>>>>;

impl Wgpu {
    /// Bytes of a buffer holding `len` f32, checked against the device limits.
    fn buffer_bytes(&self, what: &str, len: usize) -> Result<u64> {
        let bytes = (len.max(1) as u64).saturating_mul(4);
        let checks = [
            ("max_buffer_size", self.limits.max_buffer_size),
            (
                "max_storage_buffer_binding_size",
                self.limits.max_storage_buffer_binding_size,
            ),
            // Kernels index with u32: `bytes > 4 (2^32 - 1)` iff `len > 2^32 - 1`.
            ("u32 element index", u32::MAX as u64 * 4),
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
        Ok(bytes)
    }

    /// A zero-filled tensor (wgpu zero-initialises new buffers).
    pub(super) fn alloc(&self, shape: Shape) -> Result<GpuTensor> {
        self.health.check()?;
        let what = format!("tensor {shape}");
        let size = self.buffer_bytes(&what, shape.len())?;
        let scope = ErrorScopes::push(&self.device);
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

    /// Overwrites `t` with host data.
    pub(super) fn upload_into(&self, t: &mut GpuTensor, data: &[f32]) -> Result<()> {
        check_len(t.shape, data.len())?;
        self.health.check()?;
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

    /// Copies `t` back to the host (submits the recorded batch and waits).
    pub(super) fn download(&self, t: &GpuTensor) -> Result<Vec<f32>> {
        self.health.check()?;
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
        let done: MapStatus = Arc::new(Mutex::new(None));
        let d2 = done.clone();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            if let Ok(mut g) = d2.lock() {
                *g = Some(r);
            }
        });
        scope.pop("reading a tensor back")?;
        self.wait("reading a tensor back")?;
        self.await_map(&done)?;
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

    /// Waits for a map callback. With several threads on one device, another
    /// thread's poll may be the one running it: wait for it, within the timeout.
    fn await_map(&self, done: &MapStatus) -> Result<()> {
        let deadline = std::time::Instant::now() + self.timeout;
        let mut status = done.lock().ok().and_then(|mut g| g.take());
        while status.is_none() && std::time::Instant::now() < deadline {
            self.health.check()?;
            let _ = self.device.poll(wgpu::PollType::Poll);
            std::thread::yield_now();
            status = done.lock().ok().and_then(|mut g| g.take());
        }
        let msg = match status {
            Some(Ok(())) => return Ok(()),
            Some(Err(e)) => e.to_string(),
            None => format!(
                "map callback did not run within {:.1} s",
                self.timeout.as_secs_f64()
            ),
        };
        self.health.check()?;
        Err(BackendError::Gpu {
            what: "mapping a read-back buffer".into(),
            msg,
        })
    }
}
