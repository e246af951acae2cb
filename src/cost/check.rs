//! The registered theorem check `cost_closed_form` (claim A5).

use super::*;

/// Theorem check `cost_closed_form`: on random small instances, the solver's
/// certified bracket contains the §6 Frobenius closed form (orthonormal), the
/// nuclear optimum lies between the Frobenius optimum and the §6 witnesses,
/// and on Gaussian embeddings the primal–dual Frobenius value agrees with
/// Hildreth's coordinate ascent. Margin: smallest relative slack of these inequalities.
pub fn check_closed_form(cases: usize, seed: u64) -> crate::outcome::CheckOutcome {
    let mut out = crate::outcome::CheckOutcome::new("cost_closed_form", "relative slack");
    let mut rng = StdRng::seed_from_u64(seed);
    let opts = CHECK_OPTS;
    for case in 0..cases {
        let (t, delta, pattern, es) = check_instance(&mut rng, 3..=10);
        let run = || -> Result<(bool, f64, String), CostError> {
            let x = embeddings(EmbeddingKind::Orthonormal, t, t + 2, es)?;
            let p = GapProgram::for_pattern(x.as_ref(), pattern, delta)?;
            let f = solve(&p, NormKind::Fro, opts)?;
            let n = solve(&p, NormKind::Nuclear, opts)?;
            let cf = fro_orthonormal(t, delta);
            let (fl, fu) = (f.lower.unwrap_or(0.0), f.value.unwrap_or(f64::INFINITY));
            let (nl, nu) = (n.lower.unwrap_or(0.0), n.value.unwrap_or(f64::INFINITY));
            let wit = nuclear_witness(pattern, t, delta);
            // Slacks (relative): closed form inside the Frobenius bracket; nuclear upper
            // end ≥ Frobenius lower end (‖W‖_* ≥ ‖W‖_F); nuclear lower end ≤ witness.
            // 1e-9 absorbs rounding of the bracket arithmetic (values are O(10–100)).
            let s1 = (cf - fl) / cf + 1e-9;
            let s2 = (fu - cf) / cf + 1e-9;
            let s3 = (nu - fl) / cf + 1e-9;
            let s4 = (wit - nl) / wit + 1e-9;
            // Cross-check on Gaussian embeddings (d = T + 3, so the program is feasible):
            // Hildreth's value (after enough sweeps, feasible to 1e-6) must sit in the bracket.
            let g = embeddings(EmbeddingKind::Gaussian, t, t + 3, es)?;
            let pg = GapProgram::for_pattern(g.as_ref(), pattern, delta)?;
            let fg = solve(&pg, NormKind::Fro, opts)?;
            let (gl, gu) = (fg.lower.unwrap_or(0.0), fg.value.unwrap_or(f64::INFINITY));
            let (s5, s6, hv, hgap) = hildreth_slacks(&pg, &fg);
            let m = s1.min(s2).min(s3).min(s4).min(s5).min(s6);
            Ok((
                m >= 0.0 && hgap > 0.0,
                m,
                format!(
                    "case {case}: T={t} Δ={delta:.3} {pattern}: fro [{fl:.6},{fu:.6}] vs closed {cf:.6}; nuclear [{nl:.6},{nu:.6}] witness {wit:.6}; gaussian fro [{gl:.6},{gu:.6}] hildreth {hv:.6} (gap {hgap:.8})"
                ),
            ))
        };
        match run() {
            Ok((ok, m, what)) => out.record(ok, m, || what),
            Err(e) => out.record(false, f64::NAN, || format!("case {case}: {e}")),
        }
    }
    out
}
