//! The switch study (docs/theory.md §11) on the sweep engine: its spec refuses bad keys and
//! values naming them; a tiny seeded study writes the same bytes twice and resumes without
//! recomputing; a planted head whose sink logit is −∞ is never classified as using the
//! learned sink (and one whose sink logit dominates is); the verdicts count what the records
//! hold.

use sinklab::sweep::switch_study::{
    Outcome, Record, StudySpec, Task, Variant, is_switch_study, read_results, run_on, tally,
};

const TINY: &str = r#"
experiment = "switch_study"
name = "tiny"
tasks = ["bigram-copy", "copy-paste"]
variants = ["bos", "sink-logit"]
frozen = [false, true]
t = [6]
seeds = [0]
d = 8
r = 8
steps = 60
batch = 4
lr = 0.01
weight_decay = 0.01
n = 6
k = 2
target_acc_on = 0.9
eval_batch = 4
"#;

fn refused(text: &str) -> String {
    StudySpec::from_toml_named(text, "spec.toml")
        .expect_err("the spec must be refused")
        .to_string()
}

#[test]
fn the_spec_refuses_bad_keys_and_values_naming_them() {
    let spec = StudySpec::from_toml_named(TINY, "spec.toml").unwrap();
    // bos has no frozen control: 2 tasks × (bos + sink-logit + sink-logit frozen).
    assert_eq!(spec.points().len(), 6);
    assert!(is_switch_study(TINY));
    assert!(!is_switch_study("name = \"cost\""));
    let cases = [
        (TINY.replace("variants", "varients"), "varients"),
        (TINY.replace("\"sink-logit\"]", "\"sink\"]"), "sink"),
        (TINY.replace("t = [6]", "t = [3]"), "`t` = 3"),
        (TINY.replace("seeds = [0]", "seeds = [0, 0]"), "`seeds`"),
        (
            TINY.replace("frozen = [false, true]", "frozen = []"),
            "`frozen` = []",
        ),
        (TINY.replace("k = 2", "k = 6"), "`k` = 6"),
        (TINY.replace("lr = 0.01", "lr = -1.0"), "`lr` = -1"),
        (
            TINY.replace("target_acc_on = 0.9", "target_acc_on = 0.0"),
            "`target_acc_on` = 0",
        ),
        (
            format!("{TINY}\nfamily = \"nowhere\"\n"),
            "`family` = \"nowhere\"",
        ),
        (
            TINY.replace("experiment = \"switch_study\"", "experiment = \"other\""),
            "`experiment`",
        ),
    ];
    for (text, needle) in cases {
        let e = refused(&text);
        assert!(e.contains("spec.toml"), "{e}");
        assert!(e.contains(needle), "{needle:?} not named in: {e}");
    }
    // Only frozen controls of variants without a mechanism: nothing to run.
    let e = refused(
        &TINY
            .replace("[\"bos\", \"sink-logit\"]", "[\"bos\", \"masked\"]")
            .replace("frozen = [false, true]", "frozen = [true]"),
    );
    assert!(e.contains("`frozen`"), "{e}");
}

#[test]
fn a_tiny_seeded_study_writes_the_same_bytes_twice() {
    let spec = StudySpec::from_toml_named(TINY, "tiny").unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut bytes = Vec::new();
    for name in ["a", "b"] {
        let dir = tmp.path().join(name);
        let s = pool
            .install(|| run_on(&spec, &dir, None, false, 1))
            .unwrap();
        assert_eq!((s.total, s.computed, s.failed), (6, 6, 0), "{s:?}");
        bytes.push(std::fs::read(dir.join("results.jsonl")).unwrap());
    }
    assert_eq!(bytes[0], bytes[1], "two runs of one seeded study differ");
    // Two threads: the file's order may differ, the records (read sorted by id) may not.
    let dir = tmp.path().join("c");
    run_on(&spec, &dir, None, false, 1).unwrap();
    let a = read_results(&tmp.path().join("a/results.jsonl")).unwrap();
    let c = read_results(&dir.join("results.jsonl")).unwrap();
    assert_eq!(a, c);
    // Resume: nothing left to compute.
    let s = pool
        .install(|| run_on(&spec, &tmp.path().join("a"), None, false, 1))
        .unwrap();
    assert_eq!((s.skipped, s.computed), (6, 0));
    // The frozen control keeps s at its initial 0; the trained sink logit leaves it.
    for r in &a {
        let o = r.outcome.as_ref().expect("every tiny run finishes");
        match (r.variant, r.frozen) {
            (Variant::SinkLogit, true) => assert_eq!(o.sink_logit, Some(0.0), "{r:?}"),
            (Variant::SinkLogit, false) => {
                assert!(o.sink_logit.is_some_and(|s| s != 0.0), "{r:?}")
            }
            _ => assert_eq!(o.sink_logit, None, "{r:?}"),
        }
        assert!(o.qk_nuclear >= o.qk_fro && o.qk_fro > 0.0, "{r:?}");
    }
}

