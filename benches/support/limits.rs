//! What the machine can do, measured where the benchmarks run, so that every row can say how
//! far it is from the hardware and not only from a peer; and whether the machine is quiet.
//!
//! - [`gemm_gflops`]: faer's f32 GEMM `C = A B` at `n × n` on `threads` threads, best of
//!   `reps` runs after one warm-up, in GFLOP/s ($2n^3$ flops per product).
//! - [`copy_gbps`]: a `bytes`-sized f32 buffer copied into another, best of `reps`, in GB/s of
//!   traffic (read + write, $2 \cdot$ `bytes` per copy): the memory bandwidth a weight-streaming
//!   GEMV is bound by.
//! - [`runnable_others`]: tasks other than this one that are runnable right now (the least of
//!   five samples of `/proc/loadavg`'s fourth field over one second, minus this sampler); more
//!   than zero means another process competes for the cores and a timing is not a result.

#![allow(dead_code)] // each bench uses the part it needs

use faer::{Accum, Mat, Par};
use std::time::Instant;

/// faer f32 GEMM rate at `n × n` on `threads` threads (GFLOP/s).
pub fn gemm_gflops(n: usize, threads: usize, reps: usize) -> f64 {
    let a = Mat::<f32>::from_fn(n, n, |i, j| ((i * 7 + j * 3) % 11) as f32 * 0.1);
    let b = Mat::<f32>::from_fn(n, n, |i, j| ((i * 5 + j) % 13) as f32 * 0.1);
    let mut c = Mat::<f32>::zeros(n, n);
    let par = if threads > 1 {
        Par::rayon(threads)
    } else {
        Par::Seq
    };
    let mut best = f64::INFINITY;
    for k in 0..=reps {
        let t = Instant::now();
        faer::linalg::matmul::matmul(c.as_mut(), Accum::Replace, a.as_ref(), b.as_ref(), 1.0, par);
        let dt = t.elapsed().as_secs_f64();
        if k > 0 {
            best = best.min(dt);
        }
    }
    std::hint::black_box(&c);
    2.0 * (n as f64).powi(3) / best / 1e9
}

/// Memory copy bandwidth over a `bytes` buffer (GB/s of read + write traffic).
pub fn copy_gbps(bytes: usize, reps: usize) -> f64 {
    let n = bytes / 4;
    let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut dst = vec![0f32; n];
    let mut best = f64::INFINITY;
    for k in 0..=reps {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst);
        let dt = t.elapsed().as_secs_f64();
        if k > 0 {
            best = best.min(dt);
        }
    }
    2.0 * (n * 4) as f64 / best / 1e9
}

/// Runnable tasks besides this sampler (least of 5 samples, 0.2 s apart); `None` off Linux.
pub fn runnable_others() -> Option<u32> {
    let mut least = u32::MAX;
    for k in 0..5 {
        if k > 0 {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let s = std::fs::read_to_string("/proc/loadavg").ok()?;
        let r: u32 = s
            .split_whitespace()
            .nth(3)?
            .split('/')
            .next()?
            .parse()
            .ok()?;
        least = least.min(r);
    }
    Some(least.saturating_sub(1))
}
