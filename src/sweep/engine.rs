//! Running (or resuming) the points of a shard: rayon over the points not yet done, largest
//! first, one append of complete lines per finished point; the first write error stops it.

use super::progress::Progress;
use super::results::{done_ids, move_stale, read_records, truncate_partial_tail};
use super::{Shard, SweepError, SweepPoint, SweepRecord, io};
use rayon::prelude::*;
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
    /// Points computed now that failed (their records carry the error; a rerun retries them).
    pub failed: usize,
    /// The first failure: point id and error.
    pub first_failure: Option<(String, String)>,
    /// Records of points the spec no longer has, moved to `results.stale.jsonl`.
    pub stale: usize,
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
    run_with(points, dir, opts, prepare, compute, |path| {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Box::new(f))
    })
}

type Sink = Box<dyn Write + Send>;

/// [`run`] with the appender opened by `open` (tests inject a failing one).
pub(crate) fn run_with<P, R, C>(
    points: &[P],
    dir: &Path,
    opts: RunOptions,
    prepare: impl FnOnce(&[&P]) -> Result<C, SweepError>,
    compute: impl Fn(&C, &P) -> Vec<R> + Sync,
    open: impl FnOnce(&Path) -> std::io::Result<Sink>,
) -> Result<RunSummary, SweepError>
where
    P: SweepPoint,
    R: SweepRecord,
    C: Sync,
{
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let _lock = super::lock::acquire(dir)?;
    let path = dir.join("results.jsonl");
    truncate_partial_tail(&path)?;
    let all_ids: HashSet<String> = points.iter().map(SweepPoint::id).collect();
    let stale = move_stale::<R>(&path, &all_ids)?;
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
    let file = Mutex::new(open(&path).map_err(io(&path))?);
    let bar = Progress::new(opts.show_progress, todo.len());
    let ctx = prepare(&todo)?;
    let error: Mutex<Option<SweepError>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let computed = AtomicUsize::new(0);
    let failures: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let fail = |e: SweepError| {
        stop.store(true, Ordering::SeqCst);
        error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(e);
    };
    todo.par_iter().with_max_len(1).for_each(|p| {
        // After a write error nothing more is computed: its records could not be kept.
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let recs = compute(&ctx, p);
        let mut text = String::new();
        for r in &recs {
            match serde_json::to_string(r) {
                Ok(s) => {
                    text.push_str(&s);
                    text.push('\n');
                }
                Err(e) => return fail(SweepError::Spec(e.to_string())),
            }
        }
        {
            let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
            // One write + flush per finished point.
            if let Err(e) = f.write_all(text.as_bytes()).and_then(|_| f.flush()) {
                return fail(SweepError::Io {
                    path: path.clone(),
                    source: e,
                });
            }
        }
        computed.fetch_add(1, Ordering::SeqCst);
        if let Some(e) = recs.iter().find_map(|r| r.error()) {
            failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((p.id(), e.to_string()));
        }
        bar.set_message(p.id());
        bar.inc(1);
    });
    bar.finish_and_clear();
    if let Some(e) = error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    let mut failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    failures.sort();
    Ok(RunSummary {
        total: points.len(),
        skipped: points.len() - todo.len(),
        computed: computed.into_inner(),
        failed: failures.len(),
        first_failure: failures.into_iter().next(),
        stale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    struct Pt(u32);
    impl SweepPoint for Pt {
        fn id(&self) -> String {
            format!("p{}", self.0)
        }
        fn n_records(&self) -> usize {
            1
        }
        fn weight(&self) -> f64 {
            1.0
        }
    }
    #[derive(Serialize, Deserialize)]
    struct Rec {
        id: String,
        error: Option<String>,
    }
    impl SweepRecord for Rec {
        fn point_id(&self) -> &str {
            &self.id
        }
        fn part(&self) -> &str {
            ""
        }
        fn error(&self) -> Option<&str> {
            self.error.as_deref()
        }
    }

    /// A writer that fails like a full disk.
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28)) // ENOSPC
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_full_disk_stops_the_run_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let points: Vec<Pt> = (0..50).map(Pt).collect();
        let calls = AtomicUsize::new(0);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let r = pool.install(|| {
            run_with(
                &points,
                dir.path(),
                RunOptions::default(),
                |_| Ok(()),
                |_, p: &Pt| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    vec![Rec {
                        id: p.id(),
                        error: None,
                    }]
                },
                |_| Ok(Box::new(Full)),
            )
        });
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("No space left") || e.contains("os error 28"),
            "{e}"
        );
        // One thread: the first point's write fails, nothing after it is computed.
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn failed_points_are_retried_and_stale_records_moved() {
        let dir = tempfile::tempdir().unwrap();
        let run_once = |points: &[Pt], fail: bool| {
            run(
                points,
                dir.path(),
                RunOptions::default(),
                |_| Ok(()),
                |_, p: &Pt| {
                    vec![Rec {
                        id: p.id(),
                        error: (fail && p.0 == 1).then(|| "boom".into()),
                    }]
                },
            )
            .unwrap()
        };
        let pts: Vec<Pt> = (0..3).map(Pt).collect();
        let s = run_once(&pts, true);
        assert_eq!((s.computed, s.failed), (3, 1));
        assert_eq!(
            s.first_failure.unwrap(),
            ("p1".to_string(), "boom".to_string())
        );
        // The failed point is computed again; the others are not.
        let s = run_once(&pts, false);
        assert_eq!((s.skipped, s.computed, s.failed), (2, 1, 0));
        // A spec without p2: its record is moved out of results.jsonl, not fitted, not lost.
        let s = run_once(&pts[..2], false);
        assert_eq!((s.stale, s.computed), (1, 0));
        let kept: Vec<Rec> = read_records(&dir.path().join("results.jsonl")).unwrap();
        assert_eq!(
            kept.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["p0", "p1"]
        );
        let stale: Vec<Rec> =
            read_records(&dir.path().join(super::super::results::STALE_FILE)).unwrap();
        assert_eq!(stale.len(), 1);
        assert_eq!(stale[0].id, "p2");
    }
}
