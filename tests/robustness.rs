//! Issue 12 (robustness), each case reproduced: a clear error and a non-zero exit, the right
//! recomputation, or identical bytes.

#[path = "support/cli.rs"]
mod cli;
use cli::{bin, run as sinklab, stderr};
use sinklab::sweep::cost_scaling::{SweepSpec, fit_all, read_results, run};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Fails with a non-zero exit and a message holding every needle.
fn refused(args: &[&str], needles: &[&str]) {
    let start = Instant::now();
    let o = sinklab(args);
    let e = stderr(&o);
    assert!(!o.status.success(), "{args:?} succeeded: {e}");
    assert!(
        !e.contains("panicked"),
        "{args:?} panicked instead of refusing: {e}"
    );
    for n in needles {
        assert!(e.contains(n), "{args:?}: `{e}` does not say `{n}`");
    }
    // A refusal comes before any work.
    assert!(start.elapsed() < Duration::from_secs(20), "{args:?} ran");
}

const SPEC: &str = r#"
name = "tiny"
bootstrap = 200
[[exact]]
patterns = ["sink", "diagonal"]
norms = ["fro"]
embeddings = ["orthonormal", "gaussian"]
t = [4, 6, 8, 12]
d_factor = 2
seeds = [0, 1]
delta = 5.0
[[exact]]
patterns = ["sink", "diagonal"]
norms = ["fro"]
embeddings = ["gaussian"]
t = [4, 6, 8]
d_factor = 2
seeds = [2]
delta = 5.0
"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

// ---- 2. sweep identity -----------------------------------------------------------------

#[test]
fn point_ids_cover_every_parameter_that_changes_a_result() {
    let trained = r#"
name = "t"
[trained]
t = [8]
seeds = [0]
variants = ["bos"]
d = 16
r = 16
steps = 10
batch = 4
lr = 0.01
weight_decay = 0.01
n = 8
k = 2
alpha = 0.3
"#;
    let id = |text: &str| SweepSpec::from_toml(text).unwrap().points()[0].id();
    let base = id(trained);
    for (from, to) in [
        ("r = 16", "r = 8"),
        ("n = 8", "n = 9"),
        ("k = 2", "k = 3"),
        ("alpha = 0.3", "alpha = 0.5"),
        ("d = 16\n", "d = 16\nlayers = 2\n"),
        ("d = 16\n", "d = 16\nmlp_hidden = 4\n"),
    ] {
        assert_ne!(
            base,
            id(&trained.replacen(from, to, 1)),
            "{to} not in the id"
        );
    }
    let exact = "name = \"e\"\n[[exact]]\npatterns = [\"sink\"]\nnorms = [\"fro\"]\n\
                 embeddings = [\"gaussian\"]\nt = [4]\nseeds = [0]\n";
    let base = id(exact);
    assert_ne!(base, id(&format!("{exact}tol = 1e-4\n")));
    assert_ne!(base, id(&format!("{exact}max_iter = 100\n")));
    assert_eq!(base, id(exact), "ids are stable");
}

