//! The jail of the host-side agents (debugger, evolve): named roots opened with cap-std, so
//! `..`, absolute paths and symlinks that leave a root are refused by construction.
//! Writes never touch git metadata (`.git` anywhere, `.gitignore`, `.gitattributes`,
//! `.gitmodules`) and stay under the root's size caps.

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use ahe_runner::repo::caps::{is_git_meta, WriteCaps, GIT_FILES};

/// Total size of the regular files under `dir`, skipping `.git` entries (symlinks are not
/// followed and count as nothing).
fn tree_bytes(dir: &Dir) -> u64 {
    let Ok(rd) = dir.entries() else {
        return 0;
    };
    let mut total = 0;
    for e in rd.flatten() {
        let Ok(ty) = e.file_type() else { continue };
        if ty.is_dir() {
            if !e.file_name().eq_ignore_ascii_case(".git") {
                if let Ok(sub) = e.open_dir() {
                    total += tree_bytes(&sub);
                }
            }
        } else if ty.is_file() {
            total += e.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    total
}

/// Which paths inside a root are allowed.
pub type Filter = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// One named root of the jail (`harness/`, `analysis/`, ...).
struct Root {
    name: String,
    dir: Dir,
    writable: bool,
    allow: Filter,
    caps: Option<WriteCaps>,
}

/// A set of roots addressed as `<root>/<relative path>`.
#[derive(Default)]
pub struct Jail {
    roots: Vec<Root>,
}

impl Jail {
    /// An empty jail.
    pub fn new() -> Self {
        Jail::default()
    }

    /// Adds a root; `allow` decides which relative paths inside it may be touched.
    pub fn root(
        mut self,
        name: &str,
        path: &std::path::Path,
        writable: bool,
        allow: Filter,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(path)?;
        let dir = Dir::open_ambient_dir(path, ambient_authority())
            .map_err(|e| anyhow::anyhow!("jail root {name}: {}: {e}", path.display()))?;
        self.roots.push(Root {
            name: name.into(),
            dir,
            writable,
            allow,
            caps: None,
        });
        Ok(self)
    }

    /// Sets the size caps of the root added last.
    pub fn caps(mut self, caps: WriteCaps) -> Self {
        if let Some(r) = self.roots.last_mut() {
            r.caps = Some(caps);
        }
        self
    }

    /// Names of the roots.
    pub fn root_names(&self) -> Vec<&str> {
        self.roots.iter().map(|r| r.name.as_str()).collect()
    }

    fn resolve(&self, vpath: &str, write: bool) -> Result<(&Root, String), String> {
        let v = vpath.trim();
        if v.starts_with('/') {
            return Err(format!(
                "{v}: absolute paths are not allowed; use one of {}",
                self.root_names().join("/, ") + "/"
            ));
        }
        let v = v.trim_start_matches("./");
        let (first, rest) = v.split_once('/').unwrap_or((v, ""));
        let root = self.roots.iter().find(|r| r.name == first).ok_or_else(|| {
            format!(
                "{v}: outside the jail; paths start with one of {}",
                self.root_names().join("/, ") + "/"
            )
        })?;
        if rest.split('/').any(|c| c == "..") {
            return Err(format!("{v}: `..` is not allowed"));
        }
        let rest = rest.trim_end_matches('/').to_string();
        if write && !root.writable {
            return Err(format!("{v}: {first}/ is read-only"));
        }
        if write && is_git_meta(&rest) {
            return Err(format!(
                "{v}: refused: git metadata (`.git` anywhere, {}) is never written; every \
                 harness file is committed as it is, so nothing can be ignored, nested or \
                 re-attributed. Write the file under its own name without such a path.",
                GIT_FILES.join(", ")
            ));
        }
        if !rest.is_empty() && !(root.allow)(&rest) {
            return Err(format!("{v}: not allowed here"));
        }
        Ok((root, rest))
    }

    /// Reads a file.
    pub fn read(&self, vpath: &str) -> Result<String, String> {
        let (root, rel) = self.resolve(vpath, false)?;
        root.dir
            .read_to_string(&rel)
            .map_err(|e| format!("{vpath}: {e}"))
    }

    /// Lists a directory (entries end with `/` when they are directories).
    pub fn list(&self, vpath: &str) -> Result<Vec<String>, String> {
        if vpath.trim().trim_matches('/').is_empty() || vpath.trim() == "." {
            return Ok(self.roots.iter().map(|r| format!("{}/", r.name)).collect());
        }
        let (root, rel) = self.resolve(vpath, false)?;
        let rd = if rel.is_empty() {
            root.dir.entries()
        } else {
            root.dir.read_dir(&rel)
        };
        let mut out: Vec<String> = rd
            .map_err(|e| format!("{vpath}: {e}"))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let child = if rel.is_empty() {
                    name.clone()
                } else {
                    format!("{rel}/{name}")
                };
                if !(root.allow)(&child) {
                    return None;
                }
                let dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                Some(if dir { format!("{name}/") } else { name })
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Writes a file (creating parent directories).
    pub fn write(&self, vpath: &str, content: &str) -> Result<(), String> {
        let (root, rel) = self.resolve(vpath, true)?;
        if rel.is_empty() {
            return Err(format!("{vpath}: not a file path"));
        }
        if let Some(caps) = root.caps {
            check_caps(root, &rel, content.len() as u64, caps)
                .map_err(|e| format!("{vpath}: {e}"))?;
        }
        if let Some((parent, _)) = rel.rsplit_once('/') {
            root.dir
                .create_dir_all(parent)
                .map_err(|e| format!("{vpath}: {e}"))?;
        }
        root.dir
            .write(&rel, content)
            .map_err(|e| format!("{vpath}: {e}"))
    }

    /// Deletes a file.
    pub fn remove(&self, vpath: &str) -> Result<(), String> {
        let (root, rel) = self.resolve(vpath, true)?;
        root.dir
            .remove_file(&rel)
            .map_err(|e| format!("{vpath}: {e}"))
    }
}

/// Refuses a write of `len` bytes to `rel` that would break the root's caps.
fn check_caps(root: &Root, rel: &str, len: u64, caps: WriteCaps) -> Result<(), String> {
    if len > caps.max_file_bytes {
        return Err(format!(
            "refused: the file would be {len} bytes; limit {} (config [evolve] max_file_bytes). \
             Keep it short: summarise, or keep only what the agent needs.",
            caps.max_file_bytes
        ));
    }
    let old = root
        .dir
        .symlink_metadata(rel)
        .ok()
        .filter(|m| m.is_file())
        .map_or(0, |m| m.len());
    let total = tree_bytes(&root.dir).saturating_sub(old) + len;
    if total > caps.max_total_bytes {
        return Err(format!(
            "refused: the {} would be {total} bytes; limit {} (config [evolve] \
             max_harness_bytes). Shorten or delete other files first.",
            root.name, caps.max_total_bytes
        ));
    }
    Ok(())
}

/// A filter allowing everything.
pub fn any() -> Filter {
    Box::new(|_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_escapes_and_readonly_writes() {
        let d = tempfile::tempdir().unwrap();
        let h = d.path().join("run/harness");
        let a = d.path().join("run/analysis");
        std::fs::create_dir_all(h.join("memory")).unwrap();
        std::fs::create_dir_all(&a).unwrap();
        std::fs::write(d.path().join("run/run.toml"), "secret").unwrap();
        std::fs::write(a.join("overview.md"), "ov").unwrap();
        std::os::unix::fs::symlink(d.path().join("run/run.toml"), h.join("memory/link.md"))
            .unwrap();
        std::os::unix::fs::symlink("/etc/hostname", h.join("memory/abs.md")).unwrap();
        let jail = Jail::new()
            .root(
                "harness",
                &h,
                true,
                Box::new(ahe_rundir::manifest::is_editable),
            )
            .unwrap()
            .root("analysis", &a, false, any())
            .unwrap();
        assert_eq!(jail.read("analysis/overview.md").unwrap(), "ov");
        jail.write("harness/memory/MEMORY.md", "hint").unwrap();
        assert_eq!(
            std::fs::read_to_string(h.join("memory/MEMORY.md")).unwrap(),
            "hint"
        );
        for bad in [
            "../run.toml",
            "harness/../run.toml",
            "/etc/passwd",
            "harness/memory/../../run.toml",
        ] {
            assert!(jail.read(bad).is_err(), "{bad}");
            assert!(jail.write(bad, "x").is_err(), "{bad}");
        }
        assert!(
            jail.read("harness/memory/link.md").is_err(),
            "symlink out of the root"
        );
        assert!(
            jail.read("harness/memory/abs.md").is_err(),
            "absolute symlink"
        );
        assert!(jail.write("harness/memory/link.md", "x").is_err());
        assert_eq!(
            std::fs::read_to_string(d.path().join("run/run.toml")).unwrap(),
            "secret"
        );
        assert!(jail
            .write("analysis/overview.md", "x")
            .unwrap_err()
            .contains("read-only"));
        assert!(jail
            .write("harness/run.toml", "x")
            .unwrap_err()
            .contains("not allowed"));
        assert!(jail.write("harness/.git/config", "x").is_err());
        assert_eq!(jail.list("").unwrap(), vec!["harness/", "analysis/"]);
        assert_eq!(jail.list("analysis").unwrap(), vec!["overview.md"]);
    }

    #[test]
    fn refuses_git_metadata_anywhere() {
        let d = tempfile::tempdir().unwrap();
        let h = d.path().join("harness");
        let jail = Jail::new()
            .root(
                "harness",
                &h,
                true,
                Box::new(ahe_rundir::manifest::is_editable),
            )
            .unwrap();
        for bad in [
            "harness/tools/.gitignore",
            "harness/memory/.gitattributes",
            "harness/skills/.gitmodules",
            "harness/memory/.git/config",
            "harness/memory/.git",
            "harness/memory/sub/.GIT/hooks/x",
            "harness/memory/./.git/config",
            "harness/tools/.GitIgnore",
        ] {
            let e = jail.write(bad, "x").unwrap_err();
            assert!(
                e.contains("git metadata") && e.contains(".gitignore"),
                "{bad}: {e}"
            );
            assert!(
                jail.remove(bad).unwrap_err().contains("git metadata"),
                "{bad}"
            );
        }
        assert!(!h.join("memory/.git").exists() && !h.join("tools/.gitignore").exists());
        jail.write("harness/memory/git-notes.md", "ok").unwrap();
        jail.write("harness/tools/x.gitignore.md", "ok").unwrap();
    }

    #[test]
    fn size_caps_refuse_with_the_numbers_and_the_config_key() {
        let d = tempfile::tempdir().unwrap();
        let h = d.path().join("harness");
        std::fs::create_dir_all(h.join(".git")).unwrap();
        std::fs::write(h.join(".git/pack"), vec![b'x'; 5000]).unwrap();
        let caps = WriteCaps {
            max_file_bytes: 100,
            max_total_bytes: 250,
        };
        let jail = Jail::new()
            .root(
                "harness",
                &h,
                true,
                Box::new(ahe_rundir::manifest::is_editable),
            )
            .unwrap()
            .caps(caps);
        let e = jail
            .write("harness/memory/big.md", &"y".repeat(101))
            .unwrap_err();
        assert!(
            e.contains("would be 101 bytes; limit 100 (config [evolve] max_file_bytes)"),
            "{e}"
        );
        assert!(!h.join("memory/big.md").exists());
        jail.write("harness/memory/a.md", &"a".repeat(100)).unwrap();
        jail.write("harness/memory/b.md", &"b".repeat(100)).unwrap();
        // The repository's own .git does not count; 200 + 51 would pass the total.
        let e = jail
            .write("harness/memory/c.md", &"c".repeat(51))
            .unwrap_err();
        assert!(
            e.contains("would be 251 bytes; limit 250 (config [evolve] max_harness_bytes)"),
            "{e}"
        );
        jail.write("harness/memory/c.md", &"c".repeat(50)).unwrap();
        // Rewriting a file counts its new size, not old + new.
        jail.write("harness/memory/a.md", &"a".repeat(90)).unwrap();
        assert_eq!(
            std::fs::read_to_string(h.join("memory/a.md"))
                .unwrap()
                .len(),
            90
        );
    }
}
