//! The fast exec path: commands sent to a `bash` keeper over the container's attached
//! stdin, their output read back from the attached stdout/stderr.
//!
//! `docker exec` costs a `runc exec` per command (≈80–100 ms on a 2-core VM); a fork in a
//! bash that already runs in the container costs a few ms. The keeper (the container's main
//! process under `docker-init`) prints `AHE-KEEPER bash` and then reads one request line
//! per exec: it prints a start marker on both streams, runs `( cd DIR && export ... && exec
//! bash -c CMD ) </dev/null` with the streams inherited, then prints an end marker (with the
//! exit status) on both. Markers carry a random 128-bit token, so command output cannot fake
//! them, and are single lines (bash line-buffers stdout, so a marker line is one write that
//! other writers cannot split). Output of background processes of earlier commands is
//! dropped between execs (a reader task drains the stream, so they never block on it) and
//! mixed into an exec's output while it runs, as in a terminal. Values are sent as `$'...'`
//! strings with backslash, quote and non-printable bytes escaped.
//!
//! The path is used only when the keeper is idle (else `docker exec`), never for stdin, and
//! never again after anything unexpected (a cancelled exec, a keeper that did not answer,
//! an image without bash): the caller then falls back to `docker exec` for good.

use std::fmt::Write as _;
use std::io::Read;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::Docker;
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Mutex};

use super::exec::{
    kill_marked, new_marker, Capture, ExecRequest, KillGuard, DRAIN_GRACE, EXEC_MARKER,
};
use crate::{ExecOutput, Result, SandboxError};

mod parse;
use parse::{find, Parser};

/// The keeper script (`$1` = the workdir): prepares dirs, then serves requests with bash
/// (restarted if something kills it), or idles when the image has no bash.
pub(crate) const KEEPER: &str = "mkdir -p -m 777 /logs/verifier /logs/agent 2>/dev/null; \
mkdir -p \"$1\" 2>/dev/null; cd \"$1\" 2>/dev/null; \
if command -v bash >/dev/null 2>&1; then echo 'AHE-KEEPER bash'; \
while :; do bash; [ $? -ge 128 ] || break; echo 'AHE-KEEPER restarted'; \
echo 'AHE-KEEPER restarted' >&2; done; else echo 'AHE-KEEPER none'; fi; \
while :; do sleep infinity; done";

/// The keeper as an exec (`$1` = the workdir) in a container whose own process is someone
/// else's (Harbor's `sleep`): serves requests with bash (restarted if something kills it),
/// or ends when the image has no bash.
pub(crate) const EXEC_KEEPER: &str = "cd \"$1\" 2>/dev/null; \
if command -v bash >/dev/null 2>&1; then echo 'AHE-KEEPER bash'; \
while :; do bash; [ $? -ge 128 ] || break; echo 'AHE-KEEPER restarted'; \
echo 'AHE-KEEPER restarted' >&2; done; else echo 'AHE-KEEPER none'; fi";

/// What the keeper prints when something killed its bash (and it started a new one).
const RESTARTED: &[u8] = b"AHE-KEEPER restarted\n";

/// How long the first exec waits for the keeper's greeting.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

type Output =
    Pin<Box<dyn Stream<Item = std::result::Result<LogOutput, bollard::errors::Error>> + Send>>;
type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// The attached streams of the keeper.
struct Conn {
    input: Input,
    /// Output frames, forwarded by the reader task while `active`.
    frames: mpsc::Receiver<LogOutput>,
    /// Whether an exec is listening (else the reader drops frames, so background writers
    /// never block on a full stream).
    active: Arc<AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
    /// Whether the keeper said it serves requests with bash.
    greeted: bool,
    /// Set while an exec runs and left set when it ends abnormally.
    broken: bool,
    /// Whether the stream ends only with the container (the container's own process), not
    /// when a command kills the keeper (an exec's keeper, see [`Keeper::in_exec`]).
    ends_with_container: bool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Reads the attach stream for the life of the container (ends with it).
async fn read_frames(mut output: Output, tx: mpsc::Sender<LogOutput>, active: Arc<AtomicBool>) {
    while let Some(Ok(frame)) = output.next().await {
        if active.load(Ordering::SeqCst) && tx.send(frame).await.is_err() {
            return;
        }
    }
}

/// Clears `active` when an exec ends (or its future is dropped).
struct Listening(Arc<AtomicBool>);

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// The keeper of one container (`None` inside when the fast path is off).
pub(crate) struct Keeper {
    conn: Mutex<Option<Conn>>,
    served: AtomicU64,
}

impl Keeper {
    /// A keeper over the attached streams of a container (attach before starting it).
    pub fn new(input: Input, output: Output) -> Keeper {
        Keeper::over(input, output, true)
    }

