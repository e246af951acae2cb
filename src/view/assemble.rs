//! The page's data from a run: a model's forward pass ([`from_model`]) or an activations file
//! ([`from_activations`]). The statistics are the crate's own: `real::analysis::analyze` (the
//! report `sinklab real --json` prints), and paper B's detector in its faithful configuration
//! on the states `secondary::native::capture` takes (the last one after the final norm).

use super::maps::MapObserver;
use super::{DetectorView, ViewData, encode_maps, encode_sink_columns, token_curves};
use crate::real::stats::LayerStats;
use crate::runtime::LoadedModel;
use crate::runtime::forward::{LayerObserver, LayerTensors};
use crate::runtime::pretrained::Pretrained;
use crate::secondary::DetectorParams;
use crate::secondary::activations::Activations;
use crate::secondary::native::LastLayer;
use std::path::Path;

/// Errors of the page's assembly.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// From the real-model stack.
    #[error(transparent)]
    Real(#[from] crate::runtime::RealError),
    /// From the secondary-sink capture.
    #[error(transparent)]
    Native(#[from] crate::secondary::native::NativeError),
    /// A bad input (names what).
    #[error("{0}")]
    Input(String),
}

fn detector(act: &Activations) -> DetectorView {
    let p = DetectorParams::default();
    match crate::secondary::records::analyse(act, &p, 0) {
        Ok(a) => DetectorView::from_detection(&a.detection, p.variant_name()),
        Err(e) => DetectorView::unavailable(e.to_string()),
    }
}

/// Reports each finished layer of the first pass to a callback.
struct Progress<'a>(&'a mut dyn FnMut(usize, usize));

impl LayerObserver for Progress<'_> {
    fn layer(&mut self, m: &Pretrained, t: &LayerTensors<'_>) {
        (self.0)(t.layer + 1, m.cfg.n_layer);
    }

    fn wants_layer_maps(&self) -> bool {
        false
    }
}

/// Runs `tokens` through the model: statistics and pooled maps in one pass, the detector's
/// states in a second; `exact` heads are kept at full resolution. `progress(l, L)` is called
/// after each layer of the first pass.
pub fn from_model(
    lm: &LoadedModel,
    tokens: &[u32],
    max_res: usize,
    exact: Vec<(usize, usize)>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ViewData, ViewError> {
    let c = &lm.model.cfg;
    if tokens.is_empty() {
        return Err(ViewError::Input("no tokens to run".into()));
    }
    if tokens.len() > c.max_context {
        return Err(ViewError::Input(format!(
            "{} tokens exceed the model's context of {} tokens",
            tokens.len(),
            c.max_context
        )));
    }
    let mut obs = (MapObserver::new(max_res, exact), Progress(progress));
    let rep = crate::real::analysis::analyze(lm, tokens, false, &mut obs)?;
    let obs = obs.0;
    let (act, _) = crate::secondary::native::capture(lm, tokens, false, LastLayer::FinalNorm)?;
    let token_text = match &lm.tok {
        Some(t) => tokens.iter().map(|&i| t.decode(&[i])).collect(),
        None => (0..tokens.len()).map(|i| format!("#{i}")).collect(),
    };
    let mut v = pooled(
        &obs,
        &act,
        rep.layers,
        (c.n_layer, c.n_head, tokens.len(), c.causal),
        max_res,
    );
    v.source = rep.model.clone();
    v.bos_first = Some(rep.bos_first);
    v.tokens = Some(tokens.to_vec());
    v.token_text = token_text;
    Ok(v)
}

/// The view of the pooled maps in `obs` and the captured residual stream `act`, with the
/// detector and the token curves read from `act` (the curves anchored at the detected sink,
/// token 0 when detection failed); `(n_layer, n_head, t, causal)` give the layout. The source,
/// BOS flag and tokens are left for the caller (empty, `#i` token labels).
fn pooled(
    obs: &MapObserver,
    act: &Activations,
    layers: Vec<LayerStats>,
    (n_layer, n_head, t, causal): (usize, usize, usize, bool),
    max_res: usize,
) -> ViewData {
    let det = detector(act);
    let bos = if det.error.is_none() { det.bos } else { 0 };
    let (maps_q8, exact) = encode_maps(obs);
    ViewData {
        schema: 1,
        source: String::new(),
        n_layer,
        n_head,
        t,
        causal,
        res: super::maps::resolution(t, max_res),
        bos_first: None,
        tokens: None,
        token_text: (0..t).map(|i| format!("#{i}")).collect(),
        layers,
        maps_q8,
        exact,
        sink_q8: encode_sink_columns(obs),
        detector: det,
        token_curves: Some(token_curves(&act.hidden, bos)),
        realised: None,
    }
}

/// An activations file (schema in `real::activations`) with its `attn.{l}` tensors: the
/// statistics of `sinklab real --activations`, its maps pooled as a model's are. The layout is
/// causal when every map is zero above the diagonal. Refused without attention maps.
pub fn from_activations(
    path: &Path,
    max_res: usize,
    exact: &dyn Fn(usize, usize) -> Result<Vec<(usize, usize)>, String>,
) -> Result<ViewData, ViewError> {
    let rep = crate::real::activations::analyze_file(path)?;
    let act = Activations::read(path)
        .map_err(|e| ViewError::Input(format!("{}: {e}", path.display())))?;
    let Some(attn) = &act.attn else {
        return Err(ViewError::Input(format!(
            "{}: no attn.{{l}} tensors: the viewer needs attention maps (dump them with the activations)",
            path.display()
        )));
    };
    let (nl, t) = (act.hidden.layers(), act.hidden.tokens());
    let h = attn[0].heads;
    let exact = exact(nl, h).map_err(ViewError::Input)?;
    let causal = attn.iter().all(|a| {
        (0..a.heads).all(|hh| (0..t).all(|i| a.row(hh, i)[i + 1..].iter().all(|&p| p == 0.0)))
    });
    let learned_sinks = act
        .layout()
        .map_err(|e| ViewError::Input(format!("{}: {e}", path.display())))?
        .learned_sinks;
    let mut obs = MapObserver::new(max_res, exact);
    for (l, a) in attn.iter().enumerate() {
        if a.heads != h || a.tokens != t || a.width != t {
            return Err(ViewError::Input(format!(
                "{}: attn.{l} is [{}, {}, {}], not [{h}, {t}, {t}]",
                path.display(),
                a.heads,
                a.tokens,
                a.width
            )));
        }
        obs.add_layer(l, &a.data, (h, t), causal, learned_sinks);
    }
    let mut v = pooled(&obs, &act, rep.layers, (nl, h, t, causal), max_res);
    v.source = rep.file.clone();
    v.tokens = rep.tokens.clone();
    Ok(v)
}
