//! One trial's container: creation, exec, put/get, teardown.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, ResourcesUlimits};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, ContainerArchiveInfoOptionsBuilder,
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;

use super::exec::{self, ExecRequest};
use super::image::ImageInfo;
use super::keeper::{Keeper, KEEPER};
use super::lifecycle::{NetnsLease, NetnsPool, Removals};
use super::transfer::Transfer;
use super::{
    api_err, files, hostname, pid_start_time, remove_blocking, remove_container, status_of,
    LABEL_HOST, LABEL_PID, LABEL_PID_START, LABEL_RUN, LABEL_TASK, LABEL_TRIAL, PIDS_LIMIT,
};
use crate::{
    dockerfile, CopyOut, ExecOpts, ExecOutput, Result, Sandbox, SandboxError, SandboxSpec,
};

/// Docker's smallest memory limit.
const MIN_MEMORY: i64 = 6 << 20;

/// One trial's container (removed by `destroy`, or when dropped).
pub struct DockerSandbox {
    docker: Docker,
    id: String,
    name: String,
    image: String,
    workdir: String,
    keeper: Keeper,
    root_user: bool,
    no_bash: AtomicBool,
    no_tar: AtomicBool,
    destroyed: AtomicBool,
    removals: Arc<Removals>,
    netns: Mutex<Option<NetnsLease>>,
    /// The container's overlay layers on this host (inspected once, on first use).
    layer: tokio::sync::OnceCell<Option<crate::Layer>>,
    /// How the image was had, when the researcher should know (a failed pull...).
    pub(crate) notes: Vec<String>,
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("image", &self.image)
            .field("workdir", &self.workdir)
            .finish()
    }
}

/// Keeps `[A-Za-z0-9._-]`, replaces the rest, truncates.
fn sanitize(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect()
}

/// A unique, readable container name.
fn container_name(spec: &SandboxSpec) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let what = if spec.trial_id.is_empty() {
        &spec.task
    } else {
        &spec.trial_id
    };
    format!(
        "ahe-{}-{:x}-{n:x}{:x}",
        sanitize(what, 60),
        std::process::id(),
        nanos & 0xfff
    )
}

/// The labels of a new container.
fn labels(spec: &SandboxSpec) -> HashMap<String, String> {
    let pid = std::process::id();
    let mut l = HashMap::from([
        (LABEL_RUN.to_string(), spec.run.clone()),
        (LABEL_TRIAL.to_string(), spec.trial_id.clone()),
        (LABEL_TASK.to_string(), spec.task.clone()),
        (LABEL_PID.to_string(), pid.to_string()),
        (LABEL_HOST.to_string(), hostname()),
    ]);
    if let Some(start) = pid_start_time(pid) {
        l.insert(LABEL_PID_START.to_string(), start.to_string());
    }
    l
}

/// Engine-wide state a container needs besides its spec.
pub(crate) struct Shared<'a> {
    /// The engine.
    pub docker: &'a Docker,
    /// Host CPUs (caps the cpu limit).
    pub host_cpus: Option<f64>,
    /// Network-namespace holders, unless fresh namespaces were asked for.
    pub netns: Option<&'a Arc<NetnsPool>>,
    /// Background removals.
    pub removals: &'a Arc<Removals>,
    /// Whether the engine's storage driver caps a container's size (see
    /// [`super::StorageDriver::native_size`]); cleared when the engine refuses it.
    pub native_size: &'a std::sync::atomic::AtomicBool,
}

/// Creates, prepares and starts the container of one trial (once more with another
/// network holder when a leased holder turns out dead).
pub(crate) async fn create(
    shared: &Shared<'_>,
    spec: &SandboxSpec,
    img: &ImageInfo,
) -> Result<DockerSandbox> {
    match create_once(shared, spec, img).await {
        Err((e, _)) if storage_opt_refused(shared, spec, &e) => {
            tracing::warn!(
                "docker: the engine refuses per-container sizes ({e}); containers are made without one from now on"
            );
            shared.native_size.store(false, Ordering::SeqCst);
            create_once(shared, spec, img).await.map_err(|(e, _)| e)
        }
        Err((e, true)) => {
            tracing::warn!("docker: {e}; retrying with a new network holder");
            create_once(shared, spec, img).await.map_err(|(e, _)| e)
        }
        r => r.map_err(|(e, _)| e),
    }
}

