//! The theorem-check registry: every statement of docs/theory.md that the crate
//! checks at run time (`sinklab check`, `sinklab report`) registers here.
//!
//! A check draws `cases` seeded random instances, tests the statement on each,
//! and records a *margin* per case: how far the instance is from violating
//! the statement (positive = holds, the unit is the check's own and is named
//! in `margin_unit`). The worst margin is the minimum over cases.

pub use crate::outcome::CheckOutcome;

/// A registered theorem check.
pub struct Theorem {
    /// Registry name, used by `sinklab check NAME`.
    pub name: &'static str,
    /// Paper claim it formalizes (A1..A6, B1..B6, or `metric`).
    pub claim: &'static str,
    /// One-sentence statement (the full statement lives in `theorems/`).
    pub statement: &'static str,
    /// Figure stem under `out/figures/` illustrating it (empty if none).
    pub figure: &'static str,
    /// Default number of cases for `sinklab check` and the report.
    pub default_cases: usize,
    /// Runs the check on `cases` instances drawn from `seed`.
    pub run: fn(cases: usize, seed: u64) -> CheckOutcome,
}

/// Every registered theorem check, in report order.
#[allow(clippy::vec_init_then_push)] // modules push their entries one by one
pub fn registry() -> Vec<Theorem> {
    use crate::switch::{self, Assumption};
    let mut v: Vec<Theorem> = vec![
        Theorem {
            name: "hard_switch",
            claim: "A3",
            statement: "values in a cone (u·v ≥ γ‖v‖) ⇒ Σ_j A_ij‖v_j‖ ≤ ‖o_i‖/γ: an off head attends to zero-value keys (a sink)",
            figure: "hard_switch",
            default_cases: 400,
            run: |c, s| switch::check_hard_switch_bound(c, s, Assumption::Kept),
        },
        Theorem {
            name: "hard_switch_converse",
            claim: "A3",
            statement: "W_VO s = 0 and A_i0 ≥ 1−ε ⇒ ‖o_i‖ ≤ ε max_j‖v_j‖",
            figure: "",
            default_cases: 300,
            run: |c, s| switch::check_hard_switch_converse(c, s, Assumption::Kept),
        },
        Theorem {
            name: "soft_switch_diagonal",
            claim: "A4/A6",
            statement: "ε-diagonal ⇒ o_i = W_VO x_i + r_i, ‖r_i‖ ≤ 2ε_i max‖v‖ (token-wise map; other tokens move o_i by O(ε))",
            figure: "",
            default_cases: 300,
            run: |c, s| switch::check_diagonal_bound(c, s, Assumption::Kept),
        },
        Theorem {
            name: "diagonal_representability",
            claim: "A4",
            statement: "W = cI gives an ε-diagonal iff ‖x_i‖² > x_i·x_j for all visible pairs (else A_ii ≤ ½ for every c)",
            figure: "",
            default_cases: 300,
            run: switch::check_diagonal_representability,
        },
    ];
    v.push(Theorem {
        name: "sink_logit_switch",
        claim: "A3",
        statement: "a learned sink logit s ≥ LSE(z_i) + ln((1−ε)/ε) switches query i off (‖o_i‖ ≤ ε max‖v‖) with no condition on the embeddings; s = ln(T(1−ε)/ε) with W_QK = 0 does it for every row of length ≤ T, and no smaller s",
        figure: "",
        default_cases: 400,
        run: |c, s| crate::explicit_switch::check_sink_logit_switch(c, s, crate::switch::Assumption::Kept),
    });
    v.push(Theorem {
        name: "gate_switch",
        claim: "A3",
        statement: "an output gate σ(w·x+b) is on for on-queries and off for off-queries iff the two query sets are strictly affinely separable (verified gate or convex weights); on orthonormal queries the least ‖w‖ is 2L√(n_on n_off/N)",
        figure: "",
        default_cases: 400,
        run: |c, s| crate::explicit_switch::check_gate_switch(c, s, crate::switch::Assumption::Kept),
    });
    #[cfg(feature = "ipm")]
    v.push(Theorem {
        name: "sink_logit_selective",
        claim: "A3",
        statement: "a selective switch by a learned sink logit on the copy-paste head (on-queries' sources Δ above s and their keys, off-queries' keys δ below s): on orthonormal embeddings min √(‖W_QK‖_F²+s²) and min ‖W_QK‖_*+|s| = δ+(δ+Δ)Σ_c√n_c are the closed forms, each proved by its dual and inside the interior-point bracket",
        figure: "",
        default_cases: 24,
        run: |c, s| crate::cost::sink_logit::check_sink_logit_selective(c, s, crate::switch::Assumption::Kept),
    });
    v.push(Theorem {
        name: "secondary_monotone",
        claim: "B3",
        statement: "synthetic model: a planted MLP writing ±r·u on a cone makes sinks whose lifetime (and, aligned, received attention) is non-decreasing in r",
        figure: "secondary_synthetic",
        default_cases: 64,
        run: crate::secondary::synthetic::check_monotone,
    });
    v.push(Theorem {
        name: "cost_closed_form",
        claim: "A5",
        statement: "The minimal-norm gap programs of §6 match the Frobenius closed form Δ√(T−H_T) on orthonormal embeddings, lie between it and the nuclear witnesses, and agree with an independent solver",
        figure: "cost_scaling",
        default_cases: 12,
        run: crate::cost::check_closed_form,
    });
    v.push(Theorem {
        name: "cost_head_closed_form",
        claim: "A5",
        statement: "Whole head on copy-paste: the W_QK and W_VO programs match the Frobenius closed forms Δ√(T−H_T) and Δ√(n_src(T−1)/T) on orthonormal embeddings, lie between them and the nuclear witnesses, and the two-sided VO program agrees with an independent solver",
        figure: "cost_scaling",
        default_cases: 8,
        run: crate::cost::head::check_closed_form,
    });
    v.push(Theorem {
        name: "half_space",
        claim: "A1",
        statement: "a sink is representable iff 0 ∉ conv(Q) and s ∉ conv(K); verdict with a verified witness or convex weights",
        figure: "half_space",
        default_cases: 400,
        run: crate::geometry::check::run_half_space,
    });
    v.push(Theorem {
        name: "half_space_corollary",
        claim: "A1",
        statement: "cos(s,x) < 0 on queries and cos(s,k) ≤ 0 on keys ⇒ W = −c·s sᵀ is an ε-sink witness",
        figure: "half_space",
        default_cases: 200,
        run: crate::geometry::check::run_corollary,
    });
    v.push(Theorem {
        name: "oversmoothing_prediction",
        claim: "A2",
        statement: "one mixing step y_i = N(x_i + W(A_λX)_i), x_i iid N(μ,Σ): as n → ∞ the mean token cosine tends to ‖m‖²/(‖m‖²+tr BΣBᵀ) plus its delta-method correction, to O(ρ0/r²); finite-n error shrinks with n",
        figure: "oversmoothing",
        default_cases: 24,
        run: crate::oversmoothing::checks::prediction_check,
    });
    v.push(Theorem {
        name: "oversmoothing_sign",
        claim: "A2",
        statement: "dense smooths more than identity iff tr((I+W)Σ(I+W)ᵀ) > tr(Σ) (P-projected for LayerNorm), whenever the predicted gap is ≥ 0.02",
        figure: "oversmoothing",
        default_cases: 60,
        run: crate::oversmoothing::checks::sign_check,
    });
    v
}
