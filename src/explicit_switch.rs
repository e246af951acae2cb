//! Explicit switches: a learned sink logit and an output gate (docs/theory.md §11, ours).
//!
//! Paper A explains the BOS sink as the cheapest way to switch a head off. Newer heads carry
//! switches of their own; this module states what each needs and what it costs, beside the
//! BOS sink of [`crate::switch`] and [`crate::geometry`].
//!
//! **Learned sink logit.** Query $i$ sees logits $z_{ij}$ on its $n_i$ visible keys and one
//! extra logit $s$ whose column carries no value:
//! $A_{ij} = e^{z_{ij}}/(e^{s} + \sum_k e^{z_{ik}})$, sink mass $p_i = 1 - \sum_j A_{ij}$, and
//! $o_i = \sum_j A_{ij} v_j$. Then $\lVert o_i\rVert \le (1-p_i)\max_j\lVert v_j\rVert$, and
//! $$1 - p_i \le \varepsilon \iff s \ge \operatorname{LSE}(z_i) + \ln\tfrac{1-\varepsilon}{\varepsilon}.$$
//! No condition on the embeddings: with $W_{QK} = 0$ every row of a context of length
//! $\le T$ is switched off by $s = \ln(T(1-\varepsilon)/\varepsilon) = \Delta_\varepsilon(T)$,
//! and no smaller $s$ does it for the row that sees $T$ keys. The cost of the switch is one
//! scalar growing like $\ln T$. The bound needs the sink column to carry no value: a key with
//! value $v_s$ in its place (a BOS key whose value is not zero) adds $p_i v_s$ to $o_i$.
//!
//! **Output gate.** $o_i = g_i\sum_j A_{ij}v_j$ with $g_i = \sigma(w\cdot x_i + b)$, so
//! $\lVert o_i\rVert \le g_i\max_j\lVert v_j\rVert$. Switching every query off needs only
//! $b = -L$, $L = \ln((1-\varepsilon)/\varepsilon)$, whatever $T$. A *selective* gate, on
//! ($g_i \ge 1-\varepsilon$) for on-queries and off ($g_i \le \varepsilon$) for off-queries,
//! exists iff the two query sets are strictly affinely separable,
//! $\mathrm{conv}(X_{\mathrm{on}})\cap\mathrm{conv}(X_{\mathrm{off}}) = \emptyset$, equivalently
//! $0 \notin \mathrm{conv}\lbrace (x,1) : x\in X_{\mathrm{on}}\rbrace\cup\lbrace -(x,1) : x \in X_{\mathrm{off}}\rbrace$.
//! Necessity: convex weights with $\sum_{\mathrm{on}}\lambda_i(x_i,1) = \sum_{\mathrm{off}}\mu_j(x_j,1)$
//! give $\sum\lambda_i(w\cdot x_i+b) = \sum\mu_j(w\cdot x_j+b)$, which cannot be both $\ge L$
//! and $\le -L$. Unlike the BOS sink it constrains only the queries, never the keys.
//!
//! **Cost of a selective gate on orthonormal queries** ($n_{\mathrm{on}}$ on, $n_{\mathrm{off}}$
//! off, $N$ in all, $b$ free): $\min\lVert w\rVert = 2L\sqrt{n_{\mathrm{on}}n_{\mathrm{off}}/N}$,
//! attained at $b^\star = L(n_{\mathrm{on}} - n_{\mathrm{off}})/N$ and proved by the dual
//! certificate $\lambda = 1/n_{\mathrm{on}}$, $\mu = 1/n_{\mathrm{off}}$:
//! $\lVert w\rVert \ge L\sum(\lambda+\mu)/\lVert\sum\lambda_i x_i - \sum\mu_j x_j\rVert$.
//! At a fixed on-rate it grows like $\sqrt T$.

use crate::geometry::hull::{gamma_n, separator_check, weights_check};
use crate::geometry::{GeometryError, HullVerdict, hull_verdict};
use crate::linalg::{dot, logsumexp, norm};
use crate::outcome::CheckOutcome;
use crate::switch::Assumption;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

