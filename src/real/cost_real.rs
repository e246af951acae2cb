//! A5 on real inputs (docs/theory.md §6): the minimal cost of a sink and of a diagonal on a real
//! decoder's normalised layer inputs, over prefixes of a fixed text.
//!
//! For a layer $l$ and a prefix of $T$ tokens, the embeddings are the rows
//! $x_i = N_1(h^l_i)$, $i = 0..T-1$, that the layer's $W_Q$ and $W_K$ act on (position 0 = the
//! first token). The programs are those of [`crate::cost`]:
//! $$ C_P(T) = \min \lVert W\rVert \quad\text{s.t.}\quad x_i^\top W (x_{t(i)} - x_j) \ge \Delta
//!    \quad \forall\thinspace 1 \le i < T,\ j \le i,\ j \ne t(i), $$
//! with $t(i) = 0$ (sink) or $t(i) = i$ (diagonal), $\lVert\cdot\rVert$ Frobenius or nuclear, and
//! a fixed $\Delta$ (the synthetic sweep's $\Delta = 10$ by default). Each value is the certified
//! bracket [dual lower bound, feasible upper bound] of [`crate::cost::solve`]; an infeasible
//! program (e.g. two equal rows, which a diagonal cannot separate) comes with its verified
//! Gordan certificate instead.
//!
//! **Exponents.** Per (layer, norm, pattern), $\ln C = a + b \ln T$ by least squares over the
//! doubling grid, with the seeded pairs-bootstrap CI of [`crate::fit`], on the points whose
//! bracket is at most [`Options::max_fit_gap`] wide (the sweep's rule). The ratio
//! $R(T) = C_{\rm diag}(T)/C_{\rm sink}(T)$ is fitted the same way; its exponent is compared
//! with $\tfrac12$. Beside them: the exponents of the exact orthonormal optima over the same
//! grid ([`crate::cost::exact::grid_slope`], what the synthetic sweep's fit reproduces).
//!
//! **Budget.** Each program gets at most [`Options::max_iter`] iterations; a point whose bracket
//! is then still wider than [`Options::max_fit_gap`] is reported with its bracket and left out
//! of the fits. A series stops at its first infeasible $T$ (the constraints of a prefix are a
//! subset of those of every longer prefix, so all longer ones are infeasible too), or at its
//! first $T$ where feasibility stays undetermined within the feasibility budget (rows so
//! nearly equal that neither a witness nor a certificate is found; recorded as such). The range
//! that enters the fits is thus a deterministic function of the inputs and the budget.
//!
//! **Controls** ([`Options::controls`]): the same programs on the rows $x_1, x_2, \ldots$ (an
//! ordinary token's input at position 0) and on Gaussian rows with the real rows' norms (the
//! null). A verdict the controls reproduce is not evidence about the sink.

use crate::cost::{self, GapProgram, NormKind, Pattern, SolveOptions};
use crate::fit::{PowerFit, fit_power_law};
use crate::runtime::RealError;
use crate::runtime::forward::{LayerObserver, LayerTensors};
use crate::runtime::pretrained::Pretrained;
use faer::{Mat, MatRef};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Options of the real-input cost programs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Options {
    /// Smallest prefix length of the doubling grid.
    pub t_min: usize,
    /// Largest prefix length for the Frobenius norm.
    pub t_max_fro: usize,
    /// Largest prefix length for the nuclear norm (one SVD of a $T\times T$ matrix per iteration).
    pub t_max_nuclear: usize,
    /// Gap Δ.
    pub delta: f64,
    /// Relative duality gap at which the solver stops.
    pub tol: f64,
    /// Iteration budget of one program.
    pub max_iter: usize,
    /// Points with a wider relative bracket are reported but left out of the fits, and end
    /// their series' grid.
    pub max_fit_gap: f64,
    /// Bootstrap resamples of each fit.
    pub n_boot: usize,
    /// Seed of the bootstrap.
    pub seed: u64,
    /// The solver: the interior-point method first (beyond its dense caps by a working set of
    /// constraints: Frobenius over the conic solver's QP, nuclear over the structured SDP method
    /// of `cost::nuclear_ipm`), or the first-order solver alone. Results written before the
    /// field existed were first-order.
    #[serde(default = "first_order")]
    pub solver: cost::Method,
    /// The relative bracket the interior-point solves are asked for, both norms (the first-order
    /// solver's [`Options::tol`] is far looser: it would stop a working set early). Results
    /// written before the field existed asked it of the Frobenius norm only.
    #[serde(default = "ipm_tol_before")]
    pub ipm_tol: f64,
    /// Also price the controls ([`ControlKind`]) on the same grids: an ordinary token's input at
    /// position 0, and Gaussian rows of the same norms.
    #[serde(default)]
    pub controls: bool,
    /// Threads of each program's products and SVDs (0 or 1: sequential). Not part of the
    /// results (they do not depend on it), so not serialised: the report's cache key ignores it.
    #[serde(skip)]
    pub threads: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            t_min: 8,
            t_max_fro: 512,
            t_max_nuclear: 128,
            delta: 10.0,
            tol: 1e-2,
            max_iter: 20_000,
            max_fit_gap: 0.05,
            n_boot: 2000,
            seed: 0,
            solver: cost::Method::preferred(),
            ipm_tol: IPM_TOL,
            controls: false,
            threads: 1,
        }
    }
}

