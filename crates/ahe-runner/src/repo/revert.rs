//! Change-level git plumbing of the harness repository: snapshots of the working tree,
//! commits that move no ref, and three-way reverts of one change's commit (what rollback,
//! counterfactual trials and the canary are built on).

use anyhow::Context;
use git2::{IndexAddOption, Oid};

use crate::repo::HarnessRepo;

/// What reverting one commit onto a harness gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revert {
    /// The three-way revert applied cleanly: the resulting tree (other changes in the same
    /// files survive).
    Clean {
        /// Tree id of `onto` minus the reverted commit.
        tree: String,
    },
    /// Later edits overlap the reverted lines: these harness-relative files conflict.
    Conflict {
        /// The conflicting files, sorted.
        files: Vec<String>,
    },
}

impl HarnessRepo {
    /// Tree id of the working tree as it is now (every file, ignore rules not applied),
    /// written to the object store without touching the on-disk index or any ref.
    pub fn snapshot_worktree(&self) -> anyhow::Result<String> {
        let repo = self.git();
        let mut index = repo.index()?;
        index.add_all(["*"].iter(), IndexAddOption::FORCE, None)?;
        index.update_all(["*"].iter(), None)?;
        let tree = index.write_tree()?;
        // Drop the in-memory staging: the on-disk index stays what the last commit made.
        index.read(true)?;
        Ok(tree.to_string())
    }

    /// Tree id of a commit.
    pub fn tree_of(&self, commit: &str) -> anyhow::Result<String> {
        let c = self.git().find_commit(Oid::from_str(commit)?)?;
        Ok(c.tree_id().to_string())
    }

    /// Creates a commit object of `tree` on top of `parent` without moving any ref (a
    /// counterfactual harness, or one step of an iteration's change chain).
    pub fn commit_tree(&self, tree: &str, parent: &str, message: &str) -> anyhow::Result<String> {
        let repo = self.git();
        let tree = repo.find_tree(Oid::from_str(tree)?)?;
        let parent = repo.find_commit(Oid::from_str(parent)?)?;
        let sig = git2::Signature::now("ahe", "ahe@localhost")?;
        let id = repo.commit(None, &sig, &sig, message, &tree, &[&parent])?;
        Ok(id.to_string())
    }

    /// Reverts `commit` onto `onto` in memory (three-way, like `git revert`): the lines that
    /// `commit` changed go back to its parent's, everything else of `onto` stays.
    pub fn revert(&self, onto: &str, commit: &str) -> anyhow::Result<Revert> {
        let repo = self.git();
        let ours = repo
            .find_commit(Oid::from_str(onto)?)
            .with_context(|| format!("no harness commit {onto}"))?;
        let theirs = repo
            .find_commit(Oid::from_str(commit)?)
            .with_context(|| format!("no harness commit {commit} to revert"))?;
        let mut index = repo.revert_commit(&theirs, &ours, 0, None)?;
        if index.has_conflicts() {
            let mut files: Vec<String> = index
                .conflicts()?
                .filter_map(|c| c.ok())
                .filter_map(|c| c.our.or(c.their).or(c.ancestor))
                .map(|e| String::from_utf8_lossy(&e.path).into_owned())
                .collect();
            files.sort();
            files.dedup();
            return Ok(Revert::Conflict { files });
        }
        let tree = index.write_tree_to(repo)?;
        Ok(Revert::Clean {
            tree: tree.to_string(),
        })
    }

    /// A commit object of `onto` minus `commit` (clean reverts only), moving no ref: the
    /// harness a counterfactual trial runs. `None` when the revert conflicts.
    pub fn reverted_commit(&self, onto: &str, commit: &str) -> anyhow::Result<Option<String>> {
        match self.revert(onto, commit)? {
            Revert::Clean { tree } => {
                let msg = format!("counterfactual: {onto} minus {commit}");
                Ok(Some(self.commit_tree(&tree, onto, &msg)?))
            }
            Revert::Conflict { .. } => Ok(None),
        }
    }

