//! ahe's static busybox on a read-only volume, for engines whose containers ahe checks from
//! inside (a remote engine of the pool): mounted when each container is made, nothing in the
//! container can alter it (no `CAP_SYS_ADMIN` to remount or cover it), so the hand-over's
//! busybox cannot be swapped between a copy and its exec — the race a copy put in right
//! before each use leaves open. One volume per engine and busybox (`ahe-tools-<sha256>`),
//! filled once through a stopped helper container and read back before use.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, VolumeCreateRequest};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use bollard::Docker;
use sha2::{Digest, Sha256};

use super::api::Api;
use super::owned::remove_container;
use super::{LABEL_PID, LABEL_RUN, LABEL_TASK};

/// Where the volume is mounted in every container of such an engine.
pub const MOUNT: &str = "/.ahe-bb-tools";

/// The volume of one engine, made at its first container.
#[derive(Default)]
pub(crate) struct Tools {
    volume: tokio::sync::OnceCell<Option<String>>,
}

impl Tools {
    /// The volume's name (made and filled on first use, from `image` present on the
    /// engine), or `None` when it could not be (no static busybox here, the engine refused):
    /// the checks then put a copy in before each use, as elsewhere.
    pub async fn volume(&self, docker: &Docker, image: &str) -> Option<String> {
        let make = || async {
            match make(docker, image).await {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!("docker: no read-only busybox volume ({e})");
                    None
                }
            }
        };
        self.volume.get_or_init(make).await.clone()
    }
}

/// `volume` mounted read-only at [`MOUNT`].
pub(crate) fn mount(volume: &str) -> Mount {
    Mount {
        target: Some(MOUNT.into()),
        source: Some(volume.into()),
        typ: Some(MountType::VOLUME),
        read_only: Some(true),
        ..Default::default()
    }
}

/// Makes (or finds) the volume and makes sure it holds this host's busybox, byte for byte.
async fn make(docker: &Docker, image: &str) -> Result<String, String> {
    let path = crate::busybox::busybox()?;
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = format!("ahe-tools-{}", &hex::encode(Sha256::digest(&bytes))[..16]);
    let req = VolumeCreateRequest {
        name: Some(name.clone()),
        labels: Some(HashMap::from([(
            "ahe.tools".to_string(),
            "busybox".to_string(),
        )])),
        ..Default::default()
    };
    docker
        .create_volume(req)
        .await
        .map_err(|e| format!("creating volume {name}: {e}"))?;
    let helper = helper(docker, image, &name).await?;
    let filled = fill(
        Api {
            docker,
            id: &helper,
        },
        &bytes,
    )
    .await;
    let _ = remove_container(docker, &helper).await;
    filled.map(|()| name)
}

/// A stopped container with the volume at `/v` (writable), labelled for the reaper.
async fn helper(docker: &Docker, image: &str, volume: &str) -> Result<String, String> {
    let labels = HashMap::from([
        (LABEL_RUN.to_string(), "tools-volume".to_string()),
        (LABEL_TASK.to_string(), "tools-volume".to_string()),
        (LABEL_PID.to_string(), std::process::id().to_string()),
    ]);
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(vec![]),
        cmd: Some(vec!["true".into()]),
        labels: Some(labels),
        host_config: Some(HostConfig {
            mounts: Some(vec![Mount {
                read_only: Some(false),
                target: Some("/v".into()),
                ..mount(volume)
            }]),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let opts = CreateContainerOptionsBuilder::default().build();
    let created = docker
        .create_container(Some(opts), body)
        .await
        .map_err(|e| format!("a helper container for volume {volume}: {e}"))?;
    Ok(created.id)
}

/// Puts `bytes` at `/v/busybox` unless it is there already; reads it back.
async fn fill(api: Api<'_>, bytes: &[u8]) -> Result<(), String> {
    if read(api).await.as_deref() == Some(bytes) {
        return Ok(());
    }
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(bytes.len() as u64);
    h.set_mode(0o755);
    h.set_cksum();
    tar.append_data(&mut h, "busybox", bytes)
        .map_err(|e| e.to_string())?;
    let tar = tar.into_inner().map_err(|e| e.to_string())?;
    api.upload("/v", tar).await.map_err(|e| e.to_string())?;
    match read(api).await.as_deref() == Some(bytes) {
        true => Ok(()),
        false => Err("the volume's busybox differs from this host's after filling it".into()),
    }
}

/// The bytes of `/v/busybox` in the helper (`None` when absent or unreadable).
async fn read(api: Api<'_>) -> Option<Vec<u8>> {
    let tar = api.download("/v/busybox").await.ok()?;
    let mut archive = tar::Archive::new(tar.as_slice());
    let mut entry = archive.entries().ok()?.next()?.ok()?;
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut entry, &mut out).ok()?;
    Some(out)
}
