//! Counts of the switch the off-queries use, per (task, variant, frozen, T), over the runs
//! that reached the common accuracy, and the verdict sentences computed from them.

use super::point::{Record, Task, Variant};
use std::collections::BTreeMap;

/// The classes of [`crate::train::SwitchUse::switch`], in the order of the figure and tables.
pub const SWITCHES: [&str; 5] = ["bos_sink", "sink_logit", "gate", "diagonal", "mixed"];

/// A group of runs: (task, variant, frozen).
pub type Group = (Task, Variant, bool);

/// The runs of one group at one T that reached the accuracy, and the switch each uses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cell {
    /// Converged runs.
    pub n: usize,
    /// Runs per class of [`SWITCHES`].
    pub counts: [usize; 5],
    /// Runs that failed or missed the accuracy (left out of `n`).
    pub left_out: usize,
}

impl Cell {
    /// Fraction of the converged runs using `switch` (`None` without a converged run).
    pub fn fraction(&self, switch: &str) -> Option<f64> {
        let k = SWITCHES.iter().position(|s| *s == switch)?;
        (self.n > 0).then(|| self.counts[k] as f64 / self.n as f64)
    }
}

/// Every (group, T) cell of the records.
pub fn cells(records: &[Record]) -> BTreeMap<(Group, usize), Cell> {
    let mut m: BTreeMap<(Group, usize), Cell> = BTreeMap::new();
    for r in records {
        let c = m.entry(((r.task, r.variant, r.frozen), r.t)).or_default();
        match &r.outcome {
            Some(o) if o.converged => {
                c.n += 1;
                let k = SWITCHES
                    .iter()
                    .position(|s| *s == o.switch)
                    .unwrap_or(SWITCHES.len() - 1);
                c.counts[k] += 1;
            }
            _ => c.left_out += 1,
        }
    }
    m
}

/// `(k, n)`: converged runs of `group` (all T) using `switch`, and converged runs.
pub fn count(records: &[Record], group: Group, switch: &str) -> (usize, usize) {
    let runs: Vec<_> = converged(records, group).collect();
    let k = runs.iter().filter(|o| o.switch == switch).count();
    (k, runs.len())
}

/// The outcomes of the converged runs of `group`.
pub fn converged(
    records: &[Record],
    (task, variant, frozen): Group,
) -> impl Iterator<Item = &super::point::Outcome> {
    records
        .iter()
        .filter(move |r| r.task == task && r.variant == variant && r.frozen == frozen)
        .filter_map(|r| r.outcome.as_ref())
        .filter(|o| o.converged)
}

/// The median of `v` (`None` when empty).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    })
}

/// "k of n" with the fraction.
fn of((k, n): (usize, usize)) -> String {
    if n == 0 {
        "no converged run".into()
    } else {
        format!("{k} of {n}")
    }
}

fn frac((k, n): (usize, usize)) -> Option<f64> {
    (n > 0).then(|| k as f64 / n as f64)
}

/// Two-sided Fisher exact test of $k_a/n_a$ against $k_b/n_b$: the probability, under the
/// hypergeometric law of the first group's count given both margins, of a table at most as
/// likely as the observed one, $p = \sum_{x:\thinspace P(x) \le P(k_a)} P(x)$ with
/// $P(x) = \binom{K}{x}\binom{N-K}{n_a-x}/\binom{N}{n_a}$, $K = k_a + k_b$, $N = n_a + n_b$.
/// 1 when either group is empty.
pub fn fisher_exact((ka, na): (usize, usize), (kb, nb): (usize, usize)) -> f64 {
    if na == 0 || nb == 0 {
        return 1.0;
    }
    let ln_fact = |n: usize| (2..=n).map(|i| (i as f64).ln()).sum::<f64>();
    let ln_choose = |n: usize, k: usize| ln_fact(n) - ln_fact(k) - ln_fact(n - k);
    let (k, n) = (ka + kb, na + nb);
    let ln_p = |x: usize| ln_choose(k, x) + ln_choose(n - k, na - x) - ln_choose(n, na);
    let (lo, hi) = (na.saturating_sub(n - k), na.min(k));
    let observed = ln_p(ka);
    // Relative slack for ties in floating point, as R's fisher.test uses.
    let p: f64 = (lo..=hi)
        .map(ln_p)
        .filter(|&l| l <= observed + 1e-7)
        .map(f64::exp)
        .sum();
    p.min(1.0)
}

/// A p-value as printed: two decimals, or two significant digits below 0.01.
fn p_value(p: f64) -> String {
    if p < 0.01 {
        format!("{p:.1e}")
    } else {
        format!("{p:.2}")
    }
}

