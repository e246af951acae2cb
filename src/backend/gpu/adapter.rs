//! Adapter discovery and device options: which graphics APIs to search, the
//! order adapters are preferred in (hardware before software), and opening a
//! device with the adapter's own limits.

use std::sync::Arc;
use std::time::Duration;

use super::errors::Health;
use crate::backend::{BackendError, Result};

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
    /// `main_tiled` of `kernels/matmul.wgsl`: 64×64 tiles staged in workgroup
    /// memory, 4×4 register blocks.
    Tiled,
    /// `main_direct` of `kernels/matmul.wgsl`: 4×4 register blocks read
    /// straight from storage (no workgroup memory or barriers; faster on
    /// llvmpipe). Also selects the row-wise entry points of the row kernels
    /// (softmax, its backward, cross-entropy: one invocation per row instead of
    /// one 64-wide workgroup per row with barrier reductions), for the same reason.
    Direct,
}

impl MatmulKernel {
    /// `Tiled` or `Direct` for an adapter of type `device` (resolves `Auto`).
    /// Software adapters (llvmpipe) run the workgroup-memory-free kernels:
    /// there the CPU caches tile, and barriers cost more than they save.
    pub(super) fn resolve(self, device: wgpu::DeviceType) -> Self {
        match self {
            MatmulKernel::Auto if device == wgpu::DeviceType::Cpu => MatmulKernel::Direct,
            MatmulKernel::Auto => MatmulKernel::Tiled,
            k => k,
        }
    }
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

/// Every adapter object on `backends`, best first.
fn enumerate(backends: wgpu::Backends) -> Vec<wgpu::Adapter> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let inst = wgpu::Instance::new(desc);
    let mut all = pollster::block_on(inst.enumerate_adapters(backends));
    all.sort_by_key(|a| type_rank(a.get_info().device_type));
    all
}

/// Every adapter on `backends`, best first (hardware before software).
pub fn adapters(backends: wgpu::Backends) -> Vec<wgpu::AdapterInfo> {
    enumerate(backends).iter().map(|a| a.get_info()).collect()
}

/// One-line description of an adapter.
pub fn describe_adapter(i: &wgpu::AdapterInfo) -> String {
    format!(
        "{} ({:?}, {:?}, driver {} {})",
        i.name, i.device_type, i.backend, i.driver, i.driver_info
    )
}

/// The best adapter allowed by `opts`, or [`BackendError::NoAdapter`] naming
/// what was found.
pub(super) fn best_adapter(opts: &GpuOptions) -> Result<wgpu::Adapter> {
    let all = enumerate(opts.backends);
    let found: Vec<String> = all
        .iter()
        .map(|a| describe_adapter(&a.get_info()))
        .collect();
    all.into_iter()
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
        })
}

/// A device and queue on `adapter` with the adapter's own limits. Device loss
/// and errors outside our error scopes are recorded in the returned
/// [`Health`] (they surface on the next call) instead of aborting the process.
pub(super) fn open_device(
    adapter: &wgpu::Adapter,
) -> Result<(wgpu::Device, wgpu::Queue, wgpu::Limits, Health)> {
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
    let health = Health::default();
    let flag = health.clone();
    device.set_device_lost_callback(move |reason, msg| {
        flag.record(format!("{reason:?}: {msg}"), true);
    });
    let flag = health.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        flag.record(format!("uncaptured error: {e}"), false);
    }));
    Ok((device, queue, limits, health))
}
