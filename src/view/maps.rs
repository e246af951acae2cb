//! Attention maps for the viewer, reduced while the forward pass streams (a layer's `[H, T, T]`
//! probabilities are dropped after it): every head max-pooled to at most `R × R` cells and
//! quantised to 8 bits, the heads named by `--heads` kept exactly (f32).
//!
//! Pooling: with $R = \min(T, R_{max})$, position $i$ falls in bin $\lfloor iR/T\rfloor$ and cell
//! $(r, c)$ holds $\max\lbrace A_{ij} : i \in r, j \in c\rbrace$, so a sink column never fades
//! (mean pooling would divide it by the bin width). Quantisation: $q = \mathrm{round}(255\thinspace p)$,
//! read back as $q/255$ with an error of at most $1/510$. Causal maps keep the cells $c \le r$
//! only (row-major lower triangle, $R(R+1)/2$ bytes): a cell above the diagonal covers keys
//! after all its queries, so it is zero.
//!
//! Heads with a learned sink logit (gpt-oss) also get a column: per query row the mass the
//! sink logit takes, $1 - \sum_j A_{ij}$, max-pooled over the rows of each bin and quantised as
//! the cells are.

use crate::runtime::forward::{LayerObserver, LayerTensors};
use crate::runtime::pretrained::Pretrained;

/// The resolution of a map of `t` positions under the cap `max_res`: $\min(T, R_{max})$.
pub fn resolution(t: usize, max_res: usize) -> usize {
    t.min(max_res.max(1))
}

/// The bin of position `i` of `t` among `r` bins: $\lfloor i r / t \rfloor$.
pub fn bin(i: usize, t: usize, r: usize) -> usize {
    i * r / t
}

/// Number of stored cells of an `r × r` map: the lower triangle when causal.
pub fn cells(r: usize, causal: bool) -> usize {
    if causal { r * (r + 1) / 2 } else { r * r }
}

/// Index of cell `(row, col)` in the stored layout (`col ≤ row` when causal).
pub fn cell_index(row: usize, col: usize, r: usize, causal: bool) -> usize {
    if causal {
        row * (row + 1) / 2 + col
    } else {
        row * r + col
    }
}

/// Max-pools one `t × t` map (row-major) to `r × r` cells in the stored layout (f32).
pub fn max_pool(a: &[f32], t: usize, r: usize, causal: bool) -> Vec<f32> {
    assert_eq!(a.len(), t * t, "max_pool: a {t} × {t} map");
    let mut out = vec![0f32; cells(r, causal)];
    // Key bins of every column, computed once.
    let col_bin: Vec<usize> = (0..t).map(|j| bin(j, t, r)).collect();
    for i in 0..t {
        let rb = bin(i, t, r);
        let keys = if causal { i + 1 } else { t };
        for (j, &p) in a[i * t..i * t + keys].iter().enumerate() {
            let c = cell_index(rb, col_bin[j], r, causal);
            if p > out[c] {
                out[c] = p;
            }
        }
    }
    out
}

/// The learned sink's mass of every row of one `t × t` map, $1 - \sum_j A_{ij}$ (clamped to
/// [0, 1] against f32 rounding), max-pooled to `r` bins of rows.
pub fn row_sink_mass(a: &[f32], t: usize, r: usize) -> Vec<f32> {
    assert_eq!(a.len(), t * t, "row_sink_mass: a {t} × {t} map");
    let mut out = vec![0f32; r];
    for i in 0..t {
        let row = a[i * t..(i + 1) * t].iter().map(|&p| p as f64);
        let m = crate::patterns::learned_sink_mass(row).clamp(0.0, 1.0) as f32;
        let b = bin(i, t, r);
        out[b] = out[b].max(m);
    }
    out
}

/// 8-bit quantisation of probabilities: `round(255 p)`, p clamped to [0, 1].
pub fn quantise(p: &[f32]) -> Vec<u8> {
    p.iter()
        .map(|&x| (255.0 * x.clamp(0.0, 1.0)).round() as u8)
        .collect()
}

