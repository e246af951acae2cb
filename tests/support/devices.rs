//! The one device-test harness of the backend suites (`tests/backend.rs`,
//! `tests/train_device.rs`): the backends a suite runs on and the macro that
//! instantiates a suite once per backend (in the spirit of candle's `test_device!`).
//!
//! Backends, each a function of the same name returning `Option<&'static B>`:
//! `cpu_f64`, `cpu_f32` (always present) and `wgpu_f32` (Vulkan, default kernels:
//! on llvmpipe the direct matmul and the row-wise softmax / cross-entropy),
//! `wgpu_f32_tiled` (the kernels hardware adapters get: tiled matmul,
//! workgroup-reduction row kernels), `wgpu_f32_direct` (the direct matmul), so each
//! kernel set is tested whichever adapter `Auto` would pick for. Without a Vulkan
//! adapter the wgpu functions print `SKIP: …` once to stderr and return `None`;
//! with `SINKLAB_REQUIRE_GPU=1` a missing adapter is a failure instead.
//!
//! ```ignore
//! #[macro_use]
//! mod support;
//! use support::devices;
//! device_suite!([cpu_f64, cpu_f32, wgpu_f32]; {
//!     matmul_odd_shapes => matmul_shapes,
//! });
//! ```
//! makes `mod cpu_f64 { #[test] fn matmul_odd_shapes() { … matmul_shapes(be) } }` and so on.

#![allow(dead_code)] // each suite uses the backends it names

use std::sync::{Once, OnceLock};

use sinklab::backend::{BackendError, Cpu, GpuOptions, MatmulKernel, Wgpu};

static CPU64: Cpu<f64> = Cpu::new();
static CPU32: Cpu<f32> = Cpu::new();

/// The f64 CPU backend.
pub fn cpu_f64() -> Option<&'static Cpu<f64>> {
    Some(&CPU64)
}

/// The f32 CPU backend.
pub fn cpu_f32() -> Option<&'static Cpu<f32>> {
    Some(&CPU32)
}

/// The shared Vulkan device with the default kernels, or `None` with a printed reason.
pub fn wgpu_f32() -> Option<&'static Wgpu> {
    static GPU: OnceLock<Result<Wgpu, String>> = OnceLock::new();
    wgpu_with(&GPU, MatmulKernel::Auto)
}

/// A second device that always runs the tiled (workgroup-memory) matmul.
pub fn wgpu_f32_tiled() -> Option<&'static Wgpu> {
    static GPU: OnceLock<Result<Wgpu, String>> = OnceLock::new();
    wgpu_with(&GPU, MatmulKernel::Tiled)
}

/// A third device that always runs the direct matmul.
pub fn wgpu_f32_direct() -> Option<&'static Wgpu> {
    static GPU: OnceLock<Result<Wgpu, String>> = OnceLock::new();
    wgpu_with(&GPU, MatmulKernel::Direct)
}

fn wgpu_with(
    cell: &'static OnceLock<Result<Wgpu, String>>,
    matmul: MatmulKernel,
) -> Option<&'static Wgpu> {
    let r = cell.get_or_init(|| {
        match Wgpu::new(&GpuOptions {
            matmul,
            ..GpuOptions::vulkan()
        }) {
            Ok(g) => Ok(g),
            Err(BackendError::NoAdapter(why)) => Err(why),
            Err(e) => panic!("a Vulkan adapter exists but the device failed: {e}"),
        }
    });
    match r {
        Ok(g) => Some(g),
        Err(why) => {
            if std::env::var("SINKLAB_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("SINKLAB_REQUIRE_GPU=1 but no Vulkan adapter: {why}");
            }
            // Straight to the stderr handle: libtest captures `eprintln!` of
            // passing tests, and a skip must be visible. Printed once per run.
            static ONCE: Once = Once::new();
            ONCE.call_once(|| {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIP: wgpu-f32 tests of `{}`: no Vulkan adapter ({why}); install \
                     mesa-vulkan-drivers (SINKLAB_REQUIRE_GPU=1 makes this a failure)",
                    env!("CARGO_CRATE_NAME")
                );
            });
            None
        }
    }
}

/// Instantiates a suite once per backend: `device_suite!([backend, …]; { test => body, … })`
/// makes a module per backend with one `#[test] fn test()` per pair, calling
/// `body(be)` when the backend exists (each `body` generic over `B: Backend`).
macro_rules! device_suite {
    ([$($be:ident),* $(,)?]; $tests:tt) => {
        $( device_suite!(@one $be; $tests); )*
    };
    (@one $be:ident; { $($test:ident => $body:ident),* $(,)? }) => {
        mod $be {
            use super::*;
            $(
                #[test]
                fn $test() {
                    if let Some(be) = crate::support::devices::$be() {
                        $body(be)
                    }
                }
            )*
        }
    };
}
