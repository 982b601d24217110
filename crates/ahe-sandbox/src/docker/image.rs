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
        // The task's own limit (task.toml `build_timeout_sec`) wins over the backend's.
        let timeout = spec
            .build_timeout_sec
            .filter(|s| s.is_finite() && *s > 0.0)
            .map_or(timeout, Duration::from_secs_f64);
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

/// The `.dockerignore` rules of a context: (glob, is an exception `!`), in file order.
struct Ignore {
    rules: Vec<(globset::GlobMatcher, bool)>,
}

impl Ignore {
    /// Reads `ctx/.dockerignore` (no file: nothing ignored). Patterns are relative to the
    /// context root, `*` stays within one path segment, `**` spans several, `!` re-includes.
    fn read(ctx: &Path) -> Result<Ignore> {
        let path = ctx.join(".dockerignore");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(SandboxError::Setup(format!("{}: {e}", path.display()))),
        };
        let mut rules = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (exception, pat) = match line.strip_prefix('!') {
                Some(p) => (true, p.trim()),
                None => (false, line),
            };
            let pat = pat.trim_start_matches("./").trim_start_matches('/');
            let pat = pat.trim_end_matches('/');
            if pat.is_empty() {
                continue;
            }
            let glob = globset::GlobBuilder::new(pat)
                .literal_separator(true)
                .build()
                .map_err(|e| {
                    SandboxError::Setup(format!(
                        "{} line {}: bad pattern {line:?}: {e}",
                        path.display(),
                        n + 1
                    ))
                })?;
            rules.push((glob.compile_matcher(), exception));
        }
        Ok(Ignore { rules })
    }

    /// Whether `rel` is left out: the last rule matching it or one of its parents decides.
    /// The Dockerfile and `.dockerignore` itself are always kept, as docker does.
    fn excludes(&self, rel: &Path) -> bool {
        if rel == Path::new("Dockerfile") || rel == Path::new(".dockerignore") {
            return false;
        }
        let mut excluded = false;
        for (glob, exception) in &self.rules {
            if rel
                .ancestors()
                .any(|a| !a.as_os_str().is_empty() && glob.is_match(a))
            {
                excluded = !exception;
            }
        }
        excluded
    }
}

/// The files of a context in a stable order (relative paths), without the root itself and
/// without what `.dockerignore` leaves out.
fn walk(ctx: &Path) -> Result<Vec<(PathBuf, walkdir::DirEntry)>> {
    let ignore = Ignore::read(ctx)?;
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
        if ignore.excludes(&rel) {
            continue;
        }
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

    #[test]
    fn dockerignore_leaves_files_out_of_hash_and_tar() {
        let d = tempfile::tempdir().unwrap();
        let files = [
            "Dockerfile",
            "keep.txt",
            "big/blob.bin",
            "big/keep.me",
            "logs/a.log",
            "src/x.log",
            "src/deep/y.log",
            "src/main.py",
        ];
        for f in files {
            let p = d.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, f).unwrap();
        }
        let names = |d: &Path| -> Vec<String> {
            tar::Archive::new(&tar_context(d).unwrap()[..])
                .entries()
                .unwrap()
                .map(|e| e.unwrap().path().unwrap().display().to_string())
                .filter(|n| !n.ends_with('/') && d.join(n).is_file())
                .collect()
        };
        let before = context_hash(d.path()).unwrap();
        std::fs::write(
            d.path().join(".dockerignore"),
            "# comment\nbig\n!big/keep.me\n/logs/\nsrc/*.log\nDockerfile\n",
        )
        .unwrap();
        assert_eq!(
            names(d.path()),
            vec![
                ".dockerignore",
                "Dockerfile",
                "big/keep.me",
                "keep.txt",
                "src/deep/y.log",
                "src/main.py"
            ]
        );
        // Ignored files do not change the image hash; kept ones do.
        let h = context_hash(d.path()).unwrap();
        assert_ne!(before, h);
        std::fs::write(d.path().join("big/blob.bin"), "changed").unwrap();
        assert_eq!(h, context_hash(d.path()).unwrap());
        std::fs::write(d.path().join("src/main.py"), "changed").unwrap();
        assert_ne!(h, context_hash(d.path()).unwrap());
        // `**` spans directories; a bad pattern names the file and line.
        std::fs::write(d.path().join(".dockerignore"), "**/*.log\n").unwrap();
        assert!(!names(d.path()).iter().any(|n| n.ends_with(".log")));
        std::fs::write(d.path().join(".dockerignore"), "ok\nbad[\n").unwrap();
        let e = context_hash(d.path()).unwrap_err().to_string();
        assert!(e.contains(".dockerignore line 2"), "{e}");
    }
}