/// Whether a failed create is the engine refusing `storage_opt` (overlay2 on xfs without
/// `pquota`, a driver that cannot): then containers are made without it from now on.
fn storage_opt_refused(shared: &Shared<'_>, spec: &SandboxSpec, e: &SandboxError) -> bool {
    let m = e.to_string().to_ascii_lowercase();
    shared.native_size.load(Ordering::SeqCst)
        && spec.storage_mb.is_some_and(|m| m > 0)
        && (m.contains("storage-opt") || m.contains("storage opt") || m.contains("quota"))
}

/// The engine's own cap of a container's writable layer: 1.5× the task's limit, so the
/// host's watcher trips first (and the trial ends with the reason) while the engine bounds
/// any writer, however fast.
fn storage_opt(shared: &Shared<'_>, spec: &SandboxSpec) -> Option<HashMap<String, String>> {
    let mb = spec.storage_mb.filter(|m| *m > 0)?;
    shared
        .native_size
        .load(Ordering::SeqCst)
        .then(|| HashMap::from([("size".to_string(), format!("{}m", mb + mb / 2 + 1))]))
}

/// One attempt of [`create`]; the flag tells whether a discarded network holder was involved.
async fn create_once(
    shared: &Shared<'_>,
    spec: &SandboxSpec,
    img: &ImageInfo,
) -> std::result::Result<DockerSandbox, (SandboxError, bool)> {
    let (docker, host_cpus) = (shared.docker, shared.host_cpus);
    let nano_cpus = spec.cpus.filter(|c| *c > 0.0).map(|c| {
        let c = host_cpus.map_or(c, |h| c.min(h)).max(0.01);
        (c * 1e9) as i64
    });
    let memory = spec
        .memory_mb
        .filter(|m| *m > 0)
        .map(|m| ((m as i64).saturating_mul(1 << 20)).max(MIN_MEMORY));
    for (k, v) in &spec.env {
        check_env(k, v).map_err(|e| (e, false))?;
    }
    // The keeper prepares the dirs (as root; for a USER image they are copied in instead)
    // and serves the fast exec path (see `keeper`).
    let keeper: Vec<String> = ["sh", "-c", KEEPER, "ahe-keeper", &img.workdir]
        .map(String::from)
        .to_vec();
    // No network unless the task allows it (then the engine's default bridge): a leased
    // loopback-only namespace, or a fresh one.
    let lease = match (spec.allow_internet, shared.netns) {
        (false, Some(pool)) => Some(pool.lease(&img.id).await.map_err(|e| (e, false))?),
        _ => None,
    };
    let network_mode = match (&lease, spec.allow_internet) {
        (Some(l), _) => Some(l.network_mode()),
        (None, false) => Some("none".to_string()),
        (None, true) => None,
    };
    let host_config = HostConfig {
        init: Some(true),
        network_mode,
        nano_cpus,
        memory,
        memory_swap: memory,
        pids_limit: Some(PIDS_LIMIT),
        storage_opt: storage_opt(shared, spec),
        // No single file outgrows the task's storage limit (the trial watches the total).
        ulimits: crate::storage::fsize_limit(spec.storage_mb).map(|b| {
            vec![ResourcesUlimits {
                name: Some("fsize".into()),
                soft: Some(b as i64),
                hard: Some(b as i64),
            }]
        }),
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".into()),
            config: None,
        }),
        ..Default::default()
    };
    let body = ContainerCreateBody {
        image: Some(img.id.clone()),
        entrypoint: Some(vec![]),
        cmd: Some(keeper),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        working_dir: Some(img.workdir.clone()),
        labels: Some(labels(spec)),
        tty: Some(false),
        open_stdin: Some(true),
        stdin_once: Some(false),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        host_config: Some(host_config),
        ..Default::default()
    };
    let name = container_name(spec);
    let opts = CreateContainerOptionsBuilder::default().name(&name).build();
    let created = match docker.create_container(Some(opts), body).await {
        Ok(c) => c,
        Err(e) => {
            let holder = lease.is_some();
            if let Some(l) = lease {
                l.discard().await;
            }
            let e = api_err(&format!("creating container for {}", spec.task), e);
            return Err((e, holder));
        }
    };
    // From here on, dropping `sb` (an error below) removes the container.
    let mut sb = DockerSandbox {
        docker: docker.clone(),
        id: created.id,
        name,
        image: img.id.clone(),
        workdir: img.workdir.clone(),
        keeper: Keeper::disabled(),
        root_user: img.root_user,
        no_bash: AtomicBool::new(false),
        no_tar: AtomicBool::new(false),
        destroyed: AtomicBool::new(false),
        removals: shared.removals.clone(),
        netns: Mutex::new(lease),
        layer: tokio::sync::OnceCell::new(),
        notes: Vec::new(),
    };
    // Attach before the start so the keeper's greeting is not lost.
    let attach = AttachContainerOptionsBuilder::default()
        .stdin(true)
        .stdout(true)
        .stderr(true)
        .stream(true)
        .logs(false)
        .build();
    match docker.attach_container(&sb.id, Some(attach)).await {
        Ok(a) => sb.keeper = Keeper::new(a.input, a.output),
        Err(e) => tracing::warn!("docker: attach failed ({e}); every exec uses docker exec"),
    }
    if !img.root_user {
        let mut dirs = vec![("/logs/verifier", 0o777), ("/logs/agent", 0o777)];
        if !img.has_workdir {
            dirs.push((sb.workdir.as_str(), 0o755));
        }
        let tar = files::dirs_archive(&dirs).map_err(|e| (e, false))?;
        sb.upload("/", tar).await.map_err(|e| (e, false))?;
    }
    if let Err(e) = docker.start_container(&sb.id, None).await {
        // A holder that died would fail every trial: drop it from the pool.
        sb.destroyed.store(true, Ordering::SeqCst);
        let _ = remove_container(docker, &sb.id).await;
        let lease = sb.netns.lock().unwrap().take();
        let holder = lease.is_some();
        if let Some(l) = lease {
            tracing::warn!("docker: start failed; discarding network holder {}", l.id());
            l.discard().await;
        }
        return Err((
            api_err(&format!("starting container {}", sb.name), e),
            holder,
        ));
    }
    Ok(sb)
}

