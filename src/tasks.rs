//! Synthetic tasks of docs/theory.md §10: bigram-copy and generic copy-paste.
//!
//! Token ids: `0` is BOS; vocabulary tokens are `1..=n`; the trigger tokens
//! are `1..=k`. A [`Sequence`] holds the tokens and, for every query position
//! `t` (which predicts `tokens[t+1]`), its copy source $\pi(t)$ when the head
//! must be *on* (copy), `None` when it must be *off*.
//!
//! Every generator is seeded by the caller's RNG: same seed, same sequences.

use rand::{Rng, RngExt};
use rand_distr::{Distribution, Gamma};

/// The BOS token id.
pub const BOS: u32 = 0;

/// Errors of the task generators.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A parameter is out of its domain.
    #[error("invalid task parameter: {0}")]
    Invalid(String),
}

/// One generated sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct Sequence {
    /// Token ids, `tokens[0] == BOS` when the sequence has a BOS.
    pub tokens: Vec<u32>,
    /// `source[t] = Some(p)`: query `t` is an on-query and `tokens[t+1] == tokens[p]`.
    /// Has one entry per query position `0..tokens.len()-1`.
    pub source: Vec<Option<usize>>,
}

impl Sequence {
    /// Number of query positions (positions that predict a next token).
    pub fn queries(&self) -> usize {
        self.source.len()
    }
}

/// Bigram-copy (after Guo et al.'s bigram-backcopy): $x_1$ from the unigram
/// law without triggers; if $x_t$ is a trigger then $x_{t+1} = x_{t-1}$, else
/// $x_{t+1} \sim P(x_t,\cdot)$. Rows of $P$ are Dirichlet($\alpha$).
#[derive(Clone, Debug)]
pub struct BigramCopy {
    /// Vocabulary size without BOS.
    pub n: usize,
    /// Number of trigger tokens (ids `1..=k`).
    pub k: usize,
    /// Transition matrix, `p[a][b]` = P(next = b+1 | current = a+1).
    pub p: Vec<Vec<f64>>,
    /// Law of $x_1$: the mean row of $P$ restricted to non-triggers, renormalised.
    pub unigram: Vec<f64>,
}

fn sample_index<R: Rng + ?Sized>(w: &[f64], rng: &mut R) -> usize {
    let u: f64 = rng.random::<f64>() * w.iter().sum::<f64>();
    let mut acc = 0.0;
    for (i, &p) in w.iter().enumerate() {
        acc += p;
        if u < acc {
            return i;
        }
    }
    // Rounding left u at the top: return the last index of positive weight.
    w.iter().rposition(|&p| p > 0.0).unwrap_or(0)
}

impl BigramCopy {
    /// Draws $P$ with Dirichlet($\alpha$) rows.
    pub fn new<R: Rng + ?Sized>(
        n: usize,
        k: usize,
        alpha: f64,
        rng: &mut R,
    ) -> Result<Self, TaskError> {
        if n < 2 || k >= n {
            return Err(TaskError::Invalid(format!(
                "need n >= 2 and k < n (n = {n}, k = {k})"
            )));
        }
        if !(alpha > 0.0 && alpha.is_finite()) {
            return Err(TaskError::Invalid(format!(
                "alpha must be positive, got {alpha}"
            )));
        }
        let g = Gamma::new(alpha, 1.0).map_err(|e| TaskError::Invalid(e.to_string()))?;
        let mut p = Vec::with_capacity(n);
        for _ in 0..n {
            let mut row: Vec<f64> = (0..n).map(|_| g.sample(rng).max(1e-300)).collect();
            let s: f64 = row.iter().sum();
            row.iter_mut().for_each(|v| *v /= s);
            p.push(row);
        }
        Self::from_matrix(p, k)
    }

    /// Uses a given row-stochastic matrix (e.g. estimated from a corpus).
    pub fn from_matrix(p: Vec<Vec<f64>>, k: usize) -> Result<Self, TaskError> {
        let n = p.len();
        if n < 2 || k >= n || p.iter().any(|r| r.len() != n) {
            return Err(TaskError::Invalid(
                "P must be n×n with n >= 2 and k < n".into(),
            ));
        }
        for (a, r) in p.iter().enumerate() {
            let s: f64 = r.iter().sum();
            if r.iter().any(|v| v.is_nan() || *v < 0.0) || (s - 1.0).abs() > 1e-9 {
                return Err(TaskError::Invalid(format!(
                    "row {a} of P is not a probability vector"
                )));
            }
        }
        let mut unigram: Vec<f64> = (0..n)
            .map(|b| p.iter().map(|r| r[b]).sum::<f64>() / n as f64)
            .collect();
        unigram.iter_mut().take(k).for_each(|v| *v = 0.0);
        let s: f64 = unigram.iter().sum();
        if s <= 0.0 {
            return Err(TaskError::Invalid(
                "unigram law has no mass off the triggers".into(),
            ));
        }
        unigram.iter_mut().for_each(|v| *v /= s);
        Ok(Self { n, k, p, unigram })
    }

    /// Whether token id `tok` is a trigger.
    pub fn is_trigger(&self, tok: u32) -> bool {
        tok >= 1 && (tok as usize) <= self.k
    }