/// A head whose sink logit is planted at −∞ puts no mass on the sink column: whatever its
/// attention does, no off-query is assigned the learned sink. The same head with the sink
/// logit planted far above its logits is (the classifier can say yes).
#[test]
fn a_sink_logit_frozen_at_minus_infinity_is_never_a_learned_sink() {
    use rand::SeedableRng;
    use sinklab::train::{
        AttnForm, GateForm, Model, ModelConfig, Switches, TaskSpec, TrainConfig, switch_use_of,
    };
    for seed in 0..6u64 {
        for (t, task) in [
            (
                8,
                TaskSpec::BigramCopy {
                    n: 6,
                    k: 2,
                    alpha: 0.3,
                },
            ),
            (
                12,
                TaskSpec::CopyPaste {
                    n: 6,
                    k: 2,
                    family: sinklab::tasks::SourceFamily::PrevAfterTrigger,
                },
            ),
        ] {
            let switches = Switches {
                sink_logit: true,
                gate: GateForm::Off,
                ..Switches::OFF
            };
            let cfg = TrainConfig {
                task,
                t,
                d: 8,
                attn: AttnForm::Factored { r: 8 },
                eval_batch: 8,
                seed,
                switches,
                freeze_switches: true,
                ..TrainConfig::default()
            };
            let mcfg = ModelConfig {
                vocab: 7,
                d: 8,
                max_len: t,
                layers: 1,
                attn: cfg.attn,
                mlp_hidden: 0,
                mask_bos_key: false,
                // Large weights: sharp attention rows, some of them on BOS or the diagonal.
                init_scale: 4.0,
                switches,
            };
            let mut model: Model<f32> =
                Model::new(mcfg, &mut rand::rngs::StdRng::seed_from_u64(seed)).unwrap();
            let k = model.switch_params()[0];
            for (s, learned) in [(f32::NEG_INFINITY, false), (1e4, true)] {
                model.params[k][(0, 0)] = s;
                let u = &switch_use_of(&model, &cfg).unwrap()[0];
                if learned {
                    assert_eq!(u.switch, "sink_logit", "s = {s}, seed {seed}: {u:?}");
                    assert!(u.sink_logit > 0.99, "{u:?}");
                } else {
                    assert_eq!(u.sink_logit, 0.0, "s = −∞, seed {seed}: {u:?}");
                    assert_ne!(u.switch, "sink_logit", "{u:?}");
                    assert_eq!(u.mean_sink_mass, Some(0.0), "{u:?}");
                }
            }
        }
    }
}

fn planted(task: Task, variant: Variant, frozen: bool, switch: &str, converged: bool) -> Record {
    Record {
        sink_logit_init: None,
        id: format!("{task}/{variant}/{frozen}/{switch}/{converged}"),
        task,
        variant,
        frozen,
        t: 8,
        seed: 0,
        outcome: Some(Outcome {
            switch: switch.into(),
            frac_gate: 0.0,
            frac_sink_logit: 0.0,
            frac_bos_sink: 0.0,
            frac_diagonal: 0.0,
            sink_mass: None,
            gate_mean: None,
            sink_logit: None,
            bos_score: 0.0,
            diagonal_score: 0.0,
            qk_fro: 1.0,
            qk_nuclear: 1.0,
            vo_fro: 1.0,
            vo_nuclear: 1.0,
            gate_w_fro: None,
            gate_b_norm: None,
            acc_on: 1.0,
            acc_off: 0.5,
            eval_loss: 1.0,
            steps_run: 100,
            converged,
        }),
        error: None,
    }
}

