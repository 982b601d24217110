//! Dockerfile replay of a local sandbox: WORKDIR, ENV, ARG, COPY/ADD on the host side, each
//! RUN step in a one-off `bwrap` with network (like `docker build`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::fsmap::{self, Location};
use super::process;
use super::transfer::{copy_step, read_only_msg};
use super::{LocalSandbox, DEFAULT_WORKDIR};
use crate::dockerfile::{Dockerfile, Instruction, RunCommand};
use crate::{ExecOutput, Result, SandboxError, SandboxSpec};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A setup error naming the Dockerfile, line and instruction.
pub(super) fn step_error(
    df: &Dockerfile,
    line: usize,
    ins: &Instruction,
    msg: &str,
) -> SandboxError {
    let kw = match ins {
        Instruction::From(_) => "FROM",
        Instruction::Workdir(_) => "WORKDIR",
        Instruction::Env(_) => "ENV",
        Instruction::Arg { .. } => "ARG",
        Instruction::Copy { add: true, .. } => "ADD",
        Instruction::Copy { .. } => "COPY",
        Instruction::Run(_) => "RUN",
        Instruction::Shell(_) => "SHELL",
        Instruction::Ignored { keyword, .. } => keyword,
    };
    SandboxError::Setup(format!("{}:{line}: {kw}: {msg}", df.path.display()))
}

/// Describes a failed RUN step: exit code, the output tails and a hint for package managers.
fn run_failure(run: &RunCommand, out: &ExecOutput, timeout: Duration) -> String {
    let what = if out.timed_out {
        format!("timed out after {timeout:?}")
    } else {
        match out.exit_code {
            Some(c) => format!("exited with code {c}"),
            None => "was killed by a signal".to_string(),
        }
    };
    let cmd = match run {
        RunCommand::Shell(s) => s.clone(),
        RunCommand::Exec(v) => v.join(" "),
    };
    let mut msg = format!(
        "command {:?} {what}\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
        process::tail(&cmd, 200),
        process::tail(&out.stdout, 1024),
        process::tail(&out.stderr, 1024),
    );
    if ["apt-get ", "apt ", "apk ", "yum ", "dnf "]
        .iter()
        .any(|pm| cmd.contains(pm))
    {
        msg.push_str(
            "\nnote: the local backend cannot install system packages (the host's /usr, /etc \
             and /var are read-only); use the docker backend or install them on the host",
        );
    }
    msg
}

/// Keeps `[A-Za-z0-9._-]`, replaces the rest, truncates.
fn sanitize(s: &str, max: usize) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect();
    if out.is_empty() {
        "x".into()
    } else {
        out
    }
}

/// Creates a fresh `ahe-local-<task>-<trial>-<unique>` dir under the temp dir.
pub(super) fn make_trial_dir(spec: &SandboxSpec) -> Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "ahe-local-{}-{}-{}-{n}-{nanos:x}",
            sanitize(&spec.task, 40),
            sanitize(&spec.trial_id, 40),
            std::process::id()
        );
        let dir = base.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

impl LocalSandbox {
    /// Replays the Dockerfile's steps (WORKDIR, ENV, ARG, COPY/ADD, RUN, SHELL).
    pub(super) async fn replay(
        &mut self,
        df: &Dockerfile,
        ctx: &Path,
        timeout: Duration,
    ) -> Result<()> {
        let mut workdir = "/".to_string();
        let mut env = BTreeMap::new();
        let mut args = BTreeMap::new();
        let mut shell = vec!["/bin/sh".to_string(), "-c".to_string()];
        for step in &df.steps {
            let fail = |m: &str| step_error(df, step.line, &step.instruction, m);
            match &step.instruction {
                Instruction::Workdir(d) => {
                    self.make_workdir(d).map_err(|m| fail(&m))?;
                    workdir = d.clone();
                }
                Instruction::Env(pairs) => env.extend(pairs.iter().cloned()),
                Instruction::Arg { name, default } => {
                    args.insert(name.clone(), default.clone().unwrap_or_default());
                }
                Instruction::Copy {
                    sources,
                    dest,
                    dest_is_dir,
                    add,
                } => {
                    let (fs, ctx) = (self.fs.clone(), ctx.to_path_buf());
                    let (sources, dest, dir, add) =
                        (sources.clone(), dest.clone(), *dest_is_dir, *add);
                    tokio::task::spawn_blocking(move || {
                        copy_step(&fs, &ctx, &sources, &dest, dir, add)
                    })
                    .await
                    .map_err(|e| SandboxError::Backend(e.to_string()))?
                    .map_err(|m| fail(&m))?;
                }
                Instruction::Run(run) => {
                    let argv = match run {
                        RunCommand::Shell(s) => shell.iter().cloned().chain([s.clone()]).collect(),
                        RunCommand::Exec(v) => v.clone(),
                    };
                    let mut step_env = args.clone();
                    step_env.extend(env.clone());
                    let out = self
                        .run(argv, &workdir, step_env, None, Some(timeout), true)
                        .await?;
                    if out.timed_out || out.exit_code != Some(0) {
                        return Err(fail(&run_failure(run, &out, timeout)));
                    }
                }
                Instruction::Shell(s) => shell = s.clone(),
                Instruction::From(_) | Instruction::Ignored { .. } => {}
            }
        }
        self.workdir = df
            .workdir
            .clone()
            .unwrap_or_else(|| DEFAULT_WORKDIR.to_string());
        self.env = env;
        Ok(())
    }

    /// Creates a WORKDIR in the mapped fs (or checks it exists in a read-only host dir).
    fn make_workdir(&self, dir: &str) -> std::result::Result<(), String> {
        let (resolved, loc) = self.fs.resolve(dir, true)?;
        match loc {
            Location::Writable(p) => {
                let top = self
                    .fs
                    .top_dir(resolved.split('/').nth(1).unwrap_or_default());
                fsmap::ensure_dir(&top, &p).map_err(|e| format!("{dir}: {e}"))?;
                match self.fs.owner {
                    Some(o) => o.chown_copied(&top, &p).map_err(|e| format!("{dir}: {e}")),
                    None => Ok(()),
                }
            }
            Location::ReadOnly(p) if p.is_dir() => Ok(()),
            Location::Outside if resolved == "/" => Ok(()),
            _ => Err(read_only_msg(
                dir,
                resolved.split('/').nth(1).unwrap_or("/"),
            )),
        }
    }
}
