//! The compute kernels, one per file: `<name>.rs` holds the host side
//! (parameter struct, bindings, dispatch sizes, shape checks) and sits next to
//! `<name>.wgsl`, the kernel body. Shared WGSL: `prelude.wgsl` (every module),
//! `elementwise.wgsl` (entry point of the one-invocation-per-element kernels)
//! and `rows.wgsl` (the two entry points of the row kernels and their
//! workgroup reductions). See `pipeline.rs` for how a module is assembled.
//!
//! A kernel with two implementations (the tiled/workgroup-reduction one for
//! hardware adapters, the direct/row-wise one for software adapters, chosen
//! by [`MatmulKernel`]) has both entry points in one WGSL file.

use super::Wgpu;
use super::adapter::MatmulKernel;
use super::pipeline::{Access, Shader};
pub(crate) use super::pipeline::{ELEM_WG, ROW_WG};
use crate::backend::{BackendError, Result};

/// WGSL entry point of the elementwise kernels (defines `fn main`, calls the
/// kernel's `fn element(i: u32)`).
const ELEMENTWISE: &str = include_str!("elementwise.wgsl");
/// WGSL entry points of the row kernels (`main_group`, `main_rowwise`).
const ROWS: &str = include_str!("rows.wgsl");

/// A uniform parameter struct: `#[repr(C)]`, `Pod`, and the same struct in
/// WGSL as the associated `WGSL` text (named `Params`, the name every shader
/// uses). Fields are `u32` or `f32` (the Rust and WGSL names agree), so the
/// layout is the same on both sides; the size is checked at compile time to
/// be a multiple of 16 bytes within the bound block.
macro_rules! params {
    ($(#[$m:meta])* struct $name:ident { $($(#[$fm:meta])* $f:ident: $t:ident),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
        pub(crate) struct $name {
            $($(#[$fm])* pub $f: $t,)*
        }

        impl $name {
            /// This struct in WGSL, as `struct Params`.
            pub(crate) const WGSL: &'static str = concat!(
                "struct Params {\n",
                $("    ", stringify!($f), ": ", stringify!($t), ",\n",)*
                "}\n"
            );
        }

        const _: () = {
            let n = std::mem::size_of::<$name>();
            assert!(n <= $crate::backend::gpu::batch::PARAM_BYTES && n % 16 == 0);
        };
    };
}

/// What every kernel file imports.
mod prelude {
    pub(super) use super::super::pipeline::Access::{Read, Write};
    pub(super) use super::super::pipeline::Shader;
    pub(super) use super::super::{GpuTensor, Wgpu};
    pub(super) use super::{ELEM_WG, LenParams, Variants};
    pub(super) use crate::backend::{Result, Shape, check_same};
    pub(super) use bytemuck::Zeroable;
}

pub(super) mod adamw;
pub(super) mod axpby;
pub(super) mod embed;
pub(super) mod embed_backward;
pub(super) mod matmul;
pub(super) mod relu;
pub(super) mod relu_backward;
pub(super) mod softmax;
pub(super) mod softmax_backward;
pub(super) mod xent;

/// A kernel's shader, or one shader per kernel set.
pub(super) enum Variants {
    /// The same shader on every adapter.
    One(Shader),
    /// `Tiled` for hardware adapters, `Direct` for software ones.
    PerSet { tiled: Shader, direct: Shader },
}

impl Variants {
    /// An elementwise kernel: entry `main` of `elementwise.wgsl`, calling the
    /// body's `fn element(i: u32)`.
    const fn elementwise(
        name: &'static str,
        bindings: &'static [(&'static str, Access)],
        params: &'static str,
        body: &'static str,
    ) -> Self {
        let entries = ELEMENTWISE;
        Variants::One(Shader {
            name,
            bindings,
            params,
            entries,
            body,
            entry: "main",
        })
    }

    /// A row kernel named `[tiled, direct]`: one workgroup per row
    /// (`main_group`) or one invocation per row (`main_rowwise`) of `rows.wgsl`.
    const fn rows(
        names: [&'static str; 2],
        bindings: &'static [(&'static str, Access)],
        params: &'static str,
        body: &'static str,
    ) -> Self {
        let [tiled, direct] = names;
        let entries = ROWS;
        Variants::PerSet {
            tiled: Shader {
                name: tiled,
                bindings,
                params,
                entries,
                body,
                entry: "main_group",
            },
            direct: Shader {
                name: direct,
                bindings,
                params,
                entries,
                body,
                entry: "main_rowwise",
            },
        }
    }

    /// The shader a device running kernel set `set` compiles.
    pub(super) fn pick(&self, set: MatmulKernel) -> &Shader {
        match self {
            Variants::One(s) => s,
            Variants::PerSet { direct, .. } if set == MatmulKernel::Direct => direct,
            Variants::PerSet { tiled, .. } => tiled,
        }
    }
}

