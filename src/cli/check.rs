//! `sinklab check [NAME] [--cases N] [--seed S] [--json]`.

use anyhow::{Result, bail};
use sinklab::registry::{CheckOutcome, registry};
use sinklab::report::fmt_margin;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  Every theorem with its default number of cases:
    sinklab check
  The registered theorems:
    sinklab check --list
  One theorem, 1000 seeded cases, as JSON:
    sinklab check hard_switch --cases 1000 --seed 3 --json")]
pub struct Args {
    /// Theorem to check (default: all; --list names them).
    name: Option<String>,
    /// Random cases per theorem (default: each theorem's own).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    cases: Option<u64>,
    /// Master seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// List the registered theorems and exit.
    #[arg(long)]
    list: bool,
}

pub fn run(a: Args) -> Result<i32> {
    let all = registry();
    if a.list {
        for t in &all {
            outln!("{:<24} {:<4} {}", t.name, t.claim, t.statement);
        }
        return Ok(0);
    }
    let chosen: Vec<_> = match &a.name {
        None => all.iter().collect(),
        Some(n) => {
            let v: Vec<_> = all.iter().filter(|t| t.name == n.as_str()).collect();
            if v.is_empty() {
                let names: Vec<_> = all.iter().map(|t| t.name).collect();
                errln!("error: unknown theorem '{n}'; known: {}", names.join(", "));
                return Ok(2);
            }
            v
        }
    };
    if chosen.is_empty() {
        bail!("no theorem is registered");
    }
    let mut outs: Vec<CheckOutcome> = Vec::new();
    for t in chosen {
        let cases = a.cases.map_or(t.default_cases, |c| c as usize);
        if !a.json {
            errln!("checking {} ({} cases)...", t.name, cases);
        }
        let o = (t.run)(cases, a.seed);
        if !a.json {
            outln!(
                "{:<24} cases {:>6}  passed {:>6}  failed {:>4}  worst margin {} ({}){}",
                o.theorem,
                o.cases,
                o.passed,
                o.failed,
                fmt_margin(o.worst_margin),
                o.margin_unit,
                if o.failed > 0 {
                    format!("\n    first failure: {}", o.detail)
                } else {
                    String::new()
                }
            );
        }
        outs.push(o);
    }
    if a.json {
        let arr: Vec<_> = outs
            .iter()
            .map(|o| {
                serde_json::json!({
                    "theorem": o.theorem, "cases": o.cases, "passed": o.passed,
                    "failed": o.failed,
                    "worst_margin": if o.worst_margin.is_finite() { serde_json::json!(o.worst_margin) } else { serde_json::Value::Null },
                    "margin_unit": o.margin_unit, "detail": o.detail,
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&arr)?);
    }
    Ok(if outs.iter().all(CheckOutcome::ok) {
        0
    } else {
        1
    })
}
