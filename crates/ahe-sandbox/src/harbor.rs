//! The `harbor` backend: each trial's sandbox is a Harbor environment (`docker`, `daytona`,
//! `modal`, `e2b`, ... — whatever the installed Harbor offers), created, built or pulled,
//! run and deleted by Harbor's own environment classes. `ahe` drives them through one bridge
//! process per backend (`scripts/harbor/bridge.py`, shipped inside `ahe` and run with the
//! Harbor venv's python) speaking JSON lines (the protocol is documented in the script).
//!
//! Failures are infra: an environment that fails to start makes `create` fail (the trial is an
//! `infra_error` with the provider's message, and retried); a bridge that dies makes every
//! sandbox whose commands go through it [`Sandbox::lost`] (the trial is re-run, as on a lost
//! docker engine; a container reached through the Engine API outlives it), and the
//! environments it left are deleted through a new bridge. Each environment is recorded under
//! the state dir while it lives, so `ahe sandbox reap` deletes what a killed `ahe` left.
//!
//! On `docker` a task's image is built once by ahe and every trial's environment starts from
//! it as a prebuilt image (`image.rs`). The compose project's `main` container is found on
//! the local engine by its labels, and its overlay2 layer read as the docker backend does (so
//! the change checks and storage metering work when this host can read the engine's data
//! root). Other Harbor environments (and `docker` with `host_layer = false`) give no
//! writable layer ([`Sandbox::layer`] is `None`: no storage metering; the change checks and
//! the hand-over run inside the sandbox with ahe's static busybox). Through Harbor's exec stderr comes
//! merged into stdout (it returns one stream); on `docker` read from this host, commands and
//! copies go through the Engine API on the environment's container instead (`engine.rs`,
//! `[sandbox.harbor] exec = "engine"`), as on the docker backend.

mod bridge;
mod engine;
mod guard;
mod image;
mod records;
mod start;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::{
    Backend, CopyOut, ExecOpts, ExecOutput, LeftoverPolicy, Result, Sandbox, SandboxError,
    SandboxSpec,
};
use bridge::Bridge;
pub use engine::HarborExec;
pub use records::{reap_in, HarborReap};
pub use start::MAX_START_LOSSES;
use start::{start_once, StartError};

/// `[sandbox.harbor]`: which Harbor environment runs the trials and with what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarborConfig {
    /// Harbor's environment type (`docker`, `daytona`, `modal`, `e2b`, `runloop`, `gke`, ...).
    #[serde(default = "default_environment")]
    pub environment: String,
    /// The Harbor venv (default `$HARBOR_VENV` or `~/.cache/ahe/harbor-venv`, which
    /// `scripts/setup-harbor.sh` makes); its `bin/python` runs the bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub venv: Option<PathBuf>,
    /// Passed through to the environment class as keyword arguments (Harbor's `--ek`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, Value>,
    /// Whether the `docker` environment's writable layer is read from this host (the
    /// default); `false` makes the change checks and the hand-over run inside the sandbox
    /// with ahe's static busybox, as on environments whose file system is elsewhere.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub host_layer: bool,
    /// How commands and copies reach a `docker` environment read from this host: through
    /// the Engine API on its container (`engine`, the default) or Harbor's `docker compose`.
    #[serde(default, skip_serializing_if = "is_engine")]
    pub exec: HarborExec,
}

fn is_engine(e: &HarborExec) -> bool {
    *e == HarborExec::Engine
}

impl Default for HarborConfig {
    fn default() -> Self {
        HarborConfig {
            environment: default_environment(),
            venv: None,
            options: BTreeMap::new(),
            host_layer: true,
            exec: HarborExec::Engine,
        }
    }
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn default_environment() -> String {
    "docker".into()
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
}

/// The venv `venv` or the default one (`$HARBOR_VENV`, else `~/.cache/ahe/harbor-venv`).
pub fn venv_or_default(venv: Option<&Path>) -> PathBuf {
    venv.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("HARBOR_VENV").map(PathBuf::from))
        .unwrap_or_else(|| home().join(".cache/ahe/harbor-venv"))
}

