//! A running container's file system as an image (`docker commit`), for a counterfactual run
//! of the verifier in a fresh container of the same content; removed after that run.

use std::collections::HashMap;
use std::time::Duration;

use bollard::query_parameters::{
    CommitContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveImageOptionsBuilder,
};
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

/// Removes an image made by [`commit`], with the containers made from it (a copy's container
/// may still be on its way out: its removal runs in the background). Without waiting for
/// them, a forced removal would only untag the image and leave it behind, unnamed, for ever
/// (780 such images after a day of suites). A failure is only logged: the image is labelled.
pub async fn remove(docker: &Docker, image: &str) {
    let filters = HashMap::from([("ancestor".to_string(), vec![image.to_string()])]);
    let list = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    for c in docker.list_containers(Some(list)).await.unwrap_or_default() {
        if let Some(id) = c.id {
            let _ = super::owned::remove_container(docker, &id).await;
        }
    }
    // A removal already under way (409 for the container) ends within moments: retry the
    // image (unforced, so it is deleted, not untagged) until it goes, for up to ~20 s.
    let gentle = RemoveImageOptionsBuilder::new().force(false).build();
    for _ in 0..200 {
        match docker.remove_image(image, Some(gentle.clone()), None).await {
            Ok(_) => return,
            Err(e) if super::status_of(&e) == Some(404) => return,
            Err(e) if super::status_of(&e) == Some(409) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => {
                tracing::warn!("removing {image}: {e}");
                return;
            }
        }
    }
    let forced = RemoveImageOptionsBuilder::new().force(true).build();
    if let Err(e) = docker.remove_image(image, Some(forced), None).await {
        tracing::warn!("removing {image}: {e}");
    } else {
        tracing::warn!("{image}: still used by a container after 20 s; untagged, not deleted");
    }
}