/// The exact map in the stored layout (lower triangle when causal), f32.
pub fn exact_cells(a: &[f32], t: usize, causal: bool) -> Vec<f32> {
    if !causal {
        return a.to_vec();
    }
    let mut out = Vec::with_capacity(cells(t, true));
    for i in 0..t {
        out.extend_from_slice(&a[i * t..i * t + i + 1]);
    }
    out
}

/// One pooled head.
#[derive(Debug, Clone)]
pub struct PooledHead {
    /// Layer.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// Quantised cells in the stored layout.
    pub q8: Vec<u8>,
    /// With a learned sink: [`row_sink_mass`] quantised, one byte per bin of rows.
    pub sink_q8: Option<Vec<u8>>,
}

/// One exactly kept head.
#[derive(Debug, Clone)]
pub struct ExactHead {
    /// Layer.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// f32 probabilities in the stored layout (the `t × t` triangle when causal).
    pub p: Vec<f32>,
}

/// Observer that pools every head of every layer and keeps the asked-for heads exactly.
#[derive(Debug, Clone, Default)]
pub struct MapObserver {
    /// Resolution cap `R_max`.
    pub max_res: usize,
    /// `(layer, head)` pairs kept exactly.
    pub exact_heads: Vec<(usize, usize)>,
    /// Pooled heads, layer-major.
    pub pooled: Vec<PooledHead>,
    /// Exact heads, in the order met.
    pub exact: Vec<ExactHead>,
    /// Positions of the maps.
    pub t: usize,
    /// Whether the maps are causal.
    pub causal: bool,
}

impl MapObserver {
    /// An observer with resolution cap `max_res` and the heads kept exactly.
    pub fn new(max_res: usize, exact_heads: Vec<(usize, usize)>) -> Self {
        MapObserver {
            max_res,
            exact_heads,
            ..Default::default()
        }
    }

    /// Pools (and where asked keeps) the `h` heads of one layer's `[H, T, T]` maps; with
    /// `learned_sink`, each head's column of sink mass too.
    pub fn add_layer(
        &mut self,
        layer: usize,
        attn: &[f32],
        (h, t): (usize, usize),
        causal: bool,
        learned_sink: bool,
    ) {
        use rayon::prelude::*;
        self.t = t;
        self.causal = causal;
        let r = resolution(t, self.max_res);
        let heads: Vec<PooledHead> = (0..h)
            .into_par_iter()
            .map(|hh| {
                let a = &attn[hh * t * t..(hh + 1) * t * t];
                PooledHead {
                    layer,
                    head: hh,
                    q8: quantise(&max_pool(a, t, r, causal)),
                    sink_q8: learned_sink.then(|| quantise(&row_sink_mass(a, t, r))),
                }
            })
            .collect();
        self.pooled.extend(heads);
        for hh in 0..h {
            if self.exact_heads.contains(&(layer, hh)) {
                self.exact.push(ExactHead {
                    layer,
                    head: hh,
                    p: exact_cells(&attn[hh * t * t..(hh + 1) * t * t], t, causal),
                });
            }
        }
    }
}

