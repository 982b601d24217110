//! Images: the task's named image when it exists locally (or is pulled, as the
//! [`PullPolicy`] says), else its `environment/` built once per content hash
//! (`ahe-task:<hash>`; its `FROM` bases pulled the same way) and reused across trials and runs.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::query_parameters::BuildImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use super::context::{context_hash, tar_context};
use super::pull::Puller;
use super::{api_err, status_of, DEFAULT_WORKDIR};
use crate::{PullPolicy, Result, SandboxError, SandboxSpec};

/// Repository of the images built from task contexts.
pub const TASK_REPO: &str = "ahe-task";

/// How many build-log lines a build failure quotes.
const LOG_TAIL_LINES: usize = 40;

/// A resolved image.
#[derive(Debug)]
pub(crate) struct ImageInfo {
    /// Image id (`sha256:...`).
    pub id: String,
    /// The image's WorkingDir, or [`DEFAULT_WORKDIR`].
    pub workdir: String,
    /// Whether the image sets a WorkingDir itself (else ours must be created).
    pub has_workdir: bool,
    /// Whether the image's processes run as root (no `USER`, or `USER root`/`0`).
    pub root_user: bool,
    /// The tag a stand-in base image stands for (label `ahe.standin.of`, inherited by the
    /// images built on it), when the image is built on one.
    pub standin: Option<String>,
    /// The image's tags (`ahe-task:<hash>` for a built one).
    pub tags: Vec<String>,
    /// Whether the image declares a `HEALTHCHECK` (one not `NONE`): something for a start
    /// to wait for beyond the container running.
    pub healthcheck: bool,
}

type Cell<T> = Arc<OnceCell<T>>;

/// A named image found (or pulled) and the notes every trial using it gets.
type Named = (Arc<ImageInfo>, Vec<String>);

/// Per-backend image state: content hashes, builds in flight or done, named images.
#[derive(Default)]
pub(crate) struct ImageCache {
    hashes: Mutex<HashMap<PathBuf, Cell<String>>>,
    built: Mutex<HashMap<String, Cell<Arc<ImageInfo>>>>,
    named: Mutex<HashMap<String, Named>>,
    builds: AtomicU64,
}

/// The cell for `key` in a map (created empty when missing).
fn cell<K: std::hash::Hash + Eq, T>(map: &Mutex<HashMap<K, Cell<T>>>, key: K) -> Cell<T> {
    map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_default()
        .clone()
}

/// An image's id and working dir.
fn info_of(img: bollard::models::ImageInspect) -> ImageInfo {
    let config = img.config.unwrap_or_default();
    let user = config.user.unwrap_or_default();
    let user = user.split(':').next().unwrap_or_default();
    let wd = config.working_dir.filter(|w| !w.is_empty());
    let labels = config.labels.unwrap_or_default();
    let healthcheck = config
        .healthcheck
        .and_then(|h| h.test)
        .is_some_and(|t| !t.is_empty() && t[0] != "NONE");
    let standin = (labels.get("ahe.standin").map(String::as_str) == Some("1"))
        .then(|| labels.get("ahe.standin.of").cloned().unwrap_or_default());
    ImageInfo {
        standin,
        tags: img.repo_tags.unwrap_or_default(),
        healthcheck,
        id: img.id.unwrap_or_default(),
        root_user: matches!(user, "" | "root" | "0"),
        has_workdir: wd.is_some(),
        workdir: wd.unwrap_or_else(|| DEFAULT_WORKDIR.to_string()),
    }
}

/// Inspects an image; `Ok(None)` when it does not exist locally.
async fn inspect(docker: &Docker, name: &str) -> Result<Option<ImageInfo>> {
    match docker.inspect_image(name).await {
        Ok(img) => Ok(Some(info_of(img))),
        Err(e) if status_of(&e) == Some(404) => Ok(None),
        Err(e) => Err(api_err(&format!("inspecting image {name}"), e)),
    }
}

/// An image a trial runs in, and what the researcher should know about how it was had.
pub(crate) struct Resolved {
    /// The image.
    pub info: Arc<ImageInfo>,
    /// Notes for the trial's result (a failed pull and what was used instead).
    pub notes: Vec<String>,
}

