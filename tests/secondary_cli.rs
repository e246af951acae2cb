//! `sinklab secondary --activations F`: one JSON record per detected sink,
//! matching the library detector; bad input is an error, not a panic.

#[path = "support/cli.rs"]
mod cli;
use cli::bin as sinklab;
use sinklab::secondary::synthetic::{SyntheticConfig, SyntheticModel};
use sinklab::secondary::{DetectorParams, LabelRule, detect};

#[test]
fn records_match_the_detector() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("act.safetensors");
    let cfg = SyntheticConfig {
        seed: 5,
        ..Default::default()
    };
    let model = SyntheticModel::new(cfg.clone()).unwrap();
    // Cone tokens get r from 0 to 15 by position: a mix of lifetimes.
    let rs: Vec<f64> = (0..cfg.tokens)
        .map(|t| 15.0 * t as f64 / cfg.tokens as f64)
        .collect();
    let act = model.activations(&rs);
    act.write(&path).unwrap();
    let out = sinklab()
        .args([
            "secondary",
            "--activations",
            path.to_str().unwrap(),
            "--json",
            "--bos-margin",
            "8",
            "--noise-max",
            "1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", cli::stderr(&out));
    let recs: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let p = DetectorParams {
        labels: LabelRule {
            bos_margin: 8,
            noise_max: 1,
        },
        ..Default::default()
    };
    let det = detect(&act.hidden, &p).unwrap();
    assert!(!det.sinks.is_empty());
    assert_eq!(recs.len(), det.sinks.len());
    for (r, s) in recs.iter().zip(&det.sinks) {
        assert_eq!(r["position"], s.position);
        assert_eq!(
            r["token"], s.position as i64,
            "synthetic token ids are positions"
        );
        assert_eq!(r["creation_layer"], s.creation_layer);
        assert_eq!(r["lifetime"], s.lifetime);
        assert_eq!(r["label"], s.label.as_str());
        assert_eq!(
            r["creation_layer"], cfg.creation_layer,
            "the planted MLP creates every sink"
        );
        // The MLP output at creation is r_t·u (f32 file): its norm is r_t.
        let norm = r["mlp_out_norm_at_creation"].as_f64().unwrap();
        assert!(
            (norm - rs[s.position]).abs() < 1e-5 * (1.0 + rs[s.position]),
            "{norm} vs {}",
            rs[s.position]
        );
        assert_eq!(r["sink_score"].as_array().unwrap().len(), cfg.layers);
        assert_eq!(r["hidden_norm"].as_array().unwrap().len(), cfg.layers);
        // B2 in the planted model: the MLP output is ±u, exactly the BOS direction.
        assert!((r["mlp_cos_bos_at_creation"].as_f64().unwrap().abs() - 1.0).abs() < 1e-6);
    }
    // Table output works too.
    let out = sinklab()
        .args(["secondary", "--activations", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("label"));
}

/// The saturation rule guards the activation-file path too: a file in which every token is
/// aligned with the BOS is reported as saturated, a file with a mix of lifetimes is not, each
/// exactly as the library's validity says.
#[test]
fn activation_files_get_the_saturation_rule() {
    let dir = tempfile::tempdir().unwrap();
    let base = SyntheticConfig {
        seed: 5,
        ..Default::default()
    };
    // Mixed: the default 8 cone tokens with r from 0 to 15. All: every token after the BOS in
    // the cone with a large MLP write, so every position ends up aligned with the BOS.
    let mixed: Vec<f64> = (0..base.tokens)
        .map(|t| 15.0 * t as f64 / base.tokens as f64)
        .collect();
    let all_cfg = SyntheticConfig {
        cone_tokens: base.tokens - 1,
        ..base.clone()
    };
    let mut seen = Vec::new();
    for (name, cfg, rs) in [
        ("mixed", base.clone(), mixed),
        ("all", all_cfg, vec![15.0; base.tokens]),
    ] {
        let model = SyntheticModel::new(cfg).unwrap();
        let path = dir.path().join(format!("{name}.safetensors"));
        let act = model.activations(&rs);
        act.write(&path).unwrap();
        let lib = detect(&act.hidden, &DetectorParams::default()).unwrap();
        let out = sinklab()
            .args([
                "secondary",
                "--activations",
                path.to_str().unwrap(),
                "--json",
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        let err = cli::stderr(&out);
        assert!(err.contains("positions flagged"), "{name}: {err}");
        assert_eq!(
            err.contains("saturated: anisotropy"),
            lib.validity.saturated,
            "{name}: {err}"
        );
        seen.push((lib.validity.saturated, lib.validity.frac_flagged));
    }
    assert!(!seen[0].0 && seen[1].0, "one file of each kind: {seen:?}");
}

#[test]
fn bad_input_is_an_error() {
    let out = sinklab()
        .args(["secondary", "--activations", "/nonexistent.safetensors"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(cli::stderr(&out).contains("reading activations"));
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a safetensors file").unwrap();
    let out = sinklab()
        .args(["secondary", "--activations", junk.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = sinklab()
        .args([
            "secondary",
            "--activations",
            junk.to_str().unwrap(),
            "--tau",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(cli::stderr(&out).contains("tau"));
}

/// The model study behind `sinklab secondary --model … --out` and the full report, on
/// SmolLM2 (skipped with a message when the model is not cached, a failure under
/// `SINKLAB_REQUIRE_MODELS=1`): it generates exactly the tokens asked for, and what it writes
/// agrees with what it returns (records, label counts, patching, figures).
#[test]
fn model_study_outputs_agree_with_its_records() {
    use sinklab::runtime::{fetch, load};
    use sinklab::secondary::run::{StudyOptions, study, write_outputs};
    use sinklab::secondary::{DetectorParams, WindowMode};
    let Some(path) = fetch::cached("smollm2") else {
        let msg = "model `smollm2` not in the cache (run `sinklab fetch smollm2`)";
        assert!(
            std::env::var("SINKLAB_REQUIRE_MODELS").as_deref() != Ok("1"),
            "{msg}"
        );
        eprintln!("SKIP: {msg}");
        return;
    };
    let lm = load(&path).unwrap();
    let p = DetectorParams {
        window: WindowMode::AllLayers,
        ..DetectorParams::default()
    };
    let ids = tempfile::tempdir().unwrap();
    let o = StudyOptions {
        generate: 12,
        patch: 2,
        boot: 200,
        seed: 0,
        variants: sinklab::secondary::run::standard_variants(&DetectorParams::default()),
        ids_dir: Some(ids.path().to_path_buf()),
        ..StudyOptions::default()
    };
    let texts = vec!["Compute 17 times 23 step by step.".to_string()];
    let mut calls = 0;
    let st = study(&lm, &texts, &p, &o, &mut |l: &str| {
        calls += l.contains("analysed") as usize
    })
    .unwrap();
    assert_eq!(calls, 1);
    assert_eq!(st.generated.0, 12);
    assert_eq!(st.variants.len(), 4);
    assert_eq!(st.primary().name, "all-layers");
    let m = &st.primary().measures;
    assert_eq!(m.sequences, 1);
    let (b, s, n) = m.label_counts;
    assert_eq!(b + s + n, st.primary().records.len());
    // Resuming reuses the kept ids: nothing is generated the second time, same tokens.
    let again = study(&lm, &texts, &p, &o, &mut |_: &str| {}).unwrap();
    assert_eq!(again.generated.0, 0);
    assert_eq!(again.seq_tokens, st.seq_tokens);
    for r in &st.primary().records {
        assert!(r.creation_layer < st.layers && r.lifetime >= 1, "{r:?}");
    }
    for x in &st.patches {
        assert!(x.lifetime_after <= st.layers && x.creation_layer < st.layers);
    }
    let dir = tempfile::tempdir().unwrap();
    let figs = write_outputs(dir.path(), "smollm2", &o, &st).unwrap();
    let lines = std::fs::read_to_string(dir.path().join("records.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), st.primary().records.len());
    let claims: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("claims.json")).unwrap()).unwrap();
    assert_eq!(claims["variants"][0]["claims"]["sequences"], 1);
    assert_eq!(claims["variants"].as_array().unwrap().len(), 4);
    assert_eq!(claims["generate"], 12);
    let patches: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("patching.json")).unwrap()).unwrap();
    assert_eq!(patches.as_array().unwrap().len(), st.patches.len());
    assert!(figs.iter().all(|f| f.exists()), "{figs:?}");
}

/// The BOS policy of a study reaches the prompts: on SmolLM2 (whose default adds no BOS)
/// `Bos::Yes` puts the model's BOS id first and `Bos::Auto` does not; `long::model_dir`
/// keeps runs of different policies apart.
#[test]
fn study_bos_policy_reaches_the_prompt() {
    use sinklab::runtime::tokenizer::Bos;
    use sinklab::runtime::{fetch, load};
    use sinklab::secondary::run::{StudyOptions, study};
    use sinklab::secondary::{DetectorParams, long};
    let Some(path) = fetch::cached("smollm2") else {
        let msg = "model `smollm2` not in the cache (run `sinklab fetch smollm2`)";
        assert!(
            std::env::var("SINKLAB_REQUIRE_MODELS").as_deref() != Ok("1"),
            "{msg}"
        );
        eprintln!("SKIP: {msg}");
        return;
    };
    let lm = load(&path).unwrap();
    let bos_id = lm.model.cfg.bos_id.expect("SmolLM2 has a BOS id");
    let texts = vec!["Compute 17 times 23 step by step.".to_string()];
    let mut lens = Vec::new();
    let mut heads = Vec::new();
    for bos in [Bos::Auto, Bos::Yes] {
        let ids = tempfile::tempdir().unwrap();
        let o = StudyOptions {
            generate: 1,
            boot: 50,
            bos,
            ids_dir: Some(ids.path().to_path_buf()),
            ..StudyOptions::default()
        };
        let st = study(
            &lm,
            &texts,
            &DetectorParams::default(),
            &o,
            &mut |_: &str| {},
        )
        .unwrap();
        lens.push(st.seq_tokens[0]);
        let kept: Vec<u32> =
            serde_json::from_str(&std::fs::read_to_string(ids.path().join("seq_0.json")).unwrap())
                .unwrap();
        heads.push(kept[0]);
    }
    // Bos::Yes puts the BOS id first (one token more); Auto leaves SmolLM2's prompt as it is.
    assert_eq!(heads[1], bos_id);
    assert_ne!(heads[0], bos_id);
    assert_eq!(lens[1], lens[0] + 1);
    let root = std::path::Path::new("/r");
    assert_eq!(long::model_dir(root, "m", Bos::Auto), root.join("m"));
    assert_eq!(long::model_dir(root, "m", Bos::Yes), root.join("m+bos-yes"));
}

/// One analysis for every entry point: the same anisotropic states (every token after the BOS
/// aligned with it) reach the saturated verdict through the activation-file path (CLI and
/// library), the native-study path (per-sequence analysis and pooling, as `study` does), and
/// the path of `--long` and the report (`claims.json` written by `write_outputs`, read back),
/// with the same validity line and verdict sentences on each; a mixed file is not saturated
/// on any of them.
#[test]
fn every_entry_point_reaches_the_same_saturated_verdict() {
    use sinklab::secondary::findings;
    use sinklab::secondary::native::Extras;
    use sinklab::secondary::run::{Study, StudyOptions, standard_variants, write_outputs};
    let dir = tempfile::tempdir().unwrap();
    let base = SyntheticConfig {
        seed: 5,
        ..Default::default()
    };
    let all_cfg = SyntheticConfig {
        cone_tokens: base.tokens - 1,
        ..base.clone()
    };
    let mixed: Vec<f64> = (0..base.tokens)
        .map(|t| 15.0 * t as f64 / base.tokens as f64)
        .collect();
    for (name, cfg, rs, want_sat) in [
        ("all", all_cfg, vec![15.0; base.tokens], true),
        ("mixed", base.clone(), mixed, false),
    ] {
        let act = SyntheticModel::new(cfg).unwrap().activations(&rs);
        let path = dir.path().join(format!("{name}.safetensors"));
        act.write(&path).unwrap();
        let p = DetectorParams::default();
        let params: Vec<DetectorParams> = std::iter::once(p.clone())
            .chain(standard_variants(&p))
            .collect();
        // 1. Activation files (library).
        let vars = findings::from_activations(&act, &params, 200, 0).unwrap();
        let lines_act = findings::summary_lines(&findings::claims_json(&vars), false);
        // 2. The native study's own steps on the same states.
        let an = findings::analyse_sequence(&act, &Extras::default(), &params, 0).unwrap();
        let per: Vec<Vec<_>> = an.into_iter().map(|a| vec![a]).collect();
        let layers = act.hidden.layers();
        let pooled = findings::pool(params.clone(), per, layers, 200, 0);
        let lines_native = findings::summary_lines(&findings::claims_json(&pooled), false);
        assert_eq!(lines_act, lines_native, "{name}");
        // 3. `--long` and the report: claims.json written, then read back.
        let st = Study {
            layers,
            variants: pooled,
            patches: Vec::new(),
            patch_variant: None,
            generated: (0, 0.0),
            seq_tokens: vec![act.hidden.tokens()],
        };
        let out = dir.path().join(name);
        write_outputs(&out, name, &StudyOptions::default(), &st).unwrap();
        let lines_file = findings::summary_lines_of_file(&out.join("claims.json")).unwrap();
        assert_eq!(lines_act, lines_file, "{name}");
        let sat = lines_act[0].contains("saturated: anisotropy");
        assert_eq!(sat, want_sat, "{name}: {lines_act:?}");
        let untestable = lines_act
            .iter()
            .filter(|l| l.contains("untestable here — the detector is saturated"))
            .count();
        assert_eq!(untestable == 5, want_sat, "{name}: {lines_act:?}");
        // 4. The CLI on the file prints the same verdict sentences.
        let cli = sinklab()
            .args([
                "secondary",
                "--activations",
                path.to_str().unwrap(),
                "--with-variants",
                "--json",
            ])
            .output()
            .unwrap();
        assert!(cli.status.success());
        let err = String::from_utf8_lossy(&cli.stderr);
        assert_eq!(
            err.contains("saturated: anisotropy"),
            want_sat,
            "{name}: {err}"
        );
        for l in lines_act.iter().skip(params.len()) {
            assert!(err.contains(l.as_str()), "{name}: {l} not in {err}");
        }
    }
}
