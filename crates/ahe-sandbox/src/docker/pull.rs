//! Pulling images through the Engine API (`create_image`), once per image per backend
//! however many trials ask at the same time, under a [`PullPolicy`]; progress goes to the
//! backend's [`PullSink`]. Also the registry probe of `ahe check` (`/distribution`: the engine
//! asks the registry for the manifest, with the same credentials and insecure-registry rules
//! a pull would use).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use serde::Serialize;
use tokio::sync::OnceCell;

use super::auth;
use crate::{PullEvent, PullPhase, PullPolicy, PullSink};

/// Longest a single pull may take.
pub const PULL_TIMEOUT: Duration = Duration::from_secs(3600);

/// How often progress is reported while a pull runs.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// The outcome of one pull, shared by every trial that waited for it.
type Outcome = std::result::Result<(), String>;

/// Pulls of one backend: the policy, one cell per image, the sink, a counter.
pub(crate) struct Puller {
    policy: PullPolicy,
    cells: Mutex<HashMap<String, Arc<OnceCell<Outcome>>>>,
    sink: Mutex<Option<PullSink>>,
    pulls: AtomicU64,
}

impl Puller {
    /// A puller under `policy`.
    pub fn new(policy: PullPolicy) -> Puller {
        Puller {
            policy,
            cells: Mutex::default(),
            sink: Mutex::default(),
            pulls: AtomicU64::new(0),
        }
    }

    /// The policy.
    pub fn policy(&self) -> PullPolicy {
        self.policy
    }

    /// Pulls sent to the engine so far.
    pub fn pulls(&self) -> u64 {
        self.pulls.load(Ordering::SeqCst)
    }

    /// Replaces the sink progress goes to.
    pub fn set_sink(&self, sink: Option<PullSink>) {
        *self.sink.lock().unwrap_or_else(|p| p.into_inner()) = sink;
    }

    fn emit(&self, image: &str, phase: PullPhase) {
        let sink = self.sink.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(s) = sink {
            s(PullEvent {
                image: image.to_string(),
                phase,
                host: None,
            });
        }
    }

    /// Pulls `image` unless it was pulled (or failed) before in this backend; concurrent
    /// callers wait for the one pull.
    pub async fn pull_once(&self, docker: &Docker, image: &str) -> Outcome {
        let cell = self
            .cells
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(image.to_string())
            .or_default()
            .clone();
        cell.get_or_init(|| self.pull(docker, image)).await.clone()
    }

