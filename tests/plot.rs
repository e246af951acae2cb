//! Figures checked by test: legends cover no data, ticks are nice numbers that
//! span the data, no text leaves the canvas, one legend entry per series, and
//! `sinklab plot` redraws a figure from its data file byte for byte.

#[path = "support/cli.rs"]
mod cli;
use cli::bin;
use proptest::prelude::*;
use sinklab::plot::scene::Scene;
use sinklab::plot::{self, Figure, Heatmap, Options, Panel, Series, Style, ticks};
use std::path::Path;

/// Every property the issue asks of a drawn figure.
fn check_scene(sc: &Scene, what: &str) {
    let canvas = plot::scene::Rect::new(0.0, 0.0, sc.width, sc.height);
    for t in sc.text_boxes() {
        // 0.01 pt: the SVG writes coordinates to two decimals.
        assert!(
            canvas.contains(&t, 0.01),
            "{what}: text {t:?} outside the canvas {canvas:?}"
        );
    }
    for (i, f) in sc.panels.iter().enumerate() {
        if let Some(l) = f.legend {
            for m in &f.marks {
                assert!(
                    !l.intersects(m),
                    "{what} panel {i}: legend {l:?} covers marker {m:?}"
                );
            }
            for &(a, b) in &f.segments {
                assert!(
                    !l.hits_segment(a, b),
                    "{what} panel {i}: legend covers a line"
                );
            }
            assert!(
                canvas.contains(&l, 0.01),
                "{what} panel {i}: legend outside the canvas"
            );
        }
        let mut seen = f.entries.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(
            seen.len(),
            f.entries.len(),
            "{what} panel {i}: a label listed twice"
        );
        for (ts, (lo, hi), log) in [
            (&f.x_ticks, f.x_data, f.log.0),
            (&f.y_ticks, f.y_data, f.log.1),
        ] {
            if ts.is_empty() && lo == hi {
                continue;
            }
            assert!(
                ts.len() >= 2,
                "{what} panel {i}: ticks {ts:?} for data {lo}..{hi}"
            );
            // Covered: no end gap wider than the widest tick step, measured where the
            // ticks are evenly spaced (axis coordinates; values for a narrow log axis).
            let covers = |ts: &[f64], lo: f64, hi: f64| {
                let gap = ts.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
                let tol = 1e-9 * (1.0 + lo.abs().max(hi.abs()));
                ts[0] - lo <= gap + tol && hi - ts[ts.len() - 1] <= gap + tol
            };
            let vals: Vec<f64> = ts.iter().map(|p| 10f64.powf(*p)).collect();
            assert!(
                covers(ts, lo, hi) || log && covers(&vals, 10f64.powf(lo), 10f64.powf(hi)),
                "{what} panel {i}: ticks {ts:?} leave data {lo}..{hi} uncovered"
            );
            for &t in ts.iter() {
                assert!(
                    nice(t, log, ts),
                    "{what} panel {i}: tick {t} of {ts:?} is not a nice number"
                );
            }
        }
    }
}

/// A tick is nice: a multiple of a 1-2-5 step on a linear axis; on a log axis a
/// value $m \times 10^k$ with $m \in \{1, 2, 5\}$ or a multiple of a 1-2-5 step.
fn nice(t: f64, log: bool, all: &[f64]) -> bool {
    let vals: Vec<f64> = if log {
        all.iter().map(|p| 10f64.powf(*p)).collect()
    } else {
        all.to_vec()
    };
    let v = if log { 10f64.powf(t) } else { t };
    if log && ticks::is_one_two_five(v) {
        return true;
    }
    let step = vals
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(f64::INFINITY, f64::min);
    let k = v / step;
    ticks::is_one_two_five(step)
        && (k - k.round()).abs() < 1e-6
        && vals
            .windows(2)
            .all(|w| ((w[1] - w[0]) / step - 1.0).abs() < 1e-6)
        || v == 0.0
}

