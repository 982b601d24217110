//! The `docker` backend: one container per trial, driven through the Docker Engine API.
//!
//! Images: a task's `docker_image` is used when it exists locally, and pulled through the
//! engine when it does not (`[sandbox] pull = "missing"`, the default; `always` pulls every
//! image once per backend; `never` pulls nothing), once per image however many trials wait
//! for it, with registry credentials from the Docker client config (`auth.rs`). Otherwise — or
//! when the pull fails, with a note in the trial's result — the task's `environment/` is built
//! once per content hash (`ahe-task:<hash>`, files + modes + the ids of the `FROM` images,
//! pulled the same way) and reused across trials and runs. Pull progress goes to the sink of
//! [`Backend::set_pull_sink`].
//!
//! Containers run a keeper under `docker-init` (so removal is instant): it creates
//! `/logs/{verifier,agent}` and then serves commands with `bash` over the attached stdin
//! (see `keeper.rs`), or sleeps when the image has no bash. No network unless the task
//! allows it (a loopback-only namespace leased from a holder container, one trial at a
//! time; see `lifecycle.rs`); cpu/memory(+swap)/pids limits; labels naming the run, trial,
//! task, host and the pid of the ahe process; [`reap`] removes the containers of dead ahe
//! processes (called on every [`DockerBackend::connect`]). `destroy` hands the container
//! to a background removal; [`Backend::drain`] waits for those.
//!
//! Execs run `bash -c` through the keeper (a fork in the container, ≈10 ms) when it is
//! idle, else (stdin given, a concurrent exec, no bash, after any keeper trouble) through
//! `create_exec`/`start_exec` (a `runc exec`, ≈100 ms here). Every exec carries a unique
//! `AHE_EXEC_ID` in its environment, and a timeout (or dropping the exec future) kills every
//! process inside the container that still carries it, so nothing of the command survives.
//! Unlike the local backend, background processes survive the exec that started them (the
//! container lives until `destroy`); what they write later is dropped between execs and
//! mixed into the output of an exec that runs through the keeper meanwhile.
//!
//! `put`/`get` move tar archives: through the keeper (`tar` in the container, ≈10 ms) for
//! small archives in root images, else through the engine's archive API (≈100 ms here).
//!
//! Limitations: a command killed by a signal reports `128 + N` (the engine cannot tell it
//! from `exit 128+N`); the timeout kill needs `sh` and `grep` in the image (and misses a
//! process that clears its environment); `get` holds the archive in memory; images without
//! `bash` run commands with `sh`. `.dockerignore` is honoured for the context sent and its
//! hash (patterns anchored at the context root, `*`, `**`, `!` exceptions).

pub(crate) mod api;
pub mod auth;
mod context;
pub(crate) mod exec;
pub(crate) mod files;
pub(crate) mod image;
pub(crate) mod keeper;
pub(crate) mod layer;
mod lifecycle;
mod owned;
pub use owned::{hostname, reap, remove_own};
pub(crate) use owned::{pid_start_time, remove_blocking, remove_container, spawn_detached};
pub mod pool;
pub mod pull;
pub(crate) mod sandbox;
pub(crate) mod snapshot;
pub mod tools;
pub(crate) mod transfer;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
use bollard::Docker;

use crate::{Backend, PullPolicy, PullSink, Result, Sandbox, SandboxError, SandboxSpec};
use image::ImageCache;
pub use image::TASK_REPO;
use pull::Puller;

/// The images a Dockerfile's `FROM` lines name (not stage names, `scratch` or `$ARG` forms).
pub fn dockerfile_bases(dockerfile: &str) -> Vec<String> {
    image::from_images(dockerfile)
}

/// Free bytes of the filesystem holding `path` (`None` when it cannot be read).
pub fn free_bytes(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a valid out-pointer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}
pub use lifecycle::NETNS_RUN_LABEL;
use lifecycle::{NetnsPool, Removals};
pub use pool::{HostSpec, PoolBackend};
pub use sandbox::DockerSandbox;

/// Working directory when the image sets none.
pub const DEFAULT_WORKDIR: &str = "/app";

/// Default time limit of one image build.
pub const DEFAULT_BUILD_TIMEOUT: Duration = Duration::from_secs(1800);

/// Process limit of every container.
pub const PIDS_LIMIT: i64 = 4096;

/// Label naming the run a container belongs to (present on every ahe container).
pub const LABEL_RUN: &str = "ahe.run";
/// Label naming the trial.
pub const LABEL_TRIAL: &str = "ahe.trial";
/// Label naming the task.
pub const LABEL_TASK: &str = "ahe.task";
/// Label holding the host pid of the ahe process that created the container.
pub const LABEL_PID: &str = "ahe.pid";
/// Label holding that process's start time (clock ticks since boot), against pid reuse.
pub const LABEL_PID_START: &str = "ahe.pidstart";
/// Label holding the hostname of the machine that created the container.
pub const LABEL_HOST: &str = "ahe.host";