/// Visible weights $A_{ij}$ and sink mass $p_i$ of one query row with sink logit `s`.
pub fn sink_logit_softmax(z: &[f64], s: f64) -> (Vec<f64>, f64) {
    let m = z.iter().copied().fold(s, f64::max);
    let e: Vec<f64> = z.iter().map(|&v| (v - m).exp()).collect();
    let es = (s - m).exp();
    let total = es + e.iter().sum::<f64>();
    (e.into_iter().map(|v| v / total).collect(), es / total)
}

/// $L_\varepsilon = \ln((1-\varepsilon)/\varepsilon)$: the logit that puts mass $1-\varepsilon$
/// against one unit competitor (a gate's pre-activation, a sink logit's lead over LSE).
pub fn switch_logit(eps: f64) -> f64 {
    ((1.0 - eps) / eps).ln()
}

/// Least sink logit with visible mass $\le\varepsilon$ on row `z`:
/// $\operatorname{LSE}(z) + \ln((1-\varepsilon)/\varepsilon)$.
pub fn sink_logit_needed(z: &[f64], eps: f64) -> f64 {
    logsumexp(z) + switch_logit(eps)
}

/// The sink logit that switches off every row of a context of length $\le T$ when
/// $W_{QK} = 0$: $\ln(T(1-\varepsilon)/\varepsilon)$ (the row seeing $T$ keys binds).
pub fn sink_logit_for_context(t: usize, eps: f64) -> f64 {
    (t as f64).ln() + switch_logit(eps)
}

/// $\sigma(u) = 1/(1+e^{-u})$, evaluated without overflow.
pub fn sigmoid(u: f64) -> f64 {
    if u >= 0.0 {
        1.0 / (1.0 + (-u).exp())
    } else {
        let e = u.exp();
        e / (1.0 + e)
    }
}

/// A scalar output gate $g(x) = \sigma(w\cdot x + b)$.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    /// The direction $w$.
    pub w: Vec<f64>,
    /// The bias $b$.
    pub b: f64,
}

impl Gate {
    /// Pre-activation $w\cdot x + b$.
    pub fn logit(&self, x: &[f64]) -> f64 {
        dot(&self.w, x) + self.b
    }

    /// Gate value $\sigma(w\cdot x + b)$.
    pub fn value(&self, x: &[f64]) -> f64 {
        sigmoid(self.logit(x))
    }
}

/// Convex weights showing the on- and off-queries cannot be separated:
/// $\sum\lambda_i (x_i, 1) = \sum\mu_j (x_j, 1)$, $\lambda,\mu\ge 0$, $\sum\lambda = \sum\mu = \tfrac12$.
#[derive(Clone, Debug, PartialEq)]
pub struct GateObstruction {
    /// Weights on the on-queries.
    pub lambda_on: Vec<f64>,
    /// Weights on the off-queries.
    pub mu_off: Vec<f64>,
    /// $\lVert\sum\lambda_i(x_i,1) - \sum\mu_j(x_j,1)\rVert$, as verified.
    pub residual: f64,
}

/// Verdict on a selective gate, with its certificate.
#[derive(Clone, Debug, PartialEq)]
pub enum GateVerdict {
    /// A gate with $w\cdot x+b \ge L$ on every on-query and $\le -L$ on every off-query,
    /// its margins certain in f64 (each exceeds its rounding bound).
    Separable(Gate),
    /// No gate exists: convex weights that verify by arithmetic.
    Inseparable(GateObstruction),
}

/// The lifted points $(x,1)$ for on-queries and $-(x,1)$ for off-queries.
fn lifted(on: &[&[f64]], off: &[&[f64]]) -> Vec<Vec<f64>> {
    let lift =
        |x: &[f64], sign: f64| -> Vec<f64> { x.iter().map(|v| sign * v).chain([sign]).collect() };
    on.iter()
        .map(|x| lift(x, 1.0))
        .chain(off.iter().map(|x| lift(x, -1.0)))
        .collect()
}