/// Rejects environment variables the engine would mangle.
fn check_env(k: &str, v: &str) -> Result<()> {
    if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
        return Err(SandboxError::Backend(format!(
            "invalid environment variable {k:?}"
        )));
    }
    Ok(())
}

impl DockerSandbox {
    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The container name (`ahe-<trial>-...`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many execs ran through the keeper (the fast path) rather than `docker exec`.
    pub fn fast_execs(&self) -> u64 {
        self.keeper.served()
    }

    /// Gives the container up without removing it (its engine was lost; whoever reaches the
    /// engine again removes it): nothing runs through this sandbox afterwards.
    pub fn abandon(&self) {
        if !self.destroyed.swap(true, Ordering::SeqCst) {
            self.keeper.close();
        }
    }

    /// The image id the container runs.
    pub fn image(&self) -> &str {
        &self.image
    }

    fn check_live(&self) -> Result<()> {
        if self.destroyed.load(Ordering::SeqCst) {
            Err(SandboxError::Backend("the sandbox was destroyed".into()))
        } else {
            Ok(())
        }
    }

    /// Extracts a tar archive at `path` inside the container.
    async fn upload(&self, path: &str, tar: Vec<u8>) -> Result<()> {
        let opts = UploadToContainerOptionsBuilder::default()
            .path(path)
            .build();
        self.docker
            .upload_to_container(&self.id, Some(opts), bollard::body_full(tar.into()))
            .await
            .map_err(|e| api_err(&format!("copying into {path}"), e))
    }

    /// The keeper transport for put/get.
    fn transfer(&self) -> Transfer<'_> {
        Transfer {
            keeper: &self.keeper,
            docker: &self.docker,
            container: &self.id,
            unavailable: &self.no_tar,
        }
    }

