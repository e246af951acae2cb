//! Wall time of one `half_space_verdict` call at the real-model size
//! (d = 64, 512 queries, 512 non-sink keys; certificate verification included).
//! `cargo bench --bench half_space_timing`, or `cargo test --bench half_space_timing` for the
//! dev profile. Prints the median of 5 calls per configuration (`benches/half_space.rs` is the
//! criterion bench of the same calls).

use sinklab::geometry::half_space_verdict_rows;
use sinklab::geometry::sample::{SetKind, draw_config};
use std::time::Instant;

fn main() {
    let cases = [
        (
            "representable, margin 1e-2",
            SetKind::Separated { margin: 1e-2 },
            SetKind::Separated { margin: 1e-2 },
        ),
        (
            "representable, margin 1e-6",
            SetKind::Separated { margin: 1e-6 },
            SetKind::Separated { margin: 1e-6 },
        ),
        (
            "not representable (planted 40 / boundary 40)",
            SetKind::Planted {
                support: 40,
                boundary: false,
            },
            SetKind::Planted {
                support: 40,
                boundary: true,
            },
        ),
    ];
    for (name, qk, kk) in cases {
        let cfg = draw_config(1, 64, 512, 512, qk, kk, false);
        let (q, k) = (cfg.q(), cfg.k());
        let mut times: Vec<f64> = (0..5)
            .map(|_| {
                let t = Instant::now();
                let v = half_space_verdict_rows(&q, &cfg.sink, &k, 0.01).expect("verdict");
                std::hint::black_box(v);
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "{name:<46} median {:8.2} ms  (min {:.2}, max {:.2})",
            times[2], times[0], times[4]
        );
    }
}
