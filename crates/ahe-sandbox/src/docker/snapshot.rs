//! A running container's file system as an image (`docker commit`), for a counterfactual run
//! of the verifier in a fresh container of the same content; removed after that run.

use bollard::query_parameters::{CommitContainerOptionsBuilder, RemoveImageOptionsBuilder};
use bollard::Docker;

use crate::{Result, SandboxError};

/// Repository name of the images made here (labelled `ahe.counterfactual=1` for `docker image
/// prune --filter label=...`).
pub const REPO: &str = "ahe-counterfactual";

/// Commits container `id` (paused while it is read) as `ahe-counterfactual:<tag>`; returns the
/// image's name.
pub async fn commit(docker: &Docker, id: &str, tag: &str) -> Result<String> {
    let opts = CommitContainerOptionsBuilder::new()
        .container(id)
        .repo(REPO)
        .tag(tag)
        .pause(true)
        .changes("LABEL ahe.counterfactual=1")
        .build();
    docker
        .commit_container(opts, bollard::models::ContainerConfig::default())
        .await
        .map_err(|e| SandboxError::Backend(format!("docker commit of {id}: {e}")))?;
    Ok(format!("{REPO}:{tag}"))
}

/// Removes an image made by [`commit`] (a failure is only logged: the image is labelled).
pub async fn remove(docker: &Docker, image: &str) {
    let opts = RemoveImageOptionsBuilder::new().force(true).build();
    if let Err(e) = docker.remove_image(image, Some(opts), None).await {
        tracing::warn!("removing {image}: {e}");
    }
}
