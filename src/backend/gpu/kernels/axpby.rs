//! $y \leftarrow a\thinspace x + b\thinspace y$ elementwise (`axpby.wgsl`).

use super::prelude::*;

params! {
    /// Length and the coefficients $a$, $b$.
    struct AxpbyParams {
        len: u32,
        a: f32,
        b: f32,
        pad: u32,
    }
}

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::elementwise(
    "axpby",
    &[("x", Read), ("y", Write)],
    AxpbyParams::WGSL,
    include_str!("axpby.wgsl"),
);

pub(in crate::backend::gpu) fn run(
    gpu: &Wgpu,
    a: f64,
    x: &GpuTensor,
    b: f64,
    y: &mut GpuTensor,
) -> Result<()> {
    check_same("axpby", x.shape, y.shape)?;
    let len = x.shape.len();
    let params = AxpbyParams {
        len: len as u32,
        a: a as f32,
        b: b as f32,
        ..Zeroable::zeroed()
    };
    gpu.launch("axpby", &SHADERS, &[x, y], &params, (len, ELEM_WG))
}
