//! The headless browser of the page tests: Chromium from `SINKLAB_CHROMIUM` or `PATH`. A target
//! includes it with `#[path = "support/browser.rs"] mod browser;`.
#![allow(dead_code)]

use std::path::PathBuf;

/// The browser, or None (after checking `SINKLAB_REQUIRE_BROWSER`).
pub fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("SINKLAB_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            ["chromium", "chromium-browser", "google-chrome"]
                .iter()
                .find_map(|n| {
                    std::env::split_paths(&std::env::var_os("PATH")?)
                        .map(|d| d.join(n))
                        .find(|p| p.is_file())
                })
        });
    if found.is_none() {
        assert!(
            std::env::var("SINKLAB_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "no chromium found (SINKLAB_REQUIRE_BROWSER=1)"
        );
        eprintln!("SKIP: no chromium on PATH (apt-get install chromium, or set SINKLAB_CHROMIUM)");
    }
    found
}
