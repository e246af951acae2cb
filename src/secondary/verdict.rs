//! Reading a run: one sentence per claim B1–B6 (docs/theory.md §8) from a
//! configuration's `claims` object in `claims.json` — reproduced, not reproduced,
//! or untestable here, with the numbers. The rules are stated in each sentence;
//! a saturated run (see [`super::detector::Validity`]) is untestable throughout.

use serde_json::Value;

/// Outcome of one claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The measured quantity has the claimed sign/size.
    Reproduced,
    /// Measurable here, and it does not.
    NotReproduced,
    /// Cannot be measured on this run.
    Untestable,
}

impl Status {
    /// Lower-case words for the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Reproduced => "reproduced",
            Status::NotReproduced => "not reproduced",
            Status::Untestable => "untestable here",
        }
    }
}

fn f(x: &Value) -> Option<f64> {
    x.as_f64()
}

fn est(x: &Value) -> Option<(f64, f64, f64, u64)> {
    Some((
        f(&x["value"])?,
        f(&x["lo"])?,
        f(&x["hi"])?,
        x["n"].as_u64()?,
    ))
}

/// Minimum number of secondary sinks for a per-sink claim (B1, B2, B6).
pub const MIN_SINKS: u64 = 5;

/// The B1–B4 and B6 verdicts of one configuration's `claims` (B5 is across models:
/// [`b5_across`]).
pub fn verdicts(c: &Value) -> Vec<(&'static str, Status, String)> {
    use Status::*;
    let sec = c["label_counts"][1].as_u64().unwrap_or(0);
    let layers = c["layers"].as_u64().unwrap_or(0);
    let v = &c["validity"];
    if v["saturated"].as_bool().unwrap_or(false) {
        let why = format!(
            "the detector is saturated ({:.0} % of the positions flagged; anisotropy, not sinks)",
            100.0 * f(&v["frac_flagged"]).unwrap_or(f64::NAN)
        );
        return ["B1", "B2", "B3", "B4", "B6"]
            .into_iter()
            .map(|k| (k, Untestable, why.clone()))
            .collect();
    }
    let none = format!(
        "{sec} secondary sink(s) (fewer than {MIN_SINKS}) over {} sequence(s)",
        c["sequences"]
    );
    let mut out = Vec::new();
    // B1.
    out.push(match f(&c["b1_frac_middle_third"]) {
        Some(x) if sec >= MIN_SINKS => (
            "B1",
            if x > 0.5 { Reproduced } else { NotReproduced },
            format!(
                "{:.2} of {sec} secondary sinks are created in the middle third of the {layers} layers (reproduced iff > 0.5; 1/3 by chance)",
                x
            ),
        ),
        _ => ("B1", Untestable, none.clone()),
    });
    // B2.
    out.push(
        match (
            f(&c["b2_median_abs_cos_mlp"]),
            f(&c["b2_median_abs_cos_pre"]),
        ) {
            (Some(m), Some(p)) if sec >= MIN_SINKS => (
                "B2",
                if m > 0.5 && m > p {
                    Reproduced
                } else {
                    NotReproduced
                },
                format!(
                    "median |cos(MLP output, h_BOS)| at creation {m:.2} vs {p:.2} before the MLP (reproduced iff the first > 0.5 and > the second)"
                ),
            ),
            _ => ("B2", Untestable, none.clone()),
        },
    );
    // B3.
    out.push(
        match (
            est(&c["b3_norm_vs_score"]),
            est(&c["b3_norm_vs_lifetime"]),
        ) {
            (Some(s), Some(l)) if s.3 >= MIN_SINKS => (
                "B3",
                if s.1 > 0.0 && l.1 > 0.0 {
                    Reproduced
                } else {
                    NotReproduced
                },
                format!(
                    "Spearman(‖MLP out‖, sink score) {:.2} [{:.2}, {:.2}], (‖MLP out‖, lifetime) {:.2} [{:.2}, {:.2}], n = {} {} (reproduced iff both 95 % CIs lie above 0)",
                    s.0, s.1, s.2, l.0, l.1, l.2, s.3, c["b3_population"].as_str().unwrap_or("")
                ),
            ),
            _ => ("B3", Untestable, none.clone()),
        },
    );
    // B4.
    out.push(match est(&c["b4_spearman_ci"]) {
        Some(e) if sec >= MIN_SINKS => (
            "B4",
            if e.2 < 0.0 { Reproduced } else { NotReproduced },
            format!(
                "Spearman over layers of primary-sink strength vs number of secondary sinks {:.2} [{:.2}, {:.2}] (reproduced iff the CI lies below 0)",
                e.0, e.1, e.2
            ),
        ),
        _ => ("B4", Untestable, none.clone()),
    });
    // B6.
    out.push(
        match (
            f(&c["b6_hidden_ratio"]),
            f(&c["b6_key_ratio"]),
            f(&c["b6_value_ratio"]),
        ) {
            (Some(h), Some(k), Some(vv)) if sec >= MIN_SINKS => {
                let kp = f(&c["b6_key_ratio_pre_knorm"]);
                (
                    "B6",
                    if h > 1.0 && k < 1.0 && vv < 1.0 {
                        Reproduced
                    } else {
                        NotReproduced
                    },
                    format!(
                        "secondary / ordinary-mean norms at creation: hidden {h:.2}, key {k:.2}{}, value {vv:.2} (reproduced iff hidden > 1, key < 1, value < 1)",
                        kp.map_or(String::new(), |x| format!(" (before k-norm {x:.2})"))
                    ),
                )
            }
            _ => ("B6", Untestable, none.clone()),
        },
    );
    out
}

