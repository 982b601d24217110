//! Sandboxes that run task environments: one trait, several backends.

pub mod busybox;
pub mod docker;
pub mod dockerfile;
mod handover;
pub mod harbor;
mod layer;
pub mod local;
pub mod ptrace_guard;
pub mod storage;

pub use handover::{
    command as handover_script, parse as parse_handover, HandOver, KeptProcess, LeftoverPolicy,
    START_WINDOW_SECS,
};
pub use layer::{is_whiteout, Layer};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Sandbox paths starting with this are ahe's own tools inside a sandbox (the in-sandbox
/// change checks' busybox): backends copy them without running any program of the sandbox
/// (docker: the archive API, never the keeper's shell), so nothing the agent replaced can
/// alter them on the way.
pub const INSIDE_PREFIX: &str = "/.ahe-bb-";

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
    /// Storage limit in MiB: no single file may grow past it (`RLIMIT_FSIZE`); the total is
    /// watched by the trial (see [`storage::Meter`]).
    #[serde(default)]
    pub storage_mb: Option<u64>,
    /// Whether the sandbox may reach the network.
    pub allow_internet: bool,
    /// Extra environment variables for every exec.
    pub env: BTreeMap<String, String>,
    /// Time limit of building the environment (the backend's default when unset).
    #[serde(default)]
    pub build_timeout_sec: Option<f64>,
}

/// `[sandbox] pull` / `--pull`: when the docker backend pulls a task's `docker_image` and the
/// `FROM` bases of a build through the engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PullPolicy {
    /// Pull only images that are not in the local engine (the default).
    #[default]
    Missing,
    /// Pull every image once per run, even when a local copy exists (it stays the fallback).
    Always,
    /// Never pull: only local images and builds from local bases (the offline behaviour).
    Never,
}

impl PullPolicy {
    /// `missing`, `always` or `never`.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Missing => "missing",
            PullPolicy::Always => "always",
            PullPolicy::Never => "never",
        }
    }
}

impl std::str::FromStr for PullPolicy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "missing" => Ok(PullPolicy::Missing),
            "always" => Ok(PullPolicy::Always),
            "never" => Ok(PullPolicy::Never),
            other => Err(format!("{other:?}: use missing, always or never")),
        }
    }
}

/// One step of an image pull, for the live display and the run's journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PullEvent {
    /// The image as the task names it (`alexgshaw/regex-log:20251031`).
    pub image: String,
    /// What happened.
    pub phase: PullPhase,
    /// The engine pulling it, when the backend has several (`[sandbox] hosts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// The phases of one pull.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum PullPhase {
    /// The pull request was sent to the engine.
    Started,
    /// Layers and bytes so far (sent at most a few times a second).
    Progress {
        /// Layers downloaded and extracted (or already present).
        layers_done: u32,
        /// Layers of the image seen so far.
        layers_total: u32,
        /// Bytes downloaded.
        bytes_done: u64,
        /// Bytes to download (the layers whose size the engine reported).
        bytes_total: u64,
    },
    /// The image is in the local engine.
    Done {
        /// Wall time of the pull.
        secs: f64,
        /// Bytes downloaded.
        bytes: u64,
    },
    /// The pull failed (the engine's message; never credentials).
    Failed {
        /// Wall time until the failure.
        secs: f64,
        /// Why.
        error: String,
    },
}

