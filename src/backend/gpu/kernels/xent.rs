//! Weighted softmax cross-entropy per row with its gradient (`xent.wgsl`,
//! a row kernel; see [`crate::backend::Backend::softmax_xent`]).

use super::prelude::*;
use crate::backend::{check_xent, total_rows};

params! {
    /// Classes (columns) and rows over the batch.
    struct XentParams {
        cols: u32,
        total_rows: u32,
        pad0: u32,
        pad1: u32,
    }
}

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::rows(
    ["xent", "xent_rowwise"],
    &[
        ("z", Read),
        ("targets", Read),
        ("coef", Read),
        ("dz", Write),
        ("loss", Write),
    ],
    XentParams::WGSL,
    include_str!("xent.wgsl"),
);

pub(in crate::backend::gpu) fn run(
    gpu: &Wgpu,
    logits: &GpuTensor,
    targets: &GpuTensor,
    coef: &GpuTensor,
    dlogits: &mut GpuTensor,
    loss: &mut GpuTensor,
) -> Result<()> {
    let (z, y, c, dz, l) = (logits, targets, coef, dlogits, loss);
    check_xent(z.shape, y.shape, c.shape, dz.shape, l.shape)?;
    let total = total_rows(z.shape);
    if total == 0 || z.shape.cols == 0 {
        return Ok(());
    }
    let params = XentParams {
        cols: z.shape.cols as u32,
        total_rows: total as u32,
        ..Zeroable::zeroed()
    };
    gpu.launch(
        "softmax_xent",
        &SHADERS,
        &[z, y, c, dz, l],
        &params,
        (total, gpu.rows_per_group()),
    )
}
