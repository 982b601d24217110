//! The exec server of a bubblewrap sandbox: ONE long-lived `bwrap` per sandbox.
//!
//! `bwrap` runs [`SCRIPT`] (pure bash), which reads one request per line on its stdin:
//! `run <id>` forks a wrapper that starts the exec described by `<id>.args` (cwd, stdin
//! path, argv; NUL-separated) in its own process group (`set -m`) and writes `pid <pgid>`,
//! then `done <status>` to the FIFO `<id>.st`; `kill <pgid>` SIGKILLs a process group;
//! `quit` ends the server, which ends the sandbox's pid namespace and every process in it.
//! The exec's stdout and stderr are the FIFOs `<id>.out`/`<id>.err`, read by the host like
//! pipes (capped, never written to disk); its stdin is the file `<id>.in` or `/dev/null`.
//! The exec dir is per trial, outside the sandbox's writable dirs, and bound read-only at
//! [`EXEC_DIR`] (FIFOs stay writable on a read-only mount).

use std::ffi::CString;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot, watch, Mutex};

use super::process;
use crate::{ExecOutput, Result, SandboxError};

/// Where the per-trial exec dir is mounted inside the sandbox (read-only).
pub(crate) const EXEC_DIR: &str = "/.ahe-exec";

/// How long to wait for the server's `ready` line.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `shutdown` waits for the server to quit before SIGKILLing `bwrap`.
const QUIT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long an exec whose wrapper vanished waits to learn whether the whole server died.
const DEATH_GRACE: Duration = Duration::from_millis(300);