/// Where live-environment records and bridge logs go (`$AHE_HARBOR_STATE`, else
/// `~/.cache/ahe/harbor`).
pub fn state_dir() -> PathBuf {
    std::env::var_os("AHE_HARBOR_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cache/ahe/harbor"))
}

/// Deletes the environments left by dead `ahe` processes (`all`: every recorded one).
pub async fn reap(all: bool) -> HarborReap {
    reap_in(&state_dir(), all).await
}

/// State shared by the backend and its sandboxes.
struct Inner {
    cfg: HarborConfig,
    python: PathBuf,
    script: PathBuf,
    state: PathBuf,
    version: String,
    bridge: tokio::sync::Mutex<Option<Arc<Bridge>>>,
    stops: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    seq: AtomicU64,
    /// On `docker`: the task images ahe builds once (see `image.rs`).
    images: Option<image::Images>,
}

impl Inner {
    /// The live bridge, started (again) when there is none or it died.
    async fn bridge(&self) -> Result<Arc<Bridge>> {
        let mut slot = self.bridge.lock().await;
        if let Some(b) = slot.as_ref().filter(|b| b.dead().is_none()) {
            return Ok(b.clone());
        }
        let log = self
            .state
            .join(format!("bridge-{}.log", std::process::id()));
        let b = Bridge::start(&self.python, &self.script, log).map_err(|e| {
            SandboxError::Backend(format!(
                "cannot start the Harbor bridge ({}): {e}",
                self.python.display()
            ))
        })?;
        *slot = Some(b.clone());
        Ok(b)
    }
}

impl Inner {
    /// The first notes of a started environment: which one, how its image was had, starts
    /// lost on the way, and where its file system is.
    fn start_notes(
        &self,
        session: &str,
        prebuilt: Option<image::Prebuilt>,
        lost: &[String],
    ) -> Vec<String> {
        let inner = self;
        let mut notes = vec![format!(
            "sandbox: Harbor {} environment {:?} (session {session})",
            inner.version, inner.cfg.environment
        )];
        notes.extend(prebuilt.into_iter().flat_map(|p| p.notes));
        notes.extend(lost.iter().map(|why| {
            format!("an earlier start of this environment was lost and made again (not an infra retry): {why}")
        }));
        if inner.cfg.environment != "docker" {
            notes.push(
                "its file system is not on this host: no storage metering; the hand-over and \
                 the change checks run inside the sandbox (ahe's static busybox)"
                    .into(),
            );
        }
        notes
    }
}

/// The `harbor` backend.
pub struct HarborBackend {
    inner: Arc<Inner>,
}

