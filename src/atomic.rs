//! Atomic replacement of an output file: the one way sinklab writes a final output.
//!
//! The bytes go to a temporary file created in the target's own directory (so the rename
//! stays on one file system), are flushed and synced, and the temporary is renamed over the
//! target; the directory is then synced where the platform allows it, so the new name is
//! durable too. A reader, a crash or a full disk therefore sees the old file or the whole new
//! one, never a cut one. On any error (including a writer callback that fails or panics
//! midway) the temporary is removed and the old file is left exactly as it was.
//!
//! Only a regular file (or a name that does not exist yet) is ever replaced: a directory, a
//! device node, a FIFO or a socket at the target is refused ([`check_target`]), so
//! `--out /dev/null` or a FIFO never becomes a regular file. An output that is one of the run's
//! own inputs (same canonical path, or same device and inode: a hard link) is refused by
//! [`check_not_input`] before any work, naming both.
//!
//! Append-only files (results files, their lock) do not come here: they append under a lock.
//!
//! The functions return the bare [`std::io::Error`]; the caller names the target path once
//! in its own error type.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Replaces `path` by `bytes`, atomically (see the module documentation).
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    write_with(path, |w| w.write_all(bytes.as_ref()), |e| e)
}

/// Replaces `path` by what `fill` writes into the (buffered, seekable) temporary file.
///
/// `fill`'s own error is returned unchanged; an I/O error of creating, flushing, syncing or
/// renaming the temporary goes through `io` (where the caller names `path`). Either way the
/// temporary is removed and `path` is untouched.
pub fn write_with<T, E>(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> Result<T, E>,
    io: impl Fn(io::Error) -> E,
) -> Result<T, E> {
    let target = resolve(path);
    check_target(&target).map_err(&io)?;
    let (file, tmp) = create_temp(&target).map_err(&io)?;
    let guard = Remove(Some(tmp));
    let mut w = BufWriter::with_capacity(1 << 16, file);
    let value = fill(&mut w)?;
    let file = w.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(&io)?;
    drop(file);
    let tmp = guard.path();
    std::fs::rename(tmp, &target).map_err(&io)?;
    guard.disarm();
    sync_dir(&target);
    Ok(value)
}

/// What kind of file system object `m` is, in words (for refusals).
fn kind(m: &std::fs::Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Refuses a target that exists and is not a regular file (a directory, a device node, a FIFO,
/// a socket): replacing it by a regular file would destroy it. A missing target is fine.
pub fn check_target(target: &Path) -> io::Result<()> {
    match std::fs::metadata(target) {
        Ok(m) if !m.is_file() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the output {} is {}, not a regular file; refusing to replace it (name a regular file)",
                target.display(),
                kind(&m)
            ),
        )),
        _ => Ok(()),
    }
}

/// Whether `a` and `b` name one existing file: the same canonical path, or (Unix) the same
/// device and inode (a hard link).
pub fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if ma.dev() == mb.dev() && ma.ino() == mb.ino() {
            return true;
        }
    }
    let _ = (&ma, &mb);
    matches!(
        (std::fs::canonicalize(a), std::fs::canonicalize(b)),
        (Ok(x), Ok(y)) if x == y
    )
}

/// Refuses an output `out` that is one of the run's `inputs` (each named by its flag, e.g.
/// `("--file", path)`), or that exists and is not a regular file ([`check_target`]). Call it
/// before any work, so a run never computes for minutes and then destroys its own input.
pub fn check_not_input(out: &Path, inputs: &[(&str, &Path)]) -> io::Result<()> {
    for (flag, input) in inputs {
        if same_file(out, input) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the output {} is the input file {flag} {} of this run (the same file); \
                     writing it would destroy the input: name another output",
                    out.display(),
                    input.display()
                ),
            ));
        }
    }
    check_target(&resolve(out))
}

/// The file a write to `path` must replace: a symbolic link's target (so the link is kept and
/// the file it names is replaced), else `path` itself.
fn resolve(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).unwrap_or_else(|_| {
            // A dangling link: write where it points, relative to the link's directory.
            match std::fs::read_link(path) {
                Ok(t) if t.is_relative() => path.with_file_name(t),
                Ok(t) => t,
                Err(_) => path.to_path_buf(),
            }
        }),
        _ => path.to_path_buf(),
    }
}

/// A new temporary file beside `target`, `.<name>.<pid>.<n>.tmp` with the first free `n`
/// (created exclusively, so two processes or two writers of one process never share one).
fn create_temp(target: &Path) -> io::Result<(File, PathBuf)> {
    let name = target.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the output path names no file (it ends in `..` or is a root)",
        )
    })?;
    let name = name.to_string_lossy();
    let pid = std::process::id();
    remove_orphans(target, &name, pid);
    for n in 0u32..10_000 {
        let tmp = target.with_file_name(format!(".{name}.{pid}.{n}.tmp"));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "10000 temporary files beside it already exist",
    ))
}

