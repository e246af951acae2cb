//! Budgets before work: every size-like input is turned into an estimate of the memory and
//! time it needs *before* anything is allocated, and an estimate over the limit is refused
//! with the estimate and the override, never left to a panic, an abort or an hours-long run.
//!
//! Limits: `--max-mem` / `--max-time` where a command has them, else the environment
//! (`SINKLAB_MAX_MEM`, `SINKLAB_MAX_TIME`), else 80% of the machine's memory (8 GiB when it
//! cannot be read) and one hour. Memory estimates count the large buffers of the code path
//! (within a small factor of the measured peak); time estimates are *lower bounds* (the
//! unavoidable work at an optimistic rate, [`FLOPS`]), so a refusal is never a false alarm
//! about speed, only about scale.

use std::fmt;

/// Optimistic sustained rate used for time lower bounds (floating-point operations per
/// second; a few cores of vectorised f64 do about this much on the dense kernels, the
/// solver's scattered constraint loops much less).
pub const FLOPS: f64 = 1e10;

/// Most worker threads any command starts.
pub const MAX_THREADS: usize = 1024;

/// What a piece of work needs: an estimate of its peak memory and its time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Need {
    /// Peak bytes.
    pub bytes: f64,
    /// Seconds (a lower bound).
    pub seconds: f64,
}

impl Need {
    /// Memory only.
    pub fn bytes(bytes: f64) -> Self {
        Self {
            bytes,
            seconds: 0.0,
        }
    }
    /// `flops` floating-point operations at [`FLOPS`] and `bytes` of memory.
    pub fn work(bytes: f64, flops: f64) -> Self {
        Self {
            bytes,
            seconds: flops / FLOPS,
        }
    }
    /// The larger memory and the summed time of two pieces of work run one after the other.
    pub fn then(self, o: Self) -> Self {
        Self {
            bytes: self.bytes.max(o.bytes),
            seconds: self.seconds + o.seconds,
        }
    }
}

/// The limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// Bytes.
    pub max_bytes: f64,
    /// Seconds.
    pub max_seconds: f64,
}

/// Work refused before it started.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// Over a limit.
    #[error(
        "{what}: {kind} {estimate} is over the limit of {limit}; {hint} to run it anyway (estimate before any allocation)"
    )]
    Over {
        /// What was refused (the flag or key and its value).
        what: String,
        /// `needs about` (memory) or `would take at least` (time).
        kind: &'static str,
        /// The estimate, formatted.
        estimate: String,
        /// The limit, formatted.
        limit: String,
        /// How to override.
        hint: String,
    },
    /// A size argument over an absolute limit ([`size`]).
    #[error("{what}: over the limit of {limit} ({why})")]
    Cap {
        /// The flag or key and its value (`--generate 9000`).
        what: String,
        /// The largest value accepted.
        limit: String,
        /// Where the limit comes from.
        why: String,
    },
    /// A limit that does not parse.
    #[error("{0}")]
    Parse(String),
}

/// Refuses a size argument over an absolute limit, before any work: `what` names the flag or
/// key with its value (`--generate 9000`), `why` where the limit comes from (`the model's
/// context of 8192 tokens`). The one check for counts that have a hard ceiling; sizes whose
/// cost is memory or time go through [`Budget::check`] with a [`Need`].
pub fn size(what: &str, value: usize, limit: usize, why: &str) -> Result<(), BudgetError> {
    if value > limit {
        return Err(BudgetError::Cap {
            what: what.into(),
            limit: limit.to_string(),
            why: why.into(),
        });
    }
    Ok(())
}

/// `12G`, `512M`, `3.5T`, `1000000` (bytes) → bytes.
pub fn parse_bytes(s: &str) -> Result<f64, BudgetError> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1024f64,
                'M' => 1024f64.powi(2),
                'G' => 1024f64.powi(3),
                'T' => 1024f64.powi(4),
                'B' => 1.0,
                _ => {
                    return Err(BudgetError::Parse(format!(
                        "memory size `{s}`: unknown unit"
                    )));
                }
            };
            (&t[..i], m)
        }
        _ => (t, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v * mul),
        _ => Err(BudgetError::Parse(format!(
            "memory size `{s}`: expected a positive number with an optional K/M/G/T suffix"
        ))),
    }
}