impl HarborBackend {
    /// Checks the venv and that its Harbor offers `cfg.environment` (a short-lived bridge
    /// answers `hello`); the bridge that serves trials starts with the first sandbox.
    pub fn connect(cfg: HarborConfig) -> anyhow::Result<HarborBackend> {
        let venv = venv_or_default(cfg.venv.as_deref());
        let python = venv.join("bin/python");
        if !python.is_file() {
            anyhow::bail!(
                "sandbox.harbor.venv: {} has no bin/python; run scripts/setup-harbor.sh (it makes \
                 ~/.cache/ahe/harbor-venv) or set [sandbox.harbor] venv = \"PATH\"",
                venv.display()
            );
        }
        let state = state_dir();
        std::fs::create_dir_all(&state)
            .map_err(|e| anyhow::anyhow!("harbor state dir {}: {e}", state.display()))?;
        let script = bridge::script_in(&state)
            .map_err(|e| anyhow::anyhow!("harbor state dir {}: {e}", state.display()))?;
        let (hello, check) = bridge::hello(&python, &script, &cfg)?;
        let version = hello["harbor"].as_str().unwrap_or("?").to_string();
        let offered: Vec<&str> = hello["environments"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !offered.contains(&cfg.environment.as_str()) {
            anyhow::bail!(
                "sandbox.harbor.environment: {:?} is not an environment Harbor {version} offers \
                 (one of: {})",
                cfg.environment,
                offered.join(", ")
            );
        }
        if check["ok"] != json!(true) {
            anyhow::bail!(
                "sandbox.harbor: {} (Harbor's preflight; cloud environments need their extra in \
                 the venv, e.g. pip install 'harbor[{}]', and their credentials in the \
                 environment)",
                check["error"].as_str().unwrap_or("failed"),
                cfg.environment
            );
        }
        let environment = cfg.environment.clone();
        Ok(HarborBackend {
            inner: Arc::new(Inner {
                cfg,
                python,
                script,
                state,
                version,
                bridge: tokio::sync::Mutex::new(None),
                stops: Mutex::new(Vec::new()),
                seq: AtomicU64::new(0),
                images: (environment == "docker")
                    .then(|| image::Images::new(crate::PullPolicy::default())),
            }),
        })
    }

    /// Sets when the `FROM` bases of the task images built for `docker` are pulled (before
    /// the first sandbox).
    pub fn with_pull(mut self, policy: crate::PullPolicy) -> HarborBackend {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            if inner.images.is_some() {
                inner.images = Some(image::Images::new(policy));
            }
        }
        self
    }

    /// Task images built so far (on `docker`: at most one per task environment).
    pub fn builds(&self) -> u64 {
        self.inner.images.as_ref().map_or(0, image::Images::builds)
    }

    /// The installed Harbor's version.
    pub fn harbor_version(&self) -> &str {
        &self.inner.version
    }

    /// The pid of the bridge serving sandboxes now (`None` before the first sandbox).
    pub async fn bridge_pid(&self) -> Option<u32> {
        self.inner
            .bridge
            .lock()
            .await
            .as_ref()
            .and_then(|b| b.pid())
    }
}

