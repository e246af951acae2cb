//! Figures for papers: line/scatter panels (linear or log axes, confidence
//! bands, reference slopes) and heat-maps, each written as SVG (text as text)
//! and PNG (300 dpi at its printed width), with the data file that redraws it.
//!
//! One module per concept: [`style`] (sizes, palette, markers), [`ticks`],
//! [`text`] (embedded font metrics), [`legend`], [`axes`] (panels),
//! [`heatmap`] (cells and colour bar), [`data`] (the data file), [`scene`]
//! (what is drawn), [`svg`] and [`png`] (rendering). Every figure goes
//! data → [`Figure`] → [`scene::Scene`] → SVG/PNG, and `sinklab plot
//! <stem>.json` repeats the last two steps from the file alone.

pub mod axes;
pub mod data;
pub mod heatmap;
pub mod legend;
pub mod png;
pub mod scene;
pub mod style;
pub mod svg;
pub mod text;
pub mod ticks;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use data::Figure;
pub use style::{MAX_COLUMNS, Options};

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Style {
    /// Connected line.
    Line,
    /// Markers only.
    Points,
    /// Line with markers.
    LinePoints,
    /// Dashed line.
    Dashed,
    /// Dotted line (reference slopes).
    Dotted,
    /// Dash-dotted line (reference slopes).
    DashDot,
}

/// One data series of a panel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Series {
    /// Legend label (`^{…}` marks superscripts); empty: no legend entry. Series
    /// with the same label and colour share one entry (line and markers together).
    pub name: String,
    /// Points (x, y); NaN points are not drawn (stored as `null`).
    #[serde(with = "data::pairs")]
    pub points: Vec<(f64, f64)>,
    /// How to draw it.
    pub style: Style,
    /// Optional band (x, low, high), drawn shaded in the series colour.
    #[serde(default, with = "data::triples")]
    pub band: Vec<(f64, f64, f64)>,
    /// Palette index (series with the same index share a colour and a marker shape).
    pub color: usize,
    /// The observations behind `points` when each point aggregates several (not drawn).
    #[serde(default)]
    pub aggregate: Option<Aggregate>,
    /// The fitted law this series draws, with its numbers (not drawn as text).
    #[serde(default)]
    pub fit: Option<Fit>,
}

impl Series {
    /// A series with no band, aggregate or fit.
    pub fn new(
        name: impl Into<String>,
        points: Vec<(f64, f64)>,
        style: Style,
        color: usize,
    ) -> Self {
        Self {
            name: name.into(),
            points,
            style,
            band: Vec::new(),
            color,
            aggregate: None,
            fit: None,
        }
    }
}

/// One observation behind an aggregated point: the value `y` at `x` of one seed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    /// Abscissa (the point's x).
    #[serde(with = "data::num")]
    pub x: f64,
    /// The observed value.
    #[serde(with = "data::num")]
    pub y: f64,
    /// Seed of the replicate.
    pub seed: u64,
}

/// How a series' points were formed from the observations behind them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Aggregate {
    /// Point $(x, y)$: $y = \exp(\mathrm{mean}\thinspace\ln y_s)$ over the samples at $x$.
    GeometricMean {
        /// Every sample entering a point, ordered by (x, seed).
        samples: Vec<Sample>,
    },
    /// Point $(x, y)$: $y$ = geometric mean of `numerator` at $x$ over that of `denominator`.
    RatioOfGeometricMeans {
        /// Samples of the numerator, ordered by (x, seed).
        numerator: Vec<Sample>,
        /// Samples of the denominator, ordered by (x, seed).
        denominator: Vec<Sample>,
    },
}

/// A fitted law and its numbers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "law", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fit {
    /// $y = e^a x^b$ (least squares on log–log axes) with a bootstrap interval of $b$.
    Power {
        /// Exponent $b$.
        #[serde(with = "data::num")]
        exponent: f64,
        /// Intercept $a$ (natural log).
        #[serde(with = "data::num")]
        intercept: f64,
        /// Lower end of the interval of $b$.
        #[serde(with = "data::num")]
        ci_low: f64,
        /// Upper end of the interval of $b$.
        #[serde(with = "data::num")]
        ci_high: f64,
        /// Confidence level of the interval (e.g. 0.95).
        #[serde(with = "data::num")]
        level: f64,
        /// Observations fitted.
        n: usize,
    },
    /// $y = a + b x$ (ordinary least squares).
    Linear {
        /// Slope $b$.
        #[serde(with = "data::num")]
        slope: f64,
        /// Intercept $a$.
        #[serde(with = "data::num")]
        intercept: f64,
        /// Coefficient of determination.
        #[serde(with = "data::num")]
        r2: f64,
        /// Observations fitted.
        n: usize,
    },
}

