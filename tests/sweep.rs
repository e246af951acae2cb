//! The sweep engine end to end through the built binary: results, fit and
//! figures; resume recomputes nothing; SIGKILL never corrupts the file and a
//! rerun completes only the missing points; shards merge into the full set.

#[path = "support/cli.rs"]
mod cli;
use cli::bin;
use sinklab::sweep::cost_scaling::{SweepSpec, read_results};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SPEC: &str = r#"
name = "tiny"
bootstrap = 200
[[exact]]
patterns = ["sink", "diagonal"]
norms = ["fro", "nuclear"]
embeddings = ["orthonormal", "gaussian"]
t = [4, 6, 8, 12, 16, 24]
d_factor = 2
seeds = [0, 1, 2]
delta = 5.0
"#;

fn write_spec(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("tiny.toml");
    std::fs::write(&p, SPEC).unwrap();
    p
}

fn n_points() -> usize {
    SweepSpec::from_toml(SPEC).unwrap().points().len()
}

#[test]
fn sweep_then_resume_recomputes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path());
    let out = tmp.path().join("out");
    let st = bin()
        .args([
            "sweep",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--threads",
            "2",
        ])
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", cli::stderr(&st));
    let recs = read_results(&out.join("results.jsonl")).unwrap();
    assert_eq!(recs.len(), n_points());
    assert!(
        recs.iter().all(|r| r.value.is_some_and(|v| v > 0.0)),
        "every point feasible and solved"
    );
    for f in [
        "fit.json",
        "figures/cost_scaling.svg",
        "figures/cost_scaling.png",
        "figures/cost_ratio.png",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let fits: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("fit.json")).unwrap()).unwrap();
    assert_eq!(
        fits.as_array().unwrap().len(),
        8,
        "2 embeddings × 2 norms × 2 patterns"
    );
    // The nuclear panel draws the exact minima of `cost::exact`; the solver's orthonormal
    // points must lie on them: each value sits in a certified bracket of relative width
    // ≤ tol = 1e-3 around the minimum, so the seed mean is within 2·tol of the curve.
    let fig: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("figures/cost_scaling.json")).unwrap(),
    )
    .unwrap();
    let panel = fig["figure"]["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["title"] == "cost: nuclear")
        .expect("nuclear panel");
    let series = panel["series"].as_array().unwrap();
    let points = |s: &serde_json::Value| -> Vec<(f64, f64)> {
        s["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
            .collect()
    };
    for (pattern, curve) in [
        ("sink", "Δ(T − 1)/√T (exact, sink)"),
        ("diagonal", "Δ Σ √(i/(i+1)) (exact, diagonal)"),
    ] {
        let c = points(series.iter().find(|s| s["name"] == curve).expect(curve));
        let label = format!("{pattern} (exact, orthonormal)");
        let data = series
            .iter()
            .find(|s| s["style"] == "points" && s["name"].as_str().unwrap().starts_with(&label))
            .expect("orthonormal points");
        for (t, v) in points(data) {
            let (_, want) = c.iter().find(|q| q.0 == t).expect("curve covers the grid");
            assert!(
                (v / want - 1.0).abs() <= 2e-3,
                "{pattern} T = {t}: solver {v} vs exact {want}"
            );
        }
    }
    let before = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let st = bin()
        .args([
            "sweep",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(st.status.success());
    let err = cli::stderr(&st);
    assert!(
        err.contains(&format!("{} already done, 0 computed", n_points())),
        "{err}"
    );
    assert_eq!(
        before,
        std::fs::read_to_string(out.join("results.jsonl")).unwrap(),
        "file unchanged"
    );
}

#[test]
fn sigkill_loses_at_most_points_in_flight() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path());
    let out = tmp.path().join("out");
    let res = out.join("results.jsonl");
    let mut child = bin()
        .args([
            "sweep",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--threads",
            "1",
            "--no-analysis",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    // Wait until a few points are finished, then SIGKILL (Child::kill sends SIGKILL on Unix).
    loop {
        let lines = std::fs::read_to_string(&res)
            .map(|s| s.lines().count())
            .unwrap_or(0);
        if lines >= 3 || start.elapsed() > Duration::from_secs(120) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&res).unwrap();
    // Every complete line parses; at most the last one may be partial.
    let complete: Vec<&str> = text
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .collect();
    for l in &complete {
        serde_json::from_str::<serde_json::Value>(l.trim_end()).expect("complete lines parse");
    }
    let killed_with = read_results(&res).unwrap();
    assert!(killed_with.len() >= 3);
    assert!(
        killed_with.len() < n_points(),
        "the run must have been interrupted (largest points run first)"
    );
    let seconds: HashMap<String, f64> = killed_with
        .iter()
        .map(|r| (r.id.clone(), r.seconds))
        .collect();
    // Rerun: completes, and the records finished before the kill are kept byte for byte.
    let st = bin()
        .args([
            "sweep",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--no-analysis",
        ])
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", cli::stderr(&st));
    let err = cli::stderr(&st);
    assert!(
        err.contains(&format!("{} already done", killed_with.len())),
        "{err}"
    );
    let text2 = std::fs::read_to_string(&res).unwrap();
    assert!(text2.ends_with('\n'));
    assert_eq!(
        text2.lines().count(),
        n_points(),
        "no duplicates, no partial line left"
    );
    let all = read_results(&res).unwrap();
    assert_eq!(all.len(), n_points());
    for r in &all {
        if let Some(s) = seconds.get(&r.id) {
            assert_eq!(*s, r.seconds, "{} was recomputed", r.id);
        }
    }
}

#[test]
fn partial_last_line_is_tolerated_and_recomputed() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path());
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("results.jsonl"), "{\"id\":\"exact/sink/fro/orth").unwrap();
    assert!(read_results(&out.join("results.jsonl")).unwrap().is_empty());
    let st = bin()
        .args([
            "sweep",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--no-analysis",
        ])
        .output()
        .unwrap();
    assert!(st.status.success());
    let text = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    assert_eq!(text.lines().count(), n_points());
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    );
}