/// The local image `name` under the puller's policy (pulled when that says so), and the pull
/// error when a pull failed.
async fn obtain(
    docker: &Docker,
    puller: &Puller,
    name: &str,
) -> Result<(Option<ImageInfo>, Option<String>)> {
    match puller.policy() {
        PullPolicy::Never => Ok((inspect(docker, name).await?, None)),
        PullPolicy::Missing => {
            if let Some(info) = inspect(docker, name).await? {
                return Ok((Some(info), None));
            }
            match puller.pull_once(docker, name).await {
                Ok(()) => Ok((inspect(docker, name).await?, None)),
                Err(e) => Ok((None, Some(e))),
            }
        }
        PullPolicy::Always => {
            let pulled = puller.pull_once(docker, name).await;
            Ok((inspect(docker, name).await?, pulled.err()))
        }
    }
}

impl ImageCache {
    /// Builds performed so far.
    pub fn builds(&self) -> u64 {
        self.builds.load(Ordering::SeqCst)
    }

    /// The image a spec runs in: its named image (pulled as the policy says), else its
    /// context built once (its `FROM` bases pulled the same way).
    pub async fn resolve(
        &self,
        docker: &Docker,
        spec: &SandboxSpec,
        timeout: Duration,
        puller: &Puller,
    ) -> Result<Resolved> {
        let mut notes = Vec::new();
        // Why the named image could not be used: the researcher's next step depends on it.
        let mut unavailable: Option<String> = None;
        if let Some(name) = &spec.docker_image {
            match self.named_image(docker, name, puller).await? {
                Ok(resolved) => return Ok(resolved),
                Err(why) => unavailable = Some(why),
            }
        }
        let Some(ctx) = spec
            .context_dir
            .as_ref()
            .filter(|c| c.join("Dockerfile").is_file())
        else {
            return Err(SandboxError::Setup(
                match (&spec.docker_image, unavailable) {
                    (Some(name), Some(why)) => format!(
                        "{why}; and the task has no environment/Dockerfile to build it from. {}",
                        what_to_run(name, None, puller.policy())
                    ),
                    _ => "the task names no docker_image and has no environment/Dockerfile".into(),
                },
            ));
        };
        let built = self.build_context(docker, ctx, spec, timeout, puller).await;
        if let Some(of) = built.as_ref().ok().and_then(|i| i.standin.as_ref()) {
            notes.push(format!(
                "built on a local stand-in base image ({of}, made by scripts/tb2-standins.sh \
                 from Debian's packages), not the registry's"
            ));
        }
        match (built, &spec.docker_image, unavailable) {
            (Ok(info), Some(_), Some(why)) => {
                if puller.policy() != PullPolicy::Never {
                    notes.push(format!(
                        "{why}; the task's environment/ ({}) was built instead",
                        ctx.display()
                    ));
                }
                Ok(Resolved { info, notes })
            }
            (Ok(info), _, _) => Ok(Resolved { info, notes }),
            (Err(e), Some(name), Some(why)) => Err(SandboxError::Setup(format!(
                "{why}; building the task's environment/ instead failed too: {}. {}",
                e.to_string().trim_start_matches("sandbox setup failed: "),
                what_to_run(name, Some(ctx), puller.policy())
            ))),
            (Err(e), _, _) => Err(e),
        }
    }

