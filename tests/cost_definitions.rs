//! The map of cost definitions (`cost::definitions`, docs/theory.md §6): closed-form cells agree
//! with solver brackets and their fits; the variants obey their identities (squared doubles an
//! exponent, the ε-gap adds its log factor's slope); series are fitted within groups; and the
//! verdict is computed from the cells, so it flips when a cell's exponent changes.

use sinklab::cost::definitions::{
    self, Base, Exponent, External, Family, MeasureOptions, Part, Series, Variant,
};
use sinklab::cost::{
    EmbeddingKind, GapProgram, Method, NormKind, Pattern, SolveOptions, embeddings, head, solve,
};

fn opts() -> MeasureOptions {
    MeasureOptions {
        grid: vec![8, 16, 32],
        grid_nuclear: vec![8, 16],
        seeds: vec![0, 1],
        on_rate: head::DEFAULT_ON_RATE,
        solve: SolveOptions {
            rel_gap: 1e-6,
            method: Method::preferred(),
            ..SolveOptions::default()
        },
    }
}

/// A table of the closed forms alone (no measured point, no external series): every
/// non-closed-form cell is unpriced.
fn closed_only() -> definitions::Table {
    definitions::build(&opts(), &[], &External::default(), 0.01, 200, 0).unwrap()
}

/// Each closed-form cell of W_QK and W_VO (orthonormal) lies inside the certified bracket the
/// solver returns on the same programs, and the exact grid slope lies inside the CI of a fit of
/// the solver's values.
#[test]
fn closed_form_cells_match_solver_brackets_and_fits() {
    let o = opts();
    for (part, norm, pattern) in [
        (Part::Qk, NormKind::Fro, Pattern::Sink),
        (Part::Qk, NormKind::Nuclear, Pattern::Sink),
        (Part::Qk, NormKind::Nuclear, Pattern::Diagonal),
        (Part::Vo, NormKind::Fro, Pattern::Diagonal),
        (Part::Head, NormKind::Fro, Pattern::Sink),
    ] {
        let Some(Base::Exact { values, .. }) = definitions::closed_form(
            part,
            Family::Orthonormal,
            norm,
            pattern,
            &o.grid,
            &o.seeds,
            o.on_rate,
        )
        .unwrap() else {
            panic!("{part} {norm}: no closed form");
        };
        let mut series = Series::default();
        let mut k = 0;
        for &t in &o.grid {
            for &seed in &o.seeds {
                let x = embeddings(EmbeddingKind::Orthonormal, t, t, seed).unwrap();
                let (lo, hi) = match part {
                    Part::Qk => {
                        let p = GapProgram::for_pattern(x.as_ref(), pattern, 1.0).unwrap();
                        let s = solve(&p, norm, o.solve).unwrap();
                        (s.lower.unwrap(), s.value.unwrap())
                    }
                    Part::Vo | Part::Head => {
                        let pi = head::sources(t, o.on_rate, seed).unwrap();
                        let h =
                            head::solve_head(x.as_ref(), pattern, &pi, norm, 1.0, o.solve).unwrap();
                        let s = if part == Part::Vo { h.vo } else { h.total() };
                        (s.lower.unwrap(), s.value.unwrap())
                    }
                };
                // The closed form of this (T, seed): W_QK's does not depend on the seed.
                let exact = if part == Part::Qk {
                    values.iter().find(|v| v.0 == t).unwrap().1
                } else {
                    values[k].1
                };
                k += 1;
                // Brackets of relative width ≤ 1e-6; 1e-9 absorbs the bracket's own rounding.
                assert!(
                    lo <= exact * (1.0 + 1e-9) && exact <= hi * (1.0 + 1e-9),
                    "{part} {norm} {pattern} T={t}: exact {exact} outside [{lo}, {hi}]"
                );
                series.points.push((0, t, hi));
            }
        }
        let exact = definitions::exponent(
            &Base::Exact {
                values: values.clone(),
                asymptote: 0.5,
            },
            Variant::all(0.01)[0],
            200,
            1,
        );
        let measured =
            definitions::exponent(&Base::Measured(series), Variant::all(0.01)[0], 500, 1);
        let (Exponent::Exact { grid_slope, .. }, Exponent::Measured { fit, .. }) =
            (exact, measured)
        else {
            panic!("unexpected cells");
        };
        // The CI of a fit of values within 1e-6 of the exact ones, widened by what a 1e-6
        // relative error can move a slope over a grid spanning ln 4 (2e-6 / ln 4 < 2e-6).
        assert!(
            fit.ci_low - 2e-6 <= grid_slope && grid_slope <= fit.ci_high + 2e-6,
            "{part} {norm} {pattern}: exact grid slope {grid_slope} outside the fit's CI {fit:?}"
        );
    }
}

