//! What outlives a trial's critical path: network-namespace holders and removals.
//!
//! Two costs dominate a container's life on engines like the one measured here: creating a
//! fresh network namespace (≈200 ms of a ≈430 ms start with `network_mode: none`) and
//! removing the container (≈100–250 ms). Both are moved off the trial's path:
//!
//! - [`NetnsPool`]: containers of tasks without network join the loopback-only namespace of
//!   a *holder* container (`network_mode: container:<holder>`). A holder is leased to one
//!   trial at a time and returns to the pool only once that trial's container is removed,
//!   so two live trials never share a namespace (no port clashes, no loopback traffic
//!   between trials). Holders are labelled like trial containers (reaped with them) and
//!   removed when the backend is dropped. `AHE_DOCKER_SHARED_NETNS=0` turns the pool off.
//! - [`Removals`]: `destroy` hands the container to a background removal;
//!   [`Removals::drain`] waits for all of them (the backend's `drain`, called at the end of
//!   every evaluation). A removal cut short (runtime shutdown) is finished synchronously by
//!   its guard, so no container outlives the process that owns it, except on `kill -9`
//!   (then the next run's reap removes it).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use bollard::Docker;
use tokio::sync::Notify;

use super::{
    api_err, hostname, pid_start_time, remove_blocking, remove_container, spawn_detached,
    LABEL_HOST, LABEL_PID, LABEL_PID_START, LABEL_RUN, LABEL_TASK,
};
use crate::Result;

/// The `ahe.run` label value of holder containers.
pub const NETNS_RUN_LABEL: &str = "ahe-netns";

/// A pool of network-namespace holder containers (loopback only, no network).
pub(crate) struct NetnsPool {
    docker: Docker,
    idle: Mutex<Vec<String>>,
    all: Mutex<Vec<String>>,
}

/// One holder leased to one trial; back to the pool when dropped.
pub(crate) struct NetnsLease {
    pool: Arc<NetnsPool>,
    id: String,
    discarded: bool,
}

impl NetnsPool {
    /// An empty pool creating holders through `docker`.
    pub(crate) fn new(docker: Docker) -> Arc<NetnsPool> {
        Arc::new(NetnsPool {
            docker,
            idle: Mutex::new(Vec::new()),
            all: Mutex::new(Vec::new()),
        })
    }

    /// How many holders exist (idle or leased).
    pub(crate) fn holders(&self) -> usize {
        self.all.lock().unwrap().len()
    }

    /// Leases an idle holder, or starts a new one from `image` (any image with `sh`).
    pub(crate) async fn lease(self: &Arc<Self>, image: &str) -> Result<NetnsLease> {
        let idle = self.idle.lock().unwrap().pop();
        let id = match idle {
            Some(id) => id,
            None => self.start_holder(image).await?,
        };
        Ok(NetnsLease {
            pool: self.clone(),
            id,
            discarded: false,
        })
    }

