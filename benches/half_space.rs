//! Time of one `half_space_verdict` call at the size of the real-model use:
//! d = 64, 512 queries and 512 non-sink keys (certificate verification included).
//!
//! `cargo bench --bench half_space`. No external baseline: no LP/QP solver is a
//! dependency of the crate; the number sizes the real-model sweeps.

use criterion::{Criterion, criterion_group, criterion_main};
use sinklab::geometry::half_space_verdict_rows;
use sinklab::geometry::sample::{SetKind, draw_config};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let cases = [
        (
            "representable_margin_1e-2",
            SetKind::Separated { margin: 1e-2 },
            SetKind::Separated { margin: 1e-2 },
        ),
        (
            "representable_margin_1e-6",
            SetKind::Separated { margin: 1e-6 },
            SetKind::Separated { margin: 1e-6 },
        ),
        (
            "not_representable_planted",
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
    let mut g = c.benchmark_group("half_space_verdict_d64_n512");
    g.sample_size(20);
    for (name, qk, kk) in cases {
        let cfg = draw_config(1, 64, 512, 512, qk, kk, false);
        let (q, k) = (cfg.q(), cfg.k());
        g.bench_function(name, |b| {
            b.iter(|| black_box(half_space_verdict_rows(&q, &cfg.sink, &k, 0.01).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