    /// A keeper over the attached streams of an exec running [`EXEC_KEEPER`] (its end does
    /// not end the container: a command that kills it gets no status, and later execs go
    /// through `docker exec`).
    pub fn in_exec(input: Input, output: Output) -> Keeper {
        Keeper::over(input, output, false)
    }

    fn over(input: Input, output: Output, ends_with_container: bool) -> Keeper {
        // Active until the first exec has read the greeting.
        let active = Arc::new(AtomicBool::new(true));
        let (tx, frames) = mpsc::channel(64);
        let reader = tokio::spawn(read_frames(output, tx, active.clone()));
        Keeper {
            conn: Mutex::new(Some(Conn {
                input,
                frames,
                active,
                reader,
                greeted: false,
                broken: false,
                ends_with_container,
            })),
            served: AtomicU64::new(0),
        }
    }

    /// Starts `argv` (one running [`EXEC_KEEPER`]) as an exec of the image's user in
    /// container `id`, its streams attached; why not when it could not.
    pub async fn start_exec(docker: &Docker, id: &str, argv: Vec<String>) -> Result<Keeper> {
        use bollard::exec::{CreateExecOptions, StartExecResults};
        let config = CreateExecOptions {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            cmd: Some(argv),
            working_dir: Some("/".to_string()),
            ..Default::default()
        };
        let started = match docker.create_exec(id, config).await {
            Ok(c) => docker.start_exec(&c.id, None).await,
            Err(e) => Err(e),
        };
        match started {
            Ok(StartExecResults::Attached { output, input }) => Ok(Keeper::in_exec(input, output)),
            Ok(_) => Err(SandboxError::Backend(
                "the keeper's exec was detached".into(),
            )),
            Err(e) => Err(SandboxError::Backend(e.to_string())),
        }
    }

    /// ahe's own keeper after the seal: [`EXEC_KEEPER`] in `workdir` as an exec holding the
    /// ptrace guard's capability (see `ptrace_guard`); a disabled one when it cannot start
    /// (`who` names the backend in the warning).
    pub async fn after_seal(docker: &Docker, id: &str, workdir: &str, who: &str) -> Keeper {
        let argv = ["sh", "-c", EXEC_KEEPER, "ahe-keeper", workdir].map(String::from);
        Keeper::start_exec(docker, id, argv.to_vec())
            .await
            .unwrap_or_else(|e| {
                tracing::warn!("{who}: no keeper after the seal ({e}); commands are execs");
                Keeper::disabled()
            })
    }

    /// A keeper that never serves (every exec uses `docker exec`).
    pub fn disabled() -> Keeper {
        Keeper {
            conn: Mutex::new(None),
            served: AtomicU64::new(0),
        }
    }

    /// How many execs the fast path ran.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Closes the attached streams.
    pub fn close(&self) {
        if let Ok(mut c) = self.conn.try_lock() {
            *c = None;
        }
    }

    /// Runs `req` through the keeper; `None` when the fast path cannot take it (busy,
    /// disabled, stdin, an earlier failure), in which case nothing was run.
    pub async fn try_exec(
        &self,
        docker: &Docker,
        container: &str,
        req: &ExecRequest,
    ) -> Option<Result<ExecOutput>> {
        let raw = self.try_exec_raw(docker, container, req).await?;
        Some(raw.map(RawOutput::into_output))
    }

