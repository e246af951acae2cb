//! The Python package, inside `cargo test`: builds `python/` with `pip install ./python` into a
//! virtual environment and runs its pytest suite (`python/tests/`).
//!
//! The environment is `$SINKLAB_PY_VENV` when set (created there if missing, reused after), else
//! a temporary one. The interpreter is `$SINKLAB_PYTHON`, else `python3`, and must be CPython
//! ≥ 3.9 (the wheel is abi3-py39). Without one, without `venv`/`pip`, or when pip cannot reach
//! a package index for the build's own requirements (maturin, numpy, pytest), the test prints
//! `SKIP:` with the reason and passes — unless `SINKLAB_REQUIRE_PYTHON=1` (set by `.ci/run`),
//! where each of those is a failure. A failing build of our own crate or a failing test is
//! always a failure.
//!
//! The suite gets `SINKLAB_BIN` (this build's `sinklab` binary, for the comparisons with the
//! command line) and `SINKLAB_REPO` (the fixtures).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn require() -> bool {
    std::env::var("SINKLAB_REQUIRE_PYTHON").as_deref() == Ok("1")
}

/// Prints `SKIP:` (or fails under `SINKLAB_REQUIRE_PYTHON=1`).
fn skip(why: &str) {
    assert!(!require(), "SINKLAB_REQUIRE_PYTHON=1 but {why}");
    eprintln!("SKIP: {why}");
}

fn run(cmd: &mut Command) -> std::io::Result<Output> {
    eprintln!("$ {cmd:?}");
    cmd.output()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The bin directory of a venv (`bin`, or `Scripts` on Windows).
fn bin(venv: &Path, exe: &str) -> PathBuf {
    let unix = venv.join("bin").join(exe);
    if unix.exists() {
        unix
    } else {
        venv.join("Scripts").join(format!("{exe}.exe"))
    }
}

/// Whether pip's output says it could not reach an index (not our build failing).
fn offline(out: &str) -> bool {
    [
        "No matching distribution found",
        "Could not find a version that satisfies",
        "Failed to establish a new connection",
        "Temporary failure in name resolution",
        "Network is unreachable",
    ]
    .iter()
    .any(|m| out.contains(m))
}

#[test]
fn python_package_builds_and_its_suite_passes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var("SINKLAB_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = run(Command::new(&python).args([
        "-c",
        "import sys; print(sys.implementation.name, sys.version_info[0], sys.version_info[1])",
    ]));
    let Some(probe) = probe.ok().filter(|o| o.status.success()) else {
        return skip(&format!("no Python interpreter `{python}`"));
    };
    let v = String::from_utf8_lossy(&probe.stdout).to_string();
    let f: Vec<&str> = v.split_whitespace().collect();
    let ok = f.len() == 3
        && f[0] == "cpython"
        && (
            f[1].parse::<u32>().unwrap_or(0),
            f[2].parse::<u32>().unwrap_or(0),
        ) >= (3, 9);
    if !ok {
        return skip(&format!("`{python}` is `{}`, not CPython ≥ 3.9", v.trim()));
    }
    let tmp = tempfile::tempdir().expect("temporary directory");
    let venv = match std::env::var("SINKLAB_PY_VENV") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => tmp.path().join("venv"),
    };
    if !bin(&venv, "python").exists() {
        let o = run(Command::new(&python).args(["-m", "venv"]).arg(&venv)).expect("spawn venv");
        if !o.status.success() {
            return skip(&format!(
                "`{python} -m venv` failed (no venv module?): {}",
                text(&o)
            ));
        }
    }
    let py = bin(&venv, "python");
    let pip = |args: &[&str]| run(Command::new(&py).args(["-m", "pip"]).args(args));
    match pip(&["--version"]) {
        Ok(o) if o.status.success() => {}
        _ => return skip("no pip in the virtual environment"),
    }
    let deps = pip(&["install", "--quiet", "numpy", "pytest"]).expect("spawn pip");
    if !deps.status.success() {
        let t = text(&deps);
        assert!(offline(&t), "pip install numpy pytest failed:\n{t}");
        return skip(&format!(
            "pip cannot install numpy, pytest (offline?):\n{t}"
        ));
    }
    // The build itself: what a user runs. Our crate failing to build is a failure.
    // The test builds with Cargo's dev profile (the crate's own: opt-level 1, dependencies at 3),
    // reusing the build `cargo test` keeps warm; a user's `pip install ./python` builds release.
    // SINKLAB_PY_RELEASE=1 tests the release build instead.
    let mut cmd = Command::new(&py);
    cmd.args(["-m", "pip", "install", "--force-reinstall", "--no-deps"])
        .arg(root.join("python"))
        .current_dir(&root);
    if std::env::var("SINKLAB_PY_RELEASE").as_deref() != Ok("1") {
        cmd.env("MATURIN_PEP517_ARGS", "--profile dev");
    }
    let build = run(&mut cmd).expect("spawn pip");
    if !build.status.success() {
        let t = text(&build);
        if offline(&t) && !t.contains("error[E") {
            return skip(&format!(
                "pip cannot fetch the build backend (maturin; offline?):\n{t}"
            ));
        }
        panic!("pip install ./python failed:\n{t}");
    }
    let test = run(Command::new(&py)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("python/tests"))
        .current_dir(tmp.path())
        .env("SINKLAB_BIN", env!("CARGO_BIN_EXE_sinklab"))
        .env("SINKLAB_REPO", &root))
    .expect("spawn pytest");
    let t = text(&test);
    eprintln!("{t}");
    assert!(test.status.success(), "pytest failed:\n{t}");
}
