//! Captured activations of one sequence, in the crate's safetensors schema:
//! `hidden.{l}` `[T, d]` (required, l = 0..L−1, embedding output excluded),
//! `attn.{l}` `[H, T, T]`, `mlp_out.{l}` `[T, d]` (the MLP's contribution to the
//! residual stream at layer l), `keys.{l}` / `values.{l}` `[H_kv, T, d_head]`,
//! `tokens` `[T]` (integer ids). Floats may be F32, F16, BF16 or F64; they are
//! held as f32.
//!
//! This is the crate's one reader of the activation schema: `sinklab secondary
//! --activations` uses it directly and [`crate::real::activations::analyze_file`]
//! computes its per-layer statistics from it; tensors are decoded by
//! [`crate::runtime::safetensors::decode`], the decoder of the model weights.
//! Layers must be contiguous from 0 and hidden states finite.
//!
//! How the model attends, which the tensors alone do not say, is in the file's string
//! metadata ([`AttentionLayout`]): `causal` (`true`/`false`), `sliding_window` (a JSON list
//! with one entry per layer, the window $w$ — query $i$ sees keys $j$ with
//! $i - w < j \le i$ — or `null`), `learned_sinks` (`true` when rows sum to
//! $1 - p_{\mathrm{sink}}$). A file without them is read as a causal model with full windows
//! and no learned sinks; a present entry that does not parse is refused.

use super::hidden::{HiddenStates, ShapeError};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::collections::HashMap;
use std::path::Path;

/// Errors reading or writing an activation file.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// File system error.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Not a safetensors file.
    #[error("not a valid safetensors file: {0}")]
    Format(String),
    /// A required tensor is missing.
    #[error("activation file has no tensor `{0}`")]
    Missing(String),
    /// A tensor has the wrong shape.
    #[error("tensor `{name}` has shape {got:?}, expected {expected}")]
    Shape {
        /// Tensor name.
        name: String,
        /// Its shape.
        got: Vec<usize>,
        /// What was expected.
        expected: String,
    },
    /// A tensor has an unsupported dtype.
    #[error("tensor `{name}` has dtype {dtype:?}, expected a float (or an integer for `tokens`)")]
    Dtype {
        /// Tensor name.
        name: String,
        /// Its dtype.
        dtype: Dtype,
    },
    /// A shape error building the hidden states.
    #[error(transparent)]
    Hidden(#[from] ShapeError),
}

/// A `[H, T, X]` tensor per layer (attention `[H,T,T]`, keys/values `[H_kv,T,d_head]`).
#[derive(Clone, Debug, PartialEq)]
pub struct HeadTensor {
    /// Heads.
    pub heads: usize,
    /// Positions.
    pub tokens: usize,
    /// Last dimension.
    pub width: usize,
    /// `[H][T][X]` values.
    pub data: Vec<f32>,
}

impl HeadTensor {
    /// Row `t` of head `h`.
    pub fn row(&self, h: usize, t: usize) -> &[f32] {
        let o = (h * self.tokens + t) * self.width;
        &self.data[o..o + self.width]
    }

    /// Head `h` as a `T × X` f64 matrix.
    pub fn head_mat(&self, h: usize) -> faer::Mat<f64> {
        faer::Mat::from_fn(self.tokens, self.width, |i, j| self.row(h, i)[j] as f64)
    }

    /// Mean over heads of $\lVert x_{h,t}\rVert$.
    pub fn mean_norm(&self, t: usize) -> f64 {
        (0..self.heads)
            .map(|h| {
                self.row(h, t)
                    .iter()
                    .map(|&v| (v as f64) * (v as f64))
                    .sum::<f64>()
                    .sqrt()
            })
            .sum::<f64>()
            / self.heads as f64
    }
}