fn first_order() -> cost::Method {
    cost::Method::FirstOrder
}

/// The default of [`Options::ipm_tol`].
pub const IPM_TOL: f64 = 1e-6;

/// Files written before [`Options::ipm_tol`] existed: no value (their nuclear solves ran to the
/// first-order [`Options::tol`]), so they never equal current options.
fn ipm_tol_before() -> f64 {
    f64::NAN
}

impl Options {
    /// Refuses options outside their domain, naming the field.
    pub fn validate(&self) -> Result<(), RealError> {
        let bad = |m: String| Err(RealError::Input(m));
        if self.t_min < 2 {
            return bad(format!("A5: t_min {} must be at least 2", self.t_min));
        }
        if self.t_max_fro < self.t_min || self.t_max_nuclear < self.t_min {
            return bad(format!(
                "A5: t_max_fro {} and t_max_nuclear {} must be at least t_min {}",
                self.t_max_fro, self.t_max_nuclear, self.t_min
            ));
        }
        if !(self.delta > 0.0 && self.delta.is_finite()) {
            return bad(format!("A5: delta {} must be positive", self.delta));
        }
        if !(self.tol > 0.0 && self.tol < 1.0 && self.max_fit_gap > 0.0) {
            return bad(format!(
                "A5: tol {} must lie in (0, 1) and max_fit_gap {} be positive",
                self.tol, self.max_fit_gap
            ));
        }
        if !(self.ipm_tol > 0.0 && self.ipm_tol < 1.0) {
            return bad(format!("A5: ipm_tol {} must lie in (0, 1)", self.ipm_tol));
        }
        if self.max_iter == 0 || self.n_boot == 0 {
            return bad("A5: max_iter and n_boot must be at least 1".into());
        }
        Ok(())
    }

    /// The doubling grid of a norm.
    pub fn grid(&self, norm: NormKind) -> Vec<usize> {
        let t_max = match norm {
            NormKind::Fro => self.t_max_fro,
            NormKind::Nuclear => self.t_max_nuclear,
        };
        cost::exact::doubling(self.t_min, t_max)
    }
}

/// One solved program.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Point {
    /// Layer whose normalised input is used.
    pub layer: usize,
    /// Prefix length T.
    pub t: usize,
    /// Pattern.
    pub pattern: Pattern,
    /// Norm.
    pub norm: NormKind,
    /// Whether the gap constraints can be met.
    pub feasible: bool,
    /// Certified upper end (the value), `None` when infeasible.
    pub upper: Option<f64>,
    /// Certified lower end.
    pub lower: Option<f64>,
    /// (upper − lower)/upper.
    pub rel_gap: Option<f64>,
    /// Infeasible: whether the certificate was verified by arithmetic.
    pub certificate_verified: Option<bool>,
    /// Neither a witness nor a certificate within the feasibility budget (not feasible, not
    /// certified infeasible: nearly equal rows).
    pub undetermined: bool,
    /// Primal–dual iterations.
    pub iterations: usize,
    /// Rank of the reduced embeddings (≤ T).
    pub rank: usize,
    /// Wall time of the solve, seconds.
    pub seconds: f64,
    /// The solver behind the bracket (`None`: feasibility undetermined, or written before the
    /// field existed).
    #[serde(default)]
    pub solver: Option<cost::Method>,
    /// Why the interior-point method did not give the bracket alone (a size cap, a failed
    /// solve), when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

