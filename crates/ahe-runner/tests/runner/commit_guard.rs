//! The commit step against a hostile working tree: git metadata planted directly on disk,
//! ignore rules, oversized files, and a kill -9 inside the commit phase.

use std::path::Path;

use ahe_runner::repo::caps::WriteCaps;
use ahe_runner::repo::{iter_tag, HarnessRepo};

const CAPS: WriteCaps = WriteCaps {
    max_file_bytes: 1000,
    max_total_bytes: 2500,
};

fn seeded(d: &Path) -> (HarnessRepo, String) {
    let seed = d.join("seed");
    std::fs::create_dir_all(seed.join("memory")).unwrap();
    std::fs::create_dir_all(seed.join("tools")).unwrap();
    std::fs::write(seed.join("agent.toml"), "a").unwrap();
    std::fs::write(seed.join("memory/MEMORY.md"), "m0").unwrap();
    let r = HarnessRepo::init(&d.join("harness"), &seed).unwrap();
    let c0 = r.resolve("iter-000").unwrap();
    (r, c0)
}

fn put(dir: &Path, rel: &str, content: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// Every file path in the tree of `rev`.
fn tree_files(dir: &Path, rev: &str) -> Vec<String> {
    let repo = git2::Repository::open(dir).unwrap();
    let tree = repo.revparse_single(rev).unwrap().peel_to_tree().unwrap();
    let mut out = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |root, e| {
        if e.kind() == Some(git2::ObjectType::Blob) {
            out.push(format!("{root}{}", e.name().unwrap()));
        }
        git2::TreeWalkResult::Ok
    })
    .unwrap();
    out.sort();
    out
}

/// Commits reachable from HEAD.
fn history_len(dir: &Path) -> usize {
    let repo = git2::Repository::open(dir).unwrap();
    let mut w = repo.revwalk().unwrap();
    w.push_head().unwrap();
    w.count()
}

#[test]
fn git_metadata_planted_on_disk_is_removed_recorded_and_ignored_files_are_committed() {
    let d = tempfile::tempdir().unwrap();
    let (r, c0) = seeded(d.path());
    let h = r.dir().to_path_buf();
    // A nested repository whose config would run a command on the first `git status`.
    put(
        &h,
        "memory/.git/config",
        "[core]\n\tfsmonitor = touch /tmp/ahe-pwned\n",
    );
    put(&h, "memory/.git/HEAD", "ref: refs/heads/main\n");
    put(&h, "tools/sub/.git", "gitdir: /elsewhere\n");
    // Ignore rules of every kind: .gitignore, .gitattributes, info/exclude, core.excludesFile.
    put(&h, "tools/.gitignore", "helper.sh\n");
    put(&h, "tools/helper.sh", "#!/bin/sh\necho hi\n");
    put(&h, ".gitattributes", "* export-ignore\n");
    put(&h, ".git/info/exclude", "memory/notes.md\n");
    put(&h, "memory/notes.md", "excluded by info/exclude");
    let global = d.path().join("global-ignore");
    std::fs::write(&global, "*.txt\n").unwrap();
    git2::Repository::open(&h)
        .unwrap()
        .config()
        .unwrap()
        .set_str("core.excludesFile", global.to_str().unwrap())
        .unwrap();
    put(&h, "memory/facts.txt", "excluded by core.excludesFile");

    let changed = r.changed_files(&c0).unwrap();
    for f in ["memory/notes.md", "memory/facts.txt"] {
        assert!(changed.contains(&f.to_string()), "{f} in {changed:?}");
    }
    let notes = r.guard(&c0, &CAPS).unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    for p in [
        ".gitattributes",
        "memory/.git",
        "tools/.gitignore",
        "tools/sub/.git",
    ] {
        assert!(notes[0].contains(p), "{p} recorded: {}", notes[0]);
        assert!(!h.join(p).exists(), "{p} removed");
    }
    assert!(
        h.join(".git/HEAD").is_file(),
        "the repository's own .git stays"
    );
    let id = r.commit_all("iter-001: 1 change(s)", &iter_tag(1)).unwrap();
    assert_eq!(
        tree_files(&h, &id),
        vec![
            "agent.toml",
            "memory/MEMORY.md",
            "memory/facts.txt",
            "memory/notes.md",
            "tools/helper.sh"
        ]
    );
}

#[test]
fn commit_all_alone_scrubs_and_commits_ignored_files() {
    let d = tempfile::tempdir().unwrap();
    let (r, _) = seeded(d.path());
    let h = r.dir().to_path_buf();
    put(&h, "tools/.gitignore", "*\n");
    put(&h, "tools/x.sh", "x");
    put(&h, "memory/.git/config", "[core]\n\tfsmonitor = false\n");
    put(&h, "memory/MEMORY.md", "m1");
    let id = r.commit_all("iter-001: 1 change(s)", &iter_tag(1)).unwrap();
    assert_eq!(
        tree_files(&h, &id),
        vec!["agent.toml", "memory/MEMORY.md", "tools/x.sh"]
    );
    assert!(!h.join("memory/.git").exists() && !h.join("tools/.gitignore").exists());
}

