//! `sinklab._native`: the thin binding layer between Python and the sinklab crate.
//!
//! Every function here converts its arguments, runs the crate's own code with the GIL released
//! (`Python::detach`) and inside `catch_unwind` (a Rust panic becomes a `sinklab.Error`, never
//! a crash of the interpreter), and converts the result. Arrays leave as numpy arrays that own
//! the crate's buffers (no copy); arrays enter already validated and made contiguous by the
//! Python layer (`sinklab/_arrays.py`), and are checked again here for shape.
//!
//! The public names and their documentation are in `sinklab/__init__.py` and
//! `sinklab/__init__.pyi`.

use numpy::ndarray::{Array, IxDyn};
use numpy::{IntoPyArray, PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sinklab::runtime::LoadedModel;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

create_exception!(
    sinklab,
    Error,
    PyValueError,
    "An error from sinklab: bad input, a refused size, a model file problem. The message is the one the command line prints."
);

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs `f` without the GIL and with panics caught; its error text becomes a `sinklab.Error`.
fn compute<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, String> + Send) -> PyResult<T> {
    py.detach(|| catch_unwind(AssertUnwindSafe(f)))
        .map_err(|p| {
            Error::new_err(format!(
                "internal error (a Rust panic; please report it): {}",
                panic_text(p)
            ))
        })?
        .map_err(Error::new_err)
}

/// A numpy array owning `v`, of shape `shape` (no copy).
fn owned<'py, T: numpy::Element>(
    py: Python<'py>,
    v: Vec<T>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let a = Array::from_shape_vec(IxDyn(shape), v)
        .map_err(|e| Error::new_err(format!("internal shape error: {e}")))?;
    Ok(a.into_pyarray(py))
}

fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    let s = serde_json::to_string(v).map_err(|e| Error::new_err(e.to_string()))?;
    json_text_to_py(py, s)
}