/// The verdict sentences count the records: planted outcomes give the sentences' numbers and
/// the direction of each comparison; unconverged runs are left out.
#[test]
fn the_verdicts_count_what_the_records_hold() {
    let b = Task::BigramCopy;
    let mut recs = vec![
        planted(b, Variant::Bos, false, "bos_sink", true),
        planted(b, Variant::Bos, false, "bos_sink", true),
        planted(b, Variant::Bos, false, "mixed", true),
        planted(b, Variant::SinkLogit, false, "sink_logit", true),
        planted(b, Variant::SinkLogit, false, "bos_sink", true),
        planted(b, Variant::SinkLogit, false, "bos_sink", false),
        planted(b, Variant::SinkLogit, true, "bos_sink", true),
        planted(b, Variant::SinkLogit, true, "bos_sink", true),
    ];
    let v = tally::verdicts(&recs, b);
    let sl = v.iter().find(|s| s.contains("sink-logit")).unwrap();
    assert!(
        sl.contains("the BOS sink forms in 1 of 2 runs against 2 of 3"),
        "{sl}"
    );
    assert!(sl.contains("less often than without"), "{sl}");
    assert!(
        sl.contains("learned sink logit carries it in 1 of 2"),
        "{sl}"
    );
    assert!(
        sl.contains("Frozen control (s = 0): the BOS sink forms in 2 of 2"),
        "{sl}"
    );
    // 1 of 2 against 2 of 2: Fisher's exact test gives p = 1, no change is attributed.
    assert!(sl.contains("p = 1.00), a difference within chance"), "{sl}");
    assert!(!sl.contains("attributable"), "{sl}");
    // 0 of 10 trained against 10 of 10 frozen: p = 2/C(20,10) ≈ 1.1e-5, attributed.
    let mut many = recs.clone();
    many.retain(|r| r.variant != Variant::SinkLogit);
    for _ in 0..10 {
        many.push(planted(b, Variant::SinkLogit, false, "sink_logit", true));
        many.push(planted(b, Variant::SinkLogit, true, "bos_sink", true));
    }
    let v = tally::verdicts(&many, b);
    let sl = v.iter().find(|s| s.contains("sink-logit")).unwrap();
    assert!(
        sl.contains("p = 1.1e-5), a change attributable to training it"),
        "{sl}"
    );
    // The other way round: the trained runs form the BOS sink as often as the frozen ones.
    recs[3] = planted(b, Variant::SinkLogit, false, "bos_sink", true);
    let v = tally::verdicts(&recs, b);
    let sl = v.iter().find(|s| s.contains("sink-logit")).unwrap();
    assert!(sl.contains("does not change how often"), "{sl}");
    assert!(sl.contains("more often than without"), "{sl}");
    // A study without the bos variant, its sink logit started at 4.28 (trained) and kept there
    // (frozen): the sentence names the start and compares with no absent variant.
    let started: Vec<Record> = [(false, "sink_logit"), (true, "sink_logit")]
        .into_iter()
        .map(|(frozen, sw)| Record {
            sink_logit_init: Some(4.28),
            ..planted(b, Variant::SinkLogit, frozen, sw, true)
        })
        .collect();
    let v = tally::verdicts(&started, b);
    let sl = v.iter().find(|s| s.contains("sink-logit")).unwrap();
    assert!(sl.contains("(its sink logit started at s₀ = 4.28)"), "{sl}");
    assert!(
        sl.contains("Frozen control (the sink logit kept at its start, s₀ = 4.28)"),
        "{sl}"
    );
    assert!(!sl.contains("with the BOS key alone"), "{sl}");
}

/// The committed results (`sims/switch_study.results.jsonl`) hold a finished record of every
/// point of `sims/switch_study.toml` (ids hash each run's whole configuration and the crate
/// version: an edited spec or a new version needs the study rerun), and the default report
/// section reads them without training anything.
#[test]
fn the_committed_results_cover_the_spec_and_feed_the_section() {
    use sinklab::sweep::switch_study::section::{COMMITTED_RESULTS, DEFAULT_SPEC, committed_for};
    let spec = StudySpec::from_toml_named(DEFAULT_SPEC, "sims/switch_study.toml").unwrap();
    let recs = committed_for(&spec, COMMITTED_RESULTS)
        .expect("sims/switch_study.results.jsonl does not cover sims/switch_study.toml: rerun `sinklab sweep sims/switch_study.toml`");
    assert_eq!(recs.len(), spec.points().len());
    let tmp = tempfile::tempdir().unwrap();
    let ctx = sinklab::section::ReportCtx {
        out_dir: tmp.path().to_path_buf(),
        seed: 0,
        quick: false,
    };
    let s = sinklab::sweep::switch_study::section::report_section(&ctx).unwrap();
    assert!(
        s.markdown.contains("read from the committed"),
        "{}",
        s.markdown
    );
    assert!(
        !tmp.path().join("sweeps").exists(),
        "the section trained runs"
    );
    assert_eq!(s.figures.len(), 4, "{:?}", s.figures);
    assert!(s.figures.iter().all(|f| f.exists()));
}

