//! `sinklab view`: the page's blob survives hostile token strings, its numbers are those of
//! `sinklab real --json`, and the page passes its own self-test (`page.html#selftest`: no
//! console error, canvases not blank, a grid click changes the map, zoom, hover, token strip,
//! PNG and SVG export) in headless Chromium with the network disabled, on SmolLM2 (10 tokens)
//! and on a T = 2048 page of SmolLM2's shape (30 layers × 9 heads, synthetic maps, built through
//! the same pooling and encoding; a real forward at T = 2048 is too slow for a debug-build test).
//!
//! Without a browser (`chromium`, or `SINKLAB_CHROMIUM`) the browser parts print `SKIP:` and
//! fail instead under `SINKLAB_REQUIRE_BROWSER=1` (set by `.ci/run`); without SmolLM2 in the
//! cache the model test skips, failing under `SINKLAB_REQUIRE_MODELS=1`.

use sinklab::real::stats::{HeadStats, LayerStats};
use sinklab::view::maps::{self, MapObserver, PooledHead};
use sinklab::view::{DetectorView, ViewData};
#[path = "support/browser.rs"]
mod browser;
use browser::chromium;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The DOM of `url` after headless Chromium ran its scripts for at most `budget_ms` of virtual
/// time (network disabled), with the status and stderr of the browser process.
fn dump_dom(browser: &Path, url: &str, budget_ms: u32) -> (String, String) {
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
            "--window-size=1300,1400",
            "--dump-dom",
        ])
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .output()
        .expect("running chromium");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        format!(
            "chromium status {:?}, stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn file_url(page: &Path) -> String {
    format!("file://{}", page.canonicalize().unwrap().display())
}

/// Loads `page#selftest` headless with the network disabled; returns the verdict JSON and the
/// wall time of the browser process.
fn selftest(browser: &Path, page: &Path) -> (serde_json::Value, Duration) {
    let t0 = Instant::now();
    let (dom, diag) = dump_dom(browser, &format!("{}#selftest", file_url(page)), 20000);
    let wall = t0.elapsed();
    let open = r#"<pre id="selftest-result">"#;
    let i = dom
        .find(open)
        .unwrap_or_else(|| panic!("no self-test result in the DOM; {diag}"))
        + open.len();
    let j = i + dom[i..].find("</pre>").unwrap();
    let text = dom[i..j]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let v: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("self-test result is not JSON ({e}): {text}"));
    (v, wall)
}

fn assert_selftest_ok(v: &serde_json::Value) {
    assert_eq!(v["ok"], true, "self-test failed: {v:#}");
    assert_eq!(v["errors"].as_array().map(Vec::len), Some(0), "{v:#}");
}

fn head(alpha: f64) -> HeadStats {
    HeadStats {
        alpha_first: alpha,
        dominant: 0,
        dominant_mass: alpha,
        routed_frac: 0.0,
        min_a: 0.0,
        value_norm_ratio: None,
        class: None,
        row_entropy: None,
        learned_sink_mass: None,
    }
}

fn layer(l: usize, heads: Vec<HeadStats>) -> LayerStats {
    LayerStats {
        layer: l,
        attn_to_first: Some(heads.iter().map(|h| h.alpha_first).sum::<f64>() / heads.len() as f64),
        bos_cos_mean: 0.1,
        bos_cos_frac_nonpos: 0.2,
        bos_cos_q: [-0.1, 0.1, 0.3],
        hidden_norm_first: 10.0 + l as f64,
        hidden_norm_median: 2.0,
        sink_gu_eps03: None,
        sink_gu_eps08: None,
        massive: vec![],
        mean_token_cos: 0.1,
        key_norm_ratio_first: None,
        value_norm_ratio_first: None,
        learned_sink_mass: None,
        heads,
    }
}

