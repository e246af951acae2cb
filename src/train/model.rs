//! A small causal transformer without normalisation, forward and hand-written
//! backward in dense matrix form (batch stacked: `B·T` rows).
//!
//! $h^0_t = E\[x_t\] + P_t$; per layer
//! $h \leftarrow h + \mathrm{Attn}(h)$, then optionally $h \leftarrow h + W_2^\top\mathrm{relu}(W_1^\top h + b_1)$;
//! logits $= h\thinspace U$. Attention: logits $z_{ij} = h_i^\top W_{QK} h_j$ (no $1/\sqrt d$, as in
//! docs/theory.md §1), causal softmax, output $o_i = \sum_j A_{ij} W_{VO} h_j$, with
//! $W_{QK} = W_Q W_K^\top$, $W_{VO} = W_O W_V^\top$ in factored form.
//! Optional explicit switches ([`Switches`], docs/theory.md §11, off by default): a learned
//! sink logit $s$ joining each softmax row with no value, and an output gate
//! $o_i \leftarrow \sigma(h_i^\top W_g + b_g)\odot o_i$ (one scalar per head, or one per
//! coordinate) before $W_O$.
//! Every batch-wide product goes through [`super::kernels::matmul`]; the small
//! per-sequence attention products go through [`super::kernels::matmul_local`].
//! The batch is split into chunks of whole sequences that run forward and
//! backward as independent tasks.
//!
//! This is the *reference* model: in f64 its hand-written gradients are
//! checked against central finite differences (`tests/train.rs`), and the
//! training model of [`super::device`], which runs on any
//! [`crate::backend::Backend`], is checked against it (`tests/train_device.rs`).
//! [`super::train_on`] initialises the parameters here, trains on the backend
//! and reads them back into this model once for the evaluation.

use super::kernels::{matmul, matmul_into, matmul_local};
use crate::backend::Real;
use crate::backend::real::{dot_lanes, max_lanes, sum_lanes};
use faer::reborrow::{Reborrow, ReborrowMut};
use faer::{Mat, MatMut, MatRef, Par};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Attention parametrisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnForm {
    /// $W_{QK}, W_{VO} \in \mathbb R^{d\times d}$ trained directly.
    Direct,
    /// $W_Q, W_K, W_V, W_O \in \mathbb R^{d\times r}$.
    Factored {
        /// Head dimension $r$.
        r: usize,
    },
}

/// The output gate of a head (docs/theory.md §11): $g_i = \sigma(h_i^\top w_g + b_g)$
/// multiplies the head output $o_i$ before $W_O$.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateForm {
    /// No gate.
    #[default]
    Off,
    /// One scalar gate per head and query: $w_g \in \mathbb R^d$, $b_g \in \mathbb R$.
    Head,
    /// One gate per output coordinate: $W_g \in \mathbb R^{d\times w}$, $b_g \in \mathbb R^w$
    /// ($w$ the attention width), $o_i \leftarrow \sigma(h_i^\top W_g + b_g) \odot o_i$.
    Elementwise,
}

/// Explicit switches of every head (docs/theory.md §11); all off by default, and off
/// they change no arithmetic of the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Switches {
    /// A learned sink logit $s$ per head: $A_{ij} = e^{z_{ij}} / (e^{s} + \sum_{k\ \rm visible} e^{z_{ik}})$,
    /// the sink column carrying no value (its mass $p_{i\varnothing} = 1 - \sum_j A_{ij}$).
    pub sink_logit: bool,
    /// The output gate.
    pub gate: GateForm,
    /// The sink logit's initial value $s_0$ (0 unless set; with [`Self::sink_logit`] only).
    /// Not written when 0, so configurations without it keep their serialised form.
    #[serde(skip_serializing_if = "is_zero")]
    pub sink_logit_init: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// How the sink logit starts: a value, or the switching value of the context,
/// $s^\ast(T) = \ln\frac{T(1-\varepsilon)}{\varepsilon}$ with $\varepsilon$ =
/// [`super::SWITCH_EPS`] (docs/theory.md §11: with $W_{QK} = 0$ it switches off every row of a
/// context of length $\le T$, and no smaller value switches off the row that sees $T$ keys).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SinkLogitInit {
    /// This value.
    Value(f64),
    /// `"switching"`: $s^\ast(T)$.
    Named(SinkLogitInitName),
}

/// The named initial values of [`SinkLogitInit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SinkLogitInitName {
    /// $s^\ast(T)$.
    #[serde(rename = "switching")]
    Switching,
}

impl Default for SinkLogitInit {
    fn default() -> Self {
        SinkLogitInit::Value(0.0)
    }
}

impl SinkLogitInit {
    /// Parses `switching` or a finite number.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s == "switching" {
            return Ok(SinkLogitInit::Named(SinkLogitInitName::Switching));
        }
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(SinkLogitInit::Value(v)),
            _ => Err(format!("`{s}` is neither a finite number nor `switching`")),
        }
    }

    /// The initial logit for a context of `t` positions.
    pub fn value(self, t: usize) -> f64 {
        match self {
            SinkLogitInit::Value(v) => v,
            SinkLogitInit::Named(SinkLogitInitName::Switching) => {
                let e = super::SWITCH_EPS;
                (t as f64 * (1.0 - e) / e).ln()
            }
        }
    }
}

impl Switches {
    /// Neither switch.
    pub const OFF: Switches = Switches {
        sink_logit: false,
        gate: GateForm::Off,
        sink_logit_init: 0.0,
    };

    /// These switches with the sink logit starting at `s0` (no change without a sink logit).
    pub fn with_sink_logit_init(self, s0: f64) -> Self {
        Switches {
            sink_logit_init: if self.sink_logit { s0 } else { 0.0 },
            ..self
        }
    }

    /// Whether neither switch is on.
    pub fn is_off(&self) -> bool {
        *self == Self::OFF
    }
}