impl Point {
    /// Whether the point enters the fits (feasible, bracket at most `max_gap` wide).
    pub fn fitted(&self, max_gap: f64) -> bool {
        self.feasible && self.rel_gap.is_some_and(|g| g <= max_gap)
    }
}

/// Exponents of one (layer, norm).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Exponents {
    /// Layer.
    pub layer: usize,
    /// Norm.
    pub norm: NormKind,
    /// Prefix lengths that entered the sink fit / the diagonal fit.
    pub t_sink: Vec<usize>,
    /// Prefix lengths of the diagonal fit.
    pub t_diagonal: Vec<usize>,
    /// Fit of the sink cost (`None` with fewer than three points).
    pub sink: Option<PowerFit>,
    /// Fit of the diagonal cost.
    pub diagonal: Option<PowerFit>,
    /// Fit of the ratio diagonal/sink on the T where both entered.
    pub ratio: Option<PowerFit>,
    /// Exact orthonormal exponents over the same grid (sink, diagonal).
    pub synthetic: (f64, f64),
    /// The ratio verdict.
    pub verdict: String,
}

/// The whole A5-on-real-inputs result of one model.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct A5Real {
    /// Options used.
    pub options: Options,
    /// Tokens of the captured text (the largest prefix).
    pub n_tokens: usize,
    /// Residual width d.
    pub d: usize,
    /// Layers used (early, middle, late).
    pub layers: Vec<usize>,
    /// Every solved program.
    pub points: Vec<Point>,
    /// Fits per (layer, norm).
    pub fits: Vec<Exponents>,
    /// The controls' results, when [`Options::controls`] asked for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controls: Vec<Control>,
    /// Wall time of the solves, seconds.
    pub seconds: f64,
}

/// A control of the real-input programs: the same programs on inputs where position 0 is not
/// the model's first token, or where nothing is a model's input. If a control's exponents and
/// ratio verdict match the real ones, the real verdict says nothing about the sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlKind {
    /// Rows $x_1, x_2, \ldots$: an ordinary token's input at position 0 (the swapped-token
    /// control; the sink target is then that token).
    Shifted,
    /// Gaussian rows with the real rows' norms, $g_i = \lVert x_i\rVert\thinspace z_i/\lVert z_i\rVert$,
    /// $z_i \sim \mathcal N(0, I_d)$ seeded by the options' seed and the layer (the null).
    Gaussian,
}

impl std::fmt::Display for ControlKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ControlKind::Shifted => "shifted (ordinary token at 0)",
            ControlKind::Gaussian => "Gaussian rows, same norms",
        })
    }
}

/// One control's points and fits.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Control {
    /// Which control.
    pub kind: ControlKind,
    /// Every solved program of the control.
    pub points: Vec<Point>,
    /// Its fits per (layer, norm).
    pub fits: Vec<Exponents>,
}

/// The inputs of a control, from one layer's real rows `x`.
pub fn control_inputs(kind: ControlKind, x: MatRef<'_, f64>, layer: usize, seed: u64) -> Mat<f64> {
    match kind {
        ControlKind::Shifted => x.subrows(1, x.nrows() - 1).to_owned(),
        ControlKind::Gaussian => {
            use rand::SeedableRng;
            use rand_distr::{Distribution, StandardNormal};
            let mut rng = rand::rngs::StdRng::seed_from_u64(
                seed ^ 0x5eed_0000_0000_0000 ^ (layer as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            );
            let mut g = Mat::<f64>::zeros(x.nrows(), x.ncols());
            for i in 0..x.nrows() {
                let z: Vec<f64> = (0..x.ncols())
                    .map(|_| StandardNormal.sample(&mut rng))
                    .collect();
                let (nz, nx) = (
                    crate::linalg::norm(&z),
                    crate::linalg::norm(&crate::linalg::row(x, i)),
                );
                for (j, v) in z.iter().enumerate() {
                    g[(i, j)] = v * nx / nz;
                }
            }
            g
        }
    }
}

/// One early, one middle, one late layer: 1, ⌊L/2⌋, L − 1 (layer 1, not 0: a rotary model's
/// layer-0 input is the token embedding alone, so a repeated token gives equal rows, on which
/// no diagonal exists). Deduplicated for small models.
pub fn default_layers(n_layer: usize) -> Vec<usize> {
    let mut v = vec![1.min(n_layer - 1), n_layer / 2, n_layer - 1];
    v.dedup();
    v
}

/// The first layer that occurs twice in `layers`, if any.
fn duplicate(layers: &[usize]) -> Option<usize> {
    let mut seen = std::collections::BTreeSet::new();
    layers.iter().copied().find(|&l| !seen.insert(l))
}

struct Capture<'a> {
    layers: &'a [usize],
    rows: Vec<Vec<f32>>,
    d: usize,
}

