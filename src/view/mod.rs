//! `sinklab view`: one self-contained HTML page (no network, no external script or font) that
//! shows a run's sinks: the layer × head grid of Gu's $\alpha_0 = \frac1T\sum_i A_{i0}$ (the
//! `layers[l].heads[h].alpha_first` that `sinklab real --json` prints, embedded as that same
//! [`LayerStats`] list), each head's attention map on a canvas, the paper B detector's labels on
//! a token strip, per-layer curves, and PNG / SVG export.
//!
//! The data is one JSON blob ([`ViewData`]) in a `<script type="application/json">` tag of the
//! template `page.html` (every `<` in the JSON written as `\u003c`, so no string can close the
//! tag). Maps are binary and base64-encoded: every head max-pooled to at most
//! $R_{max} \times R_{max}$ cells in 8 bits ([`maps`]), the `--heads` ones exact (f32); their
//! size is [`payload_bytes`].

pub mod assemble;
pub mod maps;

use crate::real::stats::LayerStats;
use serde::Serialize;

/// The page template (plain HTML, CSS and JavaScript); `{{DATA}}` is replaced by the JSON blob.
pub const TEMPLATE: &str = include_str!("page.html");
/// The placeholder of the data blob in [`TEMPLATE`].
pub const PLACEHOLDER: &str = "{{DATA}}";
/// Default resolution cap of the pooled maps.
pub const DEFAULT_MAX_RES: usize = 256;

/// Everything the page shows.
#[derive(Debug, Clone, Serialize)]
pub struct ViewData {
    /// Layout version of this blob.
    pub schema: u32,
    /// What was run (model path or activations file).
    pub source: String,
    /// Layers L.
    pub n_layer: usize,
    /// Query heads H.
    pub n_head: usize,
    /// Positions T.
    pub t: usize,
    /// Causal maps (stored as lower triangles).
    pub causal: bool,
    /// Resolution R of the pooled maps.
    pub res: usize,
    /// Whether position 0 holds the BOS token (None when unknown).
    pub bos_first: Option<bool>,
    /// Token ids (None when the activations file has none).
    pub tokens: Option<Vec<u32>>,
    /// Token strings (`#i` without a tokenizer).
    pub token_text: Vec<String>,
    /// Per-layer statistics, as `sinklab real --json` prints them.
    pub layers: Vec<LayerStats>,
    /// Pooled maps, base64 of the 8-bit cells, index `l·H + h`.
    pub maps_q8: Vec<String>,
    /// Exact maps of the `--heads` heads.
    pub exact: Vec<ExactView>,
    /// Models with learned sink logits: per head (index `l·H + h`), base64 of the 8-bit column
    /// of each row's sink mass $1 - \sum_j A_{ij}$, pooled to R rows ([`maps::row_sink_mass`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sink_q8: Option<Vec<String>>,
    /// Paper B's detector on the run.
    pub detector: DetectorView,
    /// Per token and layer: the detector's states' norms and cosines with the BOS state.
    pub token_curves: Option<TokenCurves>,
    /// With `--a1`: per layer and head, the fraction of causal pairs on which the first key's
    /// logit beats the other key (`realised` of `sinklab real --a1 --json`'s `a1_pooled.heads`;
    /// null where a head has none), or why the analysis refused the input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub realised: Option<Result<RealisedGrid, String>>,
}

/// Per layer and head, a realised-sink fraction (null where the head has none).
pub type RealisedGrid = Vec<Vec<Option<f64>>>;

/// The realised-sink fraction of every head (`real::head_space`, the analysis and options of
/// `sinklab real --a1`) on one text, laid out `[layer][head]`.
pub fn realised_grid(
    m: &crate::runtime::pretrained::Pretrained,
    tokens: &[u32],
) -> Result<Result<RealisedGrid, String>, crate::runtime::RealError> {
    use crate::real::head_space::{A1Options, analyze};
    let r = analyze(m, &[tokens.to_vec()], A1Options::default(), false)?;
    if let Some(e) = r.heads_error {
        return Ok(Err(e));
    }
    let mut g = vec![vec![None; m.cfg.n_head]; m.cfg.n_layer];
    for h in &r.heads {
        g[h.layer][h.head] = Some(h.realised);
    }
    Ok(Ok(g))
}

/// One exact map.
#[derive(Debug, Clone, Serialize)]
pub struct ExactView {
    /// Layer.
    pub layer: usize,
    /// Head.
    pub head: usize,
    /// base64 of the f32 (little-endian) cells, stored layout of [`maps`] at R = T.
    pub f32: String,
}

/// `[L, T]` curves of the detector's hidden states (after the final norm at the last layer).
#[derive(Debug, Clone, Serialize)]
pub struct TokenCurves {
    /// The BOS position b of the cosines.
    pub bos: usize,
    /// base64 of f32 $\lVert h^l_t\rVert$, row-major `[L, T]`.
    pub norm_f32: String,
    /// base64 of f32 $\cos(h^l_t, h^l_b)$ (NaN where undefined), row-major `[L, T]`.
    pub cos_f32: String,
}

