//! `sinklab cost --embeddings F.safetensors`: a user's own points priced from the rows of tensor
//! `x`, with the same certified bracket as the built-in families; bad files refused by name.

#[path = "support/cli.rs"]
mod cli;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, serialize};
use std::path::{Path, PathBuf};

/// Writes `tensors` (name, dtype, shape, little-endian bytes) to `dir/name`.
fn write(dir: &Path, name: &str, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> PathBuf {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, serialize(views, None).unwrap()).unwrap();
    path
}

fn f32_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect()
}
fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bf16_bytes(v: &[f64]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::bf16::from_f64(*x).to_le_bytes())
        .collect()
}

/// Rows e_0..e_{N-1} of the identity in d ≥ N columns: orthonormal, exactly representable in
/// every dtype, so the Frobenius optimum is the closed form Δ√(T − H_T).
fn identity_rows(n: usize, d: usize) -> Vec<f64> {
    (0..n * d)
        .map(|k| if k / d == k % d { 1.0 } else { 0.0 })
        .collect()
}

fn json(args: &[&str]) -> serde_json::Value {
    let o = cli::run(args);
    serde_json::from_str(&cli::ok(&o)).unwrap()
}

#[test]
fn orthonormal_rows_from_a_file_meet_the_closed_form() {
    let dir = tempfile::tempdir().unwrap();
    let (n, d) = (12, 14);
    let rows = identity_rows(n, d);
    for (dtype, bytes) in [
        (Dtype::F32, f32_bytes(&rows)),
        (Dtype::F64, f64_bytes(&rows)),
        (Dtype::BF16, bf16_bytes(&rows)),
    ] {
        let f = write(
            dir.path(),
            &format!("{dtype:?}.safetensors"),
            &[("x", dtype, vec![n, d], bytes)],
        );
        let path = f.to_str().unwrap();
        for t in [None, Some(7usize)] {
            let ts = t.map(|t| t.to_string());
            let mut args = vec![
                "cost",
                "--embeddings",
                path,
                "--pattern",
                "sink",
                "--norm",
                "fro",
                "--delta",
                "2",
                "--json",
            ];
            if let Some(ts) = &ts {
                args.extend(["--t", ts.as_str()]);
            }
            let v = json(&args);
            let tt = t.unwrap_or(n);
            assert_eq!(v["t"], tt);
            assert_eq!(v["d"], d);
            assert_eq!(v["feasible"], true);
            let h: f64 = (1..=tt).map(|k| 1.0 / k as f64).sum();
            let exact = 2.0 * (tt as f64 - h).sqrt();
            let (lo, hi) = (v["lower"].as_f64().unwrap(), v["value"].as_f64().unwrap());
            assert!(
                lo <= exact * (1.0 + 1e-9) && exact <= hi * (1.0 + 1e-9),
                "{dtype:?} T={tt}: [{lo}, {hi}] vs {exact}"
            );
            assert!(v["rel_gap"].as_f64().unwrap() <= 1e-3);
            let solver = v["solver"].as_str().unwrap();
            let expect = if cfg!(feature = "ipm") {
                "ipm"
            } else {
                "first-order"
            };
            assert_eq!(solver, expect, "{v}");
        }
    }
}

/// The same points through `--embeddings` and through the library give the same bracket, and
/// `--solver first-order` is honoured.
#[test]
fn file_points_match_the_library_and_the_solver_flag() {
    use sinklab::cost::{EmbeddingKind, GapProgram, NormKind, Pattern, SolveOptions, embeddings};
    let dir = tempfile::tempdir().unwrap();
    let (t, d) = (10, 13);
    let x = embeddings(EmbeddingKind::Gaussian, t, d, 8).unwrap();
    let vals: Vec<f64> = (0..t * d).map(|k| x[(k / d, k % d)]).collect();
    let f = write(
        dir.path(),
        "g.safetensors",
        &[("x", Dtype::F64, vec![t, d], f64_bytes(&vals))],
    );
    let path = f.to_str().unwrap();
    let v = json(&[
        "cost",
        "--embeddings",
        path,
        "--pattern",
        "diagonal",
        "--norm",
        "fro",
        "--delta",
        "3",
        "--solver",
        "first-order",
        "--tol",
        "1e-5",
        "--json",
    ]);
    assert_eq!(v["solver"], "first-order");
    let p = GapProgram::for_pattern(x.as_ref(), Pattern::Diagonal, 3.0).unwrap();
    let s = sinklab::cost::solve(
        &p,
        NormKind::Fro,
        SolveOptions {
            rel_gap: 1e-5,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    let (lo, hi) = (v["lower"].as_f64().unwrap(), v["value"].as_f64().unwrap());
    // Two certified brackets of the same program intersect.
    assert!(
        lo <= s.value.unwrap() * (1.0 + 1e-9) && s.lower.unwrap() <= hi * (1.0 + 1e-9),
        "[{lo}, {hi}] vs {:?}",
        (s.lower, s.value)
    );
}

#[test]
fn bad_files_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let ok = identity_rows(4, 4);
    let mut nan = ok.clone();
    nan[5] = f64::NAN;
    let files = [
        (
            "noname",
            write(
                dir.path(),
                "noname.safetensors",
                &[("y", Dtype::F32, vec![4, 4], f32_bytes(&ok))],
            ),
            vec![],
            vec!["no tensor `x`", "\"y\""],
        ),
        (
            "rank3",
            write(
                dir.path(),
                "rank3.safetensors",
                &[("x", Dtype::F32, vec![2, 2, 4], f32_bytes(&ok))],
            ),
            vec![],
            vec!["[2, 2, 4]", "rank 2"],
        ),
        (
            "nan",
            write(
                dir.path(),
                "nan.safetensors",
                &[("x", Dtype::F64, vec![4, 4], f64_bytes(&nan))],
            ),
            vec![],
            vec!["non-finite", "row 1, column 1"],
        ),
        (
            "too-long",
            write(
                dir.path(),
                "ok.safetensors",
                &[("x", Dtype::F32, vec![4, 4], f32_bytes(&ok))],
            ),
            vec!["--t", "5"],
            vec!["--t 5", "N = 4"],
        ),
        (
            "too-short",
            dir.path().join("ok.safetensors"),
            vec!["--t", "1"],
            vec!["--t 1", "at least 2"],
        ),
        (
            "int",
            write(
                dir.path(),
                "int.safetensors",
                &[("x", Dtype::I32, vec![4, 4], vec![0u8; 64])],
            ),
            vec![],
            vec!["dtype I32"],
        ),
        (
            "missing",
            dir.path().join("absent.safetensors"),
            vec![],
            vec!["absent.safetensors"],
        ),
    ];
    for (what, f, extra, needles) in files {
        let mut args = vec![
            "cost".to_string(),
            "--embeddings".into(),
            f.to_str().unwrap().into(),
            "--pattern".into(),
            "sink".into(),
            "--norm".into(),
            "fro".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let o = cli::run(&args);
        let e = cli::stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{what}: {e}");
        assert!(!e.contains("panicked"), "{what}: {e}");
        for n in needles {
            assert!(e.contains(n), "{what}: `{e}` does not say `{n}`");
        }
    }
}