/// Every kernel; each device compiles the variant of its kernel set when it
/// opens. A kernel missing here is an error at its first dispatch.
pub(super) const ALL: &[&Variants] = &[
    &matmul::SHADERS,
    &softmax::SHADERS,
    &softmax_backward::SHADERS,
    &axpby::SHADERS,
    &adamw::SHADERS,
    &embed::SHADERS,
    &embed_backward::SHADERS,
    &relu::SHADERS,
    &relu_backward::SHADERS,
    &xent::SHADERS,
];

params! {
    /// Parameters of an elementwise kernel that needs only its length.
    struct LenParams {
        len: u32,
        pad0: u32,
        pad1: u32,
        pad2: u32,
    }
}

impl LenParams {
    fn new(len: usize) -> Self {
        Self {
            len: len as u32,
            ..bytemuck::Zeroable::zeroed()
        }
    }
}

impl Wgpu {
    /// This device's shader of a kernel.
    fn shader<'a>(&self, v: &'a Variants) -> &'a Shader {
        v.pick(self.set)
    }

    /// One dispatch of `kernel` over `items` elements or rows, `per_group`
    /// of them to a workgroup; nothing when `items = 0`.
    fn launch<P: bytemuck::Pod>(
        &self,
        what: &'static str,
        kernel: &Variants,
        tensors: &[&super::GpuTensor],
        params: &P,
        (items, per_group): (usize, usize),
    ) -> Result<()> {
        if items == 0 {
            return Ok(());
        }
        let (gx, gy) = self.grid(what, items.div_ceil(per_group))?;
        self.dispatch(what, self.shader(kernel), tensors, params, (gx, gy, 1))
    }

    /// Rows one workgroup of a row kernel covers: 1 (`main_group`) or
    /// [`ROW_WG`] (`main_rowwise`).
    fn rows_per_group(&self) -> usize {
        if self.direct() { ROW_WG } else { 1 }
    }

    /// Splits `groups` workgroups into a 2-D grid within the per-dimension
    /// limit (the shaders flatten it back with `group_index`).
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every assembled module (both kernel sets) parses and passes naga's
    /// validation with all flags on (names resolve, types check, no store to
    /// a read-only binding), as wgpu's own front end would on a device; here
    /// without one. (naga 30 does not reject a barrier under non-uniform
    /// control flow, so that is left to review and the device suites.) Its entry point exists with the workgroup size the
    /// host's dispatch sizes assume, and its resource bindings are exactly
    /// the host's list: storage `0..n` with the listed name and access, the
    /// uniform `p` at `n`. Kernel names are unique within a set.
    #[test]
    fn modules_validate_and_bind_what_the_host_binds() {
        use naga::{AddressSpace, StorageAccess, valid};
        for set in [MatmulKernel::Tiled, MatmulKernel::Direct] {
            let mut names = Vec::new();
            for v in ALL {
                let s = v.pick(set);
                let src = s.module_source();
                let module = naga::front::wgsl::parse_str(&src)
                    .unwrap_or_else(|e| panic!("{}: {}", s.name, e.emit_to_string(&src)));
                valid::Validator::new(valid::ValidationFlags::all(), valid::Capabilities::empty())
                    .validate(&module)
                    .unwrap_or_else(|e| panic!("{}: {}", s.name, e.emit_to_string(&src)));
                let entry = module.entry_points.iter().find(|e| e.name == s.entry);
                let entry = entry.unwrap_or_else(|| panic!("{}: no {}", s.name, s.entry));
                let size = match s.entry {
                    "main" => [ELEM_WG as u32, 1, 1],
                    "main_group" | "main_rowwise" => [ROW_WG as u32, 1, 1],
                    "main_tiled" => [16, 16, 1],
                    _ => [8, 8, 1],
                };
                assert_eq!(entry.workgroup_size, size, "{}", s.name);
                let mut bound: Vec<_> = module
                    .global_variables
                    .iter()
                    .filter_map(|(_, g)| g.binding.as_ref().map(|b| (b.binding, g)))
                    .collect();
                bound.sort_by_key(|b| b.0);
                assert_eq!(bound.len(), s.bindings.len() + 1, "{}", s.name);
                for (i, (name, access)) in s.bindings.iter().enumerate() {
                    let (binding, g) = bound[i];
                    assert_eq!((binding, g.name.as_deref()), (i as u32, Some(*name)));
                    let want = match access {
                        Access::Read => StorageAccess::LOAD,
                        Access::Write => StorageAccess::LOAD | StorageAccess::STORE,
                    };
                    assert_eq!(g.space, AddressSpace::Storage { access: want }, "{name}");
                }
                let (binding, g) = bound[s.bindings.len()];
                assert_eq!(
                    (binding, g.name.as_deref()),
                    (s.bindings.len() as u32, Some("p"))
                );
                assert_eq!(g.space, AddressSpace::Uniform, "{}", s.name);
                assert!(!names.contains(&s.name), "{} twice", s.name);
                names.push(s.name);
            }
        }
    }

    /// The WGSL text of a parameter struct lists the Rust fields in order.
    #[test]
    fn params_wgsl_lists_the_fields_in_order() {
        assert_eq!(
            LenParams::WGSL,
            "struct Params {\n    len: u32,\n    pad0: u32,\n    pad1: u32,\n    pad2: u32,\n}\n"
        );
    }
}
