//! A5 on real inputs (`sinklab::real::cost_real`): the path reproduces the closed forms on
//! orthonormal embeddings, and on a packaged model its output keeps its invariants.

#[path = "support/models.rs"]
mod models;

use sinklab::cost::{self, EmbeddingKind, NormKind, Pattern};
use sinklab::real::cost_real::{self, Options};

/// Orthonormal rows: every prefix is orthonormal, so each bracket must contain the exact
/// optimum of `cost::exact` (Frobenius Δ√(T−H_T), nuclear Δ(T−1)/√T and Δ·Σ√(i/(i+1))), and
/// the fitted exponents must equal the exact curve's grid slope up to the brackets' width.
#[test]
fn orthonormal_inputs_reproduce_the_closed_forms() {
    let o = Options {
        t_max_fro: 32,
        t_max_nuclear: 32,
        tol: 1e-3,
        n_boot: 200,
        ..Options::default()
    };
    let x = cost::embeddings(EmbeddingKind::Orthonormal, 32, 32, 3).unwrap();
    let r = cost_real::run_on(&[x], &[0], &o, &mut |_| {}).unwrap();
    assert_eq!(
        r.points.len(),
        2 * 2 * 3,
        "grid 8, 16, 32 for both norms and patterns"
    );
    for p in &r.points {
        let exact = cost::exact::exact_orthonormal(p.pattern, p.norm, p.t, o.delta);
        let (lo, up) = (p.lower.unwrap(), p.upper.unwrap());
        // The bracket is certified: rounding of O(T²) f64 sums, far below 1e-9 relative.
        assert!(
            lo <= exact * (1.0 + 1e-9) && exact <= up * (1.0 + 1e-9),
            "{p:?}: exact {exact} outside [{lo}, {up}]"
        );
        assert!(p.rel_gap.unwrap() <= o.tol, "{p:?}");
    }
    for f in &r.fits {
        // Each value is within 1e-3 relative of the exact one, so each log is within 1e-3 and
        // the slope over ln 8 … ln 32 (spread ln 4) within 2·1e-3/ln 4·√2 < 3e-3.
        let (s, d) = (f.sink.as_ref().unwrap(), f.diagonal.as_ref().unwrap());
        assert!((s.exponent - f.synthetic.0).abs() < 3e-3, "{f:?}");
        assert!((d.exponent - f.synthetic.1).abs() < 3e-3, "{f:?}");
    }
    let nuc = r.fits.iter().find(|f| f.norm == NormKind::Nuclear).unwrap();
    let fro = r.fits.iter().find(|f| f.norm == NormKind::Fro).unwrap();
    // Frobenius: the same cost for both patterns, ratio exactly flat.
    assert!(fro.ratio.as_ref().unwrap().exponent.abs() < 3e-3, "{fro:?}");
    // Nuclear: the ratio's exponent is the difference of the exact slopes (≈ ½ asymptotically).
    let want = nuc.synthetic.1 - nuc.synthetic.0;
    assert!((nuc.ratio.as_ref().unwrap().exponent - want).abs() < 6e-3);
    assert!(want > 0.4, "exact ratio slope {want}");
}

/// Equal rows: a diagonal cannot tell row 5 from its earlier copy 3. Either the program is
/// certified infeasible (and the series ends there), or, when the SVD reduction leaves the two
/// rows different by rounding (≈ 1e-16 relative), any W meeting the gaps needs a norm of order
/// Δ/(1e-16·‖x‖²): its certified lower end is then above 1e6 times the sink's cost on the
/// same rows, a bound with ten orders of magnitude to spare. The sink stays feasible and cheap.
#[test]
fn repeated_rows_price_the_diagonal_out() {
    let o = Options {
        t_max_fro: 16,
        t_max_nuclear: 8,
        n_boot: 50,
        ..Options::default()
    };
    let mut x = cost::embeddings(EmbeddingKind::Gaussian, 16, 24, 1).unwrap();
    for j in 0..24 {
        x[(5, j)] = x[(3, j)];
    }
    let r = cost_real::run_on(&[x], &[7], &o, &mut |_| {}).unwrap();
    let of = |pat: Pattern| -> Vec<_> {
        r.points
            .iter()
            .filter(|p| p.pattern == pat && p.norm == NormKind::Fro)
            .collect()
    };
    let sink = of(Pattern::Sink);
    assert_eq!(sink.len(), 2);
    assert!(
        sink.iter()
            .all(|p| p.feasible && p.layer == 7 && p.fitted(0.05))
    );
    let d8 = of(Pattern::Diagonal)[0];
    assert_eq!(d8.t, 8);
    if d8.feasible {
        assert!(d8.lower.unwrap() > 1e6 * sink[0].upper.unwrap(), "{d8:?}");
    } else {
        assert_eq!(of(Pattern::Diagonal).len(), 1, "series ends at infeasible");
        assert!(d8.undetermined || d8.certificate_verified == Some(true));
    }
}

#[test]
fn bad_options_are_refused() {
    let o = Options {
        t_min: 1,
        ..Options::default()
    };
    assert!(o.validate().unwrap_err().to_string().contains("t_min"));
    let x = cost::embeddings(EmbeddingKind::Gaussian, 8, 8, 0).unwrap();
    assert!(cost_real::run_on(&[x], &[0, 1], &Options::default(), &mut |_| {}).is_err());
}

