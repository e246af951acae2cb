//! The packaged models for tests: the cached file, or `None` after a `SKIP:` line; a missing
//! model fails instead under `SINKLAB_REQUIRE_MODELS=1` (what `.ci/run` sets). A target
//! includes it with `#[path = "support/models.rs"] mod models;`.
#![allow(dead_code)]

use sinklab::runtime::fetch;
use std::path::PathBuf;

/// The cached path of packaged model `name`, or `None` (printing why) when it is not fetched.
pub fn model_or_skip(name: &str) -> Option<PathBuf> {
    let p = fetch::cached(name);
    if p.is_none() {
        let msg = format!(
            "model `{name}` not in the cache {} (run `sinklab fetch {name}`)",
            fetch::cache_root().display()
        );
        assert!(
            std::env::var("SINKLAB_REQUIRE_MODELS").as_deref() != Ok("1"),
            "{msg}"
        );
        eprintln!("SKIP: {msg}");
    }
    p
}
