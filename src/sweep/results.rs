//! `results.jsonl`: reading (a partial last line skipped, later duplicates win, records sorted
//! by point id), the partial tail cut before appending, the set of finished points, the move
//! of stale records, and the merge of shards.

use super::{SweepError, SweepPoint, SweepRecord, io};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Where records of points that a spec no longer has are moved.
pub const STALE_FILE: &str = "results.stale.jsonl";

fn results_err(path: &Path, msg: String) -> SweepError {
    SweepError::Results {
        path: path.to_path_buf(),
        msg,
    }
}

/// Reads `results.jsonl` (a missing file holds no records). Every complete line must be a
/// record; a last line without its newline (a write cut by a kill) is skipped. Later
/// duplicates of `(point id, part)` replace earlier ones. The records come back sorted by
/// `(point id, part)`, whatever order they were written in.
pub fn read_records<R: SweepRecord>(path: &Path) -> Result<Vec<R>, SweepError> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(path)(e)),
        Ok(m) if !m.is_file() => {
            return Err(results_err(path, "not a regular file".into()));
        }
        Ok(_) => {}
    }
    let bytes = std::fs::read(path).map_err(io(path))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| results_err(path, "not UTF-8 text: not a sweep results file".into()))?;
    let mut map: BTreeMap<(String, String), R> = BTreeMap::new();
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    for (k, line) in lines.iter().enumerate() {
        match serde_json::from_str::<R>(line) {
            Ok(r) => {
                map.insert((r.point_id().to_string(), r.part().to_string()), r);
            }
            // The partial tail of a killed write.
            Err(_) if k + 1 == lines.len() && !complete => {}
            Err(e) => {
                let head: String = line.chars().take(60).collect();
                return Err(results_err(
                    path,
                    format!("line {} is not a sweep record ({e}): `{head}`", k + 1),
                ));
            }
        }
    }
    Ok(map.into_values().collect())
}

/// Cuts a partial last line (no trailing newline) so appends start on a fresh line.
pub(crate) fn truncate_partial_tail(path: &Path) -> Result<(), SweepError> {
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(SweepError::Io {
                path: path.to_path_buf(),
                source: e,
            });
        }
    };
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).map_err(io(path))?;
    if buf.is_empty() || buf.ends_with(b"\n") {
        return Ok(());
    }
    let keep = buf.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    f.set_len(keep as u64).map_err(io(path))?;
    f.seek(SeekFrom::End(0)).map_err(io(path))?;
    Ok(())
}

/// Ids of points whose every record is present and none failed.
pub fn done_ids<P: SweepPoint, R: SweepRecord>(records: &[R], points: &[P]) -> HashSet<String> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    let mut failed: HashSet<&str> = HashSet::new();
    for r in records {
        *count.entry(r.point_id()).or_default() += 1;
        if r.error().is_some() {
            failed.insert(r.point_id());
        }
    }
    points
        .iter()
        .map(SweepPoint::id)
        .zip(points)
        .filter(|(id, p)| {
            !failed.contains(id.as_str())
                && count.get(id.as_str()).copied().unwrap_or(0) >= p.n_records()
        })
        .map(|(id, _)| id)
        .collect()
}

fn lines<R: SweepRecord>(records: &[&R]) -> Result<String, SweepError> {
    let mut text = String::new();
    for r in records {
        text.push_str(&serde_json::to_string(r).map_err(|e| SweepError::Spec(e.to_string()))?);
        text.push('\n');
    }
    Ok(text)
}

/// Moves the records whose point id is not in `keep` from `path` to [`STALE_FILE`] beside it
/// (appended; the results file is rewritten atomically). Returns how many were moved.
pub(crate) fn move_stale<R: SweepRecord>(
    path: &Path,
    keep: &HashSet<String>,
) -> Result<usize, SweepError> {
    let records: Vec<R> = read_records(path)?;
    let (kept, stale): (Vec<&R>, Vec<&R>) =
        records.iter().partition(|r| keep.contains(r.point_id()));
    if stale.is_empty() {
        return Ok(0);
    }
    let stale_path = path.with_file_name(STALE_FILE);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&stale_path)
        .map_err(io(&stale_path))?;
    f.write_all(lines(&stale)?.as_bytes())
        .and_then(|_| f.flush())
        .map_err(io(&stale_path))?;
    crate::atomic::write(path, lines(&kept)?).map_err(io(path))?;
    Ok(stale.len())
}

/// Joins the results of shard directories (or results files) into `out/results.jsonl`,
/// deduplicated and sorted by point id. An input that is missing, is a directory without
/// `results.jsonl`, or holds no record is an error.
pub fn merge<R: SweepRecord>(inputs: &[PathBuf], out: &Path) -> Result<usize, SweepError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    let _lock = super::lock::acquire(out)?;
    let mut all: BTreeMap<(String, String), R> = BTreeMap::new();
    let dst = out.join("results.jsonl");
    let mut sources: Vec<PathBuf> = Vec::new();
    for d in inputs {
        let src = if d.is_dir() {
            d.join("results.jsonl")
        } else {
            d.clone()
        };
        if !src.exists() {
            return Err(SweepError::Io {
                path: src,
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        sources.push(src);
    }
    // What the output already holds comes first, so merging into a shard directory is safe;
    // an input record replaces it only where the output has none.
    for r in read_records::<R>(&dst)? {
        all.insert((r.point_id().to_string(), r.part().to_string()), r);
    }
    for src in &sources {
        if src == &dst {
            continue;
        }
        // A cut last line (a killed run) would be dropped without a word: refused instead.
        if std::fs::read(src)
            .map_err(io(src))?
            .last()
            .is_some_and(|&b| b != b'\n')
        {
            return Err(results_err(
                src,
                "its last line is cut (a run killed mid-write): resume that run (it drops the \
                 cut line and recomputes the point) or delete the line, then merge"
                    .into(),
            ));
        }
        let recs = read_records::<R>(src)?;
        if recs.is_empty() {
            return Err(results_err(src, "holds no sweep records".into()));
        }
        for r in recs {
            let key = (r.point_id().to_string(), r.part().to_string());
            // A finished record replaces a failed one; otherwise the first seen stays.
            if all
                .get(&key)
                .is_none_or(|old| old.error().is_some() && r.error().is_none())
            {
                all.insert(key, r);
            }
        }
    }
    let recs: Vec<&R> = all.values().collect();
    crate::atomic::write(&dst, lines(&recs)?).map_err(io(&dst))?;
    Ok(recs.len())
}
