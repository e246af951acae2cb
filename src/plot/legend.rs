//! Legends: one entry per series (a line and its markers with the same label and
//! colour are one entry), placed in an empty corner of the plot area or, when no
//! corner is free of data, below the axes.

use super::scene::{Anchor, Prim, Rect, Scene};
use super::style::{self, FRAME, Sizes, WHITE, color, marker};
use super::text;
use super::{Series, Style};

/// One legend entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Label (with `^{…}` markup).
    pub label: String,
    /// Palette index.
    pub color: usize,
    /// Line style drawn in the sample, if any series of the entry is a line.
    pub line: Option<Style>,
    /// Whether the sample shows a marker.
    pub marker: bool,
    /// Whether the sample shows a band.
    pub band: bool,
}

/// The entries of `series`: series with an empty name have none; series with the
/// same name and colour share one.
pub fn entries(series: &[Series]) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for s in series {
        if s.name.is_empty() || !s.points.iter().any(|p| p.0.is_finite() && p.1.is_finite()) {
            continue;
        }
        let i = match out
            .iter()
            .position(|e| e.label == s.name && e.color == s.color)
        {
            Some(i) => i,
            None => {
                out.push(Entry {
                    label: s.name.clone(),
                    color: s.color,
                    line: None,
                    marker: false,
                    band: false,
                });
                out.len() - 1
            }
        };
        let e = &mut out[i];
        if s.style != Style::Points && e.line.is_none() {
            e.line = Some(match s.style {
                Style::LinePoints => Style::Line,
                st => st,
            });
        }
        e.marker |= matches!(s.style, Style::Points | Style::LinePoints);
        e.band |= s.band.len() >= 2;
    }
    out
}

/// A measured legend: entry labels wrapped into lines, and the box size.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Entries with their label lines.
    pub rows: Vec<(Entry, Vec<String>)>,
    /// Box width, pt.
    pub w: f64,
    /// Box height, pt.
    pub h: f64,
    /// Whether some label had to be wrapped to fit `max_w`.
    pub wrapped: bool,
}

fn sample_len(z: &Sizes) -> f64 {
    2.4 * z.font
}

fn line_h(z: &Sizes) -> f64 {
    1.2 * z.font
}

/// Measures the legend of `es` for a box at most `max_w` wide.
pub fn measure(es: &[Entry], z: &Sizes, max_w: f64) -> Measured {
    let label_max = (max_w - 3.0 * z.pad - sample_len(z)).max(4.0 * z.font);
    let mut wrapped = false;
    let mut w: f64 = 0.0;
    let mut n = 0usize;
    let rows = es
        .iter()
        .map(|e| {
            let full = text::extent(&e.label, z.font, false).width;
            let lines = if full > label_max {
                wrapped = true;
                text::wrap(&e.label, z.font, false, label_max)
            } else {
                vec![e.label.clone()]
            };
            for l in &lines {
                w = w.max(text::extent(l, z.font, false).width);
            }
            n += lines.len();
            (e.clone(), lines)
        })
        .collect();
    Measured {
        rows,
        w: w + sample_len(z) + 3.0 * z.pad,
        h: n as f64 * line_h(z) + 1.2 * z.pad,
        wrapped,
    }
}

/// What a legend must not cover: data marks, line segments and bands, pt.
#[derive(Clone, Debug, Default)]
pub struct Obstacles {
    /// Marker boxes.
    pub marks: Vec<Rect>,
    /// Line segments (grown by half the line width when tested).
    pub segments: Vec<((f64, f64), (f64, f64))>,
    /// Band polygons.
    pub bands: Vec<Vec<(f64, f64)>>,
}

fn inside_poly(p: (f64, f64), poly: &[(f64, f64)]) -> bool {
    let mut inside = false;
    let n = poly.len();
    for i in 0..n {
        let (a, b) = (poly[i], poly[(i + n - 1) % n]);
        if (a.1 > p.1) != (b.1 > p.1) && p.0 < (b.0 - a.0) * (p.1 - a.1) / (b.1 - a.1) + a.0 {
            inside = !inside;
        }
    }
    inside
}

impl Obstacles {
    /// Whether `r` touches any obstacle.
    pub fn hit(&self, r: &Rect, line_w: f64) -> bool {
        let g = r.grow(line_w);
        self.marks.iter().any(|m| m.intersects(r))
            || self.segments.iter().any(|&(a, b)| g.hits_segment(a, b))
            || self.bands.iter().any(|poly| {
                (0..poly.len()).any(|i| g.hits_segment(poly[i], poly[(i + 1) % poly.len()]))
                    || inside_poly((r.x0, r.y0), poly)
            })
    }
}

/// The first corner of `axes` (upper left, upper right, lower left, lower right)
/// where a `w`×`h` box misses every obstacle.
pub fn place_inside(axes: &Rect, w: f64, h: f64, obs: &Obstacles, z: &Sizes) -> Option<Rect> {
    let m = z.pad;
    if w > axes.w() - 2.0 * m || h > axes.h() - 2.0 * m {
        return None;
    }
    [
        (axes.x0 + m, axes.y0 + m),
        (axes.x1 - m - w, axes.y0 + m),
        (axes.x0 + m, axes.y1 - m - h),
        (axes.x1 - m - w, axes.y1 - m - h),
    ]
    .into_iter()
    .map(|(x, y)| Rect::new(x, y, w, h))
    .find(|r| !obs.hit(r, z.line))
}

/// Draws the measured legend `m` with its box at `r`.
pub fn draw(scene: &mut Scene, m: &Measured, r: &Rect, z: &Sizes, framed: bool) {
    if framed {
        scene.push(Prim::Box {
            rect: r.grow(z.axis * 0.5),
            color: FRAME,
        });
        scene.push(Prim::Box {
            rect: *r,
            color: WHITE,
        });
    }
    let (asc, _) = text::vertical_metrics(false);
    let mut y = r.y0 + 0.6 * z.pad;
    let sl = sample_len(z);
    for (e, lines) in &m.rows {
        let mid = y + 0.5 * line_h(z);
        let (x0, x1) = (r.x0 + z.pad, r.x0 + z.pad + sl);
        let c = color(e.color);
        if e.band {
            scene.push(Prim::Fill {
                pts: vec![
                    (x0, mid - 0.35 * z.font),
                    (x1, mid - 0.35 * z.font),
                    (x1, mid + 0.35 * z.font),
                    (x0, mid + 0.35 * z.font),
                ],
                color: c,
                alpha: style::BAND_ALPHA,
            });
        }
        if let Some(st) = e.line {
            for piece in style::dash(&[(x0, mid), (x1, mid)], style::dashes(st), line_w(st, z)) {
                scene.push(Prim::Line {
                    pts: piece,
                    color: c,
                    width: line_w(st, z),
                });
            }
        }
        if e.marker {
            scene.push(Prim::Fill {
                pts: marker(e.color).polygon((x0 + x1) / 2.0, mid, z.marker),
                color: c,
                alpha: 1.0,
            });
        }
        for l in lines {
            let base = y + 0.5 * line_h(z) + 0.5 * asc * z.font * 0.78;
            scene.text(x1 + z.pad, base, l, z.font, Anchor::Start, false, false);
            y += line_h(z);
        }
    }
}

/// Width of a line of style `st`: reference styles (dotted, dash-dot) are thinner.
pub fn line_w(st: Style, z: &Sizes) -> f64 {
    match st {
        Style::Dotted | Style::DashDot => 0.8 * z.line,
        _ => z.line,
    }
}
