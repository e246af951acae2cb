//! Seeded embedding families of the gap programs (orthonormal, Gaussian); trained
//! embeddings are produced above the math, in `crate::train::embeddings`.

use super::*;

/// Seeded embeddings, one row per position ($T \times d$). `Trained` needs a trained
/// model, which this (math) module does not build: it is refused here and produced by
/// `crate::train::embeddings::query_embeddings`.
pub fn embeddings(
    kind: EmbeddingKind,
    t: usize,
    d: usize,
    seed: u64,
) -> Result<Mat<f64>, CostError> {
    check_sizes(t, d)?;
    if kind == EmbeddingKind::Trained {
        return Err(CostError::Invalid(
            "trained embeddings come from a trained model: use train::embeddings::query_embeddings"
                .into(),
        ));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let g = Mat::from_fn(t, d, |_, _| {
        let v: f64 = StandardNormal.sample(&mut rng);
        v
    });
    match kind {
        EmbeddingKind::Gaussian | EmbeddingKind::Trained => {
            Ok(g * faer::Scale(1.0 / (d as f64).sqrt()))
        }
        EmbeddingKind::Orthonormal => {
            if d < t {
                return Err(CostError::Invalid(format!(
                    "orthonormal embeddings need d >= T (T = {t}, d = {d})"
                )));
            }
            // Modified Gram–Schmidt, twice ("twice is enough") for orthogonality to rounding.
            let mut rows: Vec<Vec<f64>> = (0..t).map(|i| linalg::row(g.as_ref(), i)).collect();
            for _pass in 0..2 {
                for i in 0..t {
                    for k in 0..i {
                        let c = linalg::dot(&rows[i], &rows[k]);
                        let (head, tail) = rows.split_at_mut(i);
                        tail[0]
                            .iter_mut()
                            .zip(&head[k])
                            .for_each(|(a, b)| *a -= c * b);
                    }
                    let n = linalg::norm(&rows[i]);
                    rows[i].iter_mut().for_each(|a| *a /= n);
                }
            }
            Ok(linalg::from_rows(&rows))
        }
    }
}