/// Model shape.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Vocabulary size (BOS included).
    pub vocab: usize,
    /// Width $d$.
    pub d: usize,
    /// Maximum context length (positional table size).
    pub max_len: usize,
    /// Number of layers (1–3).
    pub layers: usize,
    /// Attention parametrisation.
    pub attn: AttnForm,
    /// MLP hidden width (0 = no MLP).
    pub mlp_hidden: usize,
    /// Mask the key at position 0 for every query $i \ge 1$ (BOS unavailable as a sink).
    pub mask_bos_key: bool,
    /// Initial weight scale multiplier.
    pub init_scale: f64,
    /// Explicit switches (sink logit, output gate); [`Switches::OFF`] by default.
    #[serde(default, skip_serializing_if = "Switches::is_off")]
    pub switches: Switches,
}

/// Named parameter slots (indices into [`Model::params`]): direct form
/// `a` = $W_{QK}$, `b` = $W_{VO}$; factored `a..d` = $W_Q, W_K, W_V, W_O$;
/// `mlp` = ($W_1$, $b_1$, $W_2$); `sink` = $s$ ($1\times 1$); `gate` = ($W_g$, $b_g$).
#[derive(Clone, Copy, Debug)]
pub(super) struct LayerIdx {
    pub(super) a: usize,
    pub(super) b: usize,
    pub(super) c: usize,
    pub(super) d: usize,
    pub(super) mlp: Option<(usize, usize, usize)>,
    pub(super) sink: Option<usize>,
    pub(super) gate: Option<(usize, usize)>,
}

/// Rows `r0..r0 + t` of a stacked `[Q | K | V]` activation, split into its three blocks of
/// width `w`.
fn qkv_rows<F: Real>(
    qkv: MatRef<'_, F>,
    r0: usize,
    t: usize,
    w: usize,
) -> (MatRef<'_, F>, MatRef<'_, F>, MatRef<'_, F>) {
    (
        qkv.submatrix(r0, 0, t, w),
        qkv.submatrix(r0, w, t, w),
        qkv.submatrix(r0, 2 * w, t, w),
    )
}

/// The model: parameter tensors and their layout.
#[derive(Clone, Debug)]
pub struct Model<F: Real> {
    /// Shape.
    pub cfg: ModelConfig,
    /// Every parameter tensor; see [`Model::names`].
    pub params: Vec<Mat<F>>,
    /// Names of the parameters (`emb`, `pos`, `l0.wq`, ...).
    pub names: Vec<String>,
    /// Whether weight decay applies to the parameter (all but biases).
    pub decay: Vec<bool>,
    layers: Vec<LayerIdx>,
    unemb: usize,
    /// The caller's faer parallelism for the large products ([`Model::with_par`]).
    par: Par,
}

/// Errors of the model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// Bad shape or configuration.
    #[error("invalid model input: {0}")]
    Invalid(String),
}

/// Sequences are processed in chunks of about this many rows (whole
/// sequences), one task per chunk: forward and backward of a chunk run on one
/// thread without synchronisation, and the weight gradients of the chunks are
/// summed at the end. The split depends on `B·T` only, not on the thread
/// count, so results do not change with the number of threads.
const CHUNK_ROWS: usize = 512;

/// Activations of one layer on one chunk (`n = ns·T` rows), kept for backward.
struct LayerAct<F: Real> {
    /// Residual stream entering the layer (`n × d`).
    h: Mat<F>,
    /// $[Q\thinspace|\thinspace K\thinspace|\thinspace V]$ (`n × 3w`, $w$ the attention width).
    qkv: Mat<F>,
    /// $A^\top$ per sequence (`T × n`; columns `s·T..(s+1)·T` hold $A_s^\top$,
    /// so the distribution of query `i` over keys is one contiguous column).
    at: Mat<F>,
    /// $O = A V$ (`n × w`).
    o: Mat<F>,
    /// Residual after attention (`n × d`).
    h2: Mat<F>,
    /// MLP pre-activation $h_2 W_1 + b_1$ and its ReLU (`n × H`; empty without MLP).
    u: Mat<F>,
    g: Mat<F>,
    /// Sink-logit mass $p_{i\varnothing}$ per row (`n`; empty without a sink logit).
    psink: Vec<F>,
    /// Gate values $\sigma(h W_g + b_g)$ (`n × 1` or `n × w`) and the gated output
    /// $G \odot O$ (`n × w`); empty without a gate.
    gate: Mat<F>,
    og: Mat<F>,
}

/// One chunk of whole sequences: `ns` sequences from sequence `s0` on.
struct Chunk<F: Real> {
    s0: usize,
    ns: usize,
    acts: Vec<LayerAct<F>>,
    /// Residual stream after the last layer (`n × d`).
    h_out: Mat<F>,
    /// Softmax of the output logits, transposed (`V × n`: column `r` for row `r`).
    probs: Mat<F>,
}

/// Backward scratch of one chunk, reused across steps.
struct Work<F: Real> {
    /// The chunk's share of every parameter gradient.
    grads: Vec<Mat<F>>,
    dlog: Mat<F>,
    dh: Mat<F>,
    du: Mat<F>,
    d_o: Mat<F>,
    dqkv: Mat<F>,
    da: Mat<F>,
    /// $\partial$ of the gate pre-activation (`n × 1` or `n × w`; gate only).
    dgate: Mat<F>,
}

/// Cached activations of one forward pass. Passing the same cache to
/// [`Model::forward_into`] and [`Model::backward_into`] step after step reuses
/// its buffers (no allocation once the shapes have been seen).
pub struct Cache<F: Real> {
    b: usize,
    t: usize,
    tokens: Vec<u32>,
    chunks: Vec<Chunk<F>>,
    /// Per layer, the weights that map $h$ to $[Q\thinspace|\thinspace K\thinspace|\thinspace V]$ (`d × 3w`):
    /// $[W_Q | W_K | W_V]$, or $[W_{QK} | I | W_{VO}^\top]$ in direct form.
    wcat: Vec<Mat<F>>,
    work: Vec<Work<F>>,
}

/// Makes `m` an `r × c` matrix, reallocating only when the shape changes
/// (contents are left to the caller to overwrite).
fn ensure<F: Real>(m: &mut Mat<F>, r: usize, c: usize) {
    if m.nrows() != r || m.ncols() != c {
        *m = Mat::zeros(r, c);
    }
}