fn scaling_panel(n: usize, slope: f64, log: bool) -> Panel {
    let mut series = Vec::new();
    for c in 0..n {
        let pts: Vec<(f64, f64)> = (3..10)
            .map(|k| {
                let t = 2f64.powi(k);
                (t, (1.0 + c as f64) * t.powf(slope + 0.1 * c as f64))
            })
            .collect();
        let name = format!(
            "pattern {c}: T^{{{:.2}}} [{:.2}, {:.2}]",
            slope,
            slope - 0.05,
            slope + 0.05
        );
        let mut line = Series::new(name.clone(), pts.clone(), Style::Dashed, c);
        line.band = pts.iter().map(|&(x, y)| (x, 0.9 * y, 1.1 * y)).collect();
        series.push(line);
        series.push(Series::new(name, pts, Style::Points, c));
    }
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.clone()).collect();
    series.extend(plot::slope_guide("T^{1}", 1.0, &all, true));
    series.extend(plot::slope_guide("T^{3/2}", 1.5, &all, false));
    Panel {
        title: "cost: nuclear".into(),
        x_label: "T".into(),
        y_label: "minimal cost".into(),
        log_x: log,
        log_y: log,
        series,
        ..Default::default()
    }
}

#[test]
fn scaling_figure_has_one_entry_per_series_and_guides() {
    let fig = Figure::Panels {
        title: "Cost against T".into(),
        panels: vec![
            scaling_panel(3, 1.0, true),
            scaling_panel(1, 1.5, true),
            scaling_panel(2, 0.5, false),
        ],
    };
    let sc = plot::layout(&fig, &Options::default()).unwrap();
    check_scene(&sc, "scaling");
    // Line + markers of a pattern are one entry; the two guides are two more.
    assert_eq!(
        sc.panels[0].entries.len(),
        3 + 2,
        "{:?}",
        sc.panels[0].entries
    );
    assert!(sc.panels[0].entries.iter().any(|e| e == "T^{3/2}"));
    // Log axes over T = 8..512: decade ticks 10 and 100 (axis coordinates 1 and 2).
    assert_eq!(sc.panels[0].x_ticks, vec![1.0, 2.0]);
    // The figure title is drawn once, at the title size.
    let titles = sc
        .prims
        .iter()
        .filter(|p| matches!(p, plot::scene::Prim::Text { s, .. } if s == "Cost against T"))
        .count();
    assert_eq!(titles, 1);
}

#[test]
fn single_panel_titled_like_the_figure_draws_the_title_once() {
    let p = Panel {
        title: "model: BOS cosine".into(),
        series: vec![Series::new(
            "a",
            vec![(0.0, 1.0), (1.0, 2.0), (2.0, 1.5)],
            Style::LinePoints,
            0,
        )],
        ..Default::default()
    };
    let sc = plot::layout(
        &Figure::Panels {
            title: p.title.clone(),
            panels: vec![p],
        },
        &Options::default(),
    )
    .unwrap();
    let n = sc
        .prims
        .iter()
        .filter(|x| matches!(x, plot::scene::Prim::Text { s, .. } if s == "model: BOS cosine"))
        .count();
    assert_eq!(n, 1);
    check_scene(&sc, "single");
}

#[test]
fn heatmap_colour_bar_stays_inside_the_canvas() {
    // Wide tick labels (−1234.5 … ) are the case that used to be cut at the right edge.
    let values: Vec<Vec<f64>> = (0..12)
        .map(|r| {
            (0..17)
                .map(|c| {
                    if (r + c) % 5 == 0 {
                        f64::NAN
                    } else {
                        -1234.5 + 97.3 * (r * c) as f64
                    }
                })
                .collect()
        })
        .collect();
    let h = Heatmap {
        title: "levels: log10 count".into(),
        x_label: "lifetime".into(),
        y_label: "layer".into(),
        values,
        ..Default::default()
    };
    for w in [2.0, 3.4, 7.0] {
        let sc = plot::layout(
            &Figure::Heatmap(h.clone()),
            &Options {
                width_in: Some(w),
                ..Default::default()
            },
        )
        .unwrap();
        check_scene(&sc, "heatmap");
        assert!(sc.prims.iter().any(
            |p| matches!(p, plot::scene::Prim::Text { s, vertical: true, .. } if s == "log10 count")
        ));
    }
}