#[test]
fn shards_merge_into_the_full_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path());
    let mut dirs = Vec::new();
    for i in 0..3 {
        let d = tmp.path().join(format!("shard{i}"));
        let st = bin()
            .args([
                "sweep",
                spec.to_str().unwrap(),
                "--out",
                d.to_str().unwrap(),
                "--shard",
                &format!("{i}/3"),
                "--no-analysis",
            ])
            .output()
            .unwrap();
        assert!(st.status.success(), "{}", cli::stderr(&st));
        let n = read_results(&d.join("results.jsonl")).unwrap().len();
        assert!(n > 0 && n < n_points());
        dirs.push(d);
    }
    let merged = tmp.path().join("merged");
    let mut args = vec![
        "merge".to_string(),
        "--out".into(),
        merged.display().to_string(),
    ];
    args.extend(dirs.iter().map(|d| d.display().to_string()));
    let st = bin().args(&args).output().unwrap();
    assert!(st.status.success(), "{}", cli::stderr(&st));
    let recs = read_results(&merged.join("results.jsonl")).unwrap();
    let mut ids: Vec<String> = recs.iter().map(|r| r.id.clone()).collect();
    ids.sort();
    let mut want: Vec<String> = SweepSpec::from_toml(SPEC)
        .unwrap()
        .points()
        .iter()
        .map(|p| p.id())
        .collect();
    want.sort();
    assert_eq!(ids, want);
    assert!(merged.join("fit.json").exists());
    // Bad shard strings are rejected by the CLI.
    let st = bin()
        .args(["sweep", spec.to_str().unwrap(), "--shard", "3/3"])
        .output()
        .unwrap();
    assert!(!st.status.success());
}

/// Runs `sinklab sweep` and asserts success.
fn sweep_ok(args: &[&str]) {
    let st = bin().arg("sweep").args(args).output().unwrap();
    assert!(st.status.success(), "{}", cli::stderr(&st));
}

fn sh(program: &str, script: &Path, env: &[(&str, String)]) -> std::process::Output {
    let mut c = Command::new(program);
    c.arg(script);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn emitted_manifest_and_slurm_jobs_reproduce_the_unsharded_fit() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path());
    let spec_s = spec.to_str().unwrap();
    let direct = tmp.path().join("direct");
    sweep_ok(&[spec_s, "--out", direct.to_str().unwrap()]);
    let want = std::fs::read(direct.join("fit.json")).unwrap();

    // Manifest: one command a line, run here one after the other, then merge.sh.
    let man = tmp.path().join("with space");
    sweep_ok(&[
        spec_s,
        "--out",
        man.to_str().unwrap(),
        "--emit",
        "manifest",
        "--shards",
        "3",
    ]);
    assert!(
        !man.join("results.jsonl").exists(),
        "--emit must not compute"
    );
    let lines = std::fs::read_to_string(man.join("jobs/shards.txt")).unwrap();
    assert_eq!(lines.lines().count(), 3);
    for l in lines.lines() {
        let o = Command::new("sh").arg("-c").arg(l).output().unwrap();
        assert!(o.status.success(), "{l}: {}", cli::stderr(&o));
    }
    let o = sh("sh", &man.join("jobs/merge.sh"), &[]);
    assert!(o.status.success(), "{}", cli::stderr(&o));
    assert_eq!(std::fs::read(man.join("fit.json")).unwrap(), want);

    // Slurm: the array script run as tasks 0..2, then the merge script.
    let sl = tmp.path().join("slurm");
    sweep_ok(&[
        spec_s,
        "--out",
        sl.to_str().unwrap(),
        "--emit",
        "slurm",
        "--shards",
        "2",
    ]);
    let script = sl.join("jobs/sweep.sbatch");
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("#SBATCH --array=0-1"), "{text}");
    assert!(sl.join("jobs/submit.sh").exists());
    // Outside an array job the script refuses to guess a task.
    assert!(!sh("bash", &script, &[]).status.success());
    for i in 0..2 {
        let o = sh("bash", &script, &[("SLURM_ARRAY_TASK_ID", i.to_string())]);
        assert!(o.status.success(), "{}", cli::stderr(&o));
    }
    let o = sh("bash", &sl.join("jobs/merge.sbatch"), &[]);
    assert!(o.status.success(), "{}", cli::stderr(&o));
    assert_eq!(std::fs::read(sl.join("fit.json")).unwrap(), want);

    // Bad requests are refused.
    for bad in [
        vec![spec_s, "--emit", "slurm"],
        vec![spec_s, "--emit", "pbs", "--shards", "2"],
        vec![spec_s, "--emit", "manifest", "--shards", "0"],
    ] {
        assert!(
            !bin()
                .arg("sweep")
                .args(&bad)
                .output()
                .unwrap()
                .status
                .success()
        );
    }
}