impl LayerObserver for Capture<'_> {
    fn layer(&mut self, m: &Pretrained, t: &LayerTensors<'_>) {
        if let Some(k) = self.layers.iter().position(|&l| l == t.layer) {
            self.d = m.cfg.d_model;
            self.rows[k] = t.attn_in.to_vec();
        }
    }

    fn wants_layer_maps(&self) -> bool {
        false
    }
}

/// The normalised layer inputs $N_1(x)$ of `layers` on one forward pass over `tokens`, as f64
/// matrices $T \times d$ (a causal model's prefix of $T$ rows is the input of the $T$-prefix).
pub fn capture(
    m: &Pretrained,
    tokens: &[u32],
    layers: &[usize],
) -> Result<Vec<Mat<f64>>, RealError> {
    if !m.cfg.causal {
        return Err(RealError::Input(
            "A5 on real inputs needs a causal model (prefixes must not see later tokens)".into(),
        ));
    }
    if let Some(&l) = layers.iter().find(|&&l| l >= m.cfg.n_layer) {
        return Err(RealError::Input(format!(
            "A5: layer {l} out of range (the model has {} layers)",
            m.cfg.n_layer
        )));
    }
    if let Some(l) = duplicate(layers) {
        return Err(RealError::Input(format!(
            "A5: layer {l} is given twice (layers {layers:?}); give each layer once"
        )));
    }
    if let Some((l, w)) = m
        .layers
        .iter()
        .enumerate()
        .find_map(|(l, ly)| ly.window.filter(|&w| w < tokens.len()).map(|w| (l, w)))
    {
        return Err(RealError::Input(format!(
            "A5: {} tokens exceed the sliding window {w} of layer {l}",
            tokens.len()
        )));
    }
    let mut c = Capture {
        layers,
        rows: vec![Vec::new(); layers.len()],
        d: 0,
    };
    m.forward(tokens, &mut c, None)?;
    let t = tokens.len();
    Ok(c.rows
        .iter()
        .map(|r| Mat::from_fn(t, c.d, |i, j| r[i * c.d + j] as f64))
        .collect())
}

/// Solves one program on the first `t` rows of `x`.
pub fn solve_point(
    x: MatRef<'_, f64>,
    layer: usize,
    t: usize,
    pattern: Pattern,
    norm: NormKind,
    o: &Options,
) -> Result<Point, RealError> {
    let err = |e: cost::CostError| RealError::Input(format!("A5, layer {layer}, T = {t}: {e}"));
    if t > x.nrows() {
        return Err(RealError::Input(format!(
            "A5: prefix T = {t} longer than the {} captured tokens",
            x.nrows()
        )));
    }
    let start = std::time::Instant::now();
    let xt = x.subrows(0, t);
    let p = GapProgram::for_pattern(xt, pattern, o.delta).map_err(err)?;
    let ipm = o.solver != cost::Method::FirstOrder;
    let opts = SolveOptions {
        rel_gap: if ipm { o.tol.min(IPM_TOL) } else { o.tol },
        max_iter: o.max_iter,
        method: o.solver,
        par: if o.threads > 1 {
            faer::Par::rayon(o.threads)
        } else {
            faer::Par::Seq
        },
        ..SolveOptions::default()
    };
    let s = match cost::solve(&p, norm, opts) {
        Ok(s) => s,
        Err(cost::CostError::Undetermined(it, _)) => {
            return Ok(Point {
                layer,
                t,
                pattern,
                norm,
                feasible: false,
                upper: None,
                lower: None,
                rel_gap: None,
                certificate_verified: None,
                undetermined: true,
                iterations: it,
                rank: p.dim().1,
                seconds: start.elapsed().as_secs_f64(),
                solver: None,
                fallback: None,
            });
        }
        Err(e) => return Err(err(e)),
    };
    Ok(Point {
        layer,
        t,
        pattern,
        norm,
        feasible: s.feasible,
        upper: s.value,
        lower: s.lower,
        rel_gap: s.rel_gap,
        certificate_verified: s.certificate.as_ref().map(|c| c.verified),
        undetermined: false,
        iterations: s.iterations,
        rank: p.dim().1,
        seconds: start.elapsed().as_secs_f64(),
        solver: Some(s.solver),
        fallback: s.fallback,
    })
}

