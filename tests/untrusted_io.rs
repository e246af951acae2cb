//! Untrusted strings and files in, outputs out: markup injected through a path or a token never
//! runs in a page, every SVG stays well-formed XML, an output never replaces a device, a FIFO,
//! a directory or an input of the same run, text files from a model or a user are read with a
//! bound, chat templates render under the engine's fuel, and size-driving flags are refused
//! with an estimate before any work. Each case is the hostile input itself.

#[path = "support/browser.rs"]
mod browser;
#[path = "support/cli.rs"]
mod cli;
#[path = "support/xml.rs"]
mod xml;
use browser::chromium;
use cli::{run as sinklab, stderr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use xml::well_formed;

/// A path holding a backtick that closes a Markdown code span and an `<img onerror>` handler.
const PAYLOAD: &str = "x`<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">`y";

/// Refused (non-zero exit, no panic) within `secs`, saying every needle.
fn refused_within(args: &[&std::ffi::OsStr], needles: &[&str], secs: u64) -> String {
    let t = Instant::now();
    let o = sinklab(args);
    let e = stderr(&o);
    assert!(!o.status.success(), "{args:?} succeeded: {e}");
    assert!(!e.contains("panicked"), "{args:?} panicked: {e}");
    for n in needles {
        assert!(e.contains(n), "{args:?}: `{e}` does not say `{n}`");
    }
    assert!(
        t.elapsed() < Duration::from_secs(secs),
        "{args:?} took {:?}",
        t.elapsed()
    );
    e
}

fn os<'a>(v: &'a [&'a str]) -> Vec<&'a std::ffi::OsStr> {
    v.iter().map(std::ffi::OsStr::new).collect()
}

#[test]
fn injected_markup_in_report_markdown_is_text_in_the_page() {
    use sinklab::report::{html, md_code};
    let dir = tempfile::tempdir().unwrap();
    let path = format!("{}/{PAYLOAD}/long", dir.path().display());
    // A section that quotes the path as code (md_code), one that forgot to (raw), a hostile
    // link and an autolink.
    let md = format!(
        "Runs under {}.\n\nRaw: `{path}`\n\n[here](javascript:alert(1)) <javascript:alert(2)> \
         [ok](figures/a.svg)\n\n<script>alert(3)</script>\n",
        md_code(&path)
    );
    let page = html(
        &md,
        dir.path(),
        &[("m\"<script>".into(), "view/a\"><b>.html".into())],
    );
    for bad in ["<img", "<script", "href=\"javascript", "a\"><b>"] {
        assert!(!page.contains(bad), "`{bad}` reached the page:\n{page}");
    }
    assert!(page.contains("&lt;img src=x onerror="), "{page}");
    assert!(page.contains("href=\"figures/a.svg\""), "{page}");
    // The code span holds the whole path: the backtick inside did not close it.
    let code = md_code(&path);
    let p2 = html(&code, dir.path(), &[]);
    assert_eq!(p2.matches("<code>").count(), 1, "{p2}");
    assert!(p2.contains("x`&lt;img"), "{p2}");
}

