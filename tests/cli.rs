//! The command line as a user meets it: JSON output, exit codes, the report.

use std::process::Command;

fn sinklab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sinklab"))
}

#[test]
fn check_json_has_the_documented_keys() {
    let out = sinklab()
        .args([
            "check",
            "hard_switch",
            "--cases",
            "5",
            "--seed",
            "3",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 1);
    let o = &arr[0];
    for key in ["theorem", "cases", "passed", "failed", "worst_margin"] {
        assert!(o.get(key).is_some(), "missing {key} in {o}");
    }
    assert_eq!(o["theorem"], "hard_switch");
    assert_eq!(o["failed"], 0);
    assert!(o["cases"].as_u64().unwrap() >= 5);
}

#[test]
fn same_seed_same_output() {
    let run = || {
        sinklab()
            .args([
                "check",
                "soft_switch_diagonal",
                "--cases",
                "20",
                "--seed",
                "9",
                "--json",
            ])
            .output()
            .unwrap()
            .stdout
    };
    assert_eq!(run(), run());
}

#[test]
fn bad_arguments_exit_with_code_2() {
    for args in [
        vec!["check", "--cases", "zero"],
        vec!["check", "no_such_theorem"],
        vec!["check", "--cases", "0"],
        vec!["frobnicate"],
    ] {
        let out = sinklab().args(&args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stderr.is_empty(), "{args:?} printed no message");
    }
}

#[test]
fn report_quick_writes_markdown_with_the_claims_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = sinklab()
        .args(["report", "--quick", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(md.contains(
        "| claim | theorem | statement | cases tried | result | worst margin | figure |"
    ));
    assert!(md.contains("`hard_switch`"));
    // Every claims-table row has exactly 7 cells: an unescaped `|` in a statement or
    // a margin unit would split a cell and shift the columns.
    let claims = md
        .split("## Claims")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap();
    for line in claims
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains("| `"))
    {
        let bars = line.len() - line.replace('|', "").len() - line.matches("\\|").count();
        assert_eq!(bars, 8, "malformed claims row: {line}");
    }
    assert!(!md.contains("FAILS"), "{md}");
}