/// SmolLM2 on a short grid: brackets ordered and positive, the grid as stated, fits only on
/// points inside the fit rule, synthetic slopes those of the grid.
#[test]
fn smollm2_invariants() {
    let Some(path) = models::model_or_skip("smollm2") else {
        return;
    };
    let lm = sinklab::runtime::load(&path).unwrap();
    let o = Options {
        t_max_fro: 32,
        t_max_nuclear: 32,
        n_boot: 200,
        controls: true,
        ..Options::default()
    };
    let r = cost_real::analyze(&lm, None, &o, &mut |_| {}).unwrap();
    let n = lm.model.cfg.n_layer;
    assert_eq!(r.layers, cost_real::default_layers(n));
    // One token more than the largest T: the shifted control drops the first row.
    assert_eq!(r.n_tokens, 33);
    for norm in [NormKind::Fro, NormKind::Nuclear] {
        let grid = o.grid(norm);
        for &l in &r.layers {
            for pat in [Pattern::Sink, Pattern::Diagonal] {
                let ts: Vec<usize> = r
                    .points
                    .iter()
                    .filter(|p| p.layer == l && p.norm == norm && p.pattern == pat)
                    .map(|p| p.t)
                    .collect();
                assert!(
                    !ts.is_empty() && grid.starts_with(&ts),
                    "{l} {norm} {pat}: {ts:?}"
                );
                // A series ends early only at a point that is not feasible.
                if ts.len() < grid.len() {
                    let last = r
                        .points
                        .iter()
                        .rfind(|p| p.layer == l && p.norm == norm && p.pattern == pat);
                    assert!(last.is_some_and(|p| !p.feasible), "{l} {norm} {pat}");
                }
            }
        }
    }
    for p in &r.points {
        if p.feasible {
            let (lo, up) = (p.lower.unwrap(), p.upper.unwrap());
            assert!(lo > 0.0 && lo <= up && up.is_finite(), "{p:?}");
            assert!(p.rank <= p.t);
            // Priced by the interior-point methods to the asked bracket, both norms (the
            // nuclear T = 32 points lie beyond the conic solver's SDP cap).
            assert!(p.rel_gap.unwrap() <= o.ipm_tol, "{p:?}");
        } else if !p.undetermined {
            assert_eq!(p.certificate_verified, Some(true), "{p:?}");
        } else {
            assert!(
                p.upper.is_none() && p.certificate_verified.is_none(),
                "{p:?}"
            );
        }
    }
    for f in &r.fits {
        for t in f.t_sink.iter().chain(&f.t_diagonal) {
            let p = r
                .points
                .iter()
                .find(|p| p.layer == f.layer && p.norm == f.norm && p.t == *t)
                .unwrap();
            assert!(p.fitted(o.max_fit_gap));
        }
        if let Some(s) = &f.sink {
            assert!(s.ci_low <= s.exponent && s.exponent <= s.ci_high);
        }
        let g = o.grid(f.norm);
        assert_eq!(
            f.synthetic.0,
            cost::exact::grid_slope(Pattern::Sink, f.norm, &g)
        );
    }
    // The controls ran on the same grids and layers, and are priced like the real points.
    assert_eq!(r.controls.len(), 2);
    for c in &r.controls {
        assert_eq!(c.fits.len(), r.fits.len(), "{:?}", c.kind);
        for p in c.points.iter().filter(|p| p.feasible) {
            assert!(p.rel_gap.unwrap() <= o.ipm_tol, "{:?}: {p:?}", c.kind);
        }
    }
    let md = cost_real::markdown("smollm2", &r);
    assert!(
        md.contains("| layer | norm |") && md.contains("| control | layer |"),
        "{md}"
    );
}

/// The points the conic solver alone left unpriced on SmolLM2 (its QP stops without progress on
/// layer 29's diagonal at T = 128; its SDP is capped at order 50, so every nuclear T ≥ 26): the
/// dual QP and the structured SDP method price them to the asked 1e-6, each upper end a point
/// whose every gap is rechecked by `solve_point`'s certificate.
#[test]
fn smollm2_points_beyond_the_conic_solver_are_priced() {
    let Some(path) = models::model_or_skip("smollm2") else {
        return;
    };
    let lm = sinklab::runtime::load(&path).unwrap();
    let o = Options::default();
    let toks = cost_real::text_tokens(&lm, 128).unwrap();
    let xs = cost_real::capture(&lm.model, &toks, &[1, 29]).unwrap();
    for (x, layer, t, norm) in [
        (&xs[1], 29, 128, NormKind::Fro),
        (&xs[0], 1, 64, NormKind::Nuclear),
    ] {
        let p = cost_real::solve_point(x.as_ref(), layer, t, Pattern::Diagonal, norm, &o).unwrap();
        assert!(p.feasible, "{p:?}");
        assert!(p.rel_gap.unwrap() <= o.ipm_tol, "{p:?}");
        assert_eq!(p.solver, Some(cost::Method::IpmWorkingSet), "{p:?}");
        assert!(p.fallback.is_none(), "{p:?}");
    }
}