/// Python objects from JSON text (`json.loads`): the numbers read exactly as the command
/// line's JSON output prints them.
fn json_text_to_py(py: Python<'_>, s: String) -> PyResult<Bound<'_, PyAny>> {
    py.import("json")?.call_method1("loads", (s,))
}

/// The rows of a contiguous 2-D f64 array.
fn rows_of(a: &PyReadonlyArrayDyn<'_, f64>, name: &str) -> PyResult<Vec<Vec<f64>>> {
    let s = a.shape();
    if s.len() != 2 {
        return Err(Error::new_err(format!(
            "{name}: expected a 2-D array, got shape {s:?}"
        )));
    }
    let data = a
        .as_slice()
        .map_err(|_| Error::new_err(format!("{name}: not contiguous")))?;
    Ok(data.chunks(s[1].max(1)).map(<[f64]>::to_vec).collect())
}

fn slices(v: &[Vec<f64>]) -> Vec<&[f64]> {
    v.iter().map(Vec::as_slice).collect()
}

// ---------------------------------------------------------------------------------------------
// Models

/// A loaded model (see `sinklab.load`).
#[pyclass(frozen, module = "sinklab")]
pub struct Model {
    lm: Arc<LoadedModel>,
    name: String,
}

/// The tensors of one run (see `Model.run`).
#[pyclass(frozen, module = "sinklab")]
pub struct Run {
    /// Token ids, `list[int]`.
    #[pyo3(get)]
    tokens: Vec<u32>,
    /// `[L+1, T, d]` float32: index 0 the embedding output, l the residual after block l.
    #[pyo3(get)]
    hidden: Option<Py<PyAny>>,
    /// `[L, H, T, T]` float32 attention probabilities.
    #[pyo3(get)]
    attention: Option<Py<PyAny>>,
    /// `[L, H, T, d_head]` float32, after q-norm and RoPE.
    #[pyo3(get)]
    queries: Option<Py<PyAny>>,
    /// `[L, H_kv, T, d_head]` float32, after k-norm and RoPE.
    #[pyo3(get)]
    keys: Option<Py<PyAny>>,
    /// `[L, H_kv, T, d_head]` float32.
    #[pyo3(get)]
    values: Option<Py<PyAny>>,
    /// `[L, T, d]` float32: the MLP's contribution to the residual stream.
    #[pyo3(get)]
    mlp_out: Option<Py<PyAny>>,
    /// `[T-1]` float64 next-token loss in nats (None without a language-model head).
    #[pyo3(get)]
    nll: Option<Py<PyAny>>,
}

#[pymethods]
impl Run {
    fn __repr__(&self) -> String {
        format!("Run(T={})", self.tokens.len())
    }
}

fn bos_of(bos: Option<bool>) -> sinklab::runtime::tokenizer::Bos {
    use sinklab::runtime::tokenizer::Bos;
    match bos {
        None => Bos::Auto,
        Some(true) => Bos::Yes,
        Some(false) => Bos::No,
    }
}

/// Loads a model: a packaged name, a GGUF file or a Hugging Face directory.
#[pyfunction]
#[pyo3(signature = (model, weights = "file", matmul = "exact", max_mem = None))]
fn load(
    py: Python<'_>,
    model: String,
    weights: &str,
    matmul: &str,
    max_mem: Option<String>,
) -> PyResult<Model> {
    let f32_weights = match weights {
        "file" => false,
        "f32" => true,
        w => {
            return Err(Error::new_err(format!(
                "weights={w:?}: give \"file\" (as stored) or \"f32\" (converted at load)"
            )));
        }
    };
    let q8 = match matmul {
        "exact" => false,
        "q8" => true,
        m => {
            return Err(Error::new_err(format!(
                "matmul={m:?}: give \"exact\" or \"q8\""
            )));
        }
    };
    let name = model.clone();
    let lm = compute(py, move || {
        let path = sinklab::runtime::fetch::resolve(&model).map_err(|e| e.to_string())?;
        let mut lm = sinklab::runtime::load(&path)
            .map_err(|e| format!("loading {}: {e}", path.display()))?;
        if f32_weights {
            let budget = sinklab::budget::Budget::with(max_mem.as_deref(), None)
                .map_err(|e| e.to_string())?;
            let bytes = 4.0 * lm.model.matrix_elements() as f64;
            budget
                .check(
                    "weights=\"f32\"",
                    sinklab::budget::Need::bytes(bytes),
                    false,
                )
                .map_err(|e| e.to_string())?;
            lm.model.make_f32_resident();
        }
        if q8 {
            lm.model.matmul = sinklab::runtime::weights::Matmul::Q8;
        }
        Ok(lm)
    })?;
    Ok(Model {
        lm: Arc::new(lm),
        name,
    })
}

impl Model {
    fn check_tokens(&self, tokens: &[u32]) -> PyResult<()> {
        if tokens.is_empty() {
            return Err(Error::new_err("tokens: empty token sequence"));
        }
        let v = self.lm.model.cfg.vocab;
        if let Some((i, t)) = tokens.iter().enumerate().find(|(_, t)| **t as usize >= v) {
            return Err(Error::new_err(format!(
                "tokens: id {t} at position {i} is outside the vocabulary (size {v})"
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl Model {
    /// The architecture's hyper-parameters, a dict.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v =
            serde_json::to_value(&self.lm.model.cfg).map_err(|e| Error::new_err(e.to_string()))?;
        json_to_py(py, &v)
    }

    /// The name or path given to `load`.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The file or directory loaded.
    #[getter]
    fn path(&self) -> String {
        self.lm.path.display().to_string()
    }

    fn __repr__(&self) -> String {
        let c = &self.lm.model.cfg;
        format!(
            "Model({:?}, L={}, d={}, H={}, H_kv={}, d_head={})",
            self.name, c.n_layer, c.d_model, c.n_head, c.n_kv_head, c.head_dim
        )
    }

    /// Token ids of `text` (the CLI's defaults: the model's BOS policy unless `bos` says).
    #[pyo3(signature = (text, bos = None, chat = false))]
    fn tokenize(
        &self,
        py: Python<'_>,
        text: String,
        bos: Option<bool>,
        chat: bool,
    ) -> PyResult<Vec<u32>> {
        if chat && bos.is_some() {
            return Err(Error::new_err(
                "bos: the chat template decides the BOS; give bos=None with chat=True",
            ));
        }
        let lm = &*self.lm;
        compute(py, || {
            let tok = lm.tok.as_ref().ok_or_else(|| {
                format!(
                    "{}: no tokenizer in the model files; give token ids",
                    lm.path.display()
                )
            })?;
            if chat {
                tok.encode_chat(&text, &lm.path).map_err(|e| e.to_string())
            } else {
                tok.encode(&text, bos_of(bos)).map_err(|e| e.to_string())
            }
        })
    }

    /// The text of token ids.
    fn decode(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<String> {
        let lm = &*self.lm;
        compute(py, || {
            let tok = lm
                .tok
                .as_ref()
                .ok_or_else(|| format!("{}: no tokenizer in the model files", lm.path.display()))?;
            Ok(tok.decode(&ids))
        })
    }

    /// Runs the model once on `tokens` and returns the requested tensors.
    #[pyo3(signature = (tokens, hidden = true, attention = false, qkv = false, mlp = false, nll = true, max_mem = None))]
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        py: Python<'_>,
        tokens: Vec<u32>,
        hidden: bool,
        attention: bool,
        qkv: bool,
        mlp: bool,
        nll: bool,
        max_mem: Option<String>,
    ) -> PyResult<Run> {
        use sinklab::runtime::tensors::{TensorRequest, run_tensors};
        self.check_tokens(&tokens)?;
        let r = TensorRequest {
            hidden,
            attention,
            qkv,
            mlp,
            nll,
        };
        let lm = &*self.lm;
        let x = compute(py, || {
            let budget = sinklab::budget::Budget::with(max_mem.as_deref(), None)
                .map_err(|e| e.to_string())?;
            sinklab::runtime::on_a_pool_worker(|| run_tensors(&lm.model, &tokens, r, &budget))
                .map_err(|e| e.to_string())
        })?;
        let (l, t, d) = (x.n_layer, x.tokens.len(), x.d_model);
        let (h, hk, dh) = (x.n_head, x.n_kv_head, x.head_dim);
        let arr = |v: Option<Vec<f32>>, shape: &[usize]| -> PyResult<Option<Py<PyAny>>> {
            v.map(|v| owned(py, v, shape).map(|a| a.into_any().unbind()))
                .transpose()
        };
        let nll = match x.nll {
            Some(v) => {
                let n = v.len();
                Some(owned(py, v, &[n])?.into_any().unbind())
            }
            None => None,
        };
        Ok(Run {
            tokens: x.tokens,
            hidden: arr(x.hidden, &[l + 1, t, d])?,
            attention: arr(x.attention, &[l, h, t, t])?,
            queries: arr(x.queries, &[l, h, t, dh])?,
            keys: arr(x.keys, &[l, hk, t, dh])?,
            values: arr(x.values, &[l, hk, t, dh])?,
            mlp_out: arr(x.mlp_out, &[l, t, d])?,
            nll,
        })
    }

    /// Greedy decoding with a KV cache: `tokens` followed by up to `n` new ids.
    fn generate(&self, py: Python<'_>, tokens: Vec<u32>, n: usize) -> PyResult<Vec<u32>> {
        self.check_tokens(&tokens)?;
        sinklab::budget::size(
            &format!("n={n}"),
            n,
            self.lm.model.cfg.max_context,
            "the model's context",
        )
        .map_err(|e| Error::new_err(e.to_string()))?;
        let lm = &*self.lm;
        compute(py, || {
            sinklab::runtime::on_a_pool_worker(|| lm.model.generate_greedy(&tokens, n, &mut ()))
                .map_err(|e| e.to_string())
        })
    }

    /// The per-layer statistics report, as `sinklab real --json` prints it.
    fn stats<'py>(&self, py: Python<'py>, tokens: Vec<u32>) -> PyResult<Bound<'py, PyAny>> {
        self.check_tokens(&tokens)?;
        let lm = &*self.lm;
        // Serialised from the report itself (not through a JSON value), so f32 fields print as
        // `sinklab real --json` prints them.
        let v = compute(py, || {
            let rep = sinklab::runtime::on_a_pool_worker(|| {
                sinklab::real::analysis::analyze(lm, &tokens, false, &mut ())
            })
            .map_err(|e| e.to_string())?;
            serde_json::to_string(&rep).map_err(|e| e.to_string())
        })?;
        json_text_to_py(py, v)
    }

    /// Writes the offline HTML page of `sinklab view` for `tokens` to `path`; returns what was
    /// written (path, bytes, T, resolution, exact heads).
    #[pyo3(signature = (tokens, path, heads = None, max_res = sinklab::view::DEFAULT_MAX_RES, a1 = false, max_mem = None))]
    #[allow(clippy::too_many_arguments)]
    fn view<'py>(
        &self,
        py: Python<'py>,
        tokens: Vec<u32>,
        path: std::path::PathBuf,
        heads: Option<String>,
        max_res: usize,
        a1: bool,
        max_mem: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.check_tokens(&tokens)?;
        if max_res < 1 {
            return Err(Error::new_err("max_res must be at least 1"));
        }
        let lm = &*self.lm;
        let v = compute(py, move || {
            // The page never replaces an input of the run: the model's file, or any file of its
            // directory (the command line's rule).
            let mut inputs = vec![lm.path.clone()];
            if let Ok(rd) = std::fs::read_dir(&lm.path) {
                inputs.extend(rd.flatten().take(10_000).map(|e| e.path()));
            }
            let named: Vec<(&str, &std::path::Path)> =
                inputs.iter().map(|p| ("model", p.as_path())).collect();
            sinklab::atomic::check_not_input(&path, &named).map_err(|e| format!("path: {e}"))?;
            let c = &lm.model.cfg;
            let exact = match &heads {
                Some(s) => sinklab::view::parse_heads(s, c.n_layer, c.n_head)
                    .map_err(|e| format!("heads: {e}"))?,
                None => Vec::new(),
            };
            if tokens.len() > c.max_context {
                return Err(format!(
                    "{} tokens exceed the context of {}, {} tokens",
                    tokens.len(),
                    lm.path.display(),
                    c.max_context
                ));
            }
            let budget = sinklab::budget::Budget::with(max_mem.as_deref(), None)
                .map_err(|e| e.to_string())?;
            let need =
                sinklab::budget::view_page(c.n_layer, c.n_head, tokens.len(), max_res, exact.len());
            budget
                .check(
                    &format!("view: T = {} with max_res = {max_res}", tokens.len()),
                    need,
                    false,
                )
                .map_err(|e| e.to_string())?;
            let n_exact = exact.len();
            let mut d = sinklab::runtime::on_a_pool_worker(|| {
                sinklab::view::assemble::from_model(
                    lm,
                    &tokens,
                    max_res,
                    exact,
                    &mut |_: usize, _: usize| {},
                )
            })
            .map_err(|e| e.to_string())?;
            if a1 {
                d.realised = Some(
                    sinklab::runtime::on_a_pool_worker(|| {
                        sinklab::view::realised_grid(&lm.model, &tokens)
                    })
                    .map_err(|e| e.to_string())?,
                );
            }
            let html = sinklab::view::render(&d).map_err(|e| e.to_string())?;
            sinklab::atomic::write(&path, &html)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            Ok(serde_json::json!({
                "path": path.display().to_string(),
                "bytes": html.len(),
                "t": d.t,
                "res": d.res,
                "exact": n_exact,
            }))
        })?;
        json_to_py(py, &v)
    }
}

// ---------------------------------------------------------------------------------------------
// The §9 pattern metrics

/// Per-head §9 metrics of maps `[H, T, T_k]` (f64, C order), with values `[T_k, H_kv·d_head]`
/// when given: the crate's `real::stats::head_stats_of_map` per head and its
/// `attention_summary` for the layer, Gu's α_k of every key and the column entropy per head;
/// with `learned_sink` the rows hold the visible keys of heads with a learned sink logit, and
/// `learned_sink_mass` = mean over heads and queries i ≥ 1 of 1 − Σ_j A_ij.
#[pyfunction]
#[pyo3(signature = (maps, values, h_kv, causal, window, learned_sink=false))]
fn pattern_metrics<'py>(
    py: Python<'py>,
    maps: PyReadonlyArrayDyn<'py, f64>,
    values: Option<PyReadonlyArrayDyn<'py, f32>>,
    h_kv: usize,
    causal: bool,
    window: Option<usize>,
    learned_sink: bool,
) -> PyResult<Bound<'py, PyAny>> {
    use sinklab::real::stats::{Dims, attention_summary, head_stats_of_map};
    let s = maps.shape().to_vec();
    if s.len() != 3 {
        return Err(Error::new_err(format!(
            "maps: expected [H, T, T], got shape {s:?}"
        )));
    }
    let (h, t, tk) = (s[0], s[1], s[2]);
    let a = maps
        .as_slice()
        .map_err(|_| Error::new_err("maps: not contiguous"))?
        .to_vec();
    let (v, dh) = match &values {
        Some(v) => {
            let vs = v.shape();
            if vs.len() != 2 || vs[0] != tk || h_kv == 0 || vs[1] % h_kv != 0 {
                return Err(Error::new_err(format!(
                    "values: expected [T_k, H_kv·d_head] with T_k = {tk}, got shape {vs:?}"
                )));
            }
            let dh = vs[1] / h_kv;
            let data = v
                .as_slice()
                .map_err(|_| Error::new_err("values: not contiguous"))?
                .to_vec();
            (Some(data), dh)
        }
        None => (None, 1),
    };
    if h_kv == 0 || h % h_kv != 0 {
        return Err(Error::new_err(format!(
            "values: {h_kv} key/value heads do not divide the {h} heads of maps"
        )));
    }
    let out = compute(py, move || {
        let dm = Dims {
            t,
            t_keys: tk,
            d: 0,
            h,
            h_kv,
            d_head: dh,
            causal,
            window,
            pos0: 0,
            learned_sink,
        };
        let mut heads = Vec::with_capacity(h);
        let mut alpha = Vec::with_capacity(h);
        let mut col_entropy = Vec::with_capacity(h);
        for hh in 0..h {
            let m = faer::Mat::<f64>::from_fn(t, tk, |i, j| a[hh * t * tk + i * tk + j]);
            let r = head_stats_of_map(dm, hh, m.as_ref(), v.as_deref())
                .ok_or_else(|| format!("maps: head {hh} has no dominant column"))?;
            heads.push(r);
            alpha.push((tk == t).then(|| sinklab::patterns::gu_alpha(m.as_ref())));
            col_entropy.push(sinklab::patterns::column_entropy(m.as_ref()));
        }
        let sum = attention_summary(&heads, h);
        Ok(format!(
            "{{\"heads\":[{}],\"to_first\":{},\"attn_to_first\":{},\"sink_gu_eps03\":{},\"sink_gu_eps08\":{},\"learned_sink_mass\":{},\"gu_alpha\":{},\"column_entropy\":{}}}",
            heads
                .iter()
                .map(|(s, _)| js(s))
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            js(&heads.iter().map(|(_, f)| *f).collect::<Vec<_>>())?,
            js(&sum.attn_to_first)?,
            js(&sum.sink_gu_eps03)?,
            js(&sum.sink_gu_eps08)?,
            js(&sum.learned_sink_mass)?,
            js(&alpha)?,
            js(&col_entropy)?,
        ))
    })?;
    json_text_to_py(py, out)
}

// ---------------------------------------------------------------------------------------------
// The §7 oversmoothing prediction

fn prediction_json(p: &sinklab::oversmoothing::predict::Prediction) -> serde_json::Value {
    serde_json::json!({
        "rho0": p.rho0, "rho2": p.rho2, "eta": p.eta, "mean_sq": p.mean_sq,
        "trace": p.trace, "eff_rank": p.eff_rank,
    })
}

/// `oversmoothing::predict::head_prediction` on `w_vo` `[d, d]`, `mu` `[d]`, `sigma` `[d, d]`.
#[pyfunction]
#[pyo3(signature = (w_vo, mu, sigma, norm, eps, gain))]
fn oversmoothing_predict<'py>(
    py: Python<'py>,
    w_vo: PyReadonlyArrayDyn<'py, f64>,
    mu: PyReadonlyArrayDyn<'py, f64>,
    sigma: PyReadonlyArrayDyn<'py, f64>,
    norm: &str,
    eps: f64,
    gain: Option<PyReadonlyArrayDyn<'py, f64>>,
) -> PyResult<Bound<'py, PyAny>> {
    use sinklab::attention::Norm;
    let norm = match norm {
        "identity" => Norm::Identity,
        "rms" => Norm::Rms { eps },
        "layer" => Norm::Layer { eps },
        n => {
            return Err(Error::new_err(format!(
                "norm={n:?}: give \"identity\", \"rms\" or \"layer\""
            )));
        }
    };
    let w = rows_of(&w_vo, "w_vo")?;
    let sg = rows_of(&sigma, "sigma")?;
    let mu = mu
        .as_slice()
        .map_err(|_| Error::new_err("mu: not contiguous"))?
        .to_vec();
    let gain = match gain {
        Some(g) => Some(
            g.as_slice()
                .map_err(|_| Error::new_err("gain: not contiguous"))?
                .to_vec(),
        ),
        None => None,
    };
    let v = compute(py, move || {
        let mat = |r: &[Vec<f64>]| {
            let (n, m) = (r.len(), r.first().map_or(0, Vec::len));
            faer::Mat::<f64>::from_fn(n, m, |i, j| r[i][j])
        };
        let (wm, sm) = (mat(&w), mat(&sg));
        let p = sinklab::oversmoothing::predict::head_prediction(
            wm.as_ref(),
            &mu,
            sm.as_ref(),
            norm,
            gain.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        Ok(serde_json::json!({
            "identity": prediction_json(&p.identity),
            "uniform": prediction_json(&p.uniform),
            "sign": {
                "tr_identity": p.sign.tr_identity,
                "tr_dense": p.sign.tr_dense,
                "mean_sq": p.sign.mean_sq,
                "dense_smooths_more": p.sign.dense_smooths_more,
                "gap": p.sign.gap,
            },
        }))
    })?;
    json_to_py(py, &v)
}

