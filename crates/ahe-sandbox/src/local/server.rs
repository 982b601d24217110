//! The exec server of a bubblewrap sandbox: ONE long-lived `bwrap` per sandbox.
//!
//! `bwrap` runs [`SCRIPT`] (pure bash), which reads one request per line on its stdin:
//! `worker <n>` forks worker `n`, `kill <pgid>` SIGKILLs a process group, `quit` ends the
//! server, which ends the sandbox's pid namespace and every process in it. A worker is a
//! persistent bash loop that keeps one forked "spare" subshell waiting (its own process
//! group, `set -m`), so no fork is on an exec's critical path: the spare reads `<id> <count>`
//! from the FIFO `w<n>.req`, writes `pid <id> <pgid>` to the FIFO `w<n>.st`, and execs the
//! exec described by the first `count` strings of `w<n>.args` (cwd, stdin, stdout and stderr
//! paths, variables, argv; NUL-terminated; overwritten in place, never truncated, as ext4
//! flushes a truncated file to disk on close). The worker waits for it, writes
//! `done <pgid> <status>` (a spare killed while idle reports a pgid no exec was told about),
//! and forks the next spare. The host lends idle workers to execs and asks for a new one
//! when all are busy (concurrent execs).
//!
//! The exec's stdout and stderr are FIFOs of its worker, read by the host like pipes (capped,
//! never written to disk); they are reused by the worker's next exec once both reached EOF,
//! else replaced (a background process may still hold them; the host then keeps draining
//! them so it does not get SIGPIPE). Its stdin is the file `<id>.in` or `/dev/null`. Nothing
//! is created or deleted per exec in the common case (inode churn is slow on ext4). The exec
//! dir is per trial, outside the sandbox's writable dirs, and bound read-only at
//! [`EXEC_DIR`] (FIFOs stay writable on a read-only mount).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot, watch, Mutex};

mod files;
use files::{capture, mkfifo, Poke, StdinFile};

use super::owner::Owner;
use super::process;
use crate::{ExecOutput, Result, SandboxError};

/// Where the per-trial exec dir is mounted inside the sandbox (read-only).
pub(crate) const EXEC_DIR: &str = "/.ahe-exec";

/// How long to wait for the server's `ready` line.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `shutdown` waits for the server to quit before SIGKILLing `bwrap`.
const QUIT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long an exec whose worker vanished waits to learn whether the whole server died.
const DEATH_GRACE: Duration = Duration::from_millis(300);

/// The server (`bash <exec dir>/server.sh <exec dir>`). The server and its workers ignore
/// SIGTERM/SIGINT/SIGHUP (a `pkill bash` in the sandbox must not break it); the spare resets
/// them and closes the worker's FIFOs (fds 3, 4) before it execs. A worker loads the
/// `C.UTF-8` locale once so that exporting `LANG` in the spare is cheap. When the host closes
/// the request FIFO, the spare kills its worker.
const SCRIPT: &str = r#"D=$1
trap '' TERM INT HUP
worker() {
  exec 3>"$D/w$1.st" 4<"$D/w$1.req" || exit
  set -m
  { LC_ALL=C.UTF-8; } 2>/dev/null
  unset -v LC_ALL
  w=$BASHPID
  while :; do
    (
      if ! read -r -u 4 id count; then
        kill -KILL "$w"
        exit
      fi
      echo "pid $id $BASHPID" >&3
      trap - TERM INT HUP
      mapfile -d '' -t -n "$count" a <"$D/w$1.args" && ((${#a[@]} >= 6)) || exit 126
      exec <"${a[1]}" >"${a[2]}" 2>"${a[3]}" 3>&- 4<&- || exit 1
      cd -- "${a[0]}" || exit 1
      n=${a[4]}
      unset -v PWD OLDPWD SHLVL
      ((n == 0)) || export -- "${a[@]:5:n}"
      exec -- "${a[@]:5+n}"
    ) &
    p=$!
    wait "$p" 2>/dev/null
    echo "done $p $?" >&3
  done
}
echo ready
while read -r op arg; do
  case $op in
  worker) worker "$arg" & ;;
  kill) kill -KILL -- "-$arg" 2>/dev/null ;;
  quit) exit 0 ;;
  esac
done
"#;

/// A worker as seen by the host.
struct Worker {
    n: u32,
    /// Generation of its stdout/stderr FIFOs (`w<n>-<gen>.out`, `.err`).
    gen: u32,
    /// Whether the FIFOs of this generation exist.
    fifos: bool,
    req: pipe::Sender,
    status: Lines<BufReader<pipe::Receiver>>,
}

impl Worker {
    /// The name of its stdout (`out`) or stderr (`err`) FIFO.
    fn fifo(&self, stream: &str) -> String {
        format!("w{}-{}.{stream}", self.n, self.gen)
    }
}

/// Idle workers (LIFO) and the number of workers created.
#[derive(Default)]
struct Pool {
    idle: Vec<Worker>,
    created: u32,
}

