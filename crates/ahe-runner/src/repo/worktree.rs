//! Linked working trees of the run's harness repository: one per evolve variant
//! (`[evolve] variants`), each with its own index and detached HEAD while the objects and the
//! tags stay shared, so that several evolve agents edit the harness at the same time and
//! each one's commit is visible to the run's repository at once.

use std::path::Path;

use anyhow::Context;

use crate::repo::HarnessRepo;

impl HarnessRepo {
    /// Opens the linked working tree `id` at `dir` (created when missing; `.git` there is a
    /// file naming `.git/worktrees/<id>/`), detached at `commit`, its files made exactly
    /// `commit`'s (edits and untracked files of an earlier, killed use dropped).
    pub fn worktree(&self, id: &str, dir: &Path, commit: &str) -> anyhow::Result<HarnessRepo> {
        let admin = self.git().path().join("worktrees").join(id);
        let ctx = || format!("creating the harness working tree {}", dir.display());
        std::fs::create_dir_all(&admin).with_context(ctx)?;
        std::fs::create_dir_all(dir).with_context(ctx)?;
        let dir = dir.canonicalize().with_context(ctx)?;
        let admin = admin.canonicalize().with_context(ctx)?;
        let files = [
            (admin.join("commondir"), "../..\n".to_string()),
            (
                admin.join("gitdir"),
                format!("{}\n", dir.join(".git").display()),
            ),
            (admin.join("HEAD"), format!("{commit}\n")),
            (dir.join(".git"), format!("gitdir: {}\n", admin.display())),
        ];
        for (p, body) in files {
            std::fs::write(&p, body).with_context(ctx)?;
        }
        let wt = HarnessRepo::open(&dir)?;
        wt.reset_worktree(commit)?;
        Ok(wt)
    }

    /// Removes the linked working tree `id` at `dir`: its files and its administrative
    /// directory (`.git/worktrees/<id>/`); nothing when neither exists.
    pub fn remove_worktree(&self, id: &str, dir: &Path) -> anyhow::Result<()> {
        let admin = self.git().path().join("worktrees").join(id);
        for d in [dir, admin.as_path()] {
            match std::fs::remove_dir_all(d) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("removing {}", d.display()))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worktree_edits_and_commits_apart_from_the_main_tree_and_shares_tags() {
        let seed = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(seed.path().join("memory")).unwrap();
        std::fs::write(seed.path().join("memory/MEMORY.md"), "m0").unwrap();
        let d = tempfile::tempdir().unwrap();
        let main = HarnessRepo::init(&d.path().join("harness"), seed.path()).unwrap();
        let start = main.head().unwrap();
        let wdir = d.path().join("iterations/001/evolve/variants/v1/harness");
        let wt = main.worktree("iter-001-v1", &wdir, &start).unwrap();
        assert_eq!(
            std::fs::read_to_string(wdir.join("memory/MEMORY.md")).unwrap(),
            "m0"
        );
        std::fs::write(wdir.join("memory/MEMORY.md"), "m1").unwrap();
        std::fs::write(wdir.join("memory/new.md"), "n").unwrap();
        // Only the worktree's edits show; its `.git` file is no change.
        assert_eq!(
            wt.changed_files(&start).unwrap(),
            vec!["memory/MEMORY.md", "memory/new.md"]
        );
        assert!(main.changed_files(&start).unwrap().is_empty());
        let tree = wt.snapshot_worktree().unwrap();
        let c = wt.commit_tree(&tree, &start, "v1").unwrap();
        wt.set_tag("iter-001-v1", &c).unwrap();
        assert_eq!(main.resolve("iter-001-v1").unwrap(), c);
        assert_eq!(main.head().unwrap(), start, "the main HEAD stays");
        // Reopened after a kill: exactly the start again.
        let wt = main.worktree("iter-001-v1", &wdir, &start).unwrap();
        assert!(wt.changed_files(&start).unwrap().is_empty());
        assert!(!wdir.join("memory/new.md").exists());
        main.remove_worktree("iter-001-v1", &wdir).unwrap();
        assert!(!wdir.exists());
        assert!(!d.path().join("harness/.git/worktrees/iter-001-v1").exists());
        main.remove_worktree("iter-001-v1", &wdir).unwrap();
    }
}