/// The engine address when `DOCKER_HOST` is unset.
pub const DEFAULT_SOCKET: &str = "unix:///var/run/docker.sock";

/// How long [`DockerBackend::available`] waits for the engine.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// How long [`DockerBackend::connect`] waits for the engine (ping, version, info, reap).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// The `docker` backend (cheap to clone; clones share the image cache).
#[derive(Clone)]
pub struct DockerBackend {
    docker: Docker,
    address: String,
    host_cpus: Option<f64>,
    images: Arc<ImageCache>,
    puller: Arc<Puller>,
    build_timeout: Duration,
    reaped: usize,
    netns: Option<Arc<NetnsPool>>,
    removals: Arc<Removals>,
    /// The engine's storage driver.
    driver: StorageDriver,
    /// Whether containers get `storage_opt size=` (the driver can; cleared when the engine
    /// refuses it, e.g. overlay2 on xfs without `pquota`).
    native_size: Arc<std::sync::atomic::AtomicBool>,
    /// ahe's busybox on a read-only volume in every container (see `tools`), when its
    /// containers are checked from inside.
    tools: Option<Arc<tools::Tools>>,
}

/// A Docker engine's storage driver, as `docker info` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageDriver {
    /// `overlay2`, `btrfs`, `zfs`...
    pub name: String,
    /// The file system below it (`extfs`, `xfs`...), when the driver says.
    pub backing: Option<String>,
}

impl StorageDriver {
    /// Whether the engine can cap a container's writable layer itself (`--storage-opt
    /// size=`): overlay2 over xfs (which must be mounted with `pquota`: the engine refuses
    /// otherwise), btrfs, zfs, devicemapper, windowsfilter. Not overlay2 over ext4.
    pub fn native_size(&self) -> bool {
        match self.name.as_str() {
            "btrfs" | "zfs" | "devicemapper" | "windowsfilter" => true,
            "overlay2" => self.backing.as_deref() == Some("xfs"),
            _ => false,
        }
    }

    /// `overlay2 on extfs`.
    pub fn describe(&self) -> String {
        match &self.backing {
            Some(b) => format!("{} on {b}", self.name),
            None => self.name.clone(),
        }
    }
}

impl std::fmt::Debug for DockerBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerBackend")
            .field("address", &self.address)
            .field("host_cpus", &self.host_cpus)
            .field("builds", &self.builds())
            .field("pull", &self.puller.policy())
            .finish()
    }
}

/// Where the engine is expected: `DOCKER_HOST`, else the default unix socket.
pub fn engine_address() -> String {
    std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| DEFAULT_SOCKET.to_string())
}

/// The error for "no engine answers".
fn no_engine(address: &str, cause: impl std::fmt::Display) -> SandboxError {
    SandboxError::Backend(format!(
        "no Docker engine answers at {address} ({cause}); start one (scripts/start-dockerd.sh) \
         or use --sandbox local"
    ))
}

/// A Docker API error as a backend error with context.
pub(crate) fn api_err(what: &str, e: bollard::errors::Error) -> SandboxError {
    SandboxError::Backend(format!("{what}: {e}"))
}

/// The HTTP status of an engine error response, if it is one.
pub(crate) fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// Runs a future to completion on a fresh single-thread runtime in a helper thread.
///
/// Works inside and outside a tokio runtime. The Docker client keeps no pooled
/// connections, so a client used here stays usable on any other runtime.
fn block_on_thread<F>(f: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
            .block_on(f)
    })
    .join()
    .expect("docker helper thread panicked")
}

/// How long one engine request may take before bollard gives up (its default).
const REQUEST_TIMEOUT_SEC: u64 = 120;

/// Client certificates of an engine that serves TLS (`dockerd --tlsverify`, usually
/// `tcp://HOST:2376`): the CA that signed the engine's certificate, and this client's
/// certificate and key (PEM files).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The CA certificate (`ca.pem`).
    pub ca: std::path::PathBuf,
    /// This client's certificate (`cert.pem`).
    pub cert: std::path::PathBuf,
    /// This client's private key (`key.pem`).
    pub key: std::path::PathBuf,
}

