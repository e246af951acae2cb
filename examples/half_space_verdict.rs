//! Your own half-space instance: can one bilinear head make a chosen token a sink for every
//! query? The half-space theorem says yes iff (a) the queries lie in an open half-space
//! ($0 \notin \mathrm{conv}(Q)$) and (b) the sink lies outside the hull of the other keys
//! ($s \notin \mathrm{conv}(K)$). The verdict comes with a certificate, already verified: a
//! rank-one witness $W = c\thinspace ab^\top$, or convex weights for each failed condition.
//!
//! `cargo run --example half_space_verdict` (core only: `--no-default-features` works too).

use sinklab::geometry::{Obstruction, Verdict, half_space_verdict, half_space_verdict_rows};

fn main() {
    // Three queries in R^3, all with a positive first coordinate: (a) holds.
    let queries: [&[f64]; 3] = [&[1.0, 0.3, -0.2], &[0.7, -0.4, 0.5], &[1.2, 0.1, 0.9]];
    // The sink far along e2; the other keys around the origin: (b) holds.
    let sink = [0.0, 3.0, 0.0];
    let keys: [&[f64]; 4] = [
        &[0.5, 0.5, 0.0],
        &[-0.5, 0.2, 0.3],
        &[0.1, -0.6, -0.4],
        &[0.0, 0.4, 0.8],
    ];
    let eps = 0.01;
    println!("instance 1: 3 queries, a sink and 4 keys in R^3, eps = {eps}");
    let v1 = half_space_verdict_rows(&queries, &sink, &keys, eps).unwrap();
    report(&v1, &queries, &sink, &keys);
    assert!(v1.is_representable());

    // Add minus the sum of the queries: their mean is now 0, so (a) fails.
    let q2: [&[f64]; 4] = [queries[0], queries[1], queries[2], &[-2.9, 0.0, -1.2]];
    println!("\ninstance 2: instance 1 plus the query -(x_1 + x_2 + x_3) = (-2.9, 0, -1.2)");
    let v2 = half_space_verdict_rows(&q2, &sink, &keys, eps).unwrap();
    report(&v2, &q2, &sink, &keys);
    assert!(v2.queries_fail());

    // The same theorem on matrices (rows = tokens), e.g. a layer's hidden states: here the sink
    // is the mean of the keys, inside their hull, so (b) fails.
    let q = faer::Mat::from_fn(4, 2, |i, j| if j == 0 { 1.0 + i as f64 } else { 0.5 });
    let k = faer::Mat::from_fn(3, 2, |i, j| [[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]][i][j]);
    let s = [0.0, 0.0];
    println!("\ninstance 3: the sink at the mean of the keys (matrix API)");
    let v = half_space_verdict(q.as_ref(), &s, k.as_ref(), eps).unwrap();
    println!(
        "  representable: {}, (b) fails: {}",
        v.is_representable(),
        v.sink_fails()
    );
    assert!(v.sink_fails());
}

/// Prints a verdict and re-checks its certificate against the data.
fn report(v: &Verdict, queries: &[&[f64]], sink: &[f64], keys: &[&[f64]]) {
    match v {
        Verdict::Representable(w) => {
            let check = w.verify(queries, sink, keys);
            println!(
                "  representable: witness W = c·a·bᵀ with c = {:.3}, cost ‖W‖ = {:.3}",
                w.c,
                w.cost()
            );
            println!(
                "  its attention puts mass >= {:.4} on the sink for every query (target >= {:.4})",
                check.worst_sink_mass,
                1.0 - w.eps
            );
        }
        Verdict::NotRepresentable(obstructions) => {
            for o in obstructions {
                match o {
                    Obstruction::QueriesNotInHalfSpace { lambda } => println!(
                        "  not representable: (a) fails, 0 = Σ λ_i x_i with λ = {:.3?}",
                        lambda.lambda
                    ),
                    Obstruction::SinkNotSeparable { mu } => println!(
                        "  not representable: (b) fails, s = Σ μ_k k with μ = {:.3?}",
                        mu.lambda
                    ),
                }
            }
        }
    }
    assert!(v.verify(queries, sink, keys), "the certificate verifies");
    println!("  certificate re-verified: ok");
}
