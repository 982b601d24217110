//! The Engine API on one running container, by id: copies in and out through the archive
//! endpoints and the tar a `put` sends. The docker backend's sandboxes use it when their
//! keeper cannot; the harbor backend uses it (with [`super::exec::run`]) on the `main`
//! container of Harbor's docker environment, instead of a `docker compose cp` per copy.

use std::path::Path;

use bollard::query_parameters::{
    ContainerArchiveInfoOptionsBuilder, DownloadFromContainerOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;

use super::{api_err, files, status_of};
use crate::{Result, SandboxError};

/// One container on one engine (borrowed: the sandbox that owns it keeps both).
#[derive(Clone, Copy)]
pub(crate) struct Api<'a> {
    /// The engine's client.
    pub docker: &'a Docker,
    /// The container's id (or name).
    pub id: &'a str,
}

impl Api<'_> {
    /// Extracts a tar archive at `path` inside the container.
    pub async fn upload(&self, path: &str, tar: Vec<u8>) -> Result<()> {
        let opts = UploadToContainerOptionsBuilder::default()
            .path(path)
            .build();
        self.docker
            .upload_to_container(self.id, Some(opts), bollard::body_full(tar.into()))
            .await
            .map_err(|e| api_err(&format!("copying into {path}"), e))
    }

    /// A tar of `path` through the archive API.
    pub async fn download(&self, path: &str) -> Result<Vec<u8>> {
        let opts = DownloadFromContainerOptionsBuilder::default()
            .path(path)
            .build();
        let mut stream = self.docker.download_from_container(self.id, Some(opts));
        let mut data = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => data.extend_from_slice(&b),
                Err(e) if status_of(&e) == Some(404) => {
                    return Err(SandboxError::Backend(format!(
                        "get: {path}: no such file or directory in the sandbox"
                    )))
                }
                Err(e) => return Err(api_err(&format!("get: {path}"), e)),
            }
        }
        Ok(data)
    }

    /// Whether `path` is an existing directory inside the container.
    pub async fn is_dir(&self, path: &str) -> Result<bool> {
        let opts = ContainerArchiveInfoOptionsBuilder::default()
            .path(path)
            .build();
        match self
            .docker
            .get_container_archive_info(self.id, Some(opts))
            .await
        {
            Ok(stat) => Ok(stat.file_mode & (1 << 31) != 0),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(api_err(&format!("stat {path}"), e)),
        }
    }

    /// The archive (to upload at `/`) that a `put` of host `src` to `dest` (as asked; absolute
    /// and normalised: `dest_abs`) sends, with `docker cp` semantics: a directory's contents
    /// go into `dest`, a file into `dest` when it is a directory or ends in `/`. `None`: `src`
    /// is an empty directory (the caller makes `dest`).
    pub async fn put_archive(
        &self,
        src: &Path,
        dest: &str,
        dest_abs: &str,
    ) -> Result<Option<Vec<u8>>> {
        let md = std::fs::metadata(src)
            .map_err(|e| SandboxError::Backend(format!("put: {}: {e}", src.display())))?;
        let src = src.to_path_buf();
        if md.is_dir() {
            let rel = files::rel_of(dest_abs);
            return blocking(move || files::dir_archive(&src, &rel)).await;
        }
        let into = dest.ends_with('/') || self.is_dir(dest_abs).await?;
        let target = if into {
            files::rel_of(dest_abs).join(src.file_name().unwrap_or_default())
        } else {
            files::rel_of(dest_abs)
        };
        blocking(move || files::file_archive(&src, &target).map(Some)).await
    }
}

/// Runs blocking file work off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SandboxError::Backend(format!("blocking task failed: {e}")))?
}
