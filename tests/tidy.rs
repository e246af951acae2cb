//! Invariants of the source tree, checked on the files themselves (in the spirit of
//! rust-analyzer's `xtask/src/tidy.rs`):
//!
//! 1. **Leaf modules** (`outcome`, `section`) import nothing from the crate.
//! 2. **Math modules** (attention, patterns, geometry, cost, oversmoothing, switch,
//!    tasks, stats, linalg, fit) import only other math modules and `outcome`, and
//!    never the file system: no plotting, reports, check registry, training,
//!    backends, sweeps, real-model or CLI code. The kernel layer (`backend`) obeys
//!    the same rule.
//! 3. **No import cycle** between top-level modules of `src/` (one known cycle is
//!    allowed in [`KNOWN_CYCLES`] until it is removed; an entry that is no longer a
//!    cycle fails, so the list only shrinks).
//! 4. **Every test file runs**: each `.rs` file directly in `tests/` or `theorems/`
//!    is a `[[test]]` target of `Cargo.toml` (the package has `autotests = false`),
//!    and each `.rs` file in a subfolder is a module some target includes.
//! 5. **No hidden state in training and kernels**: no `thread_local!` in `src/train/`
//!    or `src/backend/` (the backend is an explicit argument, as faer passes `Par`;
//!    nothing is chosen by what a caller installed on the thread).
//! 6. **Doc formulas survive Markdown**: rustdoc's Markdown runs before KaTeX sees the
//!    `$…$` and `$$…$$` formulas of the doc comments, so inside them (in `src/`)
//!    - no backslash before ASCII punctuation: Markdown reads it as an escape, and `\|`, `\,`,
//!      `\{`, `\}`, `\;` arrive as `|`, `,`, `{`, `}`, `;` (‖v‖ would render as |v|); write
//!      `\lVert…\rVert`, `\thinspace`, `\lbrace…\rbrace`, `\thickspace` (a literal
//!      underscore is `\textunderscore`). The escapes meant for Markdown are allowed: `\[`, `\]`
//!      (a bracket rustdoc does not read as a link) and `\_` (an underscore that is not emphasis);
//!    - no `*` (an emphasis delimiter wherever it stands; write `\ast`) except in a starred
//!      command such as `\operatorname*`, and no `_` that could open emphasis (after
//!      punctuation or a space, as in `\mathrm{SS}_{res}` or `(AX)_i`: write `\_`).
//!
//! "Imports" are the `crate::…` paths of a file (in `use` items or inline),
//! comments removed. The first tests below run the rules on planted inputs, so
//! each rule is shown to be able to fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules that import nothing from the crate.
const LEAF: &[&str] = &["outcome", "section"];

/// The pure-math layer.
const MATH: &[&str] = &[
    "attention",
    "patterns",
    "geometry",
    "cost",
    "oversmoothing",
    "switch",
    "tasks",
    "stats",
    "linalg",
    "fit",
];

/// Kernel layer: as pure as the math (it may use math and leaf modules only).
const KERNELS: &[&str] = &["backend"];

/// Modules where the backend is passed in, never read from thread-local state.
const NO_THREAD_LOCAL: &[&str] = &["train", "backend"];

/// Import cycles that exist today and are to be removed (sorted module names): none (the
/// activation-file reader that made `real` ↔ `secondary` one moved to `real::activation_file`).
const KNOWN_CYCLES: &[&[&str]] = &[];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rs_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rs_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Source text without `//` and `/* */` comments (string contents are kept).
fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let (mut i, mut in_str) = (0, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\\' && i + 1 < b.len() {
                out.push(c as char);
                out.push(b[i + 1] as char);
                i += 2;
                continue;
            }
            if c == b'"' {
                in_str = false;
            }
        } else if c == b'"' && (i == 0 || b[i - 1] != b'\'') {
            in_str = true;
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
            continue;
        }
        // Non-ASCII bytes are copied as part of their UTF-8 sequence.
        let len = utf8_len(c);
        out.push_str(&src[i..(i + len).min(src.len())]);
        i += len;
    }
    out
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Top-level crate modules a (comment-free) source names through `crate::…`,
/// including the members of groups `crate::{a, b::c}`.
fn crate_imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(k) = rest.find("crate::") {
        // `sinklab_crate::` or `$crate::` are not this crate's paths.
        let before = rest[..k].chars().last();
        let after = &rest[k + "crate::".len()..];
        rest = after;
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 0usize;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        start = false;
                        let id = ident_at(&group[j..]);
                        if !id.is_empty() && id != "self" {
                            out.insert(id.to_string());
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let id = ident_at(after);
            if !id.is_empty() {
                out.insert(id.to_string());
            }
        }
    }
    out
}

