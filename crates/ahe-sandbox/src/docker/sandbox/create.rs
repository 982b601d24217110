//! Creating one trial's container: its resources, network, keeper, labels and name, then
//! the dirs it needs and its start.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, ResourcesUlimits};
use bollard::query_parameters::{AttachContainerOptionsBuilder, CreateContainerOptionsBuilder};
use bollard::Docker;

use super::super::image::ImageInfo;
use super::super::keeper::{Keeper, KEEPER};
use super::super::lifecycle::{NetnsPool, Removals};
use super::super::{
    api_err, files, hostname, pid_start_time, remove_container, LABEL_HOST, LABEL_PID,
    LABEL_PID_START, LABEL_RUN, LABEL_TASK, LABEL_TRIAL, PIDS_LIMIT,
};
use super::DockerSandbox;
use crate::{Result, SandboxError, SandboxSpec};

/// Docker's smallest memory limit.
const MIN_MEMORY: i64 = 6 << 20;

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
    /// The read-only busybox volume to mount (see `tools`).
    pub tools: Option<String>,
    /// Whether ahe checks the engine's containers from inside (see `DockerBackend::with_tools`).
    pub inside: bool,
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
    let docker = shared.docker;
    for (k, v) in &spec.env {
        check_env(k, v).map_err(|e| (e, false))?;
    }
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
    let body = container_body(spec, img, host_config(shared, spec, network_mode));
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
        sealed: AtomicBool::new(false),
        can_drop: tokio::sync::OnceCell::new(),
        own: tokio::sync::OnceCell::new(),
        tools: shared.tools.is_some(),
        inside: shared.inside,
        no_tar: AtomicBool::new(false),
        destroyed: AtomicBool::new(false),
        removals: shared.removals.clone(),
        netns: Mutex::new(lease),
        layer: tokio::sync::OnceCell::new(),
        notes: Vec::new(),
    };
    // Attach before the start so the keeper's greeting is not lost.
    attach_keeper(docker, &mut sb).await;
    if !img.root_user {
        let mut dirs = vec![("/logs/verifier", 0o777), ("/logs/agent", 0o777)];
        if !img.has_workdir {
            dirs.push((sb.workdir.as_str(), 0o755));
        }
        let tar = files::dirs_archive(&dirs).map_err(|e| (e, false))?;
        sb.api().upload("/", tar).await.map_err(|e| (e, false))?;
    }
    if let Err(e) = docker.start_container(&sb.id, None).await {
        return Err(start_failed(docker, sb, e).await);
    }
    Ok(sb)
}

/// The container's resources: CPUs (at most the host's), memory without swap, a pid limit,
/// the engine's size cap and a file-size limit for the task's storage, no log, and
/// `network_mode`.
fn host_config(
    shared: &Shared<'_>,
    spec: &SandboxSpec,
    network_mode: Option<String>,
) -> HostConfig {
    let nano_cpus = spec.cpus.filter(|c| *c > 0.0).map(|c| {
        let c = shared.host_cpus.map_or(c, |h| c.min(h)).max(0.01);
        (c * 1e9) as i64
    });
    let memory = spec
        .memory_mb
        .filter(|m| *m > 0)
        .map(|m| ((m as i64).saturating_mul(1 << 20)).max(MIN_MEMORY));
    HostConfig {
        init: Some(true),
        // Held by ahe's processes, never by the agent's (see `ptrace_guard`).
        cap_add: Some(vec![crate::ptrace_guard::CAP.into()]),
        mounts: shared
            .tools
            .as_deref()
            .map(|v| vec![super::super::tools::mount(v)]),
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
    }
}

/// The container to create: the image with the keeper as its only process (attached
/// stdin, stdout and stderr), the task's environment, the workdir and our labels.
fn container_body(
    spec: &SandboxSpec,
    img: &ImageInfo,
    host_config: HostConfig,
) -> ContainerCreateBody {
    // The keeper prepares the dirs (as root; for a USER image they are copied in instead)
    // and serves the fast exec path (see `keeper`).
    // It starts without the ptrace guard's capability (see `ptrace_guard`).
    let keeper = crate::ptrace_guard::dropped(
        &["sh", "-c", KEEPER, "ahe-keeper", &img.workdir].map(String::from),
    );
    ContainerCreateBody {
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
    }
}

/// Attaches to the keeper's streams for the fast exec path (without it, every exec uses
/// `docker exec`).
async fn attach_keeper(docker: &Docker, sb: &mut DockerSandbox) {
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
}

/// The error of a container that would not start, after removing it and discarding its
/// network holder; the flag tells whether one was discarded.
async fn start_failed(
    docker: &Docker,
    sb: DockerSandbox,
    e: bollard::errors::Error,
) -> (SandboxError, bool) {
    // A holder that died would fail every trial: drop it from the pool.
    sb.destroyed.store(true, Ordering::SeqCst);
    let _ = remove_container(docker, &sb.id).await;
    let lease = sb.netns.lock().unwrap().take();
    let holder = lease.is_some();
    if let Some(l) = lease {
        tracing::warn!("docker: start failed; discarding network holder {}", l.id());
        l.discard().await;
    }
    (
        api_err(&format!("starting container {}", sb.name), e),
        holder,
    )
}

/// Rejects environment variables the engine would mangle.
pub(super) fn check_env(k: &str, v: &str) -> Result<()> {
    if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
        return Err(SandboxError::Backend(format!(
            "invalid environment variable {k:?}"
        )));
    }
    Ok(())
}