/// `90s`, `30m`, `12h`, `2d`, `600` (seconds) → seconds.
pub fn parse_seconds(s: &str) -> Result<f64, BudgetError> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('s') => (&t[..t.len() - 1], 1.0),
        Some('m') => (&t[..t.len() - 1], 60.0),
        Some('h') => (&t[..t.len() - 1], 3600.0),
        Some('d') => (&t[..t.len() - 1], 86400.0),
        _ => (t, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v * mul),
        _ => Err(BudgetError::Parse(format!(
            "duration `{s}`: expected a positive number with an optional s/m/h/d suffix"
        ))),
    }
}

/// Bytes, human readable.
pub fn fmt_bytes(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b;
    let mut k = 0;
    while v >= 1024.0 && k + 1 < units.len() {
        v /= 1024.0;
        k += 1;
    }
    if k + 1 == units.len() && v >= 1024.0 {
        return format!("{b:.2e} B");
    }
    format!("{v:.1} {}", units[k])
}

/// Seconds, human readable.
pub fn fmt_seconds(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 86400.0 * 3.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1e} days", s / 86400.0)
    }
}

fn mem_total() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0)
}

impl Default for Budget {
    /// The environment's limits, else 80% of the machine's memory and one hour.
    fn default() -> Self {
        let env = |k: &str| std::env::var(k).ok().filter(|s| !s.is_empty());
        Self {
            max_bytes: env("SINKLAB_MAX_MEM")
                .and_then(|s| parse_bytes(&s).ok())
                .unwrap_or_else(|| mem_total().map_or(8.0 * 1024f64.powi(3), |m| 0.8 * m)),
            max_seconds: env("SINKLAB_MAX_TIME")
                .and_then(|s| parse_seconds(&s).ok())
                .unwrap_or(3600.0),
        }
    }
}

impl Budget {
    /// The default limits with the given overrides (`--max-mem`, `--max-time`).
    pub fn with(max_mem: Option<&str>, max_time: Option<&str>) -> Result<Self, BudgetError> {
        let mut b = Self::default();
        if let Some(m) = max_mem {
            b.max_bytes = parse_bytes(m)?;
        }
        if let Some(t) = max_time {
            b.max_seconds = parse_seconds(t)?;
        }
        Ok(b)
    }

    /// Refuses `e` when over a limit. `what` names the input (`--t 100000`); the hint names
    /// the override (`--max-mem` / `--max-time` flags, or their environment variables).
    pub fn check(&self, what: &str, e: Need, flags: bool) -> Result<(), BudgetError> {
        let (mem_flag, time_flag) = if flags {
            ("--max-mem", "--max-time")
        } else {
            ("SINKLAB_MAX_MEM=", "SINKLAB_MAX_TIME=")
        };
        let sep = if flags { " " } else { "" };
        let over = |kind: &'static str, estimate: String, limit: String, hint: String| {
            Err(BudgetError::Over {
                what: what.into(),
                kind,
                estimate,
                limit,
                hint,
            })
        };
        if e.bytes.is_nan() || e.bytes > self.max_bytes {
            return over(
                "needs about",
                fmt_bytes(e.bytes),
                fmt_bytes(self.max_bytes),
                format!(
                    "pass {mem_flag}{sep}{} (if the machine has it)",
                    short_bytes(e.bytes * 1.5)
                ),
            );
        }
        if e.seconds.is_nan() || e.seconds > self.max_seconds {
            return over(
                "would take at least",
                fmt_seconds(e.seconds),
                fmt_seconds(self.max_seconds),
                format!("pass {time_flag}{sep}{}", short_seconds(e.seconds * 2.0)),
            );
        }
        Ok(())
    }
}

fn short_bytes(b: f64) -> String {
    let g = b / 1024f64.powi(3);
    if g < 1.0 {
        format!("{:.0}M", (b / 1024f64.powi(2)).ceil())
    } else if g < 1024.0 {
        format!("{:.0}G", g.ceil())
    } else {
        format!("{:.0}T", (g / 1024.0).ceil())
    }
}

fn short_seconds(s: f64) -> String {
    if s < 3600.0 {
        format!("{:.0}m", (s / 60.0).ceil())
    } else {
        format!("{:.0}h", (s / 3600.0).ceil())
    }
}

