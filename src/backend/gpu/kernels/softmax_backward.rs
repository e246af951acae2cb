//! Backward of the row softmax given its output,
//! $\partial X = s\thinspace Y \odot (\partial Y - \mathrm{rowsum}(Y \odot \partial Y))$
//! (`softmax_backward.wgsl`, a row kernel).

use super::prelude::*;

params! {
    /// Columns, rows over the batch and the scale $s$.
    struct SoftmaxBackwardParams {
        cols: u32,
        total_rows: u32,
        scale: f32,
        pad: u32,
    }
}

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::rows(
    ["softmax_backward", "softmax_backward_rowwise"],
    &[("y", Read), ("dy", Read), ("dx", Write)],
    SoftmaxBackwardParams::WGSL,
    include_str!("softmax_backward.wgsl"),
);

pub(in crate::backend::gpu) fn run(
    gpu: &Wgpu,
    y: &GpuTensor,
    dy: &GpuTensor,
    scale: f64,
    dx: &mut GpuTensor,
) -> Result<()> {
    let what = "softmax_rows_backward";
    check_same(what, y.shape, dy.shape)?;
    check_same(what, y.shape, dx.shape)?;
    let s = y.shape;
    if s.is_empty() {
        return Ok(());
    }
    let total = s.batch * s.rows;
    let params = SoftmaxBackwardParams {
        cols: s.cols as u32,
        total_rows: total as u32,
        scale: scale as f32,
        ..Zeroable::zeroed()
    };
    gpu.launch(
        what,
        &SHADERS,
        &[y, dy, dx],
        &params,
        (total, gpu.rows_per_group()),
    )
}