/// Squaring doubles an exponent (exactly, fits and CIs alike); the ε-gap adds its log factor:
/// an exact asymptote is unchanged and the grid slope grows by the slope of ln Δ(T,ε).
#[test]
fn variants_obey_their_identities() {
    let grid = [8usize, 16, 32, 64];
    let values: Vec<(usize, f64)> = grid.iter().map(|&t| (t, (t as f64).sqrt())).collect();
    let [plain, squared, eps, _] = Variant::all(0.01);
    let e = |v| {
        definitions::exponent(
            &Base::Exact {
                values: values.clone(),
                asymptote: 0.5,
            },
            v,
            10,
            0,
        )
    };
    let (
        Exponent::Exact {
            asymptote: a0,
            grid_slope: g0,
        },
        Exponent::Exact {
            asymptote: a1,
            grid_slope: g1,
        },
        Exponent::Exact {
            asymptote: a2,
            grid_slope: g2,
        },
    ) = (e(plain), e(squared), e(eps))
    else {
        panic!("exact cells expected");
    };
    assert!((a0 - 0.5).abs() < 1e-15 && (a1 - 1.0).abs() < 1e-15 && (a2 - 0.5).abs() < 1e-15);
    assert!((g0 - 0.5).abs() < 1e-12 && (g1 - 1.0).abs() < 1e-12);
    let gap_slope = {
        let x: Vec<f64> = grid.iter().map(|&t| (t as f64).ln()).collect();
        let y: Vec<f64> = grid
            .iter()
            .map(|&t| definitions::gap_eps(t, 0.01).ln())
            .collect();
        sinklab::stats::least_squares(&x, &y).slope
    };
    assert!(
        gap_slope > 0.05,
        "the log factor's slope over T = 8–64 is {gap_slope}"
    );
    assert!(
        (g2 - 0.5 - gap_slope).abs() < 1e-12,
        "{g2} vs 0.5 + {gap_slope}"
    );
    // A fit: squared exponent and CI are twice the plain ones.
    let s = Series {
        points: grid
            .iter()
            .enumerate()
            .map(|(k, &t)| (0, t, (t as f64).powf(0.8) * (1.0 + 0.03 * (k as f64).sin())))
            .collect(),
        ..Series::default()
    };
    let f = |v| match definitions::exponent(&Base::Measured(s.clone()), v, 300, 4) {
        Exponent::Measured { fit, .. } => fit,
        other => panic!("{other:?}"),
    };
    let (a, b) = (f(plain), f(squared));
    assert!((b.exponent - 2.0 * a.exponent).abs() < 1e-12);
    assert!(
        (b.ci_low - 2.0 * a.ci_low).abs() < 1e-12 && (b.ci_high - 2.0 * a.ci_high).abs() < 1e-12
    );
}

/// Series of one slope and different intercepts are fitted within groups: the pooled slope is
/// the common one, where a naive pooled line over shifted series is not.
#[test]
fn groups_are_fitted_within() {
    let mut s = Series::default();
    for (g, scale, ts) in [(0u32, 1.0, [8usize, 16, 32]), (1, 100.0, [32, 64, 128])] {
        for t in ts {
            s.points.push((g, t, scale * (t as f64).powf(1.25)));
        }
    }
    let Exponent::Measured { fit, .. } =
        definitions::exponent(&Base::Measured(s.clone()), Variant::all(0.01)[0], 100, 0)
    else {
        panic!("a fit expected");
    };
    assert!((fit.exponent - 1.25).abs() < 1e-12, "{fit:?}");
    let naive: Vec<(f64, f64)> = s.points.iter().map(|p| (p.1 as f64, p.2)).collect();
    let nf = sinklab::fit::fit_power_law(&naive, 10, 0.95, 0).unwrap();
    assert!(
        (nf.exponent - 1.25).abs() > 0.3,
        "the naive pooled slope {}",
        nf.exponent
    );
}