/// The DOM of `page` after headless Chromium ran its scripts and handlers (network off).
fn dom(browser: &Path, page: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", page.canonicalize().unwrap().display()))
        .output()
        .expect("running chromium");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn an_injected_handler_does_not_run_in_the_report_page() {
    let Some(b) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let md = format!("Raw: `{PAYLOAD}`\n");
    // The control: the payload as markup runs its handler, so the check below can fail.
    let bare = dir.path().join("bare.html");
    std::fs::write(
        &bare,
        format!(
            "<!DOCTYPE html><html><body>{}</body></html>",
            &PAYLOAD[2..PAYLOAD.len() - 2]
        ),
    )
    .unwrap();
    assert!(
        dom(&b, &bare).contains("data-pwned=\"1\""),
        "the control page did not run its handler: the check cannot see one"
    );
    let page = dir.path().join("report.html");
    std::fs::write(&page, sinklab::report::html(&md, dir.path(), &[])).unwrap();
    let d = dom(&b, &page);
    assert!(d.contains("onerror"), "the payload text is shown: {d}");
    assert!(!d.contains("data-pwned=\"1\""), "the handler ran: {d}");
}

#[test]
fn figure_text_with_control_characters_gives_well_formed_svg() {
    use sinklab::plot::{Panel, Series, Style, render};
    let dir = tempfile::tempdir().unwrap();
    let nasty = "\u{1b}[31mred\u{1b}[0m \u{c}feed \u{0}nul \u{7}bell <b>&amp; \"q\" 'a' \u{FFFE}";
    let panel = Panel {
        title: nasty.into(),
        x_label: format!("x {nasty}"),
        y_label: "y\u{8}".into(),
        log_x: false,
        log_y: false,
        series: vec![Series::new(
            nasty,
            vec![(1.0, 2.0), (2.0, 3.0)],
            Style::Line,
            0,
        )],
        ..Default::default()
    };
    let files = render(&dir.path().join("fig"), nasty, &[panel]).unwrap();
    let svg = std::fs::read_to_string(&files[0]).unwrap();
    well_formed(&svg).unwrap_or_else(|e| panic!("{e}:\n{svg}"));
    assert!(svg.contains('\u{241B}'), "ESC shown as its control picture");
    // The checker is not vacuous.
    assert!(well_formed("<svg><text>\u{1b}</text></svg>").is_err());
    assert!(well_formed("<svg><text>a & b</text></svg>").is_err());
    assert!(well_formed("<svg><text>a</svg>").is_err());
}

#[test]
fn two_figures_of_a_model_with_a_dot_in_its_name_never_share_a_file() {
    use sinklab::plot::{Panel, Series, Style, render};
    let dir = tempfile::tempdir().unwrap();
    let panel = |y: f64| Panel {
        series: vec![Series::new(
            "s",
            vec![(1.0, y), (2.0, 2.0 * y)],
            Style::Line,
            0,
        )],
        ..Default::default()
    };
    let mut all = Vec::new();
    for (stem, y) in [
        ("real_qwen2.5-coder-0.5b", 1.0),
        ("real_qwen2.5-coder-0.5b_layers", 2.0),
        ("real_qwen2.5-coder-0", 3.0),
    ] {
        let files = render(&dir.path().join(stem), "t", &[panel(y)]).unwrap();
        assert_eq!(
            files[0].file_name().unwrap().to_str().unwrap(),
            format!("{stem}.svg")
        );
        assert!(dir.path().join(format!("{stem}.json")).is_file());
        all.extend(files);
    }
    let mut uniq = all.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), all.len(), "{all:?}");
    // Six images and three data files, each still holding its own figure.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 9);
}

#[cfg(unix)]
fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

/// A FIFO named as an input file (whose open would wait for a writer for ever) is refused
/// before it is opened, by every reader of a user's file: safetensors instances and
/// embeddings, a model path (GGUF magic, safetensors), an activation file.
#[cfg(unix)]
#[test]
fn a_fifo_as_an_input_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    let f = fifo.to_str().unwrap();
    let page = dir.path().join("p.html");
    let p = page.to_str().unwrap();
    for args in [
        vec!["half-space", "--file", f],
        vec![
            "cost",
            "--pattern",
            "sink",
            "--norm",
            "fro",
            "--delta",
            "1",
            "--embeddings",
            f,
        ],
        vec!["real", "--model", f, "--text", "The cat sat."],
        vec!["view", "--model", f, "--text", "The cat sat.", "--out", p],
        vec!["real", "--activations", f],
        vec!["secondary", "--activations", f],
    ] {
        refused_within(&os(&args), &["not a regular file"], 10);
    }
    assert!(!page.exists());
}

