//! Figures for papers: line/scatter panels (optionally log–log, with
//! confidence bands) and heat-maps, each written as SVG and PNG.
//!
//! Log axes are drawn by plotting $\log_{10}$ of the data on linear axes and
//! labelling ticks with $10^v$, so every panel shares one code path.
//! Text uses the DejaVu Sans font embedded through the `dejavu` crate: no
//! system font is needed.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Connected line.
    Line,
    /// Markers only.
    Points,
    /// Line with markers.
    LinePoints,
    /// Dashed line (drawn as short segments).
    Dashed,
}

/// One data series of a panel.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points (x, y).
    pub points: Vec<(f64, f64)>,
    /// How to draw it.
    pub style: Style,
    /// Optional band (x, low, high), drawn shaded in the series colour.
    pub band: Vec<(f64, f64, f64)>,
    /// Palette index (series with the same index share a colour).
    pub color: usize,
}

impl Series {
    /// A series with no band.
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
        }
    }
}

/// One panel (set of axes).
#[derive(Clone, Debug, Default)]
pub struct Panel {
    /// Panel title.
    pub title: String,
    /// X-axis label.
    pub x_label: String,
    /// Y-axis label.
    pub y_label: String,
    /// Log-scaled x axis.
    pub log_x: bool,
    /// Log-scaled y axis.
    pub log_y: bool,
    /// Series drawn on the panel.
    pub series: Vec<Series>,
}

/// Errors while drawing a figure.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// A backend (file) error.
    #[error("drawing {path}: {msg}")]
    Draw {
        /// The output file.
        path: PathBuf,
        /// Backend message.
        msg: String,
    },
    /// The panel holds no finite point to draw.
    #[error("figure {0}: no finite data to draw")]
    Empty(String),
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Viridis-like colour map on [0, 1] (linear interpolation between anchors).
fn viridis(t: f64) -> RGBColor {
    const A: [(u8, u8, u8); 5] = [
        (68, 1, 84),
        (59, 82, 139),
        (33, 145, 140),
        (94, 201, 98),
        (253, 231, 37),
    ];
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    } * (A.len() - 1) as f64;
    let k = (t.floor() as usize).min(A.len() - 2);
    let f = t - k as f64;
    let mix = |a: u8, b: u8| (a as f64 + f * (b as f64 - a as f64)).round() as u8;
    RGBColor(
        mix(A[k].0, A[k + 1].0),
        mix(A[k].1, A[k + 1].1),
        mix(A[k].2, A[k + 1].2),
    )
}

/// Dash count per segment of a dashed series.
const DASHES: usize = 41;

static FONT: Once = Once::new();

/// Registers the embedded font once per process (plotters draws no text without it).
pub fn ensure_font() {
    FONT.call_once(|| {
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
        let _ = plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold());
    });
}

fn tr(v: f64, log: bool) -> Option<f64> {
    if log {
        (v > 0.0 && v.is_finite()).then(|| v.log10())
    } else {
        v.is_finite().then_some(v)
    }
}

fn fmt_tick(v: f64, log: bool) -> String {
    let x = if log { 10f64.powf(v) } else { v };
    let a = x.abs();
    if a != 0.0 && !(1e-3..1e5).contains(&a) {
        format!("{x:.1e}")
    } else if (x - x.round()).abs() < 1e-9 * a.max(1.0) {
        format!("{}", x.round())
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}").trim_end_matches('0').to_string()
    }
}