/// The activations of one sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct Activations {
    /// Hidden states $h^l_t$.
    pub hidden: HiddenStates<f32>,
    /// Attention probabilities per layer, if captured.
    pub attn: Option<Vec<HeadTensor>>,
    /// MLP outputs per layer, if captured.
    pub mlp_out: Option<HiddenStates<f32>>,
    /// Keys per layer, if captured.
    pub keys: Option<Vec<HeadTensor>>,
    /// Values per layer, if captured.
    pub values: Option<Vec<HeadTensor>>,
    /// Token ids, if stored.
    pub tokens: Option<Vec<i64>>,
    /// The file's string metadata.
    pub metadata: HashMap<String, String>,
}

/// Metadata keys of [`AttentionLayout`].
pub const META_CAUSAL: &str = "causal";
/// See [`META_CAUSAL`].
pub const META_SLIDING_WINDOW: &str = "sliding_window";
/// See [`META_CAUSAL`].
pub const META_LEARNED_SINKS: &str = "learned_sinks";

/// How the model that wrote an activation file attends: what the per-layer statistics need
/// beyond the tensors (the number of keys query $i$ sees, and whether its row may sum to less
/// than 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttentionLayout {
    /// Queries see only earlier keys (and themselves).
    pub causal: bool,
    /// Per layer, the sliding window $w$ (`None`: every key).
    pub windows: Vec<Option<usize>>,
    /// Rows sum to $1 - p_{\mathrm{sink}}$ (a learned sink logit per head).
    pub learned_sinks: bool,
}

impl AttentionLayout {
    /// The layout of `m`, for a file it writes.
    pub fn of(m: &crate::runtime::pretrained::Pretrained) -> Self {
        AttentionLayout {
            causal: m.cfg.causal,
            windows: m.layers.iter().map(|l| l.window).collect(),
            learned_sinks: m.layers.iter().any(|l| l.sinks.is_some()),
        }
    }

    /// The metadata entries that state this layout.
    pub fn metadata(&self) -> [(String, String); 3] {
        let w: Vec<serde_json::Value> = self.windows.iter().map(|w| (*w).into()).collect();
        [
            (META_CAUSAL.into(), self.causal.to_string()),
            (
                META_SLIDING_WINDOW.into(),
                serde_json::Value::Array(w).to_string(),
            ),
            (META_LEARNED_SINKS.into(), self.learned_sinks.to_string()),
        ]
    }

    /// The layout stated in `meta` for a file of `layers` layers (the defaults where an entry
    /// is absent); an entry that does not parse, or a window list of another length, is an
    /// error naming the key.
    pub fn from_metadata(
        meta: &HashMap<String, String>,
        layers: usize,
    ) -> Result<Self, ActivationError> {
        let flag = |k: &str| -> Result<bool, ActivationError> {
            match meta.get(k).map(String::as_str) {
                None | Some("false") => Ok(false),
                Some("true") => Ok(true),
                Some(v) => Err(ActivationError::Format(format!(
                    "metadata `{k}` is `{v}`: expected `true` or `false`"
                ))),
            }
        };
        let causal = !meta.contains_key(META_CAUSAL) || flag(META_CAUSAL)?;
        let learned_sinks = flag(META_LEARNED_SINKS)?;
        let windows = match meta.get(META_SLIDING_WINDOW) {
            None => vec![None; layers],
            Some(v) => {
                let bad = || {
                    ActivationError::Format(format!(
                        "metadata `{META_SLIDING_WINDOW}` is `{v}`: expected a JSON list of \
                         {layers} entries (one per layer), each a window ≥ 1 or null"
                    ))
                };
                let list: Vec<Option<u64>> = serde_json::from_str(v).map_err(|_| bad())?;
                if list.len() != layers || list.contains(&Some(0)) {
                    return Err(bad());
                }
                list.into_iter()
                    .map(|w| w.map(|w| usize::try_from(w).map_err(|_| bad())).transpose())
                    .collect::<Result<_, _>>()?
            }
        };
        Ok(AttentionLayout {
            causal,
            windows,
            learned_sinks,
        })
    }
}

fn floats(name: &str, v: &TensorView<'_>) -> Result<Vec<f32>, ActivationError> {
    let dtype = v.dtype();
    if !matches!(dtype, Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::BF16) {
        return Err(ActivationError::Dtype {
            name: name.into(),
            dtype,
        });
    }
    crate::runtime::safetensors::decode(v).map_err(|dtype| ActivationError::Dtype {
        name: name.into(),
        dtype,
    })
}

