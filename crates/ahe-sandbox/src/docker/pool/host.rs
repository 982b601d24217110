//! One host of a pool: its backend while it answers, its load, the generation its sandboxes
//! belong to (lost all at once when the host stops answering), and the monitor thread that
//! pings healthy hosts and probes down ones.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{connect_host, HostSpec, Inner, Settings, HEALTH_EVERY};
use crate::docker::{remove_own, DockerBackend};
use crate::{Backend, HostLoad, SandboxError};

/// How long a ping after a failed engine call may take before the host counts as lost.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the monitor's ping may take (longer: a busy engine is not a dead one).
const MONITOR_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the monitor looks at the hosts.
const TICK: Duration = Duration::from_millis(500);

/// The sandboxes of one host between two losses: lost together, with one reason.
pub(crate) struct Generation {
    tx: watch::Sender<Option<String>>,
}

impl Generation {
    fn new() -> Arc<Generation> {
        Arc::new(Generation {
            tx: watch::channel(None).0,
        })
    }

    /// Why this generation was lost, if it was.
    pub(crate) fn reason(&self) -> Option<String> {
        self.tx.borrow().clone()
    }

    /// Resolves with the reason once the generation is lost.
    pub(crate) async fn wait(&self) -> String {
        let mut rx = self.tx.subscribe();
        let why = rx.wait_for(|r| r.is_some()).await.map(|r| r.clone());
        match why {
            Ok(r) => r.unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// Marks it lost (the first reason stays).
    fn lose(&self, why: String) {
        self.tx.send_if_modified(|r| {
            let first = r.is_none();
            if first {
                *r = Some(why);
            }
            first
        });
    }
}

/// A slot on a host, given back when dropped.
pub(crate) struct Slot {
    host: Arc<Host>,
    pool: Arc<Inner>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.host.release();
        self.pool.changed.notify_waiters();
    }
}

/// A placed trial: the host, its backend and generation at that moment, and the slot.
pub(crate) struct Lease {
    /// The host.
    pub host: Arc<Host>,
    /// Its backend.
    pub backend: DockerBackend,
    /// The generation the sandbox joins.
    pub gen: Arc<Generation>,
    /// The capacity slot.
    pub slot: Slot,
}

/// What changes about a host.
struct State {
    backend: Option<DockerBackend>,
    gen: Arc<Generation>,
    in_flight: usize,
    peak: usize,
    error: Option<String>,
    next_probe: Instant,
    probing: bool,
    last_ping: Instant,
    /// How long it rests after a loss before the next probe.
    reprobe: Duration,
    /// Builds and pulls of backends replaced after a loss.
    old_builds: u64,
    old_pulls: u64,
}

/// One engine of the pool.
pub(crate) struct Host {
    spec: HostSpec,
    st: Mutex<State>,
    trials: AtomicU64,
    lost: AtomicU64,
}

impl Host {
    /// A host, up with `backend` or down with its error (probed again after `reprobe`).
    pub(crate) fn new(
        spec: HostSpec,
        backend: crate::Result<DockerBackend>,
        reprobe: Duration,
    ) -> Host {
        let (backend, error) = match backend {
            Ok(b) => (Some(b), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Host {
            spec,
            st: Mutex::new(State {
                backend,
                gen: Generation::new(),
                in_flight: 0,
                peak: 0,
                error,
                next_probe: Instant::now() + reprobe,
                probing: false,
                last_ping: Instant::now(),
                reprobe,
                old_builds: 0,
                old_pulls: 0,
            }),
            trials: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its name.
    pub(crate) fn name(&self) -> &str {
        self.spec.label()
    }

    /// Whether its layers must not be read from this host ([`HostSpec::remote`]).
    pub(crate) fn remote(&self) -> bool {
        self.spec.remote
    }

    /// Its backend while it is up.
    pub(crate) fn backend(&self) -> Option<DockerBackend> {
        self.lock().backend.clone()
    }

    /// Whether it is up.
    pub(crate) fn is_up(&self) -> bool {
        self.lock().backend.is_some()
    }

    /// Why it is down.
    pub(crate) fn error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    /// `(in_flight, capacity)` when it is up and has a free slot.
    pub(crate) fn free(&self) -> Option<(usize, usize)> {
        let st = self.lock();
        (st.backend.is_some() && st.in_flight < self.spec.capacity)
            .then_some((st.in_flight, self.spec.capacity))
    }

    /// Takes a slot (when it is still up and free).
    pub(crate) fn take_slot(self: &Arc<Self>, pool: &Arc<Inner>) -> Option<Lease> {
        let mut st = self.lock();
        let backend = st.backend.clone()?;
        if st.in_flight >= self.spec.capacity {
            return None;
        }
        st.in_flight += 1;
        st.peak = st.peak.max(st.in_flight);
        Some(Lease {
            host: self.clone(),
            backend,
            gen: st.gen.clone(),
            slot: Slot {
                host: self.clone(),
                pool: pool.clone(),
            },
        })
    }

    fn release(&self) {
        let mut st = self.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
    }

    /// Counts a sandbox created on it.
    pub(crate) fn count_trial(&self) {
        self.trials.fetch_add(1, Ordering::Relaxed);
    }

    /// Re-applies the pool's settings to its backend (pull policy, build timeout...).
    pub(crate) fn reconfigure(&self, settings: &Settings) {
        let mut st = self.lock();
        st.reprobe = settings.reprobe;
        if let Some(b) = st.backend.take() {
            st.backend = Some(settings.apply(b, self.spec.label(), self.remote()));
        }
    }

    /// Sends its backend's pulls to the pool's sink (tagged with its name).
    pub(crate) fn set_sink(&self, settings: &Settings) {
        if let Some(b) = self.lock().backend.as_ref() {
            b.set_pull_sink(settings.tagged_sink(self.spec.label()));
        }
    }

    /// Its load and counts.
    pub(crate) fn load(&self) -> HostLoad {
        let st = self.lock();
        let (builds, pulls) = st
            .backend
            .as_ref()
            .map_or((0, 0), |b| (b.builds(), b.pulls()));
        HostLoad {
            name: self.spec.label().to_string(),
            url: self.spec.url.clone(),
            capacity: self.spec.capacity,
            in_flight: st.in_flight,
            peak: st.peak,
            trials: self.trials.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            up: st.backend.is_some(),
            error: st.error.clone(),
            builds: st.old_builds + builds,
            pulls: st.old_pulls + pulls,
        }
    }

    /// After engine call `err` failed on `backend`: whether the host is lost (its
    /// generation already was, or it does not answer a ping now; then it is marked down).
    pub(crate) async fn lost_after(
        &self,
        gen: &Arc<Generation>,
        docker: &bollard::Docker,
        err: &SandboxError,
    ) -> bool {
        if gen.reason().is_some() {
            return true;
        }
        let why = match tokio::time::timeout(CHECK_TIMEOUT, docker.ping()).await {
            Ok(Ok(_)) => return false,
            Ok(Err(e)) => format!("stopped answering ({e}) after: {err}"),
            Err(_) => format!(
                "did not answer a ping within {}s after: {err}",
                CHECK_TIMEOUT.as_secs()
            ),
        };
        self.mark_down(gen, why);
        true
    }

    /// Marks the host down (once per generation): its sandboxes are lost, new trials go
    /// elsewhere, and it is probed again after the pool's `reprobe`.
    fn mark_down(&self, gen: &Arc<Generation>, why: String) {
        let (old, reprobe) = {
            let mut st = self.lock();
            if !Arc::ptr_eq(&st.gen, gen) || st.backend.is_none() {
                return;
            }
            let reprobe = st.reprobe;
            self.lost.fetch_add(st.in_flight as u64, Ordering::Relaxed);
            st.error = Some(why.clone());
            st.next_probe = Instant::now() + reprobe;
            let old = st.backend.take();
            if let Some(b) = &old {
                st.old_builds += b.builds();
                st.old_pulls += b.pulls();
            }
            (old, reprobe)
        };
        tracing::warn!(
            "docker host {} ({}) {why}: its trials are re-run on the other hosts; probed again \
             in {}s",
            self.spec.label(),
            self.spec.url,
            reprobe.as_secs()
        );
        gen.lose(format!(
            "docker host {} ({}) {why}",
            self.spec.label(),
            self.spec.url
        ));
        // Its network holders and removals give up on their own; never block a caller on them.
        if let Some(b) = old {
            std::thread::spawn(move || drop(b));
        }
    }

    /// Drops its backend (the pool is gone): its network holders are removed now, by the
    /// caller, not later by whichever thread lets go of the host last.
    pub(crate) fn shutdown(&self) {
        let old = self.lock().backend.take();
        drop(old);
    }

    /// Connects again when it is down and not being probed; on success the containers
    /// this process had left on it are removed first. Returns whether it came back.
    pub(crate) async fn probe(&self, settings: &Settings) -> bool {
        {
            let mut st = self.lock();
            if st.backend.is_some() || st.probing {
                return false;
            }
            st.probing = true;
        }
        let spec = self.spec.clone();
        let connected = tokio::task::spawn_blocking(move || connect_host(&spec))
            .await
            .unwrap_or_else(|e| Err(SandboxError::Backend(format!("probe panicked: {e}"))));
        let cleaned = match connected {
            Ok(b) => remove_own(b.docker()).await.map(|n| (b, n)),
            Err(e) => Err(e),
        };
        let mut st = self.lock();
        st.probing = false;
        match cleaned {
            Ok((b, removed)) => {
                tracing::warn!(
                    "docker host {} answers again ({removed} containers of this process left \
                     from before removed); trials go to it again",
                    self.spec.label()
                );
                st.backend = Some(settings.apply(b, self.spec.label(), self.remote()));
                st.gen = Generation::new();
                st.error = None;
                st.last_ping = Instant::now();
                true
            }
            Err(e) => {
                st.error = Some(e.to_string());
                st.next_probe = Instant::now() + settings.reprobe;
                false
            }
        }
    }

    /// One monitor turn: a ping when up and due (a failure marks it down), a probe when
    /// down and due. Returns whether it came back.
    async fn check(&self, settings: &Settings) -> bool {
        let (backend, gen, due) = {
            let mut st = self.lock();
            let due = match st.backend {
                Some(_) => st.last_ping.elapsed() >= HEALTH_EVERY,
                None => !st.probing && Instant::now() >= st.next_probe,
            };
            if due && st.backend.is_some() {
                st.last_ping = Instant::now();
            }
            // Only the client: the backend (its network holders) stays with the pool.
            (
                st.backend.as_ref().map(|b| b.docker().clone()),
                st.gen.clone(),
                due,
            )
        };
        if !due {
            return false;
        }
        let Some(docker) = backend else {
            return self.probe(settings).await;
        };
        let why = match tokio::time::timeout(MONITOR_TIMEOUT, docker.ping()).await {
            Ok(Ok(_)) => return false,
            Ok(Err(e)) => format!("stopped answering ({e})"),
            Err(_) => format!(
                "did not answer a ping within {}s",
                MONITOR_TIMEOUT.as_secs()
            ),
        };
        self.mark_down(&gen, why);
        false
    }
}

/// Starts the thread that watches the pool's hosts until the pool is dropped.
pub(crate) fn spawn_monitor(pool: Weak<Inner>) {
    let spawned = std::thread::Builder::new()
        .name("ahe-docker-hosts".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                tracing::warn!("docker hosts: no runtime for the monitor; hosts are not watched");
                return;
            };
            rt.block_on(async move {
                loop {
                    tokio::time::sleep(TICK).await;
                    // Never held across an await: the pool is dropped where its owner drops it.
                    let Some((hosts, settings)) =
                        pool.upgrade().map(|p| (p.hosts.clone(), p.settings()))
                    else {
                        return;
                    };
                    let turns = hosts.iter().map(|h| h.check(&settings));
                    let back = futures_util::future::join_all(turns).await;
                    if back.into_iter().any(|b| b) {
                        if let Some(p) = pool.upgrade() {
                            p.changed.notify_waiters();
                        }
                    }
                }
            });
        });
    if let Err(e) = spawned {
        tracing::warn!("docker hosts: cannot start the monitor ({e}); hosts are not watched");
    }
}