/// A client for the engine at `address` (`unix://`, `tcp://`, `http://`; with `tls`, the
/// connection is TLS with those client certificates). Connects lazily: nothing is sent yet.
pub fn client_for(address: &str, tls: Option<&TlsFiles>) -> Result<Docker> {
    let Some(t) = tls else {
        return Docker::connect_with_host(address).map_err(|e| no_engine(address, e));
    };
    for (what, path) in [("ca", &t.ca), ("cert", &t.cert), ("key", &t.key)] {
        if !path.is_file() {
            return Err(SandboxError::Backend(format!(
                "TLS {what} file {} of the engine at {address} does not exist (tls = {{ca, cert, \
                 key}} name PEM files; `docker context inspect` or DOCKER_CERT_PATH shows where \
                 the docker CLI keeps them)",
                path.display()
            )));
        }
    }
    let tcp = address
        .strip_prefix("https://")
        .or_else(|| address.strip_prefix("tcp://"))
        .ok_or_else(|| {
            SandboxError::Backend(format!(
                "{address}: TLS needs a tcp:// (or https://) address, not a unix socket"
            ))
        })?;
    Docker::connect_with_ssl(
        &format!("tcp://{tcp}"),
        &t.key,
        &t.cert,
        &t.ca,
        REQUEST_TIMEOUT_SEC,
        bollard::API_DEFAULT_VERSION,
    )
    .map_err(|e| no_engine(address, e))
}

impl DockerBackend {
    /// Connects to the engine named by `DOCKER_HOST` (default: the unix socket), negotiates
    /// the API version and reaps the containers of dead ahe processes on this host.
    pub fn connect() -> Result<DockerBackend> {
        let address = engine_address();
        let docker = Docker::connect_with_defaults().map_err(|e| no_engine(&address, e))?;
        DockerBackend::connect_with(docker, address)
    }

    /// [`DockerBackend::connect`] to the engine at `address` (`unix:///…`, `tcp://…`), with
    /// client certificates when it serves TLS; `DOCKER_HOST` plays no part.
    pub fn connect_to(address: &str, tls: Option<&TlsFiles>) -> Result<DockerBackend> {
        DockerBackend::connect_with(client_for(address, tls)?, address.to_string())
    }

