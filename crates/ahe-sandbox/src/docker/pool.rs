//! The docker backend over several engines (`[sandbox] hosts`): [`PoolBackend`].
//!
//! Each host is a [`DockerBackend`] of its own (its image cache, pulls, builds, network
//! holders, removals and reaping are per engine) with a capacity. A trial goes to the
//! healthy host whose load after placing it, in-flight ÷ capacity, is the least (ties: the
//! first listed); when every healthy host is full, `create` waits for a slot.
//!
//! A host that stops answering — an engine call fails and a ping then fails too, or the
//! pool's monitor (a ping of every healthy host every [`HEALTH_EVERY`]) gets no answer — is
//! marked down: every sandbox on it is *lost* ([`Sandbox::lost`], [`Sandbox::wait_lost`];
//! its calls fail at once), so its trial ends as an infra error and is re-run on another
//! host; a sandbox being set up there is set up on another host instead. A down host is
//! probed again every [`DEFAULT_REPROBE`]; once it answers it gets a fresh backend, and the
//! containers this process had left on it are removed.

mod host;
mod sandbox;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::{DockerBackend, TlsFiles};
use crate::{Backend, HostLoad, PullPolicy, PullSink, Result, Sandbox, SandboxError, SandboxSpec};
use host::{Host, Lease};

/// How often the monitor pings each healthy host.
pub const HEALTH_EVERY: Duration = Duration::from_secs(2);

/// How long a host that stopped answering rests before it is probed again.
pub const DEFAULT_REPROBE: Duration = Duration::from_secs(30);

/// How long `create` waits for a host to come back when every host is down.
const ALL_DOWN_WAIT: Duration = Duration::from_secs(60);

/// One engine of `[sandbox] hosts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// The engine's address: `unix:///PATH.sock`, `tcp://HOST:PORT` (`http://`, `https://`).
    pub url: String,
    /// Trials this engine runs at once.
    pub capacity: usize,
    /// Its name in logs, the live display and `scores.json` (default: the url).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Client certificates, for an engine that serves TLS (`dockerd --tlsverify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFiles>,
    /// Treat the engine as remote even when its data root is on this host: its containers'
    /// layers are never read from here, so the change checks run inside each sandbox (with
    /// ahe's static busybox), as on an engine of another machine.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remote: bool,
}

impl HostSpec {
    /// The name it is shown under (`name`, else the url).
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.url)
    }
}

/// Checks a `hosts` list; the error names the entry and field (`hosts[1].capacity: …`).
pub fn validate_hosts(hosts: &[HostSpec]) -> std::result::Result<(), String> {
    for (i, h) in hosts.iter().enumerate() {
        let at = format!("hosts[{i}]");
        let schemes = ["unix://", "tcp://", "http://", "https://"];
        if !schemes.iter().any(|s| h.url.starts_with(s)) || schemes.contains(&h.url.as_str()) {
            return Err(format!(
                "{at}.url: {:?} is not an engine address; use unix:///PATH.sock or \
                 tcp://HOST:PORT (http:// and https:// work too)",
                h.url
            ));
        }
        if h.capacity == 0 {
            return Err(format!(
                "{at}.capacity: must be at least 1 (how many trials this engine runs at once)"
            ));
        }
        if h.tls.is_some() && h.url.starts_with("unix://") {
            return Err(format!(
                "{at}.tls: {} is a unix socket, which has no TLS; drop tls or use the engine's \
                 tcp://HOST:2376 address",
                h.url
            ));
        }
        if h.tls.is_none() && h.url.starts_with("https://") {
            return Err(format!(
                "{at}.tls: {} needs client certificates: tls = {{ca = \"…/ca.pem\", cert = \
                 \"…/cert.pem\", key = \"…/key.pem\"}}",
                h.url
            ));
        }
        if h.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(format!("{at}.name: empty; name the host or leave name out"));
        }
        for (j, other) in hosts[..i].iter().enumerate() {
            if other.url == h.url {
                return Err(format!(
                    "{at}.url: {} is also hosts[{j}]'s url; list each engine once (its \
                     capacity says how many trials it runs)",
                    h.url
                ));
            }
            if other.label() == h.label() {
                return Err(format!(
                    "{at}.name: {:?} is also hosts[{j}]'s name; names must differ",
                    h.label()
                ));
            }
        }
    }
    Ok(())
}