/// Where a backend reports its pulls.
pub type PullSink = Arc<dyn Fn(PullEvent) + Send + Sync>;

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
    /// Runs `argv` (an absolute program path and its arguments) as root without the sandbox's
    /// own shell where the backend can (docker: one `docker exec` of `argv`, not through the
    /// keeper), so that a shell or loader the agent replaced does not run in its place. The
    /// default quotes `argv` into an `exec` line for [`Sandbox::exec`] (the sandbox's shell
    /// starts it): [`Sandbox::exec_direct`] says which.
    async fn exec_argv(&self, argv: &[String], opts: ExecOpts) -> Result<ExecOutput> {
        self.exec(&exec_line(argv), opts).await
    }
    /// Whether [`Sandbox::exec_argv`] starts its program without the sandbox's shell.
    fn exec_direct(&self) -> bool {
        false
    }
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
    /// listening socket, waiting at most `start_secs` for leftovers still starting to
    /// listen; it prints what [`parse_handover`] reads. `None` when the backend has no pid
    /// namespace to sweep. The default spares the keeper (docker).
    fn handover_command(&self, policy: LeftoverPolicy, start_secs: u32) -> Option<String> {
        Some(handover::command(policy, 1, start_secs))
    }
    /// Whether a command in the sandbox could replace a program found on its `PATH` (so
    /// fingerprinting the programs a verifier runs is worth an exec). Docker: yes (root in
    /// the container); local: only when `PATH` names one of the sandbox's writable dirs.
    fn path_writable(&self) -> bool {
        true
    }
    /// Runs [`Sandbox::handover_command`] (nothing when there is none); used before the
    /// verifier runs.
    async fn end_leftovers(&self, policy: LeftoverPolicy, start_secs: u32) -> Result<HandOver> {
        match self.handover_command(policy, start_secs) {
            Some(c) => handover::run(self, &c).await,
            None => Ok(HandOver::default()),
        }
    }
    /// Tears the sandbox down (nothing runs in it afterwards may be relied on; the backend
    /// may finish removing it in the background, see [`Backend::drain`]); idempotent.
    /// The sandbox's writable layer and image as host directories, for reward-integrity
    /// checks on what the agent changed; `None` when this host cannot read them (a remote
    /// engine, a storage driver other than overlay2, no permission).
    async fn layer(&self) -> Option<Layer> {
        None
    }
    /// Stops using the agent's shell: from now on commands start outside every process the
    /// agent phase started (docker: a `docker exec` each, not through the keeper), so they
    /// hold what the agent's processes lack ([`ptrace_guard`]). Called before the hand-over.
    fn seal(&self) {}
    /// A read-only directory holding ahe's static busybox (`busybox`), mounted when the
    /// sandbox was made: nothing in the sandbox can alter it (docker: a remote engine's
    /// containers, see `docker::tools`). `None`: the checks put a copy in before each use.
    fn tools_dir(&self) -> Option<String> {
        None
    }
    async fn destroy(&self) -> Result<()>;
    /// The sandbox's file system as it is now, as an image a new sandbox can start from
    /// (`SandboxSpec::docker_image`; docker: `docker commit`), for a counterfactual run of
    /// the verifier; `None` where the backend cannot make one. The caller removes it with
    /// [`Sandbox::forget_image`].
    async fn image_of_now(&self) -> Result<Option<String>> {
        Ok(None)
    }
    /// Removes an image made by [`Sandbox::image_of_now`].
    async fn forget_image(&self, _image: &str) {}
    /// Whether, where no copy can be made ([`Sandbox::image_of_now`] is `None`), a
    /// counterfactual run may revert this sandbox itself once every check of the trial is
    /// done and its processes are ended, and run the verifier in it again (Harbor
    /// environments reached only through Harbor: the cloud ones). The default: no.
    fn verify_again_in_place(&self) -> bool {
        false
    }
    /// A new sandbox from `spec` on the engine this one runs on, where an image made by
    /// [`Sandbox::image_of_now`] lives (a pool host's; outside its slots: a counterfactual
    /// copy is short and rare); `None`: the backend's own `create` places it.
    async fn create_beside(&self, _spec: &SandboxSpec) -> Option<Result<Box<dyn Sandbox>>> {
        None
    }
    /// Kills every process in the sandbox at once, without the graceful steps of
    /// [`Sandbox::destroy`] (which must still follow): for a trial stopped because it wrote
    /// too much. The default does nothing (docker's `destroy` already kills at once).
    fn halt(&self) {}
    /// Host directories holding everything the sandbox writes to disk (its writable layer and
    /// the writable dirs it binds), for storage limits and the host reserve; empty when this
    /// host cannot see them (a remote engine, a storage driver other than overlay2).
    async fn storage_dirs(&self) -> Vec<PathBuf> {
        self.layer()
            .await
            .map(|l| l.upper.into_iter().map(|(_, h)| h).collect())
            .unwrap_or_default()
    }
    /// What the researcher should know about how this sandbox was made (e.g. a failed pull
    /// and the build used instead); recorded in the trial's result.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// The engine this sandbox runs on, when the backend has several (`[sandbox] hosts`).
    fn host(&self) -> Option<String> {
        None
    }
    /// Why this sandbox was lost, if it was: its engine stopped answering, so nothing that
    /// happened in it since says anything about the work (the trial is re-run elsewhere).
    fn lost(&self) -> Option<String> {
        None
    }
    /// Resolves (with [`Sandbox::lost`]'s reason) once the sandbox is lost; never, for
    /// backends that cannot lose one.
    async fn wait_lost(&self) -> String {
        std::future::pending().await
    }
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
    /// Sends the backend's image pulls to `sink` from now on (`None`: stop); backends that
    /// never pull ignore it.
    fn set_pull_sink(&self, _sink: Option<PullSink>) {}
    /// The engines of a backend with several (`[sandbox] hosts`): load, counts and health;
    /// empty for single-engine backends.
    fn hosts(&self) -> Vec<HostLoad> {
        Vec::new()
    }
    /// Host directories whose file systems this backend's sandboxes write to (the docker
    /// engine's data root when it runs on this host; the local backend's temp dir), for the
    /// host reserve (`[sandbox] min_free_disk`); empty when none is on this host.
    async fn disk_paths(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// One engine of a multi-engine backend, as the live display and `scores.json` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLoad {
    /// The host's name (`[sandbox] hosts` `name`, default its url).
    pub name: String,
    /// The engine's address.
    pub url: String,
    /// Trials it runs at once.
    pub capacity: usize,
    /// Trials on it now (sandboxes being created or alive).
    pub in_flight: usize,
    /// The most trials it ran at once.
    pub peak: usize,
    /// Sandboxes created on it.
    pub trials: u64,
    /// Trials on it when it stopped answering (each re-run elsewhere).
    pub lost: u64,
    /// Whether it answers (a host that stopped is probed again later).
    pub up: bool,
    /// Why it is down (`None` while up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Images built on it.
    pub builds: u64,
    /// Images pulled on it.
    pub pulls: u64,
}

/// `s` as one POSIX shell word (single-quoted; a `'` inside as `'\''`).
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The shell line that replaces the shell with `argv` (`exec 'prog' 'arg'...`).
pub(crate) fn exec_line(argv: &[String]) -> String {
    let words: Vec<String> = argv.iter().map(|a| sh_quote(a)).collect();
    format!("exec {}", words.join(" "))
}
