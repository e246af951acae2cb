//! `sinklab plot <data file>`: redraw a figure from the `<stem>.json` written
//! beside it, in another style, without recomputing anything.

use anyhow::Result;
use sinklab::plot::{self, Options};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  Redraw a figure two columns wide with a larger font, beside its data file:
    sinklab plot out/figures/cost_scaling.json --width 7 --font-size 9
  Every figure of a sweep with linear axes, into another directory:
    sinklab plot sweeps/cost_scaling/figures/*.json --linear --out /tmp/linear

The data file format (every field) and a matplotlib recipe: docs/figures.md.")]
pub struct Args {
    /// Data files written beside figures (figures/<name>.json).
    #[arg(required = true, value_name = "FIG.json")]
    data: Vec<PathBuf>,
    /// Printed width in inches (default 3.4 for one panel, 7 for more).
    #[arg(long, value_name = "IN")]
    width: Option<f64>,
    /// Font size in points of every label (default 8).
    #[arg(long, value_name = "PT")]
    font_size: Option<f64>,
    /// Draw every axis linear.
    #[arg(long, conflicts_with = "log")]
    linear: bool,
    /// Draw every axis logarithmic (points ≤ 0 are not drawn).
    #[arg(long)]
    log: bool,
    /// Output directory (default: beside each data file)
    ///
    /// Without it the SVG and PNG beside each data file are replaced.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<i32> {
    let opts = Options {
        width_in: a.width,
        font_pt: a.font_size,
        log: if a.log {
            Some(true)
        } else if a.linear {
            Some(false)
        } else {
            None
        },
    };
    // Two data files drawn to one stem would overwrite each other's SVG and PNG.
    let mut stems: Vec<(PathBuf, &PathBuf)> = Vec::new();
    for d in &a.data {
        let dir = a
            .out
            .clone()
            .or_else(|| d.parent().map(PathBuf::from))
            .unwrap_or_default();
        let stem = dir.join(d.file_stem().unwrap_or_default());
        if let Some((_, first)) = stems.iter().find(|(s, _)| *s == stem) {
            anyhow::bail!(
                "{} and {}: both would be drawn to {}.svg/.png (one stem); plot them to \
                 separate --out directories",
                first.display(),
                d.display(),
                stem.display()
            );
        }
        stems.push((stem, d));
    }
    for d in &a.data {
        for f in plot::redraw(d, &opts, a.out.as_deref())? {
            outln!("{}", f.display());
        }
    }
    Ok(0)
}
