//! Job files that run a sweep on an existing scheduler: the sweep split into `N` shards
//! (`--shard i/N`, each into its own directory `OUT/shard<i>`), then one `sinklab merge`
//! of those directories into `OUT`.
//!
//! Two forms, both plain text a person can read and edit:
//!
//! - **manifest** — `OUT/jobs/shards.txt`, one shell command per line (line `i + 1` is shard
//!   `i`): `parallel < shards.txt`, `xargs -P`, or any job array that runs line
//!   `$TASK_ID + 1`; then `OUT/jobs/merge.sh`.
//! - **slurm** — `OUT/jobs/sweep.sbatch`, an array job `--array=0-(N−1)` whose task `i` runs
//!   shard `i`; `OUT/jobs/merge.sbatch`; `OUT/jobs/submit.sh` submits both, the merge with
//!   `--dependency=afterok` on the array.
//!
//! Every path is absolute, so the files run from any working directory; the merge uses the
//! spec's bootstrap size and the given seed, so the merged `fit.json` is the one a single
//! unsharded run writes (records are read sorted by id, whatever the shard).

use super::SweepError;
use std::path::{Path, PathBuf};

/// What to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// `shards.txt` + `merge.sh`.
    Manifest,
    /// `sweep.sbatch` + `merge.sbatch` + `submit.sh`.
    Slurm,
}

impl std::str::FromStr for JobKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "manifest" => Ok(Self::Manifest),
            "slurm" => Ok(Self::Slurm),
            _ => Err(format!("unknown job format '{s}' (manifest|slurm)")),
        }
    }
}

/// A sharded run of one spec.
#[derive(Clone, Debug)]
pub struct JobPlan {
    /// The `sinklab` executable the jobs call.
    pub exe: PathBuf,
    /// The sweep spec (TOML).
    pub spec: PathBuf,
    /// Output directory of the merged sweep; shards go to `out/shard<i>`.
    pub out: PathBuf,
    /// Number of shards `N ≥ 1`.
    pub shards: usize,
    /// Worker threads per shard (`--threads`, and `--cpus-per-task` under Slurm).
    pub threads: Option<usize>,
    /// Bootstrap resamples of the merge (the spec's `bootstrap`).
    pub bootstrap: usize,
    /// Seed of the merge's bootstrap.
    pub seed: u64,
    /// Job name (Slurm).
    pub name: String,
}

/// The most shards a plan may have (a job array larger than this is almost surely a typo).
pub const MAX_SHARDS: usize = 100_000;

/// Stand-in for the task index in the argv of the array job.
const TASK: &str = "@@TASK@@";

/// Quotes `s` for a POSIX shell (single quotes; embedded `'` as `'\''`).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

fn absolute(p: &Path) -> Result<PathBuf, SweepError> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    std::env::current_dir()
        .map(|d| d.join(p))
        .map_err(|source| SweepError::Io {
            path: p.to_path_buf(),
            source,
        })
}

