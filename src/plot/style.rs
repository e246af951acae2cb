//! The print style: page sizes, font sizes, the colour-blind-safe palette and
//! marker shapes. One place decides how every figure of the crate looks.
//!
//! Lengths are in PostScript points ($1\thinspace\mathrm{pt} = 1/72\thinspace\mathrm{in}$): the
//! SVG is drawn at its printed size and the PNG at [`DPI`] dots per inch.

use serde::{Deserialize, Serialize};

/// Resolution of the PNG: dots per inch at the printed width.
pub const DPI: f64 = 300.0;

/// Points per inch.
pub const PT_PER_IN: f64 = 72.0;

/// Printed width of a one-panel figure (one column of a two-column paper), inches.
pub const SINGLE_COLUMN_IN: f64 = 3.4;

/// Printed width of a figure of two or more panels (the full text width), inches.
pub const DOUBLE_COLUMN_IN: f64 = 7.0;

/// Most panels in one row; more wrap onto further rows.
pub const MAX_COLUMNS: usize = 3;

/// Options of one drawing: what `sinklab plot` can change without recomputing.
#[derive(Clone, Copy, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Options {
    /// Printed width in inches (default: [`SINGLE_COLUMN_IN`] for one panel, else [`DOUBLE_COLUMN_IN`]).
    pub width_in: Option<f64>,
    /// Font size in points of every label (default [`FONT_PT`]).
    pub font_pt: Option<f64>,
    /// Force every axis linear (`Some(false)`) or logarithmic (`Some(true)`).
    pub log: Option<bool>,
}

/// Default font size of tick labels, axis labels, legends and panel titles, points.
pub const FONT_PT: f64 = 8.0;

/// Resolved sizes of one drawing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sizes {
    /// Canvas width, pt.
    pub width: f64,
    /// Every text but the figure title, pt.
    pub font: f64,
    /// The figure title, pt.
    pub title_font: f64,
    /// Data line width, pt.
    pub line: f64,
    /// Axis frame and tick width, pt.
    pub axis: f64,
    /// Marker radius, pt.
    pub marker: f64,
    /// Major tick length, pt (minor ticks are half).
    pub tick: f64,
    /// Gap between neighbouring elements, pt.
    pub pad: f64,
}

impl Options {
    /// The sizes of a figure with `columns` panels per row.
    pub fn sizes(&self, columns: usize) -> Sizes {
        let width_in = self.width_in.unwrap_or(if columns <= 1 {
            SINGLE_COLUMN_IN
        } else {
            DOUBLE_COLUMN_IN
        });
        let font = self.font_pt.unwrap_or(FONT_PT);
        let k = font / FONT_PT;
        Sizes {
            width: width_in * PT_PER_IN,
            font,
            title_font: font + 1.0,
            line: 1.0 * k,
            axis: 0.6 * k,
            marker: 2.2 * k,
            tick: 3.0 * k,
            pad: 3.0 * k,
        }
    }

    /// Refuses options that cannot make a figure.
    pub fn check(&self) -> Result<(), String> {
        if let Some(w) = self.width_in
            && !(w.is_finite() && (1.0..=40.0).contains(&w))
        {
            return Err(format!(
                "--width {w}: need a printed width between 1 and 40 inches"
            ));
        }
        if let Some(f) = self.font_pt
            && !(f.is_finite() && (4.0..=30.0).contains(&f))
        {
            return Err(format!(
                "--font-size {f}: need a font size between 4 and 30 points"
            ));
        }
        Ok(())
    }
}

/// An sRGB colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    /// `#rrggbb`.
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// White.
pub const WHITE: Rgb = Rgb(255, 255, 255);
/// Black: text and axes.
pub const BLACK: Rgb = Rgb(0, 0, 0);
/// Grey of cells without a value.
pub const MISSING: Rgb = Rgb(200, 200, 200);
/// Grey of the legend frame.
pub const FRAME: Rgb = Rgb(150, 150, 150);

/// The Okabe–Ito palette (Okabe & Ito, "Color Universal Design", 2008), safe for
/// the common colour-vision deficiencies; index 7 (black) is kept for references.
pub const PALETTE: [Rgb; 8] = [
    Rgb(0, 114, 178),   // blue
    Rgb(213, 94, 0),    // vermillion
    Rgb(0, 158, 115),   // bluish green
    Rgb(230, 159, 0),   // orange
    Rgb(204, 121, 167), // reddish purple
    Rgb(86, 180, 233),  // sky blue
    Rgb(170, 150, 0),   // yellow, darkened to read on white
    Rgb(0, 0, 0),       // black
];

/// Colour of palette index `i`.
pub fn color(i: usize) -> Rgb {
    PALETTE[i % PALETTE.len()]
}

