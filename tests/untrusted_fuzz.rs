//! Bounded, seeded generators of hostile inputs, run by `cargo test` beside the loader fuzzer
//! (`robustness_fuzz.rs`): chat templates built from the engine's expensive constructs, JSONL
//! input lines, mutated figure data files and output names full of markup and control
//! characters. Every case must end in `Ok` or a clean `Err` within [`LIMIT`] (its own thread:
//! a panic is caught, a hang is a failure), and what is written must be what was asked for:
//! a bounded template output, a well-formed SVG, a file of exactly the requested name.

#[path = "support/xml.rs"]
mod xml;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// Wall-clock limit of one case (a bounded render or parse takes well under a second; the
/// unbounded ones of issue reports ran for minutes).
const LIMIT: Duration = Duration::from_secs(20);

/// Runs `f` in its own thread; fails on a panic or when it exceeds [`LIMIT`].
fn guarded(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(AssertUnwindSafe(f));
        let _ = tx.send(r.is_ok());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(true) => {}
        Ok(false) => panic!("{what}: panicked"),
        Err(_) => panic!("{what}: still running after {LIMIT:?} (hang)"),
    }
}

/// A large or ordinary count.
fn count(rng: &mut StdRng) -> u64 {
    [
        0,
        1,
        3,
        1000,
        100_000,
        1_000_000_000,
        u32::MAX as u64,
        i64::MAX as u64,
    ][rng.random_range(0..8)]
}

/// One expression built from the constructs that cost the engine time or memory.
fn expr(rng: &mut StdRng, depth: usize) -> String {
    let n = count(rng);
    let inner = if depth > 0 && rng.random_bool(0.6) {
        expr(rng, depth - 1)
    } else {
        ["'x'", "messages", "bos_token", "range(3)", "'a\\nb'"][rng.random_range(0..5)].into()
    };
    match rng.random_range(0..10) {
        0 => format!("({inner}) * {n}"),
        1 => format!("({inner})|batch({n}, 'x')|list"),
        2 => format!("({inner})|indent({n})"),
        3 => format!("'%{n}d'|format(1)"),
        4 => format!("({inner})|tojson(indent={n})"),
        5 => format!("range({n})|list"),
        6 => format!("({inner}) ~ ({inner})"),
        7 => format!(
            "({inner})|string|upper{}",
            "|lower".repeat(rng.random_range(0..2000))
        ),
        8 => format!("({inner})|join(({inner})|string)"),
        _ => inner,
    }
}

/// A template: statements and loops around expressions, nested up to a few levels.
fn template(rng: &mut StdRng, depth: usize) -> String {
    let mut s = String::new();
    for _ in 0..rng.random_range(1..4) {
        match rng.random_range(0..5) {
            0 if depth > 0 => {
                let n = count(rng);
                s += &format!(
                    "{{% for i in range({n}) %}}{}{{% endfor %}}",
                    template(rng, depth - 1)
                );
            }
            1 if depth > 0 => {
                s += &format!("{{% if true %}}{}{{% endif %}}", template(rng, depth - 1));
            }
            2 => {
                s += &format!("{{% set v = {} %}}{{{{ v }}}}", expr(rng, 2));
            }
            3 => {
                s += &format!(
                    "{{% macro m(k) %}}{{{{ m(k) }}}}{{% endmacro %}}{}",
                    if rng.random_bool(0.5) {
                        "{{ m(1) }}"
                    } else {
                        ""
                    }
                );
            }
            _ => s += &format!("{{{{ {} }}}}", expr(rng, 3)),
        }
    }
    s
}

#[test]
fn generated_chat_templates_render_within_their_bounds() {
    use sinklab::runtime::chat_template::{ChatTemplate, MAX_OUTPUT_BYTES};
    let mut rng = StdRng::seed_from_u64(20_260);
    for k in 0..48 {
        let src = template(&mut rng, 3);
        let head: String = src.chars().take(120).collect();
        guarded(&format!("template case {k}: {head}"), move || {
            let t = ChatTemplate {
                source: src,
                bos_token: "<s>".into(),
                eos_token: "</s>".into(),
                origin: "fuzz".into(),
            };
            if let Ok(out) = t.render_user("hello") {
                assert!(out.len() <= MAX_OUTPUT_BYTES + 10, "{} bytes", out.len());
            }
        });
    }
}

