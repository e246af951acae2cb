//! Batched matmul $C_b \leftarrow \alpha\thinspace\mathrm{op}(A_b)\thinspace\mathrm{op}(B_b) + \beta\thinspace C_b$
//! (`matmul.wgsl`: `main_tiled` covers a 64×64 block of $C$ per workgroup,
//! `main_direct` a 32×32 block).

use super::prelude::*;
use crate::backend::{BackendError, Op, matmul_dims};

params! {
    /// Dimensions of $C = \mathrm{op}(A)\thinspace\mathrm{op}(B)$ ($m \times k$ by
    /// $k \times n$), transposes, batch strides in elements (0 broadcasts)
    /// and the first batch of this dispatch.
    struct MatmulParams {
        m: u32,
        n: u32,
        k: u32,
        trans_a: u32,
        trans_b: u32,
        stride_a: u32,
        stride_b: u32,
        stride_c: u32,
        batch_offset: u32,
        alpha: f32,
        beta: f32,
        pad: u32,
    }
}

const fn shader(name: &'static str, entry: &'static str) -> Shader {
    Shader {
        name,
        bindings: &[("a", Read), ("b", Read), ("c", Write)],
        params: MatmulParams::WGSL,
        entries: "",
        body: include_str!("matmul.wgsl"),
        entry,
    }
}

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::PerSet {
    tiled: shader("matmul", "main_tiled"),
    direct: shader("matmul_direct", "main_direct"),
};

/// Rows (= columns) of the block of $C$ one workgroup covers.
fn block(direct: bool) -> usize {
    if direct { 32 } else { 64 }
}

#[allow(clippy::too_many_arguments)]
pub(in crate::backend::gpu) fn run(
    gpu: &Wgpu,
    alpha: f64,
    a: &GpuTensor,
    op_a: Op,
    b: &GpuTensor,
    op_b: Op,
    beta: f64,
    c: &mut GpuTensor,
) -> Result<()> {
    let (m, n, k) = matmul_dims(a.shape, op_a, b.shape, op_b, c.shape)?;
    if c.shape.is_empty() {
        return Ok(());
    }
    let stride = |s: Shape| {
        if s.batch == 1 && c.shape.batch > 1 {
            0
        } else {
            s.mat_len() as u32
        }
    };
    let tile = block(gpu.direct());
    let gx = n.div_ceil(tile);
    let gy = m.div_ceil(tile);
    let lim = gpu.limits.max_compute_workgroups_per_dimension as usize;
    if gx > lim || gy > lim {
        return Err(BackendError::TooManyWorkgroups {
            what: format!("matmul {m}×{k}·{k}×{n}"),
            groups: gx.max(gy) as u64,
            limit: lim as u32,
        });
    }
    let mut params = MatmulParams {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        trans_a: (op_a == Op::T) as u32,
        trans_b: (op_b == Op::T) as u32,
        stride_a: stride(a.shape),
        stride_b: stride(b.shape),
        stride_c: c.shape.mat_len() as u32,
        batch_offset: 0,
        alpha: alpha as f32,
        beta: beta as f32,
        ..Zeroable::zeroed()
    };
    // Batches beyond the z-dimension limit go in several dispatches.
    let shader = gpu.shader(&SHADERS);
    let mut done = 0usize;
    while done < c.shape.batch {
        let nz = (c.shape.batch - done).min(lim);
        params.batch_offset = done as u32;
        let groups = (gx as u32, gy as u32, nz as u32);
        gpu.dispatch("matmul", shader, &[a, b, c], &params, groups)?;
        done += nz;
    }
    Ok(())
}