fn range(vals: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return None;
    }
    let pad = if hi > lo {
        0.05 * (hi - lo)
    } else {
        0.5_f64.max(0.05 * lo.abs())
    };
    Some((lo - pad, hi + pad))
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &Panel) -> Result<(), String> {
    let xs = p.series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|q| q.0)
            .chain(s.band.iter().map(|b| b.0))
    });
    let ys = p.series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|q| q.1)
            .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
    });
    let (x0, x1) = range(xs.filter_map(|v| tr(v, p.log_x))).ok_or("no finite x")?;
    let (y0, y1) = range(ys.filter_map(|v| tr(v, p.log_y))).ok_or("no finite y")?;
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| e.to_string())?;
    let (lx, ly) = (p.log_x, p.log_y);
    let xf = move |v: &f64| fmt_tick(*v, lx);
    let yf = move |v: &f64| fmt_tick(*v, ly);
    chart
        .configure_mesh()
        .x_desc(if lx {
            format!("{} (log)", p.x_label)
        } else {
            p.x_label.clone()
        })
        .y_desc(if ly {
            format!("{} (log)", p.y_label)
        } else {
            p.y_label.clone()
        })
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())?;
    for s in &p.series {
        let c = color(s.color);
        let band: Vec<(f64, f64, f64)> = s
            .band
            .iter()
            .filter_map(|&(x, lo, hi)| Some((tr(x, lx)?, tr(lo, ly)?, tr(hi, ly)?)))
            .collect();
        if band.len() >= 2 {
            let mut poly: Vec<(f64, f64)> = band.iter().map(|b| (b.0, b.2)).collect();
            poly.extend(band.iter().rev().map(|b| (b.0, b.1)));
            chart
                .draw_series(std::iter::once(Polygon::new(poly, c.mix(0.18).filled())))
                .map_err(|e| e.to_string())?;
        }
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter_map(|&(x, y)| Some((tr(x, lx)?, tr(y, ly)?)))
            .collect();
        let legend_style = c.stroke_width(2);
        match s.style {
            Style::Line | Style::LinePoints => {
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                    .map_err(|e| e.to_string())?
                    .label(&s.name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], legend_style)
                    });
            }
            Style::Dashed => {
                let segs: Vec<PathElement<(f64, f64)>> = pts
                    .windows(2)
                    .flat_map(|w| {
                        let (a, b) = (w[0], w[1]);
                        (0..DASHES).filter(|k| k % 2 == 0).map(move |k| {
                            let t0 = k as f64 / DASHES as f64;
                            let t1 = (k + 1) as f64 / DASHES as f64;
                            PathElement::new(
                                vec![
                                    (a.0 + t0 * (b.0 - a.0), a.1 + t0 * (b.1 - a.1)),
                                    (a.0 + t1 * (b.0 - a.0), a.1 + t1 * (b.1 - a.1)),
                                ],
                                c.stroke_width(2),
                            )
                        })
                    })
                    .collect();
                chart
                    .draw_series(segs)
                    .map_err(|e| e.to_string())?
                    .label(&s.name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 8, y)], legend_style));
            }
            Style::Points => {
                chart
                    .draw_series(pts.iter().map(|&q| Circle::new(q, 3, c.filled())))
                    .map_err(|e| e.to_string())?
                    .label(&s.name)
                    .legend(move |(x, y)| Circle::new((x + 10, y), 3, c.filled()));
            }
        }
        if s.style == Style::LinePoints {
            chart
                .draw_series(pts.iter().map(|&q| Circle::new(q, 3, c.filled())))
                .map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 12))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn draw_all<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    panels: &[Panel],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = if title.is_empty() {
        root
    } else {
        root.titled(title, ("sans-serif", 22))
            .map_err(|e| e.to_string())?
    };
    let (rows, cols) = grid(panels.len());
    let areas = root.split_evenly((rows, cols));
    for (a, p) in areas.iter().zip(panels) {
        draw_panel(a, p)?;
    }
    root.present().map_err(|e| e.to_string())
}

/// Size in pixels of one panel.
pub const PANEL_SIZE: (u32, u32) = (640, 480);

/// Most panels in one row; more wrap onto further rows.
pub const MAX_COLUMNS: usize = 3;

/// (rows, columns) of the panel grid for `n` panels.
fn grid(n: usize) -> (usize, usize) {
    let cols = n.clamp(1, MAX_COLUMNS);
    (n.max(1).div_ceil(cols), cols)
}

/// Draws `panels` side by side (at most [`MAX_COLUMNS`] a row) into `stem.svg` and
/// `stem.png`; returns both paths.
pub fn render(stem: &Path, title: &str, panels: &[Panel]) -> Result<Vec<PathBuf>, PlotError> {
    ensure_font();
    let finite = panels.iter().any(|p| {
        p.series
            .iter()
            .any(|s| s.points.iter().any(|q| q.0.is_finite() && q.1.is_finite()))
    });
    if !finite {
        return Err(PlotError::Empty(stem.display().to_string()));
    }
    let (rows, cols) = grid(panels.len());
    let size = (
        PANEL_SIZE.0 * cols as u32,
        PANEL_SIZE.1 * rows as u32 + if title.is_empty() { 0 } else { 30 },
    );
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    if let Some(dir) = stem.parent() {
        std::fs::create_dir_all(dir).map_err(|e| PlotError::Draw {
            path: dir.to_path_buf(),
            msg: e.to_string(),
        })?;
    }
    draw_all(
        SVGBackend::new(&svg, size).into_drawing_area(),
        title,
        panels,
    )
    .map_err(|msg| PlotError::Draw {
        path: svg.clone(),
        msg,
    })?;
    draw_all(
        BitMapBackend::new(&png, size).into_drawing_area(),
        title,
        panels,
    )
    .map_err(|msg| PlotError::Draw {
        path: png.clone(),
        msg,
    })?;
    Ok(vec![svg, png])
}