/// Decides whether a selective gate with switch logit `l` (> 0) exists for these query sets,
/// returning a verified gate or a verified obstruction (docs on the module). The gate is the
/// minimum-norm point of the lifted hull, scaled to margin $(1+10^{-6})L$ (certified): the widest margin for
/// $\lVert(w, b)\rVert$, not the least $\lVert w\rVert$ with a free bias.
pub fn gate_verdict(on: &[&[f64]], off: &[&[f64]], l: f64) -> Result<GateVerdict, GeometryError> {
    if on.is_empty() || off.is_empty() {
        return Err(GeometryError::Empty {
            what: if on.is_empty() {
                "on-queries"
            } else {
                "off-queries"
            },
        });
    }
    let pts = lifted(on, off);
    let refs: Vec<&[f64]> = pts.iter().map(|v| v.as_slice()).collect();
    let origin = vec![0.0; refs[0].len()];
    match hull_verdict(&refs, &origin)? {
        HullVerdict::Outside(sep) => {
            // Scaled by the certified margin (each a·y less its rounding bound), with 10⁻⁶ to
            // spare, so the gate's own margins over L stay certain after the scaling.
            let certified = separator_check(&sep.a, &refs, &origin).certified_slack;
            let c = (1.0 + 1e-6) * l / certified;
            let d = sep.a.len() - 1;
            let gate = Gate {
                w: sep.a[..d].iter().map(|v| c * v).collect(),
                b: c * sep.a[d],
            };
            Ok(GateVerdict::Separable(gate))
        }
        HullVerdict::Inside(cw) => {
            let n_on = on.len();
            let chk = weights_check(&cw.lambda, &refs, &origin);
            Ok(GateVerdict::Inseparable(GateObstruction {
                lambda_on: cw.lambda[..n_on].to_vec(),
                mu_off: cw.lambda[n_on..].to_vec(),
                residual: chk.residual,
            }))
        }
    }
}

/// Least rounding-certified slack of a gate: $\min$ over on-queries of $w\cdot x+b-L$ and over
/// off-queries of $-(w\cdot x+b)-L$, each less its rounding bound; positive iff every
/// on-query has $g\ge 1-\varepsilon$ and every off-query $g\le\varepsilon$ for certain.
pub fn gate_slack(gate: &Gate, on: &[&[f64]], off: &[&[f64]], l: f64) -> f64 {
    let g = gamma_n(gate.w.len() + 2);
    let one = |x: &[f64], sign: f64| {
        let abs: f64 = gate
            .w
            .iter()
            .zip(x)
            .map(|(a, b)| (a * b).abs())
            .sum::<f64>()
            + gate.b.abs();
        sign * gate.logit(x) - l - 1.01 * g * abs
    };
    on.iter()
        .map(|x| one(x, 1.0))
        .chain(off.iter().map(|x| one(x, -1.0)))
        .fold(f64::INFINITY, f64::min)
}

/// Least $\lVert w\rVert$ (bias free) of a selective gate with switch logit `l` on orthonormal
/// queries: $2L\sqrt{n_{\mathrm{on}}n_{\mathrm{off}}/N}$.
pub fn gate_cost_orthonormal(n_on: usize, n_off: usize, l: f64) -> f64 {
    let (a, b) = (n_on as f64, n_off as f64);
    2.0 * l * (a * b / (a + b)).sqrt()
}

/// The gate attaining [`gate_cost_orthonormal`] on the basis vectors $e_0..e_{N-1}$, the first
/// `n_on` of them on: $b^\star = L(n_{\mathrm{on}}-n_{\mathrm{off}})/N$, $w_i = \pm L - b^\star$.
pub fn gate_orthonormal_optimum(n_on: usize, n_off: usize, l: f64) -> Gate {
    let n = (n_on + n_off) as f64;
    let b = l * (n_on as f64 - n_off as f64) / n;
    let w = (0..n_on + n_off)
        .map(|i| if i < n_on { l - b } else { -l - b })
        .collect();
    Gate { w, b }
}

/// Weak-duality lower bound on $\lVert w\rVert$ of any selective gate with switch logit `l`:
/// for $\lambda,\mu\ge0$ with $\sum\lambda = \sum\mu$,
/// $\lVert w\rVert \ge L(\sum\lambda+\sum\mu)/\lVert\sum\lambda_i x_i - \sum\mu_j x_j\rVert$.
pub fn gate_cost_lower_bound(
    on: &[&[f64]],
    off: &[&[f64]],
    lambda: &[f64],
    mu: &[f64],
    l: f64,
) -> f64 {
    let d = on[0].len();
    let mut diff = vec![0.0; d];
    for (x, &a) in on.iter().zip(lambda) {
        for k in 0..d {
            diff[k] += a * x[k];
        }
    }
    for (x, &a) in off.iter().zip(mu) {
        for k in 0..d {
            diff[k] -= a * x[k];
        }
    }
    l * (lambda.iter().sum::<f64>() + mu.iter().sum::<f64>()) / norm(&diff)
}