/// A worker lent to one exec. Dropping it returns the worker to the pool (with new FIFOs
/// unless `reuse`), unless it vanished (`worker` is `None`).
struct Lent {
    worker: Option<Worker>,
    pool: Arc<StdMutex<Pool>>,
    dir: PathBuf,
    reuse: bool,
    owner: Option<Owner>,
}

impl Lent {
    /// Creates the worker's stdout/stderr FIFOs if needed and opens the host's ends.
    fn open_fifos(&mut self) -> Result<[pipe::Receiver; 2]> {
        let w = self
            .worker
            .as_mut()
            .ok_or_else(|| backend("worker vanished"))?;
        let paths = ["out", "err"].map(|s| self.dir.join(w.fifo(s)));
        if !w.fifos {
            for p in &paths {
                mkfifo(p, self.owner)?;
            }
            w.fifos = true;
        }
        // A FIFO without writers is not readable until one connects, then closes (EOF).
        let [out, err] = &paths;
        let open = |p: &PathBuf| pipe::OpenOptions::new().open_receiver(p);
        Ok([open(out)?, open(err)?])
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(mut w) = self.worker.take() else {
            return;
        };
        if !self.reuse && w.fifos {
            for s in ["out", "err"] {
                let _ = std::fs::remove_file(self.dir.join(w.fifo(s)));
            }
            w.gen += 1;
            w.fifos = false;
        }
        lock(&self.pool).idle.push(w);
    }
}