/// Connects to one host (for `ahe check`, `ahe sandbox reap` and the pool itself).
pub fn connect_host(spec: &HostSpec) -> Result<DockerBackend> {
    DockerBackend::connect_to(&spec.url, spec.tls.as_ref())
}

/// What every host's backend is set up with.
#[derive(Clone)]
pub(crate) struct Settings {
    pull: PullPolicy,
    build_timeout: Duration,
    fresh_netns: bool,
    reprobe: Duration,
    sink: Option<PullSink>,
}

impl Settings {
    /// `b` set up as the pool says (its pulls sent to the sink, tagged with `host`); a
    /// `remote` host's containers get ahe's read-only busybox volume (see `tools`).
    pub(crate) fn apply(&self, b: DockerBackend, host: &str, remote: bool) -> DockerBackend {
        let mut b = b
            .with_pull(self.pull)
            .with_build_timeout(self.build_timeout);
        if remote {
            b = b.with_tools();
        }
        if self.fresh_netns {
            b = b.with_fresh_netns();
        }
        b.set_pull_sink(self.tagged_sink(host));
        b
    }

    fn tagged_sink(&self, host: &str) -> Option<PullSink> {
        let sink = self.sink.clone()?;
        let host = host.to_string();
        Some(Arc::new(move |mut e| {
            e.host = Some(host.clone());
            sink(e)
        }))
    }
}

/// State shared by the pool, its sandboxes and its monitor thread.
pub(crate) struct Inner {
    hosts: Vec<Arc<Host>>,
    settings: Mutex<Settings>,
    /// Held while a host is picked and its slot taken.
    placing: Mutex<()>,
    /// A slot was freed or a host came back.
    changed: Notify,
}

/// The docker backend over several engines (cheap to clone; clones share everything).
#[derive(Clone)]
pub struct PoolBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PoolBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBackend")
            .field("hosts", &self.hosts())
            .finish()
    }
}

