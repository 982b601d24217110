//! The `local` backend: bubblewrap when it works, else plain host processes in a temp dir.
//!
//! Each trial gets a temp dir whose `fs/` holds one host directory per writable top-level
//! sandbox path (`/app`, `/logs`, `/tests`, `/solution`, `/tmp`, `/root`, plus any top-level
//! dir the Dockerfile's WORKDIR/COPY needs, e.g. `/workspace`). Everything else the sandbox
//! sees is the host's `/usr`, `/etc`, `/opt`, `/var`, `/srv` (and `/bin`... symlinks), bound
//! read-only; the root itself is a read-only tmpfs (no new top-level dirs at run time).
//!
//! With bubblewrap each sandbox has ONE long-lived `bwrap` (new mount/pid/net/ipc/uts/user
//! namespaces, no network unless the task allows it, in the trial's cgroup) running a small
//! bash exec server (see `server.rs`, mounted read-only at `/.ahe-exec`); each exec is a
//! process group started by one of its workers (a few ms, versus ~12 ms for a fresh
//! `bwrap`). Files persist between execs, and so do background processes (`nohup server &`),
//! until `destroy` ends the pid namespace (like Docker). An exec whose background process
//! keeps its stdout/stderr open returns 0.5 s after the command ended; that process's later
//! output is discarded. Plain mode runs each exec as a host process group and kills its
//! leftovers when it exits. A timeout (or dropping the exec future) SIGKILLs the exec's whole
//! process group; a process that moves itself to another process group or session
//! (`setsid`, `set -m`) escapes that kill, but not `destroy`. If the server dies (e.g. a
//! command SIGKILLs it), execs fail with `SandboxError::Backend`.
//!
//! Dockerfile setup replays WORKDIR/ENV/ARG/COPY/ADD on the host side and runs each RUN step
//! in a one-off `bwrap` with network (like `docker build`; the exec server starts meanwhile);
//! `ARG`s are visible to RUN steps only.
//!
//! Limitations: the system directories are the host's (packages cannot be installed; a
//! Dockerfile `RUN apt-get ...` fails at setup — use the docker backend for such tasks);
//! `USER`, `EXPOSE`, `CMD`... are ignored; no `/sys`; the host's `/etc` is readable. Plain
//! mode has NO isolation: commands run on the host with the cwd mapped and `HOME`/`TMPDIR`
//! pointing into the trial dir (`AHE_SANDBOX_FS` names its `fs/`), but absolute paths inside
//! commands are not remapped, and a process that calls `setsid` escapes every kill.
//! Memory/cpu limits use cgroup v1 (`/sys/fs/cgroup/{memory,cpu}/ahe/<trial>`) when it is
//! writable; otherwise they are not enforced (a warning is logged).

mod cgroup;
mod env;
mod fsmap;
mod owner;
mod process;
mod reap;
mod sandbox;
mod server;
mod setup;
mod transfer;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::process::Command;

use crate::dockerfile::{Dockerfile, Instruction, DEFAULT_PATH};
use crate::{Backend, Result, Sandbox, SandboxError, SandboxSpec};
use cgroup::Cgroup;
use fsmap::{FsMap, RoEntry};
use owner::Owner;
pub use owner::DEFAULT_SANDBOX_UID;
pub use sandbox::LocalSandbox;
use server::ExecServer;
use setup::{make_trial_dir, step_error};
use transfer::read_only_msg;

pub use reap::{reap_dead, reap_dead_in, LocalReap};

/// Working directory when the Dockerfile sets none (or there is no Dockerfile).
pub const DEFAULT_WORKDIR: &str = "/app";

/// Default time limit of one Dockerfile `RUN` step at setup.
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(1800);

/// Host facts shared by every sandbox of a backend.
#[derive(Debug)]
struct HostLayout {
    bwrap: PathBuf,
    bash: String,
    /// The host's `setpriv` (util-linux), for the ptrace guard (none: the guard is off).
    setpriv: Option<String>,
    env: String,
    ro: Vec<RoEntry>,
    /// The unprivileged identity sandboxes run as (when `ahe` is root).
    owner: Option<Owner>,
}

/// The `local` backend.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    isolated: bool,
    layout: Arc<HostLayout>,
    setup_timeout: Duration,
}

/// How many times [`probe_bubblewrap`] runs `bwrap` before it calls bubblewrap unavailable.
const PROBE_ATTEMPTS: u32 = 5;