/// The server (`bash <exec dir>/server.sh <exec dir>`).
const SCRIPT: &str = r#"D=$1
echo ready
while read -r op arg; do
  case $op in
  run)
    (
      exec 3>"$D/$arg.st" || exit
      set -m
      if ! mapfile -d '' -t a <"$D/$arg.args" || ((${#a[@]} < 3)) || ! cd -- "${a[0]}"; then
        echo "done 126" >&3
        exit
      fi
      "${a[@]:2}" <"${a[1]}" >"$D/$arg.out" 2>"$D/$arg.err" 3>&- &
      p=$!
      set +m
      echo "pid $p" >&3
      wait "$p" 2>/dev/null
      echo "done $?" >&3
    ) &
    ;;
  kill) kill -KILL -- "-$arg" 2>/dev/null ;;
  quit) exit 0 ;;
  esac
done
"#;

/// One sandbox's exec server.
pub(crate) struct ExecServer {
    child: Mutex<Option<Child>>,
    requests: mpsc::UnboundedSender<String>,
    dead: watch::Receiver<bool>,
    dir: PathBuf,
    log: PathBuf,
    next: AtomicU64,
}

impl std::fmt::Debug for ExecServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecServer")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl ExecServer {
    /// Spawns `bwrap` (`cmd`: namespaces and mounts, binding `dir` at `EXEC_DIR`) running
    /// the server with `bash`, and waits until it is ready. Its stderr goes to `log`.
    pub(crate) async fn start(
        mut cmd: Command,
        bash: &str,
        dir: PathBuf,
        log: PathBuf,
    ) -> Result<ExecServer> {
        std::fs::write(dir.join("server.sh"), SCRIPT)?;
        cmd.arg("--")
            .args([bash, &format!("{EXEC_DIR}/server.sh"), EXEC_DIR])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            let prog = cmd.as_std().get_program().to_string_lossy().into_owned();
            SandboxError::Backend(format!("cannot spawn {prog}: {e}"))
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(SandboxError::Backend(
                "exec server has no stdio pipes".into(),
            ));
        };
        let (requests, rx) = mpsc::unbounded_channel();
        let (dead_tx, dead) = watch::channel(false);
        let (ready_tx, ready) = oneshot::channel();
        tokio::spawn(write_requests(stdin, rx));
        tokio::spawn(read_replies(stdout, ready_tx, dead_tx));
        let server = ExecServer {
            child: Mutex::new(Some(child)),
            requests,
            dead,
            dir,
            log,
            next: AtomicU64::new(1),
        };
        if let Ok(Ok(())) = tokio::time::timeout(START_TIMEOUT, ready).await {
            return Ok(server);
        }
        let err = server.error("did not start");
        server.shutdown().await;
        Err(err)
    }

    /// Runs `argv` in `cwd` (both already checked) and waits for it, like `process::run`.
    pub(crate) async fn exec(
        &self,
        cwd: &str,
        argv: &[String],
        stdin: Option<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<ExecOutput> {
        let start = Instant::now();
        if *self.dead.borrow() {
            return Err(self.error("exited"));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let files = JobFiles {
            dir: self.dir.clone(),
            id,
        };
        let stdin_path = match stdin {
            Some(data) => {
                std::fs::write(files.path("in"), data)?;
                format!("{EXEC_DIR}/{id}.in")
            }
            None => "/dev/null".to_string(),
        };
        let mut args = Vec::new();
        for a in [cwd, stdin_path.as_str()]
            .into_iter()
            .chain(argv.iter().map(String::as_str))
        {
            if a.contains('\0') {
                return Err(SandboxError::Backend(
                    "the command, cwd or environment contains a NUL byte".into(),
                ));
            }
            args.extend_from_slice(a.as_bytes());
            args.push(0);
        }
        std::fs::write(files.path("args"), args)?;
        let (stop_tx, stop) = watch::channel(false);
        let out = capture(files.fifo("out")?, stop.clone());
        let err = capture(files.fifo("err")?, stop);
        // Dropping `kill_tx` (a cancelled exec) makes `follow` kill the exec's group.
        let (kill_tx, kill) = watch::channel(false);
        let status = files.fifo("st")?;
        let mut follow = tokio::spawn(follow(
            status,
            kill,
            self.dead.clone(),
            self.requests.clone(),
            files,
        ));
        let t_files = start.elapsed();
        if self.requests.send(format!("run {id}\n")).is_err() {
            return Err(self.error("exited"));
        }
        let waited = match timeout {
            Some(t) => tokio::time::timeout(t, &mut follow).await.ok(),
            None => Some((&mut follow).await),
        };
        let (status, timed_out) = match waited {
            Some(s) => (s.unwrap_or(None), false),
            None => {
                let _ = kill_tx.send(true);
                ((&mut follow).await.unwrap_or(None), true)
            }
        };
        if status.is_none() && !timed_out {
            return Err(self.vanished().await);
        }
        let t_done = start.elapsed();
        let (stdout, stderr) = process::collect(out, err, stop_tx).await;
        if std::env::var_os("AHE_TRACE").is_some() {
            eprintln!(
                "files {t_files:?} done {t_done:?} collected {:?}",
                start.elapsed()
            );
        }
        Ok(ExecOutput {
            exit_code: if timed_out { None } else { status },
            stdout,
            stderr,
            timed_out,
            duration_ms: start.elapsed().as_millis() as u64,
        })
    }

    /// Ends the server (and with it every process of the sandbox) and waits for `bwrap`.
    pub(crate) async fn shutdown(&self) {
        let _ = self.requests.send("quit\n".into());
        if let Some(mut child) = self.child.lock().await.take() {
            if tokio::time::timeout(QUIT_TIMEOUT, child.wait())
                .await
                .is_err()
            {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }

    /// SIGKILLs `bwrap` now (for `Drop`); the pid namespace dies with it.
    pub(crate) fn kill_now(&self) {
        if let Ok(mut child) = self.child.try_lock() {
            if let Some(c) = child.as_mut() {
                let _ = c.start_kill();
            }
        }
    }

    /// The error of an exec whose wrapper vanished without an exit status.
    async fn vanished(&self) -> SandboxError {
        let mut dead = self.dead.clone();
        let _ = tokio::time::timeout(DEATH_GRACE, dead.wait_for(|d| *d)).await;
        if *dead.borrow() {
            return self.error("exited");
        }
        SandboxError::Backend(
            "the exec's wrapper process in the sandbox vanished before reporting an exit \
             status (killed from inside the sandbox or by the out-of-memory killer?)"
                .into(),
        )
    }

    /// A backend error saying the server `what`, with the tail of its log.
    fn error(&self, what: &str) -> SandboxError {
        let log = std::fs::read(&self.log).unwrap_or_default();
        let log = String::from_utf8_lossy(&log);
        let log = process::tail(log.trim(), 1000);
        let mut msg =
            format!("the sandbox's exec server (a long-lived bwrap) {what}; create a new sandbox");
        if !log.is_empty() {
            msg.push_str(&format!("; its log: {log}"));
        }
        SandboxError::Backend(msg)
    }
}

/// Writes request lines to the server's stdin until the channel closes or the pipe breaks.
async fn write_requests(mut stdin: ChildStdin, mut rx: mpsc::UnboundedReceiver<String>) {
    while let Some(line) = rx.recv().await {
        if stdin.write_all(line.as_bytes()).await.is_err() {
            break;
        }
    }
}

/// Reads the server's stdout: signals `ready`, and `dead` at EOF (the server is gone).
async fn read_replies(stdout: ChildStdout, ready: oneshot::Sender<()>, dead: watch::Sender<bool>) {
    let mut ready = Some(ready);
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line == "ready" {
            if let Some(r) = ready.take() {
                let _ = r.send(());
            }
        } else {
            tracing::debug!("local sandbox: unexpected exec server output {line:?}");
        }
    }
    let _ = dead.send(true);
}

/// Follows one exec's status FIFO: returns its exit status, or `None` when its wrapper
/// vanished (or the server died) first. Kills the exec's process group once `kill` fires
/// or its sender is dropped (the exec was cancelled), and when the wrapper vanished.
/// The exec's files are removed when this returns.
async fn follow(
    status: pipe::Receiver,
    mut kill: watch::Receiver<bool>,
    mut dead: watch::Receiver<bool>,
    requests: mpsc::UnboundedSender<String>,
    _files: JobFiles,
) -> Option<i32> {
    let send_kill = |pgid: i32| {
        if pgid > 1 {
            let _ = requests.send(format!("kill {pgid}\n"));
        }
    };
    let mut lines = BufReader::new(status).lines();
    let (mut pgid, mut want_kill) = (None, false);
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(l)) => {
                    if std::env::var_os("AHE_TRACE").is_some() { eprintln!("  line {l:?} at {:?}", std::time::SystemTime::now()); }
                    if let Some(p) = l.strip_prefix("pid ") {
                        pgid = p.trim().parse::<i32>().ok();
                    } else if let Some(s) = l.strip_prefix("done ") {
                        return s.trim().parse().ok();
                    }
                }
                _ => break,
            },
            r = kill.changed(), if !want_kill => want_kill = r.is_err() || *kill.borrow(),
            _ = dead.wait_for(|d| *d) => break,
        }
        if want_kill {
            if let Some(p) = pgid.take() {
                send_kill(p);
            }
        }
    }
    if let Some(p) = pgid {
        send_kill(p);
    }
    None
}