impl JobPlan {
    /// Checks the plan and makes every path absolute.
    pub fn normalised(mut self) -> Result<Self, SweepError> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(SweepError::Spec(format!(
                "--shards {}: need 1 ≤ N ≤ {MAX_SHARDS}",
                self.shards
            )));
        }
        self.exe = absolute(&self.exe)?;
        self.spec = absolute(&self.spec)?;
        self.out = absolute(&self.out)?;
        // The scripts name these paths in comments and commands, one to a line: a newline
        // (or another control character) in one would start a command of its own.
        for (what, p) in [
            ("the executable", &self.exe),
            ("the spec", &self.spec),
            ("--out", &self.out),
        ] {
            let text = p.display().to_string();
            if text.chars().any(char::is_control) || text.contains(TASK) {
                return Err(SweepError::Spec(format!(
                    "{what} {text:?}: a path written into the job scripts must not hold a \
                     control character (or {TASK})"
                )));
            }
        }
        Ok(self)
    }

    /// Directory of shard `i`.
    pub fn shard_dir(&self, i: &str) -> PathBuf {
        self.out.join(format!("shard{i}"))
    }

    /// The argv of shard `index` (a number, or a shell variable such as
    /// `${SLURM_ARRAY_TASK_ID}` left unquoted by the caller).
    fn shard_argv(&self, index: &str) -> Vec<String> {
        let mut v = vec![
            self.exe.display().to_string(),
            "sweep".into(),
            self.spec.display().to_string(),
            "--out".into(),
            self.shard_dir(index).display().to_string(),
            "--shard".into(),
            format!("{index}/{}", self.shards),
            "--no-analysis".into(),
        ];
        if let Some(k) = self.threads {
            v.push("--threads".into());
            v.push(k.to_string());
        }
        v
    }

    /// The merge command line.
    pub fn merge_line(&self) -> String {
        let mut v = vec![
            self.exe.display().to_string(),
            "merge".into(),
            "--out".into(),
            self.out.display().to_string(),
            "--bootstrap".into(),
            self.bootstrap.to_string(),
            "--seed".into(),
            self.seed.to_string(),
        ];
        v.extend((0..self.shards).map(|i| self.shard_dir(&i.to_string()).display().to_string()));
        line(&v)
    }

    /// The command line of shard `i`.
    pub fn shard_line(&self, i: usize) -> String {
        line(&self.shard_argv(&i.to_string()))
    }

    /// Writes the job files under `out/jobs/` and returns their paths.
    pub fn write(&self, kind: JobKind) -> Result<Vec<PathBuf>, SweepError> {
        let dir = self.out.join("jobs");
        std::fs::create_dir_all(&dir).map_err(|source| SweepError::Io {
            path: dir.clone(),
            source,
        })?;
        let merge_sh = format!(
            "#!/bin/sh\n# Joins the {} shards of {} into {} (fit.json, figures).\nset -e\n{}\n",
            self.shards,
            self.spec.display(),
            self.out.display(),
            self.merge_line()
        );
        let files: Vec<(&str, String)> = match kind {
            JobKind::Manifest => {
                let mut s = String::new();
                for i in 0..self.shards {
                    s.push_str(&self.shard_line(i));
                    s.push('\n');
                }
                vec![("shards.txt", s), ("merge.sh", merge_sh)]
            }
            JobKind::Slurm => {
                // The task index is substituted by the shell at run time: in every word that
                // holds it, the text around it is quoted on its own and the variable stands
                // between, in double quotes (inside single quotes it would stay literal).
                let var = "\"${SLURM_ARRAY_TASK_ID}\"";
                let cmd = self
                    .shard_argv(TASK)
                    .iter()
                    .map(|w| {
                        w.split(TASK)
                            .map(|part| {
                                if part.is_empty() {
                                    String::new()
                                } else {
                                    shell_quote(part)
                                }
                            })
                            .collect::<Vec<_>>()
                            .join(var)
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                let cpus = self
                    .threads
                    .map_or(String::new(), |k| format!("#SBATCH --cpus-per-task={k}\n"));
                let sweep = format!(
                    "#!/bin/bash\n#SBATCH --job-name={name}\n#SBATCH --array=0-{last}\n{cpus}\
                     # Shard ${{SLURM_ARRAY_TASK_ID}} of {n} of {spec}.\nset -euo pipefail\n\
                     : \"${{SLURM_ARRAY_TASK_ID:?run as an array job (sbatch --array)}}\"\n{cmd}\n",
                    name = shell_quote(&self.name),
                    last = self.shards - 1,
                    n = self.shards,
                    spec = self.spec.display(),
                );
                let merge = format!(
                    "#!/bin/bash\n#SBATCH --job-name={}-merge\nset -euo pipefail\n{}\n",
                    shell_quote(&self.name),
                    self.merge_line()
                );
                let submit = format!(
                    "#!/bin/sh\n# Submits the array job, then the merge once every shard succeeded.\nset -e\n\
                     cd {dir}\njid=$(sbatch --parsable sweep.sbatch)\n\
                     sbatch --dependency=afterok:\"${{jid%%;*}}\" merge.sbatch\n",
                    dir = shell_quote(&dir.display().to_string())
                );
                vec![
                    ("sweep.sbatch", sweep),
                    ("merge.sbatch", merge),
                    ("submit.sh", submit),
                ]
            }
        };
        let mut out = Vec::new();
        for (name, text) in files {
            let p = dir.join(name);
            crate::atomic::write(&p, text).map_err(|source| SweepError::Io {
                path: p.clone(),
                source,
            })?;
            #[cfg(unix)]
            if name.ends_with(".sh") || name.ends_with(".sbatch") {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
            }
            out.push(p);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_spaces_and_quotes() {
        assert_eq!(shell_quote("a/b-c.toml"), "a/b-c.toml");
        assert_eq!(shell_quote("my dir"), "'my dir'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn zero_or_absurd_shard_counts_are_refused() {
        let p = JobPlan {
            exe: "sinklab".into(),
            spec: "s.toml".into(),
            out: "o".into(),
            shards: 0,
            threads: None,
            bootstrap: 10,
            seed: 0,
            name: "s".into(),
        };
        assert!(p.clone().normalised().is_err());
        assert!(
            JobPlan {
                shards: MAX_SHARDS + 1,
                ..p.clone()
            }
            .normalised()
            .is_err()
        );
        let ok = JobPlan { shards: 3, ..p }.normalised().unwrap();
        assert!(ok.out.is_absolute() && ok.spec.is_absolute() && ok.exe.is_absolute());
    }
}
