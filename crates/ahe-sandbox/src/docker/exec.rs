//! Execs inside a container: capped capture, stdin, exit code, and a kill INSIDE the
//! container on timeout or cancellation.
//!
//! Every exec carries `AHE_EXEC_ID=<unique>` in its environment; children inherit it (even
//! across `setsid`), so a second exec can find and SIGKILL every process of the command by
//! scanning `/proc/*/environ`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::{api_err, spawn_detached, status_of};
use crate::{ExecOutput, Result, SandboxError};

/// At most this many bytes of stdout (and of stderr) are kept.
pub(crate) const OUTPUT_CAP: usize = 8 << 20;

/// How long to keep reading output after a timeout kill.
pub(crate) const DRAIN_GRACE: Duration = Duration::from_secs(3);

/// The environment variable that marks the processes of one exec.
pub(crate) const EXEC_MARKER: &str = "AHE_EXEC_ID";

/// One exec to run.
pub(crate) struct ExecRequest {
    /// Command and arguments.
    pub argv: Vec<String>,
    /// Absolute working directory.
    pub cwd: String,
    /// `KEY=value` pairs added to the container's environment.
    pub env: Vec<String>,
    /// Bytes for stdin (closed afterwards); none = no stdin.
    pub stdin: Option<Vec<u8>>,
    /// Kill after this long.
    pub timeout: Option<Duration>,
    /// Run as this user (`0`: root) instead of the image's.
    pub user: Option<String>,
}

/// A fresh fixed-width marker value (fixed width: no marker is a prefix of another).
pub(crate) fn new_marker() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!("{:08x}{:016x}{:08x}", std::process::id(), nanos, n as u32)
}

/// Kills (SIGKILL) the processes of an exec when dropped while armed (a cancelled exec).
pub(crate) struct KillGuard {
    docker: Docker,
    container: String,
    marker: String,
    /// Whether dropping kills.
    pub armed: bool,
}

impl KillGuard {
    /// An armed guard for the exec marked `marker`.
    pub fn new(docker: &Docker, container: &str, marker: &str) -> KillGuard {
        KillGuard {
            docker: docker.clone(),
            container: container.to_string(),
            marker: marker.to_string(),
            armed: true,
        }
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        if self.armed {
            let (docker, container, marker) = (
                self.docker.clone(),
                std::mem::take(&mut self.container),
                std::mem::take(&mut self.marker),
            );
            spawn_detached(async move {
                if let Err(e) = kill_marked(&docker, &container, &marker).await {
                    tracing::debug!("docker: killing a cancelled exec failed: {e}");
                }
            });
        }
    }
}

/// Captured bytes of one stream, capped at [`OUTPUT_CAP`].
#[derive(Default)]
pub(crate) struct Capture {
    kept: Vec<u8>,
    dropped: u64,
}

impl Capture {
    /// Keeps what fits under the cap, counts the rest.
    pub fn push(&mut self, data: &[u8]) {
        let room = OUTPUT_CAP.saturating_sub(self.kept.len()).min(data.len());
        self.kept.extend_from_slice(&data[..room]);
        self.dropped += (data.len() - room) as u64;
    }

    /// The kept bytes and how many were dropped.
    pub fn into_parts(self) -> (Vec<u8>, u64) {
        (self.kept, self.dropped)
    }

    /// Lossy text, with a note when bytes were dropped.
    pub fn text(self, name: &str) -> String {
        let mut s = String::from_utf8_lossy(&self.kept).into_owned();
        if self.dropped > 0 {
            s.push_str(&format!(
                "\n[ahe: {} more bytes of {name} dropped (kept the first {OUTPUT_CAP})]",
                self.dropped
            ));
        }
        s
    }
}

/// The error for a failed exec call.
fn exec_err(container: &str, e: bollard::errors::Error) -> SandboxError {
    match status_of(&e) {
        Some(404) => SandboxError::Backend(format!("container {container} no longer exists")),
        Some(409) => SandboxError::Backend(format!("container {container} is not running: {e}")),
        _ => api_err("exec", e),
    }
}

/// Runs one exec to completion (or timeout) and returns its output and exit code.
pub(crate) async fn run(docker: &Docker, container: &str, req: ExecRequest) -> Result<ExecOutput> {
    let start = Instant::now();
    let marker = new_marker();
    let mut env = req.env;
    env.push(format!("{EXEC_MARKER}={marker}"));
    let config = CreateExecOptions {
        attach_stdin: Some(req.stdin.is_some()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        env: Some(env),
        cmd: Some(req.argv),
        user: req.user,
        working_dir: Some(req.cwd.clone()),
        ..Default::default()
    };
    let cwd = req.cwd;
    let created = docker
        .create_exec(container, config)
        .await
        .map_err(|e| exec_err(container, e))?;
    let mut guard = KillGuard::new(docker, container, &marker);
    let opts = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: Some(64 << 10),
    };
    let started = docker
        .start_exec(&created.id, Some(opts))
        .await
        .map_err(|e| exec_err(container, e))?;
    let StartExecResults::Attached { mut output, input } = started else {
        return Err(SandboxError::Backend("exec started detached".into()));
    };
    let writer = req.stdin.map(|data| {
        let mut input = input;
        tokio::spawn(async move {
            let _ = input.write_all(&data).await;
            let _ = input.shutdown().await;
        })
    });
    let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
    let (out, err, timed_out) =
        read_output(docker, container, &marker, &mut output, deadline).await?;
    if let Some(w) = writer {
        w.abort();
    }
    let exit_code = if timed_out {
        None
    } else {
        Some(exit_code(docker, &created.id).await?)
    };
    guard.armed = false;
    if exit_code == Some(126) && err.kept.is_empty() {
        let text = String::from_utf8_lossy(&out.kept);
        if text.starts_with("OCI runtime exec failed") {
            return Err(start_failure(text.trim(), &cwd));
        }
    }
    Ok(ExecOutput {
        exit_code,
        stdout: out.text("stdout"),
        stderr: err.text("stderr"),
        timed_out,
        duration_ms: start.elapsed().as_millis() as u64,
    })
}