/// A heat-map: `values[row][col]`, rows drawn top to bottom.
#[derive(Clone, Debug)]
pub struct Heatmap {
    /// Title.
    pub title: String,
    /// Label of the horizontal axis (columns).
    pub x_label: String,
    /// Label of the vertical axis (rows).
    pub y_label: String,
    /// Cell values (NaN cells are drawn grey).
    pub values: Vec<Vec<f64>>,
}

fn draw_heat<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, h: &Heatmap) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let nr = h.values.len();
    let nc = h.values.iter().map(Vec::len).max().unwrap_or(0);
    let finite: Vec<f64> = h
        .values
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (main, bar) = root.split_horizontally(root.dim_in_pixel().0 as i32 - 90);
    let mut chart = ChartBuilder::on(&main)
        .caption(&h.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0..nc as i32, nr as i32..0)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(&h.x_label)
        .y_desc(&h.y_label)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())?;
    let scale = move |v: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    let cells = h.values.iter().enumerate().flat_map(|(r, row)| {
        row.iter().enumerate().map(move |(c, &v)| {
            let col = if v.is_finite() {
                viridis(scale(v))
            } else {
                RGBColor(200, 200, 200)
            };
            Rectangle::new(
                [(c as i32, r as i32), (c as i32 + 1, r as i32 + 1)],
                col.filled(),
            )
        })
    });
    chart.draw_series(cells).map_err(|e| e.to_string())?;
    // Colour bar.
    let mut cb = ChartBuilder::on(&bar)
        .margin_top(40)
        .margin_bottom(50)
        .y_label_area_size(55)
        .build_cartesian_2d(0..1, if hi > lo { lo..hi } else { lo - 0.5..lo + 0.5 })
        .map_err(|e| e.to_string())?;
    cb.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .label_style(("sans-serif", 11))
        .draw()
        .map_err(|e| e.to_string())?;
    let steps = 64;
    let (b0, b1) = if hi > lo {
        (lo, hi)
    } else {
        (lo - 0.5, lo + 0.5)
    };
    cb.draw_series((0..steps).map(|k| {
        let a = b0 + (b1 - b0) * k as f64 / steps as f64;
        let b = b0 + (b1 - b0) * (k + 1) as f64 / steps as f64;
        Rectangle::new(
            [(0, a), (1, b)],
            viridis(k as f64 / (steps - 1) as f64).filled(),
        )
    }))
    .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Draws a heat-map into `stem.svg` and `stem.png`; returns both paths.
pub fn render_heatmap(stem: &Path, h: &Heatmap) -> Result<Vec<PathBuf>, PlotError> {
    ensure_font();
    if !h.values.iter().flatten().any(|v| v.is_finite()) {
        return Err(PlotError::Empty(stem.display().to_string()));
    }
    if let Some(dir) = stem.parent() {
        std::fs::create_dir_all(dir).map_err(|e| PlotError::Draw {
            path: dir.to_path_buf(),
            msg: e.to_string(),
        })?;
    }
    let size = (720, 520);
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    draw_heat(SVGBackend::new(&svg, size).into_drawing_area(), h).map_err(|msg| {
        PlotError::Draw {
            path: svg.clone(),
            msg,
        }
    })?;
    draw_heat(BitMapBackend::new(&png, size).into_drawing_area(), h).map_err(|msg| {
        PlotError::Draw {
            path: png.clone(),
            msg,
        }
    })?;
    Ok(vec![svg, png])
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
        };
        let files = render(&dir.path().join("fig"), "test", &[p.clone(), p]).unwrap();
        for f in &files {
            assert!(
                std::fs::metadata(f).unwrap().len() > 1000,
                "{f:?} too small"
            );
        }
        let h = Heatmap {
            title: "h".into(),
            x_label: "head".into(),
            y_label: "layer".into(),
            values: vec![vec![0.0, 1.0], vec![f64::NAN, 0.5]],
        };
        let files = render_heatmap(&dir.path().join("heat"), &h).unwrap();
        assert_eq!(files.len(), 2);
        let empty = Panel {
            series: vec![Series::new("x", vec![(f64::NAN, 1.0)], Style::Line, 0)],
            ..Default::default()
        };
        assert!(render(&dir.path().join("bad"), "", &[empty]).is_err());
    }

    #[test]
    fn panels_wrap_after_three_columns() {
        assert_eq!(grid(0), (1, 1));
        assert_eq!(grid(1), (1, 1));
        assert_eq!(grid(3), (1, 3));
        assert_eq!(grid(4), (2, 3));
        assert_eq!(grid(5), (2, 3));
        assert_eq!(grid(7), (3, 3));
        // The PNG of five panels is three panels wide and two high (+ the title band).
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
        let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
        assert_eq!((w, h), (3 * PANEL_SIZE.0, 2 * PANEL_SIZE.1 + 30));
    }
}
