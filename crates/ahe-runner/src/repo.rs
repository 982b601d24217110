//! The run's harness git repository (git2) — commits, tags, diffs, rollback, replay.

pub mod caps;
pub mod revert;
pub mod worktree;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use git2::{IndexAddOption, ObjectType, Oid, Repository, Signature};

use caps::{is_git_meta, WriteCaps};

/// The git repository of a run's harness (`runs/<run>/harness/`).
pub struct HarnessRepo {
    repo: Repository,
    dir: PathBuf,
}

/// The tag of an iteration's harness (`iter-000` is the seed).
pub fn iter_tag(i: u32) -> String {
    format!("iter-{i:03}")
}

fn sig() -> Signature<'static> {
    Signature::now("ahe", "ahe@localhost").expect("static signature")
}

impl HarnessRepo {
    /// Creates the repository from a seed harness: copy, commit, tag `iter-000`.
    pub fn init(dir: &Path, seed: &Path) -> anyhow::Result<HarnessRepo> {
        copy_tree(seed, dir)
            .with_context(|| format!("copying seed {} to {}", seed.display(), dir.display()))?;
        let repo = Repository::init(dir)?;
        let r = HarnessRepo {
            repo,
            dir: dir.to_path_buf(),
        };
        r.commit_all("iter-000: seed harness", &iter_tag(0))?;
        Ok(r)
    }

    /// Removes the lock files (`index.lock`, `HEAD.lock`, `refs/**/*.lock`, …) a process killed
    /// in the middle of a git write left in `dir/.git`; returns what it removed. Only for a
    /// caller holding the run's exclusive lock: no other writer of this repository can be alive.
    pub fn clear_stale_locks(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
        fn walk(d: &Path, depth: u32, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
            let Ok(rd) = std::fs::read_dir(d) else {
                return Ok(());
            };
            for e in rd {
                let e = e?;
                let ty = e.file_type()?;
                let p = e.path();
                if ty.is_dir() && depth < 8 && e.file_name() != "objects" {
                    walk(&p, depth + 1, out)?;
                } else if ty.is_file() && p.extension().is_some_and(|x| x == "lock") {
                    std::fs::remove_file(&p)?;
                    out.push(p);
                }
            }
            Ok(())
        }
        let mut out = Vec::new();
        let git = dir.join(".git");
        walk(&git, 0, &mut out)
            .with_context(|| format!("clearing stale locks in {}", git.display()))?;
        Ok(out)
    }

    /// Opens an existing harness repository.
    pub fn open(dir: &Path) -> anyhow::Result<HarnessRepo> {
        let repo = Repository::open(dir)
            .with_context(|| format!("opening harness repo {}", dir.display()))?;
        Ok(HarnessRepo {
            repo,
            dir: dir.to_path_buf(),
        })
    }

    /// The underlying git2 repository (for the change-level plumbing in `revert.rs`).
    pub(crate) fn git(&self) -> &Repository {
        &self.repo
    }

    /// The working tree directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Commit id of HEAD.
    pub fn head(&self) -> anyhow::Result<String> {
        Ok(self.repo.head()?.peel_to_commit()?.id().to_string())
    }

    /// Resolves `best`, `iter-NNN`, a tag, or a (prefix of a) commit id to a full commit id.
    pub fn resolve(&self, rev: &str) -> anyhow::Result<String> {
        let obj = self.repo.revparse_single(rev).map_err(|_| {
            anyhow!("no harness revision {rev:?} (use best, iter-NNN or a commit id)")
        })?;
        Ok(obj.peel_to_commit()?.id().to_string())
    }