    /// Negotiates, reads the engine's CPUs and reaps, through an unused client.
    fn connect_with(docker: Docker, address: String) -> Result<DockerBackend> {
        let probe = docker.clone();
        let addr = address.clone();
        let (host_cpus, reaped, driver) = block_on_thread(async move {
            let work = async {
                // Versions are shared by clones: this negotiates for `docker` too.
                let probe = probe
                    .negotiate_version()
                    .await
                    .map_err(|e| no_engine(&addr, e))?;
                let info = probe.info().await.map_err(|e| no_engine(&addr, e))?;
                let reaped = match reap(&probe, true).await {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!("docker: reaping failed at {addr}: {e}");
                        0
                    }
                };
                if reaped > 0 {
                    tracing::info!(
                        "docker: reaped {reaped} containers of dead ahe processes at {addr}"
                    );
                }
                let backing = info.driver_status.as_ref().and_then(|s| {
                    s.iter()
                        .find(|kv| kv.first().is_some_and(|k| k == "Backing Filesystem"))
                        .and_then(|kv| kv.get(1).cloned())
                });
                let driver = StorageDriver {
                    name: info.driver.clone().unwrap_or_default(),
                    backing,
                };
                Ok((
                    info.ncpu.filter(|n| *n > 0).map(|n| n as f64),
                    reaped,
                    driver,
                ))
            };
            tokio::time::timeout(CONNECT_TIMEOUT, work)
                .await
                .unwrap_or_else(|_| Err(no_engine(&addr, "timed out")))
        })?;
        let shared_netns = std::env::var("AHE_DOCKER_SHARED_NETNS").map_or(true, |v| v != "0");
        Ok(DockerBackend {
            native_size: Arc::new(std::sync::atomic::AtomicBool::new(driver.native_size())),
            tools: None,
            driver,
            netns: shared_netns.then(|| NetnsPool::new(docker.clone())),
            removals: Removals::new(docker.clone()),
            docker,
            address,
            host_cpus,
            images: Arc::new(ImageCache::default()),
            puller: Arc::new(Puller::new(PullPolicy::default())),
            build_timeout: DEFAULT_BUILD_TIMEOUT,
            reaped,
        })
    }

    /// Gives every network-less container a fresh network namespace instead of a leased
    /// one (slower start; see `lifecycle.rs`).
    pub fn with_fresh_netns(mut self) -> DockerBackend {
        self.netns = None;
        self
    }

    /// Mounts ahe's busybox read-only in every container (`tools::MOUNT`): for an engine whose
    /// containers ahe checks from inside (a remote engine of the pool). Their sandboxes then
    /// never run commands through a keeper after the seal (the checks' hand-over would end
    /// it).
    pub fn with_tools(mut self) -> DockerBackend {
        self.tools.get_or_insert_with(Arc::default);
        self
    }

    /// How many network-namespace holder containers exist.
    pub fn netns_holders(&self) -> usize {
        self.netns.as_ref().map_or(0, |p| p.holders())
    }

    /// How many destroyed containers are still being removed.
    pub fn removals_in_flight(&self) -> usize {
        self.removals.in_flight()
    }

    /// How many containers of dead ahe processes [`DockerBackend::connect`] removed.
    pub fn reaped(&self) -> usize {
        self.reaped
    }

    /// Whether an engine answers a ping within ~2 s.
    pub fn available() -> bool {
        let Ok(docker) = Docker::connect_with_defaults() else {
            return false;
        };
        block_on_thread(async move {
            matches!(
                tokio::time::timeout(PING_TIMEOUT, docker.ping()).await,
                Ok(Ok(_))
            )
        })
    }

    /// Sets when images are pulled (a fresh pull record: earlier outcomes are forgotten).
    pub fn with_pull(mut self, policy: PullPolicy) -> DockerBackend {
        self.puller = Arc::new(Puller::new(policy));
        self
    }

    /// When this backend pulls images.
    pub fn pull_policy(&self) -> PullPolicy {
        self.puller.policy()
    }

    /// How many pulls this backend (and its clones) sent to the engine.
    pub fn pulls(&self) -> u64 {
        self.puller.pulls()
    }

    /// Sets the time limit of one image build.
    pub fn with_build_timeout(mut self, timeout: Duration) -> DockerBackend {
        self.build_timeout = timeout;
        self
    }

    /// The engine client (version already negotiated).
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The engine's storage driver.
    pub fn storage_driver(&self) -> &StorageDriver {
        &self.driver
    }

    /// Whether containers get a size limit from the engine too (`storage_opt size=`, 1.5×
    /// the task's storage limit, a backstop behind the watcher).
    pub fn native_size(&self) -> bool {
        self.native_size.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Where the engine was reached (`DOCKER_HOST` or the default socket).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// How many image builds this backend (and its clones) performed.
    pub fn builds(&self) -> u64 {
        self.images.builds()
    }

    /// The image (id) and workdir a spec would run in, building it when needed.
    pub async fn image_for(&self, spec: &SandboxSpec) -> Result<(String, String)> {
        let img = self
            .images
            .resolve(&self.docker, spec, self.build_timeout, &self.puller)
            .await?;
        Ok((img.info.id.clone(), img.info.workdir.clone()))
    }

    /// Creates a sandbox and returns it with its concrete type.
    pub async fn create_docker(&self, spec: &SandboxSpec) -> Result<DockerSandbox> {
        let img = self
            .images
            .resolve(&self.docker, spec, self.build_timeout, &self.puller)
            .await?;
        let shared = sandbox::Shared {
            docker: &self.docker,
            host_cpus: self.host_cpus,
            netns: self.netns.as_ref(),
            removals: &self.removals,
            native_size: &self.native_size,
            tools: match &self.tools {
                Some(t) => t.volume(&self.docker, &img.info.id).await,
                None => None,
            },
            inside: self.tools.is_some(),
        };
        let mut sb = sandbox::create(&shared, spec, &img.info).await?;
        sb.notes = img.notes;
        Ok(sb)
    }
}

#[async_trait::async_trait]
impl Backend for DockerBackend {
    fn name(&self) -> &'static str {
        "docker"
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Box<dyn Sandbox>> {
        Ok(Box::new(self.create_docker(spec).await?))
    }

    async fn drain(&self) {
        self.removals.drain().await;
    }

    /// The engine's data root (`DockerRootDir`), when the engine is reached through a unix
    /// socket (so runs on this host).
    async fn disk_paths(&self) -> Vec<std::path::PathBuf> {
        if !self.address.starts_with("unix://") {
            return Vec::new();
        }
        self.docker
            .info()
            .await
            .ok()
            .and_then(|i| i.docker_root_dir)
            .map(std::path::PathBuf::from)
            .filter(|p| p.is_dir())
            .into_iter()
            .collect()
    }

    fn set_pull_sink(&self, sink: Option<PullSink>) {
        self.puller.set_sink(sink);
    }
}

#[cfg(test)]
mod storage_driver_tests {
    use super::StorageDriver;

    fn d(name: &str, backing: Option<&str>) -> StorageDriver {
        StorageDriver {
            name: name.into(),
            backing: backing.map(String::from),
        }
    }

    #[test]
    fn only_drivers_with_quotas_cap_a_container_size() {
        assert!(!d("overlay2", Some("extfs")).native_size());
        assert!(d("overlay2", Some("xfs")).native_size());
        assert!(d("btrfs", Some("btrfs")).native_size());
        assert!(d("zfs", None).native_size());
        assert!(!d("vfs", Some("extfs")).native_size());
        assert_eq!(d("overlay2", Some("extfs")).describe(), "overlay2 on extfs");
    }
}
