//! Panels: the grid of axes, data to page coordinates, frame, ticks, labels,
//! series (bands, lines, markers) and each panel's legend.

use super::legend::{self, Obstacles};
use super::scene::{Anchor, PanelFacts, Prim, Rect, Scene};
use super::style::{self, BLACK, MAX_COLUMNS, Options, Rgb, Sizes, color, marker};
use super::text;
use super::ticks::{self, Ticks};
use super::{Panel, Style};

/// Grey of the major grid lines.
const GRID: Rgb = Rgb(228, 228, 228);

/// Height of the axes box relative to its width.
const ASPECT: f64 = 0.68;

/// (rows, columns) of a grid of `n` panels with at most `cols` columns.
pub fn grid(n: usize, cols: usize) -> (usize, usize) {
    let cols = n.clamp(1, cols.max(1));
    (n.max(1).div_ceil(cols), cols)
}

/// Axis coordinate of a value: itself, or $\log_{10}$ on a log axis.
pub fn tr(v: f64, log: bool) -> Option<f64> {
    if log {
        (v > 0.0 && v.is_finite()).then(|| v.log10())
    } else {
        v.is_finite().then_some(v)
    }
}

fn span(vals: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    lo.is_finite().then_some((lo, hi))
}

fn padded((lo, hi): (f64, f64), log: bool) -> (f64, f64) {
    if hi > lo {
        let p = 0.05 * (hi - lo);
        (lo - p, hi + p)
    } else if log {
        (lo - 0.3, hi + 0.3)
    } else {
        let p = 0.5f64.max(0.05 * lo.abs());
        (lo - p, hi + p)
    }
}

/// Axis coordinates of every finite value of a panel, x then y.
fn data_ranges(p: &Panel, lx: bool, ly: bool) -> Option<((f64, f64), (f64, f64))> {
    let pts = || {
        p.series.iter().flat_map(|s| {
            s.points
                .iter()
                .copied()
                .chain(s.band.iter().flat_map(|b| [(b.0, b.1), (b.0, b.2)]))
        })
    };
    let fin = |q: &(f64, f64)| Some((tr(q.0, lx)?, tr(q.1, ly)?));
    let xs = span(pts().filter_map(|q| fin(&q)).map(|q| q.0))?;
    let ys = span(pts().filter_map(|q| fin(&q)).map(|q| q.1))?;
    Some((xs, ys))
}

struct Frame {
    ax: Rect,
    xr: (f64, f64),
    yr: (f64, f64),
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        self.ax.x0 + (x - self.xr.0) / (self.xr.1 - self.xr.0) * self.ax.w()
    }
    fn py(&self, y: f64) -> f64 {
        self.ax.y1 - (y - self.yr.0) / (self.yr.1 - self.yr.0) * self.ax.h()
    }
}

fn tick_target(len: f64, per: f64) -> usize {
    ((len / per).round() as usize).clamp(2, 8)
}

/// One panel before it is placed: axes ranges, ticks, legend.
struct Planned<'a> {
    p: &'a Panel,
    log: (bool, bool),
    xr: (f64, f64),
    yr: (f64, f64),
    data: ((f64, f64), (f64, f64)),
    xt: Ticks,
    yt: Ticks,
    title: Vec<String>,
}

/// Lays out `panels` under `title` with `opts`.
pub fn layout(title: &str, panels: &[Panel], opts: &Options) -> Result<Scene, String> {
    let n = panels.len().max(1);
    let max_cols = n.min(MAX_COLUMNS);
    for cols in (1..=max_cols).rev() {
        if let Some(s) = layout_cols(title, panels, opts, cols, cols == 1)? {
            return Ok(s);
        }
    }
    unreachable!("one column always lays out (wrapping is allowed)")
}

