//! One writer per sweep directory: an advisory lock (`flock`) on `DIR/.sweep.lock`, held for
//! the whole run. The kernel releases it when the process ends, SIGKILL included, so a lock
//! file left behind never blocks a later run; the file only records the holder's pid for the
//! message.

use super::SweepError;
use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside a sweep directory.
pub const LOCK_FILE: &str = ".sweep.lock";

/// The held lock; released on drop (or when the process dies).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    /// The lock file.
    pub path: PathBuf,
}

/// Takes the lock of `dir` or refuses with the pid of the process holding it.
pub fn acquire(dir: &Path) -> Result<DirLock, SweepError> {
    lock_at(
        &dir.join(LOCK_FILE),
        &format!(
            "{} is being written by another sweep or merge",
            dir.display()
        ),
        "wait for it to finish or use another --out",
    )
}

/// The same lock for one file that one process at a time appends to or rewrites (the results
/// of `sinklab real --file`): `.<name>.lock` beside `file`; `writer` names the other writer in
/// the refusal, `hint` what to do instead.
pub fn acquire_for_file(file: &Path, writer: &str, hint: &str) -> Result<DirLock, SweepError> {
    let name = file
        .file_name()
        .map_or_else(|| "results".into(), |n| n.to_string_lossy().into_owned());
    lock_at(
        &file.with_file_name(format!(".{name}.lock")),
        &format!("{} is being written by another {writer}", file.display()),
        hint,
    )
}

fn lock_at(path: &Path, busy: &str, hint: &str) -> Result<DirLock, SweepError> {
    let path = path.to_path_buf();
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(super::io(&path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(SweepError::Locked(format!(
                "{busy} ({}; lock {}): {hint}",
                if holder.is_empty() {
                    "pid unknown".to_string()
                } else {
                    format!("pid {holder}")
                },
                path.display()
            )));
        }
        Err(TryLockError::Error(e)) => return Err(super::io(&path)(e)),
    }
    let write = |f: &mut File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.seek(SeekFrom::Start(0))?;
        writeln!(f, "{}", std::process::id())?;
        f.flush()
    };
    write(&mut file).map_err(super::io(&path))?;
    Ok(DirLock { _file: file, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_and_the_lock_is_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path()).unwrap();
        let e = acquire(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("being written by another") && e.contains(&std::process::id().to_string()),
            "{e}"
        );
        drop(first);
        // The file stays behind; it does not block the next writer.
        assert!(dir.path().join(LOCK_FILE).exists());
        acquire(dir.path()).unwrap();
    }
}
