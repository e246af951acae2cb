//! Heat-maps: cells coloured by value (viridis), integer ticks at cell centres,
//! and a colour bar with nice ticks and its label inside the canvas.

use super::Heatmap;
use super::scene::{Anchor, PanelFacts, Prim, Rect, Scene};
use super::style::{BLACK, MISSING, Options, viridis};
use super::text;
use super::ticks;

/// Label of the colour bar: the part of the title after its last `": "`, else "value".
pub fn bar_label(title: &str) -> String {
    title
        .rsplit_once(": ")
        .map_or("value".to_string(), |(_, l)| l.to_string())
}

/// The range of the finite cells of `values` that the colour map spans (a constant map
/// spans its value ± 0.5), or `None` when no cell is finite.
pub fn value_range(values: &[Vec<f64>]) -> Option<(f64, f64)> {
    let finite = values.iter().flatten().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold(None, |acc: Option<(f64, f64)>, v| {
        Some(acc.map_or((v, v), |(a, b)| (a.min(v), b.max(v))))
    })?;
    Some(if hi > lo {
        (lo, hi)
    } else {
        (lo - 0.5, lo + 0.5)
    })
}

/// Integer ticks for `n` cells: indices at steps of 1, 2, 5, 10, ….
fn index_ticks(n: usize, target: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let step = ticks::nice_step(n as f64, target).max(1.0) as usize;
    (0..n).step_by(step).collect()
}

