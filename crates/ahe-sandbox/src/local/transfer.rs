//! Host-side copies: Dockerfile COPY/ADD replay, `put` and `get`.

use std::path::Path;

use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::PathBuf;

use super::fsmap::{self, FsMap, Location};
use crate::{CopyOut, Result, SandboxError};

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
    let io = |e: io::Error| format!("{dest}: {e}");
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
    if let Some(o) = fs.owner {
        o.chown_copied(&top_dir, &dest_host).map_err(io)?;
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
        if let Some(o) = fs.owner {
            o.chown_copied(&top_dir, &target)?;
        }
        return Ok(());
    }
    if let Some(o) = fs.owner {
        o.chown_copied(&top_dir, &host)?;
    }
    Ok(())
}

/// Copies a sandbox file/dir out to the host (see [`crate::Sandbox::get`]): no link on the
/// way to `src` or below it is followed, and only regular files and directories are copied;
/// a read-only host path is copied only when anyone may read it (the sandbox could).
pub(crate) fn get_blocking(fs: &FsMap, src: &str, dest: &Path) -> Result<CopyOut> {
    let comps = fsmap::checked_components(src).map_err(SandboxError::Backend)?;
    let (host, public_only) = match fs.lexical(&comps) {
        Location::Writable(p) => (p, false),
        Location::ReadOnly(p) => (p, true),
        Location::Outside => {
            return Err(SandboxError::Backend(format!(
                "get: {src} is outside the sandbox's dirs ({})",
                writable_list(fs)
            )))
        }
    };
    let mut out = CopyOut::default();
    // A link on the way (`/app/x -> /etc` then `get /app/x/shadow`) is reported, not followed.
    let mut on_the_way = PathBuf::from("/");
    for c in &comps[..comps.len().saturating_sub(1)] {
        on_the_way.push(c);
        if let Some(p) = lexical_host(fs, &on_the_way) {
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
                out.skipped
                    .push(format!("{}: symlink (not followed)", on_the_way.display()));
                return Ok(out);
            }
        }
    }
    let md = std::fs::symlink_metadata(&host)
        .map_err(|e| SandboxError::Backend(format!("get: {src}: {e}")))?;
    let target = if md.is_dir() {
        dest.to_path_buf()
    } else if dest.is_dir() {
        dest.join(host.file_name().unwrap_or_default())
    } else {
        if let Some(p) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(p)?;
        }
        dest.to_path_buf()
    };
    copy_out(&host, &target, Path::new(src), public_only, &mut out)?;
    Ok(out)
}

/// The host path of a sandbox path, without following links.
fn lexical_host(fs: &FsMap, path: &Path) -> Option<PathBuf> {
    let comps = fsmap::checked_components(&path.to_string_lossy()).ok()?;
    match fs.lexical(&comps) {
        Location::Writable(p) | Location::ReadOnly(p) => Some(p),
        Location::Outside => None,
    }
}

/// What a non-regular, non-directory file is.
fn special_kind(ft: std::fs::FileType) -> &'static str {
    if ft.is_symlink() {
        "symlink"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "device"
    } else {
        "special file"
    }
}

/// Copies `src` (host path of the sandbox path `inside`) to `dst`: regular files (opened
/// with `O_NOFOLLOW | O_NONBLOCK`, so a link or FIFO swapped in meanwhile is refused, not
/// followed or waited on) and directories; the rest is recorded in `out`.
fn copy_out(
    src: &Path,
    dst: &Path,
    inside: &Path,
    public_only: bool,
    out: &mut CopyOut,
) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let md = std::fs::symlink_metadata(src)?;
    let ft = md.file_type();
    if ft.is_dir() {
        std::fs::create_dir_all(dst)?;
        for entry in std::fs::read_dir(src)? {
            let entry = entry?;
            let name = entry.file_name();
            copy_out(
                &entry.path(),
                &dst.join(&name),
                &inside.join(&name),
                public_only,
                out,
            )?;
        }
        return Ok(());
    }
    if !ft.is_file() {
        let link = match std::fs::read_link(src) {
            Ok(t) if ft.is_symlink() => format!(" to {}", t.display()),
            _ => String::new(),
        };
        let what = special_kind(ft);
        out.skipped
            .push(format!("{}: {what}{link} (not copied)", inside.display()));
        return Ok(());
    }
    if public_only && md.permissions().mode() & 0o004 == 0 {
        out.skipped.push(format!(
            "{}: not readable in the sandbox (not copied)",
            inside.display()
        ));
        return Ok(());
    }
    let mut from = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(src)?;
    if !from.metadata()?.is_file() {
        out.skipped.push(format!(
            "{}: changed while copied (not copied)",
            inside.display()
        ));
        return Ok(());
    }
    fsmap::remove_any(dst)?;
    let mut to = std::fs::File::create(dst)?;
    io::copy(&mut from, &mut to)?;
    Ok(())
}

/// The writable top-level dirs, for messages.
fn writable_list(fs: &FsMap) -> String {
    let v: Vec<String> = fs.writable.iter().map(|t| format!("/{t}")).collect();
    v.join(", ")
}
