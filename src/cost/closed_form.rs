//! Closed forms and witness costs of docs/theory.md §6 for orthonormal embeddings.

use super::*;

/// §6 closed form, orthonormal embeddings, Frobenius, sink or diagonal alike:
/// $C^F = \Delta\sqrt{\sum_{i=1}^{T-1} i/(i+1)} = \Delta\sqrt{T - H_T}$.
pub fn fro_orthonormal(t: usize, delta: f64) -> f64 {
    delta * (t as f64 - linalg::harmonic(t)).sqrt()
}

/// §6 nuclear witness costs (upper bounds) for orthonormal embeddings:
/// sink $W = \Delta\sum_{i\ge1} e_i e_0^\top$ costs $\Delta\sqrt{T-1}$; diagonal
/// $W = \Delta\thinspace\mathrm{diag}(0,1,\dots,1)$ costs $\Delta(T-1)$ (the $\Delta I$ of docs/theory.md §6 costs $\Delta T$).
pub fn nuclear_witness(pattern: Pattern, t: usize, delta: f64) -> f64 {
    match pattern {
        Pattern::Sink => delta * ((t - 1) as f64).sqrt(),
        Pattern::Diagonal => delta * (t - 1) as f64,
    }
}