/// Lays out the heat-map `h`.
pub fn layout(h: &Heatmap, opts: &Options) -> Result<Scene, String> {
    if opts.log.is_some() {
        return Err("--log/--linear do not apply to a heat-map (its axes are cell indices)".into());
    }
    let z = opts.sizes(1);
    let (asc, desc) = text::vertical_metrics(false);
    let nr = h.values.len();
    let nc = h.values.iter().map(Vec::len).max().unwrap_or(0);
    let finite: Vec<f64> = h
        .values
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    if finite.is_empty() {
        return Err("heat-map: no finite cell".into());
    }
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    // The colour map's span, stated in the data file as `value_range`.
    let Some((b0, b1)) = value_range(&h.values) else {
        return Err("heat-map: no finite cell".into());
    };
    let mut scene = Scene {
        width: z.width,
        ..Default::default()
    };
    let mut y = z.pad;
    for l in text::wrap(&h.title, z.title_font, true, z.width - 4.0 * z.pad) {
        y += asc * z.title_font;
        scene.text(
            z.width / 2.0,
            y,
            &l,
            z.title_font,
            Anchor::Middle,
            false,
            true,
        );
        y += (desc + 0.15) * z.title_font;
    }
    y += z.pad;
    // Colour-bar geometry from the right edge inwards: label, tick labels, ticks, bar.
    let bar_ticks = ticks::linear(b0, b1, 5);
    let btw = bar_ticks
        .labels
        .iter()
        .map(|l| text::extent(l, z.font, false).width)
        .fold(0.0, f64::max);
    let label = bar_label(&h.title);
    let bar_w = 1.1 * z.font;
    let right_block =
        z.pad + bar_w + z.tick + 0.6 * z.pad + btw + z.pad + (asc + desc) * z.font + z.pad;
    let rt: Vec<usize> = index_ticks(nr, 8);
    let ytw = rt
        .iter()
        .map(|i| text::extent(&i.to_string(), z.font, false).width)
        .fold(0.0, f64::max);
    let left = z.pad
        + if h.y_label.is_empty() {
            0.0
        } else {
            (asc + desc) * z.font + z.pad
        }
        + ytw
        + z.tick
        + 0.6 * z.pad;
    let right = z.width - right_block - z.pad;
    let aw = right - left;
    let ah = (aw * (nr as f64 / nc.max(1) as f64)).clamp(0.55 * aw, 1.1 * aw);
    let ax = Rect {
        x0: left,
        y0: y,
        x1: right,
        y1: y + ah,
    };
    let (cw, ch) = (aw / nc.max(1) as f64, ah / nr.max(1) as f64);
    let scale = |v: f64| (v - b0) / (b1 - b0);
    let mut any_missing = false;
    for (r, row) in h.values.iter().enumerate() {
        for c in 0..nc {
            let v = row.get(c).copied().unwrap_or(f64::NAN);
            let col = if v.is_finite() {
                viridis(scale(v))
            } else {
                any_missing = true;
                MISSING
            };
            scene.push(Prim::Box {
                rect: Rect::new(ax.x0 + c as f64 * cw, ax.y0 + r as f64 * ch, cw, ch),
                color: col,
            });
        }
    }
    scene.frame(&ax, z.axis);
    let xt = index_ticks(nc, 8);
    let xbase = ax.y1 + z.tick + 0.4 * z.pad + asc * z.font;
    for &c in &xt {
        let x = ax.x0 + (c as f64 + 0.5) * cw;
        tick(&mut scene, (x, ax.y1), (x, ax.y1 + z.tick), z.axis);
        scene.text(
            x,
            xbase,
            &c.to_string(),
            z.font,
            Anchor::Middle,
            false,
            false,
        );
    }
    for &r in &rt {
        let yy = ax.y0 + (r as f64 + 0.5) * ch;
        tick(&mut scene, (ax.x0 - z.tick, yy), (ax.x0, yy), z.axis);
        scene.text(
            ax.x0 - z.tick - 0.6 * z.pad,
            yy + 0.36 * z.font,
            &r.to_string(),
            z.font,
            Anchor::End,
            false,
            false,
        );
    }
    let mut bottom = xbase + desc * z.font;
    if !h.x_label.is_empty() {
        bottom += 0.4 * z.pad + asc * z.font;
        scene.text(
            (ax.x0 + ax.x1) / 2.0,
            bottom,
            &h.x_label,
            z.font,
            Anchor::Middle,
            false,
            false,
        );
        bottom += desc * z.font;
    }
    if !h.y_label.is_empty() {
        scene.text(
            z.pad + asc * z.font,
            (ax.y0 + ax.y1) / 2.0,
            &h.y_label,
            z.font,
            Anchor::Middle,
            true,
            false,
        );
    }
    // Colour bar beside the cells; a grey swatch below it when some cells have no value.
    let bx0 = ax.x1 + 2.0 * z.pad;
    let swatch = if any_missing { 2.0 * z.font } else { 0.0 };
    let bar = Rect {
        x0: bx0,
        y0: ax.y0,
        x1: bx0 + bar_w,
        y1: ax.y1 - swatch,
    };
    let steps = 128;
    for k in 0..steps {
        let t0 = k as f64 / steps as f64;
        let t1 = (k + 1) as f64 / steps as f64;
        scene.push(Prim::Box {
            rect: Rect {
                x0: bar.x0,
                x1: bar.x1,
                y0: bar.y1 - t1 * bar.h(),
                y1: bar.y1 - t0 * bar.h(),
            },
            color: viridis((t0 + t1) / 2.0),
        });
    }
    scene.frame(&bar, z.axis);
    let by = |v: f64| bar.y1 - (v - b0) / (b1 - b0) * bar.h();
    for (v, l) in bar_ticks.major.iter().zip(&bar_ticks.labels) {
        let yy = by(*v);
        tick(&mut scene, (bar.x1, yy), (bar.x1 + z.tick, yy), z.axis);
        scene.text(
            bar.x1 + z.tick + 0.6 * z.pad,
            yy + 0.36 * z.font,
            l,
            z.font,
            Anchor::Start,
            false,
            false,
        );
    }
    let lab_x = bar.x1 + z.tick + 0.6 * z.pad + btw + z.pad + asc * z.font;
    let size = {
        let w = text::extent(&label, z.font, false).width;
        if w <= bar.h() {
            z.font
        } else {
            (z.font * bar.h() / w).max(0.7 * z.font)
        }
    };
    scene.text(
        lab_x,
        (bar.y0 + bar.y1) / 2.0,
        &label,
        size,
        Anchor::Middle,
        true,
        false,
    );
    if any_missing {
        let s = Rect::new(bar.x0, ax.y1 - 0.9 * z.font, bar_w, 0.9 * z.font);
        scene.push(Prim::Box {
            rect: s,
            color: MISSING,
        });
        scene.text(
            s.x1 + z.tick + 0.6 * z.pad,
            s.y1 - 0.1 * z.font,
            "none",
            z.font,
            Anchor::Start,
            false,
            false,
        );
    }
    scene.panels.push(PanelFacts {
        axes: Some(ax),
        x_ticks: xt.iter().map(|&c| c as f64).collect(),
        y_ticks: rt.iter().map(|&r| r as f64).collect(),
        x_data: (0.0, nc.saturating_sub(1) as f64),
        y_data: (0.0, nr.saturating_sub(1) as f64),
        ..Default::default()
    });
    scene.panels.push(PanelFacts {
        axes: Some(bar),
        y_ticks: bar_ticks.major.clone(),
        y_data: (lo, hi),
        ..Default::default()
    });
    scene.height = bottom + 2.0 * z.pad;
    Ok(scene)
}

fn tick(scene: &mut Scene, a: (f64, f64), b: (f64, f64), w: f64) {
    scene.push(Prim::Line {
        pts: vec![a, b],
        color: BLACK,
        width: w,
    });
}
