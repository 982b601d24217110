//! Images: the task's named image when it exists locally, else its `environment/` built once
//! per content hash (`ahe-task:<hash>`) and reused across trials and runs.

use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::query_parameters::BuildImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use super::{api_err, status_of, DEFAULT_WORKDIR};
use crate::{Result, SandboxError, SandboxSpec};

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
}

type Cell<T> = Arc<OnceCell<T>>;

/// Per-backend image state: content hashes, builds in flight or done, named images.
#[derive(Default)]
pub(crate) struct ImageCache {
    hashes: Mutex<HashMap<PathBuf, Cell<String>>>,
    built: Mutex<HashMap<String, Cell<Arc<ImageInfo>>>>,
    named: Mutex<HashMap<String, Arc<ImageInfo>>>,
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
    ImageInfo {
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

impl ImageCache {
    /// Builds performed so far.
    pub fn builds(&self) -> u64 {
        self.builds.load(Ordering::SeqCst)
    }

    /// The image a spec runs in: its named image if local, else its context built (once).
    pub async fn resolve(
        &self,
        docker: &Docker,
        spec: &SandboxSpec,
        timeout: Duration,
    ) -> Result<Arc<ImageInfo>> {
        if let Some(name) = &spec.docker_image {
            let known = self
                .named
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .cloned();
            if let Some(info) = known {
                return Ok(info);
            }
            if let Some(info) = inspect(docker, name).await? {
                let info = Arc::new(info);
                self.named
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.clone(), info.clone());
                return Ok(info);
            }
        }
        let Some(ctx) = spec
            .context_dir
            .as_ref()
            .filter(|c| c.join("Dockerfile").is_file())
        else {
            return Err(SandboxError::Setup(match &spec.docker_image {
                Some(name) => format!(
                    "image {name} is not available offline (it is not in the local engine, \
                     nothing is pulled, and the task has no environment/Dockerfile to build it \
                     from); build or load it locally first (`docker build -t {name} DIR` or \
                     `docker load`)"
                ),
                None => "the task names no docker_image and has no environment/Dockerfile".into(),
            }));
        };
        let hash_cell = cell(&self.hashes, ctx.clone());
        let hash = hash_cell
            .get_or_try_init(|| {
                let ctx = ctx.clone();
                async move {
                    tokio::task::spawn_blocking(move || context_hash(&ctx))
                        .await
                        .map_err(|e| SandboxError::Backend(e.to_string()))?
                }
            })
            .await?
            .clone();
        let build_cell = cell(&self.built, hash.clone());
        build_cell
            .get_or_try_init(|| self.ensure_built(docker, ctx, &hash, spec, timeout))
            .await
            .cloned()
    }

    /// Finds `ahe-task:<hash>` (hash also covering the local `FROM` images) or builds it.
    async fn ensure_built(
        &self,
        docker: &Docker,
        ctx: &Path,
        hash: &str,
        spec: &SandboxSpec,
        timeout: Duration,
    ) -> Result<Arc<ImageInfo>> {
        let text = std::fs::read_to_string(ctx.join("Dockerfile"))?;
        let mut h = Sha256::new();
        h.update(hash.as_bytes());
        for base in from_images(&text) {
            let Some(info) = inspect(docker, &base).await? else {
                return Err(SandboxError::Setup(format!(
                    "{}: base image {base} is not available offline (no registry access; \
                     nothing is pulled); build it locally first{}",
                    ctx.join("Dockerfile").display(),
                    if base.starts_with("ahe-base") {
                        " with scripts/build-base-image.sh"
                    } else {
                        ""
                    }
                )));
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

/// The files of a context in a stable order (relative paths), without the root itself.
fn walk(ctx: &Path) -> Result<Vec<(PathBuf, walkdir::DirEntry)>> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(ctx)
        .follow_links(false)
        .sort_by_file_name()
        .min_depth(1)
    {
        let entry = entry.map_err(|e| SandboxError::Setup(format!("{}: {e}", ctx.display())))?;
        let rel = entry
            .path()
            .strip_prefix(ctx)
            .map_err(|e| SandboxError::Backend(e.to_string()))?
            .to_path_buf();
        out.push((rel, entry));
    }
    Ok(out)
}

/// sha256 over the context's relative paths, kinds, modes, contents and link targets.
pub(crate) fn context_hash(ctx: &Path) -> Result<String> {
    let mut h = Sha256::new();
    for (rel, entry) in walk(ctx)? {
        let md = entry
            .metadata()
            .map_err(|e| SandboxError::Setup(format!("{}: {e}", entry.path().display())))?;
        let kind = if md.is_dir() {
            "d"
        } else if md.file_type().is_symlink() {
            "l"
        } else {
            "f"
        };
        let mode = md.permissions().mode() & 0o7777;
        h.update(format!("{}\0{kind}\0{mode:o}\0", rel.display()).as_bytes());
        if md.file_type().is_symlink() {
            let target = std::fs::read_link(entry.path())?;
            h.update(target.as_os_str().as_encoded_bytes());
        } else if md.is_file() {
            h.update(md.len().to_le_bytes());
            let mut f = std::fs::File::open(entry.path())?;
            std::io::copy(&mut f, &mut h)?;
        }
        h.update(b"\0");
    }
    Ok(hex::encode(h.finalize()))
}

/// The context as a tar archive (symlinks kept as links).
pub(crate) fn tar_context(ctx: &Path) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    for (rel, entry) in walk(ctx)? {
        b.append_path_with_name(entry.path(), &rel)
            .map_err(|e| SandboxError::Setup(format!("{}: {e}", entry.path().display())))?;
    }
    Ok(b.into_inner()?)
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

    #[test]
    fn hash_covers_content_and_mode() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Dockerfile"), "FROM x\n").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/a.sh"), "echo\n").unwrap();
        let h1 = context_hash(d.path()).unwrap();
        assert_eq!(h1, context_hash(d.path()).unwrap());
        std::fs::set_permissions(
            d.path().join("sub/a.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let h2 = context_hash(d.path()).unwrap();
        assert_ne!(h1, h2);
        std::fs::write(d.path().join("sub/a.sh"), "echo 2\n").unwrap();
        assert_ne!(h2, context_hash(d.path()).unwrap());
        let names: Vec<String> = tar::Archive::new(&tar_context(d.path()).unwrap()[..])
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, vec!["Dockerfile", "sub", "sub/a.sh"]);
    }
}
