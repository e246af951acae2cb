//! The data file beside every figure, `<stem>.json`: exactly what is drawn
//! (every series' points, bands, styles and labels, or every heat-map cell),
//! so `sinklab plot` can redraw the figure in another style without recomputing.
//! Non-finite numbers are stored as `null`.

use super::{Heatmap, Panel, PlotError};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The format tag written first in every data file.
pub const FORMAT: &str = "sinklab-figure/1";

/// A figure, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Figure {
    /// Panels of series.
    Panels {
        /// Figure title (empty: none).
        title: String,
        /// The panels, row by row.
        panels: Vec<Panel>,
    },
    /// One heat-map.
    Heatmap(Heatmap),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    format: String,
    figure: Figure,
}

/// The data file text of `fig`.
pub fn to_json(fig: &Figure) -> String {
    let f = File {
        format: FORMAT.to_string(),
        figure: fig.clone(),
    };
    let mut s = serde_json::to_string_pretty(&f).expect("a figure serialises");
    s.push('\n');
    s
}

/// Parses data file text; refuses anything that is not a figure of this format.
pub fn from_json(s: &str) -> Result<Figure, String> {
    let v: serde_json::Value = serde_json::from_str(s).map_err(|e| format!("not JSON: {e}"))?;
    match v.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT) => {}
        Some(other) => return Err(format!("format \"{other}\" is not {FORMAT}")),
        None => {
            return Err(format!(
                "no \"format\" key: not a sinklab figure data file ({FORMAT})"
            ));
        }
    }
    let f: File = serde_json::from_value(v).map_err(|e| format!("not a figure: {e}"))?;
    let empty = match &f.figure {
        Figure::Panels { panels, .. } => !panels
            .iter()
            .flat_map(|p| &p.series)
            .any(|s| s.points.iter().any(|q| q.0.is_finite() && q.1.is_finite())),
        Figure::Heatmap(h) => !h.values.iter().flatten().any(|v| v.is_finite()),
    };
    if empty {
        return Err("the figure holds no finite point to draw".into());
    }
    Ok(f.figure)
}

/// Reads a data file.
pub fn read(path: &Path) -> Result<Figure, PlotError> {
    let s = crate::budget::read_text(path, crate::budget::MAX_FIGURE_BYTES).map_err(|e| {
        PlotError::Data {
            path: path.to_path_buf(),
            msg: e.to_string(),
        }
    })?;
    from_json(&s).map_err(|msg| PlotError::Data {
        path: path.to_path_buf(),
        msg,
    })
}

fn opt(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

fn val(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

/// Serde for `Vec<(f64, f64)>` with non-finite numbers as `null`.
pub mod pairs {
    use super::*;
    use serde::{Deserializer, Serializer};
    /// Serialise.
    pub fn serialize<S: Serializer>(v: &[(f64, f64)], s: S) -> Result<S::Ok, S::Error> {
        v.iter()
            .map(|p| [opt(p.0), opt(p.1)])
            .collect::<Vec<_>>()
            .serialize(s)
    }
    /// Deserialise.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(f64, f64)>, D::Error> {
        let v: Vec<[Option<f64>; 2]> = Deserialize::deserialize(d)?;
        Ok(v.into_iter().map(|[a, b]| (val(a), val(b))).collect())
    }
}

/// Serde for `Vec<(f64, f64, f64)>` with non-finite numbers as `null`.
pub mod triples {
    use super::*;
    use serde::{Deserializer, Serializer};
    /// Serialise.
    pub fn serialize<S: Serializer>(v: &[(f64, f64, f64)], s: S) -> Result<S::Ok, S::Error> {
        v.iter()
            .map(|p| [opt(p.0), opt(p.1), opt(p.2)])
            .collect::<Vec<_>>()
            .serialize(s)
    }
    /// Deserialise.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(f64, f64, f64)>, D::Error> {
        let v: Vec<[Option<f64>; 3]> = Deserialize::deserialize(d)?;
        Ok(v.into_iter()
            .map(|[a, b, c]| (val(a), val(b), val(c)))
            .collect())
    }
}

/// Serde for `Vec<Vec<f64>>` with non-finite numbers as `null`.
pub mod grid {
    use super::*;
    use serde::{Deserializer, Serializer};
    /// Serialise.
    pub fn serialize<S: Serializer>(v: &[Vec<f64>], s: S) -> Result<S::Ok, S::Error> {
        v.iter()
            .map(|r| r.iter().map(|&x| opt(x)).collect::<Vec<_>>())
            .collect::<Vec<_>>()
            .serialize(s)
    }
    /// Deserialise.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<f64>>, D::Error> {
        let v: Vec<Vec<Option<f64>>> = Deserialize::deserialize(d)?;
        Ok(v.into_iter()
            .map(|r| r.into_iter().map(val).collect())
            .collect())
    }
}
