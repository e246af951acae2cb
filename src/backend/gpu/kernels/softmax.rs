//! Row softmax $Y = \mathrm{softmax}\_{\text{row}}(s\thinspace X)$ under a
//! [`SoftmaxMask`] (`softmax.wgsl`, a row kernel).

use super::prelude::*;
use crate::backend::SoftmaxMask;

params! {
    /// Rows per matrix, columns, rows over the batch, the mask
    /// (0 none, 1 causal, 2 causal without key 0 for queries $i \ge 1$) and $s$.
    struct SoftmaxParams {
        rows: u32,
        cols: u32,
        total_rows: u32,
        causal: u32,
        scale: f32,
        pad0: u32,
        pad1: u32,
        pad2: u32,
    }
}

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::rows(
    ["softmax", "softmax_rowwise"],
    &[("x", Read), ("y", Write)],
    SoftmaxParams::WGSL,
    include_str!("softmax.wgsl"),
);

pub(in crate::backend::gpu) fn run(
    gpu: &Wgpu,
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
        ..Zeroable::zeroed()
    };
    gpu.launch(
        "softmax_rows",
        &SHADERS,
        &[x, y],
        &params,
        (total, gpu.rows_per_group()),
    )
}
