//! The command line as a user meets it: JSON output, exit codes, the report.

#[path = "support/cli.rs"]
mod cli;
use cli::bin as sinklab;

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
    assert!(out.status.success(), "{}", cli::stderr(&out));
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
            cli::stderr(&out)
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
    assert!(out.status.success(), "{}", cli::stderr(&out));
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
    // report.html: the same report as one page, every figure inline, nothing from the network.
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("<h2>Claims</h2>") && html.contains("<table>"));
    assert!(html.contains("<code>hard_switch</code>"));
    let imgs: Vec<&str> = html.split("<img src=\"").skip(1).collect();
    let figures = md.matches("![").count();
    assert!(figures > 0);
    assert_eq!(imgs.len(), figures, "one image per figure of report.md");
    for i in &imgs {
        assert!(
            i.starts_with("data:image/svg+xml;base64,"),
            "{}",
            &i[..60.min(i.len())]
        );
    }
    for remote in ["src=\"http", "href=\"http", "<script src", "<link "] {
        assert!(!html.contains(remote), "report.html loads `{remote}`");
    }
    // With SmolLM2 cached, the quick report links its viewer page, a page `sinklab view` wrote.
    if sinklab::runtime::fetch::cached("smollm2").is_some() {
        assert!(
            html.contains("<a href=\"view/smollm2.html\">smollm2</a>"),
            "no viewer link"
        );
        let page = std::fs::read_to_string(dir.path().join("view/smollm2.html")).unwrap();
        let blob = sinklab::view::extract(&page).expect("the page's data blob");
        assert_eq!(blob["n_layer"], 30);
    }
}