fn gauss(rng: &mut StdRng) -> f64 {
    StandardNormal.sample(rng)
}

fn gaussian_vec(rng: &mut StdRng, d: usize) -> Vec<f64> {
    (0..d).map(|_| gauss(rng)).collect()
}

/// Check of the sink-logit switch on random rows (length 1–128, logits of scale 0–6, values in
/// $\mathbb R^{1..8}$, $\varepsilon\in[10^{-6}, 0.2]$, $s$ at or above the needed logit):
/// $\lVert o_i\rVert\le\varepsilon\max\lVert v\rVert$; $s$ a little below the needed logit leaves
/// visible mass above $\varepsilon$ (the bound is tight); and [`sink_logit_for_context`] switches
/// off the row of $T$ equal logits exactly. `Dropped`: the sink column carries a value of norm
/// $3\max\lVert v\rVert$, as a BOS key with non-zero value would. Margin:
/// $(\varepsilon\max\lVert v\rVert-\lVert o_i\rVert)/\max\lVert v\rVert$.
pub fn check_sink_logit_switch(cases: usize, seed: u64, assumption: Assumption) -> CheckOutcome {
    let mut out = CheckOutcome::new("sink_logit_switch", "(ε max‖v‖ − ‖o_i‖)/max‖v‖");
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5e1f_0001);
    for case in 0..cases {
        let n = rng.random_range(1..=128usize);
        let d = rng.random_range(1..=8usize);
        let eps = 10f64.powf(rng.random_range(-6.0..-0.7));
        let scale = rng.random_range(0.0..6.0);
        let z: Vec<f64> = (0..n).map(|_| scale * gauss(&mut rng)).collect();
        let values: Vec<Vec<f64>> = (0..n)
            .map(|_| {
                let r = rng.random_range(0.1..3.0);
                gaussian_vec(&mut rng, d)
                    .into_iter()
                    .map(|v| r * v)
                    .collect()
            })
            .collect();
        let vmax = values
            .iter()
            .map(|v| norm(v))
            .fold(0.0, f64::max)
            .max(f64::MIN_POSITIVE);
        let s = sink_logit_needed(&z, eps) + rng.random_range(0.0..3.0);
        let (a, p) = sink_logit_softmax(&z, s);
        let mut o = vec![0.0; d];
        for (aj, v) in a.iter().zip(&values) {
            for k in 0..d {
                o[k] += aj * v[k];
            }
        }
        if assumption == Assumption::Dropped {
            let u = gaussian_vec(&mut rng, d);
            let un = norm(&u).max(f64::MIN_POSITIVE);
            for k in 0..d {
                o[k] += p * 3.0 * vmax * u[k] / un;
            }
        }
        // Rounding: a sum of n products of terms of size ≤ vmax, relative error ≤ 4nu.
        let tol = 4.0 * (n + 2) as f64 * f64::EPSILON * vmax;
        let margin = (eps * vmax - norm(&o)) / vmax;
        let bound_ok = norm(&o) <= eps * vmax + tol;
        // Tightness: 10⁻³ below the needed logit, the visible mass exceeds ε by ≈ 10⁻³ε(1−ε).
        let (_, p_below) = sink_logit_softmax(&z, sink_logit_needed(&z, eps) - 1e-3);
        let tight = 1.0 - p_below > eps;
        // W_QK = 0 in a context of n keys: the row of n equal logits is switched off exactly.
        let (_, p_ctx) = sink_logit_softmax(&vec![0.0; n], sink_logit_for_context(n, eps));
        let ctx_ok = ((1.0 - p_ctx) - eps).abs() <= 1e-12 * eps.max(1e-300) + 8.0 * f64::EPSILON;
        out.record(bound_ok && tight && ctx_ok, margin, || {
            format!(
                "case {case}: n {n}, ε {eps:.2e}: ‖o‖ = {:.3e} vs ε max‖v‖ = {:.3e} (bound {bound_ok}, tight {tight}, context {ctx_ok})",
                norm(&o),
                eps * vmax
            )
        });
    }
    out
}

/// One selective-gate instance: on- and off-queries in $\mathbb R^d$.
struct GateInstance {
    on: Vec<Vec<f64>>,
    off: Vec<Vec<f64>>,
    orthonormal: bool,
}