/// Refuses a command-line bootstrap over the memory limit `max_mem` (a `--max-mem` value;
/// None: the environment or the default): `n_boot` resamples given by `flag`, sized by
/// [`bootstrap`] for `n_points` points in each of `groups` groups.
pub fn check_bootstrap_flag(
    max_mem: Option<&str>,
    flag: &str,
    n_boot: usize,
    n_points: usize,
    groups: usize,
) -> Result<(), BudgetError> {
    Budget::with(max_mem, None)?.check(
        &format!("{flag} {n_boot}"),
        bootstrap(n_boot, n_points, groups),
        true,
    )
}

/// Checks a worker-thread count: at least 1, at most [`MAX_THREADS`].
pub fn check_threads(k: usize) -> Result<usize, BudgetError> {
    if k == 0 || k > MAX_THREADS {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        return Err(BudgetError::Parse(format!(
            "--threads {k}: need 1 to {MAX_THREADS} worker threads (this machine has {cores} cores)"
        )));
    }
    Ok(k)
}

// ---- bounded reads of untrusted text files ----------------------------------------------------

/// Largest `config.json`, `tokenizer_config.json`, `model.safetensors.index.json` read (16 MiB;
/// real ones are kilobytes).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;
/// Largest `tokenizer.json` read (256 MiB; large vocabularies are tens of MB).
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;
/// Largest chat template read (4 MiB; real ones are a few kB).
pub const MAX_TEMPLATE_BYTES: u64 = 4 << 20;
/// Largest text input file (`--file`, `--prompts`, JSONL inputs) read (1 GiB).
pub const MAX_INPUT_BYTES: u64 = 1 << 30;
/// Largest sweep spec read (16 MiB).
pub const MAX_SPEC_BYTES: u64 = 16 << 20;
/// Largest figure data file read (64 MiB; parsed, a file takes several times its size).
pub const MAX_FIGURE_BYTES: u64 = 64 << 20;

/// Largest tensor file read whole into memory (`half-space --file`, `cost --embeddings`:
/// 4 GiB; models and activation dumps are memory-mapped instead).
pub const MAX_TENSOR_FILE_BYTES: u64 = 4 << 30;

/// Opens the input file `path` for reading: refused (an [`std::io::Error`] of kind
/// `InvalidInput` saying why) when it is not a regular file after following links — a device
/// such as `/dev/zero`, a FIFO (whose open would wait for a writer), a socket or a directory —
/// before it is opened. The one way a loader opens a file that a model or a user supplies.
pub fn open_input(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let m = std::fs::metadata(path)?;
    if !m.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is not a regular file (a directory, device, FIFO or socket); refusing to read it",
                path.display()
            ),
        ));
    }
    std::fs::File::open(path)
}

/// Reads the input file `path` of at most `cap` bytes ([`open_input`]'s refusals, and more
/// than `cap` bytes refused), through a `cap + 1` byte limit, so a file that grows while read
/// is refused too, never read without bound.
pub fn read_input(path: &std::path::Path, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    let f = open_input(path)?;
    let over = |n: u64| {
        Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} holds {} bytes or more, over the limit of {} for this kind of file",
                path.display(),
                n,
                fmt_bytes(cap as f64)
            ),
        )
    };
    let len = f.metadata()?.len();
    if len > cap {
        return Err(over(len));
    }
    let mut buf = Vec::new();
    buf.try_reserve(len as usize)
        .map_err(|e| Error::new(ErrorKind::OutOfMemory, e.to_string()))?;
    f.take(cap + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(over(cap + 1));
    }
    Ok(buf)
}

/// Reads the text file `path` of at most `cap` bytes ([`read_input`]'s refusals, and text that
/// is not UTF-8). The one way the loaders read a text file that a model, a spec or a user
/// supplies.
pub fn read_text(path: &std::path::Path, cap: u64) -> std::io::Result<String> {
    String::from_utf8(read_input(path, cap)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not UTF-8 text: {e}", path.display()),
        )
    })
}

/// Longest JSONL input line accepted for a model of `context` tokens: 128 bytes a token (a
/// token's text, JSON-escaped, or its id and separator, stays far below that), at least
/// 64 KiB and at most 64 MiB. Longer lines cannot fit the context and are refused before
/// they are parsed or tokenized.
pub fn max_line_bytes(context: usize) -> usize {
    context.saturating_mul(128).clamp(1 << 16, 64 << 20)
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, at least {}",
            fmt_bytes(self.bytes),
            fmt_seconds(self.seconds)
        )
    }
}

// ---- estimates of the crate's size-driven work ---------------------------------------------

