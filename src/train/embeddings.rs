//! Embeddings taken from a trained model, for the exact cost programs of
//! [`crate::cost`] (which, being math, never trains: a [`CostQuery`] with
//! [`EmbeddingKind::Trained`] is solved here, every other family there).
//!
//! Recipe (fixed, so a `(T, d, seed)` names one matrix): a one-layer model with
//! factored attention ($r = d$), no MLP, trained with AdamW on bigram-copy
//! ($n = 8$ tokens, $k = 2$ triggers, Dirichlet(0.3) rows) at context length $T$,
//! BOS key visible, [`STEPS`] steps of batch 8, learning rate 0.01, weight decay 0.01,
//! seeded by `seed`. The embeddings are the rows the attention layer multiplies,
//! $x_i = E_{\rm tok}\[w_i\] + E_{\rm pos}\[i\]$ (the model has no normalisation before
//! attention, and its logits are exactly $x_i^\top W_Q W_K^\top x_j$), for one
//! bigram-copy sequence $w$ drawn from the model's own task with a seed derived
//! from `seed`. Position 0 is BOS.
//!
//! Distinct positions give distinct rows even when tokens repeat, but nothing
//! forces the half-space conditions: the programs report infeasibility with a
//! certificate where they fail.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::backend::Cpu;
use crate::cost::{
    self, CostError, CostQuery, CostSolution, EmbeddingKind, Scope, SolveOptions, head,
};
use crate::linalg::Mat;
use crate::tasks::BigramCopy;
use crate::train::{self, AttnForm, TaskSpec, TrainConfig};

/// Optimiser steps of the recipe.
pub const STEPS: usize = 1000;

/// The training run of the recipe at `(t, d, seed)`.
pub fn config(t: usize, d: usize, seed: u64) -> TrainConfig {
    TrainConfig {
        task: TaskSpec::BigramCopy {
            n: 8,
            k: 2,
            alpha: 0.3,
        },
        t,
        d,
        layers: 1,
        attn: AttnForm::Factored { r: d },
        mlp_hidden: 0,
        bos: true,
        mask_bos_key: false,
        batch: 8,
        steps: STEPS,
        lr: 0.01,
        weight_decay: 0.01,
        seed,
        eval_batch: 32,
        target_acc_on: None,
        switches: crate::train::Switches::OFF,
        freeze_switches: false,
    }
}

type Key = (usize, usize, u64);
type Trained = HashMap<Key, Arc<Mat<f64>>>;

/// The recipe's embeddings, trained on first use and kept by their owner (a sweep, or one CLI
/// run) for as long as it holds this value; shared by reference between the owner's threads.
/// A `(T, d, seed)` names one matrix, so a cache never changes a value, only whether it is
/// trained again.
#[derive(Debug)]
pub struct TrainedEmbeddings {
    /// Thread count of the [`Cpu`] backend the recipe trains on (values do not depend on it).
    threads: usize,
    trained: Mutex<Trained>,
}

impl TrainedEmbeddings {
    /// An empty cache whose training runs split their products over `threads`
    /// ([`Cpu::with_threads`]).
    pub fn new(threads: usize) -> Self {
        Self {
            threads,
            trained: Mutex::new(HashMap::new()),
        }
    }