/// An option given without the option it applies to is refused naming both, never silently
/// ignored — also where clap would excuse it (the main option conflicts with one present:
/// `--a5` with `--activations`, `--dose-response` with `--activations`, `--emit` with
/// `--shard`).
#[test]
fn a_dependent_option_without_its_main_option_is_refused() {
    for (args, needles) in [
        (
            vec!["real", "--activations", "a.safetensors", "--a5-layers", "1"],
            ["--a5-layers", "--a5"],
        ),
        (
            vec![
                "real",
                "--activations",
                "a.safetensors",
                "--a5-max-iter",
                "9",
            ],
            ["--a5-max-iter", "--a5"],
        ),
        (
            vec![
                "real",
                "--activations",
                "a.safetensors",
                "--a5-solver",
                "ipm",
            ],
            ["--a5-solver", "--a5"],
        ),
        (
            vec!["real", "--activations", "a.safetensors", "--what", "hidden"],
            ["--what", "--dump"],
        ),
        (
            vec![
                "cost",
                "--pattern",
                "sink",
                "--norm",
                "fro",
                "--t",
                "8",
                "--quick",
            ],
            ["--quick", "--definitions"],
        ),
        (
            vec![
                "cost",
                "--pattern",
                "sink",
                "--norm",
                "fro",
                "--t",
                "8",
                "--out",
                "o",
            ],
            ["--out", "--definitions"],
        ),
        (
            vec![
                "secondary",
                "--activations",
                "a.safetensors",
                "--dose-grid",
                "0,1",
            ],
            ["--dose-grid", "--dose-response"],
        ),
        (
            vec![
                "secondary",
                "--activations",
                "a.safetensors",
                "--dose-tokens",
                "2",
            ],
            ["--dose-tokens", "--dose-response"],
        ),
        (
            vec![
                "secondary",
                "--activations",
                "a.safetensors",
                "--long-generate",
                "9",
            ],
            ["--long-generate", "--long"],
        ),
        (
            vec!["secondary", "--activations", "a.safetensors", "--out", "o"],
            ["--out", "--activations"],
        ),
        (
            vec!["sweep", "spec.toml", "--shard", "0/2", "--shards", "3"],
            ["--shards", "--emit"],
        ),
    ] {
        refused_within(&os(&args), &needles, 10);
    }
}

/// `backend`'s time estimate is checked against `--max-time`: a million steps at the default
/// sizes (at least minutes) is refused under a one-second limit, naming the estimate.
#[test]
fn backend_steps_past_the_time_limit_are_refused_with_the_estimate() {
    refused_within(
        &os(&[
            "backend",
            "--backend",
            "cpu",
            "--steps",
            "1000000",
            "--max-time",
            "1s",
        ]),
        &[
            "backend --t 32 --batch 16 --d 16 --steps 1000000",
            "--max-time",
        ],
        10,
    );
}

/// A tiny activations file (3 layers, 6 positions) for `view --activations`.
fn activations(dir: &Path, t: usize) -> PathBuf {
    use sinklab::runtime::activation_file::{Activations, HeadTensor};
    use sinklab::runtime::hidden::HiddenStates;
    let (l, d, h) = (3, 8, 2);
    let hidden: Vec<f32> = (0..l * t * d)
        .map(|i| ((i * 7919 % 113) as f32 / 113.0) - 0.5)
        .collect();
    let attn: Vec<HeadTensor> = (0..l)
        .map(|_| {
            let mut a = vec![0f32; h * t * t];
            for hh in 0..h {
                for i in 0..t {
                    for j in 0..=i {
                        a[(hh * t + i) * t + j] = 1.0 / (i + 1) as f32;
                    }
                }
            }
            HeadTensor {
                heads: h,
                tokens: t,
                width: t,
                data: a,
            }
        })
        .collect();
    let act = Activations {
        hidden: HiddenStates::new(l, t, d, hidden).unwrap(),
        attn: Some(attn),
        mlp_out: None,
        keys: None,
        values: None,
        tokens: Some((0..t as i64).collect()),
        metadata: Default::default(),
    };
    let f = dir.join(format!("act{t}.safetensors"));
    act.write(&f).unwrap();
    f
}