/// Whether a (comment-free) source uses the file system.
fn uses_fs(code: &str) -> bool {
    if code.contains("std::fs") || code.contains("File::") {
        return true;
    }
    // `use std::{…, fs, …}`
    let mut rest = code;
    while let Some(k) = rest.find("std::{") {
        let group = &rest[k + 6..];
        let end = group.find('}').unwrap_or(group.len());
        if group[..end]
            .split(',')
            .any(|p| p.trim() == "fs" || p.trim().starts_with("fs::"))
        {
            return true;
        }
        rest = &group[end..];
    }
    false
}

/// Whether a (comment-free) source declares thread-local state
/// (`thread_local!`, `#[thread_local]`, `std::thread::LocalKey`).
fn uses_thread_local(code: &str) -> bool {
    code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == "thread_local" || w == "LocalKey")
}

/// Rule 6: what Markdown would change inside the doc-comment formulas of a source file, as
/// (line number from 1, the characters). Consecutive `///` (or `//!`) lines form one Markdown
/// text, so a formula may span lines; code spans and fenced code blocks hold no formulas.
fn doc_formula_problems(src: &str) -> Vec<(usize, String)> {
    let mut bad = Vec::new();
    // Blocks of consecutive doc lines of one kind: (line number, text after the marker).
    let mut blocks: Vec<Vec<(usize, &str)>> = Vec::new();
    let mut kind = "";
    for (n, line) in src.lines().enumerate() {
        let t = line.trim_start();
        let doc = ["///", "//!"]
            .into_iter()
            .find(|m| t.starts_with(m) && !t.starts_with("////"));
        match doc {
            Some(m) => {
                if m != kind {
                    blocks.push(Vec::new());
                }
                kind = m;
                blocks.last_mut().unwrap().push((n + 1, &t[m.len()..]));
            }
            None => kind = "",
        }
    }
    for block in blocks {
        // The block's Markdown, fenced code blanked, with the line of each byte.
        let (mut text, mut line_of) = (Vec::new(), Vec::new());
        let mut fence = false;
        for (n, l) in block {
            let t = l.trim_start();
            let marker = t.starts_with("```") || t.starts_with("~~~");
            fence ^= marker;
            let code = marker || fence;
            text.extend(l.bytes().map(|b| if code { b' ' } else { b }));
            text.push(b'\n');
            line_of.extend(std::iter::repeat_n(n, l.len() + 1));
        }
        let run = |i: usize| text[i..].iter().take_while(|&&b| b == b'`').count();
        let (mut i, mut math) = (0, None::<usize>);
        while i < text.len() {
            match text[i] {
                b'\\' if text.get(i + 1).is_some_and(u8::is_ascii_punctuation) => {
                    if math.is_some() && !matches!(text[i + 1], b'[' | b']' | b'_') {
                        bad.push((line_of[i], format!("\\{}", text[i + 1] as char)));
                    }
                    i += 2;
                }
                b'*' | b'_' if math.is_some() => {
                    let prev = if i == 0 { b' ' } else { text[i - 1] };
                    let next = text.get(i + 1).copied().unwrap_or(b' ');
                    let letters = text[..i]
                        .iter()
                        .rev()
                        .take_while(|b| b.is_ascii_alphabetic())
                        .count();
                    let starred = letters > 0 && i > letters && text[i - letters - 1] == b'\\';
                    // CommonMark: `_` opens emphasis when left-flanking and not inside a word.
                    let opens = (prev.is_ascii_whitespace() || prev.is_ascii_punctuation())
                        && !next.is_ascii_whitespace();
                    if text[i] == b'*' && !starred {
                        bad.push((line_of[i], "*".to_string()));
                    } else if text[i] == b'_' && opens {
                        bad.push((line_of[i], format!("{}_", prev as char)));
                    }
                    i += 1;
                }
                b'`' => {
                    // A code span runs to the next backtick run of the same length (none: literal).
                    let k = run(i);
                    let mut j = i + k;
                    while j < text.len() && !(text[j] == b'`' && run(j) == k) {
                        j += if text[j] == b'`' { run(j) } else { 1 };
                    }
                    i = if j < text.len() { j + k } else { i + k };
                }
                b'$' => {
                    let d = if text.get(i + 1) == Some(&b'$') { 2 } else { 1 };
                    math = match math {
                        None => Some(d),
                        Some(open) if open == d => None,
                        open => open,
                    };
                    i += d;
                }
                _ => i += 1,
            }
        }
    }
    bad
}