// ---------------------------------------------------------------------------------------------
// Sweeps

/// Runs a cost-scaling sweep spec (the file `spec` when `is_path`, else TOML text named `name`
/// in errors) into `out` as `sinklab sweep` does (budget check, resume, analysis), and returns
/// the summary with the parsed records and fits.
#[pyfunction]
#[pyo3(signature = (spec, is_path, name, out, progress, analysis, threads, seed, max_mem, max_time))]
#[allow(clippy::too_many_arguments)]
fn sweep<'py>(
    py: Python<'py>,
    spec: String,
    is_path: bool,
    name: String,
    out: std::path::PathBuf,
    progress: bool,
    analysis: bool,
    threads: Option<usize>,
    seed: u64,
    max_mem: Option<String>,
    max_time: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    use sinklab::sweep::cost_scaling::{self as cs, SweepSpec};
    let v = compute(py, move || {
        let spec = if is_path {
            SweepSpec::load(std::path::Path::new(&spec))
        } else {
            SweepSpec::from_toml_named(&spec, &name)
        }
        .map_err(|e| e.to_string())?;
        if let Some(k) = threads {
            sinklab::budget::check_threads(k).map_err(|e| e.to_string())?;
        }
        let budget = sinklab::budget::Budget::with(max_mem.as_deref(), max_time.as_deref())
            .map_err(|e| e.to_string())?;
        let go = |k: usize| -> Result<serde_json::Value, String> {
            cs::check_budget(&spec, &name, &budget, k, false, None).map_err(|e| e.to_string())?;
            let s = cs::run_on(&spec, &out, None, progress, k).map_err(|e| e.to_string())?;
            let fits = if analysis {
                let (fits, _) = cs::analyze(&out, &out.join("figures"), spec.bootstrap, seed)
                    .map_err(|e| e.to_string())?;
                Some(serde_json::to_value(&fits).map_err(|e| e.to_string())?)
            } else {
                None
            };
            let records =
                cs::read_results(&out.join("results.jsonl")).map_err(|e| e.to_string())?;
            Ok(serde_json::json!({
                "name": spec.name,
                "out": out.display().to_string(),
                "total": s.total,
                "skipped": s.skipped,
                "computed": s.computed,
                "failed": s.failed,
                "first_failure": s.first_failure,
                "stale": s.stale,
                "records": serde_json::to_value(&records).map_err(|e| e.to_string())?,
                "fits": fits,
            }))
        };
        match threads {
            Some(k) => rayon::ThreadPoolBuilder::new()
                .num_threads(k)
                .build()
                .map_err(|e| format!("building the thread pool: {e}"))?
                .install(|| go(k)),
            None => sinklab::runtime::on_a_pool_worker(|| go(rayon::current_num_threads())),
        }
    })?;
    json_to_py(py, &v)
}

