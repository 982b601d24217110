//! Tar archives for `put` (host → container) and `get` (container → host), with
//! `docker cp`-like semantics: a directory's contents go INTO the destination directory.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::{CopyOut, Result, SandboxError};

/// The relative form (for an archive uploaded to `/`) of an absolute, normalised path.
pub(crate) fn rel_of(abs: &str) -> PathBuf {
    abs.split('/').filter(|c| !c.is_empty()).collect()
}

/// A header for `md` owned by root (the tar's owner becomes the file's owner).
fn header_for(md: &std::fs::Metadata) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_metadata_in_mode(md, tar::HeaderMode::Complete);
    h.set_uid(0);
    h.set_gid(0);
    let _ = h.set_username("root");
    let _ = h.set_groupname("root");
    h
}

/// Appends one host file, dir (entry only) or symlink under `name`.
fn append(b: &mut tar::Builder<Vec<u8>>, path: &Path, name: &Path) -> Result<()> {
    let md = std::fs::symlink_metadata(path)?;
    let mut h = header_for(&md);
    let ctx = |e: std::io::Error| SandboxError::Backend(format!("put: {}: {e}", path.display()));
    if md.file_type().is_symlink() {
        let target = std::fs::read_link(path)?;
        h.set_size(0);
        b.append_link(&mut h, name, target).map_err(ctx)?;
    } else if md.is_dir() {
        h.set_size(0);
        b.append_data(&mut h, name, std::io::empty()).map_err(ctx)?;
    } else if md.is_file() {
        let f = std::fs::File::open(path).map_err(ctx)?;
        b.append_data(&mut h, name, f.take(md.len())).map_err(ctx)?;
    }
    Ok(())
}

/// An archive placing a host file at `target` (relative to `/`).
pub(crate) fn file_archive(src: &Path, target: &Path) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    append(&mut b, src, target)?;
    Ok(b.into_inner()?)
}

/// An archive placing the CONTENTS of a host dir under `dest` (relative to `/`); `None`
/// when the dir is empty. `dest` itself gets no entry, so an existing dir keeps its mode
/// and a missing one is created by the engine (0755).
pub(crate) fn dir_archive(src: &Path, dest: &Path) -> Result<Option<Vec<u8>>> {
    let mut b = tar::Builder::new(Vec::new());
    let mut any = false;
    for entry in walkdir::WalkDir::new(src)
        .follow_links(false)
        .sort_by_file_name()
        .min_depth(1)
    {
        let entry =
            entry.map_err(|e| SandboxError::Backend(format!("put: {}: {e}", src.display())))?;
        let rel = entry
            .path()
            .strip_prefix(src)
            .map_err(|e| SandboxError::Backend(e.to_string()))?;
        append(&mut b, entry.path(), &dest.join(rel))?;
        any = true;
    }
    Ok(any.then(|| b.into_inner()).transpose()?)
}

/// Archive entries (dirs) created in every new container.
pub(crate) fn dirs_archive(dirs: &[(&str, u32)]) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, mode) in dirs {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(*mode);
        h.set_size(0);
        h.set_mtime(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        );
        b.append_data(&mut h, rel_of(path), std::io::empty())?;
    }
    Ok(b.into_inner()?)
}

/// The normal components of an archive path (`None` if it has `..` or is absolute).
fn normal_components(p: &Path) -> Option<Vec<PathBuf>> {
    let mut out = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(PathBuf::from(n)),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

/// Fails if a path between `base` (exclusive) and `target` (exclusive) is a symlink, so
/// an archive cannot write outside `base` through a link it created.
fn check_no_link(base: &Path, target: &Path) -> Result<()> {
    let mut p = target.parent();
    while let Some(dir) = p {
        if dir == base || !dir.starts_with(base) {
            break;
        }
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(SandboxError::Backend(format!(
                "get: refusing to write {} through the symlink {}",
                target.display(),
                dir.display()
            )));
        }
        p = dir.parent();
    }
    Ok(())
}

/// What a tar entry is, when it is neither a regular file nor a directory.
fn special_kind(t: tar::EntryType) -> Option<&'static str> {
    use tar::EntryType as E;
    match t {
        E::Regular | E::Continuous | E::Directory => None,
        E::Symlink => Some("symlink"),
        E::Link => Some("hard link"),
        E::Char => Some("character device"),
        E::Block => Some("block device"),
        E::Fifo => Some("FIFO"),
        _ => Some("special file"),
    }
}