/// One JSONL line: valid inputs, near-valid ones, garbage, control characters, long lines.
fn jsonl_line(rng: &mut StdRng) -> String {
    let text: String = (0..rng.random_range(0..40))
        .map(|_| {
            [
                'a', ' ', '"', '\\', '\u{0}', '\u{1b}', '\u{c}', '<', '`', 'é', '\u{FEFF}', '{',
            ][rng.random_range(0..12)]
        })
        .collect();
    match rng.random_range(0..9) {
        0 => serde_json::to_string(&text).unwrap(),
        1 => format!(
            "[{}]",
            (0..rng.random_range(0..5))
                .map(|_| count(rng).to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
        2 => serde_json::json!({"text": text, "id": count(rng)}).to_string(),
        3 => serde_json::json!({"tokens": [1, -1, 1.5], "text": "x"}).to_string(),
        4 => format!("{{\"text\": {}", serde_json::to_string(&text).unwrap()),
        5 => text,
        6 => format!("\"{}\"", "a".repeat(rng.random_range(0..300_000))),
        7 => serde_json::json!({"text": text, "other": 1}).to_string(),
        _ => "[".repeat(rng.random_range(1..100_000)),
    }
}

#[test]
fn generated_jsonl_inputs_are_read_or_refused_naming_the_line() {
    let bin = env!("CARGO_BIN_EXE_sinklab");
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    std::fs::write(&model, b"not a model").unwrap();
    let mut rng = StdRng::seed_from_u64(7_331);
    for k in 0..24 {
        let lines: Vec<String> = (0..rng.random_range(1..6))
            .map(|_| jsonl_line(&mut rng))
            .collect();
        let f = dir.path().join(format!("in{k}.jsonl"));
        std::fs::write(&f, lines.join("\n")).unwrap();
        let (m, bin) = (model.clone(), bin.to_string());
        guarded(&format!("jsonl case {k}"), move || {
            let o = std::process::Command::new(bin)
                .args(["real", "--model"])
                .arg(&m)
                .arg("--file")
                .arg(&f)
                .output()
                .unwrap();
            let e = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "a dummy model cannot run");
            assert!(!e.contains("panicked"), "{e}");
            // Either a line is refused by number, or the input is valid and the model file
            // is what is refused.
            assert!(
                e.contains("in") && (e.contains(".jsonl:") || e.contains("m.gguf")),
                "{e}"
            );
        });
    }
}

/// One mutation of a figure data file: a value replaced by an extreme or ill-typed one, a key
/// dropped or added, text cut.
fn mutate_figure(v: &serde_json::Value, rng: &mut StdRng) -> String {
    let mut v = v.clone();
    let extremes = [
        serde_json::json!(null),
        serde_json::json!(1e308),
        serde_json::json!(-1e-320),
        serde_json::json!(u64::MAX),
        serde_json::json!("\u{1b}[31m<b>&\u{0}"),
        serde_json::json!([]),
        serde_json::json!({}),
        serde_json::json!(-1),
    ];
    fn leaves(v: &mut serde_json::Value, out: &mut Vec<*mut serde_json::Value>) {
        out.push(v as *mut _);
        match v {
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| leaves(x, out)),
            serde_json::Value::Object(o) => o.values_mut().for_each(|x| leaves(x, out)),
            _ => {}
        }
    }
    for _ in 0..rng.random_range(1..4) {
        let mut all = Vec::new();
        leaves(&mut v, &mut all);
        let at = all[rng.random_range(0..all.len())];
        // SAFETY: `at` points into `v`, which is not otherwise borrowed until `all` is dropped
        // at the end of this iteration, and only one pointer is written through.
        unsafe { *at = extremes[rng.random_range(0..extremes.len())].clone() };
    }
    let s = v.to_string();
    if rng.random_bool(0.2) {
        let cut = rng.random_range(0..s.len());
        s.chars().take(cut).collect()
    } else {
        s
    }
}