/// Removes the temporaries `.<name>.<pid>.<n>.tmp` beside `target` that a killed writer left
/// (SIGKILL, SIGXFSZ: no destructor ran), recognised by a process id that no longer runs. Only
/// where `/proc` tells which processes run (Linux); a temporary of a live process is never
/// touched.
fn remove_orphans(target: &Path, name: &str, own: u32) {
    let proc_root = Path::new("/proc");
    if !proc_root.join("self").exists() {
        return;
    }
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{name}.");
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(rest) = file
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|r| r.strip_suffix(".tmp"))
        else {
            continue;
        };
        let Some((pid, n)) = rest.split_once('.') else {
            continue;
        };
        let (Ok(pid), true) = (pid.parse::<u32>(), n.bytes().all(|b| b.is_ascii_digit())) else {
            continue;
        };
        if pid != own && !proc_root.join(pid.to_string()).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Syncs the directory holding `target`, so the rename survives a crash (best effort: not every
/// platform or file system lets a directory be opened and synced).
fn sync_dir(target: &Path) {
    #[cfg(unix)]
    {
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    #[cfg(not(unix))]
    let _ = target;
}

/// Removes the temporary file when dropped (an error or a panic), unless disarmed.
struct Remove(Option<PathBuf>);

impl Remove {
    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new(""))
    }

    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Remove {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.txt");
        std::fs::write(&p, b"old contents").unwrap();
        write(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(entries(d.path()), vec!["out.txt".to_string()]);
        // A new file is created as well.
        let q = d.path().join("fresh.json");
        write(&q, b"{}").unwrap();
        assert_eq!(std::fs::read(&q).unwrap(), b"{}");
    }

    #[test]
    fn a_writer_failing_midway_leaves_the_old_file_and_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("fig.svg");
        std::fs::write(&p, b"<svg>old</svg>").unwrap();
        let r: Result<(), String> = write_with(
            &p,
            |w| {
                // Half the new file, pushed through the buffer to the temporary, then a failure.
                w.write_all(&[b'x'; 200_000]).map_err(|e| e.to_string())?;
                w.flush().map_err(|e| e.to_string())?;
                Err("the generator failed at row 7".to_string())
            },
            |e| e.to_string(),
        );
        assert_eq!(r.unwrap_err(), "the generator failed at row 7");
        assert_eq!(std::fs::read(&p).unwrap(), b"<svg>old</svg>");
        assert_eq!(entries(d.path()), vec!["fig.svg".to_string()]);
    }

    #[test]
    fn a_panicking_writer_leaves_the_old_file_and_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.md");
        std::fs::write(&p, b"# old").unwrap();
        let r = std::panic::catch_unwind(|| {
            let _: io::Result<()> = write_with(
                &p,
                |w| {
                    w.write_all(b"# new, cut").unwrap();
                    panic!("midway");
                },
                |e| e,
            );
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"# old");
        assert_eq!(entries(d.path()), vec!["report.md".to_string()]);
    }

    #[test]
    fn a_missing_directory_is_an_error_and_creates_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("no/such/dir/out.json");
        let e = write(&p, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(entries(d.path()).is_empty());
    }

    #[test]
    fn a_killed_writers_temporary_is_removed_and_a_live_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("report.html");
        // A process id above the kernel's limit (2^22) never runs.
        let dead = d.path().join(".report.html.4194305.0.tmp");
        let live = d
            .path()
            .join(format!(".report.html.{}.7.tmp", std::process::id()));
        let other = d.path().join(".report.html.notes.tmp");
        for f in [&dead, &live, &other] {
            std::fs::write(f, b"partial").unwrap();
        }
        write(&p, b"<html>").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"<html>");
        assert!(live.exists() && other.exists());
        // The orphan is only recognised where /proc lists the running processes.
        assert_eq!(dead.exists(), !Path::new("/proc/self").exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_or_directory_target_is_refused_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("pipe");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        let e = write(&fifo, b"x").unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo()
        );
        let sub = d.path().join("dir");
        std::fs::create_dir(&sub).unwrap();
        let e = write(&sub, b"x").unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        assert!(sub.is_dir());
        // A link to a FIFO is refused as well (the link's target is what would be replaced).
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        assert!(write(&link, b"x").is_err());
        assert_eq!(entries(d.path()), vec!["dir", "link", "pipe"]);
        // The character device /dev/null, where it exists, is refused before any temporary.
        if Path::new("/dev/null").exists() {
            let e = check_target(Path::new("/dev/null")).unwrap_err();
            assert!(e.to_string().contains("character device"), "{e}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn an_output_that_is_an_input_is_refused_naming_both() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("in.txt");
        std::fs::write(&input, b"text").unwrap();
        let hard = d.path().join("hard.txt");
        std::fs::hard_link(&input, &hard).unwrap();
        let via = d.path().join(".").join("in.txt");
        for out in [&input, &hard, &via] {
            let e = check_not_input(out, &[("--file", &input)]).unwrap_err();
            let m = e.to_string();
            assert!(m.contains("--file") && m.contains("in.txt"), "{m}");
        }
        let other = d.path().join("out.html");
        check_not_input(&other, &[("--file", &input)]).unwrap();
        std::fs::write(&other, b"old").unwrap();
        check_not_input(&other, &[("--file", &input)]).unwrap();
        assert_eq!(std::fs::read(&input).unwrap(), b"text");
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_is_kept_and_its_target_replaced() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real.txt");
        let link = d.path().join("link.txt");
        std::fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write(&link, b"new").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        assert_eq!(entries(d.path()), vec!["link.txt", "real.txt"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_read_only_directory_is_an_error_and_the_old_file_stays() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("ro");
        std::fs::create_dir(&sub).unwrap();
        let p = sub.join("out.json");
        std::fs::write(&p, b"old").unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o555)).unwrap();
        let r = write(&p, b"new");
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Root may write anyway; then the write must have been whole.
        match r {
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
                assert_eq!(std::fs::read(&p).unwrap(), b"old");
            }
            Ok(()) => assert_eq!(std::fs::read(&p).unwrap(), b"new"),
        }
        assert_eq!(entries(&sub), vec!["out.json".to_string()]);
    }
}