/// TOML text of a spec given as JSON (a dict from Python), or why not.
#[pyfunction]
fn toml_of_json(json: &str) -> PyResult<String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| Error::new_err(format!("spec: {e}")))?;
    toml::to_string(&v).map_err(|e| Error::new_err(format!("spec: not TOML-representable: {e}")))
}

// ---------------------------------------------------------------------------------------------
// Half-space verdict

/// The half-space verdict (see `sinklab.half_space`).
#[pyclass(frozen, module = "sinklab")]
pub struct Verdict {
    /// Whether some bilinear head makes the sink an ε-sink for every query.
    #[pyo3(get)]
    representable: bool,
    /// Condition (a) fails: 0 is in the convex hull of the queries.
    #[pyo3(get)]
    queries_fail: bool,
    /// Condition (b) fails: the sink is in the convex hull of the other keys.
    #[pyo3(get)]
    sink_fails: bool,
    /// The certificate re-verified against the data.
    #[pyo3(get)]
    verified: bool,
    /// The ε the verdict is for.
    #[pyo3(get)]
    eps: f64,
    /// `[d, d]` witness W = c a bᵀ (logits xᵀ W k), or None.
    #[pyo3(get)]
    witness: Option<Py<PyAny>>,
    /// Query direction a, or None.
    #[pyo3(get)]
    a: Option<Py<PyAny>>,
    /// Key direction b, or None.
    #[pyo3(get)]
    b: Option<Py<PyAny>>,
    /// γ_a = min over queries of a·x (margin of (a)), or None.
    #[pyo3(get)]
    gamma_a: Option<f64>,
    /// γ_b = min over keys of b·(s − k) (margin of (b)), or None.
    #[pyo3(get)]
    gamma_b: Option<f64>,
    /// Scale c = Δ/(γ_a γ_b), or None.
    #[pyo3(get)]
    c: Option<f64>,
    /// Target logit gap Δ_ε(m), or None.
    #[pyo3(get)]
    gap: Option<f64>,
    /// ‖W‖_F = ‖W‖_* of the rank-one witness, or None.
    #[pyo3(get)]
    cost: Option<f64>,
    /// Smallest sink mass the witness gives a query, or None.
    #[pyo3(get)]
    worst_sink_mass: Option<f64>,
    /// Fraction of the allowance ε left at the worst query (≥ 0 iff accepted), or None.
    #[pyo3(get)]
    margin: Option<f64>,
    /// Convex weights of each failed condition: {"queries": λ or None, "keys": μ or None}.
    #[pyo3(get)]
    weights: Py<PyAny>,
}