#[test]
fn mutated_figure_files_are_drawn_well_formed_or_refused() {
    use sinklab::plot::{Figure, Heatmap, Panel, Series, Style, data};
    let panels = Figure::Panels {
        title: "cost: T^{1/2}".into(),
        panels: vec![Panel {
            title: "p".into(),
            x_label: "T".into(),
            y_label: "C".into(),
            log_x: true,
            log_y: true,
            series: vec![Series::new(
                "sink",
                vec![(8.0, 2.0), (16.0, 3.0), (32.0, 4.5)],
                Style::LinePoints,
                1,
            )],
            ..Default::default()
        }],
    };
    let heat = Figure::Heatmap(Heatmap {
        title: "α: value".into(),
        x_label: "head".into(),
        y_label: "layer".into(),
        values: vec![vec![0.1, 0.9], vec![f64::NAN, 0.5]],
        ..Default::default()
    });
    let mut rng = StdRng::seed_from_u64(4_242);
    let dir = tempfile::tempdir().unwrap();
    for (name, fig) in [("panels", panels), ("heat", heat)] {
        let seed: serde_json::Value = serde_json::from_str(&data::to_json(&fig)).unwrap();
        for k in 0..40 {
            let text = mutate_figure(&seed, &mut rng);
            let stem = dir.path().join(format!("{name}{k}"));
            guarded(&format!("figure {name} case {k}: {text}"), move || {
                let Ok(fig) = data::from_json(&text) else {
                    return;
                };
                if let Ok(files) = sinklab::plot::draw(&stem, &fig, &Default::default()) {
                    let svg = std::fs::read_to_string(&files[0]).unwrap();
                    xml::well_formed(&svg).unwrap_or_else(|e| panic!("{e}"));
                }
            });
        }
    }
}

/// A file name from markup, quotes, control characters, dots and non-ASCII text.
fn file_name(rng: &mut StdRng) -> String {
    let parts = [
        "x",
        "`",
        "<img src=x onerror=alert(1)>",
        "\"",
        "'",
        "\u{1b}[31m",
        "\u{7}",
        "\n",
        ".",
        ".5b",
        "é",
        "&amp;",
        "|",
        "$(id)",
        "%2e",
        " ",
    ];
    let mut s: String = (0..rng.random_range(1..8))
        .map(|_| parts[rng.random_range(0..parts.len())])
        .collect();
    if s.trim_matches('.').is_empty() {
        s.push('x');
    }
    s
}

#[test]
fn generated_output_names_are_written_exactly_and_quoted_safely() {
    use sinklab::plot::{Panel, Series, Style, render};
    use sinklab::report::{html, md_code};
    let mut rng = StdRng::seed_from_u64(99);
    let dir = tempfile::tempdir().unwrap();
    for k in 0..40 {
        let name = file_name(&mut rng);
        let stem: PathBuf = dir.path().join(format!("{k}_{name}"));
        let panel = Panel {
            series: vec![Series::new(
                &name,
                vec![(1.0, 1.0), (2.0, 3.0)],
                Style::Line,
                0,
            )],
            ..Default::default()
        };
        let files = render(&stem, &name, &[panel]).unwrap();
        for (f, ext) in files.iter().zip(["svg", "png"]) {
            assert_eq!(
                f.file_name().unwrap().to_string_lossy(),
                format!("{k}_{name}.{ext}"),
                "the name was cut or changed"
            );
            assert!(f.is_file());
        }
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        xml::well_formed(&svg).unwrap_or_else(|e| panic!("{name:?}: {e}"));
        // The path quoted in report Markdown stays one code span and no markup.
        let p = stem.display().to_string();
        let page = html(
            &format!("Files under {}.", md_code(&p)),
            Path::new("."),
            &[],
        );
        assert!(!page.contains("<img"), "{name:?}: {page}");
        assert_eq!(page.matches("<code>").count(), 1, "{name:?}: {page}");
        // An atomic write to the name writes that file and nothing else beside it.
        let out = dir.path().join(format!("w{k}_{name}"));
        sinklab::atomic::write(&out, name.as_bytes()).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), name.as_bytes());
    }
    // 2 images and 1 data file a figure, 1 atomic write: no temporary left.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 40 * 4);
}
