//! Paper A on real models: the studies that run on [`crate::runtime`]'s forward passes —
//! per-layer statistics streamed from the forward ([`stats`]), the A1 half-space analysis in
//! each head's own logit space and on layer inputs ([`head_space`]), A2's oversmoothing
//! prediction and its skill ([`oversmooth_real`]), the A4/A6
//! switch decomposition on real heads ([`switch_real`]), A3's hard switch on real heads
//! ([`hard_switch_real`]), A5's minimal sink and diagonal costs on real layer inputs
//! ([`cost_real`]), the per-model report ([`analysis`]) and its report
//! section ([`section`]); statistics of activation files ([`activations`]) and the
//! measured deviation of the `q8` product path ([`q8_deviation`]).

pub mod activations;
pub mod analysis;
pub mod cost_real;
pub mod hard_switch_real;
pub mod head_space;
pub mod oversmooth_real;
pub mod q8_deviation;
pub mod section;
pub mod sink_control;
pub mod stats;
pub mod switch_real;