/// Palette index of reference lines (black).
pub const REFERENCE_COLOR: usize = 7;

/// A reference line $y = c\thinspace x^k$ over the x-range of `data`, through the
/// geometric mean of its positive points: the claimed slope drawn against the
/// measured one on log–log axes. Dotted for the first guide, dash-dotted for others.
pub fn slope_guide(
    label: impl Into<String>,
    k: f64,
    data: &[(f64, f64)],
    dotted: bool,
) -> Option<Series> {
    let pos: Vec<(f64, f64)> = data
        .iter()
        .copied()
        .filter(|p| p.0 > 0.0 && p.1 > 0.0 && p.0.is_finite() && p.1.is_finite())
        .collect();
    if pos.len() < 2 {
        return None;
    }
    let n = pos.len() as f64;
    let mx = pos.iter().map(|p| p.0.ln()).sum::<f64>() / n;
    let my = pos.iter().map(|p| p.1.ln()).sum::<f64>() / n;
    let x0 = pos.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x1 = pos.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let y = |x: f64| (my + k * (x.ln() - mx)).exp();
    Some(Series::new(
        label,
        vec![(x0, y(x0)), (x1, y(x1))],
        if dotted {
            Style::Dotted
        } else {
            Style::DashDot
        },
        REFERENCE_COLOR,
    ))
}

/// One panel (set of axes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Panel {
    /// Panel title (not drawn when it repeats the figure title).
    pub title: String,
    /// X-axis label.
    pub x_label: String,
    /// Y-axis label.
    pub y_label: String,
    /// Log-scaled x axis.
    pub log_x: bool,
    /// Log-scaled y axis.
    pub log_y: bool,
    /// Unit of the x quantity (`"1"`: a pure number; empty: not stated; not drawn).
    #[serde(default)]
    pub x_unit: String,
    /// Unit of the y quantity (as `x_unit`).
    #[serde(default)]
    pub y_unit: String,
    /// Series drawn on the panel.
    pub series: Vec<Series>,
}

/// A heat-map: `values[row][col]`, rows drawn top to bottom. The colour bar is
/// labelled with the part of the title after its last `": "`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heatmap {
    /// Title.
    pub title: String,
    /// Label of the horizontal axis (columns).
    pub x_label: String,
    /// Label of the vertical axis (rows).
    pub y_label: String,
    /// Unit of the cell values (`"1"`: a pure number; empty: not stated; not drawn).
    #[serde(default)]
    pub value_unit: String,
    /// Cell values (NaN cells are drawn grey, stored as `null`).
    #[serde(with = "data::grid")]
    pub values: Vec<Vec<f64>>,
}

