//! `sinklab cost --pattern sink|diagonal --norm fro|nuclear --embedding orthonormal|gaussian|trained
//! --t T [--d D] [--delta X | --eps E] [--seed S] [--scope qk|head [--on-rate R]] [--json]`:
//! one minimal cost (docs/theory.md §6), of W_QK alone or of the whole head on copy-paste;
//! `sinklab cost --definitions [--quick] [--out DIR] [--seed S] [--json]`: the map of cost
//! definitions and its A5 verdict;
//! `sinklab cost --sink-logit --norm fro|nuclear --t T [--embedding orthonormal|gaussian] [--d D]
//! [--delta X | --eps E] [--on-rate R] [--seed S] [--json]`: the selective sink-logit program on
//! the copy-paste head (docs/theory.md §11) beside the BOS sink's, the diagonal's and the gate's
//! minima on the same instance.

use anyhow::{Context, Result, bail};
use sinklab::cost::{
    CostQuery, EmbeddingKind, Method, NormKind, Pattern, Scope, SolveOptions, delta_eps,
    fro_orthonormal, head, nuclear_witness,
};
use sinklab::train::embeddings::{TrainedEmbeddings, solve_head_query, solve_query};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
#[command(
    allow_negative_numbers = true,
    after_long_help = "EXAMPLES:
  The Frobenius cost of the sink pattern at T = 64, orthonormal embeddings:
    sinklab cost --pattern sink --norm fro --t 64
  The nuclear cost of the diagonal pattern on Gaussian embeddings of width 128, as JSON:
    sinklab cost --pattern diagonal --norm nuclear --embedding gaussian --t 64 --d 128 --json
  The whole head on copy-paste, leak 0.05:
    sinklab cost --pattern sink --norm fro --t 32 --scope head --eps 0.05
  A selective switch by a learned sink logit on copy-paste, beside the BOS sink and the gate:
    sinklab cost --sink-logit --norm nuclear --t 16 --eps 0.01"
)]
pub struct Args {
    /// Pattern of the off-queries: sink or diagonal
    ///
    /// sink: every off-query attends to position 0. diagonal: every off-query attends to
    /// itself.
    #[arg(
        long,
        value_enum,
        hide_possible_values = true,
        value_name = "sink|diagonal",
        required_unless_present_any = ["definitions", "sink_logit"]
    )]
    pattern: Option<Pattern>,
    /// Cost definition: fro or nuclear
    ///
    /// fro: the Frobenius norm of W. nuclear: the nuclear norm of W (the sum of its
    /// singular values), which equals the minimal weight decay (‖W_Q‖² + ‖W_K‖²)/2 of a
    /// factored W = W_Q W_Kᵀ.
    #[arg(
        long,
        value_enum,
        hide_possible_values = true,
        value_name = "fro|nuclear",
        required_unless_present = "definitions"
    )]
    norm: Option<NormKind>,
    /// Embeddings: orthonormal|gaussian|trained
    ///
    /// orthonormal: orthonormal rows, a seeded random rotation (needs d ≥ T). gaussian:
    /// i.i.d. normal entries of variance 1/d. trained: the attention input (token plus
    /// position embedding) of a one-layer model trained on bigram-copy at this T and d.
    #[arg(long, value_enum, hide_possible_values = true, default_value_t = EmbeddingKind::Orthonormal)]
    embedding: EmbeddingKind,
    /// Context length T (position 0 is the sink)
    ///
    /// Positions 0..T-1; with --embeddings, the file's first T rows (default: all of them).
    #[arg(long, value_name = "T")]
    t: Option<usize>,
    /// Embedding dimension (default: T).
    #[arg(long, value_name = "D", conflicts_with = "embeddings")]
    d: Option<usize>,
    /// Your own points: tensor x [N, d] of a safetensors file
    ///
    /// The rows of tensor `x` (f32, f64, f16 or bf16), the first T of them with --t; row 0 is
    /// the sink.
    #[arg(long, value_name = "FILE", conflicts_with = "embedding")]
    embeddings: Option<PathBuf>,
    /// Solver: ipm (interior point) or first-order
    ///
    /// ipm: the interior-point solver (Clarabel), certified bracket to about 1e-8; beyond its
    /// size caps (SDP order 50, a QP block of 4500 rows) a working set of constraints over a
    /// primal-dual method on the constraints' Schur matrix (nuclear) or Gram matrix (Frobenius);
    /// where these fail the first-order solver answers and the output says why. first-order: the
    /// primal-dual iterations, to --tol.
    #[arg(long, value_enum, hide_possible_values = true, value_name = "ipm|first-order", default_value_t = Method::preferred())]
    solver: Method,
    /// Required logit gap Δ.
    #[arg(long, conflicts_with = "eps", value_name = "X")]
    delta: Option<f64>,
    /// Leak ε: the gap that leaves mass ≥ 1−ε on the target
    ///
    /// Δ = ln((T−1)(1−ε)/ε), so every row puts mass at least 1−ε on its target. Default
    /// 0.01 when neither --delta nor --eps is given.
    #[arg(long, value_name = "E")]
    eps: Option<f64>,
    /// Seed of the embeddings.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// What is priced: qk (W_QK alone) or head (whole head)
    ///
    /// qk: W_QK alone, every query i ≥ 1 an off-query (docs/theory.md §6). head: the whole
    /// head on copy-paste, ‖W_QK‖ + ‖W_VO‖.
    #[arg(long, value_enum, hide_possible_values = true, value_name = "qk|head", default_value_t = Scope::Qk)]
    scope: Scope,
    /// On-query fraction of copy-paste (--scope head).
    #[arg(long, value_name = "R", default_value_t = head::DEFAULT_ON_RATE)]
    on_rate: f64,
    /// Relative duality gap at which the solver stops.
    #[arg(long, default_value_t = 1e-3)]
    tol: f64,
    /// Iteration budget of the primal–dual solver.
    #[arg(long, default_value_t = SolveOptions::default().max_iter)]
    max_iter: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Exponents under every cost definition, and the A5 verdict
    ///
    /// Every definition (W_QK, W_VO or the head; Frobenius or nuclear, squared or not; fixed Δ
    /// or Δ(T,ε); orthonormal, Gaussian, trained, real embeddings): closed forms exact, the rest
    /// fitted. Trained and real cells come from the results `sinklab report` left in --out;
    /// --seed is the bootstrap's seed.
    #[arg(
        long,
        conflicts_with_all = [
            "pattern", "norm", "embedding", "embeddings", "t", "d", "solver", "delta", "eps",
            "scope", "on_rate", "tol", "max_iter", "max_mem", "max_time"
        ]
    )]
    definitions: bool,
    /// The selective sink-logit program on the copy-paste head
    ///
    /// A learned sink logit s switches the off-queries off (each visible logit δ below s) while
    /// every on-query's source stays Δ above s and above its other keys (docs/theory.md §11);
    /// cost √(‖W_QK‖_F² + s²) or ‖W_QK‖_* + |s| (--norm), δ = Δ (--delta, or ln(T(1−ε)/ε) with
    /// --eps, enough for both sides). Prints the certified bracket, the closed form on
    /// orthonormal embeddings (with its assumption), and the BOS sink's, the diagonal's and a
    /// selective gate's minima on the same sources.
    #[arg(
        long,
        conflicts_with_all = ["pattern", "definitions", "embeddings", "scope"]
    )]
    sink_logit: bool,
    /// Report directory holding the caches of --definitions (default out).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// One seed instead of two (--definitions).
    #[arg(long)]
    quick: bool,
    /// Memory limit (e.g. 64G; default 80% of the machine's memory).
    #[arg(long, value_name = "SIZE")]
    max_mem: Option<String>,
    /// Time limit of the lower-bound estimate (e.g. 12h; default 1h).
    #[arg(long, value_name = "TIME")]
    max_time: Option<String>,
}