    /// Creates and starts a holder: `sh -c 'read _'` on a stdin nobody writes to.
    async fn start_holder(&self, image: &str) -> Result<String> {
        let pid = std::process::id();
        let mut labels = HashMap::from([
            (LABEL_RUN.to_string(), NETNS_RUN_LABEL.to_string()),
            (LABEL_TASK.to_string(), "netns-holder".to_string()),
            (LABEL_PID.to_string(), pid.to_string()),
            (LABEL_HOST.to_string(), hostname()),
        ]);
        if let Some(start) = pid_start_time(pid) {
            labels.insert(LABEL_PID_START.to_string(), start.to_string());
        }
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: Some(vec![]),
            cmd: Some(vec!["sh".into(), "-c".into(), "read _".into()]),
            labels: Some(labels),
            open_stdin: Some(true),
            stdin_once: Some(false),
            host_config: Some(HostConfig {
                network_mode: Some("none".into()),
                memory: Some(16 << 20),
                memory_swap: Some(16 << 20),
                pids_limit: Some(8),
                log_config: Some(HostConfigLogConfig {
                    typ: Some("none".into()),
                    config: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let n = self.holders();
        let name = format!("ahe-netns-{pid:x}-{n:x}-{:x}", rand_suffix());
        let opts = CreateContainerOptionsBuilder::default().name(&name).build();
        let created = self
            .docker
            .create_container(Some(opts), body)
            .await
            .map_err(|e| api_err("creating a network-namespace holder", e))?;
        if let Err(e) = self.docker.start_container(&created.id, None).await {
            let _ = remove_container(&self.docker, &created.id).await;
            return Err(api_err("starting a network-namespace holder", e));
        }
        self.all.lock().unwrap().push(created.id.clone());
        Ok(created.id)
    }
}

/// A few random bits for holder names (two processes may share a pid namespace view).
fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() & 0xffff)
        .unwrap_or(0)
}

impl Drop for NetnsPool {
    /// Removes every holder (blocking, on a helper thread).
    fn drop(&mut self) {
        let ids = std::mem::take(&mut *self.all.lock().unwrap());
        remove_blocking(&self.docker, ids, "network-namespace holder");
    }
}

impl NetnsLease {
    /// The `network_mode` joining this holder's namespace.
    pub(crate) fn network_mode(&self) -> String {
        format!("container:{}", self.id)
    }

    /// The holder's container id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Removes the holder instead of returning it (after it failed a trial's start).
    pub(crate) async fn discard(mut self) {
        self.discarded = true;
        self.pool.all.lock().unwrap().retain(|h| h != &self.id);
        if let Err(e) = remove_container(&self.pool.docker, &self.id).await {
            tracing::warn!("docker: removing a failed network-namespace holder: {e}");
        }
    }
}

impl Drop for NetnsLease {
    fn drop(&mut self) {
        if !self.discarded {
            self.pool.idle.lock().unwrap().push(self.id.clone());
        }
    }
}

/// Container removals running in the background.
pub(crate) struct Removals {
    docker: Docker,
    pending: Mutex<HashSet<String>>,
    done: Notify,
}

/// Finishes one removal synchronously if its task is dropped before it completes.
struct RemovalGuard {
    removals: Arc<Removals>,
    id: String,
    finished: bool,
    _lease: Option<NetnsLease>,
}

impl Removals {
    /// No removals yet.
    pub(crate) fn new(docker: Docker) -> Arc<Removals> {
        Arc::new(Removals {
            docker,
            pending: Mutex::new(HashSet::new()),
            done: Notify::new(),
        })
    }

    /// Removes container `id` in the background; `lease` goes back to its pool afterwards.
    pub(crate) fn spawn(self: &Arc<Self>, id: String, lease: Option<NetnsLease>) {
        self.pending.lock().unwrap().insert(id.clone());
        let mut guard = RemovalGuard {
            removals: self.clone(),
            id,
            finished: false,
            _lease: lease,
        };
        spawn_detached(async move {
            if let Err(e) = remove_container(&guard.removals.docker, &guard.id).await {
                tracing::warn!("docker: {e}");
            }
            guard.finish();
        });
    }

    /// How many removals are still running.
    pub(crate) fn in_flight(&self) -> usize {
        self.pending.lock().unwrap().len()
    }

    /// Waits until every removal started so far has finished.
    pub(crate) async fn drain(&self) {
        loop {
            // Created before the check, so a wake-up in between is not lost.
            let notified = self.done.notified();
            if self.pending.lock().unwrap().is_empty() {
                return;
            }
            notified.await;
        }
    }
}

impl RemovalGuard {
    /// Marks the removal done (the guard then only updates the bookkeeping).
    fn finish(&mut self) {
        self.finished = true;
    }
}

impl Drop for RemovalGuard {
    fn drop(&mut self) {
        if !self.finished {
            remove_blocking(&self.removals.docker, vec![self.id.clone()], "container");
        }
        self.removals.pending.lock().unwrap().remove(&self.id);
        self.removals.done.notify_waiters();
    }
}