#[pymethods]
impl Verdict {
    fn __repr__(&self) -> String {
        format!(
            "Verdict(representable={}, queries_fail={}, sink_fails={}, verified={})",
            self.representable, self.queries_fail, self.sink_fails, self.verified
        )
    }
    fn __bool__(&self) -> bool {
        self.representable
    }
}

#[pyfunction]
#[pyo3(signature = (queries, keys, sink, eps))]
fn half_space<'py>(
    py: Python<'py>,
    queries: PyReadonlyArrayDyn<'py, f64>,
    keys: PyReadonlyArrayDyn<'py, f64>,
    sink: PyReadonlyArrayDyn<'py, f64>,
    eps: f64,
) -> PyResult<Verdict> {
    use sinklab::geometry::half_space::{Obstruction, Verdict as V, half_space_verdict_rows};
    let q = rows_of(&queries, "queries")?;
    let k = rows_of(&keys, "keys")?;
    let s = sink
        .as_slice()
        .map_err(|_| Error::new_err("sink: not contiguous"))?
        .to_vec();
    let (v, verified) = compute(py, || {
        let (qs, ks) = (slices(&q), slices(&k));
        let v = half_space_verdict_rows(&qs, &s, &ks, eps).map_err(|e| e.to_string())?;
        let ok = v.verify(&qs, &s, &ks);
        let chk = match &v {
            V::Representable(w) => Some(w.verify(&qs, &s, &ks)),
            V::NotRepresentable(_) => None,
        };
        Ok(((v, chk), ok))
    })?;
    let (v, chk) = v;
    let weights = PyDict::new(py);
    weights.set_item("queries", py.None())?;
    weights.set_item("keys", py.None())?;
    let vec1 = |x: Vec<f64>| -> PyResult<Py<PyAny>> {
        let n = x.len();
        Ok(owned(py, x, &[n])?.into_any().unbind())
    };
    let mut out = Verdict {
        representable: v.is_representable(),
        queries_fail: v.queries_fail(),
        sink_fails: v.sink_fails(),
        verified,
        eps,
        witness: None,
        a: None,
        b: None,
        gamma_a: None,
        gamma_b: None,
        c: None,
        gap: None,
        cost: None,
        worst_sink_mass: chk.map(|c| c.worst_sink_mass),
        margin: chk.map(|c| c.margin),
        weights: py.None(),
    };
    match v {
        V::Representable(w) => {
            let d = w.w.nrows();
            let e = w.w.ncols();
            let data: Vec<f64> = (0..d)
                .flat_map(|i| (0..e).map(move |j| (i, j)))
                .map(|(i, j)| w.w[(i, j)])
                .collect();
            out.witness = Some(owned(py, data, &[d, e])?.into_any().unbind());
            out.cost = Some(w.cost());
            out.a = Some(vec1(w.a)?);
            out.b = Some(vec1(w.b)?);
            out.gamma_a = Some(w.gamma_a);
            out.gamma_b = Some(w.gamma_b);
            out.c = Some(w.c);
            out.gap = Some(w.gap);
        }
        V::NotRepresentable(obs) => {
            for o in obs {
                match o {
                    Obstruction::QueriesNotInHalfSpace { lambda } => {
                        weights.set_item("queries", vec1(lambda.lambda)?)?;
                    }
                    Obstruction::SinkNotSeparable { mu } => {
                        weights.set_item("keys", vec1(mu.lambda)?)?;
                    }
                }
            }
        }
    }
    out.weights = weights.into_any().unbind();
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Minimal costs

/// A minimal cost with its certified bracket (see `sinklab.cost.minimal`).
#[pyclass(frozen, module = "sinklab")]
pub struct Cost {
    /// The minimal cost (the certified upper end), or None when infeasible.
    #[pyo3(get)]
    value: Option<f64>,
    /// Certified lower bound, or None.
    #[pyo3(get)]
    lower: Option<f64>,
    /// Certified upper bound (a feasible W's norm), or None.
    #[pyo3(get)]
    upper: Option<f64>,
    /// Relative gap (upper − lower)/upper, or None.
    #[pyo3(get)]
    rel_gap: Option<f64>,
    /// Whether the gap constraints can be met.
    #[pyo3(get)]
    feasible: bool,
    /// Solver iterations.
    #[pyo3(get)]
    iterations: usize,
    /// Number of constraints.
    #[pyo3(get)]
    constraints: usize,
    /// Rank of the optimum, or None.
    #[pyo3(get)]
    rank: Option<usize>,
    /// The gap Δ.
    #[pyo3(get)]
    delta: f64,
}

#[pymethods]
impl Cost {
    fn __repr__(&self) -> String {
        format!(
            "Cost(value={:?}, lower={:?}, upper={:?}, feasible={})",
            self.value, self.lower, self.upper, self.feasible
        )
    }
}

#[pyfunction]
#[pyo3(signature = (x, pattern, norm, delta, scope, on_rate, seed, tol, max_iter, max_mem = None))]
#[allow(clippy::too_many_arguments)]
fn cost_minimal<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f64>,
    pattern: &str,
    norm: &str,
    delta: f64,
    scope: &str,
    on_rate: f64,
    seed: u64,
    tol: f64,
    max_iter: usize,
    max_mem: Option<String>,
) -> PyResult<Cost> {
    use sinklab::cost::{CostQuery, EmbeddingKind, NormKind, Pattern, Scope, SolveOptions};
    let pattern = match pattern {
        "sink" => Pattern::Sink,
        "diagonal" => Pattern::Diagonal,
        p => {
            return Err(Error::new_err(format!(
                "pattern={p:?}: give \"sink\" or \"diagonal\""
            )));
        }
    };
    let norm = match norm {
        "fro" => NormKind::Fro,
        "nuclear" => NormKind::Nuclear,
        n => {
            return Err(Error::new_err(format!(
                "norm={n:?}: give \"fro\" or \"nuclear\""
            )));
        }
    };
    let scope = match scope {
        "qk" => Scope::Qk,
        "head" => Scope::Head,
        s => {
            return Err(Error::new_err(format!(
                "scope={s:?}: give \"qk\" or \"head\""
            )));
        }
    };
    let rows = rows_of(&x, "x")?;
    let (t, d) = (rows.len(), rows.first().map_or(0, Vec::len));
    let s = compute(py, move || {
        let budget =
            sinklab::budget::Budget::with(max_mem.as_deref(), None).map_err(|e| e.to_string())?;
        let one = sinklab::budget::cost_program(t, d, norm == NormKind::Nuclear);
        let est = if scope == Scope::Head {
            one.then(one)
        } else {
            one
        };
        budget
            .check(
                &format!("cost.minimal on x of shape ({t}, {d})"),
                est,
                false,
            )
            .map_err(|e| e.to_string())?;
        let m = faer::Mat::from_fn(t, d, |i, j| rows[i][j]);
        let q = CostQuery {
            pattern,
            norm,
            embedding: EmbeddingKind::Orthonormal,
            t,
            d,
            delta,
            seed,
            scope,
            on_rate,
        };
        let opts = SolveOptions {
            rel_gap: tol,
            max_iter,
            ..SolveOptions::default()
        };
        sinklab::cost::solve_query_on(&q, m.as_ref(), opts).map_err(|e| e.to_string())
    })?;
    Ok(Cost {
        value: s.value,
        lower: s.lower,
        upper: s.value,
        rel_gap: s.rel_gap,
        feasible: s.feasible,
        iterations: s.iterations,
        constraints: s.constraints,
        rank: s.rank,
        delta: s.delta,
    })
}

