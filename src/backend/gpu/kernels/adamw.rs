//! The fused AdamW step (`adamw.wgsl`; see [`crate::backend::Backend::adamw`]).

use super::prelude::*;
use crate::backend::AdamWHyper;
use crate::backend::cpu::AdamWCoeffs;

params! {
    /// Length, hyper-parameters in f32, the bias corrections
    /// $c_1 = 1/(1-\beta_1^t)$, $c_2 = 1/(1-\beta_2^t)$ and $1-\beta_{1,2}$
    /// (the last four rounded from f64).
    struct AdamWParams {
        len: u32,
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        wd: f32,
        c1: f32,
        c2: f32,
        one_minus_beta1: f32,
        one_minus_beta2: f32,
        pad0: u32,
        pad1: u32,
    }
}

pub(in crate::backend::gpu) const SHADERS: Variants = Variants::elementwise(
    "adamw",
    &[
        ("param", Write),
        ("grad", Read),
        ("m1", Write),
        ("m2", Write),
    ],
    AdamWParams::WGSL,
    include_str!("adamw.wgsl"),
);

pub(in crate::backend::gpu) fn run(
    gpu: &Wgpu,
    h: &AdamWHyper,
    t: u64,
    p: &mut GpuTensor,
    g: &GpuTensor,
    m: &mut GpuTensor,
    v: &mut GpuTensor,
) -> Result<()> {
    for s in [g.shape, m.shape, v.shape] {
        check_same("adamw", p.shape, s)?;
    }
    let len = p.shape.len();
    let c = AdamWCoeffs::new(h, t);
    let params = AdamWParams {
        len: len as u32,
        lr: h.lr as f32,
        beta1: h.beta1 as f32,
        beta2: h.beta2 as f32,
        eps: h.eps as f32,
        wd: h.weight_decay as f32,
        c1: c.inv_bc1 as f32,
        c2: c.inv_bc2 as f32,
        one_minus_beta1: (1.0 - h.beta1) as f32,
        one_minus_beta2: (1.0 - h.beta2) as f32,
        ..Zeroable::zeroed()
    };
    gpu.launch("adamw", &SHADERS, &[p, g, m, v], &params, (len, ELEM_WG))
}
