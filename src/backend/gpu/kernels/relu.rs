//! $y = \max(x, 0)$ elementwise (`relu.wgsl`).

use super::prelude::*;

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::One(Shader {
    name: "relu",
    bindings: &[("x", Read), ("y", Write)],
    params: LenParams::WGSL,
    sources: &[ELEMENTWISE, include_str!("relu.wgsl")],
    entry: "main",
});

pub(in crate::backend::gpu) fn run(gpu: &Wgpu, x: &GpuTensor, y: &mut GpuTensor) -> Result<()> {
    check_same("relu", x.shape, y.shape)?;
    let len = x.shape.len();
    gpu.elementwise("relu", &SHADERS, &[x, y], &LenParams::new(len), len)
}
