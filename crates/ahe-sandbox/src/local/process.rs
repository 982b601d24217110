//! Running one process group: capped capture, stdin, timeout and kill-on-cancel.

use std::future::Future;
use std::process::Stdio;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::{ExecOutput, Result, SandboxError};

/// At most this many bytes of stdout (and of stderr) are kept.
pub(crate) const OUTPUT_CAP: usize = 8 << 20;

/// How long to keep reading output after the command ended (for background writers).
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Orders this process's forks against host-side writes of sandbox files. Between fork and
/// exec a child holds a copy of every open fd, and a file that any process holds open for
/// writing cannot be executed (ETXTBSY, "Text file busy"): a `tests/test.sh` being copied in
/// while another trial spawns its `bwrap` would fail to run. Writers share it; a spawn
/// holds it alone (a spawn returns once the child has exec'd).
static FORK_LOCK: RwLock<()> = RwLock::new(());

/// Held while a sandbox file is written on the host: no child is forked meanwhile.
pub(crate) fn writing() -> RwLockReadGuard<'static, ()> {
    FORK_LOCK.read().unwrap_or_else(|e| e.into_inner())
}

/// Held while a child process is spawned: no sandbox file is open for writing meanwhile.
pub(crate) fn spawning() -> RwLockWriteGuard<'static, ()> {
    FORK_LOCK.write().unwrap_or_else(|e| e.into_inner())
}

/// Kills a process group with SIGKILL when dropped while armed (e.g. a cancelled exec).
struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl GroupGuard {
    /// Sends SIGKILL to every process of the group.
    fn kill(&self) {
        if self.pgid > 1 {
            // SAFETY: kill(2) has no memory-safety preconditions; a negative pid names a group.
            unsafe {
                libc::kill(-self.pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
    }
}

/// What `read_capped` got from a pipe.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    /// The first `OUTPUT_CAP` bytes.
    kept: Vec<u8>,
    /// How many more bytes were read and dropped.
    dropped: u64,
    /// Whether the pipe reached EOF (rather than being cancelled).
    pub(crate) eof: bool,
}

/// Reads a pipe to EOF (or until cancelled), keeping at most `OUTPUT_CAP` bytes.
pub(crate) async fn read_capped<R: AsyncRead + Unpin>(
    mut pipe: R,
    mut cancel: watch::Receiver<bool>,
) -> Captured {
    let mut c = Captured::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            biased;
            r = pipe.read(&mut buf) => match r {
                Ok(0) | Err(_) => {
                    c.eof = true;
                    break;
                }
                Ok(n) => {
                    let room = OUTPUT_CAP.saturating_sub(c.kept.len()).min(n);
                    c.kept.extend_from_slice(&buf[..room]);
                    c.dropped += (n - room) as u64;
                }
            },
            _ = cancel.changed() => break,
        }
    }
    c
}

/// Lossy text of captured bytes, with a note when bytes were dropped.
fn text(name: &str, c: &Captured) -> String {
    let (bytes, dropped) = (&c.kept, c.dropped);
    let mut s = String::from_utf8_lossy(bytes).into_owned();
    if dropped > 0 {
        s.push_str(&format!(
            "\n[ahe: {dropped} more bytes of {name} dropped (kept the first {OUTPUT_CAP})]"
        ));
    }
    s
}

/// Spawns `cmd` in its own process group and waits for it.
///
/// On timeout the whole group gets SIGKILL (`timed_out`, no exit code). Dropping the
/// returned future also kills the group. With `kill_leftovers`, processes the command left
/// running in its group are killed when it exits.
pub(crate) async fn run(
    mut cmd: Command,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    kill_leftovers: bool,
) -> Result<ExecOutput> {
    let start = Instant::now();
    let mut child = spawn(&mut cmd, stdin.is_some())?;
    let pid = child.id().unwrap_or(0) as i32;
    let mut guard = GroupGuard {
        pgid: pid,
        armed: true,
    };
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let out = child
        .stdout
        .take()
        .map(|p| tokio::spawn(read_capped(p, cancel_rx.clone())));
    let err = child
        .stderr
        .take()
        .map(|p| tokio::spawn(read_capped(p, cancel_rx)));
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        tokio::spawn(async move {
            let _ = pipe.write_all(&data).await;
            let _ = pipe.shutdown().await;
        });
    }
    let waited = match timeout {
        Some(t) => tokio::time::timeout(t, child.wait()).await.ok(),
        None => Some(child.wait().await),
    };
    let (status, timed_out) = match waited {
        Some(s) => (Some(s.map_err(SandboxError::Io)?), false),
        None => {
            guard.kill();
            let _ = child.wait().await;
            (None, true)
        }
    };
    if kill_leftovers {
        guard.kill();
    }
    guard.armed = false;
    let out = async move {
        match out {
            Some(h) => h.await.unwrap_or_default(),
            None => Default::default(),
        }
    };
    let err = async move {
        match err {
            Some(h) => h.await.unwrap_or_default(),
            None => Default::default(),
        }
    };
    let (stdout, stderr, _) = collect(out, err, cancel_tx).await;
    Ok(ExecOutput {
        exit_code: status.and_then(|s| s.code()),
        stdout,
        stderr,
        timed_out,
        duration_ms: start.elapsed().as_millis() as u64,
    })
}

/// Spawns `cmd` in a process group of its own (killed when dropped), stdout and stderr
/// piped, stdin piped only when there is input, while no sandbox file is open for writing.
fn spawn(cmd: &mut Command, piped_stdin: bool) -> Result<Child> {
    cmd.process_group(0)
        .kill_on_drop(true)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if piped_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let spawned = {
        let _fork = spawning();
        cmd.spawn()
    };
    spawned.map_err(|e| {
        let prog = cmd.as_std().get_program().to_string_lossy().into_owned();
        SandboxError::Backend(format!("cannot spawn {prog}: {e}"))
    })
}

/// Awaits both captures; `DRAIN_GRACE` after the command ended, `cancel` stops them (output
/// still written by background processes is then not waited for). Returns stdout, stderr
/// and whether both reached EOF.
pub(crate) async fn collect(
    out: impl Future<Output = Captured>,
    err: impl Future<Output = Captured>,
    cancel: watch::Sender<bool>,
) -> (String, String, bool) {
    let both = async { tokio::join!(out, err) };
    tokio::pin!(both);
    let (o, e) = tokio::select! {
        r = &mut both => r,
        _ = tokio::time::sleep(DRAIN_GRACE) => {
            let _ = cancel.send(true);
            both.await
        }
    };
    (text("stdout", &o), text("stderr", &e), o.eof && e.eof)
}

/// The last `max` bytes of `s` (on a char boundary).
pub(crate) fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut i = s.len() - max;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn no_spawn_while_a_sandbox_file_is_being_written() {
        let spawned = Arc::new(AtomicBool::new(false));
        let write = writing();
        // Writers share the lock.
        let other_writer = std::thread::spawn(|| drop(writing()));
        other_writer.join().unwrap();
        let s = spawned.clone();
        let spawner = std::thread::spawn(move || {
            let _fork = spawning();
            s.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !spawned.load(Ordering::SeqCst),
            "a spawn ran during a write"
        );
        drop(write);
        spawner.join().unwrap();
        assert!(spawned.load(Ordering::SeqCst));
    }
}
