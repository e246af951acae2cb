//! Mixture-of-experts routing (Qwen3-MoE, gpt-oss): a router scores the $E$ experts of each
//! row, $z = W_r x (+ b_r) \in \mathbb R^E$, and keeps $k$ of them with weights $w_e$
//! ([`Routing`], [`route`]); the sub-layer's output is $\sum_{e \in S} w_e f_e(x)$ over the
//! kept set $S$, $f_e$ expert $e$'s gated MLP (gpt-oss gates with [`SwigluClamp`]). The
//! weights are [`super::pretrained::Moe`]; the products, which touch only the routed experts'
//! rows, are in [`super::forward`].

/// How the router's logits $z$ become the $k$ expert weights of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// Qwen-MoE: $p = \mathrm{softmax}(z)$ over all experts, the $k$ largest $p_e$ kept, and
    /// divided by their sum iff `renormalise` (`norm_topk_prob`).
    SoftmaxTopK {
        /// Renormalise the kept probabilities to sum to 1.
        renormalise: bool,
    },
    /// gpt-oss: the $k$ largest logits kept, $w = \mathrm{softmax}(z_{\text{top-}k})$.
    TopKSoftmax,
}

/// gpt-oss's clamped SwiGLU: $g \leftarrow \min(g, \ell)$, $u \leftarrow \mathrm{clamp}(u,
/// -\ell, \ell)$, $h = (u + 1)\thinspace g\thinspace\sigma(\alpha g)$.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwigluClamp {
    /// Sigmoid gain $\alpha$ (`swiglu_alpha`).
    pub alpha: f32,
    /// Clamp $\ell$ (`swiglu_limit`).
    pub limit: f32,
}

impl SwigluClamp {
    /// `up ← (clamp(up) + 1) · g σ(α g)` with `g = min(gate, ℓ)`.
    pub fn apply(&self, up: &mut [f32], gate: &[f32]) {
        let (a, l) = (self.alpha, self.limit);
        for (u, &g) in up.iter_mut().zip(gate) {
            let g = g.min(l);
            let glu = g / (1.0 + (-a * g).exp());
            *u = (u.clamp(-l, l) + 1.0) * glu;
        }
    }
}

/// The experts of one row and their weights, in decreasing order of score (ties to the lower
/// index), from the router logits `z` of that row.
pub fn route(z: &[f32], k: usize, routing: Routing) -> Vec<(usize, f32)> {
    let softmax = |v: &mut [f32]| {
        let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut s = 0f32;
        for x in v.iter_mut() {
            *x = (*x - m).exp();
            s += *x;
        }
        for x in v.iter_mut() {
            *x /= s;
        }
    };
    let top = |score: &[f32]| -> Vec<usize> {
        let mut idx: Vec<usize> = (0..score.len()).collect();
        // Stable: equal scores keep increasing index order.
        idx.sort_by(|&a, &b| score[b].total_cmp(&score[a]));
        idx.truncate(k);
        idx
    };
    match routing {
        Routing::SoftmaxTopK { renormalise } => {
            let mut p = z.to_vec();
            softmax(&mut p);
            let sel = top(&p);
            let mut w: Vec<f32> = sel.iter().map(|&e| p[e]).collect();
            if renormalise {
                let s: f32 = w.iter().sum();
                for x in &mut w {
                    *x /= s;
                }
            }
            sel.into_iter().zip(w).collect()
        }
        Routing::TopKSoftmax => {
            let sel = top(z);
            let mut w: Vec<f32> = sel.iter().map(|&e| z[e]).collect();
            softmax(&mut w);
            sel.into_iter().zip(w).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_then_top_k_keeps_the_largest_probabilities() {
        let z = [0.0f32, 2.0, 1.0, -1.0];
        let r = route(&z, 2, Routing::SoftmaxTopK { renormalise: false });
        assert_eq!(r.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 2]);
        let s: f32 = z.iter().map(|v| v.exp()).sum();
        assert!((r[0].1 - 2f32.exp() / s).abs() < 1e-6);
        assert!((r[1].1 - 1f32.exp() / s).abs() < 1e-6);
        // Renormalised: the same experts, weights summing to 1 in the same ratio.
        let n = route(&z, 2, Routing::SoftmaxTopK { renormalise: true });
        assert_eq!(n[0].0, 1);
        assert!((n[0].1 + n[1].1 - 1.0).abs() < 1e-6);
        assert!((n[0].1 / n[1].1 - 1f32.exp()).abs() < 1e-4);
        // Without renormalisation they sum to less than 1 when k < E.
        assert!(r[0].1 + r[1].1 < 0.99);
    }

    #[test]
    fn top_k_then_softmax_ignores_the_other_logits() {
        let a = route(&[3.0, 0.0, 1.0, -5.0], 2, Routing::TopKSoftmax);
        let b = route(&[3.0, -9.0, 1.0, 2.5], 2, Routing::TopKSoftmax);
        assert_eq!(a.iter().map(|p| p.0).collect::<Vec<_>>(), vec![0, 2]);
        let want = 1.0 / (1.0 + (-2f32).exp());
        assert!((a[0].1 - want).abs() < 1e-6);
        assert!((a[0].1 + a[1].1 - 1.0).abs() < 1e-6);
        // Changing an unselected logit changes nothing; promoting one changes the choice.
        assert_eq!(b[0].0, 0);
        assert_eq!(b[1].0, 3);
    }

    #[test]
    fn clamped_swiglu_matches_its_formula() {
        let c = SwigluClamp {
            alpha: 1.702,
            limit: 7.0,
        };
        let mut up = [0.5f32, 9.0, -9.0];
        let gate = [1.0f32, 10.0, -2.0];
        c.apply(&mut up, &gate);
        let glu = |g: f32| g / (1.0 + (-1.702 * g).exp());
        assert!((up[0] - 1.5 * glu(1.0)).abs() < 1e-6);
        assert!((up[1] - 8.0 * glu(7.0)).abs() < 1e-5);
        assert!((up[2] - (-6.0) * glu(-2.0)).abs() < 1e-6);
    }
}