fn layout_cols(
    title: &str,
    panels: &[Panel],
    opts: &Options,
    cols: usize,
    allow_wrap: bool,
) -> Result<Option<Scene>, String> {
    let z = opts.sizes(if panels.len() <= 1 { 1 } else { 2 });
    let (rows, cols) = grid(panels.len(), cols);
    let cell_w = z.width / cols as f64;
    let (asc, desc) = text::vertical_metrics(false);
    let mut scene = Scene {
        width: z.width,
        ..Default::default()
    };
    // Figure title, once: a single panel titled like the figure draws no panel title.
    let mut y = z.pad;
    let fig_title = if title.is_empty() {
        Vec::new()
    } else {
        text::wrap(title, z.title_font, true, z.width - 4.0 * z.pad)
    };
    for l in &fig_title {
        y += asc * z.title_font;
        scene.text(
            z.width / 2.0,
            y,
            l,
            z.title_font,
            Anchor::Middle,
            false,
            true,
        );
        y += desc * z.title_font + 0.15 * z.title_font;
    }
    if !fig_title.is_empty() {
        y += z.pad;
    }
    let nominal_w = cell_w - 7.0 * z.font;
    let a_h = (ASPECT * nominal_w).max(6.0 * z.font);
    let mut plans = Vec::new();
    for p in panels {
        let log = opts.log.map_or((p.log_x, p.log_y), |l| (l, l));
        let Some(data) = data_ranges(p, log.0, log.1) else {
            return Err(format!(
                "panel \"{}\": no finite point to draw{}",
                p.title,
                if log.0 || log.1 { " on log axes" } else { "" }
            ));
        };
        let xr = padded(data.0, log.0);
        let yr = padded(data.1, log.1);
        let yt = if log.1 {
            ticks::log(yr.0, yr.1, tick_target(a_h, 3.5 * z.font))
        } else {
            ticks::linear(yr.0, yr.1, tick_target(a_h, 3.5 * z.font))
        };
        let t = if p.title.is_empty() || (panels.len() == 1 && p.title == title) {
            Vec::new()
        } else {
            text::wrap(&p.title, z.font, false, cell_w - 2.0 * z.pad)
        };
        plans.push(Planned {
            p,
            log,
            xr,
            yr,
            data,
            xt: Ticks {
                major: vec![],
                labels: vec![],
                minor: vec![],
            },
            yt,
            title: t,
        });
    }
    for r in 0..rows {
        let row = &mut plans[r * cols..((r + 1) * cols).min(panels.len())];
        let title_h = row.iter().map(|q| q.title.len()).max().unwrap_or(0) as f64 * 1.2 * z.font
            + if row.iter().any(|q| !q.title.is_empty()) {
                z.pad
            } else {
                0.0
            };
        let top = y + title_h;
        let mut row_bottom = top + a_h;
        for (c, q) in row.iter_mut().enumerate() {
            let cx0 = c as f64 * cell_w;
            let ytw =
                q.yt.labels
                    .iter()
                    .map(|l| text::extent(l, z.font, false).width)
                    .fold(0.0, f64::max);
            let ylab_w = if q.p.y_label.is_empty() {
                0.0
            } else {
                (asc + desc) * z.font + z.pad
            };
            let left = cx0 + z.pad + ylab_w + ytw + z.tick + 0.6 * z.pad;
            // x ticks depend on the axes width; their half-width overhangs the right end.
            let mut right = cx0 + cell_w - 2.0 * z.pad;
            for _ in 0..2 {
                let target = tick_target(right - left, 6.0 * z.font);
                q.xt = if q.log.0 {
                    ticks::log(q.xr.0, q.xr.1, target)
                } else {
                    ticks::linear(q.xr.0, q.xr.1, target)
                };
                let last =
                    q.xt.labels
                        .last()
                        .map_or(0.0, |l| text::extent(l, z.font, false).width);
                right = cx0 + cell_w - z.pad - 0.5 * last;
            }
            let f = Frame {
                ax: Rect {
                    x0: left,
                    y0: top,
                    x1: right,
                    y1: top + a_h,
                },
                xr: q.xr,
                yr: q.yr,
            };
            let bottom = draw_panel(&mut scene, q, &f, &z, cx0, cell_w, allow_wrap)?;
            let Some(bottom) = bottom else {
                return Ok(None);
            };
            // Panel title, centred on the axes but kept inside the cell.
            let mut ty = y;
            for l in &q.title {
                ty += asc * z.font;
                let half = 0.5 * text::extent(l, z.font, false).width;
                let x = ((f.ax.x0 + f.ax.x1) / 2.0)
                    .min(cx0 + cell_w - z.pad - half)
                    .max(cx0 + z.pad + half);
                scene.text(x, ty, l, z.font, Anchor::Middle, false, false);
                ty += (1.2 - asc) * z.font;
            }
            row_bottom = row_bottom.max(bottom);
        }
        y = row_bottom + 2.0 * z.pad;
    }
    scene.height = y;
    Ok(Some(scene))
}