/// A synthetic page of `l × h` heads at `t` positions: in layer l every head puts mass
/// s_l = (l + 1)/(L + 1) on key 0 and spreads the rest uniformly over keys 1..=i (row 0: all on
/// key 0), pooled and encoded by the library's own functions.
fn synthetic(l_n: usize, h_n: usize, t: usize, tokens: Vec<String>) -> ViewData {
    let mut obs = MapObserver::new(sinklab::view::DEFAULT_MAX_RES, vec![]);
    let r = maps::resolution(t, obs.max_res);
    let mut layers = Vec::new();
    let mut a = vec![0f32; t * t];
    for l in 0..l_n {
        let s = (l + 1) as f32 / (l_n + 1) as f32;
        for i in 0..t {
            a[i * t] = if i == 0 { 1.0 } else { s };
            for j in 1..=i {
                a[i * t + j] = (1.0 - s) / i as f32;
            }
        }
        let q8 = maps::quantise(&maps::max_pool(&a, t, r, true));
        for hh in 0..h_n {
            obs.pooled.push(PooledHead {
                layer: l,
                head: hh,
                q8: q8.clone(),
                sink_q8: None,
            });
        }
        // α₀ = (1/T)(1 + (T − 1) s) for every head of the layer.
        let alpha = (1.0 + (t - 1) as f64 * s as f64) / t as f64;
        layers.push(layer(l, (0..h_n).map(|_| head(alpha)).collect()));
    }
    let (maps_q8, exact) = sinklab::view::encode_maps(&obs);
    ViewData {
        schema: 1,
        source: "synthetic".into(),
        n_layer: l_n,
        n_head: h_n,
        t,
        causal: true,
        res: r,
        bos_first: Some(true),
        tokens: None,
        token_text: tokens,
        layers,
        maps_q8,
        exact,
        sink_q8: None,
        detector: DetectorView::unavailable("synthetic page: no hidden states".into()),
        token_curves: None,
        realised: None,
    }
}

#[test]
fn blob_survives_script_closing_token_strings_and_round_trips() {
    let toks = [
        "</script><script>alert(1)</script>",
        "<!--",
        "a&b\"c",
        "\u{2028}é",
    ];
    let d = synthetic(2, 3, 4, toks.iter().map(|s| s.to_string()).collect());
    let html = sinklab::view::render(&d).unwrap();
    // The template's two script elements close once each; the token strings add no closing tag.
    assert_eq!(html.matches("</script>").count(), 2);
    assert_eq!(html.matches("<script").count(), 2);
    let back = sinklab::view::extract(&html).expect("blob parses");
    assert_eq!(back, serde_json::to_value(&d).unwrap());
    assert_eq!(back["token_text"][0], toks[0]);
}

/// Token text is data: a token that is an `<img onerror>` handler or closes the script element
/// is shown as text in the page, and neither handler runs while the page loads or while its
/// self-test clicks, hovers and zooms through it. The control page, the same payload as markup,
/// runs its handler, so the check can see one.
#[test]
fn hostile_token_text_runs_no_handler_in_the_page() {
    let Some(b) = chromium() else { return };
    let img = r#"<img src=x onerror="document.body.setAttribute('data-pwned','img')">"#;
    let script = "</script><script>document.body.setAttribute('data-pwned','script')</script>";
    let toks = [img, " a", script, "\u{1b}[31m b"];
    let d = synthetic(2, 3, 4, toks.iter().map(|s| s.to_string()).collect());
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("control.html");
    std::fs::write(
        &control,
        format!("<!DOCTYPE html><html><body>{img}</body></html>"),
    )
    .unwrap();
    let (dom, diag) = dump_dom(&b, &file_url(&control), 5000);
    assert!(
        dom.contains("data-pwned=\"img\""),
        "the control page did not run its handler, so the check cannot see one; {diag}"
    );
    let page = dir.path().join("page.html");
    std::fs::write(&page, sinklab::view::render(&d).unwrap()).unwrap();
    let (dom, diag) = dump_dom(&b, &file_url(&page), 5000);
    // The blob holds the payload as text; an attribute set by a handler reads `data-pwned="…"`.
    assert!(
        !dom.contains("data-pwned=\""),
        "a handler ran on load: {diag}"
    );
    assert!(
        dom.contains("&lt;img src=x onerror="),
        "the token text is shown as text in the page: {dom}"
    );
    let (v, _) = selftest(&b, &page);
    assert_selftest_ok(&v);
    let (dom, _) = dump_dom(&b, &format!("{}#selftest", file_url(&page)), 20000);
    if let Some(i) = dom.find("data-pwned=\"") {
        panic!(
            "a handler ran during the self-test: …{}…",
            &dom[i.saturating_sub(300)..(i + 100).min(dom.len())]
        );
    }
}

