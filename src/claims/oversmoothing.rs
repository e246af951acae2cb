//! The `oversmoothing` report section (claim A2): predicted and simulated mean token
//! cosine against $\lambda$ (identity, RMSNorm, LayerNorm; bidirectional and
//! causal), the finite-$n$ convergence to the $n\to\infty$ limit, and the
//! approximation error of the ratio-of-expectations formula against $d$.
//! Figure: `out/figures/oversmoothing.{svg,png}`. Claim A2 (docs/theory.md §7); the math
//! is in [`crate::oversmoothing`], the checks in [`crate::oversmoothing::checks`].

use crate::attention::{Mask, Norm};
use crate::oversmoothing::checks::{finite_n_deviation, loglog_slope, ramp_setup, random_setup};
use crate::oversmoothing::mixing::{self, Setup};
use crate::oversmoothing::predict;
use crate::plot::{self, Panel, Series, Style};
use crate::section::{ReportCtx, ReportSection, SectionError};
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::fmt::Write as _;

const NORMS: [(&str, Norm); 3] = [
    ("identity", Norm::Identity),
    ("RMSNorm", Norm::Rms { eps: 1e-6 }),
    ("LayerNorm", Norm::Layer { eps: 1e-6 }),
];

/// Sizes of the section (quick mode is for tests and `--quick`).
#[derive(Clone, Copy, Debug)]
pub struct SweepSizes {
    /// Model dimension of the λ sweep.
    pub d: usize,
    /// Number of λ grid points on [0, 1].
    pub lambdas: usize,
    /// Tokens per simulated sequence in the λ sweep.
    pub n: usize,
    /// Replicate sequences per point.
    pub reps: usize,
    /// Samples of the n → ∞ simulation.
    pub limit_samples: usize,
    /// Token counts of the convergence panel.
    pub ns: &'static [usize],
    /// Dimensions of the approximation-error table.
    pub ds: &'static [usize],
}

impl SweepSizes {
    /// Sizes for a context.
    pub fn for_ctx(quick: bool) -> Self {
        if quick {
            Self {
                d: 16,
                lambdas: 5,
                n: 128,
                reps: 4,
                limit_samples: 20_000,
                ns: &[16, 64, 256],
                ds: &[4, 16, 64],
            }
        } else {
            Self {
                d: 32,
                lambdas: 11,
                n: 512,
                reps: 16,
                limit_samples: 200_000,
                ns: &[16, 32, 64, 128, 256, 512, 1024, 2048],
                ds: &[4, 8, 16, 32, 64, 128],
            }
        }
    }
}

fn mean_sim(
    s: &Setup,
    n: usize,
    lambda: f64,
    mask: Mask,
    reps: usize,
    rng: &mut StdRng,
) -> Result<f64, SectionError> {
    let mut acc = 0.0;
    for _ in 0..reps {
        acc += mixing::simulate(s, n, lambda, mask, rng)?;
    }
    Ok(acc / reps as f64)
}