/// One exact gap program (`cost`): $T$ positions, width $d$, `nuclear` prox (an SVD of the
/// $r \times r$ variable per iteration, $r = \min(T, d)$), `max_iter` iterations at most.
///
/// Memory: embeddings and their orthonormalisation ($3Td$ f64), the Gram and logits matrices
/// ($2T^2$), the constraint list and its dual vectors (about $T^2/2$ constraints, 8 bytes of
/// indices and 4 f64 each), and the primal iterates (about 9 $r \times r$ f64). Time (a lower
/// bound): building the program ($4T^2 d$ for Gram–Schmidt and the Gram matrix) and 200
/// iterations of $100\thinspace T^2$ (plus $20 r^3$ with the nuclear prox). Measured at the commit that
/// added it (`sinklab cost --pattern sink --norm fro --t 512`, 2 shared cores): 500
/// iterations in 23 s, i.e. about 40× this bound, so the bound refuses only work that is
/// certainly long.
pub fn cost_program(t: usize, d: usize, nuclear: bool) -> Need {
    let (t, d) = (t as f64, d as f64);
    let r = t.min(d);
    let bytes = 8.0 * 3.0 * t * d + 8.0 * 2.0 * t * t + 40.0 * t * t / 2.0 + 72.0 * r * r;
    let per_iter = 100.0 * t * t + if nuclear { 20.0 * r * r * r } else { 0.0 };
    Need::work(bytes, 4.0 * t * t * d + 200.0 * per_iter)
}

/// The worst case of one exact gap program allowed `max_iter` iterations: building it and
/// every iteration run (memory as [`cost_program`]). [`cost_program`] is the lower bound of a
/// program at the solver's default iteration budget; an iteration budget raised above that
/// default is checked at its worst case too, since nothing else bounds how long it may run.
pub fn cost_program_iterations(t: usize, d: usize, nuclear: bool, max_iter: usize) -> Need {
    let lower = cost_program(t, d, nuclear);
    let (tf, df) = (t as f64, d as f64);
    let r = tf.min(df);
    let per_iter = 100.0 * tf * tf + if nuclear { 20.0 * r * r * r } else { 0.0 };
    Need::work(lower.bytes, 4.0 * tf * tf * df + max_iter as f64 * per_iter)
}

/// One training run of `train`: parameters, gradients and AdamW moments in f32, the batch's
/// activations, and the task's $n \times n$ bigram table. Time (a lower bound): $6 \cdot$
/// (parameters touched per token) $\cdot$ tokens, plus the attention products.
#[allow(clippy::too_many_arguments)]
pub fn training(
    t: usize,
    d: usize,
    r: usize,
    layers: usize,
    mlp: usize,
    n: usize,
    batch: usize,
    steps: usize,
) -> Need {
    let (t, d, r, l, h, n, b, s) = (
        t as f64,
        d as f64,
        r as f64,
        layers as f64,
        mlp as f64,
        n as f64,
        batch as f64,
        steps as f64,
    );
    let per_layer = 2.0 * d * r + 2.0 * d * r.max(d) + 2.0 * d * h;
    let params = (n + 2.0 + t) * d + l * per_layer;
    let rows = b.max(64.0) * t;
    let acts = 4.0 * rows * l * (10.0 * d + 3.0 * t + 2.0 * h);
    let bytes = 16.0 * params + acts + 8.0 * n * n;
    let flops = 6.0 * s * b * t * (l * per_layer + 2.0 * l * t * r);
    Need::work(bytes, flops)
}

/// `sinklab backend`'s attention fit (`train::attn`): `batch` sequences of `t` positions of
/// width `d`, `steps` AdamW steps. Memory: the inputs and targets on the host (f64) and ten
/// activation buffers on the device ($b t d$ each), three $b \times t \times t$ score buffers,
/// twelve $d \times d$ weight, gradient and moment buffers (4 bytes an element; the host copies
/// 8). Time (a lower bound): forward and backward, $3 b (6 t d^2 + 4 t^2 d)$ a step.
pub fn attn_fit(t: usize, batch: usize, d: usize, steps: u64) -> Need {
    let (t, b, d, s) = (t as f64, batch as f64, d as f64, steps as f64);
    let bytes = 60.0 * b * t * d + 12.0 * b * t * t + 64.0 * d * d;
    Need::work(bytes, s * 3.0 * b * (6.0 * t * d * d + 4.0 * t * t * d))
}

