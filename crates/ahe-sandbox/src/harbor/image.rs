//! The task image on Harbor's `docker` environment, built once per task per backend.
//!
//! Left to itself, Harbor's docker environment runs `docker compose build` in every start (a
//! compose project per trial, so an image per trial) and removes that image with the
//! environment (`down --rmi local`). Instead, ahe builds a task's `environment/` once with its
//! docker backend's builder — `ahe-task:<hash>` (files, modes and the ids of the `FROM`
//! images), one build however many trials of the task start at once, kept and reused across
//! runs as on the docker backend — and hands it to Harbor as the task's prebuilt image
//! (`docker_image`): Harbor then starts, runs and deletes each trial's compose project from it
//! (its `docker-compose-prebuilt.yaml`), and `down --rmi local` leaves the tagged image alone.
//! A task that names a `docker_image` gets it as the docker backend would: the named image
//! when it is on the engine or can be pulled under `[sandbox] pull`, else its `environment/`
//! built (Terminal-Bench 2's tasks offline, on stand-in base images). Tasks that bring their
//! own `docker-compose.yaml` are left to Harbor as they are.

use std::path::Path;
use std::time::Duration;

use bollard::Docker;
use tokio::sync::OnceCell;

use crate::docker::image::ImageCache;
use crate::docker::pull::Puller;
use crate::{PullPolicy, PullSink, Result, SandboxError, SandboxSpec};

/// The image a trial's environment starts from, as the start request carries it.
#[derive(Debug, Clone)]
pub(super) struct Prebuilt {
    /// The image's tag (`ahe-task:<hash>`).
    pub image: String,
    /// Its working directory when the image sets one (so the bridge need not ask).
    pub workdir: Option<String>,
    /// What the trial's notes say about it.
    pub notes: Vec<String>,
    /// Whether the image declares a `HEALTHCHECK` (Harbor's `up --wait` then has something
    /// to wait for).
    pub healthcheck: bool,
}

/// Builds of one Harbor backend on the engine Harbor's docker environment drives.
pub(super) struct Images {
    docker: OnceCell<Docker>,
    cache: ImageCache,
    puller: Puller,
    timeout: Duration,
}

impl Images {
    /// Builds under `pull` (the `FROM` bases are pulled as the docker backend would).
    pub(super) fn new(pull: PullPolicy) -> Images {
        Images {
            docker: OnceCell::new(),
            cache: ImageCache::default(),
            puller: Puller::new(pull),
            timeout: crate::docker::DEFAULT_BUILD_TIMEOUT,
        }
    }

    /// Sends the pulls of `FROM` bases to `sink`.
    pub(super) fn set_sink(&self, sink: Option<PullSink>) {
        self.puller.set_sink(sink);
    }

    /// Images built so far.
    pub(super) fn builds(&self) -> u64 {
        self.cache.builds()
    }

    /// The engine client of `DOCKER_HOST` (the engine Harbor's `docker` CLI drives).
    async fn docker(&self) -> Result<&Docker> {
        self.docker
            .get_or_try_init(|| async {
                let d = Docker::connect_with_defaults()
                    .map_err(|e| SandboxError::Backend(format!("docker engine: {e}")))?;
                d.negotiate_version()
                    .await
                    .map_err(|e| SandboxError::Backend(format!("docker engine: {e}")))
            })
            .await
    }

    /// The prebuilt image for `spec`'s trials, resolved on first use as the docker backend
    /// resolves it (the named `docker_image` when it is here or can be pulled under the pull
    /// policy, else the task's `environment/` built); `None` when Harbor is to make the
    /// environment itself (the task brings a compose file).
    pub(super) async fn prebuilt(&self, spec: &SandboxSpec) -> Result<Option<Prebuilt>> {
        let Some(ctx) = spec.context_dir.as_deref().filter(|c| ours(spec, c)) else {
            return Ok(None);
        };
        let docker = self.docker().await?;
        let img = self
            .cache
            .resolve(docker, spec, self.timeout, &self.puller)
            .await?;
        let built = (img.info.tags.iter())
            .find(|t| t.starts_with(crate::docker::TASK_REPO))
            .cloned();
        let mut notes = img.notes.clone();
        let tag = match (built, &spec.docker_image) {
            (Some(tag), _) => {
                notes.push(format!(
                    "image {tag}: the task's environment/ built once by ahe for every trial of \
                     the task (kept for later runs, as on the docker backend); Harbor starts \
                     each trial's compose project from it as a prebuilt image"
                ));
                tag
            }
            (None, Some(name)) => {
                notes.push(format!(
                    "image {name}: the task's docker_image, found on the engine by ahe (pulled \
                     under [sandbox] pull); Harbor starts each trial's compose project from it"
                ));
                name.clone()
            }
            (None, None) => {
                return Err(SandboxError::Setup(format!(
                    "the image built from {} has no {}:<hash> tag",
                    ctx.display(),
                    crate::docker::TASK_REPO
                )))
            }
        };
        Ok(Some(Prebuilt {
            image: tag,
            workdir: img.info.has_workdir.then(|| img.info.workdir.clone()),
            healthcheck: img.info.healthcheck,
            notes,
        }))
    }
}

/// Whether ahe resolves `spec`'s image: a Dockerfile or a named image, no compose file.
fn ours(spec: &SandboxSpec, ctx: &Path) -> bool {
    (spec.docker_image.is_some() || ctx.join("Dockerfile").is_file())
        && !ctx.join("docker-compose.yaml").exists()
}