    /// Harness-relative files that differ between two trees (or commits' trees).
    pub fn tree_diff_files(&self, from_tree: &str, to_tree: &str) -> anyhow::Result<Vec<String>> {
        let repo = self.git();
        let a = repo.find_tree(Oid::from_str(from_tree)?)?;
        let b = repo.find_tree(Oid::from_str(to_tree)?)?;
        let diff = repo.diff_tree_to_tree(Some(&a), Some(&b), None)?;
        let mut files: Vec<String> = diff
            .deltas()
            .filter_map(|d| d.new_file().path().or(d.old_file().path()))
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        files.sort();
        files.dedup();
        Ok(files)
    }

    /// Number of lines present in `from_tree` and absent from `to_tree`, per file: what a
    /// rollback lost (collateral when the lines were not the rolled-back change's own).
    pub fn lines_removed(
        &self,
        from_tree: &str,
        to_tree: &str,
    ) -> anyhow::Result<Vec<(String, Vec<String>)>> {
        let repo = self.git();
        let a = repo.find_tree(Oid::from_str(from_tree)?)?;
        let b = repo.find_tree(Oid::from_str(to_tree)?)?;
        let diff = repo.diff_tree_to_tree(Some(&a), Some(&b), None)?;
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        diff.print(git2::DiffFormat::Patch, |d, _, line| {
            if line.origin() == '-' {
                let f = d
                    .old_file()
                    .path()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let text = String::from_utf8_lossy(line.content())
                    .trim_end()
                    .to_string();
                match out.last_mut() {
                    Some((g, v)) if *g == f => v.push(text),
                    _ => out.push((f, vec![text])),
                }
            }
            true
        })?;
        Ok(out)
    }
}

/// A revert whose conflicting files fell back to a file-level restore (see
/// [`HarnessRepo::revert_or_restore`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reverted {
    /// Tree id of the result.
    pub tree: String,
    /// Files that conflicted and were restored whole to the reverted commit's parent (empty
    /// for a clean revert).
    pub restored: Vec<String>,
}

/// A tree entry: blob (or subtree) id and file mode.
type Entry = (Oid, i32);

fn file_mode(mode: i32) -> git2::FileMode {
    match mode {
        0o100755 => git2::FileMode::BlobExecutable,
        0o120000 => git2::FileMode::Link,
        0o160000 => git2::FileMode::Commit,
        _ => git2::FileMode::Blob,
    }
}

impl HarnessRepo {
    /// The entry of a harness-relative file in a tree (`None`: absent).
    fn entry(&self, tree: &git2::Tree<'_>, path: &str) -> Option<Entry> {
        tree.get_path(std::path::Path::new(path))
            .ok()
            .map(|e| (e.id(), e.filemode()))
    }

    /// Whether a harness-relative file has the same content (and mode) in two trees; both
    /// absent counts as the same.
    pub fn same_file(&self, a_tree: &str, b_tree: &str, path: &str) -> anyhow::Result<bool> {
        let repo = self.git();
        let a = repo.find_tree(Oid::from_str(a_tree)?)?;
        let b = repo.find_tree(Oid::from_str(b_tree)?)?;
        Ok(self.entry(&a, path) == self.entry(&b, path))
    }

    /// Tree id of `base_tree` with `files` taken from `from_tree` (a file absent there is
    /// removed): one step of a change chain.
    pub fn tree_with_files(
        &self,
        base_tree: &str,
        from_tree: &str,
        files: &[String],
    ) -> anyhow::Result<String> {
        let repo = self.git();
        let base = repo.find_tree(Oid::from_str(base_tree)?)?;
        let from = repo.find_tree(Oid::from_str(from_tree)?)?;
        let mut b = git2::build::TreeUpdateBuilder::new();
        let mut any = false;
        for f in files {
            match (self.entry(&from, f), self.entry(&base, f)) {
                (Some((id, mode)), old) if old != Some((id, mode)) => {
                    b.upsert(f.as_str(), id, file_mode(mode));
                    any = true;
                }
                (None, Some(_)) => {
                    b.remove(f.as_str());
                    any = true;
                }
                _ => {}
            }
        }
        if !any {
            return Ok(base_tree.to_string());
        }
        let id = b
            .create_updated(repo, &base)
            .with_context(|| format!("updating tree {base_tree} with {}", files.join(", ")))?;
        Ok(id.to_string())
    }

    /// The parent of a commit (`None` for a root commit).
    pub fn parent_of(&self, commit: &str) -> anyhow::Result<Option<String>> {
        let c = self.git().find_commit(Oid::from_str(commit)?)?;
        Ok(c.parent_id(0).ok().map(|p| p.to_string()))
    }