    /// A tar of `path` through the archive API.
    async fn download(&self, path: &str) -> Result<Vec<u8>> {
        let opts = DownloadFromContainerOptionsBuilder::default()
            .path(path)
            .build();
        let mut stream = self.docker.download_from_container(&self.id, Some(opts));
        let mut data = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => data.extend_from_slice(&b),
                Err(e) if status_of(&e) == Some(404) => {
                    return Err(SandboxError::Backend(format!(
                        "get: {path}: no such file or directory in the sandbox"
                    )))
                }
                Err(e) => return Err(api_err(&format!("get: {path}"), e)),
            }
        }
        Ok(data)
    }

    /// Whether `path` is an existing directory inside the container.
    async fn is_dir(&self, path: &str) -> Result<bool> {
        let opts = ContainerArchiveInfoOptionsBuilder::default()
            .path(path)
            .build();
        match self
            .docker
            .get_container_archive_info(&self.id, Some(opts))
            .await
        {
            Ok(stat) => Ok(stat.file_mode & (1 << 31) != 0),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(api_err(&format!("stat {path}"), e)),
        }
    }

    /// `mkdir -p` inside the container.
    async fn mkdir(&self, path: &str) -> Result<()> {
        let quoted = format!("'{}'", path.replace('\'', "'\\''"));
        let out = self
            .exec(&format!("mkdir -p -- {quoted}"), ExecOpts::default())
            .await?;
        if out.exit_code != Some(0) {
            return Err(SandboxError::Backend(format!(
                "put: mkdir {path}: {}",
                out.stderr.trim()
            )));
        }
        Ok(())
    }

    /// An absolute, normalised sandbox path (relative ones are taken from the workdir).
    fn abs(&self, path: &str) -> String {
        dockerfile::resolve(&self.workdir, path)
    }
}

/// The exec's extra environment as `KEY=value` pairs (each checked).
fn env_pairs(opts: &ExecOpts) -> Result<Vec<String>> {
    let mut env = Vec::with_capacity(opts.env.len());
    for (k, v) in &opts.env {
        check_env(k, v)?;
        env.push(format!("{k}={v}"));
    }
    Ok(env)
}

/// Runs blocking file work off the async runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SandboxError::Backend(format!("blocking task failed: {e}")))?
}

#[async_trait::async_trait]
impl Sandbox for DockerSandbox {
    async fn exec(&self, command: &str, opts: ExecOpts) -> Result<ExecOutput> {
        self.check_live()?;
        let cwd = match &opts.cwd {
            Some(c) => self.abs(c),
            None => self.workdir.clone(),
        };
        let env = env_pairs(&opts)?;
        let no_bash = self.no_bash.load(Ordering::Relaxed);
        let request = |shell: &str, stdin: Option<Vec<u8>>| ExecRequest {
            argv: vec![shell.into(), "-c".into(), command.to_string()],
            cwd: cwd.clone(),
            env: env.clone(),
            stdin,
            timeout: opts.timeout,
            user: None,
        };
        if no_bash {
            return exec::run(&self.docker, &self.id, request("sh", opts.stdin)).await;
        }
        let req = request("bash", opts.stdin.clone());
        if let Some(r) = self.keeper.try_exec(&self.docker, &self.id, &req).await {
            return r;
        }
        match exec::run(&self.docker, &self.id, req).await {
            Err(SandboxError::Backend(m))
                if m.contains(exec::NOT_FOUND) && m.contains("\"bash\"") =>
            {
                // An image without bash: run commands with sh from now on.
                tracing::warn!("docker: {} has no bash; commands run with sh", self.image);
                self.no_bash.store(true, Ordering::Relaxed);
                exec::run(&self.docker, &self.id, request("sh", opts.stdin)).await
            }
            r => r,
        }
    }