/// Marker shapes; a series' shape follows its palette index, so colour and shape
/// tell the same series apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// Filled circle.
    Circle,
    /// Filled square.
    Square,
    /// Filled triangle, apex up.
    TriangleUp,
    /// Filled diamond.
    Diamond,
    /// Filled triangle, apex down.
    TriangleDown,
    /// Filled pentagon.
    Pentagon,
    /// Filled hexagon.
    Hexagon,
    /// Filled five-point star.
    Star,
}

impl Marker {
    /// Every shape, in palette order.
    pub const ALL: [Marker; 8] = [
        Marker::Circle,
        Marker::Square,
        Marker::TriangleUp,
        Marker::Diamond,
        Marker::TriangleDown,
        Marker::Pentagon,
        Marker::Hexagon,
        Marker::Star,
    ];
}

/// Marker shape of palette index `i`.
pub fn marker(i: usize) -> Marker {
    Marker::ALL[i % Marker::ALL.len()]
}

impl Marker {
    /// Outline of the marker centred on `(x, y)` with radius `r` (pt), as a polygon.
    pub fn polygon(self, x: f64, y: f64, r: f64) -> Vec<(f64, f64)> {
        let reg = |n: usize, r: f64, rot: f64| -> Vec<(f64, f64)> {
            (0..n)
                .map(|k| {
                    let a = rot + std::f64::consts::TAU * k as f64 / n as f64;
                    (x + r * a.cos(), y + r * a.sin())
                })
                .collect()
        };
        use std::f64::consts::FRAC_PI_2 as Q;
        match self {
            Marker::Circle => reg(20, r, 0.0),
            Marker::Square => reg(4, r * 1.2, Q / 2.0),
            Marker::TriangleUp => reg(3, r * 1.35, -Q),
            Marker::TriangleDown => reg(3, r * 1.35, Q),
            Marker::Diamond => reg(4, r * 1.35, 0.0),
            Marker::Pentagon => reg(5, r * 1.2, -Q),
            Marker::Hexagon => reg(6, r * 1.15, 0.0),
            Marker::Star => (0..10)
                .map(|k| {
                    let rr = if k % 2 == 0 { r * 1.45 } else { r * 0.6 };
                    let a = -Q + std::f64::consts::TAU * k as f64 / 10.0;
                    (x + rr * a.cos(), y + rr * a.sin())
                })
                .collect(),
        }
    }
}

/// Opacity of confidence bands.
pub const BAND_ALPHA: f64 = 0.2;

/// Splits a polyline into dashes of `pattern` (lengths in line widths).
pub fn dash(pts: &[(f64, f64)], pattern: Option<&[f64]>, width: f64) -> Vec<Vec<(f64, f64)>> {
    let Some(pat) = pattern else {
        return vec![pts.to_vec()];
    };
    let pat: Vec<f64> = pat.iter().map(|l| l * width.max(0.3)).collect();
    let mut out = Vec::new();
    let (mut k, mut left, mut on) = (0usize, pat[0], true);
    let mut cur: Vec<(f64, f64)> = pts.first().copied().into_iter().collect();
    for w in pts.windows(2) {
        let (mut a, b) = (w[0], w[1]);
        let mut len = ((b.0 - a.0).powi(2) + (b.1 - a.1).powi(2)).sqrt();
        while len > 0.0 {
            let step = left.min(len);
            let t = step / len;
            let p = (a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1));
            if on {
                cur.push(p);
            }
            a = p;
            len -= step;
            left -= step;
            if left <= 1e-12 {
                if on && cur.len() >= 2 {
                    out.push(std::mem::take(&mut cur));
                }
                cur.clear();
                on = !on;
                k = (k + 1) % pat.len();
                left = pat[k];
                if on {
                    cur.push(a);
                }
            }
        }
    }
    if on && cur.len() >= 2 {
        out.push(cur);
    }
    out
}

/// Dash pattern (on, off lengths in units of the line width) of a line style.
pub fn dashes(style: crate::plot::Style) -> Option<&'static [f64]> {
    use crate::plot::Style;
    match style {
        Style::Line | Style::LinePoints | Style::Points => None,
        Style::Dashed => Some(&[4.0, 2.5]),
        Style::Dotted => Some(&[1.0, 1.8]),
        Style::DashDot => Some(&[4.5, 1.8, 1.0, 1.8]),
    }
}

/// Viridis-like colour map on $[0, 1]$ (linear interpolation between anchors of
/// the viridis map, perceptually ordered and readable in grey).
pub fn viridis(t: f64) -> Rgb {
    const A: [(u8, u8, u8); 9] = [
        (68, 1, 84),
        (71, 44, 122),
        (59, 81, 139),
        (44, 113, 142),
        (33, 144, 141),
        (39, 173, 129),
        (92, 200, 99),
        (170, 220, 50),
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
    Rgb(
        mix(A[k].0, A[k + 1].0),
        mix(A[k].1, A[k + 1].1),
        mix(A[k].2, A[k + 1].2),
    )
}