/// The contiguous storage of column `j` of a view with unit row stride.
fn col<'a, F: Real>(m: MatRef<'a, F>, j: usize) -> &'a [F] {
    m.col(j)
        .try_as_col_major()
        .expect("unit row stride")
        .as_slice()
}

fn col_mut<'a, F: Real>(m: MatMut<'a, F>, j: usize) -> &'a mut [F] {
    m.col_mut(j)
        .try_as_col_major_mut()
        .expect("unit row stride")
        .as_slice_mut()
}

fn empty<F: Real>() -> Mat<F> {
    Mat::zeros(0, 0)
}

impl<F: Real> LayerAct<F> {
    fn new() -> Self {
        Self {
            h: empty(),
            qkv: empty(),
            at: empty(),
            o: empty(),
            h2: empty(),
            u: empty(),
            g: empty(),
            psink: Vec::new(),
            gate: empty(),
            og: empty(),
        }
    }
}

impl<F: Real> Chunk<F> {
    fn new() -> Self {
        Self {
            s0: 0,
            ns: 0,
            acts: Vec::new(),
            h_out: empty(),
            probs: empty(),
        }
    }
}

impl<F: Real> Work<F> {
    fn new() -> Self {
        Self {
            grads: Vec::new(),
            dlog: empty(),
            dh: empty(),
            du: empty(),
            d_o: empty(),
            dqkv: empty(),
            da: empty(),
            dgate: empty(),
        }
    }
}

impl<F: Real> Default for Cache<F> {
    fn default() -> Self {
        Self::new()
    }
}

fn randn<F: Real, R: Rng + ?Sized>(rows: usize, cols: usize, std: f64, rng: &mut R) -> Mat<F> {
    Mat::from_fn(rows, cols, |_, _| {
        let z: f64 = StandardNormal.sample(rng);
        F::from_f64(z * std)
    })
}

