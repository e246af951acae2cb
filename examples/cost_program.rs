//! Your own cost program: the least norm of a logit matrix $W$ that gives every query $i$ a gap
//! $\Delta$ in favour of its target $t(i)$ over each other visible key,
//! $$ \min \lVert W\rVert \quad\text{s.t.}\quad x_i^\top W (x_{t(i)} - x_j) \ge \Delta, $$
//! on embeddings and targets you choose. The solver returns a certified bracket
//! (a feasible rescaled primal above, a dual bound below), or a certificate that no $W$ exists.
//!
//! `cargo run --example cost_program` (core only: `--no-default-features` works too).

use faer::Mat;
use sinklab::cost::{
    self, EmbeddingKind, GapProgram, NormKind, Pattern, SolveOptions, fro_orthonormal,
    nuclear_witness,
};

fn main() {
    let (t, delta) = (8, 5.0);
    let opts = SolveOptions::default();

    // 1. Orthonormal embeddings (the identity): the closed forms of the theory.
    let x = Mat::<f64>::identity(t, t);
    println!("orthonormal embeddings, T = {t}, Δ = {delta}");
    for pattern in [Pattern::Sink, Pattern::Diagonal] {
        let p = GapProgram::for_pattern(x.as_ref(), pattern, delta).unwrap();
        let fro = cost::solve(&p, NormKind::Fro, opts).unwrap();
        let nuc = cost::solve(&p, NormKind::Nuclear, opts).unwrap();
        let (v, lo) = (fro.value.unwrap(), fro.lower.unwrap());
        println!(
            "  {:<8}  Frobenius in [{lo:.4}, {v:.4}] (closed form {:.4}), \
             nuclear <= {:.4} (witness {:.4}), {} constraints",
            pattern.to_string(),
            fro_orthonormal(t, delta),
            nuc.value.unwrap(),
            nuclear_witness(pattern, t, delta),
            p.n_constraints(),
        );
        // The closed form lies in the certified bracket (up to the solver's tolerance).
        let cf = fro_orthonormal(t, delta);
        assert!(lo <= cf * (1.0 + 1e-6) && cf <= v * (1.0 + 1e-6));
    }

    // 2. A pattern of your own on seeded Gaussian embeddings: every query attends to the
    //    previous token, t(i) = i − 1.
    let d = 16;
    let xg = cost::embeddings(EmbeddingKind::Gaussian, t, d, 7).unwrap();
    let previous: Vec<Option<usize>> = (0..t).map(|i| i.checked_sub(1)).collect();
    let p = GapProgram::new(xg.as_ref(), &previous, delta).unwrap();
    let sol = cost::solve(&p, NormKind::Fro, opts).unwrap();
    println!(
        "\nprevious-token pattern, Gaussian embeddings T = {t}, d = {d}: Frobenius cost in \
         [{:.4}, {:.4}] (relative gap {:.1e}, {} iterations)",
        sol.lower.unwrap(),
        sol.value.unwrap(),
        sol.rel_gap.unwrap(),
        sol.iterations,
    );

    // 3. An impossible program: x_2 = −x_1, so no W gives both queries a gap towards the sink
    //    over key 1 (the half-space condition on the queries fails).
    let rows = [[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]];
    let opposite = Mat::from_fn(3, 2, |i, j| rows[i][j]);
    let p = GapProgram::for_pattern(opposite.as_ref(), Pattern::Sink, delta).unwrap();
    let sol = cost::solve(&p, NormKind::Fro, opts).unwrap();
    let cert = sol
        .certificate
        .as_ref()
        .expect("an infeasibility certificate");
    let weights: Vec<String> = cert
        .weights
        .iter()
        .filter(|&&(_, _, l)| l > 1e-9)
        .map(|(i, j, l)| format!("λ(row {i}, key {j}) = {l:.3}"))
        .collect();
    println!(
        "\nopposite queries, sink pattern: feasible = {}, certificate verified = {} \
         (‖Σ λ_c A_c‖ = {:.1e} on a scale of {:.1e}: {})",
        sol.feasible,
        cert.verified,
        cert.residual,
        cert.scale,
        weights.join(", "),
    );
    assert!(!sol.feasible && cert.verified);
}