/// Unpacks a `GET /archive` tar: a dir's contents into `dest` (created), a file to `dest`
/// (or into it when `dest` is an existing dir). Only regular files and directories are
/// written; links and special files are left out and named in the returned [`CopyOut`].
pub(crate) fn unpack(data: &[u8], src: &str, dest: &Path) -> Result<CopyOut> {
    let mut ar = tar::Archive::new(data);
    let mut root_is_dir: Option<bool> = None;
    let mut out = CopyOut::default();
    for entry in ar.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let Some(comps) = normal_components(&path) else {
            return Err(SandboxError::Backend(format!(
                "get: {src}: unsafe path {} in the archive",
                path.display()
            )));
        };
        let Some(first) = comps.first() else { continue };
        let kind = entry.header().entry_type();
        let is_dir = kind.is_dir();
        if let Some(what) = special_kind(kind) {
            let inside: PathBuf = comps[1..].iter().fold(PathBuf::from(src), |a, c| a.join(c));
            let link = entry
                .link_name()
                .ok()
                .flatten()
                .map(|l| format!(" to {}", l.display()))
                .unwrap_or_default();
            out.skipped
                .push(format!("{}: {what}{link} (not copied)", inside.display()));
            root_is_dir.get_or_insert(false);
            continue;
        }
        match root_is_dir {
            None => {
                root_is_dir = Some(is_dir);
                if is_dir {
                    std::fs::create_dir_all(dest)?;
                    continue;
                }
                let target = if dest.is_dir() {
                    dest.join(first)
                } else {
                    if let Some(p) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
                        std::fs::create_dir_all(p)?;
                    }
                    dest.to_path_buf()
                };
                entry.unpack(&target)?;
            }
            Some(false) => {
                return Err(SandboxError::Backend(format!(
                    "get: {src}: unexpected archive layout (a file followed by {})",
                    path.display()
                )))
            }
            Some(true) => {
                let target: PathBuf = comps[1..].iter().fold(dest.to_path_buf(), |a, c| a.join(c));
                if target == dest {
                    continue;
                }
                check_no_link(dest, &target)?;
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                entry.unpack(&target)?;
            }
        }
    }
    if root_is_dir.is_none() {
        return Err(SandboxError::Backend(format!(
            "get: {src}: the engine returned an empty archive"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rel_paths() {
        assert_eq!(rel_of("/tests"), PathBuf::from("tests"));
        assert_eq!(rel_of("/a/b/"), PathBuf::from("a/b"));
        assert_eq!(rel_of("/"), PathBuf::new());
    }

    #[test]
    fn dir_archive_round_trip_via_unpack() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir(src.path().join("sub")).unwrap();
        std::fs::write(src.path().join("sub/x.txt"), "x").unwrap();
        std::fs::write(src.path().join("top.sh"), "echo").unwrap();
        let data = dir_archive(src.path(), Path::new("verifier"))
            .unwrap()
            .unwrap();
        // A download of a dir starts with the dir's own entry; add one as the engine does.
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, "verifier", std::io::empty()).unwrap();
        let mut ar = tar::Archive::new(&data[..]);
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let p = e.path().unwrap().into_owned();
            let mut h = e.header().clone();
            let mut buf = Vec::new();
            e.read_to_end(&mut buf).unwrap();
            b.append_data(&mut h, p, &buf[..]).unwrap();
        }
        let full = b.into_inner().unwrap();
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("got");
        unpack(&full, "/logs/verifier", &dest).unwrap();
        assert_eq!(
            std::fs::read_to_string(dest.join("sub/x.txt")).unwrap(),
            "x"
        );
        assert_eq!(
            std::fs::read_to_string(dest.join("top.sh")).unwrap(),
            "echo"
        );
        assert!(
            dir_archive(tempfile::tempdir().unwrap().path(), Path::new("e"))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn unpack_refuses_parent_dirs() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, "d", std::io::empty()).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        // `append_data` rejects `..`, so write the name into the header directly.
        h.as_old_mut().name[..9].copy_from_slice(b"d/../evil");
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        let data = b.into_inner().unwrap();
        let out = tempfile::tempdir().unwrap();
        let err = unpack(&data, "/d", &out.path().join("d")).unwrap_err();
        assert!(err.to_string().contains("unsafe path"), "{err}");
        assert!(!out.path().join("evil").exists());
    }

    #[test]
    fn unpack_leaves_links_and_special_files_out() {
        let canary = tempfile::tempdir().unwrap();
        std::fs::write(canary.path().join("secret"), "host secret").unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, "verifier", std::io::empty()).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        let target = canary.path().join("secret");
        b.append_link(&mut h, "verifier/reward.txt", &target)
            .unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Fifo);
        h.set_size(0);
        h.set_mode(0o644);
        b.append_data(&mut h, "verifier/pipe", std::io::empty())
            .unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        h.set_mode(0o644);
        b.append_data(&mut h, "verifier/stdout.txt", &b"ok\n"[..])
            .unwrap();
        let data = b.into_inner().unwrap();
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("v");
        let got = unpack(&data, "/logs/verifier", &dest).unwrap();
        assert_eq!(
            std::fs::read_to_string(dest.join("stdout.txt")).unwrap(),
            "ok\n"
        );
        assert!(std::fs::symlink_metadata(dest.join("reward.txt")).is_err());
        assert!(std::fs::symlink_metadata(dest.join("pipe")).is_err());
        assert_eq!(got.skipped.len(), 2, "{got:?}");
        assert!(got.skipped[0].starts_with("/logs/verifier/reward.txt: symlink to "));
        assert!(got.skipped[1].contains("pipe: FIFO"), "{got:?}");
    }
}