#[cfg(unix)]
#[test]
fn outputs_never_replace_a_fifo_a_directory_or_an_input() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let act = activations(dir.path(), 6);
    let before = std::fs::read(&act).unwrap();
    let a = act.to_str().unwrap();
    // --out equal to the input (by path, and through a hard link).
    let e = refused_within(
        &os(&["view", "--activations", a, "--out", a]),
        &["--activations"],
        20,
    );
    assert!(e.contains("act6.safetensors"), "{e}");
    let hard = dir.path().join("hard.html");
    std::fs::hard_link(&act, &hard).unwrap();
    refused_within(
        &os(&["view", "--activations", a, "--out", hard.to_str().unwrap()]),
        &["the same file"],
        20,
    );
    assert_eq!(std::fs::read(&act).unwrap(), before);
    // A FIFO and a directory as --out, for view and synth.
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    let f = fifo.to_str().unwrap();
    refused_within(
        &os(&["view", "--activations", a, "--out", f]),
        &["FIFO"],
        20,
    );
    refused_within(
        &os(&["synth", "--shape", "llama3.1-8b", "--out", f]),
        &["FIFO"],
        20,
    );
    let sub = dir.path().join("dir");
    std::fs::create_dir(&sub).unwrap();
    refused_within(
        &os(&["view", "--activations", a, "--out", sub.to_str().unwrap()]),
        &["a directory"],
        20,
    );
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert!(sub.is_dir());
    // --out equal to --file or the model file (refused before the model is read).
    let model = dir.path().join("m.gguf");
    std::fs::write(&model, b"not a model").unwrap();
    let text = dir.path().join("t.txt");
    std::fs::write(&text, "The cat sat.").unwrap();
    let (m, t) = (model.to_str().unwrap(), text.to_str().unwrap());
    refused_within(
        &os(&["view", "--model", m, "--file", t, "--out", t]),
        &["--file", "t.txt"],
        20,
    );
    refused_within(
        &os(&["view", "--model", m, "--file", t, "--out", m]),
        &["--model", "m.gguf"],
        20,
    );
    assert_eq!(std::fs::read(&model).unwrap(), b"not a model");
    assert_eq!(std::fs::read_to_string(&text).unwrap(), "The cat sat.");
    // The page is written where it may be.
    let page = dir.path().join("ok.html");
    let o = sinklab(os(&[
        "view",
        "--activations",
        a,
        "--out",
        page.to_str().unwrap(),
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
}

#[cfg(unix)]
#[test]
fn model_text_files_linked_to_endless_devices_are_refused_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("model");
    std::fs::create_dir(&m).unwrap();
    std::os::unix::fs::symlink("/dev/zero", m.join("config.json")).unwrap();
    std::fs::write(m.join("model.safetensors"), b"x").unwrap();
    refused_within(
        &os(&["real", "--model", m.to_str().unwrap(), "--text", "hi"]),
        &["config.json", "not a regular file"],
        20,
    );
    // A JSONL --file that is endless, or holds one line too long for any context, is refused
    // before the model is read.
    let model = dir.path().join("m.gguf");
    std::fs::write(&model, b"not a model").unwrap();
    let zero = dir.path().join("in.jsonl");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let mm = model.to_str().unwrap();
    refused_within(
        &os(&["real", "--model", mm, "--file", zero.to_str().unwrap()]),
        &["not a regular file"],
        20,
    );
    let long = dir.path().join("long.jsonl");
    let line = format!("\"{}\"\n", "a".repeat((64 << 20) + 10));
    std::fs::write(&long, line).unwrap();
    refused_within(
        &os(&["real", "--model", mm, "--file", long.to_str().unwrap()]),
        &["long.jsonl:1", "bytes"],
        20,
    );
    // Upper-case .JSONL is batch input too (so --json is refused as for .jsonl).
    let up = dir.path().join("in.JSONL");
    std::fs::write(&up, "\"hello\"\n").unwrap();
    refused_within(
        &os(&[
            "real",
            "--model",
            mm,
            "--file",
            up.to_str().unwrap(),
            "--json",
        ]),
        &["--results"],
        20,
    );
    // --results with a plain-text input is refused, not ignored.
    let txt = dir.path().join("in.txt");
    std::fs::write(&txt, "hello\n").unwrap();
    refused_within(
        &os(&[
            "real",
            "--model",
            mm,
            "--file",
            txt.to_str().unwrap(),
            "--results",
            dir.path().join("r.jsonl").to_str().unwrap(),
        ]),
        &["--results", "in.txt"],
        20,
    );
}

#[test]
fn hostile_chat_templates_stop_within_their_bounds() {
    use sinklab::runtime::chat_template::ChatTemplate;
    let render = |src: &str| {
        let t = ChatTemplate {
            source: src.into(),
            bos_token: "<s>".into(),
            eos_token: "</s>".into(),
            origin: "test".into(),
        };
        let t0 = Instant::now();
        let r = t.render_user("hello");
        (r, t0.elapsed())
    };
    // A real template renders.
    let (ok, _) = render(
        "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}\
         {% if add_generation_prompt %}<|assistant|>{% endif %}",
    );
    assert_eq!(ok.unwrap(), "<s><|user|>hello<|assistant|>");
    let chain = format!("{{{{ 'x'{} }}}}", "|upper".repeat(200_000));
    let nested =
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ b }}{% endfor %}{% endfor %}";
    let deep_if = format!(
        "{}x{}",
        "{% if true %}".repeat(100),
        "{% endif %}".repeat(100)
    );
    for src in [
        "{{ messages|batch(1000000000,'x')|list }}",
        "{{ 'x' * 1000000000 }}",
        "{% set s = 'xxxxxxxxxxxxxxxx' %}{{ s * 100000000 }}",
        "{{ '%1000000000d'|format(1) }}",
        "{{ '{:>1000000000}'.format(1) }}",
        "{{ 'x'.center(1000000000) }}",
        "{{ ('x' * 1000000).replace('x', 'x' * 1000000) }}",
        "{{ messages|tojson(indent=1000000000) }}",
        "{{ 'a\nb'|indent(1000000000) }}",
        "{{ range(1000000000)|list|length }}",
        nested,
        &chain,
        &deep_if,
    ] {
        let (r, dt) = render(src);
        let head: String = src.chars().take(60).collect();
        assert!(dt < Duration::from_secs(20), "{head}: {dt:?}");
        if let Ok(out) = r {
            assert!(out.len() <= (1 << 20) + 10, "{head}: {} bytes", out.len());
        }
    }
}