/// Builds the section.
pub fn section(ctx: &ReportCtx) -> Result<ReportSection, SectionError> {
    let sz = SweepSizes::for_ctx(ctx.quick);
    let mut rng = StdRng::seed_from_u64(ctx.seed ^ 0x05e7_5500);
    // One instance (W, μ, Σ) shared by the three norms.
    let base = random_setup(&mut rng, sz.d, Norm::Identity, 0.3);
    let lambdas: Vec<f64> = (0..sz.lambdas)
        .map(|k| k as f64 / (sz.lambdas - 1) as f64)
        .collect();
    let mut md = String::new();
    writeln!(
        md,
        "One seeded instance, d = {}, W = −aI + sG/√d, Σ = FFᵀ (Marchenko–Pastur), μ with an all-ones part. \
         ρ0 = ratio-of-expectations prediction (bidirectional, n → ∞), ρ2 its delta-method correction, \
         sim∞ = simulated exact n → ∞ limit ({} samples), bi/causal = finite-n simulation (n = {}, mean of {} sequences).\n",
        sz.d, sz.limit_samples, sz.n, sz.reps
    )?;
    writeln!(
        md,
        "| norm | λ | ρ0 | ρ2 | sim∞ (±SE) | bi n={} | causal n={} |",
        sz.n, sz.n
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    let mut bi_panel = Panel {
        title: format!("bidirectional (d = {}, n = {})", sz.d, sz.n),
        x_label: "λ (0 identity, 1 uniform)".into(),
        y_label: "mean token cosine".into(),
        x_unit: "1".into(),
        y_unit: "1".into(),
        ..Default::default()
    };
    let mut ca_panel = Panel {
        title: format!("causal (n = {}) vs bidirectional prediction", sz.n),
        ..bi_panel.clone()
    };
    let mut conv_panel = Panel {
        title: "finite-n RMS deviation from sim∞ (λ = 0.5)".into(),
        x_label: "n (tokens)".into(),
        y_label: "RMS deviation".into(),
        x_unit: "tokens".into(),
        y_unit: "1".into(),
        log_x: true,
        log_y: true,
        ..Default::default()
    };
    let mut conv_md = String::new();
    writeln!(
        conv_md,
        "\nFinite-n convergence at λ = 0.5 ({} sequences per n): RMS and mean deviation of the mean cosine from sim∞; slope = least-squares exponent of RMS vs n.\n",
        sz.reps.max(8)
    )?;
    writeln!(
        conv_md,
        "| norm | mask | {} | slope |",
        sz.ns
            .iter()
            .map(|n| format!("n={n}"))
            .collect::<Vec<_>>()
            .join(" | ")
    )?;
    writeln!(conv_md, "|---|---|{}---|", "---|".repeat(sz.ns.len()))?;
    for (c, (name, norm)) in NORMS.iter().enumerate() {
        let s = Setup {
            norm: *norm,
            ..base.clone()
        };
        let l = predict::readout(*norm, None, sz.d)?;
        let sigma = s.sigma();
        let (mut pred, mut bi, mut ca, mut lim) = (vec![], vec![], vec![], vec![]);
        for &lam in &lambdas {
            let p = predict::predict(s.w.as_ref(), &s.mu, sigma.as_ref(), lam, l.as_ref())?;
            let e = mixing::limit_cosine(&s, lam, sz.limit_samples, &mut rng)?;
            let b = mean_sim(&s, sz.n, lam, Mask::Bidirectional, sz.reps, &mut rng)?;
            let cz = mean_sim(&s, sz.n, lam, Mask::Causal, sz.reps, &mut rng)?;
            writeln!(
                md,
                "| {name} | {lam:.2} | {:.4} | {:.4} | {:.4} ± {:.1e} | {b:.4} | {cz:.4} |",
                p.rho0, p.rho2, e.value, e.se
            )?;
            pred.push((lam, p.rho0));
            lim.push((lam, e.value));
            bi.push((lam, b));
            ca.push((lam, cz));
        }
        for panel in [&mut bi_panel, &mut ca_panel] {
            panel.series.push(Series::new(
                format!("{name}: predicted ρ0"),
                pred.clone(),
                Style::Line,
                c,
            ));
            panel.series.push(Series::new(
                format!("{name}: sim n→∞"),
                lim.clone(),
                Style::Dashed,
                c,
            ));
        }
        bi_panel.series.push(Series::new(
            format!("{name}: simulated"),
            bi,
            Style::Points,
            c,
        ));
        ca_panel.series.push(Series::new(
            format!("{name}: simulated causal"),
            ca,
            Style::Points,
            c,
        ));
        // Convergence at λ = 0.5.
        let lam = 0.5;
        let e = mixing::limit_cosine(&s, lam, sz.limit_samples, &mut rng)?;
        for (mask, style) in [
            (Mask::Bidirectional, Style::LinePoints),
            (Mask::Causal, Style::Dashed),
        ] {
            let mut rms = vec![];
            let mut cells = vec![];
            for &n in sz.ns {
                let (bias, r) =
                    finite_n_deviation(&s, lam, mask, n, sz.reps.max(8), e.value, &mut rng)?;
                rms.push(r);
                cells.push(format!("{r:.1e} ({bias:+.1e})"));
            }
            let ns: Vec<f64> = sz.ns.iter().map(|&n| n as f64).collect();
            let slope = loglog_slope(&ns, &rms);
            writeln!(
                conv_md,
                "| {name} | {mask:?} | {} | {slope:.2} |",
                cells.join(" | ")
            )?;
            conv_panel.series.push(Series::new(
                format!("{name} {mask:?} (slope {slope:.2})"),
                ns.iter().copied().zip(rms).collect(),
                style,
                c,
            ));
        }
    }
    // Reference n^{-1/2} line through the first bidirectional point.
    if let Some(first) = conv_panel
        .series
        .first()
        .and_then(|s| s.points.first().copied())
    {
        let pts = sz
            .ns
            .iter()
            .map(|&n| (n as f64, first.1 * (first.0 / n as f64).sqrt()))
            .collect();
        conv_panel
            .series
            .push(Series::new("∝ n^(-1/2)", pts, Style::Dashed, 7));
    }
    md.push_str(&conv_md);
    // Approximation error vs d (does not vanish with n; shrinks with d).
    writeln!(
        md,
        "\nRatio-of-expectations error against d (W = 0, Σ = diag(2k/(d+1)), μ = 1, identity norm; ρ0 = 1/2 for all d): |ρ0 − sim∞| does not depend on n; it shrinks with the effective rank.\n"
    )?;
    writeln!(
        md,
        "| d | eff. rank | ρ0 | ρ2 | sim∞ (±SE) | ρ0 − sim∞ | ρ2 − sim∞ |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    let (mut dd, mut errs) = (vec![], vec![]);
    for &d in sz.ds {
        let s = ramp_setup(d);
        let l = predict::readout(Norm::Identity, None, d)?;
        let p = predict::predict(s.w.as_ref(), &s.mu, s.sigma().as_ref(), 0.5, l.as_ref())?;
        let e = mixing::limit_cosine(&s, 0.5, sz.limit_samples, &mut rng)?;
        writeln!(
            md,
            "| {d} | {:.1} | {:.4} | {:.4} | {:.4} ± {:.1e} | {:+.2e} | {:+.2e} |",
            p.eff_rank,
            p.rho0,
            p.rho2,
            e.value,
            e.se,
            p.rho0 - e.value,
            p.rho2 - e.value
        )?;
        dd.push(d as f64);
        errs.push((p.rho0 - e.value).abs());
    }
    writeln!(
        md,
        "\nFitted exponent of |ρ0 − sim∞| against d: {:.2} (first-order theory: −1).",
        loglog_slope(&dd, &errs)
    )?;
    let stem = ctx.fig_dir().join("oversmoothing");
    let figures = plot::render(
        &stem,
        "Oversmoothing: mean token cosine after one mixing step (docs/theory.md §7)",
        &[bi_panel, ca_panel, conv_panel],
    )?;
    Ok(ReportSection {
        title: "Oversmoothing (A2): prediction vs simulation".into(),
        markdown: md,
        figures,
    })
}
