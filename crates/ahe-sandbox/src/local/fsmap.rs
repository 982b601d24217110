//! Mapping of sandbox paths to host paths, sandbox-aware symlink resolution, host-side copies.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Top-level host entries bound read-only into the sandbox (when present on the host).
pub(crate) const RO_CANDIDATES: &[&str] = &[
    "usr", "etc", "opt", "var", "srv", "bin", "sbin", "lib", "lib64", "lib32", "libx32",
];

/// Top-level names that are never writable (kernel file systems).
pub(crate) const RESERVED: &[&str] = &["proc", "dev", "sys"];

/// Writable top-level dirs every sandbox has.
pub(crate) const DEFAULT_WRITABLE: &[&str] = &["app", "logs", "tests", "solution", "tmp", "root"];

/// A host top-level entry bound read-only into the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RoEntry {
    /// A directory bound with `--ro-bind` (name without the leading `/`).
    Dir(String),
    /// A symlink replicated with `--symlink target /name`.
    Symlink {
        /// Name without the leading `/`.
        name: String,
        /// The link target as on the host.
        target: String,
    },
}

impl RoEntry {
    /// The entry's top-level name.
    pub(crate) fn name(&self) -> &str {
        match self {
            RoEntry::Dir(n) | RoEntry::Symlink { name: n, .. } => n,
        }
    }
}

/// Scans the host's `/` for the read-only entries to bind.
pub(crate) fn scan_host_ro() -> Vec<RoEntry> {
    let mut out = Vec::new();
    for name in RO_CANDIDATES {
        let p = Path::new("/").join(name);
        let Ok(md) = fs::symlink_metadata(&p) else {
            continue;
        };
        if md.file_type().is_symlink() {
            if let Ok(t) = fs::read_link(&p) {
                out.push(RoEntry::Symlink {
                    name: name.to_string(),
                    target: t.to_string_lossy().into_owned(),
                });
            }
        } else if md.is_dir() {
            out.push(RoEntry::Dir(name.to_string()));
        }
    }
    out
}

/// Where a sandbox path lives on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// Inside a writable dir: the mapped host path.
    Writable(PathBuf),
    /// Inside a host entry bound read-only: the host path.
    ReadOnly(PathBuf),
    /// Neither (the sandbox root, `/proc`, an unknown top-level dir).
    Outside,
}

/// The sandbox's view of the file system.
#[derive(Debug, Clone)]
pub(crate) struct FsMap {
    /// `<trial dir>/fs`, holding one dir per writable top-level name.
    pub(crate) root: PathBuf,
    /// Writable top-level names.
    pub(crate) writable: BTreeSet<String>,
    /// Read-only host entries.
    pub(crate) ro: Vec<RoEntry>,
    /// The unprivileged host identity the sandbox runs as (files copied in are given to it).
    pub(crate) owner: Option<super::owner::Owner>,
}

impl FsMap {
    /// The host dir backing the writable top-level `name`.
    pub(crate) fn top_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The writable dirs and the host's read-only dirs below them, as a [`crate::Layer`].
    pub(crate) fn layer(&self, path_env: &str) -> crate::Layer {
        crate::Layer {
            upper: self
                .writable
                .iter()
                .map(|t| (format!("/{t}"), self.top_dir(t)))
                .collect(),
            lower: vec![PathBuf::from("/")],
            lower_tops: Some(self.ro.iter().map(|e| e.name().to_string()).collect()),
            overlay: false,
            path_env: path_env.to_string(),
            image_paths: None,
        }
    }

    /// Whether `name` is a read-only host entry.
    pub(crate) fn is_ro(&self, name: &str) -> bool {
        self.ro.iter().any(|e| e.name() == name)
    }

    /// Maps normalised components lexically (no symlink resolution).
    pub(crate) fn lexical(&self, comps: &[String]) -> Location {
        let Some(top) = comps.first() else {
            return Location::Outside;
        };
        let mut host = if self.writable.contains(top) {
            self.top_dir(top)
        } else if self.is_ro(top) {
            Path::new("/").join(top)
        } else {
            return Location::Outside;
        };
        host.extend(&comps[1..]);
        if self.writable.contains(top) {
            Location::Writable(host)
        } else {
            Location::ReadOnly(host)
        }
    }