/// One detected position of the token strip.
#[derive(Debug, Clone, Serialize)]
pub struct SinkView {
    /// Position t.
    pub position: usize,
    /// `bos_sink`, `secondary` or `noise`.
    pub label: crate::secondary::Label,
    /// First flagged layer.
    pub creation_layer: usize,
    /// Number of flagged layers.
    pub lifetime: usize,
    /// The flagged layers.
    pub layers: Vec<usize>,
}

/// The detector's output as the page needs it (the faithful configuration).
#[derive(Debug, Clone, Serialize, Default)]
pub struct DetectorView {
    /// The configuration's name (`faithful`).
    pub variant: String,
    /// Why there is no detection (e.g. too few tokens), else None.
    pub error: Option<String>,
    /// The chosen BOS position.
    pub bos: usize,
    /// The scanned layers `[start, end)`.
    pub window: (usize, usize),
    /// Flagged positions.
    pub sinks: Vec<SinkView>,
    /// The BOS's own entry.
    pub bos_entry: Option<SinkView>,
    /// Fraction of positions after the BOS flagged.
    pub frac_flagged: f64,
    /// The saturation rule (anisotropy, not sinks).
    pub saturated: bool,
}

impl DetectorView {
    /// From a detection (labels, creation layers and lifetimes as the detector gives them).
    pub fn from_detection(d: &crate::secondary::Detection, variant: String) -> Self {
        let sv = |s: &crate::secondary::Sink| SinkView {
            position: s.position,
            label: s.label,
            creation_layer: s.creation_layer,
            lifetime: s.lifetime,
            layers: s.layers.clone(),
        };
        DetectorView {
            variant,
            error: None,
            bos: d.bos,
            window: (d.window.start, d.window.end),
            sinks: d.sinks.iter().map(sv).collect(),
            bos_entry: d.bos_entry.as_ref().map(sv),
            frac_flagged: d.validity.frac_flagged,
            saturated: d.validity.saturated,
        }
    }

    /// No detection, with the reason.
    pub fn unavailable(why: String) -> Self {
        DetectorView {
            variant: "faithful".into(),
            error: Some(why),
            ..Default::default()
        }
    }
}