impl<F: Real> Model<F> {
    /// Random initialisation: $\mathcal N(0, s^2/\text{fan-in})$.
    pub fn new<R: Rng + ?Sized>(cfg: ModelConfig, rng: &mut R) -> Result<Self, ModelError> {
        if !(1..=3).contains(&cfg.layers) || cfg.d == 0 || cfg.vocab < 2 || cfg.max_len < 2 {
            return Err(ModelError::Invalid(format!("{cfg:?}")));
        }
        if let AttnForm::Factored { r } = cfg.attn
            && r == 0
        {
            return Err(ModelError::Invalid("head dimension r must be >= 1".into()));
        }
        let d = cfg.d;
        let s = cfg.init_scale;
        let mut params = Vec::new();
        let mut names = Vec::new();
        let mut decay = Vec::new();
        let mut push = |name: String, m: Mat<F>, dec: bool, params: &mut Vec<Mat<F>>| {
            names.push(name);
            decay.push(dec);
            params.push(m);
            params.len() - 1
        };
        push("emb".into(), randn(cfg.vocab, d, s, rng), true, &mut params);
        push(
            "pos".into(),
            randn(cfg.max_len, d, s, rng),
            true,
            &mut params,
        );
        let fan = 1.0 / (d as f64).sqrt();
        let mut layers = Vec::new();
        for l in 0..cfg.layers {
            let idx = match cfg.attn {
                AttnForm::Direct => LayerIdx {
                    a: push(
                        format!("l{l}.wqk"),
                        randn(d, d, s * fan * fan, rng),
                        true,
                        &mut params,
                    ),
                    b: push(
                        format!("l{l}.wvo"),
                        randn(d, d, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    c: usize::MAX,
                    d: usize::MAX,
                    mlp: None,
                    sink: None,
                    gate: None,
                },
                AttnForm::Factored { r } => LayerIdx {
                    a: push(
                        format!("l{l}.wq"),
                        randn(d, r, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    b: push(
                        format!("l{l}.wk"),
                        randn(d, r, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    c: push(
                        format!("l{l}.wv"),
                        randn(d, r, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    d: push(
                        format!("l{l}.wo"),
                        randn(d, r, s / (r as f64).sqrt(), rng),
                        true,
                        &mut params,
                    ),
                    mlp: None,
                    sink: None,
                    gate: None,
                },
            };
            // The switches, only when asked for (off, the parameters and the draws
            // from `rng` are those of a model without them). The sink logit and W_g
            // are decayed (their size is the cost of the switch, §6); b_g is a bias.
            let sink = cfg.switches.sink_logit.then(|| {
                let s0 = Mat::from_fn(1, 1, |_, _| F::from_f64(cfg.switches.sink_logit_init));
                push(format!("l{l}.sink"), s0, true, &mut params)
            });
            let gw = match cfg.switches.gate {
                GateForm::Off => 0,
                GateForm::Head => 1,
                GateForm::Elementwise => match cfg.attn {
                    AttnForm::Direct => d,
                    AttnForm::Factored { r } => r,
                },
            };
            let gate = (gw > 0).then(|| {
                (
                    push(
                        format!("l{l}.wg"),
                        randn(d, gw, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    push(format!("l{l}.bg"), Mat::zeros(1, gw), false, &mut params),
                )
            });
            let mlp = (cfg.mlp_hidden > 0).then(|| {
                let h = cfg.mlp_hidden;
                (
                    push(
                        format!("l{l}.w1"),
                        randn(d, h, s * fan, rng),
                        true,
                        &mut params,
                    ),
                    push(format!("l{l}.b1"), Mat::zeros(1, h), false, &mut params),
                    push(
                        format!("l{l}.w2"),
                        randn(h, d, s / (h as f64).sqrt(), rng),
                        true,
                        &mut params,
                    ),
                )
            });
            layers.push(LayerIdx {
                mlp,
                sink,
                gate,
                ..idx
            });
        }
        let unemb = push(
            "unemb".into(),
            randn(d, cfg.vocab, s * fan, rng),
            true,
            &mut params,
        );
        Ok(Self {
            cfg,
            params,
            names,
            decay,
            layers,
            unemb,
            par: Par::Seq,
        })
    }

    /// The model with its large products (those of a single-chunk pass, and
    /// [`Model::w_qk`] / [`Model::w_vo`]) on `par`; a new model runs them on the calling
    /// thread (`Par::Seq`), as a model used inside a parallel loop must. Values do not
    /// depend on it.
    pub fn with_par(mut self, par: Par) -> Self {
        self.par = par;
        self
    }

    /// Converts the parameters to another scalar type.
    pub fn cast<G: Real>(&self) -> Model<G> {
        Model {
            cfg: self.cfg,
            params: self
                .params
                .iter()
                .map(|m| Mat::from_fn(m.nrows(), m.ncols(), |i, j| G::from_f64(m[(i, j)].to_f64())))
                .collect(),
            names: self.names.clone(),
            decay: self.decay.clone(),
            layers: self.layers.clone(),
            unemb: self.unemb,
            par: self.par,
        }
    }

    /// Parameter slots of every layer and of the unembedding (for `train::device`).
    pub(super) fn layout(&self) -> (&[LayerIdx], usize) {
        (&self.layers, self.unemb)
    }

    /// $W_{QK}$ of layer `l` ($d\times d$).
    pub fn w_qk(&self, l: usize) -> Mat<F> {
        let li = self.layers[l];
        self.product(li.a, li.a, li.b)
    }

    /// $W_{VO}$ of layer `l` ($d\times d$, $v = W_{VO} h$).
    pub fn w_vo(&self, l: usize) -> Mat<F> {
        let li = self.layers[l];
        self.product(li.b, li.d, li.c)
    }

    /// One attention product: in direct form the slot `direct` holds it; in factored form it is
    /// $A B^\top$ of the slots `left` and `right` ($W_Q W_K^\top$ or $W_O W_V^\top$).
    fn product(&self, direct: usize, left: usize, right: usize) -> Mat<F> {
        match self.cfg.attn {
            AttnForm::Direct => self.params[direct].clone(),
            AttnForm::Factored { .. } => matmul(
                self.params[left].as_ref(),
                self.params[right].as_ref(),
                false,
                true,
                self.par,
            ),
        }
    }

    /// The learned sink logit $s$ of layer `l` (`None` without one).
    pub fn sink_logit(&self, l: usize) -> Option<f64> {
        self.layers[l].sink.map(|k| self.params[k][(0, 0)].to_f64())
    }

    /// Indices into [`Model::params`] of every switch parameter ($s$, $W_g$, $b_g$).
    pub fn switch_params(&self) -> Vec<usize> {
        self.layers
            .iter()
            .flat_map(|li| {
                li.sink
                    .into_iter()
                    .chain(li.gate.into_iter().flat_map(|(w, b)| [w, b]))
            })
            .collect()
    }

    /// The gate's $(W_g, b_g)$ of layer `l` (`None` without a gate).
    pub fn gate_params(&self, l: usize) -> Option<(&Mat<F>, &Mat<F>)> {
        self.layers[l]
            .gate
            .map(|(w, b)| (&self.params[w], &self.params[b]))
    }

    /// Factored weight decay $\tfrac12(\lVert W_Q\rVert_F^2 + \lVert W_K\rVert_F^2)$ of layer `l` (`None` in direct form).
    pub fn qk_weight_decay(&self, l: usize) -> Option<f64> {
        let li = self.layers[l];
        match self.cfg.attn {
            AttnForm::Direct => None,
            AttnForm::Factored { .. } => {
                let n = |m: &Mat<F>| m.as_ref().norm_l2().to_f64().powi(2);
                Some(0.5 * (n(&self.params[li.a]) + n(&self.params[li.b])))
            }
        }
    }

    /// The rows the first attention layer reads, $h_i = E_{\rm tok}\[w_i\] + E_{\rm pos}\[i\]$,
    /// for one sequence ($T \times d$).
    pub fn layer_input(&self, tokens: &[u32]) -> Result<Mat<F>, ModelError> {
        let t = tokens.len();
        if t == 0 || t > self.cfg.max_len {
            return Err(ModelError::Invalid(format!(
                "{t} tokens for max_len {}",
                self.cfg.max_len
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&x| x as usize >= self.cfg.vocab) {
            return Err(ModelError::Invalid(format!(
                "token {bad} outside the vocabulary of {}",
                self.cfg.vocab
            )));
        }
        let (emb, pos) = (&self.params[0], &self.params[1]);
        Ok(Mat::from_fn(t, self.cfg.d, |i, c| {
            emb[(tokens[i] as usize, c)] + pos[(i, c)]
        }))
    }

    /// Forward pass on `b` sequences of equal length `t` (`tokens.len() == b·t`).
    pub fn forward(&self, tokens: &[u32], b: usize, t: usize) -> Result<Cache<F>, ModelError> {
        let mut cache = Cache::new();
        self.forward_into(tokens, b, t, &mut cache)?;
        Ok(cache)
    }

    /// [`Model::forward`] into `cache`, reusing its buffers.
    pub fn forward_into(
        &self,
        tokens: &[u32],
        b: usize,
        t: usize,
        cache: &mut Cache<F>,
    ) -> Result<(), ModelError> {
        let cfg = &self.cfg;
        if b == 0 || t < 2 || tokens.len() != b * t || t > cfg.max_len {
            return Err(ModelError::Invalid(format!(
                "{} tokens for b = {b}, t = {t} (max_len {})",
                tokens.len(),
                cfg.max_len
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&x| x as usize >= cfg.vocab) {
            return Err(ModelError::Invalid(format!(
                "token {bad} outside the vocabulary of {}",
                cfg.vocab
            )));
        }
        cache.b = b;
        cache.t = t;
        cache.tokens.clear();
        cache.tokens.extend_from_slice(tokens);
        let n = (b * t / CHUNK_ROWS).clamp(1, b);
        cache.chunks.resize_with(n, Chunk::new);
        for (c, ch) in cache.chunks.iter_mut().enumerate() {
            ch.s0 = c * b / n;
            ch.ns = (c + 1) * b / n - ch.s0;
        }
        let d = cfg.d;
        let w = self.attn_width();
        cache.wcat.resize_with(self.layers.len(), empty);
        for (li, wc) in self.layers.iter().zip(&mut cache.wcat) {
            ensure(wc, d, 3 * w);
            let mut wm = wc.as_mut();
            match cfg.attn {
                AttnForm::Direct => {
                    wm.rb_mut()
                        .subcols_mut(0, d)
                        .copy_from(self.params[li.a].as_ref());
                    let mut id = wm.rb_mut().subcols_mut(d, d);
                    id.fill(F::from_f64(0.0));
                    for i in 0..d {
                        id[(i, i)] = F::from_f64(1.0);
                    }
                    wm.rb_mut()
                        .subcols_mut(2 * d, d)
                        .copy_from(self.params[li.b].as_ref().transpose());
                }
                AttnForm::Factored { .. } => {
                    for (k, p) in [li.a, li.b, li.c].into_iter().enumerate() {
                        wm.rb_mut()
                            .subcols_mut(k * w, w)
                            .copy_from(self.params[p].as_ref());
                    }
                }
            }
        }
        let (toks, wcat) = (&cache.tokens, &cache.wcat);
        // One chunk runs on the caller's thread with the caller's `par`; several run as
        // parallel tasks, each sequential.
        let run = |ch: &mut Chunk<F>, par: Par| {
            self.forward_chunk(ch, &toks[ch.s0 * t..(ch.s0 + ch.ns) * t], t, wcat, par)
        };
        if n == 1 {
            run(&mut cache.chunks[0], self.par);
        } else {
            cache.chunks.par_iter_mut().for_each(|ch| run(ch, Par::Seq));
        }
        Ok(())
    }

    /// Width of the attention values: $r$ factored, $d$ direct.
    fn attn_width(&self) -> usize {
        match self.cfg.attn {
            AttnForm::Direct => self.cfg.d,
            AttnForm::Factored { r } => r,
        }
    }

    /// Causal softmax of column `i` of $Z^\top$ (query `i` over the keys), in place; with a
    /// sink logit `sink` = $s$ the normaliser also counts $e^{s}$, and the sink mass
    /// $p_{i\varnothing} = e^{s} / (e^{s} + \sum_k e^{z_{ik}})$ is returned (0 without one).
    fn softmax_causal(&self, z: &mut [F], i: usize, sink: Option<F>) -> F {
        let zero = F::from_f64(0.0);
        let lo = usize::from(self.cfg.mask_bos_key && i >= 1);
        let (head, rest) = z.split_at_mut(lo);
        let (live, tail) = rest.split_at_mut(i + 1 - lo);
        head.fill(zero);
        tail.fill(zero);
        let Some(s) = sink else {
            let m = max_lanes(live);
            for x in live.iter_mut() {
                *x -= m;
            }
            F::exp_in_place(live);
            let sum = sum_lanes(live);
            for x in live.iter_mut() {
                *x /= sum;
            }
            return zero;
        };
        let m0 = max_lanes(live);
        let m = if s > m0 { s } else { m0 };
        for x in live.iter_mut() {
            *x -= m;
        }
        F::exp_in_place(live);
        let es = Real::exp(s - m);
        let sum = sum_lanes(live) + es;
        for x in live.iter_mut() {
            *x /= sum;
        }
        es / sum
    }

    fn forward_chunk(
        &self,
        ch: &mut Chunk<F>,
        tokens: &[u32],
        t: usize,
        wcat: &[Mat<F>],
        par: Par,
    ) {
        let cfg = &self.cfg;
        let (d, w, n) = (cfg.d, self.attn_width(), ch.ns * t);
        ch.acts.resize_with(self.layers.len(), LayerAct::new);
        {
            let h = &mut ch.acts[0].h;
            ensure(h, n, d);
            let (emb, pos) = (&self.params[0], &self.params[1]);
            for c in 0..d {
                let (e, p) = (emb.col_as_slice(c), &pos.col_as_slice(c)[..t]);
                let hc = h.col_as_slice_mut(c);
                for (hs, ts) in hc.chunks_exact_mut(t).zip(tokens.chunks_exact(t)) {
                    for ((x, &tok), &pi) in hs.iter_mut().zip(ts).zip(p) {
                        *x = e[tok as usize] + pi;
                    }
                }
            }
        }
        for (l, li) in self.layers.iter().enumerate() {
            let (cur, rest) = ch.acts.split_at_mut(l + 1);
            let a = &mut cur[l];
            ensure(&mut a.qkv, n, 3 * w);
            matmul_into(
                &mut a.qkv,
                false,
                a.h.as_ref(),
                wcat[l].as_ref(),
                false,
                false,
                par,
            );
            ensure(&mut a.at, t, n);
            ensure(&mut a.o, n, w);
            let sink = li.sink.map(|k| self.params[k][(0, 0)]);
            if sink.is_some() {
                a.psink.resize(n, F::from_f64(0.0));
            }
            for s in 0..ch.ns {
                let r0 = s * t;
                let (qs, ks, vs) = qkv_rows(a.qkv.as_ref(), r0, t, w);
                let mut zt = a.at.as_mut().subcols_mut(r0, t);
                // Zᵀ = K Qᵀ: column i holds the logits of query i.
                matmul_local(zt.rb_mut(), false, ks, qs.transpose());
                for i in 0..t {
                    let p = self.softmax_causal(col_mut(zt.rb_mut(), i), i, sink);
                    if sink.is_some() {
                        a.psink[r0 + i] = p;
                    }
                }
                matmul_local(
                    a.o.as_mut().subrows_mut(r0, t),
                    false,
                    zt.rb().transpose(),
                    vs,
                );
            }
            // The gate: G = σ(h W_g + 1 b_gᵀ), output G ⊙ O (a scalar gate broadcast
            // along the row).
            if let Some((wg, bg)) = li.gate {
                let gw = self.params[bg].ncols();
                ensure(&mut a.gate, n, gw);
                ensure(&mut a.og, n, w);
                matmul_into(
                    &mut a.gate,
                    false,
                    a.h.as_ref(),
                    self.params[wg].as_ref(),
                    false,
                    false,
                    par,
                );
                for c in 0..gw {
                    let bc = self.params[bg][(0, c)];
                    for x in a.gate.col_as_slice_mut(c) {
                        *x = sigmoid(*x + bc);
                    }
                }
                for c in 0..w {
                    let gc = a.gate.col_as_slice(if gw == 1 { 0 } else { c });
                    let (oc, ogc) = (a.o.col_as_slice(c), a.og.col_as_slice_mut(c));
                    for ((y, &x), &g) in ogc.iter_mut().zip(oc).zip(gc) {
                        *y = g * x;
                    }
                }
            }
            let out = if li.gate.is_some() { &a.og } else { &a.o };
            ensure(&mut a.h2, n, d);
            a.h2.copy_from(&a.h);
            match cfg.attn {
                AttnForm::Direct => a.h2 += out,
                AttnForm::Factored { .. } => matmul_into(
                    &mut a.h2,
                    true,
                    out.as_ref(),
                    self.params[li.d].as_ref(),
                    false,
                    true,
                    par,
                ),
            }
            let next = match rest.first_mut() {
                Some(nx) => &mut nx.h,
                None => &mut ch.h_out,
            };
            ensure(next, n, d);
            next.copy_from(&a.h2);
            if let Some((w1, b1, w2)) = li.mlp {
                let hid = cfg.mlp_hidden;
                ensure(&mut a.u, n, hid);
                ensure(&mut a.g, n, hid);
                matmul_into(
                    &mut a.u,
                    false,
                    a.h2.as_ref(),
                    self.params[w1].as_ref(),
                    false,
                    false,
                    par,
                );
                let bias = &self.params[b1];
                for c in 0..hid {
                    let bc = bias[(0, c)];
                    let (uc, gc) = (a.u.col_as_slice_mut(c), a.g.col_as_slice_mut(c));
                    for (x, y) in uc.iter_mut().zip(gc) {
                        *x += bc;
                        *y = relu(*x);
                    }
                }
                matmul_into(
                    next,
                    true,
                    a.g.as_ref(),
                    self.params[w2].as_ref(),
                    false,
                    false,
                    par,
                );
            }
        }
        // Logitsᵀ = Uᵀ hᵀ (`V × n`), softmax down each column.
        ensure(&mut ch.probs, cfg.vocab, n);
        matmul_into(
            &mut ch.probs,
            false,
            self.params[self.unemb].as_ref(),
            ch.h_out.as_ref(),
            true,
            true,
            par,
        );
        for r in 0..n {
            let p = ch.probs.col_as_slice_mut(r);
            let m = max_lanes(p);
            for x in p.iter_mut() {
                *x -= m;
            }
            F::exp_in_place(p);
            let s = sum_lanes(p);
            for x in p.iter_mut() {
                *x /= s;
            }
        }
    }

    /// Mean next-token cross-entropy over the query positions selected by `weight`
    /// (`weight[r]` for row `r = s·T + i`, predicting token `i+1`; the last position
    /// of each sequence has no target and must have weight 0).
    pub fn loss(&self, cache: &Cache<F>, weight: &[f64]) -> f64 {
        let t = cache.t;
        let mut tot = 0.0;
        let mut wsum = 0.0;
        for ch in &cache.chunks {
            let r0 = ch.s0 * t;
            for s in 0..ch.ns {
                for i in 0..t - 1 {
                    let lr = s * t + i;
                    let r = r0 + lr;
                    if weight[r] > 0.0 {
                        let y = cache.tokens[r + 1] as usize;
                        tot -= weight[r] * ch.probs[(y, lr)].to_f64().max(1e-300).ln();
                        wsum += weight[r];
                    }
                }
            }
        }
        if wsum > 0.0 { tot / wsum } else { 0.0 }
    }

    /// Argmax prediction of row `r`.
    pub fn predict(&self, cache: &Cache<F>, r: usize) -> u32 {
        let (ch, lr) = cache.locate(r);
        let p = ch.probs.col_as_slice(lr);
        let mut best = 0;
        for (c, &x) in p.iter().enumerate().skip(1) {
            if x > p[best] {
                best = c;
            }
        }
        best as u32
    }

    /// Gradient of [`Model::loss`] with respect to every parameter.
    pub fn backward(&self, cache: &Cache<F>, weight: &[f64]) -> Vec<Mat<F>> {
        let mut grads = Vec::new();
        let mut work = Vec::new();
        self.backward_with(cache, &mut work, weight, &mut grads);
        grads
    }

    /// [`Model::backward`] into `grads`, reusing `grads` and the scratch kept in `cache`.
    pub fn backward_into(&self, cache: &mut Cache<F>, weight: &[f64], grads: &mut Vec<Mat<F>>) {
        let mut work = std::mem::take(&mut cache.work);
        self.backward_with(cache, &mut work, weight, grads);
        cache.work = work;
    }

    fn backward_with(
        &self,
        cache: &Cache<F>,
        work: &mut Vec<Work<F>>,
        weight: &[f64],
        grads: &mut Vec<Mat<F>>,
    ) {
        let (b, t) = (cache.b, cache.t);
        grads.resize_with(self.params.len(), empty);
        for (g, p) in grads.iter_mut().zip(&self.params) {
            ensure(g, p.nrows(), p.ncols());
        }
        let wsum: f64 = (0..b)
            .flat_map(|s| (0..t - 1).map(move |i| s * t + i))
            .map(|r| weight[r])
            .sum();
        if wsum <= 0.0 {
            for g in grads.iter_mut() {
                g.fill(F::from_f64(0.0));
            }
            return;
        }
        let nc = cache.chunks.len();
        work.resize_with(nc, Work::new);
        let run = |(ch, wk): (&Chunk<F>, &mut Work<F>), par: Par| {
            let rows = ch.s0 * t..(ch.s0 + ch.ns) * t;
            self.backward_chunk(
                ch,
                wk,
                &cache.tokens[rows.start..],
                &weight[rows],
                wsum,
                t,
                &cache.wcat,
                par,
            );
        };
        if nc == 1 {
            run((&cache.chunks[0], &mut work[0]), self.par);
        } else {
            cache
                .chunks
                .par_iter()
                .zip(work.par_iter_mut())
                .for_each(|cw| run(cw, Par::Seq));
        }
        for (k, g) in grads.iter_mut().enumerate() {
            g.copy_from(&work[0].grads[k]);
            for wk in &work[1..] {
                let part = &wk.grads[k];
                for c in 0..g.ncols() {
                    for (x, &y) in g.col_as_slice_mut(c).iter_mut().zip(part.col_as_slice(c)) {
                        *x += y;
                    }
                }
            }
        }
    }

    /// Backward on one chunk: its share of every gradient into `wk.grads`.
    /// `tokens` starts at the chunk's first row and runs to the end of the batch
    /// (the target of row `r` is `tokens[r + 1]`).
    #[allow(clippy::too_many_arguments)]
    fn backward_chunk(
        &self,
        ch: &Chunk<F>,
        wk: &mut Work<F>,
        tokens: &[u32],
        weight: &[f64],
        wsum: f64,
        t: usize,
        wcat: &[Mat<F>],
        par: Par,
    ) {
        let cfg = &self.cfg;
        let (d, w, n, vocab) = (cfg.d, self.attn_width(), ch.ns * t, cfg.vocab);
        let zero = F::from_f64(0.0);
        let Work {
            grads,
            dlog,
            dh,
            du,
            d_o,
            dqkv,
            da,
            dgate,
        } = wk;
        grads.resize_with(self.params.len(), empty);
        for (g, p) in grads.iter_mut().zip(&self.params) {
            ensure(g, p.nrows(), p.ncols());
        }
        // dL/dlogits = w_r (p − onehot) / Σw, transposed (`V × n`).
        ensure(dlog, vocab, n);
        for r in 0..n {
            let dc = dlog.col_as_slice_mut(r);
            let wr = if r % t + 1 < t { weight[r] / wsum } else { 0.0 };
            if wr == 0.0 {
                dc.fill(zero);
                continue;
            }
            let wf = F::from_f64(wr);
            for (x, &p) in dc.iter_mut().zip(ch.probs.col_as_slice(r)) {
                *x = p * wf;
            }
            let y = tokens[r + 1] as usize;
            dc[y] = (ch.probs[(y, r)] - F::from_f64(1.0)) * wf;
        }
        let u_w = self.params[self.unemb].as_ref();
        matmul_into(
            &mut grads[self.unemb],
            false,
            ch.h_out.as_ref(),
            dlog.as_ref(),
            true,
            true,
            par,
        );
        ensure(dh, n, d);
        matmul_into(dh, false, dlog.as_ref(), u_w, true, true, par);
        for (l, li) in self.layers.iter().enumerate().rev() {
            let a = &ch.acts[l];
            // MLP: h3 = h2 + relu(h2 W1 + b1) W2.
            if let Some((w1, b1, w2)) = li.mlp {
                let hid = cfg.mlp_hidden;
                matmul_into(
                    &mut grads[w2],
                    false,
                    a.g.as_ref(),
                    dh.as_ref(),
                    true,
                    false,
                    par,
                );
                ensure(du, n, hid);
                matmul_into(
                    du,
                    false,
                    dh.as_ref(),
                    self.params[w2].as_ref(),
                    false,
                    true,
                    par,
                );
                for c in 0..hid {
                    let dc = du.col_as_slice_mut(c);
                    for (x, &u) in dc.iter_mut().zip(a.u.col_as_slice(c)) {
                        *x = if u <= zero { zero } else { *x };
                    }
                    grads[b1][(0, c)] = sum_lanes(dc);
                }
                matmul_into(
                    &mut grads[w1],
                    false,
                    a.h2.as_ref(),
                    du.as_ref(),
                    true,
                    false,
                    par,
                );
                matmul_into(
                    dh,
                    true,
                    du.as_ref(),
                    self.params[w1].as_ref(),
                    false,
                    true,
                    par,
                );
            }
            // Attention: h2 = h + (G ⊙ A V) [W_O^T] (G = 1 without a gate).
            ensure(d_o, n, w);
            let out = if li.gate.is_some() { &a.og } else { &a.o };
            match cfg.attn {
                AttnForm::Direct => d_o.copy_from(&*dh),
                AttnForm::Factored { .. } => {
                    matmul_into(
                        &mut grads[li.d],
                        false,
                        dh.as_ref(),
                        out.as_ref(),
                        true,
                        false,
                        par,
                    );
                    matmul_into(
                        d_o,
                        false,
                        dh.as_ref(),
                        self.params[li.d].as_ref(),
                        false,
                        false,
                        par,
                    );
                }
            }
            // Gate: ∂G = Σ_coords O ⊙ ∂(GO), ∂O = G ⊙ ∂(GO), ∂pre = ∂G ⊙ G(1 − G);
            // ∂W_g = hᵀ ∂pre, ∂b_g = 1ᵀ ∂pre, ∂h += ∂pre W_gᵀ.
            if let Some((wg, bg)) = li.gate {
                let gw = a.gate.ncols();
                ensure(dgate, n, gw);
                dgate.fill(zero);
                for c in 0..w {
                    let k = if gw == 1 { 0 } else { c };
                    let gc = a.gate.col_as_slice(k);
                    let oc = a.o.col_as_slice(c);
                    let dgc = dgate.col_as_slice_mut(k);
                    let doc = d_o.col_as_slice_mut(c);
                    for (((x, dg), &g), &o) in doc.iter_mut().zip(dgc).zip(gc).zip(oc) {
                        *dg += o * *x;
                        *x *= g;
                    }
                }
                let one = F::from_f64(1.0);
                for k in 0..gw {
                    let gc = a.gate.col_as_slice(k);
                    let dgc = dgate.col_as_slice_mut(k);
                    for (x, &g) in dgc.iter_mut().zip(gc) {
                        *x *= g * (one - g);
                    }
                    grads[bg][(0, k)] = sum_lanes(dgc);
                }
                matmul_into(
                    &mut grads[wg],
                    false,
                    a.h.as_ref(),
                    dgate.as_ref(),
                    true,
                    false,
                    par,
                );
                matmul_into(
                    dh,
                    true,
                    dgate.as_ref(),
                    self.params[wg].as_ref(),
                    false,
                    true,
                    par,
                );
            }
            // Sink logit: ∂s = −Σ_i p_{i∅} Σ_j A_ij ∂A_ij (its column carries no value).
            let mut dsink = zero;
            ensure(dqkv, n, 3 * w);
            ensure(da, t, t);
            for s in 0..ch.ns {
                let r0 = s * t;
                let (qs, ks, vs) = qkv_rows(a.qkv.as_ref(), r0, t, w);
                let at = a.at.as_ref().subcols(r0, t);
                let do_s = d_o.as_ref().subrows(r0, t);
                let mut dq = dqkv.as_mut().subrows_mut(r0, t);
                // dAᵀ = V dOᵀ; dV = Aᵀ dO.
                matmul_local(da.as_mut(), false, vs, do_s.transpose());
                matmul_local(dq.rb_mut().subcols_mut(2 * w, w), false, at, do_s);
                // dZ = A ⊙ (dA − rowsum(A ⊙ dA)), column by column of the transposes.
                for i in 0..t {
                    let ac = &col(at, i)[..=i];
                    let dc = da.col_as_slice_mut(i);
                    let (live, tail) = dc.split_at_mut(i + 1);
                    let dot = dot_lanes(ac, live);
                    if li.sink.is_some() {
                        dsink -= a.psink[r0 + i] * dot;
                    }
                    for (x, &y) in live.iter_mut().zip(ac) {
                        *x = y * (*x - dot);
                    }
                    tail.fill(zero);
                }
                // dQ = dZ K; dK = dZᵀ Q.
                matmul_local(
                    dq.rb_mut().subcols_mut(0, w),
                    false,
                    da.as_ref().transpose(),
                    ks,
                );
                matmul_local(dq.rb_mut().subcols_mut(w, w), false, da.as_ref(), qs);
            }
            if let Some(k) = li.sink {
                grads[k][(0, 0)] = dsink;
            }
            let h = a.h.as_ref();
            let dqkv_r = dqkv.as_ref();
            let (dq, dk, dv) = (
                dqkv_r.subcols(0, w),
                dqkv_r.subcols(w, w),
                dqkv_r.subcols(2 * w, w),
            );
            match cfg.attn {
                AttnForm::Direct => {
                    // q = h W_QK, k = h, v = h W_VO^T.
                    matmul_into(&mut grads[li.a], false, h, dq, true, false, par);
                    matmul_into(&mut grads[li.b], false, dv, h, true, false, par);
                }
                AttnForm::Factored { .. } => {
                    matmul_into(&mut grads[li.a], false, h, dq, true, false, par);
                    matmul_into(&mut grads[li.b], false, h, dk, true, false, par);
                    matmul_into(&mut grads[li.c], false, h, dv, true, false, par);
                }
            }
            // dh += [dQ | dK | dV] Wcatᵀ (in direct form the identity block adds dK exactly).
            matmul_into(dh, true, dqkv_r, wcat[l].as_ref(), false, true, par);
        }
        // Embeddings.
        let (ge, gp) = grads.split_at_mut(1);
        let (ge, gp) = (&mut ge[0], &mut gp[0]);
        ge.fill(zero);
        gp.fill(zero);
        for c in 0..d {
            let dc = dh.col_as_slice(c);
            let (ec, pc) = (ge.col_as_slice_mut(c), &mut gp.col_as_slice_mut(c)[..t]);
            for (ds, ts) in dc.chunks_exact(t).zip(tokens.chunks(t)) {
                for ((&g, &tok), p) in ds.iter().zip(ts).zip(pc.iter_mut()) {
                    ec[tok as usize] += g;
                    *p += g;
                }
            }
        }
    }
}

/// $\sigma(x) = 1 / (1 + e^{-x})$.
fn sigmoid<F: Real>(x: F) -> F {
    let one = F::from_f64(1.0);
    one / (one + Real::exp(-x))
}

fn relu<F: Real>(x: F) -> F {
    if x > F::from_f64(0.0) {
        x
    } else {
        F::from_f64(0.0)
    }
}

impl<F: Real> Cache<F> {
    /// An empty cache, to be filled by [`Model::forward_into`].
    pub fn new() -> Self {
        Self {
            b: 0,
            t: 0,
            tokens: Vec::new(),
            chunks: Vec::new(),
            wcat: Vec::new(),
            work: Vec::new(),
        }
    }

    /// The chunk holding batch row `r`, and the row's index inside it.
    fn locate(&self, r: usize) -> (&Chunk<F>, usize) {
        let s = r / self.t;
        let ch = self
            .chunks
            .iter()
            .find(|c| s < c.s0 + c.ns)
            .expect("row inside the batch");
        (ch, r - ch.s0 * self.t)
    }

    /// Attention weight $A_{ij}$ of layer `l`, sequence `s`.
    pub fn attention(&self, l: usize, s: usize, i: usize, j: usize) -> f64 {
        let (ch, lr) = self.locate(s * self.t + i);
        ch.acts[l].at[(j, lr)].to_f64()
    }

    /// Sink-logit mass $p_{i\varnothing}$ of query `i` of sequence `s` in layer `l`
    /// (`None` without a sink logit).
    pub fn sink_mass(&self, l: usize, s: usize, i: usize) -> Option<f64> {
        let (ch, lr) = self.locate(s * self.t + i);
        ch.acts[l].psink.get(lr).map(|p| p.to_f64())
    }

    /// The largest gate value $\max_c G_{ic}$ of query `i` of sequence `s` in layer `l`
    /// (the scalar gate itself for a per-head gate; `None` without a gate).
    pub fn gate(&self, l: usize, s: usize, i: usize) -> Option<f64> {
        let (ch, lr) = self.locate(s * self.t + i);
        let g = &ch.acts[l].gate;
        (g.ncols() > 0).then(|| {
            (0..g.ncols())
                .map(|c| g[(lr, c)].to_f64())
                .fold(f64::NEG_INFINITY, f64::max)
        })
    }
}