/// A page whose heads carry a learned-sink mass offers it as a grid statistic: switching to it
/// redraws the grid (the self-test's `grid_shows_sink_mass`) and switching back restores α₀; a
/// page without one offers no such statistic (the check is absent from its self-test).
#[test]
fn learned_sink_mass_is_a_grid_statistic_when_present() {
    let Some(b) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let plain = synthetic(2, 3, 4, (0..4).map(|i| format!("t{i}")).collect());
    let page = dir.path().join("plain.html");
    std::fs::write(&page, sinklab::view::render(&plain).unwrap()).unwrap();
    let (v, _) = selftest(&b, &page);
    assert_selftest_ok(&v);
    assert!(v["checks"].get("grid_shows_sink_mass").is_none(), "{v:#}");
    let mut d = plain;
    for (l, ly) in d.layers.iter_mut().enumerate() {
        for (h, hs) in ly.heads.iter_mut().enumerate() {
            // Masses unlike α₀ (constant per layer): a gradient over heads.
            hs.learned_sink_mass = Some(0.1 + 0.3 * h as f64 + 0.05 * l as f64);
        }
    }
    let page = dir.path().join("sink.html");
    let html = sinklab::view::render(&d).unwrap();
    assert!(html.contains("learned_sink_mass"));
    std::fs::write(&page, html).unwrap();
    let (v, _) = selftest(&b, &page);
    assert_selftest_ok(&v);
    assert_eq!(v["checks"]["grid_shows_sink_mass"], true, "{v:#}");
    assert_eq!(v["checks"]["grid_back_from_sink_mass"], true, "{v:#}");
    assert!(v["checks"].get("sink_column_drawn").is_none(), "{v:#}");
    // With per-row sink masses each map gets a column beside it: drawn, and its hover names
    // the learned sink with the row's value (row 3 of head 0's column: 0.75).
    let cols: Vec<u8> = maps::quantise(&[0.0, 0.25, 0.5, 0.75]);
    d.sink_q8 = Some(vec![sinklab::view::base64(&cols); 2 * 3]);
    let page = dir.path().join("column.html");
    std::fs::write(&page, sinklab::view::render(&d).unwrap()).unwrap();
    let (v, _) = selftest(&b, &page);
    assert_selftest_ok(&v);
    assert_eq!(v["checks"]["sink_column_drawn"], true, "{v:#}");
    assert_eq!(v["checks"]["sink_column_hover"], true, "{v:#}");
    assert!(v["sink_hover"].as_str().unwrap().contains("0.749"), "{v:#}");
}

#[test]
fn payload_formula_counts_the_encoded_maps() {
    // 3 layers × 2 heads at T = 300 pooled to R = 256: 6 · 4⌈(256·257/2)/3⌉ base64 bytes.
    let d = synthetic(3, 2, 300, (0..300).map(|i| format!("t{i}")).collect());
    let got: usize = d.maps_q8.iter().map(String::len).sum();
    assert_eq!(d.res, 256);
    assert_eq!(got, 6 * 4 * (256 * 257 / 2usize).div_ceil(3));
    // Without token curves the payload is the maps' part of the formula.
    let curves = 2 * sinklab::view::base64_len(4 * 3 * 300);
    assert_eq!(
        got,
        sinklab::view::payload_bytes(3, 2, 300, 256, true, 0) - curves
    );
}