impl Args {
    /// The pattern (checked present at the start of [`run`]; --definitions returns before).
    fn pattern(&self) -> Pattern {
        self.pattern.expect("--pattern is checked in run")
    }
    /// The norm (checked present at the start of [`run`]).
    fn norm(&self) -> NormKind {
        self.norm.expect("--norm is checked in run")
    }
}

/// `--definitions`: the map of cost definitions and its verdict.
fn run_definitions(a: &Args) -> Result<i32> {
    let out = a.out.clone().unwrap_or_else(|| PathBuf::from("out"));
    let (table, cached) = sinklab::claims::cost_definitions::table(&out, a.quick, a.seed)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if a.json {
        let entries = table.entries();
        let v = serde_json::json!({
            "grid": table.grid,
            "grid_nuclear": table.grid_nuclear,
            "eps": table.eps,
            "measured_from_cache": cached,
            "entries": entries,
            "verdict": sinklab::cost::definitions::verdict(&entries),
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        outln!("{}", sinklab::cost::definitions::markdown(&table));
    }
    Ok(0)
}

pub fn run(mut a: Args) -> Result<i32> {
    super::only_with(
        ("--definitions", a.definitions),
        &[("--out", a.out.is_some()), ("--quick", a.quick)],
    )?;
    if a.definitions {
        return run_definitions(&a);
    }
    if a.sink_logit {
        return run_sink_logit(&a);
    }
    if a.pattern.is_none() || a.norm.is_none() {
        bail!("--pattern and --norm are required (or --definitions)");
    }
    if a.solver == Method::Ipm && !cfg!(feature = "ipm") {
        bail!("--solver ipm: this build has no interior-point solver (the `ipm` feature is off)");
    }
    let file = match &a.embeddings {
        Some(path) => Some(load_embeddings(path, a.t)?),
        None => None,
    };
    let t = match (&file, a.t) {
        (Some(x), _) => x.nrows(),
        (None, Some(t)) => t,
        (None, None) => bail!("--t is required (or --embeddings F.safetensors)"),
    };
    a.t = Some(t);
    if t < 2 {
        bail!("--t must be at least 2");
    }
    if !(a.tol > 0.0 && a.tol < 1.0) {
        bail!("--tol {}: must lie in (0, 1)", a.tol);
    }
    if a.max_iter == 0 {
        bail!("--max-iter must be at least 1");
    }
    let d = file.as_ref().map_or(a.d.unwrap_or(t), |x| x.ncols());
    if d == 0 {
        bail!("--d 0: the embedding dimension must be at least 1");
    }
    if let Some(x) = a.delta
        && !(x > 0.0 && x.is_finite())
    {
        bail!("--delta {x}: the gap must be positive and finite");
    }
    // The cost is proportional to Δ, and the solver's squared norms and absolute tolerances
    // leave f64's range near its ends (a subnormal Δ prints 0, a huge one unusable brackets):
    // the sweep spec's range, for the gap given or implied by --eps.
    use sinklab::sweep::cost_scaling::spec::{MAX_DELTA, MIN_DELTA};
    let (lo, hi) = (MIN_DELTA, MAX_DELTA);
    let implied = match (a.delta, a.eps) {
        (Some(x), _) => Some((x, format!("--delta {x:e}"))),
        (None, Some(e)) if e > 0.0 && e < 1.0 => Some((
            delta_eps(t - 1, e).unwrap_or(f64::NAN),
            format!("--eps {e} (Δ = ln((T−1)(1−ε)/ε) at T = {t})"),
        )),
        _ => None,
    };
    if let Some((x, what)) = implied
        && !(x > lo && x < hi)
    {
        bail!(
            "{what}: the gap {x:e} is outside ({lo:e}, {hi:e}); the cost is proportional to Δ, \
             so solve at a gap inside the range and scale"
        );
    }
    if let Some(e) = a.eps
        && !(e > 0.0 && e < 1.0)
    {
        bail!("--eps {e}: the leak must lie in (0, 1)");
    }
    if !(a.on_rate > 0.0 && a.on_rate < 1.0) {
        bail!("--on-rate {}: must lie in (0, 1)", a.on_rate);
    }
    // Sizes before work: the estimate is checked before anything is allocated.
    let budget = sinklab::budget::Budget::with(a.max_mem.as_deref(), a.max_time.as_deref())?;
    let one = sinklab::budget::cost_program(t, d, a.norm() == NormKind::Nuclear);
    // The whole-head programs (W_QK, then W_VO) run to their iteration budget on the cases
    // measured (nuclear, 2 shared cores: T = 64 in 1.9 s, T = 128 over 120 s), so they are
    // checked at that worst case, not at the 200-iteration lower bound of one W_QK program.
    let mut est = if a.scope == Scope::Head {
        let worst = sinklab::budget::cost_program_iterations(
            t,
            d,
            a.norm() == NormKind::Nuclear,
            a.max_iter,
        );
        worst.then(worst)
    } else {
        one
    };
    if a.embedding == EmbeddingKind::Trained {
        est = sinklab::budget::training(t, d, d, 1, 0, 8, 8, sinklab::train::embeddings::STEPS)
            .then(est);
    }
    budget.check(&format!("cost --t {t} --d {d}"), est, true)?;
    if a.max_iter > SolveOptions::default().max_iter {
        // A raised iteration budget: nothing else bounds the run, so its worst case must fit.
        let one = sinklab::budget::cost_program_iterations(
            t,
            d,
            a.norm() == NormKind::Nuclear,
            a.max_iter,
        );
        let worst = if a.scope == Scope::Head {
            one.then(one)
        } else {
            one
        };
        budget.check(
            &format!("--max-iter {} (its worst case)", a.max_iter),
            worst,
            true,
        )?;
    }
    let delta = match (a.delta, a.eps) {
        (Some(x), _) => x,
        (None, e) => delta_eps(t - 1, e.unwrap_or(0.01))?,
    };
    let q = CostQuery {
        pattern: a.pattern(),
        norm: a.norm(),
        embedding: a.embedding,
        t,
        d,
        delta,
        seed: a.seed,
        scope: a.scope,
        on_rate: a.on_rate,
    };
    // One program at top level: the solver and the embedding training use every thread of
    // the process's pool, passed down explicitly.
    let threads = rayon::current_num_threads();
    let opts = SolveOptions {
        rel_gap: a.tol,
        max_iter: a.max_iter,
        par: faer::Par::rayon(threads),
        method: a.solver,
        ..SolveOptions::default()
    };
    if let Some(x) = &file {
        return run_file(&a, &q, x, opts);
    }
    let trained = TrainedEmbeddings::new(threads);
    if a.embedding == EmbeddingKind::Trained {
        errln!(
            "training the embedding model (bigram-copy, T = {}, d = {d}, seed {}, {} steps)…",
            t,
            a.seed,
            sinklab::train::embeddings::STEPS
        );
    }
    if a.scope == Scope::Head {
        return run_head(&a, &q, opts, &trained);
    }
    let sol = solve_query(&q, opts, &trained).context("solving the gap program")?;
    let reference = match (a.embedding, a.norm()) {
        (EmbeddingKind::Orthonormal, NormKind::Fro) => {
            Some(("closed_form", fro_orthonormal(t, delta)))
        }
        (EmbeddingKind::Orthonormal, NormKind::Nuclear) => Some((
            "witness_upper_bound",
            nuclear_witness(a.pattern(), t, delta),
        )),
        _ => None,
    };
    if a.json {
        let mut v = serde_json::to_value(q)?;
        let s = serde_json::to_value(&sol)?;
        if let (Some(o), serde_json::Value::Object(so)) = (v.as_object_mut(), s) {
            o.extend(so);
            if let Some((k, r)) = reference {
                o.insert(k.to_string(), serde_json::json!(r));
            }
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else if sol.feasible {
        outln!(
            "{} {} cost ({} embeddings, T = {}, d = {d}, Δ = {delta:.6}): {:.6}  (certified bracket [{:.6}, {:.6}], relative gap {:.2e}, {} {} iterations, rank {})",
            a.pattern(),
            a.norm(),
            a.embedding,
            t,
            sol.value.unwrap_or(f64::NAN),
            sol.lower.unwrap_or(f64::NAN),
            sol.value.unwrap_or(f64::NAN),
            sol.rel_gap.unwrap_or(f64::NAN),
            sol.iterations,
            sol.solver,
            sol.rank.unwrap_or(0),
        );
        if let Some(why) = &sol.fallback {
            outln!("interior-point solver not used: {why}");
        }
        if let Some((k, r)) = reference {
            outln!("{k}: {r:.6}");
        }
    } else {
        print_infeasible(&sol, "")?;
    }
    Ok(0)
}

fn run_head(
    a: &Args,
    q: &CostQuery,
    opts: SolveOptions,
    trained: &TrainedEmbeddings,
) -> Result<i32> {
    let h = solve_head_query(q, opts, trained).context("solving the whole-head programs")?;
    let pi = head::sources(q.t, q.on_rate, q.seed)?;
    let reference = match (a.embedding, a.norm()) {
        (EmbeddingKind::Orthonormal, NormKind::Fro) => {
            let (cq, cv) = head::fro_orthonormal(q.t, h.sources, q.delta);
            Some(("closed_form", cq, cv))
        }
        (EmbeddingKind::Orthonormal, NormKind::Nuclear) => Some((
            "witness_upper_bound",
            head::nuclear_witness(&head::qk_targets(q.pattern, &pi), q.delta),
            q.delta * h.sources as f64,
        )),
        _ => None,
    };
    if a.json {
        let mut v = serde_json::to_value(q)?;
        if let (Some(o), serde_json::Value::Object(ho)) =
            (v.as_object_mut(), serde_json::to_value(&h)?)
        {
            o.extend(ho);
            o.insert("sources_map".into(), serde_json::json!(pi));
            if let Some((k, rq, rv)) = reference {
                o.insert(
                    k.to_string(),
                    serde_json::json!({"qk": rq, "vo": rv, "total": rq + rv}),
                );
            }
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let part = |name: &str, s: &sinklab::cost::CostSolution| {
        if s.feasible {
            format!(
                "{name} {:.6} (bracket [{:.6}, {:.6}], gap {:.1e})",
                s.value.unwrap_or(f64::NAN),
                s.lower.unwrap_or(f64::NAN),
                s.value.unwrap_or(f64::NAN),
                s.rel_gap.unwrap_or(f64::NAN)
            )
        } else {
            format!(
                "{name} infeasible (certificate verified: {})",
                s.certificate.as_ref().is_some_and(|c| c.verified)
            )
        }
    };
    outln!(
        "whole head, {} {} on copy-paste ({} embeddings, T = {}, d = {}, Δ = {:.6}, {} on-queries, {} sources): {}",
        q.pattern,
        q.norm,
        q.embedding,
        q.t,
        q.d,
        q.delta,
        h.on_queries,
        h.sources,
        h.value
            .map_or("infeasible".to_string(), |v| format!("{v:.6}"))
    );
    outln!("  {}", part("W_QK", &h.qk));
    outln!("  {}", part("W_VO", &h.vo));
    if let Some((k, rq, rv)) = reference {
        outln!("{k}: W_QK {rq:.6}, W_VO {rv:.6}, total {:.6}", rq + rv);
    }
    Ok(0)
}

/// The rows of tensor `x` ([N, d]; f32, f64, f16 or bf16) of a safetensors file as f64, the first
/// `t` of them when given. Refuses a missing `x`, another rank or dtype, a non-finite entry,
/// and `t` outside 2..=N.
fn load_embeddings(path: &Path, t: Option<usize>) -> Result<faer::Mat<f64>> {
    use safetensors::{Dtype, SafeTensors};
    let shown = path.display();
    let bytes = sinklab::budget::read_input(path, sinklab::budget::MAX_TENSOR_FILE_BYTES)
        .with_context(|| format!("--embeddings {shown}"))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| anyhow::anyhow!("--embeddings {shown}: not a valid safetensors file: {e}"))?;
    let Ok(x) = st.tensor("x") else {
        let mut names = st.names();
        names.sort();
        bail!("--embeddings {shown}: no tensor `x` (tensors: {names:?})");
    };
    let &[n, d] = x.shape() else {
        bail!(
            "--embeddings {shown}: `x` has shape {:?}; need rank 2, [N, d]",
            x.shape()
        );
    };
    let data = x.data();
    let vals: Vec<f64> = match x.dtype() {
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        other => bail!("--embeddings {shown}: `x` has dtype {other:?}; need f32, f64, f16 or bf16"),
    };
    if vals.len() != n * d {
        bail!(
            "--embeddings {shown}: `x` holds {} values for shape [{n}, {d}]",
            vals.len()
        );
    }
    if d == 0 {
        bail!("--embeddings {shown}: `x` has no columns (d = 0)");
    }
    let t = t.unwrap_or(n);
    if t < 2 {
        bail!("--t {t}: need at least 2 rows (the sink and one query)");
    }
    if t > n {
        bail!("--t {t}: the file's `x` has only N = {n} rows");
    }
    if let Some(k) = vals[..t * d].iter().position(|v| !v.is_finite()) {
        bail!(
            "--embeddings {shown}: `x` has a non-finite entry at row {}, column {}",
            k / d,
            k % d
        );
    }
    Ok(faer::Mat::from_fn(t, d, |i, j| vals[i * d + j]))
}

/// `--embeddings`: the program on the file's rows (W_QK alone or the whole head).
fn run_file(a: &Args, q: &CostQuery, x: &faer::Mat<f64>, opts: SolveOptions) -> Result<i32> {
    let path = a
        .embeddings
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut v = serde_json::json!({
        "embeddings": path,
        "pattern": q.pattern,
        "norm": q.norm,
        "t": q.t,
        "d": q.d,
        "delta": q.delta,
        "scope": q.scope,
    });
    let (sol, parts) = match q.scope {
        Scope::Qk => (
            sinklab::cost::solve_query_on(q, x.as_ref(), opts)
                .context("solving the gap program")?,
            None,
        ),
        Scope::Head => {
            let h = sinklab::cost::solve_head_query_on(q, x.as_ref(), opts)
                .context("solving the whole-head programs")?;
            (h.total(), Some(h))
        }
    };
    if let Some(o) = v.as_object_mut() {
        if let serde_json::Value::Object(so) = serde_json::to_value(&sol)? {
            o.extend(so);
        }
        if let Some(h) = &parts {
            o.insert("on_rate".into(), serde_json::json!(q.on_rate));
            o.insert("seed".into(), serde_json::json!(q.seed));
            o.insert("qk".into(), serde_json::to_value(&h.qk)?);
            o.insert("vo".into(), serde_json::to_value(&h.vo)?);
        }
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else if sol.feasible {
        outln!(
            "{} {} cost{} ({path}, T = {}, d = {}, Δ = {:.6}): {:.6}  (certified bracket [{:.6}, {:.6}], relative gap {:.2e}, solver {})",
            q.pattern,
            q.norm,
            if parts.is_some() {
                " of the whole head"
            } else {
                ""
            },
            q.t,
            q.d,
            q.delta,
            sol.value.unwrap_or(f64::NAN),
            sol.lower.unwrap_or(f64::NAN),
            sol.value.unwrap_or(f64::NAN),
            sol.rel_gap.unwrap_or(f64::NAN),
            sol.solver,
        );
        if let Some(why) = &sol.fallback {
            outln!("interior-point solver not used: {why}");
        }
    } else {
        print_infeasible(&sol, " on these points")?;
    }
    Ok(0)
}

/// The infeasibility line: the certificate's convex weights and its re-checked residual.
fn print_infeasible(sol: &sinklab::cost::CostSolution, on: &str) -> Result<()> {
    let c = sol.certificate.as_ref();
    outln!(
        "infeasible: the half-space conditions fail{on}; certificate with {} convex weights, ‖Σλ A‖_F = {:.3e} (scale {:.3e}, verified {})",
        c.map_or(0, |c| c.weights.len()),
        c.map_or(f64::NAN, |c| c.residual),
        c.map_or(f64::NAN, |c| c.scale),
        c.is_some_and(|c| c.verified)
    );
    Ok(())
}

/// `--sink-logit`: the selective sink-logit program on the copy-paste head, beside the BOS
/// sink's and the diagonal's whole-head W_QK programs and the selective gate on the same sources.
fn run_sink_logit(a: &Args) -> Result<i32> {
    use sinklab::cost::sink_logit::{
        SinkLogitProgram, counts, fro_assumption, fro_closed_form, fro_optimum,
        nuclear_closed_form, nuclear_optimum,
    };
    use sinklab::explicit_switch::{gate_cost_orthonormal, switch_logit};
    let Some(norm) = a.norm else {
        bail!("--sink-logit needs --norm fro|nuclear");
    };
    let Some(t) = a.t else {
        bail!("--sink-logit needs --t T");
    };
    if t < 3 {
        bail!("--t {t}: copy-paste needs T >= 3 (a source after BOS and a later query)");
    }
    if a.embedding == EmbeddingKind::Trained {
        bail!("--sink-logit takes --embedding orthonormal or gaussian, not trained");
    }
    if !cfg!(feature = "ipm") {
        bail!("--sink-logit: this build has no interior-point solver (the `ipm` feature is off)");
    }
    if a.solver != Method::Ipm {
        bail!("--sink-logit is solved by the interior-point solver only: drop --solver");
    }
    if !(a.tol > 0.0 && a.tol < 1.0) || a.max_iter == 0 {
        bail!("--tol must lie in (0, 1) and --max-iter be at least 1");
    }
    let d = a.d.unwrap_or(t);
    if d == 0 {
        bail!("--d 0: the embedding dimension must be at least 1");
    }
    if let Some(e) = a.eps
        && !(e > 0.0 && e < 1.0)
    {
        bail!("--eps {e}: the leak must lie in (0, 1)");
    }
    if !(a.on_rate > 0.0 && a.on_rate < 1.0) {
        bail!("--on-rate {}: must lie in (0, 1)", a.on_rate);
    }
    // Δ = δ: the given gap, or ln(T(1−ε)/ε), which switches every row of length ≤ T off (δ)
    // and leaves an on-query's source mass ≥ 1−ε against its ≤ T competitors (Δ).
    let eps = a.eps.unwrap_or(0.01);
    let delta = match a.delta {
        Some(x) => x,
        None => sinklab::explicit_switch::sink_logit_for_context(t, eps),
    };
    use sinklab::sweep::cost_scaling::spec::{MAX_DELTA, MIN_DELTA};
    if !(delta > MIN_DELTA && delta < MAX_DELTA) {
        bail!(
            "the gap {delta:e} is outside ({MIN_DELTA:e}, {MAX_DELTA:e}); the cost is proportional to it, so solve inside and scale"
        );
    }
    let budget = sinklab::budget::Budget::with(a.max_mem.as_deref(), a.max_time.as_deref())?;
    let est = sinklab::budget::cost_program(t, d, norm == NormKind::Nuclear);
    budget.check(&format!("cost --sink-logit --t {t} --d {d}"), est, true)?;
    let pi = head::sources(t, a.on_rate, a.seed)?;
    let x = sinklab::cost::embeddings(a.embedding, t, d, a.seed)?;
    let p = SinkLogitProgram::new(x.as_ref(), &pi, delta, delta)?;
    let threads = rayon::current_num_threads();
    // --tol and --max-iter reach the first-order solver, which answers the BOS sink's and the
    // diagonal's programs beyond the interior-point caps.
    let opts = SolveOptions {
        rel_gap: a.tol,
        max_iter: a.max_iter,
        par: faer::Par::rayon(threads),
        method: Method::Ipm,
        ..SolveOptions::default()
    };
    #[cfg(feature = "ipm")]
    let sol = p.solve(norm, &opts).map_err(|e| e.to_string());
    #[cfg(not(feature = "ipm"))]
    let sol: std::result::Result<sinklab::cost::sink_logit::SinkLogitCost, String> =
        Err("no interior-point solver in this build".to_string());
    let c = counts(&pi);
    // The closed form on orthonormal embeddings, proved (or not) by its own dual certificate.
    let closed = p.is_orthonormal().then(|| {
        let (value, proved) = match norm {
            NormKind::Fro => {
                let (m, s) = fro_optimum(&pi, delta, delta);
                let ok = fro_assumption(&pi, delta, delta)
                    && p.check_pair(norm, m.as_ref(), s, &p.fro_dual()).optimal;
                (fro_closed_form(&pi, delta, delta), ok)
            }
            NormKind::Nuclear => {
                let (m, s) = nuclear_optimum(&pi, delta, delta);
                let ok = p
                    .nuclear_dual()
                    .is_some_and(|l| p.check_pair(norm, m.as_ref(), s, &l).optimal);
                (nuclear_closed_form(&pi, delta, delta), ok)
            }
        };
        (value, proved)
    });
    // The BOS sink and the diagonal on the same sources (the whole head's W_QK program, gap Δ).
    let other = |pattern: Pattern| -> serde_json::Value {
        let q = head::qk_program(x.as_ref(), pattern, &pi, delta);
        match q.and_then(|q| sinklab::cost::solve(&q, norm, opts)) {
            Ok(s) if s.feasible => serde_json::json!({
                "lower": s.lower, "upper": s.value, "solver": s.solver, "fallback": s.fallback,
            }),
            Ok(_) => serde_json::json!({"infeasible": true}),
            Err(e) => serde_json::json!({"error": e.to_string()}),
        }
    };
    let (bos, diagonal) = (other(Pattern::Sink), other(Pattern::Diagonal));
    let gate = gate_cost_orthonormal(c.n_on, c.n_off, switch_logit(eps));
    let v = serde_json::json!({
        "t": t, "d": d, "embedding": a.embedding, "norm": norm, "delta_on": delta,
        "delta_off": delta, "eps": eps, "on_rate": a.on_rate, "seed": a.seed,
        "on_queries": c.n_on, "off_queries": c.n_off, "sources_sqrt_sum": c.sqrt_sum,
        "sink_logit": match &sol {
            Ok(s) => serde_json::json!({"lower": s.lower, "upper": s.upper, "rel_gap": s.rel_gap, "s": s.s, "iterations": s.iterations}),
            Err(e) => serde_json::json!({"error": e}),
        },
        "closed_form": closed.map(|(v, ok)| serde_json::json!({"value": v, "proved_by_dual": ok})),
        "bos_sink_qk": bos, "diagonal_qk": diagonal,
        "selective_gate_orthonormal": gate,
    });
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    outln!(
        "selective sink logit, {norm} ({} embeddings, T = {t}, d = {d}, Δ = δ = {delta:.6}, {} on- and {} off-queries, seed {}):",
        a.embedding,
        c.n_on,
        c.n_off,
        a.seed
    );
    match &sol {
        Ok(s) => outln!(
            "  min cost {:.9}  (certified bracket [{:.9}, {:.9}], relative gap {:.2e}; s = {:.6})",
            s.upper,
            s.lower,
            s.upper,
            s.rel_gap,
            s.s
        ),
        Err(e) => outln!("  solver not run or failed: {e}"),
    }
    if let Some((v, ok)) = closed {
        outln!(
            "  closed form {v:.9} ({})",
            if ok {
                "its assumption holds; proved by its dual certificate"
            } else {
                "its assumption fails: not the minimum"
            }
        );
    }
    let show = |name: &str, j: &serde_json::Value| match (
        j.get("lower").and_then(|x| x.as_f64()),
        j.get("upper").and_then(|x| x.as_f64()),
    ) {
        (Some(lo), Some(hi)) => format!("{name} W_QK [{lo:.6}, {hi:.6}]"),
        _ => format!("{name} W_QK {j}"),
    };
    outln!("  {}", show("BOS sink", &bos));
    outln!("  {}", show("diagonal", &diagonal));
    outln!("  selective gate on orthonormal queries (ε = {eps}): min ‖w‖ = {gate:.6}");
    Ok(0)
}