/// The top-level module of a file under `src/` (`None` for `lib.rs`, `main.rs`, `cli/`:
/// the binary and the crate root are above every layer).
fn top_module(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main" | "cli")).then(|| name.to_string())
}

/// Files of `src/` as (path relative to `src/`, top module, comment-free code).
fn sources() -> Vec<(PathBuf, String, String)> {
    let src = root().join("src");
    rs_files(&src)
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(&src).ok()?.to_path_buf();
            let top = top_module(&rel)?;
            let code = strip_comments(&std::fs::read_to_string(&p).ok()?);
            Some((rel, top, code))
        })
        .collect()
}

/// Violations of rules 1–2 for one file.
fn layer_violations(rel: &Path, top: &str, code: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let imports: BTreeSet<String> = crate_imports(code)
        .into_iter()
        .filter(|m| m != top)
        .collect();
    if LEAF.contains(&top) {
        for m in &imports {
            bad.push(format!(
                "src/{}: leaf module `{top}` imports crate::{m}",
                rel.display()
            ));
        }
    }
    if MATH.contains(&top) || KERNELS.contains(&top) {
        let layer = if MATH.contains(&top) {
            "math"
        } else {
            "kernel"
        };
        for m in &imports {
            let allowed =
                MATH.contains(&m.as_str()) || (LEAF.contains(&m.as_str()) && m != "section");
            if !allowed {
                bad.push(format!(
                    "src/{}: {layer} module `{top}` imports crate::{m} (an upper layer)",
                    rel.display()
                ));
            }
        }
        if uses_fs(code) {
            bad.push(format!(
                "src/{}: {layer} module `{top}` uses the file system",
                rel.display()
            ));
        }
    }
    bad
}

