//! The figures of the switch study: against $T$, one panel per task, the fraction of the
//! converged runs whose off-queries use the BOS sink (`switch_study_bos.{svg,png}`) and the
//! fraction using the variant's own mechanism (`switch_study_own.{svg,png}`: the learned sink
//! logit, the gate, either for both, the diagonal for the masked BOS key), one line per
//! variant, its frozen control dashed in the same colour.

use super::point::{Record, Task, Variant};
use super::tally::{Cell, cells};
use crate::plot::{self, Panel, Series, Style};
use crate::sweep::SweepError;
use std::path::{Path, PathBuf};

/// The fraction of a cell's runs using the variant's own mechanism.
fn own(v: Variant, c: &Cell) -> Option<f64> {
    let f = |s| c.fraction(s);
    match v {
        Variant::Bos => f("bos_sink"),
        Variant::Masked => f("diagonal"),
        Variant::SinkLogit => f("sink_logit"),
        Variant::Gate => f("gate"),
        Variant::SinkLogitGate => Some(f("sink_logit")? + f("gate")?),
    }
}

/// Writes the two figures into `fig_dir`; returns their paths (none without a converged run).
pub fn write(records: &[Record], fig_dir: &Path) -> Result<Vec<PathBuf>, SweepError> {
    let cells = cells(records);
    let mut tasks: Vec<Task> = records.iter().map(|r| r.task).collect();
    tasks.sort();
    tasks.dedup();
    let mut figs = Vec::new();
    for (stem, what, pick) in [
        (
            "switch_study_bos",
            "runs using the BOS sink",
            (&|_: Variant, c: &Cell| c.fraction("bos_sink"))
                as &dyn Fn(Variant, &Cell) -> Option<f64>,
        ),
        (
            "switch_study_own",
            "runs using the variant's own switch",
            &own,
        ),
    ] {
        let mut panels = Vec::new();
        for &task in &tasks {
            let mut series = Vec::new();
            for (color, v) in Variant::ALL.iter().enumerate() {
                for frozen in [false, true] {
                    let pts: Vec<(f64, f64)> = cells
                        .iter()
                        .filter(|(((tk, vv, fr), _), _)| *tk == task && vv == v && *fr == frozen)
                        .filter_map(|((_, t), c)| pick(*v, c).map(|y| (*t as f64, y)))
                        .collect();
                    if pts.is_empty() {
                        continue;
                    }
                    let (name, style) = if frozen {
                        (format!("{v} (frozen)"), Style::Dashed)
                    } else {
                        (v.to_string(), Style::LinePoints)
                    };
                    series.push(Series::new(name, pts, style, color));
                }
            }
            if !series.is_empty() {
                panels.push(Panel {
                    title: task.to_string(),
                    x_label: "T".into(),
                    y_label: format!("fraction of {what}"),
                    log_x: true,
                    log_y: false,
                    x_unit: "tokens".into(),
                    y_unit: "1".into(),
                    series,
                });
            }
        }
        if !panels.is_empty() {
            figs.extend(plot::render(
                &fig_dir.join(stem),
                &format!("Switch study: fraction of {what}"),
                &panels,
            )?);
        }
    }
    Ok(figs)
}
