//! Pipeline building and the pipeline cache.
//!
//! A kernel is described once, on the host, by a [`Shader`]: its storage
//! bindings (name and access), its uniform parameter struct (WGSL text made
//! from the Rust struct by `kernels::params!`), the WGSL pieces of its module
//! and its entry point. The WGSL module is assembled from that description, so
//! the binding declarations and the parameter struct the shader sees are the
//! ones the bind-group layout is built from:
//!
//! ```text
//! constants (workgroup sizes of the host)   kernels/prelude.wgsl
//! struct Params { … }                       from the Rust parameter struct
//! @group(0) @binding(i) var<storage, …> …;  from Shader::bindings
//! @group(0) @binding(n) var<uniform> p: Params;
//! shared entry points, then the body       e.g. kernels/rows.wgsl, kernels/softmax.wgsl
//! ```
//!
//! Every kernel of [`super::kernels::ALL`] is compiled when the device opens
//! (one error scope around all of them), so a shader the driver rejects
//! fails [`super::Wgpu::new`], not a training step.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::errors::ErrorScopes;
use crate::backend::{BackendError, Result};

/// Access of a storage binding (must match how the WGSL uses it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// `var<storage, read>`.
    Read,
    /// `var<storage, read_write>`.
    Write,
}

/// The host's description of one compute kernel.
pub(crate) struct Shader {
    /// Pipeline label and cache key (unique among the kernels).
    pub name: &'static str,
    /// Storage buffers at bindings `0..n`, in the order tensors are passed.
    pub bindings: &'static [(&'static str, Access)],
    /// `struct Params { … }` in WGSL, bound as `p` at binding `n`.
    pub params: &'static str,
    /// Shared WGSL entry points the body plugs into (`kernels/elementwise.wgsl`,
    /// `kernels/rows.wgsl`), or `""` when the body has its own.
    pub entries: &'static str,
    /// The kernel's own WGSL (`kernels/<name>.wgsl`).
    pub body: &'static str,
    /// Entry point of the module this pipeline runs.
    pub entry: &'static str,
}

/// Invocations per workgroup of the elementwise kernels.
pub(crate) const ELEM_WG: usize = 256;
/// Workgroup width of the row kernels: invocations sharing one row
/// (`main_group`) or rows per workgroup (`main_rowwise`).
pub(crate) const ROW_WG: usize = 64;

/// Workgroup sizes shared by the host's dispatch sizes and the shaders,
/// emitted as WGSL `const`s at the top of every module.
pub(crate) const WGSL_CONSTS: &[(&str, u32)] =
    &[("ELEM_WG", ELEM_WG as u32), ("ROW_WG", ROW_WG as u32)];

impl Shader {
    /// The WGSL module as compiled (see the module doc for its layout).
    pub(crate) fn module_source(&self) -> String {
        let mut s = String::new();
        for (name, v) in WGSL_CONSTS {
            let _ = writeln!(s, "const {name}: u32 = {v}u;");
        }
        s.push_str(include_str!("kernels/prelude.wgsl"));
        s.push_str(self.params);
        for (i, (name, access)) in self.bindings.iter().enumerate() {
            let mode = match access {
                Access::Read => "read",
                Access::Write => "read_write",
            };
            let _ = writeln!(
                s,
                "@group(0) @binding({i}) var<storage, {mode}> {name}: array<f32>;"
            );
        }
        let n = self.bindings.len();
        let _ = writeln!(s, "@group(0) @binding({n}) var<uniform> p: Params;");
        s.push_str(self.entries);
        s.push_str(self.body);
        s
    }
}

/// One compiled compute pipeline with its explicit bind-group layout:
/// storage buffers at bindings `0..n`, then the uniform parameter block at
/// binding `n` with a dynamic offset into the parameter ring.
pub(super) struct Kernel {
    /// Position in the pipeline cache (part of the bind-group cache key).
    pub index: u8,
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    /// Number of storage bindings.
    pub storage: usize,
}

fn build(device: &wgpu::Device, index: u8, shader: &Shader) -> Kernel {
    let label = Some(shader.name);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label,
        source: wgpu::ShaderSource::Wgsl(shader.module_source().into()),
    });
    let buffer =
        |binding: usize, ty: wgpu::BufferBindingType, dynamic: bool| wgpu::BindGroupLayoutEntry {
            binding: binding as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: dynamic,
                min_binding_size: None,
            },
            count: None,
        };
    let mut entries: Vec<_> = shader
        .bindings
        .iter()
        .enumerate()
        .map(|(i, &(_, access))| {
            let read_only = access == Access::Read;
            buffer(i, wgpu::BufferBindingType::Storage { read_only }, false)
        })
        .collect();
    let n = shader.bindings.len();
    entries.push(buffer(n, wgpu::BufferBindingType::Uniform, true));
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label,
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label,
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label,
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some(shader.entry),
        compilation_options: Default::default(),
        cache: None,
    });
    Kernel {
        index,
        pipeline,
        layout,
        storage: n,
    }
}

/// The compiled kernels of one device, by [`Shader::name`].
pub(super) struct Pipelines {
    by_name: HashMap<&'static str, Kernel>,
}

impl Pipelines {
    /// Compiles `shaders` inside one error scope.
    pub(super) fn build(device: &wgpu::Device, shaders: &[&Shader]) -> Result<Self> {
        let scope = ErrorScopes::push(device);
        let mut by_name = HashMap::new();
        for (i, s) in shaders.iter().enumerate() {
            let clash = by_name.contains_key(s.name);
            let index = u8::try_from(i + 1).ok().filter(|_| !clash);
            let Some(index) = index else {
                scope.pop("compiling the WGSL kernels")?;
                return Err(BackendError::Gpu {
                    what: format!("kernel {}", s.name),
                    msg: "name used twice, or more than 254 kernels".into(),
                });
            };
            by_name.insert(s.name, build(device, index, s));
        }
        scope.pop("compiling the WGSL kernels")?;
        Ok(Self { by_name })
    }

    /// The compiled kernel of `shader`.
    pub(super) fn get(&self, shader: &Shader) -> Result<&Kernel> {
        self.by_name
            .get(shader.name)
            .ok_or_else(|| BackendError::Gpu {
                what: format!("kernel {}", shader.name),
                msg: "not compiled: its shader is missing from gpu::kernels::ALL".into(),
            })
    }
}