#[test]
fn size_flags_are_refused_with_an_estimate_before_work() {
    refused_within(
        &os(&[
            "backend",
            "--backend",
            "cpu",
            "--t",
            "65536",
            "--batch",
            "65536",
            "--d",
            "4096",
            "--steps",
            "1",
        ]),
        // backend takes --max-mem like train, so its message names the flag.
        &["needs about", "--max-mem"],
        20,
    );
    refused_within(
        &os(&[
            "synth",
            "--shape",
            "llama3.1-8b",
            "--threads",
            "1000000",
            "--out",
            "/nonexistent/x",
        ]),
        &["--threads 1000000"],
        20,
    );
    refused_within(
        &os(&[
            "cost",
            "--scope",
            "head",
            "--pattern",
            "sink",
            "--norm",
            "nuclear",
            "--t",
            "2000",
            "--delta",
            "1",
        ]),
        &["would take at least", "--max-time"],
        20,
    );
    // Figures out of scale: many series, a huge heat-map.
    let dir = tempfile::tempdir().unwrap();
    let series: Vec<serde_json::Value> = (0..3000)
        .map(|i| {
            serde_json::json!({"name": "", "points": [[1.0, i as f64 + 1.0]], "style": "points", "color": 0})
        })
        .collect();
    let fig = serde_json::json!({"format": "sinklab-figure/1", "figure": {"kind": "panels", "title": "",
        "panels": [{"title": "", "x_label": "", "y_label": "", "log_x": false, "log_y": false, "series": series}]}});
    let f = dir.path().join("many.json");
    std::fs::write(&f, fig.to_string()).unwrap();
    refused_within(&os(&["plot", f.to_str().unwrap()]), &["3000 series"], 20);
    let row = vec![0.5f64; 2100];
    let grid: Vec<Vec<f64>> = vec![row; 2100];
    let fig = serde_json::json!({"format": "sinklab-figure/1", "figure": {"kind": "heatmap", "title": "",
        "x_label": "", "y_label": "", "values": grid}});
    let h = dir.path().join("heat.json");
    std::fs::write(&h, fig.to_string()).unwrap();
    refused_within(&os(&["plot", h.to_str().unwrap()]), &["heat-map cells"], 20);
    assert!(!dir.path().join("heat.svg").exists());
}