/// The outcome of [`probe_bubblewrap`] in this process (why bubblewrap does not work).
static PROBE: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Whether `bwrap --ro-bind / / true` works, retried before it counts as a failure: its
/// recursive read-only bind of `/` remounts every host mount below `/` and fails when one
/// of them disappears meanwhile — a Docker container being created or removed on this host
/// ("Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount
/// .../overlay2/<id>-init/merged: Invalid argument"). One such failure must not put a whole
/// process in plain mode. A `bwrap` that cannot be started at all is not retried.
fn probe_bubblewrap() -> std::result::Result<(), String> {
    let bwrap = which("bwrap", "/usr/bin/bwrap");
    let mut last = String::new();
    for attempt in 0..PROBE_ATTEMPTS {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(25 << attempt));
        }
        let out = std::process::Command::new(&bwrap)
            .args(["--ro-bind", "/", "/", "true"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output();
        match out {
            Ok(o) if o.status.success() => return Ok(()),
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr);
                last = format!(
                    "`bwrap --ro-bind / / true` failed ({}): {}",
                    o.status,
                    err.trim()
                );
                tracing::debug!("bubblewrap probe {}: {last}", attempt + 1);
            }
            Err(e) => return Err(format!("cannot run {}: {e}", bwrap.display())),
        }
    }
    Err(format!("{last} ({PROBE_ATTEMPTS} attempts)"))
}

/// Finds an executable in `PATH` (or returns the name unchanged).
fn which(name: &str, fallback: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(fallback))
}

impl LocalBackend {
    fn new(isolated: bool) -> LocalBackend {
        let bash = ["/bin/bash", "/usr/bin/bash"]
            .iter()
            .find(|p| Path::new(p).exists())
            .map_or("bash".to_string(), |p| p.to_string());
        let layout = HostLayout {
            bwrap: which("bwrap", "/usr/bin/bwrap"),
            bash,
            setpriv: ["/usr/bin/setpriv", "/bin/setpriv"]
                .iter()
                .find(|p| Path::new(p).is_file())
                .map(|p| p.to_string()),
            env: which("env", "/usr/bin/env").to_string_lossy().into_owned(),
            ro: fsmap::scan_host_ro(),
            owner: Owner::detect(),
        };
        if !isolated {
            let why = match PROBE.get() {
                Some(Err(why)) => format!(": {why}"),
                _ => String::new(),
            };
            let msg = format!(
                "ahe: WARNING: the local sandbox backend runs in PLAIN mode: NO isolation \
                 (bubblewrap is unavailable{why}); commands run directly on this host"
            );
            tracing::warn!("{msg}");
            eprintln!("{msg}");
        }
        LocalBackend {
            isolated,
            layout: Arc::new(layout),
            setup_timeout: DEFAULT_SETUP_TIMEOUT,
        }
    }

    /// Uses bubblewrap when `bwrap --ro-bind / / true` works, else plain mode (loud warning).
    pub fn detect() -> LocalBackend {
        LocalBackend::new(LocalBackend::bubblewrap_available())
    }

    /// A backend that isolates with bubblewrap (creation fails if `bwrap` does not work).
    pub fn bubblewrap() -> LocalBackend {
        LocalBackend::new(true)
    }

    /// A backend without any isolation (plain host processes in a temp dir).
    pub fn plain() -> LocalBackend {
        LocalBackend::new(false)
    }

    /// Whether `bwrap` works here (probed once per process, see [`probe_bubblewrap`]).
    pub fn bubblewrap_available() -> bool {
        PROBE.get_or_init(probe_bubblewrap).is_ok()
    }

    /// The unprivileged host uid sandbox processes run as (`None` when `ahe` is not root).
    pub fn sandbox_uid(&self) -> Option<u32> {
        self.layout.owner.map(|o| o.uid())
    }

    /// Whether sandboxes are isolated (bubblewrap) rather than plain.
    pub fn isolated(&self) -> bool {
        self.isolated
    }

    /// Sets the time limit of each Dockerfile `RUN` step.
    pub fn with_setup_timeout(mut self, timeout: Duration) -> LocalBackend {
        self.setup_timeout = timeout;
        self
    }

