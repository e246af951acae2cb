//! A stack of hidden states $h^l_t \in \mathbb{R}^d$, $l = 0..L-1$, $t = 0..T-1$,
//! stored contiguously as `[L][T][d]` (the layout of captured activations).

//!
//! The element type is the crate's one scalar trait, [`Real`]: f32 for captured activations,
//! f64 for the synthetic models; arithmetic on the states is done in f64.

pub use crate::backend::Real;

/// Errors when building a hidden-state tensor.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShapeError {
    /// `data.len()` is not `layers * tokens * dim`.
    #[error("hidden states: {len} values for shape L={layers} T={tokens} d={dim}")]
    Len {
        /// Values given.
        len: usize,
        /// Layers.
        layers: usize,
        /// Tokens.
        tokens: usize,
        /// Width.
        dim: usize,
    },
    /// One of the dimensions is zero.
    #[error("hidden states: empty shape L={0} T={1} d={2}")]
    Empty(usize, usize, usize),
    /// Layers given as separate matrices disagree in shape.
    #[error("hidden states: layer {layer} is {got_t}x{got_d}, expected {t}x{d}")]
    Ragged {
        /// Offending layer.
        layer: usize,
        /// Its rows.
        got_t: usize,
        /// Its columns.
        got_d: usize,
        /// Expected rows.
        t: usize,
        /// Expected columns.
        d: usize,
    },
}

/// Hidden states of one sequence, `[L][T][d]` row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct HiddenStates<S: Real> {
    layers: usize,
    tokens: usize,
    dim: usize,
    data: Vec<S>,
}

impl<S: Real> HiddenStates<S> {
    /// Wraps a `[L][T][d]` buffer.
    pub fn new(layers: usize, tokens: usize, dim: usize, data: Vec<S>) -> Result<Self, ShapeError> {
        if layers == 0 || tokens == 0 || dim == 0 {
            return Err(ShapeError::Empty(layers, tokens, dim));
        }
        if layers.checked_mul(tokens).and_then(|v| v.checked_mul(dim)) != Some(data.len()) {
            return Err(ShapeError::Len {
                len: data.len(),
                layers,
                tokens,
                dim,
            });
        }
        Ok(Self {
            layers,
            tokens,
            dim,
            data,
        })
    }

    /// Builds from one `T × d` faer matrix per layer.
    pub fn from_mats(mats: &[faer::Mat<S>]) -> Result<Self, ShapeError> {
        let (t, d) = mats.first().map_or((0, 0), |m| (m.nrows(), m.ncols()));
        let mut data = Vec::with_capacity(mats.len() * t * d);
        for (l, m) in mats.iter().enumerate() {
            if m.nrows() != t || m.ncols() != d {
                return Err(ShapeError::Ragged {
                    layer: l,
                    got_t: m.nrows(),
                    got_d: m.ncols(),
                    t,
                    d,
                });
            }
            for i in 0..t {
                for j in 0..d {
                    data.push(m[(i, j)]);
                }
            }
        }
        Self::new(mats.len(), t, d, data)
    }

    /// Number of layers $L$.
    pub fn layers(&self) -> usize {
        self.layers
    }
    /// Number of positions $T$.
    pub fn tokens(&self) -> usize {
        self.tokens
    }
    /// Width $d$.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// The raw `[L][T][d]` buffer.
    pub fn data(&self) -> &[S] {
        &self.data
    }

    /// $h^l_t$ as a slice. Panics on out-of-range indices (internal use with checked bounds).
    pub fn state(&self, layer: usize, pos: usize) -> &[S] {
        let o = (layer * self.tokens + pos) * self.dim;
        &self.data[o..o + self.dim]
    }

    /// Mutable $h^l_t$.
    pub fn state_mut(&mut self, layer: usize, pos: usize) -> &mut [S] {
        let o = (layer * self.tokens + pos) * self.dim;
        &mut self.data[o..o + self.dim]
    }

    /// $\lVert h^l_t\rVert_2$ (accumulated in f64).
    pub fn norm(&self, layer: usize, pos: usize) -> f64 {
        self.state(layer, pos)
            .iter()
            .map(|&v| v.to_f64() * v.to_f64())
            .sum::<f64>()
            .sqrt()
    }
}

/// $\langle a, b\rangle$ and $\lVert a\rVert^2$ in one pass, accumulated in f64.
#[inline]
#[cfg_attr(not(feature = "plot"), allow(dead_code))] // its users, in `secondary`, need `plot`
pub(crate) fn dot_and_sq<S: Real>(a: &[S], b: &[S]) -> (f64, f64) {
    // Four independent accumulators let the compiler vectorise the loop.
    let mut d = [0.0f64; 4];
    let mut s = [0.0f64; 4];
    let ca = a.chunks_exact(4);
    let cb = b.chunks_exact(4);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..4 {
            let xv: f64 = x[k].to_f64();
            d[k] += xv * y[k].to_f64();
            s[k] += xv * xv;
        }
    }
    let mut dd = d.iter().sum::<f64>();
    let mut ss = s.iter().sum::<f64>();
    for (x, y) in ra.iter().zip(rb) {
        let xv: f64 = x.to_f64();
        dd += xv * y.to_f64();
        ss += xv * xv;
    }
    (dd, ss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked() {
        assert!(matches!(
            HiddenStates::<f32>::new(2, 3, 4, vec![0.0; 23]),
            Err(ShapeError::Len { .. })
        ));
        assert!(matches!(
            HiddenStates::<f32>::new(0, 3, 4, vec![]),
            Err(ShapeError::Empty(..))
        ));
        let m = [faer::Mat::<f64>::zeros(3, 4), faer::Mat::<f64>::zeros(3, 5)];
        assert!(matches!(
            HiddenStates::from_mats(&m),
            Err(ShapeError::Ragged { layer: 1, .. })
        ));
        let m: [faer::Mat<f64>; 2] =
            std::array::from_fn(|_| faer::Mat::from_fn(3, 4, |i, j| (i * 4 + j) as f64));
        let h = HiddenStates::from_mats(&m).unwrap();
        assert_eq!(h.state(1, 2), &[8.0, 9.0, 10.0, 11.0]);
        assert!((h.norm(0, 0) - (1.0f64 + 4.0 + 9.0).sqrt()).abs() < 1e-15);
        let (d, s) = dot_and_sq(&[1.0f32, 2.0, 3.0, 4.0, 5.0], &[1.0f32, 1.0, 1.0, 1.0, 2.0]);
        assert_eq!((d, s), (20.0, 55.0));
    }
}