    /// One pull with progress events; the error is the engine's message.
    async fn pull(&self, docker: &Docker, image: &str) -> Outcome {
        self.pulls.fetch_add(1, Ordering::SeqCst);
        let t0 = Instant::now();
        tracing::info!("docker: pulling {image}");
        self.emit(image, PullPhase::Started);
        let (from, tag) = split_reference(image);
        let mut opts = CreateImageOptionsBuilder::default().from_image(&from);
        if let Some(t) = &tag {
            opts = opts.tag(t);
        }
        let creds = auth::credentials_for(image).map(auth::Credentials::into_docker);
        let mut stream = docker.create_image(Some(opts.build()), None, creds);
        let mut layers = Layers::default();
        let mut last = Instant::now();
        let run = async {
            while let Some(item) = stream.next().await {
                match item {
                    Ok(info) => {
                        if let Some(m) = info.error_detail.and_then(|d| d.message) {
                            return Err(m);
                        }
                        layers.update(
                            info.id.as_deref(),
                            info.status.as_deref(),
                            info.progress_detail
                                .map(|p| (p.current.unwrap_or(0), p.total.unwrap_or(0))),
                        );
                        if last.elapsed() >= PROGRESS_EVERY {
                            last = Instant::now();
                            self.emit(image, layers.phase());
                        }
                    }
                    Err(bollard::errors::Error::DockerStreamError { error }) => return Err(error),
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(())
        };
        let res = match tokio::time::timeout(PULL_TIMEOUT, run).await {
            Ok(r) => r,
            Err(_) => Err(format!("the pull timed out after {PULL_TIMEOUT:?}")),
        };
        let secs = t0.elapsed().as_secs_f64();
        match &res {
            Ok(()) => {
                tracing::info!("docker: pulled {image} in {secs:.1}s");
                self.emit(
                    image,
                    PullPhase::Done {
                        secs,
                        bytes: layers.bytes_done(),
                    },
                );
            }
            Err(e) => {
                tracing::info!("docker: pulling {image} failed: {e}");
                self.emit(
                    image,
                    PullPhase::Failed {
                        secs,
                        error: e.clone(),
                    },
                );
            }
        }
        res.map_err(|e| e.trim().to_string())
    }
}

/// Layer states seen in a pull's stream.
#[derive(Default)]
struct Layers {
    seen: Vec<String>,
    done: HashSet<String>,
    bytes: HashMap<String, (u64, u64)>,
}

impl Layers {
    fn update(&mut self, id: Option<&str>, status: Option<&str>, progress: Option<(i64, i64)>) {
        let (Some(id), Some(status)) = (id, status) else {
            return;
        };
        // Layer lines carry a short hex id; the first line carries the tag instead.
        if id.len() != 12 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return;
        }
        if !self.seen.iter().any(|s| s == id) {
            self.seen.push(id.to_string());
        }
        if status.starts_with("Pull complete") || status.starts_with("Already exists") {
            self.done.insert(id.to_string());
        }
        if status.starts_with("Downloading") {
            if let Some((cur, total)) = progress {
                self.bytes
                    .insert(id.to_string(), (cur.max(0) as u64, total.max(0) as u64));
            }
        }
        if status.starts_with("Download complete") {
            if let Some(b) = self.bytes.get_mut(id) {
                b.0 = b.1;
            }
        }
    }

    fn bytes_done(&self) -> u64 {
        self.bytes.values().map(|b| b.0).sum()
    }

    fn phase(&self) -> PullPhase {
        PullPhase::Progress {
            layers_done: self.done.len() as u32,
            layers_total: self.seen.len() as u32,
            bytes_done: self.bytes_done(),
            bytes_total: self.bytes.values().map(|b| b.1).sum(),
        }
    }
}

/// An image reference as `create_image` wants it: (`fromImage`, tag); a digest reference
/// keeps its digest in `fromImage` and has no tag; no tag means `latest`.
pub fn split_reference(image: &str) -> (String, Option<String>) {
    if image.contains('@') {
        return (image.to_string(), None);
    }
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].rfind(':') {
        Some(i) => (
            image[..last_slash + i].to_string(),
            Some(image[last_slash + i + 1..].to_string()),
        ),
        None => (image.to_string(), Some("latest".to_string())),
    }
}

/// Whether the registry of `image` has it: the engine requests its manifest (with the
/// credentials of the Docker client config). The error is the engine's message.
pub async fn probe_registry(docker: &Docker, image: &str) -> std::result::Result<(), String> {
    let creds = auth::credentials_for(image).map(auth::Credentials::into_docker);
    match docker.inspect_registry_image(image, creds).await {
        Ok(_) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError { message, .. }) => {
            Err(message.trim().to_string())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Whether an image can be had on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "why", rename_all = "snake_case")]
pub enum Availability {
    /// In the local engine.
    Local,
    /// Not local, and its registry has it (a pull would fetch it).
    Pullable,
    /// Neither (the engine's or registry's message, or the policy).
    Unavailable(String),
}

/// Whether a registry error means the registry itself cannot be reached (rather than that
/// it lacks the image or refused the credentials).
pub fn unreachable_registry(error: &str) -> bool {
    [
        "dial tcp",
        "no such host",
        "connection refused",
        "i/o timeout",
        "TLS handshake timeout",
        "server misbehaving",
        "network is unreachable",
        "did not answer",
    ]
    .iter()
    .any(|m| error.contains(m))
}