#[async_trait::async_trait]
impl Backend for HarborBackend {
    fn name(&self) -> &'static str {
        "harbor"
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Box<dyn Sandbox>> {
        let inner = &self.inner;
        let prebuilt = match &inner.images {
            Some(images) => images.prebuilt(spec).await?,
            None => None,
        };
        // A start lost with its bridge says nothing about the environment: it is made again
        // on a new bridge (a few times) rather than spending one of the trial's infra retries.
        let mut lost: Vec<String> = Vec::new();
        let (trial_dir, (bridge, session, start, record, answer)) = loop {
            let trial_dir = tempfile::Builder::new()
                .prefix("ahe-harbor-trial-")
                .tempdir()?;
            match start_once(inner, spec, prebuilt.as_ref(), trial_dir.path()).await {
                Ok(x) => break (trial_dir, x),
                Err(StartError::Lost(why)) if lost.len() < MAX_START_LOSSES => {
                    tracing::warn!("harbor: {why}; starting the environment again");
                    lost.push(why);
                }
                Err(StartError::Lost(why)) => {
                    let env = &inner.cfg.environment;
                    return Err(SandboxError::Backend(format!(
                        "harbor {env}: {why} (its bridge was lost {} times in a row)",
                        lost.len() + 1
                    )));
                }
                Err(StartError::Failed(e)) => return Err(e),
            }
        };
        let mut notes = inner.start_notes(&session, prebuilt, &lost);
        let mut engine = engine::engine_of(&inner.cfg, &session, spec, &mut notes).await;
        let workdir = answer["workdir"].as_str().unwrap_or("/").to_string();
        if let Some(e) = engine.as_mut() {
            e.start_keeper(&workdir).await;
        }
        let finished = engine::finish(
            engine.as_ref(),
            &bridge,
            &session,
            &answer["then"],
            &workdir,
        );
        if let Err(e) = finished.await {
            inner.delete_later(bridge, start, record);
            return Err(e);
        }
        let guard = guard::probe(engine.as_mut(), &bridge, &session).await;
        notes.extend(
            answer["notes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|n| format!("harbor: {n}")),
        );
        Ok(Box::new(HarborSandbox {
            inner: inner.clone(),
            host: format!(
                "harbor:{} (bridge {})",
                inner.cfg.environment,
                bridge.pid().unwrap_or(0)
            ),
            bridge,
            session,
            workdir,
            notes,
            start,
            record,
            destroyed: AtomicBool::new(false),
            layer: tokio::sync::OnceCell::new(),
            engine,
            guard,
            sealed: AtomicBool::new(false),
            _trial_dir: trial_dir,
        }))
    }

    fn set_pull_sink(&self, sink: Option<crate::PullSink>) {
        if let Some(images) = &self.inner.images {
            images.set_sink(sink);
        }
    }

    async fn drain(&self) {
        loop {
            let tasks: Vec<_> = std::mem::take(&mut *self.inner.stops.lock().unwrap());
            if tasks.is_empty() {
                return;
            }
            for t in tasks {
                let _ = t.await;
            }
        }
    }
}

/// One trial's Harbor environment.
pub struct HarborSandbox {
    inner: Arc<Inner>,
    bridge: Arc<Bridge>,
    host: String,
    session: String,
    workdir: String,
    notes: Vec<String>,
    start: Value,
    record: PathBuf,
    destroyed: AtomicBool,
    layer: tokio::sync::OnceCell<Option<crate::Layer>>,
    /// The environment's container through the Engine API (`exec = "engine"` on `docker`).
    engine: Option<engine::Engine>,
    /// The ptrace guard's mask, or why it is off (see `ptrace_guard`).
    guard: std::result::Result<u64, String>,
    /// Set by [`Sandbox::seal`].
    sealed: AtomicBool,
    _trial_dir: tempfile::TempDir,
}

impl Drop for HarborSandbox {
    /// Deletes the environment unless `destroy` did (an interrupted run drops its trials):
    /// the stop goes to the bridge without waiting, and a bridge whose input then closes
    /// deletes what it still holds anyway; the bridge removes the record once deleted.
    fn drop(&mut self) {
        if !self.destroyed.swap(true, Ordering::SeqCst) {
            self.bridge
                .notify(json!({"op": "stop", "session": self.session, "delete": true}));
        }
    }
}

impl HarborSandbox {
    async fn call(&self, mut req: Value) -> Result<Value> {
        self.check_live()?;
        req["session"] = json!(self.session);
        self.bridge
            .call(req)
            .await
            .map_err(|r| SandboxError::Backend(r.message))
    }

    fn abs(&self, path: &str) -> String {
        crate::dockerfile::resolve(&self.workdir, path)
    }