    /// A sequence of `len` tokens (BOS included when `bos`), `len >= 2`.
    pub fn sample<R: Rng + ?Sized>(&self, len: usize, bos: bool, rng: &mut R) -> Sequence {
        let mut tokens = Vec::with_capacity(len);
        if bos {
            tokens.push(BOS);
        }
        let mut source = Vec::with_capacity(len);
        while tokens.len() < len {
            let t = tokens.len();
            let first_real = if bos { 1 } else { 0 };
            let next = if t == first_real {
                sample_index(&self.unigram, rng) as u32 + 1
            } else {
                let cur = tokens[t - 1];
                if self.is_trigger(cur) && t >= first_real + 2 {
                    tokens[t - 2]
                } else {
                    sample_index(&self.p[cur as usize - 1], rng) as u32 + 1
                }
            };
            tokens.push(next);
        }
        source.extend((0..tokens.len().saturating_sub(1)).map(|q| {
            let on = q > first_real_pos(bos) && self.is_trigger(tokens[q]);
            on.then(|| q - 1)
        }));
        Sequence { tokens, source }
    }
}

fn first_real_pos(bos: bool) -> usize {
    usize::from(bos)
}

/// How a copy-paste query finds its source $\pi(t)$.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceFamily {
    /// After a trigger at `t`, copy the previous token: $\pi(t) = t-1$.
    PrevAfterTrigger,
    /// Induction-like: $\pi(t) = s+1$ for the last earlier occurrence $s$ of $x_t$ (with $s+1 < t$).
    PrevOccurrence,
    /// With probability `p_on`, a uniformly random earlier real position.
    RandomEarlier {
        /// Probability that a query is on.
        p_on: f64,
    },
}

/// Generic copy-paste: tokens uniform over the vocabulary, except that an
/// on-query's next token is the value at its source: $x_{t+1} = x_{\pi(t)}$.
#[derive(Clone, Debug)]
pub struct CopyPaste {
    /// Vocabulary size without BOS.
    pub n: usize,
    /// Trigger tokens `1..=k` (used by [`SourceFamily::PrevAfterTrigger`]).
    pub k: usize,
    /// Source family.
    pub family: SourceFamily,
}

impl CopyPaste {
    /// Validates the parameters.
    pub fn new(n: usize, k: usize, family: SourceFamily) -> Result<Self, TaskError> {
        if n < 2 || k >= n {
            return Err(TaskError::Invalid(format!(
                "need n >= 2 and k < n (n = {n}, k = {k})"
            )));
        }
        if let SourceFamily::RandomEarlier { p_on } = family
            && !(0.0..=1.0).contains(&p_on)
        {
            return Err(TaskError::Invalid(format!(
                "p_on must lie in [0, 1], got {p_on}"
            )));
        }
        Ok(Self { n, k, family })
    }

    /// A sequence of `len` tokens (BOS first when `bos`).
    pub fn sample<R: Rng + ?Sized>(&self, len: usize, bos: bool, rng: &mut R) -> Sequence {
        let first = first_real_pos(bos);
        let mut tokens: Vec<u32> = Vec::with_capacity(len);
        if bos {
            tokens.push(BOS);
        }
        let mut source: Vec<Option<usize>> = Vec::with_capacity(len);
        // Query q predicts tokens[q+1]; decide q's source before drawing tokens[q+1].
        while tokens.len() < len {
            let next_pos = tokens.len();
            let q = next_pos.checked_sub(1);
            let src = match q {
                Some(q) if q >= first => self.source_of(&tokens, q, first, rng),
                _ => None,
            };
            if let Some(q) = q {
                debug_assert_eq!(source.len(), q);
                source.push(src);
            }
            let tok = match src {
                Some(p) => tokens[p],
                None => rng.random_range(1..=self.n as u32),
            };
            tokens.push(tok);
        }
        Sequence { tokens, source }
    }

    fn source_of<R: Rng + ?Sized>(
        &self,
        tokens: &[u32],
        q: usize,
        first: usize,
        rng: &mut R,
    ) -> Option<usize> {
        match self.family {
            SourceFamily::PrevAfterTrigger => {
                let tok = tokens[q];
                (q > first && tok >= 1 && tok as usize <= self.k).then(|| q - 1)
            }
            SourceFamily::PrevOccurrence => {
                let tok = tokens[q];
                (first..q.saturating_sub(1))
                    .rev()
                    .find(|&s| tokens[s] == tok)
                    .map(|s| s + 1)
            }
            SourceFamily::RandomEarlier { p_on } => {
                (q > first && rng.random::<f64>() < p_on).then(|| rng.random_range(first..q))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn same_seed_same_sequences() {
        let mut r1 = StdRng::seed_from_u64(7);
        let mut r2 = StdRng::seed_from_u64(7);
        let a = BigramCopy::new(10, 2, 0.5, &mut r1).unwrap();
        let b = BigramCopy::new(10, 2, 0.5, &mut r2).unwrap();
        assert_eq!(a.sample(50, true, &mut r1), b.sample(50, true, &mut r2));
    }

    #[test]
    fn bad_parameters_are_errors() {
        let mut r = StdRng::seed_from_u64(0);
        assert!(BigramCopy::new(3, 3, 1.0, &mut r).is_err());
        assert!(BigramCopy::new(5, 1, -1.0, &mut r).is_err());
        assert!(CopyPaste::new(5, 1, SourceFamily::RandomEarlier { p_on: 1.5 }).is_err());
    }
}