impl PoolBackend {
    /// Connects to every host at once. Hosts that do not answer start down (probed again
    /// later, with a warning); it fails only when none answers, naming each host's error.
    pub fn connect(specs: &[HostSpec]) -> Result<PoolBackend> {
        validate_hosts(specs).map_err(|e| SandboxError::Backend(format!("[sandbox] {e}")))?;
        if specs.is_empty() {
            return Err(SandboxError::Backend(
                "[sandbox] hosts: empty; list at least one engine".into(),
            ));
        }
        let settings = Settings {
            pull: PullPolicy::default(),
            build_timeout: super::DEFAULT_BUILD_TIMEOUT,
            fresh_netns: false,
            reprobe: DEFAULT_REPROBE,
            sink: None,
        };
        let connected: Vec<Result<DockerBackend>> = std::thread::scope(|s| {
            let handles: Vec<_> = specs.iter().map(|h| s.spawn(|| connect_host(h))).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(SandboxError::Backend("connecting panicked".into()))
                    })
                })
                .collect()
        });
        if connected.iter().all(|c| c.is_err()) {
            let why: Vec<String> = specs
                .iter()
                .zip(&connected)
                .filter_map(|(h, c)| c.as_ref().err().map(|e| format!("{}: {e}", h.label())))
                .collect();
            return Err(SandboxError::Backend(format!(
                "no engine of [sandbox] hosts answers: {}",
                why.join("; ")
            )));
        }
        let hosts = specs
            .iter()
            .zip(connected)
            .map(|(spec, c)| {
                if let Err(e) = &c {
                    tracing::warn!(
                        "docker host {}: {e}; trials go to the other hosts, and it is probed \
                         again in {}s",
                        spec.label(),
                        settings.reprobe.as_secs()
                    );
                }
                Arc::new(Host::new(
                    spec.clone(),
                    c.map(|b| settings.apply(b, spec.label(), spec.remote)),
                    settings.reprobe,
                ))
            })
            .collect();
        let inner = Arc::new(Inner {
            hosts,
            settings: Mutex::new(settings),
            placing: Mutex::new(()),
            changed: Notify::new(),
        });
        host::spawn_monitor(Arc::downgrade(&inner));
        Ok(PoolBackend { inner })
    }

    /// Changes the settings and re-applies them to every connected host.
    fn update(self, f: impl FnOnce(&mut Settings)) -> PoolBackend {
        let settings = {
            let mut s = self
                .inner
                .settings
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            f(&mut s);
            s.clone()
        };
        for h in &self.inner.hosts {
            h.reconfigure(&settings);
        }
        self
    }

    /// Sets when images are pulled, on every host.
    pub fn with_pull(self, policy: PullPolicy) -> PoolBackend {
        self.update(|s| s.pull = policy)
    }

    /// Sets the time limit of one image build, on every host.
    pub fn with_build_timeout(self, timeout: Duration) -> PoolBackend {
        self.update(|s| s.build_timeout = timeout)
    }

    /// Gives every network-less container a fresh network namespace (see `lifecycle.rs`).
    pub fn with_fresh_netns(self) -> PoolBackend {
        self.update(|s| s.fresh_netns = true)
    }

    /// Sets how long a host that stopped answering rests before it is probed again.
    pub fn with_reprobe(self, after: Duration) -> PoolBackend {
        self.update(|s| s.reprobe = after)
    }

    /// The backend of the host named `name` while it is up (tests, diagnostics).
    pub fn host_backend(&self, name: &str) -> Option<DockerBackend> {
        self.inner
            .hosts
            .iter()
            .find(|h| h.name() == name)
            .and_then(|h| h.backend())
    }

    /// Probes every down host now instead of at its next turn (waits for the answers).
    pub async fn probe_now(&self) {
        let settings = self.inner.settings();
        for h in &self.inner.hosts {
            h.probe(&settings).await;
        }
        self.inner.changed.notify_waiters();
    }
}