fn ints(name: &str, v: &TensorView<'_>) -> Result<Vec<i64>, ActivationError> {
    let b = v.data();
    Ok(match v.dtype() {
        Dtype::I64 => b
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("chunk of 8")))
            .collect(),
        Dtype::U64 => b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("chunk of 8")) as i64)
            .collect(),
        Dtype::I32 => crate::runtime::safetensors::int32_le(b, true).collect(),
        Dtype::U32 => crate::runtime::safetensors::int32_le(b, false).collect(),
        Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::BF16 => {
            // Float-typed ids (some dumps store them so) must be exact integers.
            let f = floats(name, v)?;
            if let Some(bad) = f.iter().find(|x| x.fract() != 0.0 || !x.is_finite()) {
                return Err(ActivationError::Format(format!(
                    "`{name}` holds {bad}, not an integer token id"
                )));
            }
            f.into_iter().map(|x| x as i64).collect()
        }
        dtype => {
            return Err(ActivationError::Dtype {
                name: name.into(),
                dtype,
            });
        }
    })
}

/// Tolerance on the row sums of stored attention probabilities: storage rounding moves each
/// entry by at most half an ulp of its own size, so a row's sum moves by at most $2^{-9}$
/// (bf16) or $2^{-12}$ (f16) — and by about $T \cdot 2^{-24}$ for rows accumulated in f32;
/// the tolerances below leave a factor of about 5 over bf16 and 4 over f16 / f32 rows of up
/// to 4096 keys.
pub fn attn_row_tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::BF16 => 1e-2,
        _ => 1e-3,
    }
}

/// Refuses an empty dimension: the analyses loop over every declared index, so a shape like
/// `[1e12, 8, 0]` (no bytes, a trillion heads) would spin; with every dimension at least 1 the
/// declared element count is bounded by the file size (the safetensors reader has checked
/// that the bytes match the shape).
fn nonempty_dims(name: &str, v: &TensorView<'_>) -> Result<(), ActivationError> {
    if v.shape().contains(&0) {
        return Err(ActivationError::Format(format!(
            "`{name}` has an empty dimension in its shape {:?}",
            v.shape()
        )));
    }
    Ok(())
}

fn finite(name: &str, data: &[f32]) -> Result<(), ActivationError> {
    if let Some(k) = data.iter().position(|v| !v.is_finite()) {
        return Err(ActivationError::Format(format!(
            "`{name}` has a non-finite value ({}) at index {k}",
            data[k]
        )));
    }
    Ok(())
}

/// Every row of `[H, T, T]` attention is a probability vector: entries in [0, 1] and the sum 1
/// within [`attn_row_tolerance`] (with learned sinks, a sum in $[0, 1]$: the rest is the
/// sink's).
fn probabilities(
    name: &str,
    h: &HeadTensor,
    dtype: Dtype,
    learned_sinks: bool,
) -> Result<(), ActivationError> {
    let tol = attn_row_tolerance(dtype);
    for hh in 0..h.heads {
        for i in 0..h.tokens {
            let row = h.row(hh, i);
            if let Some(j) = row.iter().position(|&p| !(0.0..=1.0).contains(&p)) {
                return Err(ActivationError::Format(format!(
                    "`{name}` head {hh} row {i} key {j} is {}: attention probabilities lie in [0, 1]",
                    row[j]
                )));
            }
            let sum: f64 = row.iter().map(|&p| p as f64).sum();
            if learned_sinks && sum <= 1.0 + tol {
                continue;
            }
            if (sum - 1.0).abs() > tol {
                let to = if learned_sinks { "at most 1" } else { "1" };
                return Err(ActivationError::Format(format!(
                    "`{name}` head {hh} row {i} sums to {sum}: attention rows sum to {to} (tolerance {tol} for {dtype:?})"
                )));
            }
        }
    }
    Ok(())
}