    /// The spec's named image (remembered, else obtained under the pull policy) with its
    /// notes, or why it cannot be used.
    async fn named_image(
        &self,
        docker: &Docker,
        name: &str,
        puller: &Puller,
    ) -> Result<std::result::Result<Resolved, String>> {
        let known = self
            .named
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        if let Some((info, notes)) = known {
            return Ok(Ok(Resolved { info, notes }));
        }
        let (info, pull_error) = obtain(docker, puller, name).await?;
        if let Some(info) = info {
            let mut notes = Vec::new();
            if let Some(e) = &pull_error {
                notes.push(format!(
                    "pulling {name} failed ({e}); the local copy of {name} was used"
                ));
            }
            let info = Arc::new(info);
            self.named
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.to_string(), (info.clone(), notes.clone()));
            return Ok(Ok(Resolved { info, notes }));
        }
        Ok(Err(match pull_error {
            Some(e) => format!("image {name} is not in the local engine and pulling it failed: {e}"),
            None if puller.policy() == PullPolicy::Never => format!(
                "image {name} is not in the local engine and nothing is pulled ([sandbox] pull = \"never\")"
            ),
            None => format!("image {name} was pulled but is not in the local engine"),
        }))
    }

    /// The image built from `ctx` (once per content hash).
    async fn build_context(
        &self,
        docker: &Docker,
        ctx: &Path,
        spec: &SandboxSpec,
        timeout: Duration,
        puller: &Puller,
    ) -> Result<Arc<ImageInfo>> {
        let hash_cell = cell(&self.hashes, ctx.to_path_buf());
        let hash = hash_cell
            .get_or_try_init(|| {
                let ctx = ctx.to_path_buf();
                async move {
                    tokio::task::spawn_blocking(move || context_hash(&ctx))
                        .await
                        .map_err(|e| SandboxError::Backend(e.to_string()))?
                }
            })
            .await?
            .clone();
        let build_cell = cell(&self.built, hash.clone());
        // The task's own limit (task.toml `build_timeout_sec`) wins over the backend's.
        let timeout = spec
            .build_timeout_sec
            .filter(|s| s.is_finite() && *s > 0.0)
            .map_or(timeout, Duration::from_secs_f64);
        build_cell
            .get_or_try_init(|| self.ensure_built(docker, ctx, &hash, spec, timeout, puller))
            .await
            .cloned()
    }

    /// Finds `ahe-task:<hash>` (hash also covering the `FROM` images, pulled as the policy
    /// says) or builds it.
    async fn ensure_built(
        &self,
        docker: &Docker,
        ctx: &Path,
        hash: &str,
        spec: &SandboxSpec,
        timeout: Duration,
        puller: &Puller,
    ) -> Result<Arc<ImageInfo>> {
        let text = std::fs::read_to_string(ctx.join("Dockerfile"))?;
        let mut h = Sha256::new();
        h.update(hash.as_bytes());
        for base in from_images(&text) {
            let (info, pull_error) = obtain(docker, puller, &base).await?;
            let Some(info) = info else {
                let dockerfile = ctx.join("Dockerfile");
                return Err(SandboxError::Setup(match pull_error {
                    Some(e) => format!(
                        "{}: base image {base} is not in the local engine and pulling it failed \
                         ({e}); run `docker pull {base}` where its registry is reachable, or \
                         `docker load` it",
                        dockerfile.display()
                    ),
                    None => format!(
                        "{}: base image {base} is not available offline (not in the local \
                         engine; [sandbox] pull = \"never\"); build it locally first{}, or \
                         allow pulls with --pull missing",
                        dockerfile.display(),
                        if base.starts_with("ahe-base") {
                            " with scripts/build-base-image.sh"
                        } else {
                            ""
                        }
                    ),
                }));
            };
            h.update(format!("\0{base}\0{}", info.id).as_bytes());
        }
        let tag = format!("{TASK_REPO}:{}", &hex::encode(h.finalize())[..32]);
        if let Some(info) = inspect(docker, &tag).await? {
            return Ok(Arc::new(info));
        }
        self.builds.fetch_add(1, Ordering::SeqCst);
        tracing::info!("docker: building {tag} from {}", ctx.display());
        build(docker, ctx, &tag, &spec.task, timeout).await?;
        match inspect(docker, &tag).await? {
            Some(info) => Ok(Arc::new(info)),
            None => Err(SandboxError::Setup(format!(
                "image build of {} reported success but {tag} does not exist",
                ctx.display()
            ))),
        }
    }
}