/// `Kept`: Gaussian queries labelled by a planted affine rule with a margin (every fourth case:
/// orthonormal queries with random labels, separable since affinely independent). `Dropped`:
/// an XOR core — on $c\pm r u$, off $c\pm r v$ share the midpoint $c$ — plus Gaussian points.
fn draw_gate_instance(rng: &mut StdRng, case: usize, assumption: Assumption) -> GateInstance {
    let d = rng.random_range(2..=8usize);
    match assumption {
        Assumption::Kept if case % 4 == 3 => {
            let n = rng.random_range(2..=24usize);
            let n_on = rng.random_range(1..n);
            let e = |i: usize| (0..n).map(|k| if k == i { 1.0 } else { 0.0 }).collect();
            GateInstance {
                on: (0..n_on).map(e).collect(),
                off: (n_on..n).map(e).collect(),
                orthonormal: true,
            }
        }
        Assumption::Kept => {
            let w = gaussian_vec(rng, d);
            let wn = norm(&w);
            let b = rng.random_range(-0.5..0.5) * wn;
            let gap = rng.random_range(0.02..0.5) * wn;
            let (n_on, n_off) = (rng.random_range(1..=20usize), rng.random_range(1..=20usize));
            let (mut on, mut off) = (Vec::new(), Vec::new());
            while on.len() < n_on || off.len() < n_off {
                let x = gaussian_vec(rng, d);
                let u = dot(&w, &x) + b;
                if u >= gap && on.len() < n_on {
                    on.push(x);
                } else if u <= -gap && off.len() < n_off {
                    off.push(x);
                }
            }
            GateInstance {
                on,
                off,
                orthonormal: false,
            }
        }
        Assumption::Dropped => {
            let c = gaussian_vec(rng, d);
            let (u, v) = (gaussian_vec(rng, d), gaussian_vec(rng, d));
            let r = rng.random_range(0.2..2.0);
            let at = |dir: &[f64], sign: f64| -> Vec<f64> {
                c.iter().zip(dir).map(|(a, b)| a + sign * r * b).collect()
            };
            let mut on = vec![at(&u, 1.0), at(&u, -1.0)];
            let mut off = vec![at(&v, 1.0), at(&v, -1.0)];
            for _ in 0..rng.random_range(0..=8usize) {
                on.push(gaussian_vec(rng, d));
            }
            for _ in 0..rng.random_range(0..=8usize) {
                off.push(gaussian_vec(rng, d));
            }
            GateInstance {
                on,
                off,
                orthonormal: false,
            }
        }
    }
}

