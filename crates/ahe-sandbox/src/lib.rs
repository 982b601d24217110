//! Sandboxes that run task environments: one trait, several backends.

pub mod docker;
pub mod dockerfile;
mod handover;
pub mod local;

pub use handover::{parse as parse_handover, HandOver, KeptProcess, LeftoverPolicy};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a sandbox must provide for one trial (derived from a task's `[environment]`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Task name (for labels, logs and temp dir names).
    pub task: String,
    /// Unique trial id (for labels).
    pub trial_id: String,
    /// Run name (for labels, used by reaping).
    pub run: String,
    /// The task's `environment/` dir (Dockerfile + build context), if any.
    pub context_dir: Option<PathBuf>,
    /// Prebuilt image name, if the task names one.
    pub docker_image: Option<String>,
    /// CPU limit.
    pub cpus: Option<f64>,
    /// Memory limit in MiB.
    pub memory_mb: Option<u64>,
    /// Whether the sandbox may reach the network.
    pub allow_internet: bool,
    /// Extra environment variables for every exec.
    pub env: BTreeMap<String, String>,
    /// Time limit of building the environment (the backend's default when unset).
    #[serde(default)]
    pub build_timeout_sec: Option<f64>,
}

/// Options of one exec.
#[derive(Debug, Clone, Default)]
pub struct ExecOpts {
    /// Working directory inside the sandbox (default: the environment's WORKDIR).
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Bytes written to the command's stdin.
    pub stdin: Option<Vec<u8>>,
    /// Kill the command (and every process it started) after this long.
    pub timeout: Option<Duration>,
}

/// The outcome of one exec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecOutput {
    /// Exit code; `None` when killed by a signal or by the timeout.
    pub exit_code: Option<i32>,
    /// Captured stdout (lossy UTF-8).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8).
    pub stderr: String,
    /// Whether the timeout fired.
    pub timed_out: bool,
    /// Wall time of the exec.
    pub duration_ms: u64,
}

/// Errors of the sandbox itself (never of the command run inside it).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The environment could not be set up (bad Dockerfile, failing RUN step...).
    #[error("sandbox setup failed: {0}")]
    Setup(String),
    /// The backend failed while running or copying.
    #[error("sandbox error: {0}")]
    Backend(String),
    /// Local I/O.
    #[error("sandbox I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// What [`Sandbox::get`] left out: symbolic links, hard links and special files (FIFOs,
/// sockets, devices) are never copied out of a sandbox nor followed on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyOut {
    /// One line per entry left out: its path inside the sandbox and what it was
    /// (`/logs/verifier/reward.txt: symlink to /etc/passwd`).
    pub skipped: Vec<String>,
}

/// Result alias for sandbox operations.
pub type Result<T> = std::result::Result<T, SandboxError>;

/// One live sandbox (one trial's environment).
#[async_trait::async_trait]
pub trait Sandbox: Send + Sync {
    /// Runs `bash -c command` inside the sandbox.
    async fn exec(&self, command: &str, opts: ExecOpts) -> Result<ExecOutput>;
    /// Copies a host file or directory to `dest` (absolute path inside the sandbox).
    async fn put(&self, src: &Path, dest: &str) -> Result<()>;
    /// Copies a file or directory at `src` (inside) to the host path `dest`: regular files and
    /// directories only, never following a link (what was left out is returned).
    async fn get(&self, src: &str, dest: &Path) -> Result<CopyOut>;
    /// The working directory commands start in (the Dockerfile's last WORKDIR).
    fn workdir(&self) -> &str;
    /// The shell command (POSIX sh, run with `exec`) that ends every process commands in
    /// this sandbox started — background jobs, daemons, `setsid` escapees — except the
    /// backend's own and, under [`LeftoverPolicy::KeepServers`], processes serving a
    /// listening socket; it prints what [`parse_handover`] reads. `None` when the backend
    /// has no pid namespace to sweep. The default spares the keeper (docker).
    fn handover_command(&self, policy: LeftoverPolicy) -> Option<String> {
        Some(handover::command(policy, 1))
    }
    /// Whether a command in the sandbox could replace a program found on its `PATH` (so
    /// fingerprinting the programs a verifier runs is worth an exec). Docker: yes (root in
    /// the container); local: only when `PATH` names one of the sandbox's writable dirs.
    fn path_writable(&self) -> bool {
        true
    }
    /// Runs [`Sandbox::handover_command`] (nothing when there is none); used before the
    /// verifier runs.
    async fn end_leftovers(&self, policy: LeftoverPolicy) -> Result<HandOver> {
        match self.handover_command(policy) {
            Some(c) => handover::run(self, &c).await,
            None => Ok(HandOver::default()),
        }
    }
    /// Tears the sandbox down (nothing runs in it afterwards may be relied on; the backend
    /// may finish removing it in the background, see [`Backend::drain`]); idempotent.
    async fn destroy(&self) -> Result<()>;
}

/// A way to create sandboxes.
#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// Short name (`local`, `docker`).
    fn name(&self) -> &'static str;
    /// Creates and sets up a sandbox for one trial.
    async fn create(&self, spec: &SandboxSpec) -> Result<Box<dyn Sandbox>>;
    /// Waits until the teardown of every destroyed sandbox has finished.
    async fn drain(&self) {}
}
