//! Invariants of the source tree, checked on the files themselves (in the spirit of
//! rust-analyzer's `xtask/src/tidy.rs`):
//!
//! 0. **Layers**: every top-level module of `src/` is in exactly one of [`LAYERS`] (a new
//!    module fails until it is placed), and imports only modules listed before it, read from
//!    `crate::` paths and from `super::` paths that climb to the crate root: leaf, math,
//!    kernels, runtime (`budget`, `runtime`, `synth`: the runtime imports no study, report,
//!    plot or claim code), output (`plot`, `section`), experiments, presentation.
//! 1. **Leaf modules** (`outcome`) import nothing from the crate.
//! 2. **Math modules** and the kernel layer (`backend`) never touch the file system.
//! 3. **No import cycle** between top-level modules of `src/`, nor between files: the file
//!    graph resolves `crate::`, `super::` and `self::` paths (groups expanded, inline modules
//!    and `#[cfg(test)]` items accounted for) to the file of the deepest module named; a
//!    module's root file naming its own children is how it is assembled, not an edge. The
//!    allow-lists are empty.
//! 4. **Every test file runs**: each `.rs` file directly in `tests/` or `theorems/`
//!    is a `[[test]]` target of `Cargo.toml` (the package has `autotests = false`),
//!    and each `.rs` file in a subfolder is a module some target includes.
//! 5. **No hidden state in training and kernels**: no `thread_local!` in `src/train/`
//!    or `src/backend/` (the backend is an explicit argument, as faer passes `Par`;
//!    nothing is chosen by what a caller installed on the thread). Outside the binary, no
//!    global mutable state (`static mut`, a `static` lock, cell or atomic) and no implicit
//!    thread-pool lookup (`rayon::current_num_threads`, `current_thread_index`,
//!    `faer::get_global_parallelism`, `Par::rayon(0)`) beyond the sites of
//!    [`KNOWN_GLOBAL_STATE`], each with the reason it remains; the list only shrinks.
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
//! 7. **No module holds the house**: no top-level module of `src/` (a folder with its files, or
//!    one file; `lib.rs` and `main.rs` count alone) has more than a fifth of the lines of
//!    `src/`'s `.rs` files.
//!
//! "Imports" are the `crate::…` paths of a file (in `use` items or inline),
//! comments removed. The first tests below run the rules on planted inputs, so
//! each rule is shown to be able to fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers of `src/`, bottom first, each listing its top-level modules in order. A module
/// may import only modules listed before it (in its own layer or a lower one), every module is
/// in exactly one layer, and an unlisted module fails (rule 0).
const LAYERS: &[(&str, &[&str])] = &[
    ("leaf", &["outcome"]),
    (
        "math",
        &[
            "linalg",
            "stats",
            "fit",
            "attention",
            "patterns",
            "geometry",
            "switch",
            "explicit_switch",
            "oversmoothing",
            "cost",
            "tasks",
        ],
    ),
    ("kernels", &["backend", "quant"]),
    ("runtime", &["atomic", "budget", "runtime", "synth"]),
    ("output", &["plot", "section"]),
    ("experiments", &["train", "sweep", "real", "secondary"]),
    ("presentation", &["claims", "registry", "view", "report"]),
];

/// The modules of the named layers, in order.
fn layer(names: &[&str]) -> Vec<&'static str> {
    LAYERS
        .iter()
        .filter(|(n, _)| names.contains(n))
        .flat_map(|(_, ms)| ms.iter().copied())
        .collect()
}

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

/// Rule 5b: global mutable state and implicit thread-pool lookups in a (comment-free, test
/// items removed) source: `static mut`, a `static` holding a lock, cell or atomic, and the
/// calls that read the process's pool instead of a `Par`/thread count passed in
/// (`rayon::current_num_threads`, `rayon::current_thread_index`,
/// `faer::get_global_parallelism`, `Par::rayon(0)`). Each finding is `(what, line text)`.
fn global_state(code: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for line in code.lines() {
        let t = line.trim();
        let words: Vec<&str> = t
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        let is_static = words.first() == Some(&"static")
            || (words.first() == Some(&"pub") && words.contains(&"static"));
        if is_static && words.contains(&"mut") {
            out.push(("static mut", t.to_string()));
        } else if is_static
            && words.iter().any(|w| {
                matches!(*w, "Mutex" | "RwLock" | "RefCell" | "Cell" | "UnsafeCell")
                    || w.starts_with("Atomic")
            })
        {
            out.push(("global mutable state", t.to_string()));
        }
        for (needle, what) in [
            ("current_num_threads", "implicit pool lookup"),
            ("current_thread_index", "implicit pool lookup"),
            ("get_global_parallelism", "implicit pool lookup"),
            ("Par::rayon(0)", "implicit pool lookup"),
        ] {
            if t.contains(needle) {
                out.push((what, t.to_string()));
            }
        }
    }
    out
}