/// Check of the selective gate: on instances that are separable (`Kept`) the verdict returns a
/// gate whose margins are certain, the off-queries' head output is
/// $\le\varepsilon\max\lVert v\rVert$ under random attention and values, and on orthonormal
/// queries the least $\lVert w\rVert$ equals $2L\sqrt{n_{\mathrm{on}}n_{\mathrm{off}}/N}$ (the
/// optimum feasible, the dual bound equal, both to $10^{-12}$; the verdict's own gate costs no
/// less). `Dropped` (an XOR core, not separable): no gate exists; the case fails, and its
/// obstruction must verify by arithmetic (else the failure is the solver's, reported as such).
/// Margin: the least certified slack of the gate's logits over $L$, divided by $L$
/// (−1 when no gate is found).
pub fn check_gate_switch(cases: usize, seed: u64, assumption: Assumption) -> CheckOutcome {
    let mut out = CheckOutcome::new("gate_switch", "certified logit slack / L");
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6a7e_0002);
    for case in 0..cases {
        let eps = 10f64.powf(rng.random_range(-6.0..-0.7));
        let l = switch_logit(eps);
        let inst = draw_gate_instance(&mut rng, case, assumption);
        let on: Vec<&[f64]> = inst.on.iter().map(|v| v.as_slice()).collect();
        let off: Vec<&[f64]> = inst.off.iter().map(|v| v.as_slice()).collect();
        let verdict = match gate_verdict(&on, &off, l) {
            Ok(v) => v,
            Err(e) => {
                out.record(false, f64::NAN, || format!("case {case}: solver: {e}"));
                continue;
            }
        };
        match verdict {
            GateVerdict::Separable(gate) => {
                let slack = gate_slack(&gate, &on, &off, l);
                // Off-queries under a random attention row and random values.
                let d_v = rng.random_range(1..=6usize);
                let t = rng.random_range(1..=16usize);
                let values: Vec<Vec<f64>> = (0..t).map(|_| gaussian_vec(&mut rng, d_v)).collect();
                let vmax = values
                    .iter()
                    .map(|v| norm(v))
                    .fold(0.0, f64::max)
                    .max(f64::MIN_POSITIVE);
                let mut output_ok = true;
                for x in &off {
                    let z: Vec<f64> = (0..t).map(|_| 3.0 * gauss(&mut rng)).collect();
                    let (a, _) = sink_logit_softmax(&z, f64::NEG_INFINITY);
                    let g = gate.value(x);
                    let mut o = vec![0.0; d_v];
                    for (aj, v) in a.iter().zip(&values) {
                        for k in 0..d_v {
                            o[k] += g * aj * v[k];
                        }
                    }
                    output_ok &= norm(&o) <= eps * vmax * (1.0 + 1e-12);
                }
                let mut cost_ok = true;
                if inst.orthonormal {
                    let (n_on, n_off) = (on.len(), off.len());
                    let best = gate_cost_orthonormal(n_on, n_off, l);
                    let opt = gate_orthonormal_optimum(n_on, n_off, l);
                    let feasible = gate_slack(&opt, &on, &off, l) > -1e-12 * l;
                    let lambda = vec![1.0 / n_on as f64; n_on];
                    let mu = vec![1.0 / n_off as f64; n_off];
                    let lower = gate_cost_lower_bound(&on, &off, &lambda, &mu, l);
                    cost_ok = feasible
                        && (norm(&opt.w) - best).abs() <= 1e-12 * best
                        && (lower - best).abs() <= 1e-12 * best
                        && norm(&gate.w) >= best * (1.0 - 1e-12);
                }
                let ok = slack > 0.0 && output_ok && cost_ok;
                out.record(ok, slack / l, || {
                    format!(
                        "case {case}: slack {slack:.3e}, outputs within ε {output_ok}, orthonormal cost {cost_ok}"
                    )
                });
            }
            GateVerdict::Inseparable(obs) => {
                let pts = lifted(&on, &off);
                let refs: Vec<&[f64]> = pts.iter().map(|v| v.as_slice()).collect();
                let all: Vec<f64> = obs.lambda_on.iter().chain(&obs.mu_off).copied().collect();
                let verified = weights_check(&all, &refs, &vec![0.0; refs[0].len()]).ok;
                out.record(false, -1.0, || {
                    format!(
                        "case {case}: no selective gate ({} on, {} off); obstruction {} (residual {:.2e})",
                        on.len(),
                        off.len(),
                        if verified { "verified" } else { "NOT verified" },
                        obs.residual
                    )
                });
            }
        }
    }
    out
}

/// Whether every `Dropped` gate case carries a verified obstruction (so its failure is the
/// missing assumption, not the solver): the count of verified obstructions over `cases`.
pub fn gate_obstructions_verified(cases: usize, seed: u64) -> (usize, usize) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6a7e_0002);
    let mut verified = 0;
    for case in 0..cases {
        let eps = 10f64.powf(rng.random_range(-6.0..-0.7));
        let inst = draw_gate_instance(&mut rng, case, Assumption::Dropped);
        let on: Vec<&[f64]> = inst.on.iter().map(|v| v.as_slice()).collect();
        let off: Vec<&[f64]> = inst.off.iter().map(|v| v.as_slice()).collect();
        if let Ok(GateVerdict::Inseparable(obs)) = gate_verdict(&on, &off, switch_logit(eps)) {
            let pts = lifted(&on, &off);
            let refs: Vec<&[f64]> = pts.iter().map(|v| v.as_slice()).collect();
            let all: Vec<f64> = obs.lambda_on.iter().chain(&obs.mu_off).copied().collect();
            let sum_on: f64 = obs.lambda_on.iter().sum();
            let sum_off: f64 = obs.mu_off.iter().sum();
            if weights_check(&all, &refs, &vec![0.0; refs[0].len()]).ok
                && (sum_on - sum_off).abs() <= 1e-9
            {
                verified += 1;
            }
        }
    }
    (verified, cases)
}