/// T = 2048 at SmolLM2's shape: the file size is bounded by the payload formula plus the
/// template and a per-layer / per-token allowance for the JSON statistics, and the page loads
/// and passes its self-test within 60 s of browser wall time (stated bound, on a shared CI
/// machine; the page's own script time is reported in the message).
#[test]
fn long_page_of_smollm2_shape_stays_within_its_size_bound_and_loads() {
    let (l, h, t) = (30, 9, 2048);
    let d = synthetic(l, h, t, (0..t).map(|i| format!("tok{i}")).collect());
    let html = sinklab::view::render(&d).unwrap();
    let payload = sinklab::view::payload_bytes(l, h, t, 256, true, 0);
    // No token curves in the synthetic page.
    let maps_only = payload - 2 * sinklab::view::base64_len(4 * l * t);
    let bound = maps_only + sinklab::view::TEMPLATE.len() + 4096 * l + 64 * t;
    assert!(
        html.len() <= bound,
        "page {} bytes > bound {bound}",
        html.len()
    );
    assert!(html.len() >= maps_only, "the maps are in the page");
    let Some(b) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("long.html");
    std::fs::write(&page, &html).unwrap();
    let (v, wall) = selftest(&b, &page);
    assert_selftest_ok(&v);
    assert_eq!(v["t"], 2048);
    assert!(
        wall < Duration::from_secs(60),
        "T = 2048 page: {wall:?} of browser wall time (bound 60 s); script {} ms",
        v["load_ms"]
    );
    eprintln!(
        "T = 2048 page: {} bytes, browser wall {:?}, page script {} ms",
        html.len(),
        wall,
        v["load_ms"]
    );
}

