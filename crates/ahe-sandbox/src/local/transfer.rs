//! Host-side copies: Dockerfile COPY/ADD replay, `put` and `get`.

use std::path::Path;

use super::fsmap::{self, FsMap, Location};
use crate::{Result, SandboxError};

/// The error text for a write into a host read-only dir.
pub(crate) fn read_only_msg(path: &str, top: &str) -> String {
    format!(
        "the local backend cannot write to {path}: /{top} is the host's, read-only; \
         use the docker backend for this task"
    )
}

/// Replays one COPY/ADD on the host side.
pub(crate) fn copy_step(
    fs: &FsMap,
    ctx: &Path,
    sources: &[String],
    dest: &str,
    dest_is_dir: bool,
    add: bool,
) -> std::result::Result<(), String> {
    let (resolved, loc) = fs.resolve(dest, true)?;
    let top = resolved.split('/').nth(1).unwrap_or_default().to_string();
    let dest_host = match loc {
        Location::Writable(p) => p,
        _ => return Err(read_only_msg(dest, if top.is_empty() { "/" } else { &top })),
    };
    let top_dir = fs.top_dir(&top);
    let io = |e: std::io::Error| format!("{dest}: {e}");
    for pattern in sources {
        for src in fsmap::expand_source(ctx, pattern)? {
            let md = std::fs::metadata(&src).map_err(|e| format!("{}: {e}", src.display()))?;
            let name = src
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if md.is_dir() {
                fsmap::ensure_dir(&top_dir, &dest_host).map_err(io)?;
                fsmap::copy_tree(&src, &dest_host, true).map_err(io)?;
            } else if add
                && [".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2"]
                    .iter()
                    .any(|x| name.ends_with(x))
            {
                fsmap::ensure_dir(&top_dir, &dest_host).map_err(io)?;
                let mut tar = std::process::Command::new("tar");
                tar.arg("-xf").arg(&src).arg("-C").arg(&dest_host);
                let child = {
                    let _fork = super::process::spawning();
                    tar.spawn()
                };
                let st = child
                    .and_then(|mut c| c.wait())
                    .map_err(|e| format!("tar: {e}"))?;
                if !st.success() {
                    return Err(format!("extracting {name} failed ({st})"));
                }
            } else {
                let into_dir =
                    dest_is_dir || std::fs::symlink_metadata(&dest_host).is_ok_and(|m| m.is_dir());
                let target = if into_dir {
                    fsmap::ensure_dir(&top_dir, &dest_host).map_err(io)?;
                    dest_host.join(&name)
                } else {
                    let parent = dest_host.parent().unwrap_or(&top_dir);
                    fsmap::ensure_dir(&top_dir, parent).map_err(io)?;
                    dest_host.clone()
                };
                fsmap::copy_tree(&src, &target, true).map_err(io)?;
            }
        }
    }
    Ok(())
}

/// Copies a host file/dir into a writable sandbox path (see [`crate::Sandbox::put`]).
pub(crate) fn put_blocking(fs: &FsMap, src: &Path, dest: &str) -> Result<()> {
    let (resolved, loc) = fs.resolve(dest, true).map_err(SandboxError::Backend)?;
    let Location::Writable(host) = loc else {
        return Err(SandboxError::Backend(format!(
            "put: {dest} is not inside a writable dir ({})",
            writable_list(fs)
        )));
    };
    let top_dir = fs.top_dir(resolved.split('/').nth(1).unwrap_or_default());
    let md = std::fs::metadata(src)
        .map_err(|e| SandboxError::Backend(format!("put: {}: {e}", src.display())))?;
    if md.is_dir() {
        fsmap::ensure_dir(&top_dir, &host)?;
        fsmap::copy_tree(src, &host, true)?;
    } else {
        let into =
            dest.ends_with('/') || std::fs::symlink_metadata(&host).is_ok_and(|m| m.is_dir());
        let target = if into {
            fsmap::ensure_dir(&top_dir, &host)?;
            host.join(src.file_name().unwrap_or_default())
        } else {
            fsmap::ensure_dir(&top_dir, host.parent().unwrap_or(&top_dir))?;
            host
        };
        fsmap::copy_tree(src, &target, true)?;
    }
    Ok(())
}

/// Copies a sandbox file/dir out to the host (see [`crate::Sandbox::get`]).
pub(crate) fn get_blocking(fs: &FsMap, src: &str, dest: &Path) -> Result<()> {
    let (_, loc) = fs.resolve(src, true).map_err(SandboxError::Backend)?;
    let host = match loc {
        Location::Writable(p) | Location::ReadOnly(p) => p,
        Location::Outside => {
            return Err(SandboxError::Backend(format!(
                "get: {src} is outside the sandbox's dirs ({})",
                writable_list(fs)
            )))
        }
    };
    let md = std::fs::symlink_metadata(&host)
        .map_err(|e| SandboxError::Backend(format!("get: {src}: {e}")))?;
    if md.is_dir() {
        std::fs::create_dir_all(dest)?;
        fsmap::copy_tree(&host, dest, false)?;
    } else {
        let target = if dest.is_dir() {
            dest.join(host.file_name().unwrap_or_default())
        } else {
            if let Some(p) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(p)?;
            }
            dest.to_path_buf()
        };
        fsmap::copy_tree(&host, &target, false)?;
    }
    Ok(())
}

/// The writable top-level dirs, for messages.
fn writable_list(fs: &FsMap) -> String {
    let v: Vec<String> = fs.writable.iter().map(|t| format!("/{t}")).collect();
    v.join(", ")
}