// ---------------------------------------------------------------------------------------------
// Paper B's detector

#[pyfunction]
#[pyo3(signature = (hidden, tau, bos_candidates, window, centered, bos_margin, noise_max))]
#[allow(clippy::too_many_arguments)]
fn secondary_detect<'py>(
    py: Python<'py>,
    hidden: PyReadonlyArrayDyn<'py, f32>,
    tau: f64,
    bos_candidates: Vec<usize>,
    window: bool,
    centered: bool,
    bos_margin: usize,
    noise_max: usize,
) -> PyResult<Bound<'py, PyAny>> {
    use sinklab::runtime::activation_file::Activations;
    use sinklab::runtime::hidden::HiddenStates;
    use sinklab::secondary::detector::{Centering, DetectorParams, LabelRule, WindowMode};
    let s = hidden.shape().to_vec();
    if s.len() != 3 {
        return Err(Error::new_err(format!(
            "hidden: expected [L, T, d], got shape {s:?}"
        )));
    }
    let data = hidden
        .as_slice()
        .map_err(|_| Error::new_err("hidden: not contiguous"))?
        .to_vec();
    let v = compute(py, move || {
        if !(0.0..=1.0).contains(&tau) {
            return Err(format!("tau must lie in [0, 1], got {tau}"));
        }
        let p = DetectorParams {
            tau,
            bos_candidates,
            window: if window {
                WindowMode::BosNormJumps
            } else {
                WindowMode::AllLayers
            },
            labels: LabelRule {
                bos_margin,
                noise_max,
            },
            centering: if centered {
                Centering::MeanToken
            } else {
                Centering::None
            },
        };
        let act = Activations {
            hidden: HiddenStates::new(s[0], s[1], s[2], data).map_err(|e| e.to_string())?,
            attn: None,
            mlp_out: None,
            keys: None,
            values: None,
            tokens: None,
            metadata: Default::default(),
        };
        let vars = sinklab::secondary::findings::from_activations(&act, &[p], 0, 0)
            .map_err(|e| e.to_string())?;
        let v = &vars[0];
        let an = &v.analyses[0];
        // Each piece serialised from its own type, as `sinklab secondary --json` prints the
        // records (f32 fields keep their shortest f32 form).
        Ok(format!(
            "{{\"variant\":{},\"records\":[{}],\"detection\":{},\"claims\":{}}}",
            js(&v.name)?,
            v.records
                .iter()
                .map(js)
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            js(&an.detection)?,
            js(&v.measures)?,
        ))
    })?;
    json_text_to_py(py, v)
}