/// SmolLM2 on a short text: the page's `layers` equal `sinklab real --json`'s field for field,
/// the detector's labels come with it, and the page passes its self-test in Chromium.
#[test]
fn smollm2_page_equals_real_json_and_passes_its_browser_selftest() {
    if sinklab::runtime::fetch::cached("smollm2").is_none() {
        assert!(
            std::env::var("SINKLAB_REQUIRE_MODELS").as_deref() != Ok("1"),
            "smollm2 not fetched"
        );
        eprintln!("SKIP: smollm2 not fetched (sinklab fetch smollm2)");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_sinklab");
    let text = "The quick brown fox jumps over the lazy dog";
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("v.html");
    let out = Command::new(bin)
        .args([
            "view", "--model", "smollm2", "--text", text, "--heads", "2.3", "--a1", "--out",
        ])
        .arg(&page)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let real = Command::new(bin)
        .args(["real", "--model", "smollm2", "--text", text, "--json"])
        .output()
        .unwrap();
    assert!(
        real.status.success(),
        "{}",
        String::from_utf8_lossy(&real.stderr)
    );
    let real: serde_json::Value = serde_json::from_slice(&real.stdout).unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    let d = sinklab::view::extract(&html).expect("the page's blob");
    assert_eq!(
        d["layers"], real["layers"],
        "the page's statistics are the report's"
    );
    assert_eq!(d["tokens"], real["tokens"]);
    let t = real["tokens"].as_array().unwrap().len();
    assert_eq!(d["t"], t);
    assert_eq!(d["maps_q8"].as_array().unwrap().len(), 30 * 9);
    // T < 256: no pooling, the 8-bit lower triangle of every head; one exact head.
    assert_eq!(d["res"], t);
    assert_eq!(
        d["maps_q8"][0].as_str().unwrap().len(),
        4 * (t * (t + 1) / 2).div_ceil(3)
    );
    assert_eq!(d["exact"][0]["layer"], 2);
    assert_eq!(d["exact"][0]["head"], 3);
    assert!(d["detector"]["error"].is_null(), "{}", d["detector"]);
    assert_eq!(d["detector"]["variant"], "faithful");
    // --a1: every head's realised-sink fraction is the one `sinklab real --a1 --json` reports.
    let a1 = Command::new(bin)
        .args([
            "real", "--model", "smollm2", "--text", text, "--a1", "--json",
        ])
        .output()
        .unwrap();
    assert!(
        a1.status.success(),
        "{}",
        String::from_utf8_lossy(&a1.stderr)
    );
    let a1: serde_json::Value = serde_json::from_slice(&a1.stdout).unwrap();
    let heads = a1["a1_pooled"]["heads"]
        .as_array()
        .expect("a1_pooled.heads");
    assert_eq!(heads.len(), 30 * 9);
    let grid = &d["realised"]["Ok"];
    for h in heads {
        let (l, k) = (h["layer"].as_u64().unwrap(), h["head"].as_u64().unwrap());
        let got = grid[l as usize][k as usize].as_f64().unwrap();
        assert_eq!(got, h["realised"].as_f64().unwrap(), "layer {l} head {k}");
    }
    let Some(b) = chromium() else { return };
    let (v, _) = selftest(&b, &page);
    assert_selftest_ok(&v);
    assert_eq!(v["checks"]["grid_shows_realised"], true, "{v:#}");
    assert_eq!(v["checks"]["grid_back_to_alpha"], true, "{v:#}");
}

/// Refusals name what is wrong: a bad `--heads` entry, an empty text, an input longer than
/// the model's context (exit status 2 each); a missing model is an error naming it.
#[test]
fn view_refusals_name_the_problem() {
    let bin = env!("CARGO_BIN_EXE_sinklab");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("x.html");
    let run = |args: &[&str]| {
        Command::new(bin)
            .arg("view")
            .args(args)
            .arg("--out")
            .arg(&page)
            .output()
            .unwrap()
    };
    let o = run(&["--model", "no-such-model-here", "--text", "a"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-model-here"));
    if sinklab::runtime::fetch::cached("smollm2").is_none() {
        eprintln!("SKIP: smollm2 not fetched: model refusals not run");
        return;
    }
    let o = run(&["--model", "smollm2", "--text", "a b", "--heads", "1.2,7x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("`7x`"));
    let o = run(&["--model", "smollm2", "--text", "a b", "--heads", "31.0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("30 layers"));
    let o = run(&["--model", "smollm2", "--text", ""]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("empty"));
    let long: String = vec!["1"; 8193].join(",");
    let o = run(&["--model", "smollm2", "--tokens", &long]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("exceed the context"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!page.exists(), "nothing written on a refusal");
}

/// An activations file with attention maps (written here, seeded) gives a page whose `layers`
/// equal `sinklab real --activations F --json`'s; a file without `attn.{l}` is refused (exit 2).
#[test]
fn activations_page_equals_real_activations_json_and_a_file_without_maps_is_refused() {
    use sinklab::runtime::activation_file::{Activations, HeadTensor};
    use sinklab::runtime::hidden::HiddenStates;
    let (l, t, d, h) = (3, 6, 8, 2);
    let mut s = 7u64;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let hidden: Vec<f32> = (0..l * t * d).map(|_| next()).collect();
    // Causal softmax rows of seeded logits.
    let attn: Vec<HeadTensor> = (0..l)
        .map(|_| {
            let mut a = vec![0f32; h * t * t];
            for hh in 0..h {
                for i in 0..t {
                    let e: Vec<f32> = (0..=i).map(|_| (3.0 * next()).exp()).collect();
                    let z: f32 = e.iter().sum();
                    for (j, v) in e.iter().enumerate() {
                        a[(hh * t + i) * t + j] = v / z;
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
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("act.safetensors");
    act.write(&f).unwrap();
    let bin = env!("CARGO_BIN_EXE_sinklab");
    let page = dir.path().join("a.html");
    let o = Command::new(bin)
        .args(["view", "--heads", "1.1", "--activations"])
        .arg(&f)
        .arg("--out")
        .arg(&page)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let real = Command::new(bin)
        .args(["real", "--json", "--activations"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(real.status.success());
    let real: serde_json::Value = serde_json::from_slice(&real.stdout).unwrap();
    let v = sinklab::view::extract(&std::fs::read_to_string(&page).unwrap()).unwrap();
    assert_eq!(v["layers"], real["layers"]);
    assert_eq!(
        v["causal"], true,
        "zero above the diagonal: the causal layout"
    );
    assert_eq!(v["exact"][0]["head"], 1);
    // The golden fixture has hidden states only.
    let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/secondary_golden/smollm2_0.safetensors");
    let o = Command::new(bin)
        .args(["view", "--activations"])
        .arg(&golden)
        .arg("--out")
        .arg(dir.path().join("b.html"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no attn.{l} tensors"));
}