/// One sandbox's exec server.
pub(crate) struct ExecServer {
    child: Mutex<Option<Child>>,
    requests: mpsc::UnboundedSender<String>,
    dead: watch::Receiver<bool>,
    dir: PathBuf,
    log: PathBuf,
    env_bin: String,
    next: AtomicU64,
    pool: Arc<StdMutex<Pool>>,
    /// The sandbox's host identity: FIFOs and stdin files are given to it.
    owner: Option<Owner>,
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
    /// the server with `bash`, and waits until it is ready. Its stderr goes to `log`;
    /// `env_bin` is the `env` binary (for variables bash cannot export faithfully).
    pub(crate) async fn start(
        mut cmd: Command,
        bash: &str,
        env_bin: &str,
        dir: PathBuf,
        log: PathBuf,
        owner: Option<Owner>,
    ) -> Result<ExecServer> {
        std::fs::write(dir.join("server.sh"), SCRIPT)?;
        cmd.arg("--")
            .args([bash, &format!("{EXEC_DIR}/server.sh"), EXEC_DIR])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .process_group(0)
            .kill_on_drop(true);
        let spawned = {
            let _fork = super::process::spawning();
            cmd.spawn()
        };
        let mut child = spawned.map_err(|e| {
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
            env_bin: env_bin.to_string(),
            next: AtomicU64::new(1),
            pool: Arc::default(),
            owner,
        };
        // One worker right away, so the first exec does not wait for a fork.
        let first = server.new_worker();
        if let (Ok(w), Ok(Ok(()))) = (first, tokio::time::timeout(START_TIMEOUT, ready).await) {
            lock(&server.pool).idle.push(w);
            return Ok(server);
        }
        let err = server.error("did not start");
        server.shutdown().await;
        Err(err)
    }

    /// Runs `argv` in `cwd` with exactly the environment `env` (all already checked) and
    /// waits for it, like `process::run`.
    pub(crate) async fn exec(
        &self,
        cwd: &str,
        env: &BTreeMap<String, String>,
        argv: Vec<String>,
        stdin: Option<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<ExecOutput> {
        let start = Instant::now();
        if *self.dead.borrow() {
            return Err(self.error("exited"));
        }
        let strings = env.iter().flat_map(|(k, v)| [k, v]).chain(&argv);
        if cwd.contains('\0') || strings.into_iter().any(|s| s.contains('\0')) {
            return Err(backend(
                "the command, cwd or environment contains a NUL byte",
            ));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let stdin = StdinFile::new(&self.dir, id, stdin, self.owner)?;
        let mut lent = self.lend()?;
        let [out_fifo, err_fifo] = lent.open_fifos()?;
        let w = lent
            .worker
            .as_ref()
            .ok_or_else(|| backend("worker vanished"))?;
        let count = self.write_args(w, cwd, &stdin.inside, env, argv)?;
        let request = format!("{id} {count}\n");
        let mut poke = Poke(["out", "err"].map(|s| Some(self.dir.join(w.fifo(s)))));
        let (stop_tx, stop) = watch::channel(false);
        let out = capture(out_fifo, stop.clone());
        let err = capture(err_fifo, stop);
        // Dropping `kill_tx` (a cancelled exec) makes `follow` kill the exec's group.
        let (kill_tx, kill) = watch::channel(false);
        let mut follow = tokio::spawn(follow(
            lent,
            id,
            request,
            stdin,
            kill,
            self.dead.clone(),
            self.requests.clone(),
        ));
        let waited = match timeout {
            Some(t) => tokio::time::timeout(t, &mut follow).await.ok(),
            None => Some((&mut follow).await),
        };
        let timed_out = waited.is_none();
        let joined = match waited {
            Some(r) => r,
            None => {
                let _ = kill_tx.send(true);
                (&mut follow).await
            }
        };
        let (status, mut lent) = match joined {
            Ok((status, lent)) => (status, Some(lent)),
            Err(_) => (None, None),
        };
        poke.now();
        if status.is_none() && !timed_out {
            return Err(self.vanished().await);
        }
        let (stdout, stderr, eof) = process::collect(out, err, stop_tx).await;
        if let Some(l) = lent.as_mut() {
            l.reuse = eof;
        }
        drop(lent);
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

    /// Lends an idle worker, or a new one when all are busy.
    fn lend(&self) -> Result<Lent> {
        let idle = lock(&self.pool).idle.pop();
        let worker = match idle {
            Some(w) => w,
            None => self.new_worker()?,
        };
        Ok(Lent {
            worker: Some(worker),
            pool: self.pool.clone(),
            dir: self.dir.clone(),
            reuse: false,
            owner: self.owner,
        })
    }

    /// Creates the FIFOs of a new worker, opens the host's ends, and asks the server for it.
    fn new_worker(&self) -> Result<Worker> {
        let n = {
            let mut pool = lock(&self.pool);
            pool.created += 1;
            pool.created
        };
        let [req, st] = ["req", "st"].map(|e| self.dir.join(format!("w{n}.{e}")));
        mkfifo(&req, self.owner)?;
        mkfifo(&st, self.owner)?;
        // Read-write: the host's end counts as a reader too, so the open never blocks.
        let req = pipe::OpenOptions::new()
            .read_write(true)
            .open_sender(&req)?;
        let status = BufReader::new(pipe::OpenOptions::new().open_receiver(&st)?).lines();
        if self.requests.send(format!("worker {n}\n")).is_err() {
            return Err(self.error("exited"));
        }
        Ok(Worker {
            n,
            gen: 0,
            fifos: false,
            req,
            status,
        })
    }

    /// SIGKILLs `bwrap` now (for `Drop`); the pid namespace dies with it.
    pub(crate) fn kill_now(&self) {
        if let Ok(mut child) = self.child.try_lock() {
            if let Some(c) = child.as_mut() {
                let _ = c.start_kill();
            }
        }
    }

    /// The error of an exec whose worker vanished without an exit status.
    async fn vanished(&self) -> SandboxError {
        let mut dead = self.dead.clone();
        let _ = tokio::time::timeout(DEATH_GRACE, dead.wait_for(|d| *d)).await;
        if *dead.borrow() {
            return self.error("exited");
        }
        SandboxError::Backend(
            "the exec's worker process in the sandbox vanished before reporting an exit \
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

/// Locks a std mutex, ignoring poisoning.
fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A backend error.
pub(super) fn backend(msg: &str) -> SandboxError {
    SandboxError::Backend(msg.to_string())
}

/// Sends `request` (exec `id`) to the lent worker and follows its status lines: returns the exit status,
/// or `None` when the worker vanished (or the server died) first; then the worker is
/// dropped from the pool. Kills the exec's process group once `kill` fires or its sender is
/// dropped (the exec was cancelled), and when the worker vanished. Returns the worker
/// (dropping it returns it to the pool) and removes the stdin file.
async fn follow(
    mut lent: Lent,
    id: u64,
    request: String,
    _stdin: StdinFile,
    mut kill: watch::Receiver<bool>,
    mut dead: watch::Receiver<bool>,
    requests: mpsc::UnboundedSender<String>,
) -> (Option<i32>, Lent) {
    let send_kill = |pgid: i32| {
        if pgid > 1 {
            let _ = requests.send(format!("kill {pgid}\n"));
        }
    };
    let Some(w) = lent.worker.as_mut() else {
        return (None, lent);
    };
    let id = id.to_string();
    let (mut pgid, mut want_kill, mut killed, mut status) = (None::<i32>, false, false, None);
    if w.req.write_all(request.as_bytes()).await.is_ok() {
        loop {
            tokio::select! {
                line = w.status.next_line() => {
                    let Ok(Some(line)) = line else { break };
                    let f: Vec<&str> = line.split(' ').collect();
                    match (&f[..], pgid) {
                        (["pid", of, p], None) if *of == id => pgid = p.parse().ok(),
                        // The worker answered another request (or read a torn one): it is
                        // out of step with us; lose it rather than wait for a `pid` forever.
                        (["pid", ..], None) => break,
                        // A `done` of another pgid is a spare that died while idle.
                        (["done", p, s], Some(g)) if *p == g.to_string() => {
                            status = s.parse().ok();
                            break;
                        }
                        _ => {}
                    }
                },
                r = kill.changed(), if !want_kill => want_kill = r.is_err() || *kill.borrow(),
                _ = dead.wait_for(|d| *d) => break,
            }
            if let (true, false, Some(p)) = (want_kill, killed, pgid) {
                send_kill(p);
                killed = true;
            }
        }
    }
    if status.is_none() {
        if let (false, Some(p)) = (killed, pgid) {
            send_kill(p);
        }
        lent.worker = None;
    }
    (status, lent)
}