/// The commands that would make `image` available, for an error message.
fn what_to_run(image: &str, ctx: Option<&Path>, policy: PullPolicy) -> String {
    let registry = super::auth::registry_of(image);
    let mut s = format!(
        "To fix: where {registry} is reachable run `docker pull {image}` (add credentials with \
         `docker login {registry}` if it needs them)"
    );
    if let Some(c) = ctx {
        s.push_str(&format!(
            ", or build it: `docker build -t {image} {}`",
            c.display()
        ));
    } else {
        s.push_str(", or `docker load` a saved copy");
    }
    if policy == PullPolicy::Never {
        s.push_str("; or let ahe pull it: --pull missing");
    }
    s
}

/// Builds `ctx` as `tag`; a failure quotes the last lines of the build log.
async fn build(
    docker: &Docker,
    ctx: &Path,
    tag: &str,
    task: &str,
    timeout: Duration,
) -> Result<()> {
    let dir = ctx.to_path_buf();
    let body = tokio::task::spawn_blocking(move || tar_context(&dir))
        .await
        .map_err(|e| SandboxError::Backend(e.to_string()))??;
    let labels = HashMap::from([
        ("ahe.task", task.to_string()),
        ("ahe.context", ctx.display().to_string()),
    ]);
    let opts = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .labels(&labels)
        .build();
    let mut log = Log::default();
    let mut failure: Option<String> = None;
    let mut stream = docker.build_image(opts, None, Some(bollard::body_full(body.into())));
    let run = async {
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(s) = info.stream.as_deref().or(info.status.as_deref()) {
                        log.push(s);
                    }
                    if let Some(m) = info.error_detail.and_then(|d| d.message) {
                        failure = Some(m);
                        break;
                    }
                }
                Err(e) => {
                    failure = Some(match e {
                        bollard::errors::Error::DockerStreamError { error } => error,
                        other => other.to_string(),
                    });
                    break;
                }
            }
        }
    };
    if tokio::time::timeout(timeout, run).await.is_err() {
        failure = Some(format!("the build timed out after {timeout:?}"));
    }
    match failure {
        None => Ok(()),
        Some(why) => Err(SandboxError::Setup(format!(
            "building the image of {} failed: {}\n--- build log (last {LOG_TAIL_LINES} lines) ---\n{}",
            ctx.display(),
            why.trim(),
            log.tail()
        ))),
    }
}

/// The last lines of a build log.
#[derive(Default)]
struct Log {
    lines: VecDeque<String>,
    partial: String,
}

impl Log {
    fn push(&mut self, chunk: &str) {
        self.partial.push_str(chunk);
        while let Some(i) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=i).collect();
            self.lines.push_back(line.trim_end().to_string());
            if self.lines.len() > LOG_TAIL_LINES {
                self.lines.pop_front();
            }
        }
    }

    fn tail(mut self) -> String {
        if !self.partial.is_empty() {
            let rest = std::mem::take(&mut self.partial);
            self.lines.push_back(rest);
            if self.lines.len() > LOG_TAIL_LINES {
                self.lines.pop_front();
            }
        }
        Vec::from(self.lines).join("\n")
    }
}

/// The images named by `FROM` lines (not earlier stage names, `scratch` or `$ARG` forms).
pub(crate) fn from_images(dockerfile: &str) -> Vec<String> {
    let mut stages: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for line in dockerfile.lines() {
        let mut words = line.split_whitespace();
        if !words.next().is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
            continue;
        }
        let rest: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
        let Some(image) = rest.first() else { continue };
        let lower = image.to_ascii_lowercase();
        let earlier_stage = stages.contains(&lower);
        if rest.len() >= 3 && rest[1].eq_ignore_ascii_case("AS") {
            stages.push(rest[2].to_ascii_lowercase());
        }
        if image.contains('$') || lower == "scratch" || earlier_stage {
            continue;
        }
        if !out.contains(&image.to_string()) {
            out.push(image.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_lines() {
        let df = "# c\nFROM ahe-base:bookworm AS build\nRUN x\nfrom --platform=linux/amd64 \
                  python:3.12\nFROM build\nFROM scratch\nFROM $BASE\nFROM ahe-base:bookworm\n";
        assert_eq!(
            from_images(df),
            vec!["ahe-base:bookworm".to_string(), "python:3.12".to_string()]
        );
    }
}