    /// Creates a sandbox and returns it with its concrete type.
    pub async fn create_local(&self, spec: &SandboxSpec) -> Result<LocalSandbox> {
        if self.isolated {
            if let Err(why) = PROBE.get_or_init(probe_bubblewrap) {
                return Err(SandboxError::Backend(format!(
                    "bubblewrap ({}) does not work here: {why}",
                    self.layout.bwrap.display()
                )));
            }
        }
        let df = match &spec.context_dir {
            Some(ctx) if ctx.join("Dockerfile").is_file() => Some(
                Dockerfile::from_file(&ctx.join("Dockerfile"))
                    .map_err(|e| SandboxError::Setup(e.to_string()))?,
            ),
            _ => None,
        };
        let writable = self.writable_dirs(df.as_ref())?;
        let dir = make_trial_dir(spec)?;
        let fs = FsMap {
            root: dir.join("fs"),
            writable,
            ro: self.layout.ro.clone(),
            owner: self.layout.owner,
        };
        let mut sb = LocalSandbox {
            isolated: self.isolated,
            layout: self.layout.clone(),
            dir,
            fs,
            workdir: DEFAULT_WORKDIR.to_string(),
            env: BTreeMap::new(),
            allow_internet: spec.allow_internet,
            cgroup: None,
            server: None,
            destroyed: AtomicBool::new(false),
            sealed: AtomicBool::new(false),
            fsize: crate::storage::fsize_limit(spec.storage_mb),
        };
        sb.init_dirs()?;
        if spec.memory_mb.is_some() || spec.cpus.is_some() {
            let name = sb.dir.file_name().unwrap_or_default().to_string_lossy();
            match Cgroup::create(&name, spec.memory_mb, spec.cpus) {
                Ok(cg) => sb.cgroup = cg.map(Arc::new),
                Err(e) => tracing::warn!(
                    "local sandbox: cpu/memory limits are NOT enforced ({e}); use the docker backend"
                ),
            }
        }
        self.start_and_replay(&mut sb, df.as_ref(), spec).await?;
        sb.env.extend(spec.env.clone());
        Ok(sb)
    }

    /// The top-level dirs a sandbox may write: the defaults and those the Dockerfile's
    /// WORKDIR and COPY destinations need (an error when one cannot be written).
    fn writable_dirs(&self, df: Option<&Dockerfile>) -> Result<BTreeSet<String>> {
        let mut writable: BTreeSet<String> = fsmap::DEFAULT_WRITABLE
            .iter()
            .map(|s| s.to_string())
            .collect();
        if let Some(df) = df {
            for step in &df.steps {
                let (path, copy) = match &step.instruction {
                    Instruction::Workdir(d) => (d, false),
                    Instruction::Copy { dest, .. } => (dest, true),
                    _ => continue,
                };
                let top = self
                    .writable_top(path, copy)
                    .map_err(|m| step_error(df, step.line, &step.instruction, &m))?;
                writable.extend(top);
            }
        }
        Ok(writable)
    }

    /// Starts the exec server (isolated sandboxes) while the Dockerfile is replayed (its RUN
    /// steps run in one-off `bwrap`s with network; the server only needs the writable dirs
    /// to exist); a failed replay shuts the server down.
    async fn start_and_replay(
        &self,
        sb: &mut LocalSandbox,
        df: Option<&Dockerfile>,
        spec: &SandboxSpec,
    ) -> Result<()> {
        let start = sb.isolated.then(|| -> Result<_> {
            let exec_dir = sb.dir.join("exec");
            std::fs::create_dir(&exec_dir)?;
            let cmd = sb.bwrap(sb.allow_internet, Some(&exec_dir));
            Ok((cmd, exec_dir, sb.dir.join("exec-server.log")))
        });
        let start = start.transpose()?;
        let layout = sb.layout.clone();
        let server = async {
            match start {
                Some((cmd, dir, log)) => {
                    ExecServer::start(cmd, &layout.bash, &layout.env, dir, log, layout.owner)
                        .await
                        .map(Some)
                }
                None => Ok(None),
            }
        };
        let replay = async {
            match (df, &spec.context_dir) {
                (Some(df), Some(ctx)) => sb.replay(df, ctx, self.setup_timeout).await,
                _ => Ok(()),
            }
        };
        let (server, replayed) = tokio::join!(server, replay);
        if let Err(e) = replayed {
            if let Ok(Some(server)) = server {
                server.shutdown().await;
            }
            return Err(e);
        }
        sb.server = server?;
        Ok(())
    }

    /// The top-level dir a WORKDIR/COPY destination needs, or why it cannot be written.
    fn writable_top(&self, path: &str, copy: bool) -> std::result::Result<Option<String>, String> {
        let comps = fsmap::checked_components(path)?;
        let Some(top) = comps.first() else {
            return if copy {
                Err("the local backend cannot copy into / (use a dir such as /app)".into())
            } else {
                Ok(None)
            };
        };
        if fsmap::RESERVED.contains(&top.as_str()) {
            return Err(format!("cannot write to {path} (kernel file system)"));
        }
        if self.layout.ro.iter().any(|e| e.name() == top) {
            let host_dir = Path::new(path).is_dir();
            return if copy || !host_dir {
                Err(read_only_msg(path, top))
            } else {
                Ok(None)
            };
        }
        Ok(Some(top.clone()))
    }
}

#[async_trait::async_trait]
impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.create_local(spec).await?))
    }

    /// The temp dir trial dirs are made in.
    async fn disk_paths(&self) -> Vec<PathBuf> {
        vec![std::env::temp_dir()]
    }
}
