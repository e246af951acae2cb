//! `sinklab real --file inputs.jsonl`: many inputs through one loaded model, one JSON line
//! each, the same reports as one run per input, resumable, malformed input refused up front.

#[path = "support/cli.rs"]
mod cli;
use cli::bin;
use sinklab::synth::{SynthShape, write_gguf};
use std::path::Path;

fn lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_jsonl_file_gives_the_single_run_reports_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    write_gguf(&model, &SynthShape::default(), 7).unwrap();
    let m = model.to_str().unwrap();
    let inputs = dir.path().join("inputs.jsonl");
    std::fs::write(
        &inputs,
        "[1, 5, 9, 3, 17]\n{\"tokens\": [2, 11, 7, 4], \"id\": \"b\"}\n\n{\"tokens\": [1, 2, 3]}\n",
    )
    .unwrap();
    let run = || {
        bin()
            .args(["real", "--model", m, "--bos", "no", "--file"])
            .arg(&inputs)
            .output()
            .unwrap()
    };
    let o = run();
    assert!(o.status.success(), "{}", cli::stderr(&o));
    let results = dir.path().join("inputs.results.jsonl");
    let got = lines(&results);
    assert_eq!(got.len(), 3);
    let ids: Vec<String> = got.iter().map(|v| v["id"].to_string()).collect();
    assert_eq!(ids, ["1", "\"b\"", "4"]);
    // Each report is the one a single run on the same ids prints.
    for (v, toks) in got.iter().zip(["1,5,9,3,17", "2,11,7,4", "1,2,3"]) {
        let o = bin()
            .args([
                "real", "--model", m, "--bos", "no", "--json", "--tokens", toks,
            ])
            .output()
            .unwrap();
        assert!(o.status.success());
        let single: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["report"], single, "input {toks}");
    }
    // A rerun computes nothing; a partial tail (a killed run) is cut and the input recomputed.
    let o = run();
    assert!(cli::stderr(&o).contains("3 already"));
    assert_eq!(lines(&results).len(), 3);
    let full = std::fs::read_to_string(&results).unwrap();
    let keep: String = full.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(&results, format!("{keep}{{\"line\": 4, \"ke")).unwrap();
    let o = run();
    assert!(o.status.success());
    assert!(cli::stderr(&o).contains("2 already"));
    assert_eq!(std::fs::read_to_string(&results).unwrap(), full);
}

#[test]
fn malformed_lines_are_refused_with_file_and_line_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    write_gguf(&model, &SynthShape::default(), 7).unwrap();
    for (bad, what) in [
        ("[1, 2]\n[1, -2]\n", ":2: token id -2"),
        ("[1, 2]\n{\"txt\": \"a\"}\n", ":2: unknown key \"txt\""),
        ("nope\n", ":1: not a JSON value"),
        (
            "{\"text\": \"a\", \"tokens\": [1]}\n",
            ":1: need exactly one",
        ),
        ("\n\n", "no inputs"),
    ] {
        let inputs = dir.path().join("bad.jsonl");
        std::fs::write(&inputs, bad).unwrap();
        let o = bin()
            .args(["real", "--model", model.to_str().unwrap(), "--file"])
            .arg(&inputs)
            .output()
            .unwrap();
        let err = cli::stderr(&o);
        assert!(!o.status.success(), "{bad:?}");
        assert!(err.contains(what), "{bad:?}: {err}");
        assert!(!dir.path().join("bad.results.jsonl").exists());
    }
}

// ---- issue 25: the results file is ours, not the input, locked, and damage stays local ------

fn run_file(m: &Path, inputs: &Path, results: Option<&Path>) -> std::process::Output {
    let mut c = bin();
    c.args([
        "real",
        "--model",
        m.to_str().unwrap(),
        "--bos",
        "no",
        "--file",
    ])
    .arg(inputs);
    if let Some(r) = results {
        c.arg("--results").arg(r);
    }
    c.output().unwrap()
}

fn refused(o: &std::process::Output, needles: &[&str]) {
    let e = cli::stderr(o);
    assert!(!o.status.success(), "accepted: {e}");
    assert!(!e.contains("panicked"), "{e}");
    for n in needles {
        assert!(e.contains(n), "`{e}` does not say `{n}`");
    }
}