#[test]
fn silently_wrong_inputs_of_round_three_are_refused() {
    // A subnormal or huge gap, an implied one outside the range, a rate outside (0, 1).
    refused_within(
        &os(&[
            "cost",
            "--pattern",
            "sink",
            "--norm",
            "fro",
            "--t",
            "8",
            "--delta",
            "1e-310",
        ]),
        &["--delta", "outside"],
        20,
    );
    refused_within(
        &os(&[
            "cost",
            "--pattern",
            "sink",
            "--norm",
            "fro",
            "--t",
            "8",
            "--delta",
            "1e300",
        ]),
        &["--delta", "outside"],
        20,
    );
    refused_within(
        &os(&[
            "cost",
            "--pattern",
            "sink",
            "--norm",
            "fro",
            "--t",
            "8",
            "--delta",
            "1",
            "--on-rate",
            "7",
        ]),
        &["--on-rate 7"],
        20,
    );
    refused_within(
        &os(&["train", "--no-bos", "--no-bos-key", "--steps", "1"]),
        &["--no-bos-key", "--no-bos"],
        20,
    );
    refused_within(
        &os(&[
            "secondary",
            "--model",
            "smollm2",
            "--prompt",
            "hi",
            "--boot",
            "0",
        ]),
        &["--boot 0"],
        20,
    );
    // An activations file with one position.
    let dir = tempfile::tempdir().unwrap();
    let one = activations(dir.path(), 1);
    let out = dir.path().join("one.html");
    refused_within(
        &os(&[
            "view",
            "--activations",
            one.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]),
        &["T = 1"],
        20,
    );
    refused_within(
        &os(&["real", "--json", "--activations", one.to_str().unwrap()]),
        &["T = 1"],
        20,
    );
    // A sweep spec's on_rate outside (0, 1) in a block without the whole-head scope.
    let spec = dir.path().join("s.toml");
    std::fs::write(
        &spec,
        "name = \"s\"\n[[exact]]\npatterns = [\"sink\"]\nnorms = [\"fro\"]\n\
         embeddings = [\"orthonormal\"]\nt = [4, 8]\nseeds = [0]\non_rate = 7.0\n",
    )
    .unwrap();
    refused_within(
        &os(&[
            "sweep",
            spec.to_str().unwrap(),
            "--out",
            dir.path().join("o").to_str().unwrap(),
        ]),
        &["on_rate"],
        20,
    );
    // A shard whose last line was cut by a kill is not merged without a word.
    let ok_spec = dir.path().join("tiny.toml");
    std::fs::write(
        &ok_spec,
        "name = \"tiny\"\nbootstrap = 10\n[[exact]]\npatterns = [\"sink\"]\nnorms = [\"fro\"]\n\
         embeddings = [\"orthonormal\"]\nt = [4, 8]\nseeds = [0]\ndelta = 5.0\n",
    )
    .unwrap();
    let shard = dir.path().join("shard");
    let o = sinklab(os(&[
        "sweep",
        ok_spec.to_str().unwrap(),
        "--out",
        shard.to_str().unwrap(),
        "--no-analysis",
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    let res = shard.join("results.jsonl");
    let mut text = std::fs::read_to_string(&res).unwrap();
    text.push_str("{\"id\": \"cut");
    std::fs::write(&res, text).unwrap();
    refused_within(
        &os(&[
            "merge",
            shard.to_str().unwrap(),
            "--out",
            dir.path().join("merged").to_str().unwrap(),
        ]),
        &["results.jsonl", "cut"],
        20,
    );
}