    /// Lines a commit added relative to its parent, per file (what its change wrote).
    pub fn lines_added(&self, commit: &str) -> anyhow::Result<Vec<(String, Vec<String>)>> {
        let Some(parent) = self.parent_of(commit)? else {
            return Ok(Vec::new());
        };
        self.lines_removed(&self.tree_of(commit)?, &self.tree_of(&parent)?)
    }

    /// [`HarnessRepo::revert`], falling back per conflicting file to a file-level restore:
    /// every file that reverts cleanly is three-way reverted, and each conflicting file is
    /// restored whole to its content in `commit`'s parent (losing later edits to it).
    pub fn revert_or_restore(&self, onto: &str, commit: &str) -> anyhow::Result<Reverted> {
        let restored = match self.revert(onto, commit)? {
            Revert::Clean { tree } => {
                return Ok(Reverted {
                    tree,
                    restored: Vec::new(),
                })
            }
            Revert::Conflict { files } => files,
        };
        let repo = self.git();
        let ours = repo.find_commit(Oid::from_str(onto)?)?;
        let theirs = repo.find_commit(Oid::from_str(commit)?)?;
        let mut index = repo.revert_commit(&theirs, &ours, 0, None)?;
        for f in &restored {
            index.conflict_remove(std::path::Path::new(f))?;
        }
        let merged = index.write_tree_to(repo)?.to_string();
        let parent = match theirs.parent_id(0) {
            Ok(p) => repo.find_commit(p)?.tree_id().to_string(),
            Err(_) => anyhow::bail!("harness commit {commit} has no parent to restore from"),
        };
        let tree = self.tree_with_files(&merged, &parent, &restored)?;
        Ok(Reverted { tree, restored })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_with(files: &[(&str, &str)]) -> (tempfile::TempDir, HarnessRepo) {
        let seed = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let p = seed.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, c).unwrap();
        }
        let d = tempfile::tempdir().unwrap();
        let r = HarnessRepo::init(&d.path().join("h"), seed.path()).unwrap();
        (d, r)
    }

    fn edit_and_commit(r: &HarnessRepo, parent: &str, f: &str, text: &str) -> String {
        std::fs::write(r.dir().join(f), text).unwrap();
        let tree = r.snapshot_worktree().unwrap();
        r.commit_tree(&tree, parent, "step").unwrap()
    }

    #[test]
    fn reverting_one_change_keeps_the_other_in_the_same_file() {
        let (_d, r) = repo_with(&[("memory/MEMORY.md", "a\nb\nc\nd\ne\nf\n")]);
        let c0 = r.head().unwrap();
        // Two changes to one file, far enough apart for a three-way merge.
        let good = edit_and_commit(&r, &c0, "memory/MEMORY.md", "GOOD\na\nb\nc\nd\ne\nf\n");
        let bad = edit_and_commit(
            &r,
            &good,
            "memory/MEMORY.md",
            "GOOD\na\nb\nc\nd\ne\nf\nBAD\n",
        );
        let Revert::Clean { tree } = r.revert(&bad, &good).unwrap() else {
            panic!("clean revert expected")
        };
        let c = r.commit_tree(&tree, &bad, "revert good").unwrap();
        let out = tempfile::tempdir().unwrap();
        r.export(&c, out.path()).unwrap();
        let text = std::fs::read_to_string(out.path().join("memory/MEMORY.md")).unwrap();
        assert_eq!(text, "a\nb\nc\nd\ne\nf\nBAD\n");
        // Minus the bad one instead: GOOD survives.
        let c = r.reverted_commit(&bad, &bad).unwrap().unwrap();
        r.export(&c, out.path()).unwrap();
        let text = std::fs::read_to_string(out.path().join("memory/MEMORY.md")).unwrap();
        assert_eq!(text, "GOOD\na\nb\nc\nd\ne\nf\n");
        // The working tree and HEAD were never moved by any of this.
        assert_eq!(r.head().unwrap(), c0);
        let lost = r.lines_removed(&r.tree_of(&bad).unwrap(), &tree).unwrap();
        assert_eq!(
            lost,
            vec![("memory/MEMORY.md".to_string(), vec!["GOOD".into()])]
        );
        let files = r
            .tree_diff_files(&r.tree_of(&c0).unwrap(), &r.tree_of(&bad).unwrap())
            .unwrap();
        assert_eq!(files, vec!["memory/MEMORY.md"]);
    }

    #[test]
    fn overlapping_edits_conflict_and_name_the_file() {
        let (_d, r) = repo_with(&[("system_prompt.md", "line\n")]);
        let c0 = r.head().unwrap();
        let one = edit_and_commit(&r, &c0, "system_prompt.md", "line one\n");
        let two = edit_and_commit(&r, &one, "system_prompt.md", "line one two\n");
        assert_eq!(
            r.revert(&two, &one).unwrap(),
            Revert::Conflict {
                files: vec!["system_prompt.md".into()]
            }
        );
        assert_eq!(r.reverted_commit(&two, &one).unwrap(), None);
    }

    #[test]
    fn tree_with_files_upserts_removes_and_keeps_modes() {
        let (_d, r) = repo_with(&[("memory/MEMORY.md", "m\n"), ("skills/a/SKILL.md", "s\n")]);
        let c0 = r.head().unwrap();
        let base = r.tree_of(&c0).unwrap();
        std::fs::create_dir_all(r.dir().join("tools")).unwrap();
        std::fs::write(r.dir().join("tools/x.sh"), "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let exec = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(r.dir().join("tools/x.sh"), exec).unwrap();
        std::fs::remove_dir_all(r.dir().join("skills")).unwrap();
        std::fs::write(r.dir().join("memory/MEMORY.md"), "m2\n").unwrap();
        let snap = r.snapshot_worktree().unwrap();
        // Only the named files move; a file named but equal is a no-op.
        let files = ["tools/x.sh".to_string(), "skills/a/SKILL.md".to_string()];
        let t = r.tree_with_files(&base, &snap, &files).unwrap();
        assert_eq!(
            r.tree_diff_files(&base, &t).unwrap(),
            ["skills/a/SKILL.md", "tools/x.sh"]
        );
        assert!(r.same_file(&t, &base, "memory/MEMORY.md").unwrap());
        assert!(r.same_file(&t, &snap, "tools/x.sh").unwrap(), "mode kept");
        assert!(
            r.same_file(&t, &snap, "skills/a/SKILL.md").unwrap(),
            "both absent"
        );
        let all = ["memory/MEMORY.md".to_string()];
        assert_eq!(r.tree_with_files(&t, &snap, &all).unwrap(), snap);
        assert_eq!(r.tree_with_files(&snap, &snap, &all).unwrap(), snap);
        let c = r.commit_tree(&t, &c0, "step").unwrap();
        assert_eq!(r.parent_of(&c).unwrap(), Some(c0.clone()));
        assert_eq!(r.parent_of(&c0).unwrap(), None);
    }

    #[test]
    fn a_conflicting_file_is_restored_whole_and_the_rest_reverted() {
        let (_d, r) = repo_with(&[("system_prompt.md", "line\n"), ("memory/MEMORY.md", "")]);
        let c0 = r.head().unwrap();
        std::fs::write(r.dir().join("memory/MEMORY.md"), "mine\n").unwrap();
        let one = edit_and_commit(&r, &c0, "system_prompt.md", "line one\n");
        let two = edit_and_commit(&r, &one, "system_prompt.md", "line one two\n");
        let got = r.revert_or_restore(&two, &one).unwrap();
        assert_eq!(got.restored, ["system_prompt.md"]);
        let c = r.commit_tree(&got.tree, &two, "rb").unwrap();
        let out = tempfile::tempdir().unwrap();
        r.export(&c, out.path()).unwrap();
        let read = |f: &str| std::fs::read_to_string(out.path().join(f)).unwrap();
        assert_eq!(read("system_prompt.md"), "line\n", "as before `one`");
        assert_eq!(
            read("memory/MEMORY.md"),
            "",
            "`one`'s other file reverted cleanly"
        );
        assert_eq!(
            r.lines_added(&two).unwrap(),
            vec![("system_prompt.md".to_string(), vec!["line one two".into()])]
        );
        let clean = r.revert_or_restore(&two, &two).unwrap();
        assert!(clean.restored.is_empty());
        assert_eq!(clean.tree, r.tree_of(&one).unwrap());
    }
}