/// docs/theory.md §11 quotes the study's counts table as the committed results give it, row for
/// row (`section::counts_table`: converged runs per class, summed over T, and the runs left out).
#[test]
fn theory_quotes_the_study_counts() {
    use sinklab::sweep::switch_study::section::{
        COMMITTED_RESULTS, DEFAULT_SPEC, committed_for, counts_table,
    };
    let spec = StudySpec::from_toml_named(DEFAULT_SPEC, "sims/switch_study.toml").unwrap();
    let Some(recs) = committed_for(&spec, COMMITTED_RESULTS) else {
        panic!("the committed results do not cover the spec");
    };
    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let theory = norm(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/theory.md")).unwrap(),
    );
    let table = counts_table(&recs);
    let rows: Vec<&str> = table.lines().skip(2).collect();
    assert_eq!(
        rows.len(),
        16,
        "2 tasks × 8 (variant, frozen) groups:\n{table}"
    );
    for row in rows {
        assert!(
            theory.contains(&norm(row)),
            "docs/theory.md §11 does not quote the row `{row}`"
        );
    }
}

/// The sink-logit start study (`sims/switch_study_sink_init.toml`, s₀ = ln(T(1−ε)/ε)): its
/// committed results cover its spec, every record carries its start, and docs/theory.md §11
/// quotes its counts with the comparison against the s = 0 runs of the main study at the same
/// T, whose Fisher p-values are recomputed here from both files.
#[test]
fn theory_quotes_the_sink_logit_start_study() {
    use sinklab::sweep::switch_study::section::{COMMITTED_RESULTS, committed_for, counts_table};
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/sims/switch_study_sink_init.toml")).unwrap();
    let spec = StudySpec::from_toml_named(&text, "sims/switch_study_sink_init.toml").unwrap();
    let results =
        std::fs::read_to_string(format!("{root}/sims/switch_study_sink_init.results.jsonl"))
            .unwrap();
    let recs = committed_for(&spec, &results)
        .expect("rerun `sinklab sweep sims/switch_study_sink_init.toml`");
    assert_eq!(recs.len(), spec.points().len());
    for r in &recs {
        let e = sinklab::train::SWITCH_EPS;
        let s0 = (r.t as f64 * (1.0 - e) / e).ln();
        assert_eq!(r.sink_logit_init, Some(s0), "{}", r.id);
    }
    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let theory = norm(&std::fs::read_to_string(format!("{root}/docs/theory.md")).unwrap());
    for row in counts_table(&recs).lines().skip(2) {
        assert!(
            theory.contains(&norm(row)),
            "docs/theory.md §11 does not quote the row `{row}`"
        );
    }
    // Copy-paste, trained: the start against s = 0 at the same T (the main study's runs).
    let main: Vec<Record> = COMMITTED_RESULTS
        .lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter(|r| r.variant == Variant::SinkLogit && !r.frozen && spec.t.contains(&r.t))
        .collect();
    let count = |rs: &[Record], frozen: bool, switch: &str| {
        let conv: Vec<&Record> = rs
            .iter()
            .filter(|r| r.task == Task::CopyPaste && r.frozen == frozen)
            .filter(|r| r.outcome.as_ref().is_some_and(|o| o.converged))
            .collect();
        let k = conv
            .iter()
            .filter(|r| r.outcome.as_ref().unwrap().switch == switch)
            .count();
        (k, conv.len())
    };
    for (switch, name) in [("sink_logit", "learned sink"), ("bos_sink", "BOS sink")] {
        let (a, b) = (count(&recs, false, switch), count(&main, false, switch));
        let quote = format!(
            "{name} in {} of {} runs against {} of {} from s = 0 (Fisher's exact test p = {:.2})",
            a.0,
            a.1,
            b.0,
            b.1,
            tally::fisher_exact(a, b)
        );
        assert!(theory.contains(&norm(&quote)), "§11 does not say: {quote}");
    }
}

/// Fisher's exact test against values computed by hand: the lady tasting tea (3 of 4 against
/// 1 of 4: p = 34/70) and a complete separation (0 of 10 against 10 of 10: p = 2/C(20,10)).
#[test]
fn fisher_exact_matches_hand_computed_values() {
    let tea = tally::fisher_exact((3, 4), (1, 4));
    assert!((tea - 34.0 / 70.0).abs() < 1e-12, "{tea}");
    let sep = tally::fisher_exact((0, 10), (10, 10));
    assert!((sep - 2.0 / 184_756.0).abs() < 1e-15, "{sep}");
    // Equal fractions: every table is at most as likely as the observed (the mode), p = 1 up to
    // the rounding of a sum of exponentials.
    assert!((tally::fisher_exact((2, 5), (2, 5)) - 1.0).abs() < 1e-12);
    assert_eq!(tally::fisher_exact((0, 0), (3, 4)), 1.0);
}
