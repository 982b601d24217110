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
use env::{base_env, limit_file_size};
mod owner;
mod process;
mod reap;
mod server;
mod setup;
mod transfer;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::process::Command;

use crate::dockerfile::{self, Dockerfile, Instruction, DEFAULT_PATH};
use crate::{
    Backend, CopyOut, ExecOpts, ExecOutput, LeftoverPolicy, Result, Sandbox, SandboxError,
    SandboxSpec,
};
use cgroup::Cgroup;
use fsmap::{FsMap, Location, RoEntry};
use owner::Owner;
pub use owner::DEFAULT_SANDBOX_UID;
use server::ExecServer;
use setup::{make_trial_dir, step_error};
use transfer::{get_blocking, put_blocking, read_only_msg};

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
            env: which("env", "/usr/bin/env").to_string_lossy().into_owned(),
            ro: fsmap::scan_host_ro(),
            owner: Owner::detect(),
        };
        if !isolated {
            let msg = "ahe: WARNING: the local sandbox backend runs in PLAIN mode: NO isolation \
                       (bubblewrap is unavailable); commands run directly on this host";
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

    /// Whether `bwrap` works here (probed once per process).
    pub fn bubblewrap_available() -> bool {
        static PROBE: OnceLock<bool> = OnceLock::new();
        *PROBE.get_or_init(|| {
            std::process::Command::new(which("bwrap", "/usr/bin/bwrap"))
                .args(["--ro-bind", "/", "/", "true"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
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
        if self.isolated && !LocalBackend::bubblewrap_available() {
            return Err(SandboxError::Backend(format!(
                "bubblewrap ({}) does not work here: `bwrap --ro-bind / / true` failed",
                self.layout.bwrap.display()
            )));
        }
        let df = match &spec.context_dir {
            Some(ctx) if ctx.join("Dockerfile").is_file() => Some(
                Dockerfile::from_file(&ctx.join("Dockerfile"))
                    .map_err(|e| SandboxError::Setup(e.to_string()))?,
            ),
            _ => None,
        };
        let mut writable: BTreeSet<String> = fsmap::DEFAULT_WRITABLE
            .iter()
            .map(|s| s.to_string())
            .collect();
        if let Some(df) = &df {
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
        // The exec server starts while the Dockerfile is replayed (its RUN steps run in
        // one-off `bwrap`s with network); it only needs the writable dirs to exist.
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
            match (&df, &spec.context_dir) {
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
        sb.env.extend(spec.env.clone());
        Ok(sb)
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

/// One local sandbox (a temp dir plus, with bubblewrap, one long-lived `bwrap`).
#[derive(Debug)]
pub struct LocalSandbox {
    isolated: bool,
    layout: Arc<HostLayout>,
    dir: PathBuf,
    fs: FsMap,
    workdir: String,
    env: BTreeMap<String, String>,
    allow_internet: bool,
    cgroup: Option<Arc<Cgroup>>,
    /// The exec server (bubblewrap mode, once set up).
    server: Option<ExecServer>,
    destroyed: AtomicBool,
    /// `RLIMIT_FSIZE` of everything run in the sandbox (the task's storage limit).
    fsize: Option<u64>,
}

impl LocalSandbox {
    /// The per-trial temp dir on the host (removed by `destroy`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this sandbox is isolated with bubblewrap.
    pub fn isolated(&self) -> bool {
        self.isolated
    }

    /// Whether memory/cpu limits are enforced through a cgroup.
    pub fn limits_enforced(&self) -> bool {
        self.cgroup.is_some()
    }

    /// The host path backing a sandbox path inside a writable dir, if it is one.
    pub fn host_path(&self, path: &str) -> Option<PathBuf> {
        match self.fs.resolve(path, true) {
            Ok((_, Location::Writable(p))) => Some(p),
            _ => None,
        }
    }

    /// Creates the writable top-level dirs and `/logs/{verifier,agent}`.
    fn init_dirs(&self) -> Result<()> {
        std::fs::create_dir(&self.fs.root)?;
        for top in &self.fs.writable {
            std::fs::create_dir(self.fs.top_dir(top))?;
        }
        for sub in ["logs/verifier", "logs/agent"] {
            std::fs::create_dir_all(self.fs.root.join(sub))?;
        }
        let tmp = self.fs.top_dir("tmp");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))?;
        if let Some(o) = self.fs.owner {
            o.chown_tree(&self.fs.root)?;
        }
        Ok(())
    }

    /// Checks `cwd` and the environment; returns the host cwd and the full environment.
    fn prepare(
        &self,
        cwd: &str,
        env: BTreeMap<String, String>,
    ) -> Result<(PathBuf, BTreeMap<String, String>)> {
        let bad_cwd = || SandboxError::Backend(format!("working directory {cwd} does not exist"));
        let (resolved, loc) = self.fs.resolve(cwd, true).map_err(SandboxError::Backend)?;
        let host_cwd = match loc {
            Location::Writable(p) | Location::ReadOnly(p) if p.is_dir() => p,
            Location::Outside if resolved == "/" => self.fs.root.clone(),
            _ => return Err(bad_cwd()),
        };
        let mut full = base_env();
        full.extend(env);
        if let Some((k, _)) = full
            .iter()
            .find(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
        {
            return Err(SandboxError::Backend(format!(
                "invalid environment variable {k:?}"
            )));
        }
        Ok((host_cwd, full))
    }

    /// A `bwrap` command with the sandbox's namespaces and mounts (plus the exec server's
    /// dir, read-only), up to `--remount-ro /`; in the trial's cgroup.
    fn bwrap(&self, net: bool, exec_dir: Option<&Path>) -> Command {
        let mut c = Command::new(&self.layout.bwrap);
        c.env_clear();
        c.args(["--die-with-parent", "--unshare-all", "--new-session"]);
        if net {
            c.arg("--share-net");
        }
        for e in &self.fs.ro {
            match e {
                RoEntry::Dir(n) => c.arg("--ro-bind").arg(format!("/{n}")).arg(format!("/{n}")),
                RoEntry::Symlink { name, target } => {
                    c.arg("--symlink").arg(target).arg(format!("/{name}"))
                }
            };
        }
        c.args(["--proc", "/proc", "--dev", "/dev"]);
        for top in &self.fs.writable {
            c.arg("--bind")
                .arg(self.fs.top_dir(top))
                .arg(format!("/{top}"));
        }
        if let Some(dir) = exec_dir {
            c.arg("--ro-bind").arg(dir).arg(server::EXEC_DIR);
        }
        c.args(["--remount-ro", "/"]);
        if self.layout.owner.is_some() {
            // Root-looking inside, an unprivileged uid outside, no capabilities either way.
            c.args(["--uid", "0", "--gid", "0", "--cap-drop", "ALL"]);
        }
        if let Some(cg) = &self.cgroup {
            cg.attach(&mut c);
        }
        limit_file_size(&mut c, self.fsize);
        if let Some(o) = &self.layout.owner {
            o.drop_to(&mut c);
        }
        c
    }

    /// Builds the command that runs `argv` as a fresh process (group) in the sandbox.
    fn command(
        &self,
        argv: &[String],
        cwd: &str,
        env: BTreeMap<String, String>,
        net: bool,
    ) -> Result<Command> {
        let (host_cwd, mut full) = self.prepare(cwd, env)?;
        if self.isolated {
            let mut c = self.bwrap(net, None);
            c.args(["--chdir", cwd, "--clearenv"]);
            for (k, v) in &full {
                c.arg("--setenv").arg(k).arg(v);
            }
            c.arg("--").args(argv);
            return Ok(c);
        }
        // Plain mode: map HOME/TMPDIR into the trial dir; the rest is the host.
        for key in ["HOME", "TMPDIR"] {
            let v = full.get(key).cloned().unwrap_or_else(|| "/tmp".into());
            if let Some(p) = self.host_path(&v) {
                full.insert(key.to_string(), p.to_string_lossy().into_owned());
            }
        }
        full.insert(
            "AHE_SANDBOX_FS".into(),
            self.fs.root.to_string_lossy().into_owned(),
        );
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..])
            .current_dir(host_cwd)
            .env_clear()
            .envs(full);
        if let Some(cg) = &self.cgroup {
            cg.attach(&mut c);
        }
        limit_file_size(&mut c, self.fsize);
        if let Some(o) = &self.layout.owner {
            o.drop_to(&mut c);
        }
        Ok(c)
    }

    /// Runs `argv` in the sandbox.
    async fn run(
        &self,
        argv: Vec<String>,
        cwd: &str,
        env: BTreeMap<String, String>,
        stdin: Option<Vec<u8>>,
        timeout: Option<Duration>,
        net: bool,
    ) -> Result<ExecOutput> {
        if argv.is_empty() {
            return Err(SandboxError::Backend("empty command".into()));
        }
        let cmd = self.command(&argv, cwd, env, net)?;
        process::run(cmd, stdin, timeout, !self.isolated).await
    }

    fn check_live(&self) -> Result<()> {
        if self.destroyed.load(Ordering::SeqCst) {
            Err(SandboxError::Backend("the sandbox was destroyed".into()))
        } else {
            Ok(())
        }
    }
}

/// Runs blocking file work off the async runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SandboxError::Backend(format!("blocking task failed: {e}")))?
}

#[async_trait::async_trait]
impl Sandbox for LocalSandbox {
    async fn exec(&self, command: &str, opts: ExecOpts) -> Result<ExecOutput> {
        self.check_live()?;
        let cwd = match &opts.cwd {
            Some(c) => dockerfile::resolve(&self.workdir, c),
            None => self.workdir.clone(),
        };
        let mut env = self.env.clone();
        env.extend(opts.env);
        let argv = vec![self.layout.bash.clone(), "-c".into(), command.to_string()];
        if let Some(server) = &self.server {
            let (_, full) = self.prepare(&cwd, env)?;
            return server
                .exec(&cwd, &full, argv, opts.stdin, opts.timeout)
                .await;
        }
        self.run(
            argv,
            &cwd,
            env,
            opts.stdin,
            opts.timeout,
            self.allow_internet,
        )
        .await
    }

    async fn put(&self, src: &Path, dest: &str) -> Result<()> {
        self.check_live()?;
        let (fs, src, dest) = (self.fs.clone(), src.to_path_buf(), dest.to_string());
        blocking(move || put_blocking(&fs, &src, &dest)).await
    }

    async fn get(&self, src: &str, dest: &Path) -> Result<CopyOut> {
        self.check_live()?;
        let (fs, src, dest) = (self.fs.clone(), src.to_string(), dest.to_path_buf());
        blocking(move || get_blocking(&fs, &src, &dest)).await
    }

    fn workdir(&self) -> &str {
        &self.workdir
    }

    /// The host's system dirs are read-only here: only a `PATH` entry inside a writable dir
    /// (`/app/bin`, set by the task's `ENV PATH=...`) makes a program replaceable.
    fn path_writable(&self) -> bool {
        let path = self.env.get("PATH").map_or(DEFAULT_PATH, |p| p.as_str());
        path.split(':')
            .any(|d| d.is_empty() || !d.starts_with('/') || self.host_path(d).is_some())
    }

    async fn layer(&self) -> Option<crate::Layer> {
        let path = self.env.get("PATH").map_or(DEFAULT_PATH, |p| p.as_str());
        self.isolated.then(|| self.fs.layer(path))
    }

    /// Kills the exec server's bubblewrap (and with it the sandbox's pid namespace) now.
    fn halt(&self) {
        if let Some(server) = &self.server {
            server.kill_now();
        }
    }

    /// The whole trial dir: every writable dir the sandbox binds (`fs/`) and the exec
    /// server's files, in both modes.
    async fn storage_dirs(&self) -> Vec<PathBuf> {
        vec![self.dir.clone()]
    }

    /// Bubblewrap: the script runs in the sandbox's pid namespace, sparing the exec server,
    /// its workers and their idle spares. Plain mode has no namespace to sweep (each exec's
    /// process group is already killed when it ends): none there.
    fn handover_command(&self, policy: LeftoverPolicy) -> Option<String> {
        self.server
            .as_ref()
            .map(|_| crate::handover::command(policy, 2))
    }

    async fn destroy(&self) -> Result<()> {
        if self.destroyed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        if let Some(server) = &self.server {
            server.shutdown().await;
        }
        let (dir, cg) = (self.dir.clone(), self.cgroup.clone());
        blocking(move || {
            if let Some(cg) = cg {
                cg.remove();
            }
            Ok(fsmap::remove_tree(&dir)?)
        })
        .await
    }
}

impl Drop for LocalSandbox {
    fn drop(&mut self) {
        if !self.destroyed.swap(true, Ordering::SeqCst) {
            if let Some(server) = &self.server {
                server.kill_now();
            }
            if let Some(cg) = &self.cgroup {
                cg.remove();
            }
            let _ = fsmap::remove_tree(&self.dir);
        }
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
