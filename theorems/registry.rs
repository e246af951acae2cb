//! # Every registered theorem check passes
//!
//! `sinklab check` and `sinklab report` run the checks of `sinklab::registry::registry()`.
//! This target runs each of them (at a quarter of its default case count, seed 0) so that
//! `cargo test` covers exactly what the CLI reports, and checks the registry is well formed.

use sinklab::registry::registry;
use std::collections::HashSet;

#[test]
fn every_registered_check_holds() {
    let all = registry();
    assert!(!all.is_empty());
    let mut failures = Vec::new();
    for t in &all {
        let o = (t.run)(t.default_cases.div_ceil(4), 0);
        eprintln!(
            "{:<28} cases {:>6} failed {:>3} worst margin {:.3e}",
            t.name, o.cases, o.failed, o.worst_margin
        );
        if !o.ok() {
            failures.push(format!("{}: {} failed ({})", t.name, o.failed, o.detail));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn names_are_unique_and_statements_present() {
    let all = registry();
    let names: HashSet<_> = all.iter().map(|t| t.name).collect();
    assert_eq!(names.len(), all.len(), "duplicate theorem names");
    for t in &all {
        assert!(
            !t.statement.is_empty() && !t.claim.is_empty() && t.default_cases > 0,
            "{}",
            t.name
        );
    }
}
