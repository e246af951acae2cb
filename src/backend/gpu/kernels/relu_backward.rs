//! Backward of ReLU at its input, $\partial x = \partial y \cdot \[x > 0\]$
//! (`relu_backward.wgsl`).

use super::prelude::*;

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::elementwise(
    "relu_backward",
    &[("x", Read), ("dy", Read), ("dx", Write)],
    LenParams::WGSL,
    include_str!("relu_backward.wgsl"),
);

pub(in crate::backend::gpu) fn run(
    gpu: &Wgpu,
    x: &GpuTensor,
    dy: &GpuTensor,
    dx: &mut GpuTensor,
) -> Result<()> {
    check_same("relu_backward", x.shape, dy.shape)?;
    check_same("relu_backward", x.shape, dx.shape)?;
    let len = x.shape.len();
    let what = "relu_backward";
    gpu.launch(
        what,
        &SHADERS,
        &[x, dy, dx],
        &LenParams::new(len),
        (len, ELEM_WG),
    )
}