impl Inner {
    fn settings(&self) -> Settings {
        self.settings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The host a new trial goes to, with its slot taken; `None` when every healthy host is
    /// full (or none is healthy).
    fn try_place(self: &Arc<Self>) -> Option<Lease> {
        let _placing = self.placing.lock().unwrap_or_else(|p| p.into_inner());
        // Least load after placing: (in_flight + 1) / capacity, compared without division.
        let mut best: Option<(usize, usize, usize)> = None;
        for (i, h) in self.hosts.iter().enumerate() {
            let Some((in_flight, cap)) = h.free() else {
                continue;
            };
            let better = best.is_none_or(|(_, bi, bc)| (in_flight + 1) * bc < (bi + 1) * cap);
            if better {
                best = Some((i, in_flight, cap));
            }
        }
        let (i, _, _) = best?;
        self.hosts[i].take_slot(self)
    }

    /// Waits for a slot on a healthy host; fails when every host stays down for
    /// [`ALL_DOWN_WAIT`].
    async fn place(self: &Arc<Self>) -> Result<Lease> {
        let mut all_down_since: Option<Instant> = None;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(lease) = self.try_place() {
                return Ok(lease);
            }
            if self.hosts.iter().all(|h| !h.is_up()) {
                let since = *all_down_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= ALL_DOWN_WAIT {
                    let why: Vec<String> = self
                        .hosts
                        .iter()
                        .map(|h| format!("{}: {}", h.name(), h.error().unwrap_or_default()))
                        .collect();
                    return Err(SandboxError::Backend(format!(
                        "every docker host of [sandbox] hosts is down ({}); start them, or \
                         check their addresses with `ahe check`",
                        why.join("; ")
                    )));
                }
            } else {
                all_down_since = None;
            }
            // Slots and recoveries notify; the timeout is a safety net.
            let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for h in &self.hosts {
            h.shutdown();
        }
    }
}

/// How many hosts one sandbox may be tried on before `create` gives up.
fn max_placements(hosts: usize) -> usize {
    2 * hosts + 1
}

#[async_trait::async_trait]
impl Backend for PoolBackend {
    fn name(&self) -> &'static str {
        "docker"
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Box<dyn Sandbox>> {
        let mut notes = Vec::new();
        let mut last = None;
        for _ in 0..max_placements(self.inner.hosts.len()) {
            let lease = self.inner.place().await?;
            let created = tokio::select! {
                biased;
                why = lease.gen.wait() => Err(SandboxError::Backend(why)),
                r = lease.backend.create_docker(spec) => r,
            };
            match created {
                Ok(sb) => {
                    lease.host.count_trial();
                    return Ok(Box::new(sandbox::PoolSandbox::new(sb, lease, notes)));
                }
                Err(e) => {
                    if !lease
                        .host
                        .lost_after(&lease.gen, lease.backend.docker(), &e)
                        .await
                    {
                        return Err(e);
                    }
                    let note = format!(
                        "docker host {} stopped answering while this trial's sandbox was set up \
                         there ({e}); it was set up on another host",
                        lease.host.name()
                    );
                    tracing::warn!("{}: {note}", spec.trial_id);
                    notes.push(note);
                    last = Some(e);
                }
            }
        }
        Err(SandboxError::Backend(format!(
            "no docker host could set up the sandbox: {}",
            last.map(|e| e.to_string()).unwrap_or_default()
        )))
    }

    async fn drain(&self) {
        for h in &self.inner.hosts {
            if let Some(b) = h.backend() {
                b.drain().await;
            }
        }
    }

    fn set_pull_sink(&self, sink: Option<PullSink>) {
        let settings = {
            let mut s = self
                .inner
                .settings
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            s.sink = sink;
            s.clone()
        };
        for h in &self.inner.hosts {
            h.set_sink(&settings);
        }
    }

    fn hosts(&self) -> Vec<HostLoad> {
        self.inner.hosts.iter().map(|h| h.load()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str, cap: usize) -> HostSpec {
        HostSpec {
            url: url.into(),
            capacity: cap,
            name: None,
            tls: None,
            remote: false,
        }
    }

    #[test]
    fn hosts_are_validated_with_the_field_named() {
        let ok = [
            spec("unix:///run/a.sock", 2),
            spec("tcp://10.0.0.2:2375", 1),
        ];
        assert_eq!(validate_hosts(&ok), Ok(()));
        let bad = |hosts: &[HostSpec], want: &str| {
            let e = validate_hosts(hosts).unwrap_err();
            assert!(e.contains(want), "{e}");
        };
        bad(&[spec("/run/a.sock", 1)], "hosts[0].url");
        bad(&[spec("unix://", 1)], "hosts[0].url");
        bad(&[ok[0].clone(), spec("tcp://x:1", 0)], "hosts[1].capacity");
        bad(&[ok[0].clone(), ok[0].clone()], "hosts[1].url");
        let mut named = ok.clone();
        named[0].name = Some("a".into());
        named[1].name = Some("a".into());
        bad(&named, "hosts[1].name");
        let tls = TlsFiles {
            ca: "ca.pem".into(),
            cert: "cert.pem".into(),
            key: "key.pem".into(),
        };
        let mut unix_tls = spec("unix:///run/a.sock", 1);
        unix_tls.tls = Some(tls);
        bad(&[unix_tls], "hosts[0].tls");
        bad(&[spec("https://h:2376", 1)], "hosts[0].tls");
    }
}