fn cost_json(args: &[&str]) -> serde_json::Value {
    let out = sinklab()
        .arg("cost")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", cli::stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `sinklab cost` for W_QK alone: the documented keys, and the Frobenius closed form inside
/// the certified bracket.
#[test]
fn cost_json_qk_has_value_feasible_and_gap() {
    let v = cost_json(&[
        "--pattern",
        "diagonal",
        "--norm",
        "fro",
        "--t",
        "10",
        "--delta",
        "4",
    ]);
    assert_eq!(v["feasible"], true);
    let (val, lo, gap) = (
        v["value"].as_f64().unwrap(),
        v["lower"].as_f64().unwrap(),
        v["rel_gap"].as_f64().unwrap(),
    );
    let cf = v["closed_form"].as_f64().unwrap();
    assert!(
        lo <= cf * (1.0 + 1e-9) && cf <= val * (1.0 + 1e-9),
        "[{lo}, {val}] vs {cf}"
    );
    assert!((0.0..=1e-3).contains(&gap.max(0.0)), "gap {gap}");
}

/// `--scope head`: the head's value is the sum of its W_QK and W_VO parts, and on orthonormal
/// embeddings each part's certified bracket holds its closed form.
#[test]
fn cost_json_whole_head_sums_its_parts() {
    let v = cost_json(&[
        "--pattern",
        "sink",
        "--norm",
        "fro",
        "--t",
        "12",
        "--delta",
        "5",
        "--scope",
        "head",
        "--on-rate",
        "0.5",
        "--seed",
        "2",
    ]);
    assert_eq!(v["feasible"], true);
    let part = |p: &str, k: &str| v[p][k].as_f64().unwrap();
    let total = v["value"].as_f64().unwrap();
    assert!((total - part("qk", "value") - part("vo", "value")).abs() <= 1e-12 * total);
    for p in ["qk", "vo"] {
        let cf = v["closed_form"][p].as_f64().unwrap();
        assert!(
            part(p, "lower") <= cf * (1.0 + 1e-9) && cf <= part(p, "value") * (1.0 + 1e-9),
            "{p}: [{}, {}] vs {cf}",
            part(p, "lower"),
            part(p, "value")
        );
    }
    let on = v["sources_map"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !s.is_null())
        .count();
    assert_eq!(on as u64, v["on_queries"].as_u64().unwrap());
    assert!(on >= 1);
}

/// `--embedding trained` trains the recipe's model and solves on its attention inputs: the
/// answer is either a certified bracket or a verified infeasibility certificate, and it is
/// reproducible.
#[test]
fn cost_on_trained_embeddings_is_certified_and_reproducible() {
    let args = [
        "--pattern",
        "sink",
        "--norm",
        "fro",
        "--t",
        "8",
        "--d",
        "8",
        "--delta",
        "3",
        "--embedding",
        "trained",
    ];
    let v = cost_json(&args);
    if v["feasible"] == true {
        assert!(v["value"].as_f64().unwrap() > 0.0);
        assert!(v["rel_gap"].as_f64().unwrap() <= 1e-3);
    } else {
        assert_eq!(v["certificate"]["verified"], true, "{v}");
    }
    assert_eq!(v, cost_json(&args));
}

/// `sinklab ARGS` printed help, as a terminal of `COLUMNS` columns would get it.
fn help_text(args: &[&str], columns: &str) -> String {
    let out = sinklab()
        .args(args)
        .env("COLUMNS", columns)
        .output()
        .unwrap();
    cli::ok(&out)
}

/// The subcommands `sinklab --help` lists (clap's own `help` command aside).
fn subcommands() -> Vec<String> {
    let top = help_text(&["--help"], "100");
    let list: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect();
    assert!(
        list.len() >= 13 && list.iter().any(|c| c == "real"),
        "{list:?}"
    );
    list
}

#[test]
fn help_fits_a_terminal_and_prints_no_markup() {
    let mut commands: Vec<Vec<String>> = vec![vec![]];
    commands.extend(subcommands().into_iter().map(|c| vec![c]));
    for cmd in &commands {
        for flag in ["-h", "--help"] {
            let mut args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            args.push(flag);
            // A wide terminal still gets at most 100 columns.
            let text = help_text(&args, "300");
            let what = args.join(" ");
            for line in text.lines() {
                assert!(
                    line.chars().count() <= 100,
                    "sinklab {what}: a line of {} columns: {line:?}",
                    line.chars().count()
                );
            }
            // No LaTeX, no rustdoc links, no specification outside the repository.
            for bad in ["$", "\\frac", "](", "[`", "THEORY", "shared specification"] {
                assert!(
                    !text.contains(bad),
                    "sinklab {what} prints {bad:?}:\n{text}"
                );
            }
            if flag == "-h" {
                // One line per command, argument and option: no continuation lines (those
                // are indented to the help column; an entry is indented by 2, or by 6 for
                // an option without a short form).
                let body = text.lines().skip_while(|l| {
                    !["Commands:", "Arguments:", "Options:"]
                        .iter()
                        .any(|h| l.starts_with(h))
                });
                for line in body.filter(|l| l.starts_with(' ')) {
                    let t = line.trim_start();
                    let indent = line.len() - t.len();
                    assert!(
                        indent == 2 || (indent == 6 && t.starts_with("--")),
                        "sinklab {what}: an entry's help runs onto a second line: {line:?}"
                    );
                }
            } else if !cmd.is_empty() {
                assert!(
                    text.contains("EXAMPLES:\n") && text.contains("\n    sinklab "),
                    "sinklab {what} has no examples:\n{text}"
                );
                let short = help_text(&[cmd[0].as_str(), "-h"], "300");
                assert!(
                    text.len() > short.len(),
                    "sinklab {what} adds nothing to -h"
                );
            }
        }
    }
    let real = help_text(&["real", "-h"], "300");
    assert!(
        real.len() <= 4000,
        "sinklab real -h is {} bytes",
        real.len()
    );
}

#[test]
fn help_wraps_to_a_narrow_terminal() {
    for line in help_text(&["real", "--help"], "60").lines() {
        assert!(line.chars().count() <= 60, "{line:?}");
    }
}
