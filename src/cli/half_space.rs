//! `sinklab half-space --file instance.safetensors [--eps E] [--json]`: the half-space verdict
//! (docs/theory.md §3, [`sinklab::geometry::half_space`]) on one's own instance: tensors `queries`
//! `[n, d]`, `keys` `[m, d]` (the non-sink keys) and `sink` `[d]`, F32 or F64.

use anyhow::{Context, Result, anyhow, bail};
use safetensors::{Dtype, SafeTensors};
use sinklab::geometry::half_space::{Obstruction, Verdict, half_space_verdict_rows};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  The verdict on an instance written with numpy and safetensors (tensors queries, keys, sink):
    sinklab half-space --file instance.safetensors
  The same with a leak of 0.01, as JSON (witness or convex weights, margins):
    sinklab half-space --file instance.safetensors --eps 0.01 --json")]
pub struct Args {
    /// Instance file (safetensors): tensors queries, keys, sink
    ///
    /// queries [n, d], keys [m, d] (the non-sink keys) and sink [d], F32 or F64, finite.
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// Leak ε: the witness puts mass ≥ 1 − ε on the sink
    ///
    /// A witness W puts attention mass at least 1 − ε on the sink for every query.
    #[arg(long, value_name = "E", default_value_t = 0.1)]
    eps: f64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Tensor `name` as f64 values and its shape, refused unless `ndim`-dimensional, non-empty,
/// F32/F64 and finite.
fn read(st: &SafeTensors<'_>, name: &str, ndim: usize) -> Result<(Vec<f64>, Vec<usize>)> {
    let t = st
        .tensor(name)
        .map_err(|_| anyhow!("no tensor `{name}` (an instance holds queries, keys, sink)"))?;
    let shape = t.shape().to_vec();
    if shape.len() != ndim || shape.contains(&0) {
        bail!("tensor `{name}` has shape {shape:?}: expected a non-empty {ndim}-D tensor");
    }
    let b = t.data();
    let v: Vec<f64> = match t.dtype() {
        Dtype::F64 => b
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("chunk of 8")))
            .collect(),
        Dtype::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("chunk of 4")) as f64)
            .collect(),
        d => bail!("tensor `{name}` has dtype {d:?}: give F32 or F64"),
    };
    if let Some(k) = v.iter().position(|x| !x.is_finite()) {
        bail!("tensor `{name}` has a non-finite value at index {k}");
    }
    Ok((v, shape))
}

pub fn run(a: Args) -> Result<i32> {
    let bytes = sinklab::budget::read_input(&a.file, sinklab::budget::MAX_TENSOR_FILE_BYTES)
        .with_context(|| format!("reading {}", a.file.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| anyhow!("{}: not a valid safetensors file: {e}", a.file.display()))?;
    let (q, qs) = read(&st, "queries", 2)?;
    let (k, ks) = read(&st, "keys", 2)?;
    let (s, ss) = read(&st, "sink", 1)?;
    let d = ss[0];
    if qs[1] != d || ks[1] != d {
        bail!("queries {qs:?}, keys {ks:?} and sink {ss:?} disagree on the width d");
    }
    // The witness is d × d, the solver's copies of the points (n + m) × d.
    let need = 8.0 * ((d * d) as f64 + 2.0 * ((qs[0] + ks[0]) * d) as f64);
    sinklab::budget::Budget::default().check(
        &format!("half-space on {} queries, {} keys in R^{d}", qs[0], ks[0]),
        sinklab::budget::Need::bytes(need),
        false,
    )?;
    let qr: Vec<&[f64]> = q.chunks(d).collect();
    let kr: Vec<&[f64]> = k.chunks(d).collect();
    let v = half_space_verdict_rows(&qr, &s, &kr, a.eps)?;
    let verified = v.verify(&qr, &s, &kr);
    let mut weights = serde_json::json!({"queries": null, "keys": null});
    let witness = match &v {
        Verdict::Representable(w) => {
            let c = w.verify(&qr, &s, &kr);
            let rows: Vec<Vec<f64>> = (0..w.w.nrows())
                .map(|i| (0..w.w.ncols()).map(|j| w.w[(i, j)]).collect())
                .collect();
            serde_json::json!({
                "a": w.a, "b": w.b, "gamma_a": w.gamma_a, "gamma_b": w.gamma_b, "c": w.c,
                "gap": w.gap, "cost": w.cost(), "worst_sink_mass": c.worst_sink_mass,
                "margin": c.margin, "w": rows,
            })
        }
        Verdict::NotRepresentable(obs) => {
            for o in obs {
                match o {
                    Obstruction::QueriesNotInHalfSpace { lambda } => {
                        weights["queries"] = serde_json::json!(lambda.lambda)
                    }
                    Obstruction::SinkNotSeparable { mu } => {
                        weights["keys"] = serde_json::json!(mu.lambda)
                    }
                }
            }
            serde_json::Value::Null
        }
    };
    if a.json {
        let j = serde_json::json!({
            "file": a.file.display().to_string(), "n": qs[0], "m": ks[0], "d": d, "eps": a.eps,
            "representable": v.is_representable(), "queries_fail": v.queries_fail(),
            "sink_fails": v.sink_fails(), "verified": verified, "witness": witness,
            "weights": weights,
        });
        outln!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        outln!(
            "{} queries, {} keys in R^{d}, eps = {}: representable: {}; (a) queries in a half-space: {}; (b) sink separable: {}; certificate verified: {verified}",
            qs[0],
            ks[0],
            a.eps,
            v.is_representable(),
            !v.queries_fail(),
            !v.sink_fails()
        );
        if let Verdict::Representable(w) = &v {
            outln!(
                "witness W = c a b^T: cost {:.6e}, gamma_a {:.6e}, gamma_b {:.6e}, worst sink mass {:.6}",
                w.cost(),
                w.gamma_a,
                w.gamma_b,
                witness["worst_sink_mass"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    Ok(0)
}