/// Draws one panel into `f.ax`; returns the lowest y it used, or `None` when its
/// legend would need wrapping and `allow_wrap` is false.
fn draw_panel(
    scene: &mut Scene,
    q: &Planned,
    f: &Frame,
    z: &Sizes,
    cx0: f64,
    cell_w: f64,
    allow_wrap: bool,
) -> Result<Option<f64>, String> {
    let (asc, desc) = text::vertical_metrics(false);
    let ax = f.ax;
    let (lx, ly) = q.log;
    let mut facts = PanelFacts {
        axes: Some(ax),
        x_ticks: q.xt.major.clone(),
        y_ticks: q.yt.major.clone(),
        x_data: q.data.0,
        y_data: q.data.1,
        log: q.log,
        ..Default::default()
    };
    // Grid.
    for &t in &q.xt.major {
        let x = f.px(t);
        scene.push(Prim::Line {
            pts: vec![(x, ax.y0), (x, ax.y1)],
            color: GRID,
            width: 0.5 * z.axis,
        });
    }
    for &t in &q.yt.major {
        let y = f.py(t);
        scene.push(Prim::Line {
            pts: vec![(ax.x0, y), (ax.x1, y)],
            color: GRID,
            width: 0.5 * z.axis,
        });
    }
    // Data: bands, then lines, then markers.
    let mut obs = Obstacles::default();
    let to_px = |x: f64, y: f64| Some((f.px(tr(x, lx)?), f.py(tr(y, ly)?)));
    for s in &q.p.series {
        let band: Vec<(f64, f64, f64)> = s
            .band
            .iter()
            .filter_map(|&(x, a, b)| Some((f.px(tr(x, lx)?), f.py(tr(a, ly)?), f.py(tr(b, ly)?))))
            .collect();
        if band.len() >= 2 {
            let mut poly: Vec<(f64, f64)> = band.iter().map(|b| (b.0, b.2)).collect();
            poly.extend(band.iter().rev().map(|b| (b.0, b.1)));
            obs.bands.push(poly.clone());
            scene.push(Prim::Fill {
                pts: poly,
                color: color(s.color),
                alpha: style::BAND_ALPHA,
            });
        }
    }
    for s in &q.p.series {
        if s.style == Style::Points {
            continue;
        }
        let w = legend::line_w(s.style, z);
        // Break the line at points that cannot be drawn (NaN, or ≤ 0 on a log axis).
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(x, y) in &s.points {
            match to_px(x, y) {
                Some(p) => runs.last_mut().expect("non-empty").push(p),
                None => runs.push(Vec::new()),
            }
        }
        for run in runs.iter().filter(|r| r.len() >= 2) {
            for piece in style::dash(run, style::dashes(s.style), w) {
                for seg in piece.windows(2) {
                    obs.segments.push((seg[0], seg[1]));
                }
                scene.push(Prim::Line {
                    pts: piece,
                    color: color(s.color),
                    width: w,
                });
            }
        }
    }
    for s in &q.p.series {
        if !matches!(s.style, Style::Points | Style::LinePoints) {
            continue;
        }
        for &(x, y) in &s.points {
            if let Some((px, py)) = to_px(x, y) {
                let poly = marker(s.color).polygon(px, py, z.marker);
                let r = bbox(&poly);
                obs.marks.push(r);
                facts.marks.push(r);
                scene.push(Prim::Fill {
                    pts: poly,
                    color: color(s.color),
                    alpha: 1.0,
                });
            }
        }
    }
    facts.segments = obs.segments.clone();
    // Frame and ticks (outward, bottom and left).
    scene.frame(&ax, z.axis);
    for (ts, len) in [(&q.xt.major, z.tick), (&q.xt.minor, 0.55 * z.tick)] {
        for &t in ts {
            let x = f.px(t);
            scene.push(Prim::Line {
                pts: vec![(x, ax.y1), (x, ax.y1 + len)],
                color: BLACK,
                width: z.axis,
            });
        }
    }
    for (ts, len) in [(&q.yt.major, z.tick), (&q.yt.minor, 0.55 * z.tick)] {
        for &t in ts {
            let y = f.py(t);
            scene.push(Prim::Line {
                pts: vec![(ax.x0 - len, y), (ax.x0, y)],
                color: BLACK,
                width: z.axis,
            });
        }
    }
    let xt_asc =
        q.xt.labels
            .iter()
            .map(|l| text::extent(l, z.font, false).ascent)
            .fold(asc * z.font, f64::max);
    let xbase = ax.y1 + z.tick + 0.4 * z.pad + xt_asc;
    for (t, l) in q.xt.major.iter().zip(&q.xt.labels) {
        scene.text(f.px(*t), xbase, l, z.font, Anchor::Middle, false, false);
    }
    for (t, l) in q.yt.major.iter().zip(&q.yt.labels) {
        scene.text(
            ax.x0 - z.tick - 0.6 * z.pad,
            f.py(*t) + 0.36 * z.font,
            l,
            z.font,
            Anchor::End,
            false,
            false,
        );
    }
    let mut bottom = xbase + desc * z.font;
    if !q.p.x_label.is_empty() {
        let size = fit_size(&q.p.x_label, z.font, ax.w().max(cell_w - 2.0 * z.pad));
        bottom += 0.4 * z.pad + asc * size;
        scene.text(
            (ax.x0 + ax.x1) / 2.0,
            bottom,
            &q.p.x_label,
            size,
            Anchor::Middle,
            false,
            false,
        );
        bottom += desc * size;
    }
    if !q.p.y_label.is_empty() {
        let size = fit_size(&q.p.y_label, z.font, ax.h());
        scene.text(
            cx0 + z.pad + asc * size,
            (ax.y0 + ax.y1) / 2.0,
            &q.p.y_label,
            size,
            Anchor::Middle,
            true,
            false,
        );
    }
    // Legend: an empty corner, else below.
    let es = legend::entries(&q.p.series);
    facts.entries = es.iter().map(|e| e.label.clone()).collect();
    if !es.is_empty() {
        let inner = legend::measure(&es, z, 0.7 * ax.w());
        let spot = (!inner.wrapped)
            .then(|| legend::place_inside(&ax, inner.w, inner.h, &obs, z))
            .flatten();
        if let Some(r) = spot {
            legend::draw(scene, &inner, &r, z, true);
            facts.legend = Some(r);
        } else {
            let m = legend::measure(&es, z, cell_w - 2.0 * z.pad);
            if m.wrapped && !allow_wrap {
                return Ok(None);
            }
            let x = (cx0 + 0.5 * (cell_w - m.w)).max(cx0 + z.pad);
            let r = Rect::new(x, bottom + z.pad, m.w, m.h);
            legend::draw(scene, &m, &r, z, false);
            facts.legend = Some(r);
            bottom = r.y1;
        }
    }
    scene.panels.push(facts);
    Ok(Some(bottom))
}

/// The font size (at most `size`) at which `s` fits in `max_w`, not below 70 %.
fn fit_size(s: &str, size: f64, max_w: f64) -> f64 {
    let w = text::extent(s, size, false).width;
    if w <= max_w {
        size
    } else {
        (size * max_w / w).max(0.7 * size)
    }
}

/// Bounding box of a polygon.
pub fn bbox(poly: &[(f64, f64)]) -> Rect {
    let mut r = Rect {
        x0: f64::INFINITY,
        y0: f64::INFINITY,
        x1: f64::NEG_INFINITY,
        y1: f64::NEG_INFINITY,
    };
    for p in poly {
        r.x0 = r.x0.min(p.0);
        r.y0 = r.y0.min(p.1);
        r.x1 = r.x1.max(p.0);
        r.y1 = r.y1.max(p.1);
    }
    r
}
