//! Build contexts: the files of a task's `environment/` as docker sends them (minus what
//! `.dockerignore` leaves out), their content hash and their tar archive.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{Result, SandboxError};

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