/// The module graph: top module → modules it imports.
fn graph(files: &[(PathBuf, String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, top, code) in files {
        let e = g.entry(top.clone()).or_default();
        for m in crate_imports(code) {
            if &m != top {
                e.insert(m);
            }
        }
    }
    g
}

/// Strongly connected components with more than one module (Tarjan), each sorted.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.g.get(v) {
            for w in ws {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out.sort();
    t.out
}

/// Problems of rule 3 given the cycles found and the allowed ones.
fn cycle_problems(found: &[Vec<String>], known: &[&[&str]]) -> Vec<String> {
    let mut bad = Vec::new();
    for c in found {
        if !known.iter().any(|k| k.iter().eq(c.iter())) {
            bad.push(format!("import cycle between top-level modules: {c:?}"));
        }
    }
    for k in known {
        if !found.iter().any(|c| k.iter().eq(c.iter())) {
            bad.push(format!(
                "KNOWN_CYCLES entry {k:?} is no longer a cycle: remove it from tests/tidy.rs"
            ));
        }
    }
    bad
}

/// Problems of rule 4: `files` are paths relative to the package root, `targets`
/// the `[[test]]` paths of `Cargo.toml`, `included` maps a target to its text.
fn unrun_tests(files: &[String], targets: &BTreeSet<String>, texts: &[String]) -> Vec<String> {
    let mut bad = Vec::new();
    for f in files {
        let depth = f.matches('/').count();
        if depth == 1 {
            if !targets.contains(f) {
                bad.push(format!(
                    "{f} is not a [[test]] target in Cargo.toml (autotests = false: it never runs)"
                ));
            }
        } else {
            // tests/<dir>/<name>.rs must be a module of some target.
            let inner = f.split_once('/').map(|x| x.1).unwrap_or(f);
            let dir = inner.split('/').next().unwrap_or(inner);
            let used = texts
                .iter()
                .any(|t| t.contains(&format!("\"{inner}\"")) || t.contains(&format!("mod {dir};")));
            if !used {
                bad.push(format!("{f} is not included by any test target"));
            }
        }
    }
    bad
}

fn test_targets() -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let v: toml::Value = toml::from_str(&manifest).unwrap();
    v.get("test")
        .and_then(|t| t.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|t| t.get("path")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

// ---- the rules on planted inputs (each rule can fail) ----

#[test]
fn imports_are_read_from_paths_groups_and_not_comments() {
    let code = strip_comments(
        "use crate::plot::{Panel};\n// use crate::train;\nuse crate::{linalg::dot, cost, self};\n\
         /* crate::sweep */ let x = crate::report::fmt_margin(1.0); let s = \"// not a comment\"; crate::fit::f();\n\
         macro_rules! m { () => { $crate::backend::x } }",
    );
    let got: Vec<String> = crate_imports(&code).into_iter().collect();
    assert_eq!(got, ["cost", "fit", "linalg", "plot", "report"]);
    assert!(uses_fs("use std::{fmt, fs};"));
    assert!(uses_fs("let _ = std::fs::read(p);"));
    assert!(!uses_fs("use std::fmt::Write as _;"));
}

#[test]
fn planted_upward_imports_are_flagged() {
    let p = Path::new("switch.rs");
    let good = "use crate::attention::Head;\nuse crate::outcome::CheckOutcome;";
    assert!(layer_violations(p, "switch", good).is_empty());
    for bad in [
        "use crate::plot::render;",
        "use crate::report::ReportCtx;",
        "use crate::section::ReportCtx;",
        "use crate::check::CheckOutcome;",
        "use crate::train::TrainConfig;",
        "use crate::backend::Backend;",
        "use crate::sweep::Spec;",
        "fn f() { std::fs::write(\"a\", \"b\").unwrap(); }",
    ] {
        assert_eq!(layer_violations(p, "switch", bad).len(), 1, "{bad}");
    }
    assert_eq!(
        layer_violations(Path::new("outcome.rs"), "outcome", "use crate::linalg;").len(),
        1
    );
    // Upper layers may import anything.
    assert!(layer_violations(Path::new("report.rs"), "report", "use crate::plot;").is_empty());
}

#[test]
fn planted_thread_locals_are_flagged() {
    assert!(uses_thread_local(
        "thread_local! { static R: RefCell<u8> = RefCell::new(0); }"
    ));
    assert!(uses_thread_local("#[thread_local]\nstatic X: u8 = 0;"));
    assert!(uses_thread_local(
        "fn f(k: &'static std::thread::LocalKey<u8>) {}"
    ));
    assert!(!uses_thread_local(
        "let thread_locals = 1; fn local_key() {}"
    ));
    let code = strip_comments("// thread_local! is gone\nfn f() {}");
    assert!(!uses_thread_local(&code));
}

#[test]
fn planted_cycles_are_found_and_stale_allowances_fail() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut edge = |a: &str, b: &str| {
        g.entry(a.into()).or_default().insert(b.into());
    };
    edge("a", "b");
    edge("b", "c");
    edge("c", "a");
    edge("c", "d");
    edge("e", "d");
    let found = cycles(&g);
    assert_eq!(found, vec![vec!["a".to_string(), "b".into(), "c".into()]]);
    assert!(cycle_problems(&found, &[&["a", "b", "c"]]).is_empty());
    assert_eq!(cycle_problems(&found, &[]).len(), 1);
    assert_eq!(
        cycle_problems(&found, &[&["a", "b", "c"], &["d", "e"]]).len(),
        1
    );
}

#[test]
fn planted_unregistered_test_files_are_flagged() {
    let targets: BTreeSet<String> = ["tests/a.rs".to_string()].into();
    let texts = vec!["mod support;\n".to_string()];
    let files = [
        "tests/a.rs".to_string(),
        "theorems/b.rs".to_string(),
        "tests/support/mod.rs".to_string(),
        "tests/other/x.rs".to_string(),
    ];
    let bad = unrun_tests(&files, &targets, &texts);
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].contains("theorems/b.rs") && bad[1].contains("tests/other/x.rs"));
}

