//! Embedding gather with positional rows (`embed.wgsl`; see
//! [`crate::backend::Backend::embed`]).

use super::prelude::*;
use crate::backend::check_embed;

params! {
    /// Output elements $B T d$, width $d$, sequence length $T$, vocabulary $V$.
    struct EmbedParams {
        len: u32,
        d: u32,
        t: u32,
        vocab: u32,
    }
}

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::elementwise(
    "embed",
    &[("emb", Read), ("pos", Read), ("ids", Read), ("out", Write)],
    EmbedParams::WGSL,
    include_str!("embed.wgsl"),
);

pub(in crate::backend::gpu) fn run(
    gpu: &Wgpu,
    emb: &GpuTensor,
    pos: &GpuTensor,
    ids: &GpuTensor,
    out: &mut GpuTensor,
) -> Result<()> {
    check_embed("embed", emb.shape, pos.shape, ids.shape, out.shape)?;
    let len = out.shape.len();
    let params = EmbedParams {
        len: len as u32,
        d: out.shape.cols as u32,
        t: ids.shape.rows as u32,
        vocab: emb.shape.rows as u32,
    };
    gpu.launch(
        "embed",
        &SHADERS,
        &[emb, pos, ids, out],
        &params,
        (len, ELEM_WG),
    )
}