    /// Resolves an absolute sandbox path, following symlinks with sandbox semantics
    /// (absolute link targets restart at the sandbox root). `follow_last` also follows the
    /// final component. Returns the resolved sandbox path and where it lives on the host.
    pub(crate) fn resolve(
        &self,
        path: &str,
        follow_last: bool,
    ) -> Result<(String, Location), String> {
        let comps = checked_components(path)?;
        let mut todo: std::collections::VecDeque<String> = comps.into();
        let mut cur: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(c) = todo.pop_front() {
            match c.as_str() {
                "" | "." => continue,
                ".." => {
                    cur.pop();
                    continue;
                }
                _ => cur.push(c),
            }
            if todo.is_empty() && !follow_last {
                break;
            }
            let host = match self.lexical(&cur) {
                Location::Writable(p) | Location::ReadOnly(p) => p,
                Location::Outside => continue,
            };
            let Ok(md) = fs::symlink_metadata(&host) else {
                continue;
            };
            if !md.file_type().is_symlink() {
                continue;
            }
            hops += 1;
            if hops > 40 {
                return Err(format!("{path}: too many levels of symbolic links"));
            }
            let target = fs::read_link(&host).map_err(|e| format!("{path}: {e}"))?;
            let target = target.to_string_lossy().into_owned();
            cur.pop();
            if target.starts_with('/') {
                cur.clear();
            }
            for (i, t) in target.split('/').enumerate() {
                todo.insert(i, t.to_string());
            }
        }
        let loc = self.lexical(&cur);
        Ok((format!("/{}", cur.join("/")), loc))
    }
}

/// Splits an absolute sandbox path into components, rejecting `..` and relative paths.
pub(crate) fn checked_components(path: &str) -> Result<Vec<String>, String> {
    if !path.starts_with('/') {
        return Err(format!("{path:?} is not an absolute path"));
    }
    let comps: Vec<String> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(String::from)
        .collect();
    if comps.iter().any(|c| c == "..") {
        return Err(format!("{path:?} contains `..`"));
    }
    Ok(comps)
}

/// Removes `p` if it exists and is not a real directory (a file or a symlink).
fn clear_non_dir(p: &Path) -> io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(md) if md.is_dir() => Ok(()),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates `dir` and its parents without following symlinks inside `base`'s subtree
/// (a symlink or file in the way is replaced by a directory).
pub(crate) fn ensure_dir(base: &Path, dir: &Path) -> io::Result<()> {
    let rel = dir.strip_prefix(base).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is outside {}", dir.display(), base.display()),
        )
    })?;
    let mut cur = base.to_path_buf();
    for c in rel.components() {
        cur.push(c);
        clear_non_dir(&cur)?;
        match fs::create_dir(&cur) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Copies `src` to `dst` so that `dst` becomes a copy of it: a directory's contents are
/// merged into `dst`, nested symlinks are copied as symlinks (never followed), modes are
/// kept. `follow_top` follows `src` itself when it is a symlink.
pub(crate) fn copy_tree(src: &Path, dst: &Path, follow_top: bool) -> io::Result<()> {
    let md = if follow_top {
        fs::metadata(src)?
    } else {
        fs::symlink_metadata(src)?
    };
    if md.file_type().is_symlink() {
        remove_any(dst)?;
        std::os::unix::fs::symlink(fs::read_link(src)?, dst)?;
    } else if md.is_dir() {
        clear_non_dir(dst)?;
        let created = match fs::create_dir(dst) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(e),
        };
        for entry in fs::read_dir(src)? {
            let entry = entry?;
            copy_tree(&entry.path(), &dst.join(entry.file_name()), false)?;
        }
        // Like Docker, an existing destination dir keeps its mode.
        if created {
            fs::set_permissions(dst, md.permissions())?;
        }
    } else {
        match fs::symlink_metadata(dst) {
            Ok(d) if d.is_dir() => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("cannot overwrite directory {} with a file", dst.display()),
                ))
            }
            Ok(d) if d.file_type().is_symlink() => fs::remove_file(dst)?,
            _ => {}
        }
        // No fork may hold the file open for writing when a sandbox executes it.
        let _write = super::process::writing();
        fs::copy(src, dst)?;
    }
    Ok(())
}

/// Removes a file, symlink or directory tree; a missing path is fine.
pub(crate) fn remove_any(p: &Path) -> io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(md) if md.is_dir() => remove_tree(p),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// `remove_dir_all` that tolerates a missing dir and retries after making dirs writable
/// (a sandboxed command may have left `chmod 000` dirs behind).
pub(crate) fn remove_tree(p: &Path) -> io::Result<()> {
    match fs::remove_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            use std::os::unix::fs::PermissionsExt;
            for entry in walkdir::WalkDir::new(p).into_iter().flatten() {
                if entry.file_type().is_dir() {
                    let _ = fs::set_permissions(entry.path(), fs::Permissions::from_mode(0o700));
                }
            }
            match fs::remove_dir_all(p) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        }
    }
}

