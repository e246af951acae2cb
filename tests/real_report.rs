//! The `real_models` report section on the cached SmolLM2 (quick mode): tables, A1/A2 verdict
//! lines and both figures are written. Skips with a reason when the model is not fetched
//! (fails instead under `SINKLAB_REQUIRE_MODELS=1`).

use sinklab::real::section;
use sinklab::report::ReportCtx;
use sinklab::runtime::fetch;

#[test]
fn real_models_section_writes_tables_verdicts_and_figures() {
    if fetch::cached("smollm2").is_none() {
        assert!(
            std::env::var("SINKLAB_REQUIRE_MODELS").as_deref() != Ok("1"),
            "smollm2 not fetched"
        );
        eprintln!("SKIP: smollm2 not fetched (sinklab fetch smollm2)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ctx = ReportCtx {
        out_dir: dir.path().to_path_buf(),
        seed: 0,
        quick: true,
    };
    std::fs::create_dir_all(ctx.fig_dir()).unwrap();
    let s = section::section(&ctx).unwrap();
    assert!(s.markdown.contains("### smollm2"), "{}", s.markdown);
    assert!(
        s.markdown.contains("A1 verdict") && s.markdown.contains("A2 over 270 heads"),
        "{}",
        s.markdown
    );
    // 30 layers: one row per layer in the statistics table (24 tokens) and one in the pooled
    // A1 table (`head_space`), one row per statistic of the A1 split by attention to
    // position 0 (`sink_control`; SmolLM2 has no no-sink first token), and the off and random
    // rows of the A3 table.
    assert_eq!(
        s.markdown
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| layer"))
            .filter(|l| !l.starts_with("| statistic"))
            .filter(|l| !l.starts_with("| pairs"))
            .count(),
        60 + sinklab::real::sink_control::STATISTICS.len() + 2
    );
    // A3 on real heads (`hard_switch_real`): off and random pairs (no no-sink run in quick).
    assert!(
        s.markdown
            .contains("**A3 (hard switch ⇒ sink, docs/theory.md §4).**")
            && s.markdown.contains("| off, `")
            && s.markdown.contains("*A3 verdict:*"),
        "{}",
        s.markdown
    );
    assert!(
        s.markdown.contains("Split by attention to position 0")
            && s.markdown
                .contains("*Split by attention:* evidence of a sink is"),
        "{}",
        s.markdown
    );
    // The A1 section names its spaces and carries its null controls.
    assert!(
        s.markdown.contains("Null controls: ordinary tokens"),
        "{}",
        s.markdown
    );
    assert!(
        s.markdown.contains("in the raw residual stream and"),
        "{}",
        s.markdown
    );
    assert!(
        s.figures.len() >= 2 && s.figures.iter().all(|f| f.exists()),
        "{:?}",
        s.figures
    );
}

/// The full (non-quick) section on the cached models, printed with its wall time:
/// `cargo test --test real_report full_section -- --ignored --nocapture`.
#[test]
#[ignore]
fn full_section_prints() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ReportCtx {
        out_dir: dir.path().to_path_buf(),
        seed: 0,
        quick: false,
    };
    std::fs::create_dir_all(ctx.fig_dir()).unwrap();
    let t0 = std::time::Instant::now();
    let s = section::section(&ctx).unwrap();
    println!(
        "{}\nSECTION TIME {:.1} s",
        s.markdown,
        t0.elapsed().as_secs_f64()
    );
}