fn random_panel() -> impl Strategy<Value = Panel> {
    (
        prop::collection::vec(
            (
                prop::collection::vec((0.01f64..1e4, -1e3f64..1e3), 1..25),
                0usize..4,
                0usize..8,
                "[a-z]{1,12}( [a-z]{1,20}){0,3}",
            ),
            1..6,
        ),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(ss, lx, ly)| Panel {
            title: "random panel".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: lx,
            log_y: ly,
            series: ss
                .into_iter()
                .enumerate()
                .map(|(i, (pts, st, c, name))| {
                    let pts = pts
                        .into_iter()
                        .map(|(x, y)| (x, if ly { y.abs() + 1e-3 } else { y }))
                        .collect();
                    let style = [Style::Points, Style::Line, Style::LinePoints, Style::Dashed][st];
                    Series::new(format!("{name} {i}"), pts, style, c)
                })
                .collect(),
            ..Default::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, rng_seed: proptest::test_runner::RngSeed::Fixed(16), ..ProptestConfig::default() })]
    #[test]
    fn random_figures_keep_every_rule(panels in prop::collection::vec(random_panel(), 1..5), w in 2.5f64..9.0) {
        let sc = plot::layout(&Figure::Panels { title: "random".into(), panels }, &Options { width_in: Some(w), ..Default::default() }).unwrap();
        check_scene(&sc, "random");
    }
}

