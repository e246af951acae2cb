//! $y = \max(x, 0)$ elementwise (`relu.wgsl`).

use super::prelude::*;

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::elementwise(
    "relu",
    &[("x", Read), ("y", Write)],
    LenParams::WGSL,
    include_str!("relu.wgsl"),
);

pub(in crate::backend::gpu) fn run(gpu: &Wgpu, x: &GpuTensor, y: &mut GpuTensor) -> Result<()> {
    check_same("relu", x.shape, y.shape)?;
    let len = x.shape.len();
    gpu.launch(
        "relu",
        &SHADERS,
        &[x, y],
        &LenParams::new(len),
        (len, ELEM_WG),
    )
}