/// B5 across models: `(model, layers, entropy bits, secondary sinks)` of the
/// non-saturated runs with secondary sinks; reproduced iff the level entropy
/// decreases with depth (the size proxy here) over at least two models.
pub fn b5_across(runs: &[(String, u64, f64, u64)]) -> (Status, String) {
    let mut r: Vec<&(String, u64, f64, u64)> = runs.iter().filter(|x| x.3 >= MIN_SINKS).collect();
    if r.len() < 2 {
        return (
            Status::Untestable,
            format!(
                "{} model(s) with ≥ {MIN_SINKS} secondary sinks in a non-saturated run (needs two sizes)",
                r.len()
            ),
        );
    }
    r.sort_by_key(|x| x.1);
    let list = r
        .iter()
        .map(|x| format!("{} (L = {}): {:.2} bits over {} sinks", x.0, x.1, x.2, x.3))
        .collect::<Vec<_>>()
        .join("; ");
    let dec = r.windows(2).all(|w| w[1].2 < w[0].2);
    (
        if dec {
            Status::Reproduced
        } else {
            Status::NotReproduced
        },
        format!("level entropy {list} (reproduced iff it decreases with depth)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturated_runs_are_untestable_and_thresholds_bite() {
        let sat = serde_json::json!({"label_counts": [0, 30, 0], "layers": 30, "sequences": 2,
            "validity": {"saturated": true, "frac_flagged": 0.97}, "b1_frac_middle_third": 0.9});
        assert!(verdicts(&sat).iter().all(|v| v.1 == Status::Untestable));
        let mut ok = serde_json::json!({"label_counts": [0, 30, 0], "layers": 30, "sequences": 2,
            "validity": {"saturated": false, "frac_flagged": 0.02}, "b1_frac_middle_third": 0.9,
            "b2_median_abs_cos_mlp": 0.8, "b2_median_abs_cos_pre": 0.2,
            "b4_spearman_ci": {"value": -0.5, "lo": -0.8, "hi": -0.1, "n": 30},
            "b6_hidden_ratio": 3.0, "b6_key_ratio": 0.5, "b6_value_ratio": 0.4});
        let v = verdicts(&ok);
        assert_eq!(v[0].1, Status::Reproduced);
        assert_eq!(v[1].1, Status::Reproduced);
        assert_eq!(v[2].1, Status::Untestable); // no B3 estimates
        assert_eq!(v[3].1, Status::Reproduced);
        assert_eq!(v[4].1, Status::Reproduced);
        ok["b1_frac_middle_third"] = serde_json::json!(0.4);
        ok["b6_key_ratio"] = serde_json::json!(1.5);
        let v = verdicts(&ok);
        assert_eq!(
            (v[0].1, v[4].1),
            (Status::NotReproduced, Status::NotReproduced)
        );
        let (s, _) = b5_across(&[("a".into(), 30, 2.0, 10), ("b".into(), 24, 3.0, 10)]);
        assert_eq!(s, Status::Reproduced);
        let (s, _) = b5_across(&[("a".into(), 30, 3.5, 10), ("b".into(), 24, 3.0, 10)]);
        assert_eq!(s, Status::NotReproduced);
        assert_eq!(
            b5_across(&[("a".into(), 30, 2.0, 10)]).0,
            Status::Untestable
        );
    }
}