/// Reads a FIFO in a task (capped); resolves when it hits EOF or `stop` fires. The task
/// then keeps draining (and discarding) so background writers do not get SIGPIPE.
fn capture(
    mut fifo: pipe::Receiver,
    stop: watch::Receiver<bool>,
) -> impl Future<Output = (Vec<u8>, u64)> {
    let (tx, result) = oneshot::channel();
    tokio::spawn(async move {
        let _ = tx.send(process::read_capped(&mut fifo, stop).await);
        let _ = tokio::io::copy(&mut fifo, &mut tokio::io::sink()).await;
    });
    async move { result.await.unwrap_or_default() }
}

/// The files of one exec in the exec dir; removed on drop.
struct JobFiles {
    dir: PathBuf,
    id: u64,
}

impl JobFiles {
    const EXTS: [&'static str; 5] = ["args", "in", "out", "err", "st"];

    fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", self.id))
    }

    /// Creates the FIFO `<id>.<ext>` and opens it for reading (non-blocking).
    fn fifo(&self, ext: &str) -> Result<pipe::Receiver> {
        let path = self.path(ext);
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|e| SandboxError::Backend(format!("bad exec dir path: {e}")))?;
        // SAFETY: mkfifo(3) reads a valid NUL-terminated path.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // A FIFO without writers is not readable until one connects, then closes (EOF).
        Ok(pipe::OpenOptions::new().open_receiver(&path)?)
    }
}

impl Drop for JobFiles {
    fn drop(&mut self) {
        for ext in JobFiles::EXTS {
            let _ = std::fs::remove_file(self.path(ext));
        }
    }
}