#[test]
fn planted_markdown_in_doc_formulas_is_flagged() {
    let src = [
        r"/// Norm $\|x\|$ and set $\{1, 2\}$,",
        r"/// spaced $a\,b$ over two $x \le",
        r"/// y\;z$ lines, $\|W\|_*$ and $\mathrm{SS}_{res} + (AX)_i$.",
        r"//! $$\sum_j \|v_j\|$$",
        r"// $\|x\|$: a plain comment, not rendered",
        r"/// `$\|x\|$` is code, \| outside a formula is prose, $E\[x\]$ a bracket, *emphasis*.",
        r#"fn f() -> &'static str { "$\\|x\\|$" }"#,
        r"/// ```",
        r"/// let s = r#$\|x\|_*$#;",
        r"/// ```",
    ]
    .join("\n");
    let got = doc_formula_problems(&src);
    let want = [
        (1, r"\|"),
        (1, r"\|"),
        (1, r"\{"),
        (1, r"\}"),
        (2, r"\,"),
        (3, r"\;"),
        (3, r"\|"),
        (3, r"\|"),
        (3, r"|_"),
        (3, r"*"),
        (3, r"}_"),
        (3, r")_"),
        (4, r"\|"),
        (4, r"\|"),
    ];
    assert_eq!(got, want.map(|(n, e)| (n, e.to_string())));
    let fixed = [
        r"/// $\lVert x\rVert_\ast$, $\lbrace 1\rbrace$, $a\thinspace b\thickspace c$, $E\[x\]$,",
        r"/// $\mathrm{SS}\_{res} + (AX)\_i + x_i + y_{ij}$, $\operatorname*{arg\thinspace min}\_x$.",
    ]
    .join("\n");
    assert_eq!(doc_formula_problems(&fixed), []);
}

// ---- the rules on the tree ----

#[test]
fn math_and_leaf_modules_import_no_upper_layer() {
    let files = sources();
    // The layer lists name real modules (a renamed module must be renamed here too).
    for m in LEAF.iter().chain(MATH).chain(KERNELS) {
        assert!(
            files.iter().any(|(_, top, _)| top == m),
            "tidy: no module `{m}` in src/"
        );
    }
    let bad: Vec<String> = files
        .iter()
        .flat_map(|(rel, top, code)| layer_violations(rel, top, code))
        .collect();
    assert!(bad.is_empty(), "layering violations:\n{}", bad.join("\n"));
}

#[test]
fn no_thread_local_in_train_or_backend() {
    let files = sources();
    for m in NO_THREAD_LOCAL {
        assert!(
            files.iter().any(|(_, top, _)| top == m),
            "tidy: no module `{m}` in src/"
        );
    }
    let bad: Vec<String> = files
        .iter()
        .filter(|(_, top, code)| NO_THREAD_LOCAL.contains(&top.as_str()) && uses_thread_local(code))
        .map(|(rel, _, _)| format!("src/{}: thread-local state", rel.display()))
        .collect();
    assert!(
        bad.is_empty(),
        "pass the backend as an argument instead:\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let g = graph(&sources());
    let bad = cycle_problems(&cycles(&g), KNOWN_CYCLES);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn every_test_file_is_a_test_target() {
    let root = root();
    let targets = test_targets();
    let mut files = Vec::new();
    for dir in ["tests", "theorems"] {
        for p in rs_files(&root.join(dir)) {
            let rel = p.strip_prefix(&root).unwrap();
            files.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    assert!(files.iter().any(|f| f == "tests/tidy.rs"), "{files:?}");
    let texts: Vec<String> = targets
        .iter()
        .filter_map(|t| std::fs::read_to_string(root.join(t)).ok())
        .collect();
    let bad = unrun_tests(&files, &targets, &texts);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    for t in &targets {
        assert!(root.join(t).is_file(), "[[test]] path {t} does not exist");
    }
}

#[test]
fn doc_formulas_survive_markdown() {
    let src = root().join("src");
    let mut bad = Vec::new();
    for p in rs_files(&src) {
        let text = std::fs::read_to_string(&p).unwrap();
        let rel = p.strip_prefix(root()).unwrap().display().to_string();
        for (line, what) in doc_formula_problems(&text) {
            bad.push(format!("{rel}:{line}: `{what}` inside a formula"));
        }
    }
    assert!(
        bad.is_empty(),
        "Markdown changes these before KaTeX sees the formula (write \\lVert…\\rVert, \
         \\thinspace, \\thickspace, \\lbrace…\\rbrace, \\ast, `\\_` for a subscript after \
         punctuation; see rule 6):\n{}",
        bad.join("\n")
    );
}
