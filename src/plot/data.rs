//! The data file beside every figure, `<stem>.json`: exactly what is drawn
//! (every series' points, bands, styles and labels, or every heat-map cell),
//! so `sinklab plot` can redraw the figure in another style without recomputing,
//! and what explains it: axis units, each series' colour and marker, the
//! observations behind aggregated points and the numbers of fitted laws.
//! Non-finite numbers are stored as `null`. The schema is in `docs/figures.md`.
//!
//! Format 2 adds the explanatory fields to format 1, which is still read (its
//! units empty, its series without aggregate or fit).

use super::heatmap::value_range;
use super::style::{self, Marker};
use super::{Aggregate, Fit, Heatmap, Panel, PlotError, Series, Style};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The format tag written first in every data file.
pub const FORMAT: &str = "sinklab-figure/2";

/// The previous format (no units, palette, aggregates or fits), still read.
pub const FORMAT_1: &str = "sinklab-figure/1";

/// Name of the colour map of every heat-map.
pub const COLORMAP: &str = "viridis";

/// A figure, as drawn.
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
    figure: Stored,
}

/// A figure as stored: the drawn fields plus those derived for the reader.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum Stored {
    Panels {
        title: String,
        panels: Vec<StoredPanel>,
    },
    Heatmap(StoredHeatmap),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredPanel {
    title: String,
    x_label: String,
    #[serde(default)]
    x_unit: String,
    y_label: String,
    #[serde(default)]
    y_unit: String,
    log_x: bool,
    log_y: bool,
    series: Vec<StoredSeries>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredSeries {
    name: String,
    style: Style,
    color: usize,
    /// Derived from `color`: the palette colour, `#rrggbb`.
    #[serde(default)]
    rgb: Option<String>,
    /// Derived from `color`: the marker shape (drawn for `points` and `line_points`).
    #[serde(default)]
    marker: Option<String>,
    #[serde(with = "pairs")]
    points: Vec<(f64, f64)>,
    #[serde(default, with = "triples")]
    band: Vec<(f64, f64, f64)>,
    #[serde(default)]
    aggregate: Option<Aggregate>,
    #[serde(default)]
    fit: Option<Fit>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredHeatmap {
    title: String,
    x_label: String,
    y_label: String,
    #[serde(default)]
    value_unit: String,
    /// Derived: always [`COLORMAP`].
    #[serde(default)]
    colormap: Option<String>,
    /// Derived from `title`: the colour bar's label.
    #[serde(default)]
    value_label: Option<String>,
    /// Derived from `values`: the finite values' range, mapped onto the colour map's ends.
    #[serde(default, with = "opt_pair")]
    value_range: Option<(f64, f64)>,
    #[serde(with = "grid")]
    values: Vec<Vec<f64>>,
}

/// The snake-case name of a marker shape.
pub fn marker_name(m: Marker) -> &'static str {
    match m {
        Marker::Circle => "circle",
        Marker::Square => "square",
        Marker::TriangleUp => "triangle_up",
        Marker::Diamond => "diamond",
        Marker::TriangleDown => "triangle_down",
        Marker::Pentagon => "pentagon",
        Marker::Hexagon => "hexagon",
        Marker::Star => "star",
    }
}

impl From<&Figure> for Stored {
    fn from(fig: &Figure) -> Self {
        match fig {
            Figure::Panels { title, panels } => Stored::Panels {
                title: title.clone(),
                panels: panels
                    .iter()
                    .map(|p| StoredPanel {
                        title: p.title.clone(),
                        x_label: p.x_label.clone(),
                        x_unit: p.x_unit.clone(),
                        y_label: p.y_label.clone(),
                        y_unit: p.y_unit.clone(),
                        log_x: p.log_x,
                        log_y: p.log_y,
                        series: p
                            .series
                            .iter()
                            .map(|s| StoredSeries {
                                name: s.name.clone(),
                                style: s.style,
                                color: s.color,
                                rgb: Some(style::color(s.color).hex()),
                                marker: Some(marker_name(style::marker(s.color)).into()),
                                points: s.points.clone(),
                                band: s.band.clone(),
                                aggregate: s.aggregate.clone(),
                                fit: s.fit,
                            })
                            .collect(),
                    })
                    .collect(),
            },
            Figure::Heatmap(h) => Stored::Heatmap(StoredHeatmap {
                title: h.title.clone(),
                x_label: h.x_label.clone(),
                y_label: h.y_label.clone(),
                value_unit: h.value_unit.clone(),
                colormap: Some(COLORMAP.into()),
                value_label: Some(super::heatmap::bar_label(&h.title)),
                value_range: value_range(&h.values),
                values: h.values.clone(),
            }),
        }
    }
}

/// A derived field of format 2 checked against what it is derived from: absent or
/// different is refused (`sinklab plot` draws from the fields it is derived from).
fn derived<T: PartialEq + std::fmt::Debug>(
    v2: bool,
    what: &str,
    stored: Option<T>,
    expected: T,
    from: &str,
) -> Result<(), String> {
    match stored {
        None if v2 => Err(format!("{what}: missing (format {FORMAT} states it)")),
        Some(got) if got != expected => Err(format!(
            "{what} is {got:?}, but its {from} gives {expected:?}: the figure is drawn from \
             {from}; change that instead"
        )),
        _ => Ok(()),
    }
}

impl Stored {
    /// The figure, after checking every derived field (required when `v2`).
    fn into_figure(self, v2: bool) -> Result<Figure, String> {
        Ok(match self {
            Stored::Panels { title, panels } => Figure::Panels {
                title,
                panels: panels
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let series = p
                            .series
                            .into_iter()
                            .enumerate()
                            .map(|(j, s)| {
                                let at = format!("panels[{i}].series[{j}]");
                                derived(
                                    v2,
                                    &format!("{at}.rgb"),
                                    s.rgb,
                                    style::color(s.color).hex(),
                                    "\"color\" (palette index)",
                                )?;
                                derived(
                                    v2,
                                    &format!("{at}.marker"),
                                    s.marker,
                                    marker_name(style::marker(s.color)).to_string(),
                                    "\"color\" (palette index)",
                                )?;
                                Ok(Series {
                                    name: s.name,
                                    points: s.points,
                                    style: s.style,
                                    band: s.band,
                                    color: s.color,
                                    aggregate: s.aggregate,
                                    fit: s.fit,
                                })
                            })
                            .collect::<Result<_, String>>()?;
                        Ok(Panel {
                            title: p.title,
                            x_label: p.x_label,
                            y_label: p.y_label,
                            log_x: p.log_x,
                            log_y: p.log_y,
                            x_unit: p.x_unit,
                            y_unit: p.y_unit,
                            series,
                        })
                    })
                    .collect::<Result<_, String>>()?,
            },
            Stored::Heatmap(h) => {
                derived(
                    v2,
                    "colormap",
                    h.colormap,
                    COLORMAP.to_string(),
                    "renderer (the only map)",
                )?;
                derived(
                    v2,
                    "value_label",
                    h.value_label,
                    super::heatmap::bar_label(&h.title),
                    "\"title\" (after its last \": \")",
                )?;
                if v2 || h.value_range.is_some() {
                    let want = value_range(&h.values);
                    if h.value_range != want {
                        return Err(format!(
                            "value_range is {:?}, but the finite cells of \"values\" span {want:?}",
                            h.value_range
                        ));
                    }
                }
                Figure::Heatmap(Heatmap {
                    title: h.title,
                    x_label: h.x_label,
                    y_label: h.y_label,
                    value_unit: h.value_unit,
                    values: h.values,
                })
            }
        })
    }
}