/// The availability of each image under `policy`: local inspects, then registry manifest
/// requests (each limited to `timeout`). Each registry is asked about one image first: when
/// it cannot be reached, its other images are not asked (many lookups at once also overrun
/// small DNS resolvers).
pub async fn availability(
    docker: &Docker,
    policy: PullPolicy,
    images: Vec<String>,
    timeout: Duration,
) -> HashMap<String, Availability> {
    let inspects = images.into_iter().map(|image| async move {
        let local = docker.inspect_image(&image).await.is_ok();
        (image, local)
    });
    let local: Vec<(String, bool)> = futures_util::stream::iter(inspects)
        .buffer_unordered(16)
        .collect()
        .await;
    let mut out = HashMap::new();
    let mut by_registry: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (image, here) in local {
        if here {
            out.insert(image, Availability::Local);
        } else if policy == PullPolicy::Never {
            out.insert(
                image,
                Availability::Unavailable(
                    "not in the local engine and [sandbox] pull = \"never\"".into(),
                ),
            );
        } else {
            by_registry
                .entry(auth::registry_of(&image))
                .or_default()
                .push(image);
        }
    }
    let probe = |image: String| async move {
        let r = match tokio::time::timeout(timeout, probe_registry(docker, &image)).await {
            Ok(r) => r,
            Err(_) => Err(format!("its registry did not answer within {timeout:?}")),
        };
        (image, r)
    };
    let registries = by_registry
        .into_iter()
        .map(|(registry, mut images)| async move {
            images.sort();
            let mut res = Vec::new();
            let first = images.remove(0);
            let (first, r) = probe(first).await;
            if let Err(e) = &r {
                if unreachable_registry(e) {
                    let why = format!(
                        "not in the local engine, and registry {registry} cannot be reached: {e}"
                    );
                    res.push((first, Availability::Unavailable(why.clone())));
                    res.extend(
                        images
                            .into_iter()
                            .map(|i| (i, Availability::Unavailable(why.clone()))),
                    );
                    return res;
                }
            }
            res.push((first, to_availability(r)));
            let rest: Vec<(String, std::result::Result<(), String>)> =
                futures_util::stream::iter(images.into_iter().map(probe))
                    .buffer_unordered(6)
                    .collect()
                    .await;
            res.extend(rest.into_iter().map(|(i, r)| (i, to_availability(r))));
            res
        });
    for list in futures_util::future::join_all(registries).await {
        out.extend(list);
    }
    out
}

fn to_availability(r: std::result::Result<(), String>) -> Availability {
    match r {
        Ok(()) => Availability::Pullable,
        Err(e) => Availability::Unavailable(format!("not in the local engine; registry: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let s = |i: &str| split_reference(i);
        assert_eq!(
            s("alexgshaw/regex-log:20251031"),
            ("alexgshaw/regex-log".into(), Some("20251031".into()))
        );
        assert_eq!(
            s("127.0.0.1:5000/x/y"),
            ("127.0.0.1:5000/x/y".into(), Some("latest".into()))
        );
        assert_eq!(
            s("127.0.0.1:5000/x/y:2"),
            ("127.0.0.1:5000/x/y".into(), Some("2".into()))
        );
        assert_eq!(s("ubuntu@sha256:ab"), ("ubuntu@sha256:ab".into(), None));
    }

    #[test]
    fn layer_progress() {
        let mut l = Layers::default();
        l.update(Some("3"), Some("Pulling from x"), None);
        l.update(Some("aaaaaaaaaaaa"), Some("Pulling fs layer"), None);
        l.update(Some("bbbbbbbbbbbb"), Some("Already exists"), None);
        l.update(Some("aaaaaaaaaaaa"), Some("Downloading"), Some((50, 200)));
        assert_eq!(
            l.phase(),
            PullPhase::Progress {
                layers_done: 1,
                layers_total: 2,
                bytes_done: 50,
                bytes_total: 200
            }
        );
        l.update(Some("aaaaaaaaaaaa"), Some("Download complete"), None);
        l.update(Some("aaaaaaaaaaaa"), Some("Pull complete"), None);
        assert_eq!(l.bytes_done(), 200);
        assert!(matches!(
            l.phase(),
            PullPhase::Progress {
                layers_done: 2,
                layers_total: 2,
                ..
            }
        ));
    }
}
