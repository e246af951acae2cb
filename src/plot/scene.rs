//! A drawn figure as a list of primitives in printed points (origin top left,
//! $y$ down), plus what the tests need to know about it: where legends and data
//! marks are, which entries each legend lists, which ticks each axis carries.
//! The SVG and PNG writers draw exactly this list.

use super::style::Rgb;
use super::text;

/// An axis-aligned box, pt.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rect {
    /// Left.
    pub x0: f64,
    /// Top.
    pub y0: f64,
    /// Right.
    pub x1: f64,
    /// Bottom.
    pub y1: f64,
}

impl Rect {
    /// The box from its left-top corner and size.
    pub fn new(x: f64, y: f64, w: f64, h: f64) -> Self {
        Self {
            x0: x,
            y0: y,
            x1: x + w,
            y1: y + h,
        }
    }
    /// Width.
    pub fn w(&self) -> f64 {
        self.x1 - self.x0
    }
    /// Height.
    pub fn h(&self) -> f64 {
        self.y1 - self.y0
    }
    /// Whether the two boxes share interior points.
    pub fn intersects(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
    /// Whether `o` lies inside `self` (up to `tol`).
    pub fn contains(&self, o: &Rect, tol: f64) -> bool {
        o.x0 >= self.x0 - tol
            && o.x1 <= self.x1 + tol
            && o.y0 >= self.y0 - tol
            && o.y1 <= self.y1 + tol
    }
    /// The box grown by `d` on every side.
    pub fn grow(&self, d: f64) -> Rect {
        Rect {
            x0: self.x0 - d,
            y0: self.y0 - d,
            x1: self.x1 + d,
            y1: self.y1 + d,
        }
    }
    /// Whether the segment $a b$ passes through the box.
    pub fn hits_segment(&self, a: (f64, f64), b: (f64, f64)) -> bool {
        // Liang–Barsky clipping of the segment to the box.
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let mut t0: f64 = 0.0;
        let mut t1: f64 = 1.0;
        for (p, q) in [
            (-dx, a.0 - self.x0),
            (dx, self.x1 - a.0),
            (-dy, a.1 - self.y0),
            (dy, self.y1 - a.1),
        ] {
            if p == 0.0 {
                if q < 0.0 {
                    return false;
                }
            } else {
                let r = q / p;
                if p < 0.0 {
                    t0 = t0.max(r);
                } else {
                    t1 = t1.min(r);
                }
                if t0 > t1 {
                    return false;
                }
            }
        }
        true
    }
}

/// Horizontal anchor of a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// The position is the start of the text.
    Start,
    /// The position is the middle of the text.
    Middle,
    /// The position is the end of the text.
    End,
}

/// One drawing primitive.
#[derive(Clone, Debug, PartialEq)]
pub enum Prim {
    /// An open solid line through `pts`.
    Line {
        /// Vertices.
        pts: Vec<(f64, f64)>,
        /// Colour.
        color: Rgb,
        /// Width, pt.
        width: f64,
    },
    /// A filled polygon.
    Fill {
        /// Vertices.
        pts: Vec<(f64, f64)>,
        /// Colour.
        color: Rgb,
        /// Opacity in $[0, 1]$.
        alpha: f64,
    },
    /// A filled axis-aligned box (heat-map cells, legend background).
    Box {
        /// Where.
        rect: Rect,
        /// Fill colour.
        color: Rgb,
    },
    /// A text line with `^{…}` markup, baseline at `y`.
    Text {
        /// Anchor point x.
        x: f64,
        /// Baseline y.
        y: f64,
        /// The text.
        s: String,
        /// Size, pt.
        size: f64,
        /// Horizontal anchor.
        anchor: Anchor,
        /// Rotated 90° counter-clockwise (reads upwards), around `(x, y)`.
        vertical: bool,
        /// Bold face.
        bold: bool,
    },
}

impl Prim {
    /// Bounding box of a text primitive (from the font metrics); `None` for other primitives.
    pub fn text_bounds(&self) -> Option<Rect> {
        let Prim::Text {
            x,
            y,
            s,
            size,
            anchor,
            vertical,
            bold,
        } = self
        else {
            return None;
        };
        let e = text::extent(s, *size, *bold);
        let u0 = match anchor {
            Anchor::Start => 0.0,
            Anchor::Middle => -e.width / 2.0,
            Anchor::End => -e.width,
        };
        Some(if *vertical {
            Rect {
                x0: x - e.ascent,
                x1: x + e.descent,
                y0: y - u0 - e.width,
                y1: y - u0,
            }
        } else {
            Rect {
                x0: x + u0,
                x1: x + u0 + e.width,
                y0: y - e.ascent,
                y1: y + e.descent,
            }
        })
    }
}

/// What one panel's layout decided, for tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PanelFacts {
    /// The axes box (plot area).
    pub axes: Option<Rect>,
    /// The legend box, if the panel has one.
    pub legend: Option<Rect>,
    /// Legend entry labels, in order.
    pub entries: Vec<String>,
    /// Boxes of the data markers (marker extent).
    pub marks: Vec<Rect>,
    /// Data line segments (after dashing), pt.
    pub segments: Vec<((f64, f64), (f64, f64))>,
    /// Major x and y tick positions (axis coordinates) and the data range they cover.
    pub x_ticks: Vec<f64>,
    /// See `x_ticks`.
    pub y_ticks: Vec<f64>,
    /// Data range in axis coordinates, x.
    pub x_data: (f64, f64),
    /// Data range in axis coordinates, y.
    pub y_data: (f64, f64),
    /// Whether the axes are logarithmic (x, y).
    pub log: (bool, bool),
}

/// A laid-out figure.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scene {
    /// Canvas width, pt.
    pub width: f64,
    /// Canvas height, pt.
    pub height: f64,
    /// Primitives, drawn in order.
    pub prims: Vec<Prim>,
    /// Per-panel facts (a heat-map reports its cells as one panel, its colour bar as another).
    pub panels: Vec<PanelFacts>,
}

impl Scene {
    /// Adds a primitive.
    pub fn push(&mut self, p: Prim) {
        self.prims.push(p);
    }
    /// Adds the outline of `r` (a closed black line of width `w`).
    pub fn frame(&mut self, r: &Rect, w: f64) {
        self.push(Prim::Line {
            pts: vec![
                (r.x0, r.y0),
                (r.x1, r.y0),
                (r.x1, r.y1),
                (r.x0, r.y1),
                (r.x0, r.y0),
            ],
            color: super::style::BLACK,
            width: w,
        });
    }
    /// Adds a text primitive.
    #[allow(clippy::too_many_arguments)]
    pub fn text(
        &mut self,
        x: f64,
        y: f64,
        s: &str,
        size: f64,
        anchor: Anchor,
        vertical: bool,
        bold: bool,
    ) {
        if !s.is_empty() {
            self.prims.push(Prim::Text {
                x,
                y,
                s: s.to_string(),
                size,
                anchor,
                vertical,
                bold,
            });
        }
    }
    /// Bounding boxes of every text.
    pub fn text_boxes(&self) -> Vec<Rect> {
        self.prims.iter().filter_map(Prim::text_bounds).collect()
    }
}