#[test]
fn a_results_file_that_is_the_input_or_not_ours_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    write_gguf(&model, &SynthShape::default(), 7).unwrap();
    let inputs = dir.path().join("in.jsonl");
    let text = "[1, 5, 9]\n[2, 11, 7, 4]\n";
    std::fs::write(&inputs, text).unwrap();
    // The input itself, by path and through a hard link.
    refused(
        &run_file(&model, &inputs, Some(&inputs)),
        &["--results", "is the input file"],
    );
    let link = dir.path().join("link.jsonl");
    std::fs::hard_link(&inputs, &link).unwrap();
    refused(
        &run_file(&model, &inputs, Some(&link)),
        &["is the input file"],
    );
    assert_eq!(std::fs::read_to_string(&inputs).unwrap(), text);
    // Another program's JSONL (a sweep's results) and a text file.
    let sweep = dir.path().join("results.jsonl");
    let foreign = "{\"id\":\"exact/sink/fro/t4\",\"value\":1.5}\n{\"id\":\"exact/sink/fro/t6\",\"value\":2.5}\n";
    std::fs::write(&sweep, foreign).unwrap();
    refused(
        &run_file(&model, &inputs, Some(&sweep)),
        &[
            "results.jsonl",
            "line 1",
            "not a `sinklab real --file` results file",
        ],
    );
    assert_eq!(std::fs::read_to_string(&sweep).unwrap(), foreign);
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "hello\nworld\n").unwrap();
    refused(
        &run_file(&model, &inputs, Some(&notes)),
        &["notes.txt", "no line is a result record"],
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "hello\nworld\n");
}

#[test]
fn one_damaged_results_line_is_recomputed_alone() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    write_gguf(&model, &SynthShape::default(), 7).unwrap();
    let inputs = dir.path().join("in.jsonl");
    std::fs::write(&inputs, "[1, 5, 9]\n[2, 11, 7, 4]\n[3, 3, 8]\n[6, 1]\n").unwrap();
    let results = dir.path().join("in.results.jsonl");
    assert!(run_file(&model, &inputs, None).status.success());
    let full = std::fs::read_to_string(&results).unwrap();
    let orig: Vec<&str> = full.lines().collect();
    assert_eq!(orig.len(), 4);
    // Line 2 damaged (a bad sector): lines 1, 3 and 4 are kept, input 2 alone is recomputed.
    let damaged = format!("{}\n#\u{0}garbage\n{}\n{}\n", orig[0], orig[2], orig[3]);
    std::fs::write(&results, damaged).unwrap();
    let o = run_file(&model, &inputs, None);
    assert!(o.status.success(), "{}", cli::stderr(&o));
    assert!(cli::stderr(&o).contains("3 already"), "{}", cli::stderr(&o));
    let now = std::fs::read_to_string(&results).unwrap();
    let mut a: Vec<&str> = now.lines().collect();
    let mut b = orig.clone();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
    assert_eq!(
        now.lines().take(3).collect::<Vec<_>>(),
        [orig[0], orig[2], orig[3]]
    );
}

#[test]
fn a_second_writer_of_one_results_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    write_gguf(&model, &SynthShape::default(), 7).unwrap();
    let inputs = dir.path().join("in.jsonl");
    std::fs::write(&inputs, "[1, 5, 9]\n").unwrap();
    let results = dir.path().join("in.results.jsonl");
    // Another `real --file` run holds the results file (the sweep's lock).
    let held = sinklab::sweep::lock::acquire_for_file(&results, "run", "wait").unwrap();
    refused(
        &run_file(&model, &inputs, None),
        &["in.results.jsonl", "is being written by another", "pid"],
    );
    assert!(!results.exists());
    drop(held);
    assert!(run_file(&model, &inputs, None).status.success());
    assert_eq!(lines(&results).len(), 1);
}

#[test]
fn another_model_at_the_same_path_recomputes_every_input() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    let inputs = dir.path().join("inputs.jsonl");
    std::fs::write(&inputs, "[1, 5, 9, 3]\n[2, 11, 7]\n").unwrap();
    let results = dir.path().join("inputs.results.jsonl");
    write_gguf(&model, &SynthShape::default(), 7).unwrap();
    let o = run_file(&model, &inputs, None);
    assert!(o.status.success(), "{}", cli::stderr(&o));
    let first = lines(&results);
    // The control: the same model again reuses both lines.
    let o = run_file(&model, &inputs, None);
    assert!(cli::stderr(&o).contains("2 already"));
    // Other weights (seed 8) at the same path: the old lines were stale before (keyed by path).
    write_gguf(&model, &SynthShape::default(), 8).unwrap();
    let o = run_file(&model, &inputs, None);
    let err = cli::stderr(&o);
    assert!(o.status.success() && err.contains("0 already"), "{err}");
    let all = lines(&results);
    assert_eq!(all.len(), 4, "two new lines beside the two old ones");
    assert_ne!(all[2]["key"], first[0]["key"]);
    assert_ne!(
        all[2]["report"], first[0]["report"],
        "the new model's own report"
    );
}