/// `sinklab view` of `t` tokens through `layers` × `heads` with pooled maps at most
/// `max_res` wide and `n_exact` exact maps: one layer's attention maps in f32 and their copy
/// ($8 H T^2$), the pooled maps ($L H R^2$ bytes and their base64, ×7/3), the exact maps
/// ($4 T^2$ each and base64, ×7/3), and the page text holding them. Time: the pooling pass
/// over every map ($L H T^2$).
pub fn view_page(layers: usize, heads: usize, t: usize, max_res: usize, n_exact: usize) -> Need {
    let (l, h, t, n) = (layers as f64, heads as f64, t as f64, n_exact as f64);
    let r = (max_res as f64).min(t);
    let maps = 8.0 * h * t * t;
    let pooled = l * h * r * r * 7.0 / 3.0;
    let exact = n * 4.0 * t * t * 7.0 / 3.0;
    Need::work(maps + 2.0 * (pooled + exact), l * h * t * t)
}

/// Bootstrap of the exponent fits: `n_boot` resamples of `n_points` points per group.
pub fn bootstrap(n_boot: usize, n_points: usize, groups: usize) -> Need {
    let (b, p, g) = (n_boot as f64, n_points as f64, groups as f64);
    Need::work(8.0 * b + 16.0 * p, 10.0 * b * p.max(1.0) * g.max(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_refusals_name_the_override() {
        assert_eq!(parse_bytes("2G").unwrap(), 2.0 * 1024f64.powi(3));
        assert_eq!(parse_bytes("1000").unwrap(), 1000.0);
        assert_eq!(parse_seconds("3h").unwrap(), 10800.0);
        assert!(parse_bytes("-1G").is_err() && parse_seconds("soon").is_err());
        let b = Budget {
            max_bytes: 1e9,
            max_seconds: 60.0,
        };
        let e = b
            .check("--t 100000", cost_program(100_000, 100_000, false), true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--t 100000") && e.contains("needs about") && e.contains("--max-mem"),
            "{e}"
        );
        // The default sweep's largest exact point (T = 512) is far inside one hour and 1 GB.
        b.check("t 512", cost_program(512, 512, false), true)
            .unwrap();
        assert!(check_threads(100_000).is_err() && check_threads(2).is_ok());
    }

    #[test]
    fn size_flags_of_issue_reports_are_estimated_over_the_limits() {
        let b = Budget {
            max_bytes: 2.0 * 1024f64.powi(3),
            max_seconds: 3600.0,
        };
        // backend --t 65536 --batch 65536 --d 4096: petabytes; --t 65536 alone: hundreds of GB.
        assert!(attn_fit(65536, 65536, 4096, 1).bytes > 1e15);
        assert!(b.check("t", attn_fit(65536, 16, 16, 1), false).is_err());
        b.check("defaults", attn_fit(32, 16, 16, 100), false)
            .unwrap();
        // view at T = 8192, --max-res 8192 on a 30 × 9 model: over 2 GiB before layer 1.
        assert!(
            b.check("view", view_page(30, 9, 8192, 8192, 0), false)
                .is_err()
        );
        b.check("view", view_page(30, 9, 512, 256, 1), false)
            .unwrap();
        assert!(max_line_bytes(8192) == 1 << 20 && max_line_bytes(usize::MAX) == 64 << 20);
    }

    #[test]
    fn text_reads_are_bounded_and_regular_files_only() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("config.json");
        std::fs::write(&f, "{}").unwrap();
        assert_eq!(read_text(&f, 2).unwrap(), "{}");
        let e = read_text(&f, 1).unwrap_err().to_string();
        assert!(e.contains("over the limit"), "{e}");
        let e = read_text(d.path(), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        #[cfg(unix)]
        {
            // A link to /dev/zero (endless) is refused before any byte is read.
            let z = d.path().join("tokenizer.json");
            std::os::unix::fs::symlink("/dev/zero", &z).unwrap();
            let t = std::time::Instant::now();
            let e = read_text(&z, MAX_TOKENIZER_BYTES).unwrap_err().to_string();
            assert!(e.contains("not a regular file"), "{e}");
            assert!(t.elapsed().as_secs() < 5);
        }
        std::fs::write(&f, [0xffu8, 0xfe]).unwrap();
        assert!(read_text(&f, 10).is_err());
    }
}
