//! Running (or resuming) the points of a shard: rayon over the points not yet done, largest
//! first, one append of complete lines per finished point.

use super::results::{done_ids, read_records, truncate_partial_tail};
use super::{Shard, SweepError, SweepPoint, SweepRecord, io};
use rayon::prelude::*;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

/// How a run goes.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Only this shard's points.
    pub shard: Option<Shard>,
    /// A progress bar on stderr.
    pub show_progress: bool,
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunSummary {
    /// Points in this shard.
    pub total: usize,
    /// Already done before the run.
    pub skipped: usize,
    /// Computed now.
    pub computed: usize,
}

/// Runs (or resumes) the points of `opts.shard` in `dir`, appending to `results.jsonl`.
/// `prepare` sees the points left to compute before any is started (e.g. to open a device);
/// `compute` returns the records of one point.
pub fn run<P, R, C>(
    points: &[P],
    dir: &Path,
    opts: RunOptions,
    prepare: impl FnOnce(&[&P]) -> Result<C, SweepError>,
    compute: impl Fn(&C, &P) -> Vec<R> + Sync,
) -> Result<RunSummary, SweepError>
where
    P: SweepPoint,
    R: SweepRecord,
    C: Sync,
{
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join("results.jsonl");
    truncate_partial_tail(&path)?;
    let points: Vec<&P> = points
        .iter()
        .enumerate()
        .filter(|(k, _)| opts.shard.is_none_or(|s| s.contains(*k)))
        .map(|(_, p)| p)
        .collect();
    let done = done_ids(&read_records::<R>(&path)?, &points);
    let mut todo: Vec<&P> = points
        .iter()
        .copied()
        .filter(|p| !done.contains(&p.id()))
        .collect();
    // Largest first: the long points start early and the tail of the run stays busy.
    todo.sort_by(|a, b| b.weight().total_cmp(&a.weight()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io(&path))?;
    let file = Mutex::new(file);
    let bar = if opts.show_progress {
        indicatif::ProgressBar::new(todo.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} points ({eta}) {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let ctx = prepare(&todo)?;
    let errors: Mutex<Vec<SweepError>> = Mutex::new(Vec::new());
    todo.par_iter().with_max_len(1).for_each(|p| {
        let recs = compute(&ctx, p);
        let mut text = String::new();
        for r in &recs {
            match serde_json::to_string(r) {
                Ok(s) => {
                    text.push_str(&s);
                    text.push('\n');
                }
                Err(e) => errors
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(SweepError::Spec(e.to_string())),
            }
        }
        {
            let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
            // One write + flush per finished point.
            if let Err(e) = f.write_all(text.as_bytes()).and_then(|_| f.flush()) {
                errors
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(SweepError::Io {
                        path: path.clone(),
                        source: e,
                    });
            }
        }
        bar.set_message(p.id());
        bar.inc(1);
    });
    bar.finish_and_clear();
    if let Some(e) = errors
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .next()
    {
        return Err(e);
    }
    Ok(RunSummary {
        total: points.len(),
        skipped: points.len() - todo.len(),
        computed: todo.len(),
    })
}