#[test]
fn sinklab_plot_redraws_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let stem = dir.path().join("scaling");
    plot::render(
        &stem,
        "Cost against T",
        &[scaling_panel(2, 1.0, true), scaling_panel(1, 1.5, true)],
    )
    .unwrap();
    let h = Heatmap {
        title: "h: α".into(),
        x_label: "head".into(),
        y_label: "layer".into(),
        values: vec![vec![0.1, f64::NAN], vec![0.5, 0.9]],
        ..Default::default()
    };
    plot::render_heatmap(&dir.path().join("heat"), &h).unwrap();
    let out = dir.path().join("again");
    for name in ["scaling", "heat"] {
        let st = bin()
            .args([
                "plot",
                dir.path().join(format!("{name}.json")).to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(st.status.success(), "{}", cli::stderr(&st));
        for ext in ["svg", "png"] {
            let a = std::fs::read(dir.path().join(format!("{name}.{ext}"))).unwrap();
            let b = std::fs::read(out.join(format!("{name}.{ext}"))).unwrap();
            assert!(a == b, "{name}.{ext}: redraw differs");
        }
    }
    // Style options change the drawing, not the data: a wider PNG, larger text.
    let st = bin()
        .args([
            "plot",
            stem.with_extension("json").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--width",
            "5",
            "--font-size",
            "10",
            "--linear",
        ])
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", cli::stderr(&st));
    let png = std::fs::read(out.join("scaling.png")).unwrap();
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 1500);
    let svg = std::fs::read_to_string(out.join("scaling.svg")).unwrap();
    assert!(svg.contains(r#"font-size="10""#) && svg.contains("<text"));
}

fn plot_err(path: &Path, extra: &[&str]) -> String {
    let mut c = bin();
    c.arg("plot").arg(path).args(extra);
    let st = c.output().unwrap();
    assert!(!st.status.success(), "{path:?} should be refused");
    let e = cli::stderr(&st).to_string();
    assert!(!e.contains("panicked"), "{e}");
    e
}

#[test]
fn bad_data_files_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let w = |name: &str, s: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, s).unwrap();
        p
    };
    let e = plot_err(&w("a.json", "not json"), &[]);
    assert!(e.contains("a.json") && e.contains("not JSON"), "{e}");
    let e = plot_err(&w("b.json", r#"{"format": "other/2", "figure": {}}"#), &[]);
    assert!(e.contains("other/2"), "{e}");
    let e = plot_err(&w("c.json", r#"{"figure": {}}"#), &[]);
    assert!(e.contains("no \"format\""), "{e}");
    let e = plot_err(
        &w(
            "d.json",
            r#"{"format": "sinklab-figure/1", "figure": {"kind": "panels", "title": "", "panels": [], "colour": 3}}"#,
        ),
        &[],
    );
    assert!(e.contains("colour"), "{e}");
    let e = plot_err(
        &w(
            "e.json",
            r#"{"format": "sinklab-figure/1", "figure": {"kind": "panels", "title": "", "panels": []}}"#,
        ),
        &[],
    );
    assert!(e.contains("no finite point"), "{e}");
    let e = plot_err(&dir.path().join("missing.json"), &[]);
    assert!(e.contains("missing.json"), "{e}");
    plot::render_heatmap(
        &dir.path().join("h"),
        &Heatmap {
            title: "t".into(),
            x_label: String::new(),
            y_label: String::new(),
            values: vec![vec![1.0, 2.0]],
            ..Default::default()
        },
    )
    .unwrap();
    let e = plot_err(&dir.path().join("h.json"), &["--log"]);
    assert!(e.contains("heat-map"), "{e}");
    let e = plot_err(&dir.path().join("h.json"), &["--width", "0.1"]);
    assert!(e.contains("--width"), "{e}");
}

/// Every data file of a report directory (`SINKLAB_FIGURE_DIR=out/figures`, or
/// `out/secondary/<model>`) keeps every rule.
#[test]
fn report_figures_keep_every_rule() {
    let Some(dir) = std::env::var_os("SINKLAB_FIGURE_DIR") else {
        eprintln!("SINKLAB_FIGURE_DIR unset: skipping the check of a report's figures");
        return;
    };
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        // Other JSON files (claims.json, …) share the directory: only figure data files count.
        let is_fig = p.extension().is_some_and(|x| x == "json")
            && std::fs::read_to_string(&p).is_ok_and(|s| s.contains(plot::data::FORMAT));
        if is_fig {
            let fig = plot::data::read(&p).unwrap();
            let sc = plot::layout(&fig, &Options::default()).unwrap();
            check_scene(&sc, &p.display().to_string());
            n += 1;
        }
    }
    assert!(n > 0, "no data file in {dir:?}");
}

/// Issue 25: two data files with one stem drawn into one `--out` directory are refused (one
/// overwrote the other's SVG and PNG); beside their own data files they are drawn.
#[test]
fn two_data_files_with_one_stem_into_one_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["a", "b"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
        plot::render(
            &dir.path().join(sub).join("fig"),
            sub,
            &[scaling_panel(1, 1.0, true)],
        )
        .unwrap();
    }
    let a = dir.path().join("a/fig.json");
    let b = dir.path().join("b/fig.json");
    let out = dir.path().join("out");
    let e = plot_err(&a, &[b.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(
        e.contains("a/fig.json") && e.contains("b/fig.json") && e.contains("one stem"),
        "{e}"
    );
    assert!(!out.join("fig.svg").exists(), "drew before refusing");
    let st = bin().arg("plot").arg(&a).arg(&b).output().unwrap();
    assert!(st.status.success(), "{}", cli::stderr(&st));
}

/// A cost sweep small enough for a test: three seeds per Gaussian point, so every plotted
/// point is a geometric mean of three.
const SWEEP: &str = r#"
name = "tiny"
bootstrap = 200
[[exact]]
patterns = ["sink", "diagonal"]
norms = ["fro"]
embeddings = ["gaussian"]
t = [4, 6, 8, 12, 16]
d_factor = 2
seeds = [0, 1, 2]
delta = 5.0
"#;

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn num(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

/// The geometric means of `samples` ({x, y, seed} objects) per x, and the seeds at each x.
fn geometric_means(samples: &serde_json::Value) -> Vec<(f64, f64, Vec<u64>)> {
    let mut by_x: Vec<(f64, f64, Vec<u64>)> = Vec::new();
    for s in samples.as_array().unwrap() {
        let (x, y) = (num(&s["x"]), num(&s["y"]));
        let seed = s["seed"].as_u64().unwrap();
        match by_x.iter_mut().find(|e| e.0 == x) {
            Some(e) => {
                e.1 += y.ln();
                e.2.push(seed);
            }
            None => by_x.push((x, y.ln(), vec![seed])),
        }
    }
    by_x.into_iter()
        .map(|(x, s, seeds)| (x, (s / seeds.len() as f64).exp(), seeds))
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    // The same logarithms summed in another order: a few ulps of the result.
    (a / b - 1.0).abs() <= 1e-12
}

#[test]
fn sweep_figure_data_holds_the_seeds_units_palette_and_fits() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("tiny.toml");
    std::fs::write(&spec, SWEEP).unwrap();
    let out = dir.path().join("out");
    let st = bin()
        .args([
            "sweep",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .args(["--threads", "2"])
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", cli::stderr(&st));
    let records: Vec<serde_json::Value> = std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fits = json(&out.join("fit.json"));
    let fig = json(&out.join("figures/cost_scaling.json"));
    assert_eq!(fig["format"], plot::data::FORMAT);
    let panels = fig["figure"]["panels"].as_array().unwrap();
    assert_eq!(panels.len(), 1, "one norm");
    let p = &panels[0];
    assert_eq!(
        (p["x_label"].as_str(), p["x_unit"].as_str()),
        (Some("T"), Some("tokens"))
    );
    assert_eq!(p["y_unit"], "1");
    let (mut n_agg, mut n_fit) = (0, 0);
    for s in p["series"].as_array().unwrap() {
        // The palette: the colour and marker each index is drawn with.
        let c = s["color"].as_u64().unwrap() as usize;
        assert_eq!(s["rgb"], plot::style::color(c).hex(), "{s}");
        assert_eq!(
            s["marker"],
            plot::data::marker_name(plot::style::marker(c)),
            "{s}"
        );
        let name = s["name"].as_str().unwrap();
        if !s["aggregate"].is_null() {
            // Every drawn point is the geometric mean of its seeds' values, which are the
            // records' own values.
            n_agg += 1;
            assert_eq!(s["aggregate"]["kind"], "geometric_mean");
            let pattern = name.split(' ').next().unwrap();
            let means = geometric_means(&s["aggregate"]["samples"]);
            let pts = s["points"].as_array().unwrap();
            assert_eq!(means.len(), pts.len(), "{name}");
            for (q, (x, gm, seeds)) in pts.iter().zip(&means) {
                assert_eq!(num(&q[0]), *x);
                assert!(
                    close(num(&q[1]), *gm),
                    "{name} at T = {x}: {} vs {gm}",
                    q[1]
                );
                assert_eq!(seeds, &vec![0, 1, 2], "{name} at T = {x}");
            }
            for smp in s["aggregate"]["samples"].as_array().unwrap() {
                let r = records
                    .iter()
                    .find(|r| {
                        r["pattern"] == pattern
                            && num(&r["t"]) == num(&smp["x"])
                            && r["seed"] == smp["seed"]
                    })
                    .expect("a record behind every sample");
                assert_eq!(num(&r["value"]), num(&smp["y"]));
            }
        }
        if !s["fit"].is_null() {
            // The fitted exponent and its interval, as numbers: fit.json's, drawn as the
            // dashed line e^a T^b and stated (rounded) in the legend.
            n_fit += 1;
            let f = &s["fit"];
            assert_eq!(f["law"], "power");
            let pattern = name.split(' ').next().unwrap();
            let g = fits
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["pattern"] == pattern)
                .expect("a fit per pattern");
            for k in ["exponent", "intercept", "ci_low", "ci_high", "level", "n"] {
                assert_eq!(f[k], g["fit"][k], "{name}: {k}");
            }
            let (a, b) = (num(&f["intercept"]), num(&f["exponent"]));
            for q in s["points"].as_array().unwrap() {
                let (x, y) = (num(&q[0]), num(&q[1]));
                assert!(
                    ((a + b * x.ln()).exp() / y - 1.0).abs() < 1e-9,
                    "{name} at {x}"
                );
            }
            let stated = format!(
                "T^{{{b:.2}}} [{:.2}, {:.2}]",
                num(&f["ci_low"]),
                num(&f["ci_high"])
            );
            assert!(name.ends_with(&stated), "{name} does not state {stated}");
            assert!(num(&f["ci_low"]) <= b && b <= num(&f["ci_high"]), "{f}");
        }
    }
    assert_eq!(
        (n_agg, n_fit),
        (2, 2),
        "sink and diagonal: points and fitted line"
    );
    // The ratio figure: each point is the ratio of the two geometric means.
    let ratio = json(&out.join("figures/cost_ratio.json"));
    let s = &ratio["figure"]["panels"][0]["series"][0];
    assert_eq!(s["aggregate"]["kind"], "ratio_of_geometric_means");
    let num_means = geometric_means(&s["aggregate"]["numerator"]);
    let den_means = geometric_means(&s["aggregate"]["denominator"]);
    let pts = s["points"].as_array().unwrap();
    assert_eq!((num_means.len(), den_means.len()), (pts.len(), pts.len()));
    for ((q, n), d) in pts.iter().zip(&num_means).zip(&den_means) {
        assert_eq!((num(&q[0]), num(&q[0])), (n.0, d.0));
        assert!(close(num(&q[1]), n.1 / d.1), "ratio at T = {}", n.0);
    }
    // And the new fields do not change the drawing: the redraw is the same SVG.
    let again = dir.path().join("again");
    for name in ["cost_scaling", "cost_ratio"] {
        let data = out.join(format!("figures/{name}.json"));
        let st = bin()
            .arg("plot")
            .arg(&data)
            .arg("--out")
            .arg(&again)
            .output()
            .unwrap();
        assert!(st.status.success(), "{}", cli::stderr(&st));
        let a = std::fs::read(out.join(format!("figures/{name}.svg"))).unwrap();
        let b = std::fs::read(again.join(format!("{name}.svg"))).unwrap();
        assert!(a == b, "{name}.svg: redraw differs");
    }
}

/// A format-1 file (before units, palette, aggregates and fits) is still drawn, the same;
/// a format-2 file whose derived fields are missing or disagree with what is drawn is refused.
#[test]
fn format_one_is_read_and_derived_fields_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let stem = dir.path().join("s");
    let mut p = scaling_panel(2, 1.0, true);
    p.x_unit = "tokens".into();
    plot::render(&stem, "Cost against T", &[p]).unwrap();
    let v2 = json(&stem.with_extension("json"));
    // Format 1: the same figure without the fields format 2 added.
    let mut v1 = v2.clone();
    v1["format"] = "sinklab-figure/1".into();
    for p in v1["figure"]["panels"].as_array_mut().unwrap() {
        let p = p.as_object_mut().unwrap();
        p.remove("x_unit");
        p.remove("y_unit");
        for s in p["series"].as_array_mut().unwrap() {
            let s = s.as_object_mut().unwrap();
            for k in ["rgb", "marker", "aggregate", "fit"] {
                s.remove(k);
            }
        }
    }
    let old = dir.path().join("old");
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join("s.json"), v1.to_string()).unwrap();
    let st = bin().arg("plot").arg(old.join("s.json")).output().unwrap();
    assert!(st.status.success(), "{}", cli::stderr(&st));
    assert!(
        std::fs::read(old.join("s.svg")).unwrap()
            == std::fs::read(stem.with_extension("svg")).unwrap(),
        "format 1 draws the same figure"
    );
    let bad = |edit: &dyn Fn(&mut serde_json::Value), phrases: &[&str]| {
        let mut v = v2.clone();
        edit(&mut v["figure"]["panels"][0]["series"][1]);
        let f = dir.path().join("bad.json");
        std::fs::write(&f, v.to_string()).unwrap();
        let e = plot_err(&f, &[]);
        for ph in phrases {
            assert!(e.contains(ph), "{ph:?} not in {e}");
        }
    };
    bad(
        &|s| {
            s.as_object_mut().unwrap().remove("rgb");
        },
        &["panels[0].series[1].rgb", "missing"],
    );
    bad(&|s| s["rgb"] = "#123456".into(), &["rgb", "\"color\""]);
    bad(&|s| s["marker"] = "star".into(), &["marker", "\"color\""]);
    // A heat-map states its colour map and the value range it spans.
    let h = Heatmap {
        title: "heads: α".into(),
        values: vec![vec![0.25, f64::NAN], vec![0.5, 0.75]],
        ..Default::default()
    };
    plot::render_heatmap(&dir.path().join("h"), &h).unwrap();
    let v = json(&dir.path().join("h.json"));
    assert_eq!(v["figure"]["colormap"], "viridis");
    assert_eq!(v["figure"]["value_label"], "α");
    assert_eq!(v["figure"]["value_range"], serde_json::json!([0.25, 0.75]));
    let mut w = v.clone();
    w["figure"]["value_range"] = serde_json::json!([0.0, 1.0]);
    std::fs::write(dir.path().join("h2.json"), w.to_string()).unwrap();
    let e = plot_err(&dir.path().join("h2.json"), &[]);
    assert!(e.contains("value_range"), "{e}");
}

/// A least-squares line is stated as numbers too: the slope and intercept it is drawn with.
#[test]
fn scatter_line_states_its_fit() {
    let dir = tempfile::tempdir().unwrap();
    let pts: Vec<(f64, f64)> = (0..12)
        .map(|i| {
            let x = 1.0 + i as f64;
            (x, 0.5 + 0.25 * x + if i % 2 == 0 { 0.1 } else { -0.1 })
        })
        .collect();
    let stem = dir.path().join("norms");
    sinklab::secondary::figures::norm_scatters(
        &stem,
        "synthetic",
        (pts.clone(), &None),
        (pts.clone(), &None),
    )
    .unwrap();
    let v = json(&stem.with_extension("json"));
    let fit_line = v["figure"]["panels"][0]["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| !s["fit"].is_null())
        .expect("the OLS line carries its fit")
        .clone();
    let f = &fit_line["fit"];
    assert_eq!(
        (f["law"].as_str(), f["n"].as_u64()),
        (Some("linear"), Some(12))
    );
    let (a, b) = (num(&f["intercept"]), num(&f["slope"]));
    // The alternating ±0.1 residuals cancel over each pair: the line is 0.5 + 0.25 x.
    assert!((b - 0.25).abs() < 0.01 && (a - 0.5).abs() < 0.1, "{f}");
    for q in fit_line["points"].as_array().unwrap() {
        let (x, y) = (num(&q[0]), num(&q[1]));
        assert!(
            (a + b * x - y).abs() < 1e-12,
            "drawn line off the stated fit at {x}"
        );
    }
    assert!(num(&f["r2"]) > 0.9 && num(&f["r2"]) <= 1.0, "{f}");
}