fn shape_err(name: &str, got: &[usize], expected: String) -> ActivationError {
    ActivationError::Shape {
        name: name.into(),
        got: got.to_vec(),
        expected,
    }
}

impl Activations {
    /// Parses an activation file from bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ActivationError> {
        let st =
            SafeTensors::deserialize(bytes).map_err(|e| ActivationError::Format(e.to_string()))?;
        let (_, meta) = SafeTensors::read_metadata(bytes)
            .map_err(|e| ActivationError::Format(e.to_string()))?;
        let get = |n: &str| st.tensor(n).ok();
        let mut layers = 0;
        while get(&format!("hidden.{layers}")).is_some() {
            layers += 1;
        }
        if layers == 0 {
            return Err(ActivationError::Missing("hidden.0".into()));
        }
        if let Some(extra) = st.names().into_iter().find(|n| {
            n.strip_prefix("hidden.")
                .and_then(|s| s.parse::<usize>().ok())
                .is_some_and(|l| l >= layers)
        }) {
            return Err(ActivationError::Format(format!(
                "`{extra}` present but layers are not contiguous from 0 (only 0..{layers})"
            )));
        }
        let h0 = get("hidden.0").expect("checked above");
        let [t, d] = h0.shape() else {
            return Err(shape_err("hidden.0", h0.shape(), "[T, d]".into()));
        };
        let (t, d) = (*t, *d);
        nonempty_dims("hidden.0", &h0)?;
        if t < 2 {
            return Err(ActivationError::Format(format!(
                "`hidden.0` holds T = {t} position: attention to the first token, the sink \
                 detector and every per-position statistic need at least 2"
            )));
        }
        let metadata = meta.metadata().clone().unwrap_or_default();
        let layout = AttentionLayout::from_metadata(&metadata, layers)?;
        // The per-layer analyses hold T × T matrices: check their size before any work.
        crate::budget::Budget::default()
            .check(
                &format!("activation file with T = {t} positions"),
                crate::budget::Need::bytes(8.0 * 4.0 * (t as f64) * (t as f64)),
                false,
            )
            .map_err(|e| ActivationError::Format(e.to_string()))?;
        // [T, d] stacks (hidden, mlp_out).
        let stack = |prefix: &str| -> Result<Option<HiddenStates<f32>>, ActivationError> {
            if get(&format!("{prefix}.0")).is_none() {
                return Ok(None);
            }
            let mut data = Vec::with_capacity(layers * t * d);
            for l in 0..layers {
                let name = format!("{prefix}.{l}");
                let v = get(&name).ok_or_else(|| ActivationError::Missing(name.clone()))?;
                if v.shape() != [t, d] {
                    return Err(shape_err(&name, v.shape(), format!("[{t}, {d}]")));
                }
                let x = floats(&name, &v)?;
                finite(&name, &x)?;
                data.extend(x);
            }
            Ok(Some(HiddenStates::new(layers, t, d, data)?))
        };
        // [H, T, X] per layer; X = T for attention, any fixed width otherwise.
        let heads =
            |prefix: &str, square: bool| -> Result<Option<Vec<HeadTensor>>, ActivationError> {
                if get(&format!("{prefix}.0")).is_none() {
                    return Ok(None);
                }
                let mut out: Vec<HeadTensor> = Vec::with_capacity(layers);
                for l in 0..layers {
                    let name = format!("{prefix}.{l}");
                    let v = get(&name).ok_or_else(|| ActivationError::Missing(name.clone()))?;
                    let ok = match v.shape() {
                        [hh, tt, x] => {
                            *hh > 0
                                && *tt == t
                                && (!square || *x == t)
                                && out.first().is_none_or(|f| f.heads == *hh && f.width == *x)
                        }
                        _ => false,
                    };
                    if !ok {
                        let exp = if square {
                            format!("[H, {t}, {t}]")
                        } else {
                            format!("[H, {t}, X] with H, X as in layer 0")
                        };
                        return Err(shape_err(&name, v.shape(), exp));
                    }
                    nonempty_dims(&name, &v)?;
                    let s = v.shape();
                    let h = HeadTensor {
                        heads: s[0],
                        tokens: t,
                        width: s[2],
                        data: floats(&name, &v)?,
                    };
                    finite(&name, &h.data)?;
                    if square {
                        probabilities(&name, &h, v.dtype(), layout.learned_sinks)?;
                    }
                    out.push(h);
                }
                Ok(Some(out))
            };
        let hidden = stack("hidden")?.expect("hidden.0 exists");
        if let Some(k) = hidden.data().iter().position(|v| !v.is_finite()) {
            let (l, r) = (k / (t * d), k % (t * d));
            return Err(ActivationError::Format(format!(
                "`hidden.{l}` has a non-finite value at index {r}"
            )));
        }
        let (attn, keys, values) = (
            heads("attn", true)?,
            heads("keys", false)?,
            heads("values", false)?,
        );
        if let (Some(k), Some(v)) = (&keys, &values)
            && (k[0].heads != v[0].heads || k[0].width != v[0].width)
        {
            return Err(ActivationError::Format(format!(
                "keys [{}, T, {}] and values [{}, T, {}] disagree",
                k[0].heads, k[0].width, v[0].heads, v[0].width
            )));
        }
        let hk = keys.as_ref().or(values.as_ref()).map(|k| k[0].heads);
        if let (Some(a), Some(hk)) = (&attn, hk)
            && a[0].heads % hk != 0
        {
            return Err(ActivationError::Format(format!(
                "{} attention heads not a multiple of {hk} kv heads",
                a[0].heads
            )));
        }
        let tokens = match get("tokens") {
            None => None,
            Some(v) => {
                if v.shape() != [t] {
                    return Err(shape_err("tokens", v.shape(), format!("[{t}]")));
                }
                let ids = ints("tokens", &v)?;
                // Ids index the vocabulary: non-negative, within u32 (and within the vocabulary
                // when the file's metadata states it).
                let vocab = meta
                    .metadata()
                    .as_ref()
                    .and_then(|m| m.get("vocab_size"))
                    .and_then(|s| s.parse::<i64>().ok());
                let limit = vocab.unwrap_or(u32::MAX as i64 + 1);
                if let Some(k) = ids.iter().position(|&x| x < 0 || x >= limit) {
                    return Err(ActivationError::Format(format!(
                        "`tokens` position {k} holds id {}: ids lie in [0, {limit}){}",
                        ids[k],
                        if vocab.is_some() {
                            " (metadata vocab_size)"
                        } else {
                            ""
                        }
                    )));
                }
                Some(ids)
            }
        };
        Ok(Self {
            hidden,
            attn,
            mlp_out: stack("mlp_out")?,
            keys,
            values,
            tokens,
            metadata,
        })
    }

    /// How the model that wrote the file attends (from its metadata; checked when read).
    pub fn layout(&self) -> Result<AttentionLayout, ActivationError> {
        AttentionLayout::from_metadata(&self.metadata, self.hidden.layers())
    }

    /// Reads an activation file.
    pub fn read(path: &Path) -> Result<Self, ActivationError> {
        let io = |source| ActivationError::Io {
            path: path.display().to_string(),
            source,
        };
        // A device (`/dev/zero`), a FIFO or a directory is refused before any byte is read.
        let m = std::fs::metadata(path).map_err(io)?;
        if !m.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a directory, device, FIFO or socket); refusing to read it",
            )));
        }
        let bytes = std::fs::read(path).map_err(io)?;
        Self::from_bytes(&bytes)
    }

    /// Serialises to safetensors bytes (F32 floats, I64 tokens).
    pub fn to_bytes(&self) -> Result<Vec<u8>, ActivationError> {
        let (l, t, d) = (
            self.hidden.layers(),
            self.hidden.tokens(),
            self.hidden.dim(),
        );
        let mut named: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
        let f32b = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        for (prefix, hs) in [
            ("hidden", Some(&self.hidden)),
            ("mlp_out", self.mlp_out.as_ref()),
        ] {
            if let Some(hs) = hs {
                for layer in 0..l {
                    let o = layer * t * d;
                    named.push((
                        format!("{prefix}.{layer}"),
                        Dtype::F32,
                        vec![t, d],
                        f32b(&hs.data()[o..o + t * d]),
                    ));
                }
            }
        }
        for (prefix, ht) in [
            ("attn", &self.attn),
            ("keys", &self.keys),
            ("values", &self.values),
        ] {
            if let Some(v) = ht {
                for (layer, x) in v.iter().enumerate() {
                    named.push((
                        format!("{prefix}.{layer}"),
                        Dtype::F32,
                        vec![x.heads, x.tokens, x.width],
                        f32b(&x.data),
                    ));
                }
            }
        }
        if let Some(tk) = &self.tokens {
            named.push((
                "tokens".into(),
                Dtype::I64,
                vec![tk.len()],
                tk.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ));
        }
        let views: Vec<(String, TensorView<'_>)> = named
            .iter()
            .map(|(n, dt, s, b)| TensorView::new(*dt, s.clone(), b).map(|v| (n.clone(), v)))
            .collect::<Result<_, _>>()
            .map_err(|e| ActivationError::Format(e.to_string()))?;
        let meta = if self.metadata.is_empty() {
            None
        } else {
            Some(self.metadata.clone())
        };
        safetensors::serialize(views, meta).map_err(|e| ActivationError::Format(e.to_string()))
    }

    /// Writes an activation file.
    pub fn write(&self, path: &Path) -> Result<(), ActivationError> {
        let b = self.to_bytes()?;
        crate::atomic::write(path, b).map_err(|source| ActivationError::Io {
            path: path.display().to_string(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Activations {
        let (l, t, d, h) = (3, 4, 5, 2);
        let hidden =
            HiddenStates::new(l, t, d, (0..l * t * d).map(|i| i as f32 * 0.5).collect()).unwrap();
        let mlp =
            HiddenStates::new(l, t, d, (0..l * t * d).map(|i| -(i as f32)).collect()).unwrap();
        let attn = (0..l)
            .map(|_| HeadTensor {
                heads: h,
                tokens: t,
                width: t,
                // Causal uniform rows: row i spreads its mass over keys 0..=i.
                data: (0..h * t * t)
                    .map(|k| {
                        let (i, j) = ((k / t) % t, k % t);
                        if j <= i { 1.0 / (i + 1) as f32 } else { 0.0 }
                    })
                    .collect(),
            })
            .collect();
        let kv = (0..l)
            .map(|_| HeadTensor {
                heads: 1,
                tokens: t,
                width: 3,
                data: vec![1.0; t * 3],
            })
            .collect::<Vec<_>>();
        Activations {
            hidden,
            attn: Some(attn),
            mlp_out: Some(mlp),
            keys: Some(kv.clone()),
            values: Some(kv),
            tokens: Some(vec![1, 5, 9, 2]),
            metadata: HashMap::from([("model".to_string(), "test".to_string())]),
        }
    }

    #[test]
    fn round_trip() {
        let a = small();
        let b = Activations::from_bytes(&a.to_bytes().unwrap()).unwrap();
        assert_eq!(a, b);
        assert!((b.keys.as_ref().unwrap()[0].mean_norm(2) - 3f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn bad_files_are_errors() {
        assert!(matches!(
            Activations::from_bytes(b"nonsense"),
            Err(ActivationError::Format(_))
        ));
        let mut a = small();
        a.attn.as_mut().unwrap()[1].width = 3;
        a.attn.as_mut().unwrap()[1].data.truncate(2 * 4 * 3);
        assert!(matches!(
            Activations::from_bytes(&a.to_bytes().unwrap()),
            Err(ActivationError::Shape { .. })
        ));
        let empty = safetensors::serialize(Vec::<(String, TensorView<'_>)>::new(), None).unwrap();
        assert!(matches!(
            Activations::from_bytes(&empty),
            Err(ActivationError::Missing(_))
        ));
        assert!(matches!(
            Activations::read(Path::new("/nonexistent/x.safetensors")),
            Err(ActivationError::Io { .. })
        ));
    }
}