/// The ratio verdict from its fitted exponent: "like √T" when the CI holds ½ and excludes 0,
/// "flat" when it holds 0, otherwise the exponent and which side of ½ it lies.
pub fn ratio_verdict(f: Option<&PowerFit>) -> String {
    let Some(f) = f else {
        return "untestable (fewer than three prefix lengths with both costs fitted)".into();
    };
    let (lo, hi) = (f.ci_low, f.ci_high);
    if lo <= 0.5 && 0.5 <= hi && lo > 0.0 {
        "grows like √T (CI contains ½, excludes 0)".into()
    } else if lo <= 0.0 && 0.0 <= hi {
        "flat (CI contains 0)".into()
    } else if lo > 0.5 {
        format!("grows faster than √T (T^{:.2})", f.exponent)
    } else if hi < 0.0 {
        format!("falls (T^{:.2})", f.exponent)
    } else {
        format!("grows slower than √T (T^{:.2})", f.exponent)
    }
}

/// A fit needs three prefix lengths: with two the line passes through both points and every
/// bootstrap resample repeats one of them, so its interval would collapse onto the estimate.
const MIN_FIT_POINTS: usize = 3;

fn fit_of(pts: &[(f64, f64)], o: &Options) -> Option<PowerFit> {
    (pts.len() >= MIN_FIT_POINTS)
        .then(|| fit_power_law(pts, o.n_boot, 0.95, o.seed).ok())
        .flatten()
}

/// The fits of one (layer, norm) from its points.
pub fn exponents(points: &[Point], layer: usize, norm: NormKind, o: &Options) -> Exponents {
    let series = |pat: Pattern| -> Vec<(usize, f64)> {
        points
            .iter()
            .filter(|p| p.layer == layer && p.norm == norm && p.pattern == pat)
            .filter(|p| p.fitted(o.max_fit_gap))
            .filter_map(|p| p.upper.map(|u| (p.t, u)))
            .collect()
    };
    let (s, d) = (series(Pattern::Sink), series(Pattern::Diagonal));
    let xy = |v: &[(usize, f64)]| v.iter().map(|&(t, c)| (t as f64, c)).collect::<Vec<_>>();
    let ratio: Vec<(f64, f64)> = d
        .iter()
        .filter_map(|&(t, cd)| {
            s.iter()
                .find(|p| p.0 == t)
                .map(|&(_, cs)| (t as f64, cd / cs))
        })
        .collect();
    let ratio_fit = fit_of(&ratio, o);
    let grid = o.grid(norm);
    Exponents {
        layer,
        norm,
        t_sink: s.iter().map(|p| p.0).collect(),
        t_diagonal: d.iter().map(|p| p.0).collect(),
        sink: fit_of(&xy(&s), o),
        diagonal: fit_of(&xy(&d), o),
        verdict: ratio_verdict(ratio_fit.as_ref()),
        ratio: ratio_fit,
        // The exact curves' slopes over the T each fit actually used (points left out of a
        // fit, or a series stopped at its first infeasible point, are not in its grid).
        synthetic: (
            swept_slope(Pattern::Sink, norm, &s, &grid),
            swept_slope(Pattern::Diagonal, norm, &d, &grid),
        ),
    }
}

/// The exact orthonormal curve's least-squares log–log slope over the T of `series` (the
/// points a fit used); the planned `grid` when fewer than two were used (no fit then either).
fn swept_slope(pat: Pattern, norm: NormKind, series: &[(usize, f64)], grid: &[usize]) -> f64 {
    let ts: Vec<usize> = series.iter().map(|p| p.0).collect();
    if ts.len() >= 2 {
        cost::exact::grid_slope(pat, norm, &ts)
    } else {
        cost::exact::grid_slope(pat, norm, grid)
    }
}