#[test]
fn reset_removes_ignored_files_too() {
    let d = tempfile::tempdir().unwrap();
    let (r, c0) = seeded(d.path());
    let h = r.dir().to_path_buf();
    put(&h, ".git/info/exclude", "memory/hidden.md\n");
    put(&h, "memory/hidden.md", "HINT");
    r.reset_worktree(&c0).unwrap();
    assert!(!h.join("memory/hidden.md").exists());
}

#[test]
fn oversized_files_planted_on_disk_are_reverted_and_recorded() {
    let d = tempfile::tempdir().unwrap();
    let (r, c0) = seeded(d.path());
    let h = r.dir().to_path_buf();
    put(&h, "memory/big.md", &"x".repeat(1001));
    put(&h, "memory/MEMORY.md", &"y".repeat(1001));
    put(&h, "memory/a.md", &"a".repeat(900));
    put(&h, "memory/b.md", &"b".repeat(950));
    put(&h, "memory/c.md", &"c".repeat(800));
    let notes = r.guard(&c0, &CAPS).unwrap();
    assert!(
        notes.iter().any(|n| n
            == "reverted memory/big.md: 1001 bytes; limit 1000 (config [evolve] max_file_bytes)"),
        "{notes:?}"
    );
    assert!(!h.join("memory/big.md").exists(), "new file: deleted");
    assert_eq!(
        std::fs::read_to_string(h.join("memory/MEMORY.md")).unwrap(),
        "m0",
        "existing file: restored"
    );
    // 1 + 2 + 900 + 950 + 800 > 2500: the largest changed file (b.md) goes.
    assert!(
        notes.iter().any(|n| n
            .starts_with("reverted memory/b.md (950 bytes): the harness was 2653")
            && n.contains("limit 2500 (config [evolve] max_harness_bytes)")),
        "{notes:?}"
    );
    assert_eq!(notes.len(), 3, "{notes:?}");
    let id = r.commit_all("iter-001: 1 change(s)", &iter_tag(1)).unwrap();
    let files = tree_files(&h, &id);
    assert!(!files.contains(&"memory/big.md".to_string()), "{files:?}");
    assert!(files.contains(&"memory/a.md".to_string()), "{files:?}");
}

#[test]
fn a_kill_between_commit_and_tag_leaves_one_commit() {
    let d = tempfile::tempdir().unwrap();
    let (r, _) = seeded(d.path());
    let h = r.dir().to_path_buf();
    put(&h, "memory/MEMORY.md", "m1");
    // What an older binary left when killed after moving HEAD and before tagging.
    let repo = git2::Repository::open(&h).unwrap();
    let mut index = repo.index().unwrap();
    index
        .add_all(["*"].iter(), git2::IndexAddOption::DEFAULT, None)
        .unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let parent = repo.head().unwrap().peel_to_commit().unwrap();
    let sig = git2::Signature::now("ahe", "ahe@localhost").unwrap();
    let orphan = repo
        .commit(
            Some("HEAD"),
            &sig,
            &sig,
            "iter-001: 1 change(s)",
            &tree,
            &[&parent],
        )
        .unwrap();
    assert_eq!(history_len(&h), 2);
    let id = r.commit_all("iter-001: 1 change(s)", &iter_tag(1)).unwrap();
    assert_eq!(id, orphan.to_string(), "the commit is reused, not repeated");
    assert_eq!(history_len(&h), 2, "no duplicate empty commit");
    assert_eq!(r.resolve("iter-001").unwrap(), id);
    // The commit phase run again (killed before the journal recorded it): still one commit.
    assert_eq!(r.commit_all("iter-001: again", &iter_tag(1)).unwrap(), id);
    assert_eq!(history_len(&h), 2);
}

#[test]
fn a_kill_between_tag_and_head_moves_head_on_resume() {
    let d = tempfile::tempdir().unwrap();
    let (r, c0) = seeded(d.path());
    let h = r.dir().to_path_buf();
    put(&h, "memory/MEMORY.md", "m1");
    let repo = git2::Repository::open(&h).unwrap();
    let mut index = repo.index().unwrap();
    index
        .add_all(["*"].iter(), git2::IndexAddOption::DEFAULT, None)
        .unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let parent = repo.head().unwrap().peel_to_commit().unwrap();
    let sig = git2::Signature::now("ahe", "ahe@localhost").unwrap();
    let c = repo
        .commit(None, &sig, &sig, "iter-001: 1 change(s)", &tree, &[&parent])
        .unwrap();
    repo.tag_lightweight("iter-001", repo.find_commit(c).unwrap().as_object(), false)
        .unwrap();
    assert_eq!(r.head().unwrap(), c0, "HEAD did not move before the kill");
    let id = r.commit_all("iter-001: 1 change(s)", &iter_tag(1)).unwrap();
    assert_eq!(id, c.to_string());
    assert_eq!(r.head().unwrap(), id, "HEAD now at the tagged commit");
    assert_eq!(history_len(&h), 2);
    assert!(r.changed_files(&id).unwrap().is_empty());
}