/// The data file text of `fig`.
pub fn to_json(fig: &Figure) -> String {
    let f = File {
        format: FORMAT.to_string(),
        figure: Stored::from(fig),
    };
    let mut s = serde_json::to_string_pretty(&f).expect("a figure serialises");
    s.push('\n');
    s
}

/// Parses data file text (format 2, or format 1); refuses anything that is not a figure,
/// and a format-2 file whose derived fields are missing or disagree with what is drawn.
pub fn from_json(s: &str) -> Result<Figure, String> {
    let v: serde_json::Value = serde_json::from_str(s).map_err(|e| format!("not JSON: {e}"))?;
    let v2 = match v.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT) => true,
        Some(FORMAT_1) => false,
        Some(other) => {
            return Err(format!(
                "format \"{other}\" is neither {FORMAT} nor {FORMAT_1}"
            ));
        }
        None => {
            return Err(format!(
                "no \"format\" key: not a sinklab figure data file ({FORMAT})"
            ));
        }
    };
    let f: File = serde_json::from_value(v).map_err(|e| format!("not a figure: {e}"))?;
    let figure = f.figure.into_figure(v2)?;
    let empty = match &figure {
        Figure::Panels { panels, .. } => !panels
            .iter()
            .flat_map(|p| &p.series)
            .any(|s| s.points.iter().any(|q| q.0.is_finite() && q.1.is_finite())),
        Figure::Heatmap(h) => !h.values.iter().flatten().any(|v| v.is_finite()),
    };
    if empty {
        return Err("the figure holds no finite point to draw".into());
    }
    Ok(figure)
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

/// Serde for one `f64`, non-finite as `null`.
pub mod num {
    use super::*;
    use serde::{Deserializer, Serializer};
    /// Serialise.
    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        opt(*v).serialize(s)
    }
    /// Deserialise.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        let v: Option<f64> = Deserialize::deserialize(d)?;
        Ok(val(v))
    }
}

/// Serde for an optional `(f64, f64)` as `[lo, hi]` or `null`.
mod opt_pair {
    use super::*;
    use serde::{Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &Option<(f64, f64)>, s: S) -> Result<S::Ok, S::Error> {
        v.map(|(a, b)| [opt(a), opt(b)]).serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<(f64, f64)>, D::Error> {
        let v: Option<[Option<f64>; 2]> = Deserialize::deserialize(d)?;
        Ok(v.map(|[a, b]| (val(a), val(b))))
    }
}