/// Solves every program on the captured inputs `xs` (one per entry of `layers`), series by
/// series, each series stopping at its first infeasible point; `progress` gets one line per
/// point.
pub fn run_on(
    xs: &[Mat<f64>],
    layers: &[usize],
    o: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<A5Real, RealError> {
    o.validate()?;
    if let Some(l) = duplicate(layers) {
        return Err(RealError::Input(format!(
            "A5: layer {l} is given twice (layers {layers:?}); give each layer once"
        )));
    }
    if xs.len() != layers.len() || xs.is_empty() {
        return Err(RealError::Input(format!(
            "A5: {} input matrices for {} layers",
            xs.len(),
            layers.len()
        )));
    }
    let start = std::time::Instant::now();
    let points = solve_series(xs, layers, o, "A5 real", progress)?;
    let fits = layers
        .iter()
        .flat_map(|&l| [NormKind::Fro, NormKind::Nuclear].map(|n| exponents(&points, l, n, o)))
        .collect();
    let mut controls = Vec::new();
    if o.controls {
        for kind in [ControlKind::Shifted, ControlKind::Gaussian] {
            let cx: Vec<Mat<f64>> = xs
                .iter()
                .zip(layers)
                .map(|(x, &l)| control_inputs(kind, x.as_ref(), l, o.seed))
                .collect();
            let pts = solve_series(&cx, layers, o, &format!("A5 control {kind}"), progress)?;
            let fits = layers
                .iter()
                .flat_map(|&l| [NormKind::Fro, NormKind::Nuclear].map(|n| exponents(&pts, l, n, o)))
                .collect();
            controls.push(Control {
                kind,
                points: pts,
                fits,
            });
        }
    }
    Ok(A5Real {
        options: o.clone(),
        n_tokens: xs[0].nrows(),
        d: xs[0].ncols(),
        layers: layers.to_vec(),
        points,
        fits,
        controls,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Every (layer, norm, pattern) series on `xs`, each stopping at its first infeasible point;
/// `progress` gets one line per point, prefixed by `label`.
fn solve_series(
    xs: &[Mat<f64>],
    layers: &[usize],
    o: &Options,
    label: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Point>, RealError> {
    let mut points = Vec::new();
    for (x, &l) in xs.iter().zip(layers) {
        for norm in [NormKind::Fro, NormKind::Nuclear] {
            for pattern in [Pattern::Sink, Pattern::Diagonal] {
                for t in o.grid(norm).into_iter().filter(|&t| t <= x.nrows()) {
                    let p = solve_point(x.as_ref(), l, t, pattern, norm, o)?;
                    progress(&format!(
                        "{label}: layer {l} {norm} {pattern} T = {t}: {} ({} it, {:.1} s)",
                        match (p.upper, p.lower) {
                            (Some(u), Some(lo)) => format!("[{lo:.4}, {u:.4}]"),
                            _ if p.undetermined => "feasibility undetermined".into(),
                            _ => "infeasible".into(),
                        },
                        p.iterations,
                        p.seconds
                    ));
                    // A prefix of an infeasible program is a sub-problem of every longer one; an
                    // undetermined one is as nearly infeasible in every longer prefix.
                    let stop = !p.feasible;
                    points.push(p);
                    if stop {
                        break;
                    }
                }
            }
        }
    }
    Ok(points)
}

/// The tokens of the A5 text: the fixed texts of [`super::head_space::TEXTS`] joined by spaces,
/// tokenized with the BOS first, cut to `t_max` tokens.
pub fn text_tokens(lm: &crate::runtime::LoadedModel, t_max: usize) -> Result<Vec<u32>, RealError> {
    let tok = lm
        .tok
        .as_ref()
        .ok_or_else(|| RealError::Input("A5: no tokenizer in the model files".into()))?;
    let mut ids = tok.encode(
        &super::head_space::TEXTS.join(" "),
        crate::runtime::tokenizer::Bos::Yes,
    )?;
    if ids.len() < t_max {
        return Err(RealError::Input(format!(
            "A5: the fixed texts give {} tokens, fewer than T = {t_max}",
            ids.len()
        )));
    }
    ids.truncate(t_max);
    Ok(ids)
}

/// Captures and solves on a loaded model: [`text_tokens`] cut to the longest grid point,
/// [`default_layers`] unless `layers` is given.
pub fn analyze(
    lm: &crate::runtime::LoadedModel,
    layers: Option<&[usize]>,
    o: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<A5Real, RealError> {
    o.validate()?;
    let ls = layers.map_or_else(|| default_layers(lm.model.cfg.n_layer), <[usize]>::to_vec);
    if ls.is_empty() {
        return Err(RealError::Input("A5: no layer given".into()));
    }
    if let Some(l) = duplicate(&ls) {
        return Err(RealError::Input(format!(
            "A5: layer {l} is given twice (layers {ls:?}); give each layer once"
        )));
    }
    // One token more with the controls: the shifted control drops the first row.
    let toks = text_tokens(
        lm,
        o.t_max_fro.max(o.t_max_nuclear) + usize::from(o.controls),
    )?;
    progress(&format!(
        "A5 real: forward pass over {} tokens, layers {ls:?}",
        toks.len()
    ));
    let xs = capture(&lm.model, &toks, &ls)?;
    run_on(&xs, &ls, o, progress)
}

fn fit_cell(f: &Option<PowerFit>) -> String {
    f.as_ref().map_or("—".into(), |f| {
        format!("{:.3} [{:.3}, {:.3}]", f.exponent, f.ci_low, f.ci_high)
    })
}

fn range(ts: &[usize]) -> String {
    match (ts.first(), ts.last()) {
        (Some(a), Some(b)) => format!("{a}–{b}"),
        _ => "—".into(),
    }
}

/// The report's table: per (layer, norm) the T range fitted, the sink, diagonal and ratio
/// exponents with 95 % CIs, the exact orthonormal exponents over the same grid, and the verdict;
/// then the brackets at the largest common T.
pub fn markdown(name: &str, r: &A5Real) -> String {
    let mut md = String::new();
    let o = &r.options;
    let _ = writeln!(
        md,
        "**A5 on real inputs ({name}).** min ‖W‖ s.t. x_iᵀW(x_t(i) − x_j) ≥ Δ on the normalised inputs x = N₁(h) of layers {:?} over prefixes of the fixed texts (BOS first, {} tokens captured, d = {}), Δ = {}, solver {} (relative bracket asked: {:.0e} interior point, {:.0e} first order), at most {} first-order iterations; points with a bracket wider than {:.0}% are reported but left out of the fits. Grids: Frobenius T = {}–{}, nuclear {}–{}. Exponents: log–log least squares, 95 % pairs-bootstrap CI ({} resamples, seed {}); *orthonormal* = the exact optima's slope over the same grid. Solve time {:.1} s.\n",
        r.layers,
        r.n_tokens,
        r.d,
        o.delta,
        o.solver,
        o.ipm_tol,
        o.tol,
        o.max_iter,
        100.0 * o.max_fit_gap,
        o.t_min,
        o.t_max_fro,
        o.t_min,
        o.t_max_nuclear,
        o.n_boot,
        o.seed,
        r.seconds
    );
    md.push_str("| layer | norm | T fitted (sink / diag) | sink exponent | diagonal exponent | diag/sink exponent | orthonormal sink / diag | ratio verdict |\n|---|---|---|---|---|---|---|---|\n");
    for f in &r.fits {
        let _ = writeln!(
            md,
            "| {} | {} | {} / {} | {} | {} | {} | {:.3} / {:.3} | {} |",
            f.layer,
            f.norm,
            range(&f.t_sink),
            range(&f.t_diagonal),
            fit_cell(&f.sink),
            fit_cell(&f.diagonal),
            fit_cell(&f.ratio),
            f.synthetic.0,
            f.synthetic.1,
            f.verdict
        );
    }
    let infeasible = r
        .points
        .iter()
        .filter(|p| !p.feasible && !p.undetermined)
        .count();
    let undetermined = r.points.iter().filter(|p| p.undetermined).count();
    let left_out = r
        .points
        .iter()
        .filter(|p| p.feasible && !p.fitted(o.max_fit_gap))
        .count();
    let feasible: Vec<&Point> = r.points.iter().filter(|p| p.feasible).collect();
    let priced = feasible
        .iter()
        .filter(|p| p.rel_gap.is_some_and(|g| g <= o.ipm_tol))
        .count();
    let widest = feasible
        .iter()
        .filter_map(|p| p.rel_gap)
        .fold(0.0, f64::max);
    let _ = writeln!(
        md,
        "\n{priced} of {} feasible points priced to a relative bracket ≤ {:.0e} (widest {widest:.1e}).",
        feasible.len(),
        o.ipm_tol
    );
    let _ = writeln!(
        md,
        "\n{} programs solved; {infeasible} infeasible (verified certificates: {}), {undetermined} with feasibility undetermined (series ended there); {left_out} feasible but left out for a wide bracket.\n",
        r.points.len(),
        r.points
            .iter()
            .filter(|p| p.certificate_verified == Some(true))
            .count()
    );
    if !r.controls.is_empty() {
        md.push_str("Controls (the same programs and grids): if a control's exponents and verdict match the real rows', the real verdict is no evidence about the sink.\n\n| control | layer | norm | T fitted (sink / diag) | sink exponent | diagonal exponent | diag/sink exponent | ratio verdict |\n|---|---|---|---|---|---|---|---|\n");
        for c in &r.controls {
            for f in &c.fits {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} / {} | {} | {} | {} | {} |",
                    c.kind,
                    f.layer,
                    f.norm,
                    range(&f.t_sink),
                    range(&f.t_diagonal),
                    fit_cell(&f.sink),
                    fit_cell(&f.diagonal),
                    fit_cell(&f.ratio),
                    f.verdict
                );
            }
        }
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_given_twice_is_refused_not_indexed() {
        let x = Mat::<f64>::from_fn(8, 4, |i, j| ((i * 4 + j) as f64).sin());
        let e = run_on(
            &[x.clone(), x],
            &[1, 1],
            &Options::default(),
            &mut |_: &str| {},
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("layer 1 is given twice"), "{e}");
        assert_eq!(duplicate(&[3, 1, 2]), None);
        assert_eq!(duplicate(&[3, 1, 3]), Some(3));
    }

    #[test]
    fn control_inputs_are_what_they_claim() {
        let x = Mat::<f64>::from_fn(9, 5, |i, j| {
            ((i * 5 + j) as f64 * 0.7).sin() + 0.1 * i as f64
        });
        let s = control_inputs(ControlKind::Shifted, x.as_ref(), 3, 0);
        assert_eq!((s.nrows(), s.ncols()), (8, 5));
        assert!((0..8).all(|i| (0..5).all(|j| s[(i, j)] == x[(i + 1, j)])));
        let g = control_inputs(ControlKind::Gaussian, x.as_ref(), 3, 0);
        for i in 0..9 {
            let (ng, nx) = (
                crate::linalg::norm(&crate::linalg::row(g.as_ref(), i)),
                crate::linalg::norm(&crate::linalg::row(x.as_ref(), i)),
            );
            assert!((ng - nx).abs() <= 1e-12 * nx, "row {i}: {ng} vs {nx}");
        }
        // Seeded: the same bytes again, other bytes for another layer or seed.
        assert_eq!(g, control_inputs(ControlKind::Gaussian, x.as_ref(), 3, 0));
        assert_ne!(g, control_inputs(ControlKind::Gaussian, x.as_ref(), 4, 0));
        assert_ne!(g, control_inputs(ControlKind::Gaussian, x.as_ref(), 3, 1));
    }

    #[test]
    fn verdict_follows_the_interval() {
        let f = |b: f64, lo: f64, hi: f64| PowerFit {
            exponent: b,
            intercept: 0.0,
            ci_low: lo,
            ci_high: hi,
            level: 0.95,
            n: 5,
            n_x: 5,
            resid_sd: 0.0,
        };
        assert!(ratio_verdict(Some(&f(0.5, 0.4, 0.6))).starts_with("grows like"));
        assert!(ratio_verdict(Some(&f(0.0, -0.1, 0.1))).starts_with("flat"));
        assert!(ratio_verdict(Some(&f(0.2, 0.1, 0.3))).starts_with("grows slower"));
        assert!(ratio_verdict(Some(&f(0.9, 0.8, 1.0))).starts_with("grows faster"));
        assert!(ratio_verdict(None).starts_with("untestable"));
    }

    #[test]
    fn layers_are_early_middle_late() {
        assert_eq!(default_layers(30), vec![1, 15, 29]);
        assert_eq!(default_layers(1), vec![0]);
    }
}