/// The output stream of a started exec.
type OutputStream = std::pin::Pin<
    Box<
        dyn futures_util::Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>>
            + Send,
    >,
>;

/// Reads the exec's stdout and stderr until it ends; at `deadline` kills its processes,
/// keeps what they already wrote ([`DRAIN_GRACE`]) and reports it timed out.
async fn read_output(
    docker: &Docker,
    container: &str,
    marker: &str,
    output: &mut OutputStream,
    deadline: Option<tokio::time::Instant>,
) -> Result<(Capture, Capture, bool)> {
    let (mut out, mut err) = (Capture::default(), Capture::default());
    let mut timed_out = false;
    loop {
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, output.next()).await {
                Ok(n) => n,
                Err(_) if timed_out => break,
                Err(_) => {
                    timed_out = true;
                    if let Err(e) = kill_marked(docker, container, marker).await {
                        tracing::warn!("docker: killing a timed-out exec failed: {e}");
                    }
                    // Keep reading what the killed processes already wrote, briefly.
                    drain(output, &mut out, &mut err).await;
                    break;
                }
            },
            None => output.next().await,
        };
        match next {
            None => break,
            Some(Ok(LogOutput::StdErr { message })) => err.push(&message),
            Some(Ok(LogOutput::StdOut { message })) | Some(Ok(LogOutput::Console { message })) => {
                out.push(&message)
            }
            Some(Ok(LogOutput::StdIn { .. })) => {}
            Some(Err(e)) => return Err(api_err("reading exec output", e)),
        }
    }
    Ok((out, err, timed_out))
}

/// Keeps reading what the killed processes already wrote, for at most [`DRAIN_GRACE`].
async fn drain(output: &mut OutputStream, out: &mut Capture, err: &mut Capture) {
    let grace = tokio::time::Instant::now() + DRAIN_GRACE;
    let _ = tokio::time::timeout_at(grace, async {
        while let Some(item) = output.next().await {
            match item {
                Ok(LogOutput::StdErr { message }) => err.push(&message),
                Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                    out.push(&message)
                }
                _ => {}
            }
        }
    })
    .await;
}

/// Marks the error of an exec whose program is not in the image.
pub(crate) const NOT_FOUND: &str = "executable file not found";

/// The error for an exec the runtime could not start (bad cwd, missing program).
fn start_failure(text: &str, cwd: &str) -> SandboxError {
    if text.contains("chdir to cwd") {
        SandboxError::Backend(format!("working directory {cwd} does not exist"))
    } else {
        SandboxError::Backend(format!("cannot start the command: {text}"))
    }
}

/// The exit code of a finished exec (waits briefly if the engine still reports it running).
async fn exit_code(docker: &Docker, exec_id: &str) -> Result<i32> {
    for _ in 0..400 {
        let info = docker
            .inspect_exec(exec_id)
            .await
            .map_err(|e| api_err("inspecting exec", e))?;
        if info.running != Some(true) {
            return info.exit_code.map(|c| c as i32).ok_or_else(|| {
                SandboxError::Backend("the engine reported no exit code for the exec".into())
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Err(SandboxError::Backend(
        "the exec's output ended but the engine still reports it running".into(),
    ))
}

/// SIGKILLs every process in the container whose environment carries `marker`, until none
/// is left (zombies do not count: their environment is gone).
pub(crate) async fn kill_marked(docker: &Docker, container: &str, marker: &str) -> Result<()> {
    let script = format!(
        "m='{EXEC_MARKER}={marker}'; i=0; while [ $i -lt 200 ]; do \
         f=$(grep -l -a -F -e \"$m\" /proc/[0-9]*/environ 2>/dev/null); \
         [ -z \"$f\" ] && exit 0; \
         for x in $f; do p=${{x#/proc/}}; kill -9 \"${{p%/environ}}\" 2>/dev/null; done; \
         i=$((i+1)); sleep 0.01; done; echo 'processes survived SIGKILL' >&2; exit 1"
    );
    let config = CreateExecOptions {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(vec!["sh".to_string(), "-c".to_string(), script]),
        working_dir: Some("/".to_string()),
        ..Default::default()
    };
    let created = docker
        .create_exec(container, config)
        .await
        .map_err(|e| exec_err(container, e))?;
    let started = docker
        .start_exec(&created.id, None)
        .await
        .map_err(|e| exec_err(container, e))?;
    let mut msg = Vec::new();
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(item) = output.next().await {
            if let Ok(LogOutput::StdErr { message }) = item {
                msg.extend_from_slice(&message);
            }
        }
    }
    match exit_code(docker, &created.id).await? {
        0 => Ok(()),
        c => Err(SandboxError::Backend(format!(
            "kill exec exited with {c}: {}",
            String::from_utf8_lossy(&msg).trim()
        ))),
    }
}
