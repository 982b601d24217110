//! One local sandbox: its exec paths (the bubblewrap exec server or plain host processes),
//! file transfer, storage accounting and teardown (the backend that makes it is `local.rs`).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Command;

use super::cgroup::Cgroup;
use super::env::{base_env, default_signals, limit_file_size};
use super::fsmap::{FsMap, Location, RoEntry};
use super::server::ExecServer;
use super::transfer::{get_blocking, put_blocking};
use super::{fsmap, process, server, HostLayout};
use crate::dockerfile::{self, DEFAULT_PATH};
use crate::{CopyOut, ExecOpts, ExecOutput, LeftoverPolicy, Result, Sandbox, SandboxError};

/// One local sandbox (a temp dir plus, with bubblewrap, one long-lived `bwrap`).
#[derive(Debug)]
pub struct LocalSandbox {
    pub(super) isolated: bool,
    pub(super) layout: Arc<HostLayout>,
    pub(super) dir: PathBuf,
    pub(super) fs: FsMap,
    pub(super) workdir: String,
    pub(super) env: BTreeMap<String, String>,
    pub(super) allow_internet: bool,
    pub(super) cgroup: Option<Arc<Cgroup>>,
    /// The exec server (bubblewrap mode, once set up).
    pub(super) server: Option<ExecServer>,
    pub(super) destroyed: AtomicBool,
    /// Set by [`Sandbox::seal`]: commands are ahe's and keep the guard's capabilities.
    pub(super) sealed: AtomicBool,
    /// `RLIMIT_FSIZE` of everything run in the sandbox (the task's storage limit).
    pub(super) fsize: Option<u64>,
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
    pub(super) fn init_dirs(&self) -> Result<()> {
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
    pub(super) fn prepare(
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
    pub(super) fn bwrap(&self, net: bool, exec_dir: Option<&Path>) -> Command {
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
        if exec_dir.is_some() && self.layout.setpriv.is_some() {
            // The exec server holds two capabilities that grant nothing outside its user
            // namespace; the agent's commands drop them (see `ptrace_guard`).
            c.args(["--cap-add", "CAP_WAKE_ALARM", "--cap-add", "CAP_SETPCAP"]);
        }
        if let Some(cg) = &self.cgroup {
            cg.attach(&mut c);
        }
        limit_file_size(&mut c, self.fsize);
        default_signals(&mut c);
        if let Some(o) = &self.layout.owner {
            o.drop_to(&mut c);
        }
        c
    }

    /// Builds the command that runs `argv` as a fresh process (group) in the sandbox.
    pub(super) fn command(
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
        default_signals(&mut c);
        if let Some(o) = &self.layout.owner {
            o.drop_to(&mut c);
        }
        Ok(c)
    }

    /// Runs `argv` in the sandbox.
    pub(super) async fn run(
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

    pub(super) fn check_live(&self) -> Result<()> {
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
        let mut argv = vec![self.layout.bash.clone(), "-c".into(), command.to_string()];
        if let Some(server) = &self.server {
            // Before the seal a command is the agent's: it lacks the guard's capabilities.
            if let (Some(setpriv), false) =
                (&self.layout.setpriv, self.sealed.load(Ordering::SeqCst))
            {
                let drop = crate::ptrace_guard::LOCAL_DROP
                    .iter()
                    .map(|a| a.to_string());
                argv = std::iter::once(setpriv.clone())
                    .chain(drop)
                    .chain(argv)
                    .collect();
            }
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
    fn handover_command(&self, policy: LeftoverPolicy, start_secs: u32) -> Option<String> {
        self.server.as_ref().map(|_| {
            let mask = self
                .layout
                .setpriv
                .as_ref()
                .map(|_| crate::ptrace_guard::LOCAL_MASK);
            crate::handover::guarded_command(policy, 2, start_secs, mask)
        })
    }

    fn seal(&self) {
        self.sealed.store(true, Ordering::SeqCst);
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