/// Errors while drawing a figure.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// A file could not be written, or the figure could not be laid out.
    #[error("drawing {path}: {msg}")]
    Draw {
        /// The output file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
    /// The figure holds no finite point to draw.
    #[error("figure {0}: no finite data to draw")]
    Empty(String),
    /// A data file that is not a figure.
    #[error("data file {path}: {msg}")]
    Data {
        /// The data file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
}

/// Kept for callers of the former plotters-based module: fonts are now embedded
/// and measured directly, so there is nothing to register.
pub fn ensure_font() {}

/// Most series of one figure (legend and colours are laid out per series).
pub const MAX_SERIES: usize = 2_000;
/// Most points (and band points) of one figure.
pub const MAX_POINTS: usize = 5_000_000;
/// Most cells of one heat-map (each an SVG `<rect>` of about 70 bytes: 2²² cells make a
/// 300 MB SVG).
pub const MAX_CELLS: usize = 1 << 22;

/// Refuses a figure whose drawing would be out of scale (series, points or heat-map cells
/// over [`MAX_SERIES`], [`MAX_POINTS`], [`MAX_CELLS`]), naming the count and the limit, before
/// anything is laid out or allocated.
pub fn check_size(fig: &Figure) -> Result<(), String> {
    let over = |what: &str, n: usize, max: usize| {
        Err(format!(
            "the figure has {n} {what}, over the limit of {max} for one figure (split it)"
        ))
    };
    match fig {
        Figure::Panels { panels, .. } => {
            let series: usize = panels.iter().map(|p| p.series.len()).sum();
            if series > MAX_SERIES {
                return over("series", series, MAX_SERIES);
            }
            let points: usize = panels
                .iter()
                .flat_map(|p| &p.series)
                .map(|s| s.points.len() + s.band.len())
                .sum();
            if points > MAX_POINTS {
                return over("points", points, MAX_POINTS);
            }
        }
        Figure::Heatmap(h) => {
            let cells: usize = h.values.iter().map(Vec::len).sum();
            if cells > MAX_CELLS {
                return over("heat-map cells", cells, MAX_CELLS);
            }
        }
    }
    Ok(())
}

/// Lays out a figure with `opts`.
pub fn layout(fig: &Figure, opts: &Options) -> Result<scene::Scene, String> {
    opts.check()?;
    check_size(fig)?;
    match fig {
        Figure::Panels { title, panels } => axes::layout(title, panels, opts),
        Figure::Heatmap(h) => heatmap::layout(h, opts),
    }
}

/// Writes `<stem>.svg` and `<stem>.png` of `fig` drawn with `opts`; returns both paths.
pub fn draw(stem: &Path, fig: &Figure, opts: &Options) -> Result<Vec<PathBuf>, PlotError> {
    let sc = layout(fig, opts).map_err(|msg| PlotError::Draw {
        path: stem.to_path_buf(),
        msg,
    })?;
    mkdir(stem)?;
    let svg_path = file_of(stem, "svg");
    let png_path = file_of(stem, "png");
    write(&svg_path, svg::write(&sc).as_bytes())?;
    let bytes = png::write(&sc).map_err(|msg| PlotError::Draw {
        path: png_path.clone(),
        msg,
    })?;
    write(&png_path, &bytes)?;
    Ok(vec![svg_path, png_path])
}

/// `<stem>.<ext>`: the extension appended to the whole stem, never replacing a part of it after
/// a dot (`real_qwen2.5-coder-0.5b` gives `real_qwen2.5-coder-0.5b.svg`, not
/// `real_qwen2.5-coder-0.svg`), so two stems that differ after a dot never share a file.
pub fn file_of(stem: &Path, ext: &str) -> PathBuf {
    let mut s = stem.as_os_str().to_os_string();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

fn mkdir(stem: &Path) -> Result<(), PlotError> {
    if let Some(dir) = stem.parent() {
        std::fs::create_dir_all(dir).map_err(|e| PlotError::Draw {
            path: dir.to_path_buf(),
            msg: e.to_string(),
        })?;
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), PlotError> {
    crate::atomic::write(path, bytes).map_err(|e| PlotError::Draw {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })
}

/// Writes the data file `<stem>.json` of `fig`, then draws the figure from the
/// file's contents (so `sinklab plot <stem>.json` reproduces it byte for byte).
/// Returns the SVG and PNG paths (the data file is always `<stem>.json`).
pub fn render_figure(stem: &Path, fig: &Figure) -> Result<Vec<PathBuf>, PlotError> {
    mkdir(stem)?;
    let json_path = file_of(stem, "json");
    let json = data::to_json(fig);
    write(&json_path, json.as_bytes())?;
    let back = data::from_json(&json).map_err(|msg| PlotError::Data {
        path: json_path.clone(),
        msg,
    })?;
    draw(stem, &back, &Options::default())
}

/// Draws `panels` (at most [`MAX_COLUMNS`] a row) under `title` into `stem.svg`
/// and `stem.png`, with the data in `stem.json`; returns the SVG and PNG paths.
pub fn render(stem: &Path, title: &str, panels: &[Panel]) -> Result<Vec<PathBuf>, PlotError> {
    let finite = panels.iter().any(|p| {
        p.series
            .iter()
            .any(|s| s.points.iter().any(|q| q.0.is_finite() && q.1.is_finite()))
    });
    if !finite {
        return Err(PlotError::Empty(stem.display().to_string()));
    }
    render_figure(
        stem,
        &Figure::Panels {
            title: title.to_string(),
            panels: panels.to_vec(),
        },
    )
}

/// Draws a heat-map into `stem.svg` and `stem.png`, with its data in `stem.json`;
/// returns the SVG and PNG paths.
pub fn render_heatmap(stem: &Path, h: &Heatmap) -> Result<Vec<PathBuf>, PlotError> {
    if !h.values.iter().flatten().any(|v| v.is_finite()) {
        return Err(PlotError::Empty(stem.display().to_string()));
    }
    render_figure(stem, &Figure::Heatmap(h.clone()))
}

/// Redraws the figure of data file `path` with `opts` into `out_dir` (default:
/// beside the data file), without recomputing anything; returns the SVG and PNG paths.
pub fn redraw(
    path: &Path,
    opts: &Options,
    out_dir: Option<&Path>,
) -> Result<Vec<PathBuf>, PlotError> {
    let fig = data::read(path)?;
    let name = path.file_stem().ok_or_else(|| PlotError::Data {
        path: path.to_path_buf(),
        msg: "no file name".into(),
    })?;
    let dir = out_dir
        .map(Path::to_path_buf)
        .or_else(|| path.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    draw(&dir.join(name), &fig, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_loglog_and_heatmap() {
        let dir = tempfile::tempdir().unwrap();
        let pts: Vec<(f64, f64)> = (1..10)
            .map(|t| (t as f64 * 8.0, (t as f64 * 8.0).powf(1.5)))
            .collect();
        let mut s = Series::new("diag", pts.clone(), Style::LinePoints, 0);
        s.band = pts.iter().map(|&(x, y)| (x, 0.8 * y, 1.2 * y)).collect();
        let p = Panel {
            title: "cost".into(),
            x_label: "T".into(),
            y_label: "C".into(),
            log_x: true,
            log_y: true,
            series: vec![s],
            ..Default::default()
        };
        let files = render(&dir.path().join("fig"), "test", &[p.clone(), p]).unwrap();
        assert_eq!(files.len(), 2);
        assert!(dir.path().join("fig.json").exists());
        for f in &files {
            assert!(std::fs::metadata(f).unwrap().len() > 500, "{f:?} too small");
        }
        let h = Heatmap {
            title: "h".into(),
            x_label: "head".into(),
            y_label: "layer".into(),
            values: vec![vec![0.0, 1.0], vec![f64::NAN, 0.5]],
            ..Default::default()
        };
        let files = render_heatmap(&dir.path().join("heat"), &h).unwrap();
        assert_eq!(files.len(), 2);
        assert!(dir.path().join("heat.json").exists());
        let empty = Panel {
            series: vec![Series::new("x", vec![(f64::NAN, 1.0)], Style::Line, 0)],
            ..Default::default()
        };
        assert!(render(&dir.path().join("bad"), "", &[empty]).is_err());
    }

    #[test]
    fn panels_wrap_after_three_columns() {
        assert_eq!(axes::grid(0, MAX_COLUMNS), (1, 1));
        assert_eq!(axes::grid(1, MAX_COLUMNS), (1, 1));
        assert_eq!(axes::grid(3, MAX_COLUMNS), (1, 3));
        assert_eq!(axes::grid(4, MAX_COLUMNS), (2, 3));
        assert_eq!(axes::grid(5, MAX_COLUMNS), (2, 3));
        assert_eq!(axes::grid(7, MAX_COLUMNS), (3, 3));
        // The PNG of five short-legend panels is 7 in wide at 300 dpi.
        let dir = tempfile::tempdir().unwrap();
        let p = Panel {
            series: vec![Series::new(
                "s",
                vec![(1.0, 1.0), (2.0, 3.0)],
                Style::Line,
                0,
            )],
            ..Default::default()
        };
        let files = render(&dir.path().join("five"), "t", &vec![p; 5]).unwrap();
        let png = std::fs::read(&files[1]).unwrap();
        // IHDR: width and height, big-endian, at bytes 16..24.
        let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
        assert_eq!(w, (style::DOUBLE_COLUMN_IN * style::DPI).round() as u32);
        let sc = layout(
            &Figure::Panels {
                title: "t".into(),
                panels: vec![
                    Panel {
                        series: vec![Series::new(
                            "s",
                            vec![(1.0, 1.0), (2.0, 3.0)],
                            Style::Line,
                            0
                        )],
                        ..Default::default()
                    };
                    5
                ],
            },
            &Options::default(),
        )
        .unwrap();
        let tops: Vec<f64> = sc.panels.iter().map(|f| f.axes.unwrap().y0).collect();
        assert_eq!(tops[0], tops[2]);
        assert!(tops[3] > tops[0] && tops[3] == tops[4], "{tops:?}");
    }
}