    /// [`Keeper::try_exec`] with the output as bytes (for binary data such as archives).
    pub async fn try_exec_raw(
        &self,
        docker: &Docker,
        container: &str,
        req: &ExecRequest,
    ) -> Option<Result<RawOutput>> {
        if req.stdin.is_some() || req.argv.len() != 3 {
            return None;
        }
        let mut guard = self.conn.try_lock().ok()?;
        let conn = guard.as_mut()?;
        if conn.broken {
            return None;
        }
        let (token, marker) = (hex_token(), new_marker());
        let line = request_line(req, &token, &marker)?;
        // Stays set unless the exec ends cleanly (a dropped future leaves it set).
        conn.broken = true;
        match run(conn, docker, container, req, &line, &token, &marker).await {
            Step::Skip => {
                *guard = None;
                None
            }
            Step::Done(r) => {
                self.served.fetch_add(1, Ordering::Relaxed);
                Some(r)
            }
            Step::Lost(r) => {
                *guard = None;
                Some(r)
            }
        }
    }
}

/// How a fast-path exec ended.
enum Step {
    /// Nothing ran (the keeper has no bash or did not answer): fall back.
    Skip,
    /// The exec ran (the connection's `broken` flag says whether it is still usable).
    Done(Result<RawOutput>),
    /// The attach stream ended.
    Lost(Result<RawOutput>),
}

/// The outcome of a fast-path exec, output as captured bytes.
pub(crate) struct RawOutput {
    /// Exit status (`None` after a timeout or when the keeper's shell was killed).
    pub exit_code: Option<i32>,
    /// Captured stdout.
    pub stdout: Capture,
    /// Captured stderr.
    pub stderr: Capture,
    /// Whether the timeout fired.
    pub timed_out: bool,
    /// Wall time.
    pub duration_ms: u64,
    /// Why the command ended abnormally, if it did (appended to stderr).
    pub note: Option<&'static str>,
}

impl RawOutput {
    /// As the trait's output (lossy text).
    pub fn into_output(self) -> ExecOutput {
        let mut stderr = self.stderr.text("stderr");
        if let Some(n) = self.note {
            stderr.push_str(&format!("\n[ahe: {n}]"));
        }
        ExecOutput {
            exit_code: self.exit_code,
            stdout: self.stdout.text("stdout"),
            stderr,
            timed_out: self.timed_out,
            duration_ms: self.duration_ms,
        }
    }
}

/// Sends one request and reads its output.
async fn run(
    conn: &mut Conn,
    docker: &Docker,
    container: &str,
    req: &ExecRequest,
    line: &str,
    token: &str,
    marker: &str,
) -> Step {
    conn.active.store(true, Ordering::SeqCst);
    let _listening = Listening(conn.active.clone());
    if !conn.greeted {
        if !greet(conn).await {
            return Step::Skip;
        }
        conn.greeted = true;
    }
    let start = Instant::now();
    if conn.input.write_all(line.as_bytes()).await.is_err() || conn.input.flush().await.is_err() {
        return Step::Skip;
    }
    let mut kill_guard = KillGuard::new(docker, container, marker);
    let (mut out, mut err) = (Parser::new(token, true), Parser::new(token, false));
    let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut timed_out = false;
    let mut grace_end: Option<tokio::time::Instant> = None;
    while !(out.done() && err.done()) {
        let item = match grace_end.or(deadline) {
            Some(at) => match tokio::time::timeout_at(at, conn.frames.recv()).await {
                Ok(i) => i,
                Err(_) if timed_out => break,
                Err(_) => {
                    timed_out = true;
                    if let Err(e) = kill_marked(docker, container, marker).await {
                        tracing::warn!("docker: killing a timed-out exec failed: {e}");
                    }
                    grace_end = Some(tokio::time::Instant::now() + DRAIN_GRACE);
                    continue;
                }
            },
            None => conn.frames.recv().await,
        };
        match item {
            Some(LogOutput::StdOut { message }) | Some(LogOutput::Console { message }) => {
                out.feed(&message)
            }
            Some(LogOutput::StdErr { message }) => err.feed(&message),
            Some(LogOutput::StdIn { .. }) => {}
            // An exec's keeper ends without its container when a command kills it.
            None if !conn.ends_with_container && running(docker, container).await => {
                let _ = kill_marked(docker, container, marker).await;
                kill_guard.armed = false;
                return Step::Lost(Ok(shell_killed(out, err, start)));
            }
            None => {
                kill_guard.armed = false;
                return Step::Lost(Err(SandboxError::Backend(
                    "the container's keeper stream ended (was the container removed?)".into(),
                )));
            }
        }
        if out.restarted || err.restarted {
            // The command killed the keeper's bash: end it, and use docker exec from now on.
            let _ = kill_marked(docker, container, marker).await;
            kill_guard.armed = false;
            return Step::Done(Ok(shell_killed(out, err, start)));
        }
    }
    kill_guard.armed = false;
    finish(conn, req, out, err, timed_out, start)
}

/// Whether the engine says `container` is running a moment after a keeper's stream ended
/// (a container being removed may still show as running right when its processes die).
async fn running(docker: &Docker, container: &str) -> bool {
    tokio::time::sleep(Duration::from_millis(500)).await;
    (docker.inspect_container(container, None).await)
        .is_ok_and(|c| c.state.and_then(|s| s.running).unwrap_or(false))
}

/// The outcome of a command that killed the keeper's bash: no status, what it printed, a note.
fn shell_killed(out: Parser, err: Parser, start: Instant) -> RawOutput {
    RawOutput {
        exit_code: None,
        stdout: out.cap,
        stderr: err.cap,
        timed_out: false,
        duration_ms: start.elapsed().as_millis() as u64,
        note: Some("the command killed the sandbox's command shell"),
    }
}

/// The outcome of an exec whose output reading ended (both end markers read, or the grace
/// after its timeout over): the connection is broken unless both markers came; a missing
/// working directory and an unreadable status are errors.
fn finish(
    conn: &mut Conn,
    req: &ExecRequest,
    mut out: Parser,
    err: Parser,
    timed_out: bool,
    start: Instant,
) -> Step {
    let finished = out.done() && err.done();
    conn.broken = !finished;
    let status = out.status.take().unwrap_or_default();
    if finished && status == "nocwd" {
        return Step::Done(Err(SandboxError::Backend(format!(
            "working directory {} does not exist",
            req.cwd
        ))));
    }
    let exit_code = if timed_out {
        None
    } else {
        match status.parse::<i32>() {
            Ok(c) => Some(c),
            Err(_) => {
                conn.broken = true;
                return Step::Done(Err(SandboxError::Backend(format!(
                    "the keeper reported an unreadable status {status:?}"
                ))));
            }
        }
    };
    Step::Done(Ok(RawOutput {
        exit_code,
        stdout: out.cap,
        stderr: err.cap,
        timed_out,
        duration_ms: start.elapsed().as_millis() as u64,
        note: None,
    }))
}

/// Reads until the keeper's greeting; `false` when it has no bash or does not answer.
async fn greet(conn: &mut Conn) -> bool {
    let mut seen = Vec::new();
    let end = tokio::time::Instant::now() + HELLO_TIMEOUT;
    loop {
        match tokio::time::timeout_at(end, conn.frames.recv()).await {
            Ok(Some(LogOutput::StdOut { message })) => {
                seen.extend_from_slice(&message);
                if find(&seen, b"AHE-KEEPER bash\n").is_some() {
                    return true;
                }
                if find(&seen, b"AHE-KEEPER none\n").is_some() {
                    return false;
                }
            }
            Ok(Some(_)) => {}
            _ => return false,
        }
    }
}

/// A random 128-bit hex token.
fn hex_token() -> String {
    let mut b = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    if !ok {
        // Unpredictable enough without /dev/urandom: std's randomly seeded hasher.
        use std::hash::{BuildHasher, Hasher};
        for chunk in b.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(Instant::now().elapsed().as_nanos());
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Requests longer than this go through `docker exec` (bash reads its input byte by byte).
const MAX_REQUEST: usize = 32 << 10;

/// `s` as a bash `$'...'` word: backslash, `'` and bytes outside printable ASCII escaped.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    out.push_str("$'");
    for b in s.bytes() {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("\\'"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('\'');
    out
}

/// Whether `name` can be `export`ed by bash.
fn shell_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The request line of one exec (`None` when it must go through `docker exec`: a NUL
/// byte, a variable name bash cannot export, or a very long request).
fn request_line(req: &ExecRequest, token: &str, marker: &str) -> Option<String> {
    let values = req.env.iter().chain([&req.cwd, &req.argv[2]]);
    if values.clone().any(|v| v.contains('\0')) {
        return None;
    }
    if !req
        .env
        .iter()
        .all(|kv| shell_name(kv.split('=').next().unwrap_or_default()))
    {
        return None;
    }
    let cwd = quote(&req.cwd);
    let mut exports = String::new();
    for kv in &req.env {
        exports.push_str(&quote(kv));
        exports.push(' ');
    }
    let line = format!(
        "printf 'AHE-START {token}\\n'; printf 'AHE-START {token}\\n' >&2; \
         if [ -d {cwd} ]; then ( cd -- {cwd} && export {exports}{EXEC_MARKER}={marker} && \
         exec {} -c {} ) </dev/null; s=$?; else s=nocwd; fi; \
         printf 'AHE-END {token} %s\\n' \"$s\"; printf 'AHE-END {token}\\n' >&2\n",
        quote(&req.argv[0]),
        quote(&req.argv[2]),
    );
    (line.len() <= MAX_REQUEST).then_some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_escapes_everything_special() {
        assert_eq!(quote("a b'c\\d\n$x\"`"), "$'a b\\'c\\\\d\\x0a$x\"`'");
        assert_eq!(quote("é"), "$'\\xc3\\xa9'");
        assert!(shell_name("_A1") && !shell_name("1A") && !shell_name("A-B") && !shell_name(""));
    }

    #[test]
    fn parser_drops_junk_and_finds_markers_across_chunks() {
        let t = "0123abcd";
        let mut p = Parser::new(t, true);
        let stream = format!("late junkAHE-START {t}\nhello\nworld\nAHE-END {t} 7\ntrailing junk");
        for chunk in stream.as_bytes().chunks(3) {
            p.feed(chunk);
        }
        assert!(p.done());
        assert_eq!(p.status.as_deref(), Some("7"));
        assert_eq!(p.cap.text("stdout"), "hello\nworld\n");
        let mut e = Parser::new(t, false);
        e.feed(format!("AHE-START {t}\nAHE-END {t}\n").as_bytes());
        assert!(e.done());
        assert_eq!(e.cap.text("stderr"), "");
        // A fake marker with another token is output.
        let mut f = Parser::new(t, true);
        f.feed(format!("AHE-START {t}\nAHE-END ffff 0\n").as_bytes());
        assert!(!f.done());
    }
}