/// Shards of one spec merge; a second spec's results merged into the same output are refused
/// naming both specs (were pooled into one fit).
#[test]
fn merges_refuse_records_of_another_spec() {
    let tmp = tempfile::tempdir().unwrap();
    let one = "name = \"one\"\n[[exact]]\npatterns = [\"sink\"]\nnorms = [\"fro\"]\n\
               embeddings = [\"orthonormal\"]\nt = [4, 6]\nseeds = [0]\ndelta = 5.0\n";
    let two = one
        .replace("\"one\"", "\"two\"")
        .replace("t = [4, 6]", "t = [8, 12]");
    let (s1, s2) = (
        write(tmp.path(), "one.toml", one),
        write(tmp.path(), "two.toml", &two),
    );
    let d = |n: &str| tmp.path().join(n).display().to_string();
    for (spec, out) in [(&s1, d("a0")), (&s1, d("a1")), (&s2, d("b"))] {
        let shard = if out.ends_with("a1") { "1/2" } else { "0/2" };
        let o = sinklab([
            "sweep",
            spec,
            "--out",
            &out,
            "--shard",
            shard,
            "--no-analysis",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let m = d("m");
    // The two shards of one spec: merged, with their identity.
    let o = sinklab([
        "merge",
        &d("a0"),
        &d("a1"),
        "--out",
        &m,
        "--bootstrap",
        "50",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let id = std::fs::read_to_string(tmp.path().join("m/sweep.id")).unwrap();
    assert!(id.starts_with("one "), "{id}");
    // Another spec into the same output, or beside it as an input: refused, nothing changed.
    let before = std::fs::read(tmp.path().join("m/results.jsonl")).unwrap();
    refused(
        &["merge", &d("b"), "--out", &m, "--bootstrap", "50"],
        &["spec `two", "spec `one", "one fit"],
    );
    refused(
        &[
            "merge",
            &d("a0"),
            &d("b"),
            "--out",
            &d("m2"),
            "--bootstrap",
            "50",
        ],
        &["spec `two", "spec `one"],
    );
    assert_eq!(
        before,
        std::fs::read(tmp.path().join("m/results.jsonl")).unwrap()
    );
}

#[test]
fn a_spec_edit_recomputes_exactly_the_changed_block() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = SweepSpec::from_toml(SPEC).unwrap();
    let n1 = 2 * 4 + 2 * 4 * 2; // orthonormal: one seed; gaussian: two
    let n2 = 2 * 3;
    assert_eq!(spec.points().len(), n1 + n2);
    let s = run(&spec, tmp.path(), None, false).unwrap();
    assert_eq!((s.computed, s.failed), (n1 + n2, 0));
    // Tighter tolerance in the second block: only its points are recomputed, and the old
    // records are moved out of the way instead of being fitted.
    let edited =
        SweepSpec::from_toml(&SPEC.replacen("seeds = [2]\n", "seeds = [2]\ntol = 1e-4\n", 1))
            .unwrap();
    let s = run(&edited, tmp.path(), None, false).unwrap();
    assert_eq!((s.skipped, s.computed, s.stale), (n1, n2, n2));
    let recs = read_results(&tmp.path().join("results.jsonl")).unwrap();
    assert_eq!(recs.len(), n1 + n2);
    let ids: std::collections::HashSet<String> = edited.points().iter().map(|p| p.id()).collect();
    assert!(recs.iter().all(|r| ids.contains(&r.id)));
}

#[test]
fn invalid_spec_values_name_file_key_and_value() {
    let tmp = tempfile::tempdir().unwrap();
    let exact = "name = \"e\"\n[[exact]]\npatterns = [\"sink\"]\nnorms = [\"fro\"]\n\
                 embeddings = [\"gaussian\"]\nt = [4]\nseeds = [0]\n";
    let trained = "name = \"t\"\n[trained]\nt = [8]\nseeds = [0]\nvariants = [\"bos\"]\nd = 16\n\
                   r = 16\nsteps = 10\nbatch = 4\nlr = 0.01\nweight_decay = 0.01\nn = 8\nk = 2\n\
                   alpha = 0.3\n";
    for (text, key, value) in [
        (format!("{exact}delta = nan\n"), "exact[0].delta", "NaN"),
        (format!("{exact}eps = 2.0\n"), "exact[0].eps", "2"),
        (format!("{exact}d = 0\n"), "exact[0].d", "0"),
        (format!("{exact}tol = -1.0\n"), "exact[0].tol", "-1"),
        (format!("{exact}max_iter = 0\n"), "exact[0].max_iter", "0"),
        (
            exact.replace("t = [4]", "t = [2]\nscopes = [\"head\"]"),
            "exact[0].t",
            "2",
        ),
        (
            trained.replace("lr = 0.01", "lr = nan"),
            "trained.lr",
            "NaN",
        ),
        (trained.replace("d = 16", "d = 0"), "trained.d", "0"),
        (
            exact.replace("name = \"e\"", "name = \"e\"\nbootstrap = 100000000000"),
            "bootstrap",
            "100000000000",
        ),
    ] {
        let path = write(tmp.path(), "bad.toml", &text);
        let e = SweepSpec::load(Path::new(&path)).unwrap_err().to_string();
        for n in [path.as_str(), key, value] {
            assert!(e.contains(n), "`{e}` does not name `{n}`");
        }
        refused(
            &[
                "sweep",
                &path,
                "--out",
                tmp.path().join("o").to_str().unwrap(),
            ],
            &[key],
        );
    }
    // Fixed, the same spec runs and fits.
    let path = write(
        tmp.path(),
        "good.toml",
        &format!("{exact}t = [4, 6, 8]\n").replace("t = [4]\n", ""),
    );
    let out = tmp.path().join("good");
    let o = sinklab(["sweep", &path, "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let fit = std::fs::read_to_string(out.join("fit.json")).unwrap();
    assert!(fit.contains("exponent"), "{fit}");
}

#[test]
fn a_second_writer_is_refused_and_a_killed_ones_lock_is_not_stale() {
    let tmp = tempfile::tempdir().unwrap();
    // Large enough to run for a few seconds on one thread.
    let spec = write(
        tmp.path(),
        "slow.toml",
        &SPEC.replace("t = [4, 6, 8, 12]", "t = [16, 24, 32, 48, 64, 96]"),
    );
    let out = tmp.path().join("out");
    let mut first = bin()
        .args([
            "sweep",
            &spec,
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
    while !out.join(".sweep.lock").exists() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let o = sinklab([
        "sweep",
        &spec,
        "--out",
        out.to_str().unwrap(),
        "--no-analysis",
    ]);
    assert!(!o.status.success(), "second writer accepted");
    let e = stderr(&o);
    assert!(
        e.contains("being written by another") && e.contains(&first.id().to_string()),
        "{e}"
    );
    first.kill().unwrap(); // SIGKILL: the lock file stays, the kernel drops the lock.
    first.wait().unwrap();
    assert!(out.join(".sweep.lock").exists());
    let o = sinklab([
        "sweep",
        &spec,
        "--out",
        out.to_str().unwrap(),
        "--no-analysis",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let n = SweepSpec::load(Path::new(&spec)).unwrap().points().len();
    assert_eq!(lines.lines().count(), n, "no duplicate lines");
}

// ---- 3. order-free outputs ---------------------------------------------------------------

#[test]
fn fit_json_is_the_same_bytes_for_one_and_two_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write(tmp.path(), "tiny.toml", SPEC);
    let mut fits = Vec::new();
    for k in ["1", "2"] {
        let out = tmp.path().join(format!("t{k}"));
        let o = sinklab([
            "sweep",
            &spec,
            "--out",
            out.to_str().unwrap(),
            "--threads",
            k,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        fits.push(std::fs::read(out.join("fit.json")).unwrap());
    }
    assert!(fits[0].len() > 100);
    assert_eq!(
        fits[0], fits[1],
        "fit.json differs between --threads 1 and 2"
    );
    // The same records in another order (a merge, a resume) fit to the same values.
    let mut recs = read_results(&tmp.path().join("t1/results.jsonl")).unwrap();
    let a = serde_json::to_string(&fit_all(&recs, 200, 0)).unwrap();
    recs.reverse();
    recs.rotate_left(7);
    let b = serde_json::to_string(&fit_all(&recs, 200, 0)).unwrap();
    assert_eq!(a, b);
    // And through the file: lines reversed, then merged.
    let text = std::fs::read_to_string(tmp.path().join("t2/results.jsonl")).unwrap();
    let rev: String = text.lines().rev().map(|l| format!("{l}\n")).collect();
    let shuffled = write(tmp.path(), "rev.jsonl", &rev);
    let merged = tmp.path().join("merged");
    let o = sinklab([
        "merge",
        "--out",
        merged.to_str().unwrap(),
        "--bootstrap",
        "200",
        &shuffled,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(merged.join("fit.json")).unwrap(), fits[0]);
}

#[test]
fn merge_of_a_non_results_file_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let junk = write(tmp.path(), "junk.jsonl", "hello\nworld\n");
    let out = tmp.path().join("m");
    refused(
        &["merge", "--out", out.to_str().unwrap(), &junk],
        &["junk.jsonl", "not a sweep record"],
    );
    let empty = write(tmp.path(), "empty.jsonl", "");
    refused(
        &["merge", "--out", out.to_str().unwrap(), &empty],
        &["no sweep records"],
    );
}

// ---- 5. budgets before work ----------------------------------------------------------------

#[test]
fn sizes_are_checked_before_allocating() {
    refused(
        &[
            "cost",
            "--pattern",
            "sink",
            "--norm",
            "fro",
            "--t",
            "100000",
        ],
        &["--t 100000", "needs about", "--max-mem"],
    );
    refused(
        &[
            "cost",
            "--pattern",
            "sink",
            "--norm",
            "fro",
            "--t",
            "20000",
            "--max-mem",
            "1T",
            "--max-time",
            "30m",
        ],
        &["--t 20000", "would take at least", "--max-time"],
    );
    refused(
        &["cost", "--pattern", "sink", "--norm", "fro", "--t", "20000"],
        &["--t 20000", "--max-"],
    );
    refused(
        &["train", "--d", "100000000"],
        &["--d 100000000", "needs about", "--max-mem"],
    );
    let tmp = tempfile::tempdir().unwrap();
    let spec = write(tmp.path(), "tiny.toml", SPEC);
    refused(
        &["sweep", &spec, "--threads", "100000"],
        &["--threads 100000", "1024"],
    );
}

// ---- 6. values ----------------------------------------------------------------------------

#[test]
fn negative_and_non_finite_arguments_are_refused_by_name() {
    for delta in [["--delta", "-1"], ["--delta=-1", ""]] {
        let mut args = vec!["cost", "--pattern", "sink", "--norm", "fro", "--t", "8"];
        args.extend(delta.iter().filter(|s| !s.is_empty()));
        refused(&args, &["--delta -1", "positive"]);
    }
    refused(
        &["train", "--lr", "inf", "--steps", "10"],
        &["--lr inf", "finite"],
    );
    // A finite but absurd rate diverges: an error, not a NaN model reported as a number.
    let o = sinklab([
        "train", "--lr", "1e30", "--steps", "20", "--t", "8", "--d", "8", "--r", "8",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "diverged run exited 0: {out}");
    assert!(!out.contains("‖W_QK‖"), "{out}");
}

// ---- 6. activation files -------------------------------------------------------------------

mod activation_files {
    use safetensors::{Dtype, tensor::TensorView};
    use sinklab::real::activations::analyze_file;
    use std::path::Path;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// `hidden.0` [3, 4] plus the given tensors.
    fn file(p: &Path, extra: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)>) {
        let h = f32s(&[0.5; 12]);
        let mut items = vec![("hidden.0", Dtype::F32, vec![3, 4], h)];
        items.extend(extra);
        let views: Vec<(&str, TensorView<'_>)> = items
            .iter()
            .map(|(n, dt, s, b)| (*n, TensorView::new(*dt, s.clone(), b).unwrap()))
            .collect();
        std::fs::write(p, safetensors::serialize(views, None).unwrap()).unwrap();
    }

    /// Causal uniform attention [1, 3, 3], with one entry replaced.
    fn attn(k: usize, v: f32) -> Vec<u8> {
        let mut a = vec![
            1.0,
            0.0,
            0.0,
            0.5,
            0.5,
            0.0,
            1.0 / 3.0,
            1.0 / 3.0,
            1.0 / 3.0,
        ];
        if k < a.len() {
            a[k] = v;
        }
        f32s(&a)
    }

    fn refused(p: &Path, needles: &[&str]) {
        let e = analyze_file(p).map(|_| ()).unwrap_err().to_string();
        for n in needles {
            assert!(e.contains(n), "`{e}` does not say `{n}`");
        }
        let o = super::sinklab(["real", "--activations", p.to_str().unwrap()]);
        assert!(!o.status.success(), "real --activations accepted {e}");
    }

    #[test]
    fn every_tensor_an_analysis_reads_is_validated() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.safetensors");
        // Valid attention passes (the control).
        file(
            &p,
            vec![("attn.0", Dtype::F32, vec![1, 3, 3], attn(99, 0.0))],
        );
        analyze_file(&p).unwrap();
        // Negative, unnormalised, non-finite attention.
        file(
            &p,
            vec![("attn.0", Dtype::F32, vec![1, 3, 3], attn(0, -5.0))],
        );
        refused(&p, &["attn.0", "[0, 1]"]);
        file(
            &p,
            vec![("attn.0", Dtype::F32, vec![1, 3, 3], attn(4, 0.9))],
        );
        refused(&p, &["attn.0", "row 1", "sums to"]);
        file(
            &p,
            vec![("attn.0", Dtype::F32, vec![1, 3, 3], attn(4, f32::NAN))],
        );
        refused(&p, &["attn.0", "non-finite"]);
        // Non-finite keys and values.
        let mut kv = vec![1.0f32; 3 * 2];
        kv[3] = f32::INFINITY;
        file(&p, vec![("values.0", Dtype::F32, vec![1, 3, 2], f32s(&kv))]);
        refused(&p, &["values.0", "non-finite"]);
        file(&p, vec![("keys.0", Dtype::F32, vec![1, 3, 2], f32s(&kv))]);
        refused(&p, &["keys.0", "non-finite"]);
        // Negative token ids (they used to wrap to 4294967295).
        let ids: Vec<u8> = [1i64, -1, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
        file(&p, vec![("tokens", Dtype::I64, vec![3], ids)]);
        refused(&p, &["tokens", "-1"]);
        // Keys declared [1e12, 3, 0]: no bytes, a trillion heads; refused at once.
        let start = std::time::Instant::now();
        file(
            &p,
            vec![("keys.0", Dtype::F32, vec![1_000_000_000_000, 3, 0], vec![])],
        );
        refused(&p, &["keys.0", "empty dimension"]);
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
        // A long sequence whose T × T analyses would not fit: refused before the analysis.
        let t = 1 << 21;
        let h = f32s(&vec![0.5; t]);
        let views = vec![(
            "hidden.0",
            TensorView::new(Dtype::F32, vec![t, 1], &h).unwrap(),
        )];
        std::fs::write(&p, safetensors::serialize(views, None).unwrap()).unwrap();
        refused(&p, &["T = 2097152", "needs about", "SINKLAB_MAX_MEM"]);
    }
}

// ---- issue 25: stdout and stderr ------------------------------------------------------------

/// A pipe whose read end is already closed: every write to it fails with EPIPE.
fn closed_pipe() -> std::io::PipeWriter {
    let (r, w) = std::io::pipe().unwrap();
    drop(r);
    w
}

fn dev_full() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

#[test]
fn a_closed_stdout_pipe_exits_141_quietly() {
    // `sinklab check half_space --cases 300 | true` and a JSON report into `| head`.
    for args in [
        &["check", "half_space", "--cases", "300"][..],
        &["check", "hard_switch", "--cases", "5", "--json"],
        &["check", "--list"],
    ] {
        let o = bin()
            .args(args)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(141), "{args:?}: {:?} {e}", o.status);
        assert!(
            !e.contains("panicked") && !e.contains("error"),
            "{args:?}: {e}"
        );
    }
    // `sinklab real … | head`: a real-model report into a reader that went away.
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("tiny.gguf");
    sinklab::synth::write_gguf(&m, &Default::default(), 1).unwrap();
    for json in [false, true] {
        let mut c = bin();
        c.args([
            "real",
            "--model",
            m.to_str().unwrap(),
            "--tokens",
            "1,2,3,4",
        ]);
        if json {
            c.arg("--json");
        }
        let o = c.stdout(closed_pipe()).output().unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(141), "real: {:?} {e}", o.status);
        assert!(!e.contains("panicked") && !e.contains("error"), "real: {e}");
    }
}

#[test]
fn a_closed_stderr_pipe_does_not_stop_the_output() {
    let o = bin()
        .args(["check", "hard_switch", "--cases", "5"])
        .stderr(closed_pipe())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("hard_switch") && out.contains("passed"),
        "{out}"
    );
    assert_eq!(o.status.code(), Some(141), "{:?}", o.status);
}

#[test]
fn a_full_stdout_is_one_error_line_naming_the_stream() {
    for args in [
        &["check", "hard_switch", "--cases", "5"][..],
        &["check", "hard_switch", "--cases", "5", "--json"],
        &["check", "--list"],
    ] {
        let o = bin()
            .args(args)
            .stdout(dev_full())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {:?} {e}", o.status);
        let errors: Vec<&str> = e.lines().filter(|l| l.contains("error")).collect();
        assert_eq!(
            errors,
            ["error: writing to stdout: No space left on device (os error 28)"],
            "{args:?}: {e}"
        );
    }
}

// ---- issue 25: every size argument budgeted before work -----------------------------------

#[test]
fn secondary_sizes_are_budgeted_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("tiny.gguf");
    sinklab::synth::write_gguf(&m, &Default::default(), 1).unwrap();
    let m = m.to_str().unwrap();
    // An 8 TB bootstrap used to abort on the allocation.
    refused(
        &[
            "secondary",
            "--model",
            m,
            "--prompt",
            "a b c",
            "--boot",
            "1000000000000",
        ],
        &["--boot 1000000000000", "needs about", "--max-mem"],
    );
    // Generation past any context, and past this model's (64 tokens).
    refused(
        &[
            "secondary",
            "--model",
            m,
            "--prompt",
            "a b c",
            "--generate",
            "1000000000",
        ],
        &["--generate 1000000000", "over the limit of 1048576"],
    );
    refused(
        &[
            "secondary",
            "--model",
            m,
            "--prompt",
            "a b c",
            "--generate",
            "9000",
        ],
        &["--generate 9000", "over the limit of 62", "64 tokens"],
    );
    // Flags that the mode would ignore.
    refused(&["secondary", "--long", "--prompt", "hi"], &["--prompt"]);
    refused(&["secondary", "--long", "--generate", "5"], &["--generate"]);
    refused(
        &["secondary", "--long", "--long-generate", "1000000000"],
        &["--long-generate 1000000000", "over the limit of 1048576"],
    );
    refused(
        &["secondary", "--long", "--long-prompts", "100000"],
        &["--long-prompts 100000", "prompts"],
    );
    refused(
        &[
            "secondary",
            "--activations",
            "x.safetensors",
            "--prompt",
            "hi",
        ],
        &["--prompt"],
    );
}

#[test]
fn raised_iteration_budgets_and_spec_totals_are_budgeted() {
    use sinklab::budget::Budget;
    let tmp = tempfile::tempdir().unwrap();
    let block = |t: &str, extra: &str| {
        format!(
            "name = \"b\"\n[[exact]]\npatterns = [\"sink\"]\nnorms = [\"fro\"]\n\
             embeddings = [\"gaussian\"]\nt = [{t}]\nd_factor = 2\nseeds = [0]\ndelta = 5.0\n{extra}"
        )
    };
    // max_iter = 1e15 on one T = 4 program: its worst case, not the default's lower bound.
    let spec = write(
        tmp.path(),
        "iter.toml",
        &block("4", "max_iter = 1000000000000000\ntol = 1e-15\n"),
    );
    let out = tmp.path().join("out");
    let out = out.to_str().unwrap();
    refused(
        &["sweep", &spec, "--threads", "1", "--out", out],
        &[
            "max_iter = 1000000000000000",
            "worst case",
            "would take at least",
        ],
    );
    refused(
        &[
            "cost",
            "--pattern",
            "sink",
            "--norm",
            "fro",
            "--t",
            "4",
            "--max-iter",
            "1000000000000000",
        ],
        &["--max-iter 1000000000000000", "would take at least"],
    );
    // A raised budget that fits passes (the control), as does the default.
    let ok = SweepSpec::load(Path::new(&write(
        tmp.path(),
        "ok.toml",
        &block("4, 6", "max_iter = 40000\n"),
    )))
    .unwrap();
    let budget = Budget {
        max_bytes: 1e9,
        max_seconds: 600.0,
    };
    sinklab::sweep::cost_scaling::check_budget(&ok, "ok", &budget, 1, true, None).unwrap();
    // T = 4…1000: every point is a few seconds at most, all of them together are not.
    let ts: Vec<String> = (4..=1000).map(|t| t.to_string()).collect();
    let spec = write(tmp.path(), "many.toml", &block(&ts.join(", "), ""));
    refused(
        &[
            "sweep",
            &spec,
            "--threads",
            "1",
            "--max-time",
            "10m",
            "--out",
            out,
        ],
        &[
            "all 997 points together",
            "would take at least",
            "--max-time",
        ],
    );
    let many = SweepSpec::load(Path::new(&spec)).unwrap();
    let e = sinklab::sweep::cost_scaling::check_budget(&many, "many", &budget, 1, true, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("all 997 points"), "{e}");
    // One shard of 100 holds a tenth of the work: it passes.
    let shard = "0/100".parse().unwrap();
    sinklab::sweep::cost_scaling::check_budget(&many, "many", &budget, 1, true, Some(shard))
        .unwrap();
}

// ---- issue 25: output files replaced only when complete ----------------------------------

#[test]
fn synth_over_an_existing_file_keeps_it_when_the_write_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("old.gguf");
    std::fs::write(&out, b"the old file").unwrap();
    // A file-size limit of a few KB stops the write part-way (SIGXFSZ), as a full disk does.
    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -f 8; exec \"$0\" synth --shape tiny-llama3 --dtype f32 --out \"$1\"")
        .arg(env!("CARGO_BIN_EXE_sinklab"))
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), b"the old file");
    // Without the limit the new file replaces it, and no temporary file is left.
    let o = sinklab([
        "synth",
        "--shape",
        "tiny-llama3",
        "--dtype",
        "f32",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(&std::fs::read(&out).unwrap()[..4], b"GGUF");
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["old.gguf"], "{names:?}");
}

#[test]
fn a_failing_redraw_leaves_the_old_figures_whole_and_no_temporary() {
    use sinklab::plot::{Panel, Series, Style};
    let tmp = tempfile::tempdir().unwrap();
    let stem = tmp.path().join("fig");
    let panel = Panel {
        title: "cost".into(),
        x_label: "T".into(),
        y_label: "cost".into(),
        log_x: true,
        log_y: true,
        series: vec![Series::new(
            "sink",
            (1..40).map(|i| (i as f64, (i * i) as f64)).collect(),
            Style::LinePoints,
            0,
        )],
        ..Default::default()
    };
    sinklab::plot::render(&stem, "Cost against T", &[panel]).unwrap();
    let (svg, png) = (stem.with_extension("svg"), stem.with_extension("png"));
    let old = (std::fs::read(&svg).unwrap(), std::fs::read(&png).unwrap());
    assert!(old.0.len() > 512, "the limit below must stop the SVG");
    let listing = || {
        let mut v: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    // A 512-byte file-size limit with SIGXFSZ ignored: the SVG write fails part-way with EFBIG,
    // as a full disk fails it, and the redraw (in another width) stops with an error.
    let o = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 1; exec \"$0\" plot --width 7 \"$1\"")
        .arg(env!("CARGO_BIN_EXE_sinklab"))
        .arg(stem.with_extension("json"))
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(e.contains(&svg.display().to_string()), "{e}");
    assert_eq!(std::fs::read(&svg).unwrap(), old.0);
    assert_eq!(std::fs::read(&png).unwrap(), old.1);
    assert_eq!(listing(), ["fig.json", "fig.png", "fig.svg"]);
    // The control: without the limit the same redraw replaces the SVG.
    let o = sinklab([
        "plot",
        "--width",
        "7",
        stem.with_extension("json").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_ne!(std::fs::read(&svg).unwrap(), old.0);
    assert_eq!(listing(), ["fig.json", "fig.png", "fig.svg"]);
}

// ---- issue 25: zero sizes, vacuous verdicts and ignored flags -----------------------------

#[test]
fn zero_sizes_and_ignored_flags_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let junk = write(tmp.path(), "r.jsonl", "");
    let out = tmp.path().join("m");
    refused(
        &[
            "merge",
            "--out",
            out.to_str().unwrap(),
            "--bootstrap",
            "0",
            &junk,
        ],
        &["--bootstrap 0", "at least 1 resample"],
    );
    refused(
        &["train", "--k", "0", "--steps", "5"],
        &["--k 0", "trigger"],
    );
    // (`--activations F --a1` runs A1 on the file's queries and keys: tests/real_dump.rs.)
    for flag in [
        &["--a2"][..],
        &["--text", "hi"],
        &["--bos", "yes"],
        &["--tokens", "1,2"],
    ] {
        let mut args = vec!["real", "--activations", "x.safetensors"];
        args.extend(flag);
        refused(&args, &[flag[0], "cannot be used with"]);
    }
}

#[test]
fn a_one_token_input_does_not_claim_the_a1_corollary() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("tiny.gguf");
    sinklab::synth::write_gguf(&m, &Default::default(), 1).unwrap();
    let run = |toks: &str| {
        let o = sinklab([
            "real",
            "--model",
            m.to_str().unwrap(),
            "--bos",
            "no",
            "--tokens",
            toks,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let one = run("5");
    assert!(!one.contains("holds on"), "{one}");
    assert!(one.contains("untestable on 1 token"), "{one}");
    // Two tokens: the corollary is tested again (the control).
    let two = run("5,7");
    assert!(
        two.contains("A1 corollary (cos(a_0, a_i) < 0 for all i >= 1, on each layer's normalised")
            && two.contains("holds on"),
        "{two}"
    );
}

#[test]
fn a_model_file_is_never_an_output_and_a5_layers_are_given_once() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("tiny.gguf");
    sinklab::synth::write_gguf(&m, &Default::default(), 1).unwrap();
    let before = std::fs::read(&m).unwrap();
    let ms = m.to_str().unwrap();
    let inputs = tmp.path().join("in.jsonl");
    std::fs::write(&inputs, "[5, 7]\n").unwrap();
    let o = sinklab([
        "real",
        "--model",
        ms,
        "--file",
        inputs.to_str().unwrap(),
        "--results",
        ms,
    ]);
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("--model") && e.contains("tiny.gguf"),
        "{e}"
    );
    let o = sinklab(["view", "--model", ms, "--tokens", "5,7", "--out", ms]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("--model"), "{e}");
    assert_eq!(
        std::fs::read(&m).unwrap(),
        before,
        "the model file was replaced"
    );
    let o = sinklab(["real", "--model", ms, "--a5", "--a5-layers", "0,0"]);
    let e = stderr(&o);
    assert!(!o.status.success() && !e.contains("panicked"), "{e}");
    assert!(e.contains("layer 0 is given twice"), "{e}");
    // A BOS id outside the vocabulary (GGUF key, u32 type tag, value) is refused at load.
    let mut b = before.clone();
    let key = b"tokenizer.ggml.bos_token_id";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    assert_eq!(&b[at..at + 4], &4u32.to_le_bytes(), "a u32 value");
    b[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let bad = tmp.path().join("oov.gguf");
    std::fs::write(&bad, b).unwrap();
    let o = sinklab([
        "real",
        "--model",
        bad.to_str().unwrap(),
        "--tokens",
        "5,7",
        "--bos",
        "yes",
    ]);
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("outside the vocabulary"),
        "{e}"
    );
}

// ---- issue 25: sweep specs ---------------------------------------------------------------

#[test]
fn specs_with_no_points_pooled_gaps_overflowing_widths_or_extreme_deltas_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let block = "[[exact]]\npatterns = [\"sink\"]\nnorms = [\"fro\"]\n\
                 embeddings = [\"gaussian\"]\nt = [4, 6]\nseeds = [0]\n";
    let out = tmp.path().join("o");
    let check = |name: &str, text: String, needles: &[&str]| {
        let path = write(tmp.path(), name, &text);
        let e = SweepSpec::load(Path::new(&path)).unwrap_err().to_string();
        for n in needles.iter().chain([&path.as_str()]) {
            assert!(e.contains(n), "`{e}` does not name `{n}`");
        }
        refused(&["sweep", &path, "--out", out.to_str().unwrap()], needles);
    };
    // No block at all, and a block whose every point max_t_nuclear drops (was exit 0, []).
    check("empty.toml", "name = \"e\"\n".into(), &["no points"]);
    check(
        "dropped.toml",
        format!("name = \"e\"\n{block}").replace("[\"fro\"]", "[\"nuclear\"]\nmax_t_nuclear = 3"),
        &["no points"],
    );
    // Two blocks differing only in Δ (were pooled into one fit).
    check(
        "pooled.toml",
        format!("name = \"e\"\n{block}delta = 5.0\n{block}delta = 10.0\n"),
        &["exact[0]", "exact[1]", "delta = 5", "delta = 10", "one fit"],
    );
    // d_factor·T overflows (wrapped).
    check(
        "overflow.toml",
        format!("name = \"e\"\n{block}d_factor = {}\n", u64::MAX / 5),
        &["exact[0].d_factor", "overflows"],
    );
    // Δ = 1e-300 (cost 0) and Δ = 1e308 (NaN).
    for x in ["1e-300", "1e308"] {
        check(
            "delta.toml",
            format!("name = \"e\"\n{block}delta = {x}\n"),
            &["exact[0].delta", "must lie in"],
        );
    }
    // A gap ε that implies a negative Δ at some T (ε = 0.9 at T = 4: ln(3·0.1/0.9) < 0).
    check(
        "eps.toml",
        format!("name = \"e\"\n{block}eps = 0.9\n"),
        &["exact[0].eps", "at T = 4", "outside"],
    );
    SweepSpec::from_toml(&format!("name = \"e\"\n{block}eps = 0.01\n")).unwrap();
    // The controls: one Δ in two blocks, or two Δ on different embeddings, are specs.
    for text in [
        format!(
            "name = \"e\"\n{block}delta = 5.0\n{}delta = 5.0\n",
            block.replace("[0]", "[1]")
        ),
        format!(
            "name = \"e\"\n{block}delta = 5.0\n{}delta = 10.0\n",
            block.replace("gaussian", "orthonormal")
        ),
    ] {
        SweepSpec::from_toml(&text).unwrap();
    }
}

// ---- issue 25: job scripts ---------------------------------------------------------------

#[test]
fn slurm_task_index_expands_under_an_out_with_a_space_and_names_are_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write(tmp.path(), "s.toml", SPEC);
    let out = tmp.path().join("with space");
    let o = sinklab([
        "sweep",
        &spec,
        "--out",
        out.to_str().unwrap(),
        "--emit",
        "slurm",
        "--shards",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = Command::new("bash")
        .arg(out.join("jobs/sweep.sbatch"))
        .env("SLURM_ARRAY_TASK_ID", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // Task 1 wrote shard1 (it wrote a literal `shard${SLURM_ARRAY_TASK_ID}`).
    assert!(out.join("shard1/results.jsonl").exists());
    assert!(!out.join("shard${SLURM_ARRAY_TASK_ID}").exists());
    // A name with a newline (or another control character) would break `#SBATCH --job-name`.
    for name in ["a\\nb", "a\\rb", "a\\u0007b"] {
        let text = SPEC.replace("name = \"tiny\"", &format!("name = \"{name}\""));
        let path = write(tmp.path(), "n.toml", &text);
        let e = SweepSpec::load(Path::new(&path)).unwrap_err().to_string();
        assert!(
            e.contains("`name`") && e.contains("control character"),
            "{e}"
        );
        refused(
            &["sweep", &path, "--emit", "slurm", "--shards", "2"],
            &["`name`"],
        );
    }
}

/// An I/O error is printed once, with the file it concerns: the OS error used to appear twice
/// (`… (os error 2): … (os error 2)`), and the report's write errors named no file.
#[test]
fn io_errors_name_the_file_and_say_the_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let o = sinklab([
        "sweep",
        missing.to_str().unwrap(),
        "--out",
        dir.path().join("s").to_str().unwrap(),
    ]);
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert!(e.contains(missing.to_str().unwrap()), "{e}");
    assert_eq!(e.matches("(os error 2)").count(), 1, "{e}");
    // The report's output directory under a plain file: the error names the directory.
    let file = dir.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let out = file.join("rep");
    let o = sinklab(["report", "--quick", "--out", out.to_str().unwrap()]);
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains(&out.join("figures").display().to_string()),
        "{e}"
    );
    assert_eq!(e.matches("(os error").count(), 1, "{e}");
}

#[test]
fn load_errors_name_the_path_once() {
    let dir = tempfile::tempdir().unwrap();
    // (the path given, the file the error must name, the cause it must say)
    let mut cases: Vec<(std::path::PathBuf, std::path::PathBuf, &str)> = Vec::new();
    // A GGUF cut inside its header and inside its data.
    let full = dir.path().join("full.gguf");
    sinklab::synth::write_gguf(&full, &Default::default(), 1).unwrap();
    let bytes = std::fs::read(&full).unwrap();
    for (i, n) in [20, 100, bytes.len() - 100].into_iter().enumerate() {
        let p = dir.path().join(format!("cut{i}.gguf"));
        std::fs::write(&p, &bytes[..n]).unwrap();
        cases.push((p.clone(), p, "truncated"));
    }
    // A safetensors file whose header length runs past the file, given as the file and as the
    // directory holding it.
    let hf = dir.path().join("hf");
    std::fs::create_dir(&hf).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny/llama_default");
    std::fs::copy(fixture.join("config.json"), hf.join("config.json")).unwrap();
    let st = hf.join("model.safetensors");
    std::fs::write(&st, b"\x10\0\0\0\0\0\0\0{\"a\":1}").unwrap();
    cases.push((st.clone(), st.clone(), "safetensors"));
    cases.push((hf.clone(), st, "safetensors"));
    // A config without `hidden_size`, beside good weights.
    let cfg_dir = dir.path().join("nocfg");
    std::fs::create_dir(&cfg_dir).unwrap();
    std::fs::copy(
        fixture.join("model.safetensors"),
        cfg_dir.join("model.safetensors"),
    )
    .unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture.join("config.json")).unwrap()).unwrap();
    cfg.as_object_mut().unwrap().remove("hidden_size");
    std::fs::write(cfg_dir.join("config.json"), cfg.to_string()).unwrap();
    cases.push((cfg_dir.clone(), cfg_dir.join("config.json"), "hidden_size"));
    for (given, named, cause) in &cases {
        let o = sinklab(["real", "--model", given.to_str().unwrap(), "--text", "hi"]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{e}");
        assert!(!e.contains("panicked"), "{e}");
        assert!(e.contains(cause), "{given:?}: `{e}` does not say `{cause}`");
        let (g, n) = (given.display().to_string(), named.display().to_string());
        assert_eq!(e.matches(&n).count(), 1, "{e}");
        // The path given is a prefix of the file named (a file in the directory), never repeated.
        assert_eq!(e.matches(&g).count(), 1, "{e}");
    }
    // An activations file that is missing: path once, OS error once.
    let missing = dir.path().join("none.safetensors");
    let o = sinklab(["secondary", "--activations", missing.to_str().unwrap()]);
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert_eq!(e.matches(missing.to_str().unwrap()).count(), 1, "{e}");
    assert_eq!(e.matches("(os error 2)").count(), 1, "{e}");
}

#[test]
fn records_of_two_settings_are_two_fits_and_a_spec_mixing_them_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let block = "[[exact]]\npatterns = [\"sink\"]\nnorms = [\"fro\"]\n\
                 embeddings = [\"gaussian\"]\nt = [4, 6, 8]\nseeds = [0]\n";
    // One spec per width rule (and one per gap), each a valid sweep of its own.
    let mut all = Vec::new();
    let mut own = Vec::new();
    for (i, extra) in [
        "d_factor = 2\ndelta = 5.0\n",
        "d_factor = 4\ndelta = 5.0\n",
        "d_factor = 2\ndelta = 8.0\n",
    ]
    .iter()
    .enumerate()
    {
        let spec = write(
            tmp.path(),
            &format!("s{i}.toml"),
            &format!("name = \"s\"\nbootstrap = 50\n{block}{extra}"),
        );
        let out = tmp.path().join(format!("o{i}"));
        let o = sinklab(["sweep", &spec, "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let recs = read_results(&out.join("results.jsonl")).unwrap();
        assert_eq!(recs.len(), 3);
        own.push(fit_all(&recs, 50, 0));
        all.extend(recs);
    }
    // Pooled (a results file holding all three, as an edited spec or a hand merge leaves):
    // one fit per setting, each the fit of its own records alone.
    let fits = fit_all(&all, 50, 0);
    assert_eq!(fits.len(), 3, "{fits:?}");
    let mut settings: Vec<&str> = fits.iter().map(|f| f.setting.as_str()).collect();
    settings.sort();
    assert_eq!(
        settings,
        [
            "d_factor = 2, delta = 5",
            "d_factor = 2, delta = 8",
            "d_factor = 4, delta = 5"
        ]
    );
    for o in &own {
        assert_eq!(o.len(), 1);
        let f = fits.iter().find(|f| f.setting == o[0].setting).unwrap();
        assert_eq!(f.fit.exponent.to_bits(), o[0].fit.exponent.to_bits());
        assert_eq!((f.t_min, f.t_max), (4, 8));
    }
    // One spec with two blocks that differ only in d_factor is refused, naming both settings.
    let spec = write(
        tmp.path(),
        "mixed.toml",
        &format!("name = \"s\"\n{block}d_factor = 2\n{block}d_factor = 4\n"),
    );
    refused(
        &[
            "sweep",
            &spec,
            "--out",
            tmp.path().join("m").to_str().unwrap(),
        ],
        &[
            "exact[0]",
            "exact[1]",
            "d_factor = 2",
            "d_factor = 4",
            "one setting per fit",
        ],
    );
    // A fixed width beside a width factor of the same value at some T is still two settings.
    let spec = write(
        tmp.path(),
        "mixed_d.toml",
        &format!("name = \"s\"\n{block}d_factor = 2\n{block}d = 8\n"),
    );
    refused(
        &[
            "sweep",
            &spec,
            "--out",
            tmp.path().join("m").to_str().unwrap(),
        ],
        &["d_factor = 2", "d = 8", "one setting per fit"],
    );
}

/// Hidden states of L = 5 layers, T = 5 positions, d = 3: the BOS along e0 with norms
/// (1, 1, 10, 10, 1), so the detector's window is [2, 4); position 2 aligns with the BOS at
/// layer 0 only (outside the window) and, when `inside`, position 3 at layers 0 and 2.
fn window_case(dir: &Path, inside: bool) -> std::path::PathBuf {
    use sinklab::runtime::activation_file::Activations;
    use sinklab::runtime::hidden::HiddenStates;
    let (l, t, d) = (5, 5, 3);
    let mut v = vec![0f32; l * t * d];
    for (li, bn) in [1.0f32, 1.0, 10.0, 10.0, 1.0].into_iter().enumerate() {
        let at = |tt: usize, k: usize| (li * t + tt) * d + k;
        v[at(0, 0)] = bn;
        for tt in 1..t {
            v[at(tt, 1)] = 1.0;
        }
        if li == 0 {
            v[at(2, 1)] = 0.0;
            v[at(2, 0)] = 1.0;
        }
        if inside && (li == 0 || li == 2) {
            v[at(3, 1)] = 0.0;
            v[at(3, 0)] = 1.0;
        }
    }
    let act = Activations {
        hidden: HiddenStates::new(l, t, d, v).unwrap(),
        attn: None,
        mlp_out: None,
        keys: None,
        values: None,
        tokens: Some((0..t as i64).collect()),
        metadata: Default::default(),
    };
    let f = dir.join(format!("window_{inside}.safetensors"));
    act.write(&f).unwrap();
    f
}

#[test]
fn the_detector_says_what_its_window_excluded_and_an_empty_table_says_so() {
    let dir = tempfile::tempdir().unwrap();
    for (inside, json) in [(true, false), (false, false), (false, true)] {
        let f = window_case(dir.path(), inside);
        let mut args = vec![
            "secondary".to_string(),
            "--activations".into(),
            f.display().to_string(),
            "--bos-candidates".into(),
            "0".into(),
        ];
        if json {
            args.push("--json".into());
        }
        let o = sinklab(&args);
        let (out, err) = (cli::stdout(&o), stderr(&o));
        assert!(o.status.success(), "{err}");
        assert!(
            err.contains("window excluded 1 position"),
            "inside={inside}: {err}"
        );
        if !inside && !json {
            assert_eq!(out.trim(), "no position flagged", "{out}");
        }
        if json {
            // JSON on stdout only: nothing flagged, so no record line and no table header.
            assert!(
                out.lines()
                    .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
            );
        }
        if inside {
            assert!(
                out.contains("seq") && !out.contains("no position flagged"),
                "{out}"
            );
        }
    }
}
