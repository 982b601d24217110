//! The files of one exec: its output FIFOs (made, captured, poked awake), its stdin file
//! and the description its worker reads (`w<n>.args`).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};

use tokio::net::unix::pipe;
use tokio::sync::{oneshot, watch};

use super::super::owner::Owner;
use super::super::process::{self, Captured};
use super::{backend, ExecServer, Worker, EXEC_DIR};
use crate::Result;

/// Reads a FIFO in a task (capped); resolves when it hits EOF or `stop` fires. The task
/// then keeps draining (and discarding) so background writers do not get SIGPIPE.
pub(super) fn capture(
    mut fifo: pipe::Receiver,
    stop: watch::Receiver<bool>,
) -> impl Future<Output = Captured> {
    let (tx, result) = oneshot::channel();
    tokio::spawn(async move {
        let _ = tx.send(process::read_capped(&mut fifo, stop).await);
        let _ = tokio::io::copy(&mut fifo, &mut tokio::io::sink()).await;
    });
    async move { result.await.unwrap_or_default() }
}

/// The FIFOs of an exec whose job has ended (or never will start): opening one for writing
/// and closing it makes its reader see EOF unless another writer (a background process)
/// still holds it; so the capture tasks never wait for a writer that never comes.
/// Done by `now` or on drop.
pub(super) struct Poke(pub(super) [Option<PathBuf>; 2]);

impl Poke {
    pub(super) fn now(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        for p in self.0.iter_mut().filter_map(Option::take) {
            // Fails (ENXIO) when there is no reader: then there is nothing to wake.
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(p);
        }
    }
}

impl Drop for Poke {
    fn drop(&mut self) {
        self.now();
    }
}

/// An exec's stdin: the file `<id>.in` (removed on drop) or `/dev/null`.
pub(super) struct StdinFile {
    host: Option<PathBuf>,
    /// The path inside the sandbox.
    pub(super) inside: String,
}

impl StdinFile {
    pub(super) fn new(
        dir: &Path,
        id: u64,
        data: Option<Vec<u8>>,
        owner: Option<Owner>,
    ) -> Result<StdinFile> {
        let Some(data) = data else {
            return Ok(StdinFile {
                host: None,
                inside: "/dev/null".into(),
            });
        };
        let host = dir.join(format!("{id}.in"));
        std::fs::write(&host, data)?;
        if let Some(o) = owner {
            o.chown(&host)?;
        }
        Ok(StdinFile {
            host: Some(host),
            inside: format!("{EXEC_DIR}/{id}.in"),
        })
    }
}

impl Drop for StdinFile {
    fn drop(&mut self) {
        if let Some(p) = &self.host {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Creates a FIFO (mode 0600), owned by the sandbox's identity when it has one.
pub(super) fn mkfifo(path: &Path, owner: Option<Owner>) -> Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| backend(&format!("bad exec dir path: {e}")))?;
    // SAFETY: mkfifo(3) reads a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    if let Some(o) = owner {
        o.chown(path)?;
    }
    Ok(())
}

impl ExecServer {
    /// Writes the exec's description over worker `w`'s `w<n>.args` (cwd, the stdin, stdout
    /// and stderr paths, how many variables bash exports, those, argv; each NUL-terminated)
    /// and returns how many strings it holds. Variables bash cannot export faithfully are
    /// passed through `env -i` instead.
    pub(super) fn write_args(
        &self,
        w: &Worker,
        cwd: &str,
        stdin: &str,
        env: &BTreeMap<String, String>,
        argv: Vec<String>,
    ) -> Result<usize> {
        let [out_path, err_path] = ["out", "err"].map(|s| format!("{EXEC_DIR}/{}", w.fifo(s)));
        let vars = env.iter().map(|(k, v)| format!("{k}={v}"));
        // Bash exports the variables itself when it can do so faithfully, else `env -i`.
        let (exports, argv): (Vec<String>, Vec<String>) = if env.keys().all(|k| exportable(k)) {
            (vars.collect(), argv)
        } else {
            let env_i = [self.env_bin.clone(), "-i".into(), "--".into()];
            let argv = env_i.into_iter().chain(vars).chain(argv).collect();
            (Vec::new(), argv)
        };
        let n = exports.len().to_string();
        let head = [cwd, stdin, &out_path, &err_path, &n];
        let strings: Vec<&str> = head
            .into_iter()
            .chain(exports.iter().chain(&argv).map(String::as_str))
            .collect();
        let mut args = Vec::new();
        for a in &strings {
            args.extend_from_slice(a.as_bytes());
            args.push(0);
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join(format!("w{}.args", w.n)))?
            .write_all(&args)?;
        Ok(strings.len())
    }
}

/// Whether bash can `export NAME=value` with no side effect: a plain name that is not one of
/// bash's special (readonly, dynamic or self-adjusting) variables.
fn exportable(name: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "_",
        "DIRSTACK",
        "ENV",
        "EPOCHREALTIME",
        "EPOCHSECONDS",
        "EUID",
        "EXECIGNORE",
        "FUNCNAME",
        "GLOBIGNORE",
        "GROUPS",
        "HISTCMD",
        "IFS",
        "LINENO",
        "OLDPWD",
        "OPTERR",
        "OPTIND",
        "PIPESTATUS",
        "POSIXLY_CORRECT",
        "PPID",
        "PWD",
        "RANDOM",
        "SECONDS",
        "SHELLOPTS",
        "SHLVL",
        "SRANDOM",
        "UID",
    ];
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("BASH")
        && !name.starts_with("COMP_")
        && !SPECIAL.contains(&name)
}
