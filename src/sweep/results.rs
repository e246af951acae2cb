//! `results.jsonl`: reading (a partial last line skipped, later duplicates win), the partial
//! tail cut before appending, the set of finished points, and the merge of shards.

use super::{SweepError, SweepPoint, SweepRecord, io};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Reads `results.jsonl`, skipping unparsable lines (a partial last line after a kill);
/// later duplicates of `(point id, part)` replace earlier ones.
pub fn read_records<R: SweepRecord>(path: &Path) -> Result<Vec<R>, SweepError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(SweepError::Io {
                path: path.to_path_buf(),
                source: e,
            });
        }
    };
    let mut order: Vec<(String, String)> = Vec::new();
    let mut map: HashMap<(String, String), R> = HashMap::new();
    for line in text.lines() {
        if let Ok(r) = serde_json::from_str::<R>(line) {
            let key = (r.point_id().to_string(), r.part().to_string());
            if map.insert(key.clone(), r).is_none() {
                order.push(key);
            }
        }
    }
    Ok(order.into_iter().filter_map(|k| map.remove(&k)).collect())
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

/// Ids of points whose every record is present.
pub fn done_ids<P: SweepPoint, R: SweepRecord>(records: &[R], points: &[P]) -> HashSet<String> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for r in records {
        *count.entry(r.point_id()).or_default() += 1;
    }
    points
        .iter()
        .filter(|p| count.get(p.id().as_str()).copied().unwrap_or(0) >= p.n_records())
        .map(SweepPoint::id)
        .collect()
}

/// Joins the results of shard directories into `out/results.jsonl` (deduplicated).
pub fn merge<R: SweepRecord>(inputs: &[PathBuf], out: &Path) -> Result<usize, SweepError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    let mut seen = HashSet::new();
    let mut all: Vec<R> = Vec::new();
    let dst = out.join("results.jsonl");
    // Include what the output already holds, so merging into a shard directory is safe.
    let mut sources: Vec<PathBuf> = vec![dst.clone()];
    sources.extend(inputs.iter().map(|d| {
        if d.is_dir() {
            d.join("results.jsonl")
        } else {
            d.clone()
        }
    }));
    for src in &sources {
        if src != &dst && !src.exists() {
            return Err(SweepError::Io {
                path: src.clone(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        for r in read_records::<R>(src)? {
            if seen.insert((r.point_id().to_string(), r.part().to_string())) {
                all.push(r);
            }
        }
    }
    let mut text = String::new();
    for r in &all {
        text.push_str(&serde_json::to_string(r).map_err(|e| SweepError::Spec(e.to_string()))?);
        text.push('\n');
    }
    let tmp = out.join("results.jsonl.tmp");
    std::fs::write(&tmp, text).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &dst).map_err(io(&dst))?;
    Ok(all.len())
}