    async fn exec_argv(&self, argv: &[String], opts: ExecOpts) -> Result<ExecOutput> {
        self.check_live()?;
        let env = env_pairs(&opts)?;
        let cwd = opts
            .cwd
            .as_deref()
            .map_or_else(|| "/".into(), |c| self.abs(c));
        let req = ExecRequest {
            argv: argv.to_vec(),
            cwd,
            env,
            stdin: opts.stdin,
            timeout: opts.timeout,
            user: Some("0".into()),
        };
        exec::run(&self.docker, &self.id, req).await
    }

    fn exec_direct(&self) -> bool {
        true
    }

    async fn put(&self, src: &Path, dest: &str) -> Result<()> {
        self.check_live()?;
        let md = std::fs::metadata(src)
            .map_err(|e| SandboxError::Backend(format!("put: {}: {e}", src.display())))?;
        let dest_abs = self.abs(dest);
        let src_path = src.to_path_buf();
        let tar = if md.is_dir() {
            let rel = files::rel_of(&dest_abs);
            match blocking(move || files::dir_archive(&src_path, &rel)).await? {
                Some(t) => t,
                None => return self.mkdir(&dest_abs).await,
            }
        } else {
            let into = dest.ends_with('/') || self.is_dir(&dest_abs).await?;
            let target = if into {
                files::rel_of(&dest_abs).join(src.file_name().unwrap_or_default())
            } else {
                files::rel_of(&dest_abs)
            };
            blocking(move || files::file_archive(&src_path, &target)).await?
        };
        // Through the keeper when it can (as root, like the archive API), else the API; ahe's
        // own tools never through the keeper (its shell is the image's).
        let own = dest_abs.starts_with(crate::INSIDE_PREFIX);
        if self.root_user && !own && self.transfer().put(&tar).await {
            return Ok(());
        }
        self.upload("/", tar).await
    }

    async fn get(&self, src: &str, dest: &Path) -> Result<CopyOut> {
        self.check_live()?;
        let src_abs = self.abs(src);
        let own = src_abs.starts_with(crate::INSIDE_PREFIX);
        let fast = if own {
            None
        } else {
            self.transfer().get(&src_abs).await
        };
        let data = match fast {
            Some(d) => d,
            None => self.download(&src_abs).await?,
        };
        let dest = dest.to_path_buf();
        blocking(move || files::unpack(&data, &src_abs, &dest)).await
    }

    async fn image_of_now(&self) -> Result<Option<String>> {
        // A tag: at most 128 of [a-z0-9_.-], from the container's (unique) name.
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        let tag: String = (self.name.to_ascii_lowercase().chars())
            .map(|c| if ok(c) { c } else { '-' })
            .take(120)
            .collect();
        super::snapshot::commit(&self.docker, &self.id, &tag)
            .await
            .map(Some)
    }

    async fn forget_image(&self, image: &str) {
        super::snapshot::remove(&self.docker, image).await
    }

    async fn layer(&self) -> Option<crate::Layer> {
        self.layer
            .get_or_init(|| super::layer::inspect(&self.docker, &self.id))
            .await
            .clone()
    }

    fn workdir(&self) -> &str {
        &self.workdir
    }

    /// Stops serving execs and hands the container to a background removal (the backend's
    /// `drain` waits for it).
    async fn destroy(&self) -> Result<()> {
        if self.destroyed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.keeper.close();
        let lease = self.netns.lock().unwrap().take();
        self.removals.spawn(self.id.clone(), lease);
        Ok(())
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }
}

impl Drop for DockerSandbox {
    /// Removes the container unless `destroy` did. This blocks (on a helper thread) rather
    /// than spawning a task, so the removal also happens when the runtime is shutting down
    /// (an interrupted run, a panicking trial). Its network holder goes back to the pool after.
    fn drop(&mut self) {
        if !self.destroyed.swap(true, Ordering::SeqCst) {
            remove_blocking(&self.docker, vec![self.id.clone()], "dropped container");
        }
    }
}
