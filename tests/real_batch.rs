//! `sinklab real --file inputs.jsonl`: many inputs through one loaded model, one JSON line
//! each, the same reports as one run per input, resumable, malformed input refused up front.

use sinklab::real::synth::{SynthSpec, write_gguf};
use std::path::Path;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sinklab"))
}

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
    write_gguf(&model, &SynthSpec::default(), 7).unwrap();
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
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
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
    assert!(String::from_utf8_lossy(&o.stderr).contains("3 already"));
    assert_eq!(lines(&results).len(), 3);
    let full = std::fs::read_to_string(&results).unwrap();
    let keep: String = full.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(&results, format!("{keep}{{\"line\": 4, \"ke")).unwrap();
    let o = run();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("2 already"));
    assert_eq!(std::fs::read_to_string(&results).unwrap(), full);
}

#[test]
fn malformed_lines_are_refused_with_file_and_line_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    write_gguf(&model, &SynthSpec::default(), 7).unwrap();
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
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{bad:?}");
        assert!(err.contains(what), "{bad:?}: {err}");
        assert!(!dir.path().join("bad.results.jsonl").exists());
    }
}
