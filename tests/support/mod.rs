//! Support shared by test targets (each includes it as `#[macro_use] mod support;`).

#[macro_use]
pub mod devices;