/// Standard base64 (RFC 4648, with padding).
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(base64_len(bytes.len()));
    for c in bytes.chunks(3) {
        let n = ((c[0] as u32) << 16)
            | ((*c.get(1).unwrap_or(&0) as u32) << 8)
            | (*c.get(2).unwrap_or(&0) as u32);
        for k in 0..4 {
            if k <= c.len() {
                s.push(A[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Length of the base64 text of `n` bytes: $4\lceil n/3\rceil$.
pub fn base64_len(n: usize) -> usize {
    4 * n.div_ceil(3)
}

/// base64 of f32 values, little-endian.
pub fn base64_f32(v: &[f32]) -> String {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64(&b)
}

/// Bytes of the binary payload (the base64 strings of pooled maps, exact maps and token curves):
/// $LH \cdot 4\lceil c(R)/3\rceil + n_{exact} \cdot 4\lceil 4c(T)/3\rceil + 2 \cdot 4\lceil 4LT/3\rceil$
/// with $R = \min(T, R_{max})$ and $c(n) = n(n+1)/2$ causal, $n^2$ otherwise.
pub fn payload_bytes(
    l: usize,
    h: usize,
    t: usize,
    max_res: usize,
    causal: bool,
    n_exact: usize,
) -> usize {
    let r = maps::resolution(t, max_res);
    l * h * base64_len(maps::cells(r, causal))
        + n_exact * base64_len(4 * maps::cells(t, causal))
        + 2 * base64_len(4 * l * t)
}

/// The `[L, T]` token curves of hidden states: $\lVert h^l_t\rVert$ and $\cos(h^l_t, h^l_b)$.
pub fn token_curves(h: &crate::runtime::hidden::HiddenStates<f32>, bos: usize) -> TokenCurves {
    let (nl, nt) = (h.layers(), h.tokens());
    let mut norm = Vec::with_capacity(nl * nt);
    let mut cos = Vec::with_capacity(nl * nt);
    for l in 0..nl {
        let hb: Vec<f64> = h.state(l, bos).iter().map(|&x| x as f64).collect();
        for t in 0..nt {
            let ht: Vec<f64> = h.state(l, t).iter().map(|&x| x as f64).collect();
            norm.push(h.norm(l, t) as f32);
            cos.push(crate::linalg::cosine(&ht, &hb).map_or(f32::NAN, |c| c as f32));
        }
    }
    TokenCurves {
        bos,
        norm_f32: base64_f32(&norm),
        cos_f32: base64_f32(&cos),
    }
}

/// The maps of a [`maps::MapObserver`] as the blob stores them (pooled in `l·H + h` order).
pub fn encode_maps(obs: &maps::MapObserver) -> (Vec<String>, Vec<ExactView>) {
    let mut pooled: Vec<&maps::PooledHead> = obs.pooled.iter().collect();
    pooled.sort_by_key(|p| (p.layer, p.head));
    (
        pooled.iter().map(|p| base64(&p.q8)).collect(),
        obs.exact
            .iter()
            .map(|e| ExactView {
                layer: e.layer,
                head: e.head,
                f32: base64_f32(&e.p),
            })
            .collect(),
    )
}

/// The learned-sink columns of a [`maps::MapObserver`] (`l·H + h` order), `None` when no head
/// has one.
pub fn encode_sink_columns(obs: &maps::MapObserver) -> Option<Vec<String>> {
    let mut pooled: Vec<&maps::PooledHead> = obs.pooled.iter().collect();
    pooled.sort_by_key(|p| (p.layer, p.head));
    if pooled.iter().all(|p| p.sink_q8.is_none()) {
        return None;
    }
    Some(
        pooled
            .iter()
            .map(|p| p.sink_q8.as_deref().map(base64).unwrap_or_default())
            .collect(),
    )
}

/// The JSON blob, safe inside a `<script>` element: every `<` is written `\u003c` (it occurs
/// only inside JSON strings, where the escape means the same character).
pub fn blob(d: &ViewData) -> Result<String, serde_json::Error> {
    Ok(serde_json::to_string(d)?.replace('<', "\\u003c"))
}

/// The page: [`TEMPLATE`] with the blob in place of its placeholder.
pub fn render(d: &ViewData) -> Result<String, serde_json::Error> {
    let b = blob(d)?;
    let (head, tail) = TEMPLATE
        .split_once(PLACEHOLDER)
        .expect("page.html holds the data placeholder");
    Ok(format!("{head}{b}{tail}"))
}

/// The blob of a page written by [`render`], parsed back (for tests and tools).
pub fn extract(html: &str) -> Option<serde_json::Value> {
    let start_tag = r#"<script type="application/json" id="sinklab-data">"#;
    let i = html.find(start_tag)? + start_tag.len();
    let j = i + html[i..].find("</script>")?;
    serde_json::from_str(&html[i..j]).ok()
}

/// Parses a `--heads` list `L.H,…` against `layers × heads`, naming the bad entry.
pub fn parse_heads(spec: &str, layers: usize, heads: usize) -> Result<Vec<(usize, usize)>, String> {
    let mut out = Vec::new();
    for e in spec.split(',').map(str::trim) {
        let bad = || format!("--heads: `{e}` is not LAYER.HEAD (e.g. 3.1)");
        let (l, h) = e.split_once('.').ok_or_else(bad)?;
        let l: usize = l.parse().map_err(|_| bad())?;
        let h: usize = h.parse().map_err(|_| bad())?;
        if l >= layers {
            return Err(format!(
                "--heads: `{e}`: layer {l} out of range (the model has {layers} layers, 0..{})",
                layers - 1
            ));
        }
        if h >= heads {
            return Err(format!(
                "--heads: `{e}`: head {h} out of range (the model has {heads} heads per layer, 0..{})",
                heads - 1
            ));
        }
        if !out.contains(&(l, h)) {
            out.push((l, h));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        // RFC 4648 §10 test vectors.
        let v = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (i, o) in v {
            assert_eq!(base64(i.as_bytes()), o);
            assert_eq!(base64_len(i.len()), o.len());
        }
    }

    #[test]
    fn heads_spec_errors_name_the_entry() {
        assert_eq!(
            parse_heads("0.1, 2.3,0.1", 30, 9).unwrap(),
            vec![(0, 1), (2, 3)]
        );
        let e = parse_heads("0.1,x3", 30, 9).unwrap_err();
        assert!(e.contains("`x3`"), "{e}");
        let e = parse_heads("30.0", 30, 9).unwrap_err();
        assert!(e.contains("`30.0`") && e.contains("30 layers"), "{e}");
        let e = parse_heads("1.9", 30, 9).unwrap_err();
        assert!(e.contains("`1.9`") && e.contains("9 heads"), "{e}");
        assert!(parse_heads("", 30, 9).is_err());
    }

    #[test]
    fn template_has_one_placeholder_and_no_network_reference() {
        assert_eq!(TEMPLATE.matches(PLACEHOLDER).count(), 1);
        // The SVG namespace is a name, not a fetch.
        let t = TEMPLATE
            .replace("http://www.w3.org/2000/svg", "")
            .replace("url(#", "");
        for bad in [
            "http://", "https://", "//cdn", "@import", "<link", "src=", "url(",
        ] {
            assert!(!t.contains(bad), "page.html contains `{bad}`");
        }
    }
}