impl LayerObserver for MapObserver {
    fn layer(&mut self, m: &Pretrained, lt: &LayerTensors<'_>) {
        // One pass without a cache: square maps, T_n = T_k.
        if lt.pos0 == 0 && lt.t == lt.t_keys {
            let learned_sink = m.layers[lt.layer].sinks.is_some();
            self.add_layer(
                lt.layer,
                lt.attn,
                (m.cfg.n_head, lt.t),
                m.cfg.causal,
                learned_sink,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute-force max over the bin rectangle, for comparison.
    fn brute(a: &[f32], t: usize, r: usize, row: usize, col: usize) -> f32 {
        let mut m = 0f32;
        for i in (0..t).filter(|&i| bin(i, t, r) == row) {
            for j in (0..t).filter(|&j| bin(j, t, r) == col) {
                m = m.max(a[i * t + j]);
            }
        }
        m
    }

    #[test]
    fn pooling_is_the_max_over_each_bin_and_keeps_a_planted_spike() {
        // A seeded causal map of T = 37 pooled to R = 8: every cell equals the brute-force max,
        // and a planted 0.9 at (30, 3) shows in its cell.
        let t = 37;
        let mut s = 12345u64;
        let mut a = vec![0f32; t * t];
        for i in 0..t {
            for j in 0..=i {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                a[i * t + j] = ((s >> 40) as f32 / (1u64 << 24) as f32) * 0.1;
            }
        }
        a[30 * t + 3] = 0.9;
        let r = 8;
        let p = max_pool(&a, t, r, true);
        assert_eq!(p.len(), 36);
        for row in 0..r {
            for col in 0..r {
                let want = brute(&a, t, r, row, col);
                if col <= row {
                    assert_eq!(p[cell_index(row, col, r, true)], want, "({row}, {col})");
                } else {
                    assert_eq!(want, 0.0, "above the diagonal: ({row}, {col})");
                }
            }
        }
        assert_eq!(p[cell_index(bin(30, t, r), bin(3, t, r), r, true)], 0.9);
        // Bidirectional layout: the full square.
        assert_eq!(max_pool(&a, t, r, false).len(), 64);
    }

    #[test]
    fn the_sink_column_is_the_missing_row_mass_max_pooled() {
        // Rows summing to 1 − m_i with m = (0, 0.5, 0.2, 0.9): at full resolution the column
        // is m; pooled to 2 bins of two rows, (max(0, 0.5), max(0.2, 0.9)).
        let t = 4;
        let m = [0.0f32, 0.5, 0.2, 0.9];
        let mut a = vec![0f32; t * t];
        for i in 0..t {
            for j in 0..=i {
                a[i * t + j] = (1.0 - m[i]) / (i + 1) as f32;
            }
        }
        let full = row_sink_mass(&a, t, t);
        for (x, y) in full.iter().zip(m) {
            assert!((x - y).abs() < 1e-6, "{full:?}");
        }
        let pooled = row_sink_mass(&a, t, 2);
        assert!((pooled[0] - 0.5).abs() < 1e-6 && (pooled[1] - 0.9).abs() < 1e-6);
        // A head without a learned sink gets no column.
        let mut obs = MapObserver::new(2, vec![]);
        obs.add_layer(0, &a, (1, t), true, false);
        assert!(obs.pooled[0].sink_q8.is_none());
        obs.add_layer(1, &a, (1, t), true, true);
        assert_eq!(
            obs.pooled[1].sink_q8.as_deref(),
            Some(&quantise(&pooled)[..])
        );
    }

    #[test]
    fn quantisation_error_is_at_most_half_a_step() {
        let p: Vec<f32> = (0..=1000).map(|k| k as f32 / 1000.0).collect();
        for (x, q) in p.iter().zip(quantise(&p)) {
            assert!(
                (q as f32 / 255.0 - x).abs() <= 0.5 / 255.0 + 1e-7,
                "{x} -> {q}"
            );
        }
        assert_eq!(quantise(&[-0.1, 1.5]), vec![0, 255]);
    }

    #[test]
    fn no_pooling_below_the_cap_and_exact_triangle() {
        assert_eq!(resolution(10, 256), 10);
        assert_eq!(resolution(2048, 256), 256);
        let t = 3;
        let a = [1.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.2, 0.3, 0.5];
        assert_eq!(max_pool(&a, t, 3, true), vec![1.0, 0.5, 0.5, 0.2, 0.3, 0.5]);
        assert_eq!(exact_cells(&a, t, true), vec![1.0, 0.5, 0.5, 0.2, 0.3, 0.5]);
    }
}