    fn check_live(&self) -> Result<()> {
        if self.destroyed.load(Ordering::SeqCst) {
            return Err(SandboxError::Backend("sandbox already destroyed".into()));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Sandbox for HarborSandbox {
    async fn exec(&self, command: &str, opts: ExecOpts) -> Result<ExecOutput> {
        if let Some(e) = &self.engine {
            self.check_live()?;
            let cwd = opts
                .cwd
                .as_deref()
                .map_or_else(|| self.workdir.clone(), |c| self.abs(c));
            return e.exec(command, cwd, opts).await;
        }
        self.bridge_exec(&self.agent_command(command), opts).await
    }

    async fn exec_argv(&self, argv: &[String], opts: ExecOpts) -> Result<ExecOutput> {
        let Some(e) = &self.engine else {
            return self.bridge_exec(&crate::exec_line(argv), opts).await;
        };
        self.check_live()?;
        let cwd = opts
            .cwd
            .as_deref()
            .map_or_else(|| "/".into(), |c| self.abs(c));
        e.exec_argv(argv, cwd, opts).await
    }

    fn exec_direct(&self) -> bool {
        self.engine.is_some()
    }

    async fn put(&self, src: &Path, dest: &str) -> Result<()> {
        if let Some(e) = &self.engine {
            self.check_live()?;
            return e.put(src, dest, &self.abs(dest)).await;
        }
        let src = std::path::absolute(src)?;
        if !src.exists() {
            return Err(SandboxError::Backend(format!(
                "put: {}: no such file or directory",
                src.display()
            )));
        }
        self.call(json!({"op": "put", "src": src, "dest": self.abs(dest)}))
            .await
            .map(|_| ())
    }

    async fn get(&self, src: &str, dest: &Path) -> Result<CopyOut> {
        let src_abs = self.abs(src);
        if let Some(e) = &self.engine {
            self.check_live()?;
            return e.get(&src_abs, dest).await;
        }
        let tmp = tempfile::tempdir()?;
        let tar = tmp.path().join("get.tar");
        self.call(json!({"op": "get", "src": src_abs, "tar": tar}))
            .await?;
        let dest = dest.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let data = std::fs::read(&tar)?;
            crate::docker::files::unpack(&data, &src_abs, &dest)
        })
        .await
        .map_err(|e| SandboxError::Backend(format!("get: {e}")))?
    }

    fn workdir(&self) -> &str {
        &self.workdir
    }

    async fn image_of_now(&self) -> Result<Option<String>> {
        match &self.engine {
            Some(e) => e.commit(&self.session).await.map(Some),
            None => Ok(None),
        }
    }

    fn verify_again_in_place(&self) -> bool {
        // No commit without the engine; the sandbox is deleted right after the checks.
        self.engine.is_none()
    }

    async fn forget_image(&self, image: &str) {
        if let Some(e) = &self.engine {
            e.forget(image).await
        }
    }

    async fn layer(&self) -> Option<crate::Layer> {
        if self.inner.cfg.environment != "docker" || !self.inner.cfg.host_layer {
            return None;
        }
        let find = || async {
            match &self.engine {
                Some(e) => e.layer().await,
                None => {
                    let (docker, id) = engine::compose_main(&self.session).await?;
                    crate::docker::layer::inspect(&docker, &id).await
                }
            }
        };
        self.layer.get_or_init(find).await.clone()
    }

    fn handover_command(&self, policy: LeftoverPolicy, start_secs: u32) -> Option<String> {
        // Harbor's docker environment: PID 1 is `sh -c "sleep infinity"`, its oldest child
        // the `sleep` (spared: ending it ends the container); execs enter from outside. The
        // same script on other environments (run inside by ahe's busybox).
        let mask = self.guard.as_ref().ok().copied();
        Some(crate::handover::guarded_command(
            policy, 0, start_secs, mask,
        ))
    }

    fn seal(&self) {
        self.sealed.store(true, Ordering::SeqCst);
        if let Some(e) = &self.engine {
            e.seal();
        }
    }

    async fn destroy(&self) -> Result<()> {
        if self.destroyed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.inner
            .delete_later(self.bridge.clone(), self.start.clone(), self.record.clone());
        Ok(())
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = self.notes.clone();
        notes.push(self.guard_note());
        notes
    }

    fn host(&self) -> Option<String> {
        Some(self.host.clone())
    }

    /// The bridge's death, when commands go through it; with the Engine API the container
    /// outlives its bridge (a new bridge deletes it), and one removed under the trial fails
    /// its next command as an infra error instead.
    fn lost(&self) -> Option<String> {
        match self.engine {
            Some(_) => None,
            None => self.bridge.dead(),
        }
    }

    async fn wait_lost(&self) -> String {
        match self.engine {
            Some(_) => std::future::pending().await,
            None => self.bridge.wait_dead().await,
        }
    }
}