/// The verdict is computed: with the closed forms alone no definition gives the pair (the exact
/// exponents are ½ and 1); a row whose cells are changed to exponents 1 and 3/2 is named, and
/// changing one of them back removes it.
#[test]
fn verdict_flips_with_a_cells_exponent() {
    let t0 = closed_only();
    let v0 = definitions::verdict(&t0.entries());
    assert!(v0.starts_with("Under none of the"), "{v0}");
    // Orthonormal W_QK nuclear is exact: diagonal asymptote 1, sink ½.
    let e0 = t0.entries();
    let qk_nuc = e0
        .iter()
        .find(|e| {
            e.part == Part::Qk
                && e.family == Family::Orthonormal
                && e.norm == NormKind::Nuclear
                && e.variant == Variant::all(0.01)[0]
        })
        .unwrap();
    assert_eq!(qk_nuc.sink.matches(0.5), Some(true));
    assert_eq!(qk_nuc.diagonal.matches(1.0), Some(true));
    assert_eq!(qk_nuc.pair_holds, Some(false));
    // Unpriced cells are never counted as holding.
    assert!(e0.iter().any(|e| e.pair_holds.is_none()));

    let grid = t0.grid.clone();
    let curve = |p: f64| Base::Exact {
        values: grid.iter().map(|&t| (t, (t as f64).powf(p))).collect(),
        asymptote: p,
    };
    let mut t1 = t0.clone();
    let row = t1
        .rows
        .iter_mut()
        .find(|r| {
            r.part == Part::Head && r.family == Family::Orthonormal && r.norm == NormKind::Fro
        })
        .unwrap();
    row.sink = curve(1.0);
    row.diagonal = curve(1.5);
    let v1 = definitions::verdict(&t1.entries());
    // Both gap variants of the unsquared norm: the ε-gap's log factor leaves an asymptote as it is.
    assert!(
        v1.contains("holds as a pair under 2 of")
            && v1.contains("head Frobenius, fixed Δ, orthonormal")
            && v1.contains("head Frobenius, Δ(T,ε), orthonormal")
            && !v1.contains("squared"),
        "{v1}"
    );
    // A measured cell: within its CI counts, outside does not.
    let noisy = |p: f64| {
        Base::Measured(Series {
            points: [8usize, 16, 32, 64]
                .iter()
                .enumerate()
                .flat_map(|(k, &t)| {
                    [0.02, -0.02].map(|d| {
                        (
                            0,
                            t,
                            (t as f64).powf(p) * (1.0 + d * (k as f64 + 1.0).cos()),
                        )
                    })
                })
                .collect(),
            ..Series::default()
        })
    };
    let mut t2 = t0.clone();
    let row = t2
        .rows
        .iter_mut()
        .find(|r| {
            r.part == Part::Vo && r.family == Family::GaussianDPropT && r.norm == NormKind::Nuclear
        })
        .unwrap();
    row.sink = noisy(1.0);
    row.diagonal = noisy(1.5);
    let v2 = definitions::verdict(&t2.entries());
    assert!(
        v2.contains("W_VO nuclear, fixed Δ, Gaussian d = 2T"),
        "{v2}"
    );
    let row = t2
        .rows
        .iter_mut()
        .find(|r| {
            r.part == Part::Vo && r.family == Family::GaussianDPropT && r.norm == NormKind::Nuclear
        })
        .unwrap();
    row.diagonal = noisy(1.3);
    let v3 = definitions::verdict(&t2.entries());
    assert!(v3.starts_with("Under none of the"), "{v3}");
}