/// Compares two fractions in words ("fewer", "more", "as many"), `None` when one is missing.
fn compare(a: (usize, usize), b: (usize, usize)) -> Option<&'static str> {
    let (fa, fb) = (frac(a)?, frac(b)?);
    Some(if (fa - fb).abs() < 1e-12 {
        "as often as"
    } else if fa < fb {
        "less often than"
    } else {
        "more often than"
    })
}

/// The sink logit's start of a group's runs, `"s₀ = a"` or `"s₀ = a–b over T"`, when they
/// started it elsewhere than 0.
fn started(records: &[Record], (task, v, frozen): (Task, Variant, bool)) -> Option<String> {
    let s0: Vec<f64> = records
        .iter()
        .filter(|r| r.task == task && r.variant == v && r.frozen == frozen)
        .filter_map(|r| r.sink_logit_init)
        .collect();
    let lo = s0.iter().copied().reduce(f64::min)?;
    let hi = s0.iter().copied().reduce(f64::max)?;
    Some(if lo == hi {
        format!("s₀ = {lo:.2}")
    } else {
        format!("s₀ = {lo:.2}–{hi:.2} over T")
    })
}

/// The verdict sentences of one task, each computed from the records (the counts and their
/// comparisons could have come out either way).
pub fn verdicts(records: &[Record], task: Task) -> Vec<String> {
    let mut out = Vec::new();
    let present = |v: Variant, f: bool| converged(records, (task, v, f)).next().is_some();
    let bos = count(records, (task, Variant::Bos, false), "bos_sink");
    if present(Variant::Bos, false) {
        out.push(format!(
            "**{task}, BOS key alone** (variant bos): the BOS sink switches the off-queries off in \
             {} runs.",
            of(bos)
        ));
    }
    if present(Variant::Masked, false) {
        let diag = count(records, (task, Variant::Masked, false), "diagonal");
        out.push(format!(
            "**{task}, BOS key masked**: the diagonal carries the switch in {} runs.",
            of(diag)
        ));
    }
    let mechanisms = [
        (Variant::SinkLogit, "a sink logit", "sink_logit", "s = 0"),
        (Variant::Gate, "a gate", "gate", "its initial W_g, b_g = 0"),
        (
            Variant::SinkLogitGate,
            "a sink logit and a gate",
            "",
            "their initial values",
        ),
    ];
    for (v, what, own, init) in mechanisms {
        if !present(v, false) {
            continue;
        }
        let trained = count(records, (task, v, false), "bos_sink");
        let mut s = format!(
            "**{task}, {v}**: with {what} available{}, the BOS sink forms in {} runs",
            started(records, (task, v, false))
                .map(|x| format!(" (its sink logit started at {x})"))
                .unwrap_or_default(),
            of(trained),
        );
        if present(Variant::Bos, false) {
            s.push_str(&format!(" against {} with the BOS key alone", of(bos)));
        }
        if let Some(c) = present(Variant::Bos, false)
            .then(|| compare(trained, bos))
            .flatten()
        {
            s.push_str(&format!(
                " ({c} without the mechanism; Fisher's exact test p = {})",
                p_value(fisher_exact(trained, bos))
            ));
        }
        let owns: Vec<(&str, (usize, usize))> = if own.is_empty() {
            vec![
                (
                    "the learned sink logit",
                    count(records, (task, v, false), "sink_logit"),
                ),
                ("the gate", count(records, (task, v, false), "gate")),
            ]
        } else {
            vec![(
                if own == "gate" {
                    "the gate"
                } else {
                    "the learned sink logit"
                },
                count(records, (task, v, false), own),
            )]
        };
        for (name, c) in &owns {
            s.push_str(&format!("; {name} carries it in {}", of(*c)));
        }
        s.push('.');
        if present(v, true) {
            let frozen = count(records, (task, v, true), "bos_sink");
            let init = started(records, (task, v, true))
                .map(|x| format!("the sink logit kept at its start, {x}"))
                .unwrap_or_else(|| init.to_string());
            s.push_str(&format!(
                " Frozen control ({init}): the BOS sink forms in {} runs",
                of(frozen)
            ));
            for (name, _) in &owns {
                let key = if name.contains("gate") {
                    "gate"
                } else {
                    "sink_logit"
                };
                s.push_str(&format!(
                    ", {name} carries it in {}",
                    of(count(records, (task, v, true), key))
                ));
            }
            match compare(trained, frozen) {
                Some("as often as") => s.push_str(
                    "; training the mechanism does not change how often the BOS sink forms.",
                ),
                Some(c) => {
                    let p = fisher_exact(trained, frozen);
                    s.push_str(&format!(
                        "; with the mechanism trained the BOS sink forms {c} with it frozen \
                         (Fisher's exact test p = {}), ",
                        p_value(p)
                    ));
                    s.push_str(if p < 0.05 {
                        "a change attributable to training it."
                    } else {
                        "a difference within chance at these counts."
                    });
                }
                None => s.push('.'),
            }
        }
        out.push(s);
    }
    out
}