/// Sites of rule 5b that exist today, each with why it is still there (file under `src/`, the
/// needle found on the line). The list only shrinks: an entry that no longer matches fails.
const KNOWN_GLOBAL_STATE: &[(&str, &str, &str)] = &[
    (
        "backend/gpu/tensor.rs",
        "NEXT_TENSOR_ID",
        "process-unique tensor ids keying the bind-group cache; no value depends on it",
    ),
    (
        "runtime/weights.rs",
        "current_num_threads",
        "row-tile size of the dequantizing product: to take the caller's thread count",
    ),
    (
        "runtime/weights.rs",
        "Par::rayon(0)",
        "the dequantizing product's faer Par: to take the caller's Par",
    ),
];

/// Problems of rule 5b: findings not in `known`, and entries of `known` found nowhere.
fn global_state_problems(
    found: &[(String, &'static str, String)],
    known: &[(&str, &str, &str)],
) -> Vec<String> {
    let mut bad = Vec::new();
    for (file, what, line) in found {
        if !known
            .iter()
            .any(|(f, needle, _)| f == file && line.contains(needle))
        {
            bad.push(format!("src/{file}: {what}: `{line}`"));
        }
    }
    for (f, needle, _) in known {
        if !found
            .iter()
            .any(|(file, _, line)| file == f && line.contains(needle))
        {
            bad.push(format!(
                "KNOWN_GLOBAL_STATE entry ({f}, {needle}) is gone: remove it from tests/tidy.rs"
            ));
        }
    }
    bad
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

/// Top-level modules a file reaches through `super::` paths that climb to the crate root
/// (`super::super::plot` from `real/x.rs`).
fn super_imports(rel: &Path, code: &str) -> BTreeSet<String> {
    let depth = module_path(rel).map_or(0, |m| m.len());
    relative_paths(&strip_test_items(code))
        .into_iter()
        .filter_map(|(inline, path)| {
            let supers = path.iter().take_while(|s| *s == "super").count();
            (path.first().is_some_and(|s| s == "super") && supers.saturating_sub(inline) >= depth)
                .then(|| path.get(supers).cloned())
                .flatten()
        })
        .collect()
}

/// Violations of rules 0–2 for one file: imports out of the layer order (`order` is every
/// module, bottom first), leaf modules importing anything, math and kernels touching files.
fn layer_violations(rel: &Path, top: &str, code: &str) -> Vec<String> {
    layer_violations_in(&layer_order(), rel, top, code)
}

fn layer_order() -> Vec<&'static str> {
    LAYERS
        .iter()
        .flat_map(|(_, ms)| ms.iter().copied())
        .collect()
}

fn layer_violations_in(order: &[&str], rel: &Path, top: &str, code: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let (leaf, pure) = (layer(&["leaf"]), layer(&["math", "kernels"]));
    let mut imports: BTreeSet<String> = crate_imports(code);
    imports.extend(super_imports(rel, code));
    imports.remove(top);
    let Some(me) = order.iter().position(|m| *m == top) else {
        return vec![format!(
            "src/{}: module `{top}` is in no layer of tests/tidy.rs (add it to LAYERS)",
            rel.display()
        )];
    };
    for m in &imports {
        match order.iter().position(|o| o == m) {
            Some(k) if k < me => {}
            Some(_) => bad.push(format!(
                "src/{}: `{top}` imports crate::{m}, listed after it in LAYERS (an upward import)",
                rel.display()
            )),
            None => bad.push(format!(
                "src/{}: `{top}` imports crate::{m}, which is in no layer",
                rel.display()
            )),
        }
    }
    if leaf.contains(&top) {
        for m in &imports {
            bad.push(format!(
                "src/{}: leaf module `{top}` imports crate::{m}",
                rel.display()
            ));
        }
    }
    if pure.contains(&top) && uses_fs(code) {
        let which = if top == "backend" { "kernel" } else { "math" };
        bad.push(format!(
            "src/{}: {which} module `{top}` uses the file system",
            rel.display()
        ));
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
            bad.push(format!("import cycle: {c:?}"));
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

// ---- rule 3b: no import cycle between files ----

/// The module path of a file under `src/` (`a/b.rs` and `a/b/mod.rs` → `["a", "b"]`,
/// `lib.rs` → `[]`); `None` for the binary (`main.rs`, `cli/`), which is above every layer.
fn module_path(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "main.rs" || p == "cli") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if !matches!(stem, "mod" | "lib") {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// Source without its `#[cfg(test)]` items (test modules import their own file with
/// `super::*`, which is no dependency between files).
fn strip_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(k) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..k]);
        let after = &rest[k..];
        // The item ends at its `;` or at the brace that closes its first `{`.
        let (semi, brace) = (after.find(';'), after.find('{'));
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (_, Some(b)) => {
                let mut depth = 0usize;
                let mut end = after.len();
                for (j, c) in after[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + j + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (Some(s), None) => s + 1,
            (None, None) => after.len(),
        };
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Depth of inline `mod name {` blocks at each byte of a (comment-free) source.
fn inline_mod_depth(code: &str) -> Vec<u8> {
    let b = code.as_bytes();
    let mut depth = vec![0u8; b.len() + 1];
    // Stack of brace depths at which an inline module opened.
    let (mut braces, mut opened): (usize, Vec<usize>) = (0, Vec::new());
    let mut cur = 0u8;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'{' {
            braces += 1;
            let before = code[..i].trim_end();
            let word_start = before
                .char_indices()
                .rev()
                .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |(k, c)| k + c.len_utf8());
            let head = before[..word_start].trim_end();
            if !before[word_start..].is_empty() && (head.ends_with(" mod") || head == "mod") {
                opened.push(braces);
                cur += 1;
            }
        } else if b[i] == b'}' {
            if opened.last() == Some(&braces) {
                opened.pop();
                cur -= 1;
            }
            braces = braces.saturating_sub(1);
        }
        depth[i] = cur;
        i += 1;
    }
    depth
}

/// Every path a (comment-free) source names from `crate::`, `super::` or `self::`, each with
/// the inline-module depth where it stands; groups `a::{b, c::{d}}` are expanded.
fn relative_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    fn expand(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
        // s starts right after a `::`: either `{…}` or `ident[::rest]`.
        let s = s.trim_start();
        if let Some(group) = s.strip_prefix('{') {
            let (mut depth, mut start) = (0usize, 0usize);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        expand_item(&group[start..j], prefix, out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand_item(&group[start..j], prefix, out);
                        start = j + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let id = ident_at(s);
        if id.is_empty() {
            if s.starts_with('*') {
                out.push(prefix.to_vec());
            }
            return;
        }
        let mut p = prefix.to_vec();
        if id != "self" {
            p.push(id.to_string());
        }
        match s[id.len()..].strip_prefix("::") {
            Some(rest) => expand(rest, &p, out),
            None => out.push(p),
        }
    }
    fn expand_item(item: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let item = item.trim();
        if !item.is_empty() {
            expand(item, prefix, out);
        }
    }
    let depth = inline_mod_depth(code);
    let mut out = Vec::new();
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(k) = code[from..].find(root) {
            let at = from + k;
            from = at + root.len();
            let before = code[..at].chars().last();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == ':')
            {
                continue;
            }
            let head = root.trim_end_matches(':').to_string();
            let mut paths = Vec::new();
            expand(&code[from..], &[head], &mut paths);
            for p in paths {
                out.push((depth[at] as usize, p));
            }
        }
    }
    out
}

/// The file graph: file (relative to `src/`) → files it imports. A path resolves to the
/// deepest module with a file along it; a module's root file naming its own children
/// (declaring, re-exporting or using them) is how a module is assembled and not an edge.
fn file_graph(files: &[(PathBuf, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut by_module: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for (rel, _) in files {
        if let Some(m) = module_path(rel) {
            by_module.insert(m, rel.to_string_lossy().replace('\\', "/"));
        }
    }
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, code) in files {
        let Some(me) = module_path(rel) else {
            continue;
        };
        let name = rel.to_string_lossy().replace('\\', "/");
        let edges = g.entry(name.clone()).or_default();
        let code = strip_test_items(code);
        for (inline, path) in relative_paths(&code) {
            let mut base: Vec<String> = me.clone();
            let mut segs = path.as_slice();
            match segs.first().map(String::as_str) {
                Some("crate") => {
                    base.clear();
                    segs = &segs[1..];
                }
                Some("self") => segs = &segs[1..],
                _ => {
                    let supers = segs.iter().take_while(|s| *s == "super").count();
                    segs = &segs[supers..];
                    // `super` inside an inline module first leaves that module.
                    for _ in 0..supers.saturating_sub(inline) {
                        base.pop();
                    }
                }
            }
            let mut full = base;
            full.extend(segs.iter().cloned());
            let target = (0..=full.len())
                .rev()
                .find_map(|n| by_module.get(&full[..n]))
                .cloned();
            let Some(target) = target else { continue };
            let t = module_path(Path::new(&target)).unwrap_or_default();
            let is_my_child = t.len() == me.len() + 1 && t.starts_with(&me);
            if target != name && !is_my_child {
                edges.insert(target);
            }
        }
    }
    g
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
        "use crate::registry::CheckOutcome;",
        "use crate::train::TrainConfig;",
        "use crate::backend::Backend;",
        "use crate::sweep::Spec;",
        // Later in the same layer.
        "use crate::cost::solve;",
        "fn f() { std::fs::write(\"a\", \"b\").unwrap(); }",
    ] {
        assert_eq!(layer_violations(p, "switch", bad).len(), 1, "{bad}");
    }
    assert_eq!(
        layer_violations(Path::new("outcome.rs"), "outcome", "use crate::linalg;").len(),
        2,
        "a leaf importing anything, and upward"
    );
    // Between upper layers too, with no cycle closed: the runtime imports no study.
    assert_eq!(
        layer_violations(
            Path::new("runtime/mod.rs"),
            "runtime",
            "use crate::real::stats;"
        )
        .len(),
        1
    );
    assert_eq!(
        layer_violations(Path::new("real/a.rs"), "real", "use crate::secondary::x;").len(),
        1
    );
    assert!(layer_violations(Path::new("report.rs"), "report", "use crate::plot;").is_empty());
    // Written with `super::`: from `real/a.rs`, two steps reach the crate root.
    let climb = "use super::super::secondary::x;\nuse super::stats;";
    assert_eq!(
        layer_violations(Path::new("real/a.rs"), "real", climb).len(),
        1
    );
    // A module in no layer fails, and so does an import of one.
    let unlisted = layer_violations(Path::new("newthing.rs"), "newthing", "");
    assert!(unlisted[0].contains("in no layer"), "{unlisted:?}");
    assert_eq!(
        layer_violations(Path::new("report.rs"), "report", "use crate::newthing;").len(),
        1
    );
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

#[test]
fn planted_global_state_and_pool_lookups_are_flagged() {
    let code = strip_comments(
        "static N: AtomicU64 = AtomicU64::new(0);\npub static mut X: u8 = 0;\n\
         static C: OnceLock<Mutex<u8>> = OnceLock::new();\nstatic FONT: OnceLock<Font> = OnceLock::new();\n\
         let t = rayon::current_num_threads();\nlet p = Par::rayon(0);\n// rayon::current_thread_index()\n\
         let ok = Par::rayon(threads);",
    );
    let got: Vec<&str> = global_state(&code).into_iter().map(|(w, _)| w).collect();
    assert_eq!(
        got,
        [
            "global mutable state",
            "static mut",
            "global mutable state",
            "implicit pool lookup",
            "implicit pool lookup"
        ]
    );
    let found = vec![(
        "a.rs".to_string(),
        "implicit pool lookup",
        "f(current_num_threads())".into(),
    )];
    assert!(global_state_problems(&found, &[("a.rs", "current_num_threads", "")]).is_empty());
    assert_eq!(global_state_problems(&found, &[]).len(), 1);
    assert_eq!(
        global_state_problems(&[], &[("a.rs", "current_num_threads", "")]).len(),
        1,
        "a stale allowance fails"
    );
}

// ---- the rules on the tree ----

#[test]
fn no_global_state_or_implicit_pool_outside_the_binary() {
    let src = root().join("src");
    let mut found = Vec::new();
    for p in rs_files(&src) {
        let rel = p
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "main.rs" || rel.starts_with("cli/") {
            continue;
        }
        let code = strip_test_items(&strip_comments(&std::fs::read_to_string(&p).unwrap()));
        for (what, line) in global_state(&code) {
            found.push((rel.clone(), what, line));
        }
    }
    let bad = global_state_problems(&found, KNOWN_GLOBAL_STATE);
    assert!(
        bad.is_empty(),
        "pass state and threads as arguments (a faer Par, a thread count) instead:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_module_is_in_one_layer_and_imports_only_below() {
    let files = sources();
    let order = layer_order();
    // Each listed module exists and is listed once.
    for (k, m) in order.iter().enumerate() {
        assert!(
            files.iter().any(|(_, top, _)| top == m),
            "tidy: LAYERS names `{m}`, which is no module of src/"
        );
        assert!(
            !order[..k].contains(m),
            "tidy: `{m}` is listed twice in LAYERS"
        );
    }
    let bad: BTreeSet<String> = files
        .iter()
        .flat_map(|(rel, top, code)| layer_violations(rel, top, code))
        .collect();
    assert!(
        bad.is_empty(),
        "layering violations:\n{}",
        bad.into_iter().collect::<Vec<_>>().join("\n")
    );
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

/// The top-level modules holding more than `1/parts` of all lines, given each module's line count.
fn oversized(lines: &BTreeMap<String, usize>, parts: usize) -> Vec<String> {
    let total: usize = lines.values().sum();
    lines
        .iter()
        .filter(|&(_, &n)| n * parts > total)
        .map(|(m, &n)| format!("{m}: {n} of {total} lines (more than 1/{parts})"))
        .collect()
}

/// Lines of each top-level entry of `src/` (a folder with everything below it, or a file).
fn module_lines() -> BTreeMap<String, usize> {
    let src = root().join("src");
    let mut lines = BTreeMap::new();
    for p in rs_files(&src) {
        let rel = p.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let name = first.strip_suffix(".rs").unwrap_or(first).to_string();
        *lines.entry(name).or_insert(0) += std::fs::read_to_string(&p).unwrap().lines().count();
    }
    lines
}

#[test]
fn planted_oversized_modules_are_flagged() {
    let planted: BTreeMap<String, usize> = [("a", 20), ("b", 21), ("c", 19), ("d", 20), ("e", 20)]
        .map(|(m, n)| (m.to_string(), n))
        .into();
    assert_eq!(
        oversized(&planted, 5),
        vec!["b: 21 of 100 lines (more than 1/5)"]
    );
    let even: BTreeMap<String, usize> = (0..5).map(|i| (format!("m{i}"), 20)).collect();
    assert!(oversized(&even, 5).is_empty(), "exactly a fifth is allowed");
}

#[test]
fn no_top_level_module_holds_more_than_a_fifth() {
    let lines = module_lines();
    assert!(
        lines.len() > 10 && lines.contains_key("runtime"),
        "{lines:?}"
    );
    let bad = oversized(&lines, 5);
    assert!(bad.is_empty(), "split these (rule 7):\n{}", bad.join("\n"));
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

#[test]
fn no_import_cycle_between_files() {
    let src = root().join("src");
    let files: Vec<(PathBuf, String)> = rs_files(&src)
        .into_iter()
        .map(|p| {
            let code = strip_comments(&std::fs::read_to_string(&p).unwrap());
            (p.strip_prefix(&src).unwrap().to_path_buf(), code)
        })
        .collect();
    let g = file_graph(&files);
    assert!(g.len() > 100, "{} files read", g.len());
    let bad = cycle_problems(&cycles(&g), &[]);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn planted_file_cycles_are_found_through_super_self_and_groups() {
    let file = |p: &str, c: &str| (PathBuf::from(p), strip_comments(c));
    let files = [
        file("lib.rs", "pub mod a; pub mod b;"),
        file(
            "a/mod.rs",
            "pub mod x; pub mod y; pub use x::X; pub struct E;",
        ),
        // x → y through `super::{…}`, y → x through `self::`-free `crate::a::{x::X}`.
        file("a/x.rs", "use super::{E, y::Y}; pub struct X;"),
        file(
            "a/y.rs",
            "use crate::a::{x::{X}}; pub struct Y;\n#[cfg(test)] mod tests { use super::*; use crate::b::B; }",
        ),
        // An inline module's `super` stays in its file; `self::` stays in the module.
        file(
            "b.rs",
            "mod inner { use super::B; } use self::inner as _; pub struct B;",
        ),
    ];
    let g = file_graph(&files);
    assert_eq!(
        g["a/x.rs"],
        ["a/mod.rs".to_string(), "a/y.rs".into()].into()
    );
    assert_eq!(
        g["a/y.rs"],
        ["a/x.rs".to_string()].into(),
        "test items are not edges"
    );
    assert!(
        g["a/mod.rs"].is_empty(),
        "a root file naming its children is no edge"
    );
    assert!(g["b.rs"].is_empty(), "{:?}", g["b.rs"]);
    let found = cycles(&g);
    assert_eq!(found, vec![vec!["a/x.rs".to_string(), "a/y.rs".into()]]);
}
