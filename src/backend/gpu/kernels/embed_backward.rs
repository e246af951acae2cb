//! Backward of the embedding gather, as a gather without atomics
//! (`embed_backward.wgsl`; see [`crate::backend::Backend::embed_backward`]).

use super::prelude::*;
use crate::backend::{check_embed, total_rows};

params! {
    /// Rows $B T$, width $d$, sequence length $T$, vocabulary $V$, positional
    /// rows $P$ and the invocations $(V + P)\thinspace d$.
    struct EmbedBackwardParams {
        rows: u32,
        d: u32,
        t: u32,
        vocab: u32,
        pos_rows: u32,
        len: u32,
        pad0: u32,
        pad1: u32,
    }
}

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::elementwise(
    "embed_backward",
    &[
        ("dh", Read),
        ("ids", Read),
        ("d_emb", Write),
        ("d_pos", Write),
    ],
    EmbedBackwardParams::WGSL,
    include_str!("embed_backward.wgsl"),
);

pub(in crate::backend::gpu) fn run(
    gpu: &Wgpu,
    dh: &GpuTensor,
    ids: &GpuTensor,
    d_emb: &mut GpuTensor,
    d_pos: &mut GpuTensor,
) -> Result<()> {
    let (e, p) = (d_emb.shape, d_pos.shape);
    check_embed("embed_backward", e, p, ids.shape, dh.shape)?;
    let len = e.len() + p.len();
    let params = EmbedBackwardParams {
        rows: total_rows(ids.shape) as u32,
        d: dh.shape.cols as u32,
        t: ids.shape.rows as u32,
        vocab: e.rows as u32,
        pos_rows: p.rows as u32,
        len: len as u32,
        ..Zeroable::zeroed()
    };
    let what = "embed_backward";
    gpu.launch(
        what,
        &SHADERS,
        &[dh, ids, d_emb, d_pos],
        &params,
        (len, ELEM_WG),
    )
}