/// JSON text of a value, serialised from its own type.
fn js<T: serde::Serialize>(x: &T) -> Result<String, String> {
    serde_json::to_string(x).map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Registered theorem checks

#[pyfunction]
#[pyo3(signature = (name, cases = None, seed = 0))]
fn check<'py>(
    py: Python<'py>,
    name: String,
    cases: Option<usize>,
    seed: u64,
) -> PyResult<Bound<'py, PyAny>> {
    let all = sinklab::registry::registry();
    let Some(t) = all.iter().find(|t| t.name == name) else {
        let names: Vec<_> = all.iter().map(|t| t.name).collect();
        return Err(Error::new_err(format!(
            "unknown theorem '{name}'; known: {}",
            names.join(", ")
        )));
    };
    if cases == Some(0) || cases.is_some_and(|c| c > 10_000_000) {
        return Err(Error::new_err("cases: must lie in [1, 10000000]"));
    }
    let cases = cases.unwrap_or(t.default_cases);
    let run = t.run;
    let v = compute(py, move || {
        let o = sinklab::runtime::on_a_pool_worker(|| run(cases, seed));
        serde_json::to_value(&o).map_err(|e| e.to_string())
    })?;
    json_to_py(py, &v)
}

/// The cached path of packaged model `name` (a verified cache entry), or None.
#[pyfunction]
fn cached(name: &str) -> Option<String> {
    sinklab::runtime::fetch::cached(name).map(|p| p.display().to_string())
}

/// How this extension was built: "release" (no debug assertions) or "debug" (a dev profile);
/// the speed row labels a debug build's numbers.
#[pyfunction]
fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// Names of the registered theorem checks.
#[pyfunction]
fn checks() -> Vec<&'static str> {
    sinklab::registry::registry()
        .iter()
        .map(|t| t.name)
        .collect()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_class::<Model>()?;
    m.add_class::<Run>()?;
    m.add_class::<Verdict>()?;
    m.add_class::<Cost>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(half_space, m)?)?;
    m.add_function(wrap_pyfunction!(cost_minimal, m)?)?;
    m.add_function(wrap_pyfunction!(secondary_detect, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(checks, m)?)?;
    m.add_function(wrap_pyfunction!(cached, m)?)?;
    m.add_function(wrap_pyfunction!(pattern_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(oversmoothing_predict, m)?)?;
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(toml_of_json, m)?)?;
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    Ok(())
}