    /// Whether a tag exists.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.repo
            .revparse_single(&format!("refs/tags/{tag}"))
            .is_ok()
    }

    /// Stages every file of the working tree (ignore rules do not apply: `.gitignore`,
    /// `info/exclude` and `core.excludesFile` cannot hide a file), commits and tags.
    /// Git metadata below the root is removed first (see [`HarnessRepo::scrub_git_meta`]).
    /// Idempotent, also after a kill -9 inside this call: an existing tag returns its commit
    /// (and moves HEAD there if the kill came before HEAD moved), and an untagged HEAD whose
    /// message starts with `<tag>:` is tagged rather than committed again.
    pub fn commit_all(&self, message: &str, tag: &str) -> anyhow::Result<String> {
        if self.has_tag(tag) {
            let id = self.resolve(tag)?;
            let c = self.repo.find_commit(Oid::from_str(&id)?)?;
            let head = self.repo.head().ok().and_then(|h| h.target());
            // HEAD one commit behind the tag, or unborn with the tag a root commit (the seed,
            // killed before its branch was written): finish moving it.
            let behind = head.is_some() && head != Some(c.id()) && c.parent_id(0).ok() == head;
            if behind || (head.is_none() && c.parent_count() == 0) {
                self.move_head(&c)?;
            }
            return Ok(id);
        }
        if let Some(h) = self.repo.head().ok().and_then(|h| h.peel_to_commit().ok()) {
            if h.summary()
                .is_some_and(|m| m.starts_with(&format!("{tag}:")))
            {
                self.repo.tag_lightweight(tag, h.as_object(), false)?;
                return Ok(h.id().to_string());
            }
        }
        self.scrub_git_meta()?;
        let mut index = self.repo.index()?;
        index.add_all(["*"].iter(), IndexAddOption::FORCE, None)?;
        index.update_all(["*"].iter(), None)?;
        index.write()?;
        let tree = self.repo.find_tree(index.write_tree()?)?;
        let parent = self.repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        // Commit object, then tag, then HEAD: a kill between any two steps resumes cleanly.
        let id = self
            .repo
            .commit(None, &sig(), &sig(), message, &tree, &parents)?;
        let c = self.repo.find_commit(id)?;
        self.repo.tag_lightweight(tag, c.as_object(), false)?;
        self.move_head(&c)?;
        Ok(id.to_string())
    }

    /// Moves HEAD's branch to `commit` when HEAD is behind it (an ancestor of it), as the
    /// last step of an iteration's commit; the index follows. Nothing when HEAD is there.
    pub fn advance_head(&self, commit: &str) -> anyhow::Result<()> {
        let c = self.repo.find_commit(Oid::from_str(commit)?)?;
        match self.repo.head().ok().and_then(|h| h.target()) {
            Some(h) if h == c.id() => Ok(()),
            Some(h) if self.repo.graph_descendant_of(c.id(), h)? => self.move_head(&c),
            Some(_) => Ok(()),
            None => self.move_head(&c),
        }
    }

    /// HEAD, when an older binary moved it to iteration `tag`'s commit and was killed before
    /// tagging it: HEAD is not `evaluated` and its message starts with `<tag>:`.
    pub fn untagged_head(&self, tag: &str, evaluated: &str) -> anyhow::Result<Option<String>> {
        let Some(h) = self.repo.head().ok().and_then(|h| h.peel_to_commit().ok()) else {
            return Ok(None);
        };
        let ours = h
            .summary()
            .is_some_and(|m| m.starts_with(&format!("{tag}:")));
        Ok((ours && h.id().to_string() != evaluated).then(|| h.id().to_string()))
    }

    /// Points HEAD's branch (or a detached HEAD) at `c` and the index at its tree.
    fn move_head(&self, c: &git2::Commit) -> anyhow::Result<()> {
        let head = self.repo.find_reference("HEAD")?;
        match head.symbolic_target() {
            Some(branch) => {
                self.repo
                    .reference(branch, c.id(), true, "ahe: iteration commit")?;
            }
            None => self.repo.set_head_detached(c.id())?,
        }
        let mut index = self.repo.index()?;
        index.read_tree(&c.tree()?)?;
        index.write()?;
        Ok(())
    }

    /// Removes git metadata below the harness root — any `.git` (a nested repository, whose
    /// config could run commands on `git status`) other than the repository's own, and every
    /// `.gitignore`, `.gitattributes`, `.gitmodules` — however it got there; returns the
    /// removed harness-relative paths.
    pub fn scrub_git_meta(&self) -> anyhow::Result<Vec<String>> {
        let mut removed = Vec::new();
        scrub(&self.dir, "", &mut removed)
            .with_context(|| format!("removing git metadata under {}", self.dir.display()))?;
        removed.sort();
        Ok(removed)
    }

    /// The orchestrator's check before validation and commit, whatever wrote the files:
    /// removes git metadata ([`HarnessRepo::scrub_git_meta`]), reverts to `base` every
    /// changed file over `caps.max_file_bytes`, then the largest changed files until the
    /// harness fits `caps.max_total_bytes`; returns one note per action.
    pub fn guard(&self, base: &str, caps: &WriteCaps) -> anyhow::Result<Vec<String>> {
        let mut notes = Vec::new();
        let removed = self.scrub_git_meta()?;
        if !removed.is_empty() {
            notes.push(format!(
                "removed git metadata from the harness (never committed: it could hide files \
                 or run commands): {}",
                removed.join(", ")
            ));
        }
        let size = |f: &str| {
            std::fs::symlink_metadata(self.dir.join(f))
                .ok()
                .filter(|m| m.is_file())
                .map_or(0, |m| m.len())
        };
        let mut changed: Vec<(u64, String)> = self
            .changed_files(base)?
            .into_iter()
            .map(|f| (size(&f), f))
            .collect();
        let (big, rest): (Vec<_>, Vec<_>) = changed
            .drain(..)
            .partition(|(n, _)| *n > caps.max_file_bytes);
        for (n, f) in &big {
            self.restore_files(base, std::slice::from_ref(f))?;
            notes.push(format!(
                "reverted {f}: {n} bytes; limit {} (config [evolve] max_file_bytes)",
                caps.max_file_bytes
            ));
        }
        changed = rest;
        changed.sort();
        let mut total = self.tree_bytes()?;
        while total > caps.max_total_bytes {
            let Some((n, f)) = changed.pop().filter(|(n, _)| *n > 0) else {
                break;
            };
            self.restore_files(base, std::slice::from_ref(&f))?;
            notes.push(format!(
                "reverted {f} ({n} bytes): the harness was {total} bytes; limit {} (config \
                 [evolve] max_harness_bytes)",
                caps.max_total_bytes
            ));
            total = self.tree_bytes()?;
        }
        Ok(notes)
    }

    /// Total bytes of the working tree's regular files (`.git` excluded).
    fn tree_bytes(&self) -> anyhow::Result<u64> {
        fn walk(d: &Path) -> std::io::Result<u64> {
            let mut n = 0;
            for e in std::fs::read_dir(d)? {
                let e = e?;
                let ty = e.file_type()?;
                if ty.is_dir() && e.file_name() != ".git" {
                    n += walk(&e.path())?;
                } else if ty.is_file() {
                    n += e.metadata()?.len();
                }
            }
            Ok(n)
        }
        Ok(walk(&self.dir)?)
    }

    /// Points a lightweight tag at a commit (moving it if it exists).
    pub fn set_tag(&self, tag: &str, commit: &str) -> anyhow::Result<()> {
        let obj = self
            .repo
            .find_object(Oid::from_str(commit)?, Some(ObjectType::Commit))?;
        self.repo.tag_lightweight(tag, &obj, true)?;
        Ok(())
    }

    /// Makes the working tree exactly `commit` (or a tree id; drops edits and untracked
    /// files); HEAD stays.
    pub fn reset_worktree(&self, commit: &str) -> anyhow::Result<()> {
        let obj = self.repo.find_object(Oid::from_str(commit)?, None)?;
        let mut co = git2::build::CheckoutBuilder::new();
        co.force().remove_untracked(true).remove_ignored(true);
        self.repo.checkout_tree(&obj, Some(&mut co))?;
        let mut index = self.repo.index()?;
        index.read_tree(&obj.peel_to_tree()?)?;
        index.write()?;
        Ok(())
    }

    /// Harness-relative files that differ between `commit` and the working tree (added,
    /// modified, deleted; untracked and ignored files included).
    pub fn changed_files(&self, commit: &str) -> anyhow::Result<Vec<String>> {
        let tree = self.repo.find_commit(Oid::from_str(commit)?)?.tree()?;
        let mut opts = git2::DiffOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(true)
            .recurse_ignored_dirs(true);
        let diff = self
            .repo
            .diff_tree_to_workdir_with_index(Some(&tree), Some(&mut opts))?;
        let mut files: Vec<String> = diff
            .deltas()
            .filter_map(|d| {
                d.new_file()
                    .path()
                    .or(d.old_file().path())
                    .map(|p| p.to_string_lossy().into_owned())
            })
            .collect();
        files.sort();
        files.dedup();
        Ok(files)
    }

    /// Restores `files` in the working tree to their content at `commit` (or in a tree id;
    /// deleting those that did not exist there).
    pub fn restore_files(&self, commit: &str, files: &[String]) -> anyhow::Result<()> {
        let tree = self
            .repo
            .find_object(Oid::from_str(commit)?, None)?
            .peel_to_tree()?;
        for f in files {
            let path = self.dir.join(f);
            match tree.get_path(Path::new(f)) {
                Ok(entry) => {
                    let blob = entry.to_object(&self.repo)?.peel_to_blob()?;
                    if let Some(p) = path.parent() {
                        std::fs::create_dir_all(p)?;
                    }
                    std::fs::write(&path, blob.content())?;
                }
                Err(_) => {
                    if path.is_file() {
                        std::fs::remove_file(&path)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Unified diff between two commits.
    pub fn diff_patch(&self, from: &str, to: &str) -> anyhow::Result<String> {
        let a = self.repo.find_commit(Oid::from_str(from)?)?.tree()?;
        let b = self.repo.find_commit(Oid::from_str(to)?)?.tree()?;
        let diff = self.repo.diff_tree_to_tree(Some(&a), Some(&b), None)?;
        let mut out = String::new();
        diff.print(git2::DiffFormat::Patch, |_, _, line| {
            if matches!(line.origin(), '+' | '-' | ' ') {
                out.push(line.origin());
            }
            out.push_str(&String::from_utf8_lossy(line.content()));
            true
        })?;
        Ok(out)
    }

    /// Writes the tree of `commit` into `dest` (a fresh directory) for replay.
    pub fn export(&self, commit: &str, dest: &Path) -> anyhow::Result<()> {
        let tree = self.repo.find_commit(Oid::from_str(commit)?)?.tree()?;
        std::fs::create_dir_all(dest)?;
        let mut err = None;
        tree.walk(git2::TreeWalkMode::PreOrder, |root, entry| {
            let rel = Path::new(root).join(entry.name().unwrap_or(""));
            if entry.kind() == Some(ObjectType::Blob) {
                let res = entry
                    .to_object(&self.repo)
                    .and_then(|o| o.peel_to_blob())
                    .map_err(anyhow::Error::from)
                    .and_then(|b| {
                        let p = dest.join(&rel);
                        std::fs::create_dir_all(p.parent().unwrap_or(dest))?;
                        std::fs::write(&p, b.content())?;
                        set_mode(&p, entry.filemode());
                        Ok(())
                    });
                if let Err(e) = res {
                    err = Some(e);
                    return git2::TreeWalkResult::Abort;
                }
            }
            git2::TreeWalkResult::Ok
        })?;
        err.map_or(Ok(()), Err)
    }
}

/// [`HarnessRepo::scrub_git_meta`] of `dir` (harness-relative `rel`); the root's own
/// `.git` is kept.
fn scrub(dir: &Path, rel: &str, removed: &mut Vec<String>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let child = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let ty = e.file_type()?;
        if rel.is_empty() && name == ".git" {
            continue;
        }
        if is_git_meta(&name) {
            if ty.is_dir() {
                std::fs::remove_dir_all(e.path())?;
            } else {
                std::fs::remove_file(e.path())?;
            }
            removed.push(child);
        } else if ty.is_dir() {
            scrub(&e.path(), &child, removed)?;
        }
    }
    Ok(())
}

fn set_mode(p: &Path, mode: i32) {
    use std::os::unix::fs::PermissionsExt;
    if mode == 0o100755 {
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
    }
}

/// Copies a directory tree (files and dirs; symlinks are skipped: a harness has none).
pub fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let ty = e.file_type()?;
        let to = dst.join(e.file_name());
        if ty.is_dir() {
            if e.file_name() != ".git" {
                copy_tree(&e.path(), &to)?;
            }
        } else if ty.is_file() {
            std::fs::copy(e.path(), &to)?;
        }
    }
    Ok(())
}

/// Splits `runs/NAME@REF` into the run dir and the revision.
pub fn split_ref(s: &str) -> Option<(PathBuf, String)> {
    let (path, rev) = s.rsplit_once('@')?;
    (!rev.is_empty() && !path.is_empty()).then(|| (PathBuf::from(path), rev.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_git_locks_of_a_killed_writer_are_cleared_and_commits_work_again() {
        let seed = tempfile::tempdir().unwrap();
        std::fs::write(seed.path().join("agent.toml"), "a").unwrap();
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("harness");
        HarnessRepo::init(&dir, seed.path()).unwrap();
        // What a kill -9 inside `index.write()` / a ref update leaves behind.
        std::fs::write(dir.join(".git/index.lock"), "").unwrap();
        let head = std::fs::read_to_string(dir.join(".git/HEAD")).unwrap();
        let branch = head.trim().trim_start_matches("ref: ").to_string();
        let ref_lock = dir.join(".git").join(format!("{branch}.lock"));
        std::fs::write(&ref_lock, "").unwrap();
        std::fs::write(dir.join("agent.toml"), "b").unwrap();
        let r = HarnessRepo::open(&dir).unwrap();
        let err = r.commit_all("iter-001", &iter_tag(1)).unwrap_err();
        assert!(format!("{err:#}").contains("locked"), "{err:#}");
        let mut gone = HarnessRepo::clear_stale_locks(&dir).unwrap();
        gone.sort();
        assert_eq!(gone, vec![dir.join(".git/index.lock"), ref_lock]);
        let r = HarnessRepo::open(&dir).unwrap();
        r.commit_all("iter-001", &iter_tag(1)).unwrap();
        assert!(HarnessRepo::clear_stale_locks(&dir).unwrap().is_empty());
    }

    #[test]
    fn commit_tag_diff_restore_export() {
        let seed = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(seed.path().join("memory")).unwrap();
        std::fs::write(seed.path().join("agent.toml"), "a").unwrap();
        std::fs::write(seed.path().join("memory/MEMORY.md"), "m0").unwrap();
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("harness");
        let r = HarnessRepo::init(&dir, seed.path()).unwrap();
        let c0 = r.resolve("iter-000").unwrap();
        assert_eq!(c0, r.head().unwrap());

        std::fs::write(dir.join("memory/MEMORY.md"), "m1").unwrap();
        std::fs::write(dir.join("memory/new.md"), "n").unwrap();
        assert_eq!(
            r.changed_files(&c0).unwrap(),
            vec!["memory/MEMORY.md", "memory/new.md"]
        );
        let c1 = r.commit_all("iter-001", &iter_tag(1)).unwrap();
        assert_ne!(c0, c1);
        assert_eq!(
            r.commit_all("again", &iter_tag(1)).unwrap(),
            c1,
            "idempotent by tag"
        );
        let patch = r.diff_patch(&c0, &c1).unwrap();
        assert!(patch.contains("-m0") && patch.contains("+m1"), "{patch}");

        r.restore_files(&c0, &["memory/MEMORY.md".into(), "memory/new.md".into()])
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("memory/MEMORY.md")).unwrap(),
            "m0"
        );
        assert!(!dir.join("memory/new.md").exists());

        std::fs::write(dir.join("junk.txt"), "x").unwrap();
        r.reset_worktree(&c1).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("memory/MEMORY.md")).unwrap(),
            "m1"
        );
        assert!(!dir.join("junk.txt").exists());

        r.set_tag("best", &c1).unwrap();
        assert_eq!(r.resolve("best").unwrap(), c1);
        assert_eq!(r.resolve(&c1[..8]).unwrap(), c1);
        assert!(r
            .resolve("nope")
            .unwrap_err()
            .to_string()
            .contains("best, iter-NNN"));

        let out = d.path().join("export");
        r.export(&c0, &out).unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("memory/MEMORY.md")).unwrap(),
            "m0"
        );
        assert!(!out.join(".git").exists());
        assert_eq!(
            split_ref("runs/x@best"),
            Some(("runs/x".into(), "best".into()))
        );
        assert_eq!(split_ref("harness-seed"), None);
    }
}