/// A small measured run: every solved point is either in a series or counted as left out, and
/// the markdown names every row.
#[test]
fn measured_points_fill_their_cells() {
    let o = MeasureOptions {
        grid: vec![6, 8, 12],
        grid_nuclear: vec![6, 8],
        seeds: vec![0],
        ..opts()
    };
    let pts = definitions::measure(&o);
    // 3 families × (2 norms) × 2 patterns × T × seeds jobs; each job gives up to 3 points.
    assert!(!pts.is_empty());
    let t = definitions::build(&o, &pts, &External::default(), 0.01, 200, 0).unwrap();
    for r in &t.rows {
        for b in [&r.sink, &r.diagonal] {
            if let Base::Measured(s) = b {
                let n = pts
                    .iter()
                    .filter(|p| p.part == r.part && p.family == r.family && p.norm == r.norm)
                    .count();
                // Both patterns' points of this row, split between the two cells.
                assert!(s.points.len() + s.excluded <= n);
                assert!(s.worst_gap <= definitions::MAX_FIT_GAP);
            }
        }
    }
    let md = definitions::markdown(&t);
    assert_eq!(
        md.lines().filter(|l| l.starts_with("| W_QK")).count(),
        10,
        "{md}"
    );
    assert!(md.contains("**Verdict.**"));
}

/// The measured cells behind docs/theory.md §6's table: the cache `sinklab cost --definitions
/// --out tests/data` wrote (the file name is the options' hash, so a change of grid, seeds or
/// solver options finds no cache and fails here instead of quietly solving).
const FIXTURE_OUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

/// docs/theory.md §6 quotes the table and the verdict `sinklab cost --definitions` computes: every
/// table row and the verdict line of the markdown rebuilt from the cached measured points (trained
/// and real cells unpriced, as in a fresh output directory) appear verbatim in the doc. The cache is
/// checked against the solver: its T = 8 points solved again agree within their brackets.
#[test]
fn theory_doc_quotes_the_computed_table_and_verdict() {
    let out = std::path::Path::new(FIXTURE_OUT);
    let o = sinklab::claims::cost_definitions::options(false);
    let (pts, cached) = sinklab::claims::cost_definitions::measured(out, &o).unwrap();
    assert!(
        cached,
        "no cache for the current options in {FIXTURE_OUT}/cost_definitions: regenerate it with \
         `sinklab cost --definitions --out tests/data` and update docs/theory.md §6"
    );
    // Two upper ends of one program, each within a relative bracket g of the optimum, differ by
    // at most max(g₁, g₂) relatively; 1e-12 covers the rounding of the recomputed ends (a
    // closed bracket can come out as a gap of −1e-16).
    let again = definitions::measure(&MeasureOptions {
        grid: vec![8],
        grid_nuclear: vec![8],
        seeds: vec![0],
        ..o.clone()
    });
    assert!(!again.is_empty());
    for a in &again {
        let c = pts
            .iter()
            .find(|p| {
                (p.part, p.family, p.norm, p.pattern, p.t, p.seed)
                    == (a.part, a.family, a.norm, a.pattern, a.t, a.seed)
            })
            .unwrap_or_else(|| panic!("{a:?} not in the cache"));
        let (Some(va), Some(vc)) = (a.value, c.value) else {
            assert_eq!(a.value, c.value, "{a:?} vs {c:?}");
            continue;
        };
        let g = a.rel_gap.unwrap().max(c.rel_gap.unwrap()).max(0.0) + 1e-12;
        assert!(
            (va - vc).abs() <= g * va.max(vc) * (1.0 + 1e-9),
            "{a:?} vs cached {c:?}"
        );
    }
    let t = definitions::build(
        &o,
        &pts,
        &External::default(),
        sinklab::claims::cost_definitions::EPS,
        sinklab::claims::cost_definitions::N_BOOT,
        0,
    )
    .unwrap();
    let md = definitions::markdown(&t);
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/theory.md")).unwrap();
    let mut n = 0;
    for line in md
        .lines()
        .filter(|l| l.starts_with("| ") || l.starts_with("**Verdict.**"))
    {
        assert!(
            doc.contains(line),
            "docs/theory.md §6 does not quote the computed line\n{line}"
        );
        n += 1;
    }
    // The header, 30 rows, the verdict.
    assert_eq!(n, 32, "{md}");
}
