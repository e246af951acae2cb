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
use std::sync::{Arc, Mutex, OnceLock};

use rand::SeedableRng;
use rand::rngs::StdRng;

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
    }
}

type Key = (usize, usize, u64);

fn cache() -> &'static Mutex<HashMap<Key, Arc<Mat<f64>>>> {
    static C: OnceLock<Mutex<HashMap<Key, Arc<Mat<f64>>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The recipe's embeddings ($T \times d$), trained on first use and cached for the process.
pub fn embeddings(t: usize, d: usize, seed: u64) -> Result<Arc<Mat<f64>>, CostError> {
    if t < 4 || d == 0 {
        return Err(CostError::Invalid(format!(
            "trained embeddings need T >= 4 and d >= 1 (T = {t}, d = {d})"
        )));
    }
    if let Some(x) = cache().lock().map_err(|_| poisoned())?.get(&(t, d, seed)) {
        return Ok(x.clone());
    }
    let cfg = config(t, d, seed);
    let (_, model) =
        train::train_model(&cfg, |_, _| {}).map_err(|e| CostError::Training(e.to_string()))?;
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
    let x = Arc::new(Mat::from_fn(t, d, |i, j| f64::from(h[(i, j)])));
    cache()
        .lock()
        .map_err(|_| poisoned())?
        .insert((t, d, seed), x.clone());
    Ok(x)
}

fn poisoned() -> CostError {
    CostError::Training("the trained-embedding cache was poisoned by a panic".into())
}

/// The embeddings of a [`CostQuery`]'s family ($T \times d$): the trained recipe for
/// [`EmbeddingKind::Trained`], [`cost::embeddings`] otherwise.
pub fn query_embeddings(
    kind: EmbeddingKind,
    t: usize,
    d: usize,
    seed: u64,
) -> Result<Mat<f64>, CostError> {
    if kind == EmbeddingKind::Trained {
        cost::check_sizes(t, d)?;
        return embeddings(t, d, seed).map(|x| x.as_ref().clone());
    }
    cost::embeddings(kind, t, d, seed)
}

/// Solves a [`CostQuery`] of any embedding family (for the whole head: the sum of
/// both parts, see [`head::HeadCost::total`]).
pub fn solve_query(q: &CostQuery, opts: SolveOptions) -> Result<CostSolution, CostError> {
    match q.scope {
        Scope::Qk => {
            let x = query_embeddings(q.embedding, q.t, q.d, q.seed)?;
            cost::solve_query_on(q, x.as_ref(), opts)
        }
        Scope::Head => Ok(solve_head_query(q, opts)?.total()),
    }
}

/// Solves the whole-head program of a [`CostQuery`] of any embedding family (its
/// `scope` is ignored).
pub fn solve_head_query(q: &CostQuery, opts: SolveOptions) -> Result<head::HeadCost, CostError> {
    let x = query_embeddings(q.embedding, q.t, q.d, q.seed)?;
    cost::solve_head_query_on(q, x.as_ref(), opts)
}