/// Matches a file name against a pattern with `*` and `?` wildcards.
pub(crate) fn wildcard_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Expands a COPY source (relative to `context`, wildcards allowed in any component) into
/// existing host paths, refusing anything that escapes the context.
pub(crate) fn expand_source(context: &Path, source: &str) -> Result<Vec<PathBuf>, String> {
    let ctx = context
        .canonicalize()
        .map_err(|e| format!("context {}: {e}", context.display()))?;
    let mut paths = vec![ctx.clone()];
    for comp in source.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if comp == ".." {
            return Err(format!("source {source:?} escapes the build context"));
        }
        let mut next = Vec::new();
        for p in &paths {
            if comp.contains(['*', '?']) {
                let Ok(rd) = fs::read_dir(p) else { continue };
                let mut names: Vec<_> = rd
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| wildcard_match(comp, n))
                    .collect();
                names.sort();
                next.extend(names.into_iter().map(|n| p.join(n)));
            } else if fs::symlink_metadata(p.join(comp)).is_ok() {
                next.push(p.join(comp));
            }
        }
        paths = next;
    }
    for p in &paths {
        let real = p
            .canonicalize()
            .map_err(|e| format!("{}: {e}", p.display()))?;
        if !real.starts_with(&ctx) {
            return Err(format!("source {source:?} escapes the build context"));
        }
    }
    if paths.is_empty() {
        return Err(format!(
            "source {source:?} not found in {}",
            context.display()
        ));
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(root: &Path) -> FsMap {
        FsMap {
            root: root.to_path_buf(),
            writable: ["app", "tmp"].iter().map(|s| s.to_string()).collect(),
            owner: None,
            ro: vec![
                RoEntry::Dir("etc".into()),
                RoEntry::Symlink {
                    name: "bin".into(),
                    target: "usr/bin".into(),
                },
            ],
        }
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*.txt", "a.txt"));
        assert!(wildcard_match("a?c*", "abcdef"));
        assert!(!wildcard_match("*.txt", "a.txt.bak"));
        assert!(!wildcard_match("a?c", "ac"));
        assert!(wildcard_match("*", ""));
    }

    #[test]
    fn resolve_maps_and_follows_links_inside_the_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let m = map(dir.path());
        fs::create_dir_all(dir.path().join("app/sub")).unwrap();
        fs::create_dir_all(dir.path().join("tmp")).unwrap();
        std::os::unix::fs::symlink("/tmp", dir.path().join("app/abs")).unwrap();
        std::os::unix::fs::symlink("sub", dir.path().join("app/rel")).unwrap();
        std::os::unix::fs::symlink("/app/loop", dir.path().join("app/loop")).unwrap();
        let w = |p: &str| Location::Writable(dir.path().join(p));
        assert_eq!(
            m.resolve("/app/abs/x", true).unwrap(),
            ("/tmp/x".into(), w("tmp/x"))
        );
        assert_eq!(
            m.resolve("/app/rel/x", true).unwrap(),
            ("/app/sub/x".into(), w("app/sub/x"))
        );
        assert_eq!(m.resolve("/app/abs", false).unwrap().1, w("app/abs"));
        assert_eq!(
            m.resolve("/etc/hostname", true).unwrap().1,
            Location::ReadOnly("/etc/hostname".into())
        );
        assert_eq!(m.resolve("/", true).unwrap().1, Location::Outside);
        assert_eq!(m.resolve("/proc/1", true).unwrap().1, Location::Outside);
        assert!(m
            .resolve("/app/loop", true)
            .unwrap_err()
            .contains("symbolic links"));
        assert!(m.resolve("/app/../etc", true).unwrap_err().contains(".."));
        assert!(m.resolve("app", true).is_err());
    }

    #[test]
    fn expand_source_refuses_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = dir.path().join("ctx");
        fs::create_dir_all(ctx.join("d")).unwrap();
        fs::write(ctx.join("d/a.txt"), "a").unwrap();
        fs::write(ctx.join("d/b.txt"), "b").unwrap();
        fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink("../secret", ctx.join("link")).unwrap();
        let got = expand_source(&ctx, "d/*.txt").unwrap();
        assert_eq!(got.len(), 2);
        assert!(got[0].ends_with("d/a.txt") && got[1].ends_with("d/b.txt"));
        assert!(expand_source(&ctx, "../secret")
            .unwrap_err()
            .contains("escapes"));
        assert!(expand_source(&ctx, "link").unwrap_err().contains("escapes"));
        assert!(expand_source(&ctx, "nope")
            .unwrap_err()
            .contains("not found"));
    }

    #[test]
    fn copy_tree_replaces_symlinks_instead_of_following_them() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        let dst = dir.path().join("dst");
        fs::create_dir(&dst).unwrap();
        std::os::unix::fs::symlink(&outside, dst.join("sub")).unwrap();
        let src = dir.path().join("src");
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("sub/f"), "f").unwrap();
        copy_tree(&src, &dst, true).unwrap();
        assert!(
            dst.join("sub").is_dir()
                && !fs::symlink_metadata(dst.join("sub"))
                    .unwrap()
                    .file_type()
                    .is_symlink()
        );
        assert_eq!(fs::read_to_string(dst.join("sub/f")).unwrap(), "f");
        assert!(!outside.join("f").exists(), "wrote through a symlink");
    }
}