    /// The recipe's embeddings ($T \times d$), trained on first use and then taken from the cache.
    pub fn get(&self, t: usize, d: usize, seed: u64) -> Result<Arc<Mat<f64>>, CostError> {
        if t < 4 || d == 0 {
            return Err(CostError::Invalid(format!(
                "trained embeddings need T >= 4 and d >= 1 (T = {t}, d = {d})"
            )));
        }
        if let Some(x) = self.lock()?.get(&(t, d, seed)) {
            return Ok(x.clone());
        }
        let x = Arc::new(train_embeddings(t, d, seed, self.threads)?);
        self.lock()?.insert((t, d, seed), x.clone());
        Ok(x)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Trained>, CostError> {
        self.trained.lock().map_err(|_| poisoned())
    }
}

/// Trains the recipe at `(t, d, seed)` on [`Cpu`]`<f32>` with `threads` and returns its
/// embeddings ($T \times d$).
fn train_embeddings(t: usize, d: usize, seed: u64, threads: usize) -> Result<Mat<f64>, CostError> {
    let cfg = config(t, d, seed);
    let (_, model) = train::train_model_on(&Cpu::<f32>::with_threads(threads), &cfg, |_, _| {})
        .map_err(|e| CostError::Training(e.to_string()))?;
    // The task of the run: `train` draws it first from its seeded generator.
    let TaskSpec::BigramCopy { n, k, alpha } = cfg.task else {
        unreachable!("the recipe trains on bigram-copy")
    };
    let task = BigramCopy::new(n, k, alpha, &mut StdRng::seed_from_u64(seed))
        .map_err(|e| CostError::Training(e.to_string()))?;
    let seq = task.sample(
        t,
        true,
        &mut StdRng::seed_from_u64(seed ^ 0x7A1E_D0E5_0000_0001),
    );
    let h = model
        .layer_input(&seq.tokens)
        .map_err(|e| CostError::Training(e.to_string()))?;
    Ok(Mat::from_fn(t, d, |i, j| f64::from(h[(i, j)])))
}

fn poisoned() -> CostError {
    CostError::Training("the trained-embedding cache was poisoned by a panic".into())
}

/// The embeddings of a [`CostQuery`]'s family ($T \times d$): the trained recipe for
/// [`EmbeddingKind::Trained`] (from the caller's cache `trained`), [`cost::embeddings`]
/// otherwise.
pub fn query_embeddings(
    kind: EmbeddingKind,
    t: usize,
    d: usize,
    seed: u64,
    trained: &TrainedEmbeddings,
) -> Result<Mat<f64>, CostError> {
    if kind == EmbeddingKind::Trained {
        cost::check_sizes(t, d)?;
        return trained.get(t, d, seed).map(|x| x.as_ref().clone());
    }
    cost::embeddings(kind, t, d, seed)
}

/// Solves a [`CostQuery`] of any embedding family (for the whole head: the sum of
/// both parts, see [`head::HeadCost::total`]); trained embeddings come from `trained`.
pub fn solve_query(
    q: &CostQuery,
    opts: SolveOptions,
    trained: &TrainedEmbeddings,
) -> Result<CostSolution, CostError> {
    match q.scope {
        Scope::Qk => {
            let x = query_embeddings(q.embedding, q.t, q.d, q.seed, trained)?;
            cost::solve_query_on(q, x.as_ref(), opts)
        }
        Scope::Head => Ok(solve_head_query(q, opts, trained)?.total()),
    }
}

/// Solves the whole-head program of a [`CostQuery`] of any embedding family (its
/// `scope` is ignored); trained embeddings come from `trained`.
pub fn solve_head_query(
    q: &CostQuery,
    opts: SolveOptions,
    trained: &TrainedEmbeddings,
) -> Result<head::HeadCost, CostError> {
    let x = query_embeddings(q.embedding, q.t, q.d, q.seed, trained)?;
    cost::solve_head_query_on(q, x.as_ref(), opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache trains a `(T, d, seed)` once (the second call returns the same allocation); a
    /// second cache, on another thread count, trains it again to the same values; another seed
    /// gives another matrix; sizes the recipe cannot train are refused.
    #[test]
    fn the_cache_trains_each_key_once_and_values_do_not_depend_on_it() {
        let a = TrainedEmbeddings::new(1);
        let x = a.get(6, 4, 3).unwrap();
        assert!(Arc::ptr_eq(&x, &a.get(6, 4, 3).unwrap()));
        let b = TrainedEmbeddings::new(2);
        let y = b.get(6, 4, 3).unwrap();
        assert!(!Arc::ptr_eq(&x, &y));
        assert_eq!(*x, *y);
        assert_ne!(*x, *a.get(6, 4, 4).unwrap());
        assert!(matches!(a.get(3, 4, 0), Err(CostError::Invalid(_))));
        assert!(matches!(a.get(6, 0, 0), Err(CostError::Invalid(_))));
    }
}
