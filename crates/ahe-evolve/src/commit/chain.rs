//! One commit per manifest change: the commit phase builds a chain of commits on top of the
//! evaluated harness — automatic rollbacks first, then each change the evolve agent recorded
//! with `commit_change`, then changes submitted without a snapshot (split by their `files`),
//! then whatever edit no change names — and tags the last one `iter-NNN`. Rolling one
//! change back is then `git revert` of its commit.
//!
//! The chain's last tree is exactly the working tree (what one `commit_all` would commit).
//! A file the orchestrator reverted after the agent edited it (outside-path, leak, size,
//! validation or pre-flight revert) is in no change's commit.

use std::collections::{BTreeMap, BTreeSet};

use ahe_rundir::manifest::Manifest;
use ahe_rundir::run_dir::IterationDir;
use ahe_runner::repo::{iter_tag, HarnessRepo};

use ahe_rundir::snapshots::ChangeSnapshots;

/// One planned commit of the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The manifest change it holds (`None`: edits named by no change, or an iteration
    /// without any edit).
    pub change: Option<String>,
    /// Its tree.
    pub tree: String,
}

/// What the commit phase's git work produced.
#[derive(Debug, Clone)]
pub struct Committed {
    /// The last commit of the chain (tagged `iter-NNN`, HEAD's branch).
    pub head: String,
    /// The manifest as written, each change naming its commit.
    pub manifest: Manifest,
    /// What the orchestrator notes (changes left without a commit of their own).
    pub notes: Vec<String>,
}

/// Plans the chain from `evaluated` to `final_tree` (module doc): one step per change with
/// a diff of its own, then one for the rest; at least one step.
pub fn plan(
    repo: &HarnessRepo,
    evaluated: &str,
    m: &Manifest,
    snaps: &ChangeSnapshots,
    final_tree: &str,
) -> anyhow::Result<Vec<Step>> {
    let base = repo.tree_of(evaluated)?;
    let listed: BTreeSet<&str> = m.changes.iter().map(|c| c.id.as_str()).collect();
    let mut steps = Vec::new();
    let mut tree = base.clone();
    let mut prev = base.clone();
    let mut snapshotted = BTreeSet::new();
    // A file whose final content is the content before the group's edits was reverted by
    // the orchestrator (or undone): it is in none of the group's commits.
    let groups = [(&snaps.rollbacks, false), (&snaps.agent, true)];
    for (group, is_agent) in groups {
        let origin = prev.clone();
        for s in group.iter() {
            let diff = repo.tree_diff_files(&prev, &s.tree)?;
            prev = s.tree.clone();
            if !listed.contains(s.id.as_str()) {
                continue;
            }
            snapshotted.insert(s.id.clone());
            let mut files = Vec::new();
            for f in diff {
                let reverted = repo.same_file(final_tree, &base, &f)?
                    || (is_agent && repo.same_file(final_tree, &origin, &f)?);
                if !reverted {
                    files.push(f);
                }
            }
            let next = repo.tree_with_files(&tree, &s.tree, &files)?;
            if next != tree {
                steps.push(Step {
                    change: Some(s.id.clone()),
                    tree: next.clone(),
                });
                tree = next;
            }
        }
    }
    // Changes submitted without a snapshot: the rest of the diff, split by their files.
    let rest: BTreeSet<String> = repo
        .tree_diff_files(&tree, final_tree)?
        .into_iter()
        .collect();
    let mut claimed = BTreeSet::new();
    for c in m.changes.iter().filter(|c| !snapshotted.contains(&c.id)) {
        let files: Vec<String> = c
            .files
            .iter()
            .filter(|f| rest.contains(*f) && claimed.insert((*f).clone()))
            .cloned()
            .collect();
        let next = repo.tree_with_files(&tree, final_tree, &files)?;
        if next != tree {
            steps.push(Step {
                change: Some(c.id.clone()),
                tree: next.clone(),
            });
            tree = next;
        }
    }
    if tree != final_tree || steps.is_empty() {
        steps.push(Step {
            change: None,
            tree: final_tree.to_string(),
        });
    }
    Ok(steps)
}

/// The commit phase's git work for iteration `it` (idempotent, also after a kill -9 at any
/// point): builds the chain (commit objects that move no ref), writes the manifest with each
/// change's commit, tags the last commit `iter-NNN`, then moves HEAD's branch there. A
/// resumed call with the tag set only finishes moving HEAD; without it, the unreferenced
/// commits of a killed call are ignored and the chain is built again.
pub fn commit_iteration(
    repo: &HarnessRepo,
    it: &IterationDir,
    evaluated: &str,
) -> anyhow::Result<Committed> {
    let t = it.number();
    let tag = iter_tag(t);
    let mut m = it.manifest()?;
    if repo.has_tag(&tag) {
        let head = repo.resolve(&tag)?;
        repo.advance_head(&head)?;
        return Ok(Committed {
            head,
            manifest: m,
            notes: Vec::new(),
        });
    }
    if let Some(head) = repo.untagged_head(&tag, evaluated)? {
        repo.set_tag(&tag, &head)?;
        return Ok(Committed {
            head,
            manifest: m,
            notes: Vec::new(),
        });
    }
    repo.scrub_git_meta()?;
    let final_tree = repo.snapshot_worktree()?;
    let snaps = it.change_snapshots()?;
    let steps = plan(repo, evaluated, &m, &snaps, &final_tree)?;
    let mut parent = evaluated.to_string();
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    let n = steps.len();
    for (i, s) in steps.iter().enumerate() {
        let change = s
            .change
            .as_ref()
            .and_then(|id| m.changes.iter().find(|c| &c.id == id));
        let msg = crate::inputs::history::step_message(t, &m, change, i, n);
        parent = repo.commit_tree(&s.tree, &parent, &msg)?;
        if let Some(id) = &s.change {
            ids.insert(id.clone(), parent.clone());
        }
    }
    let mut notes = Vec::new();
    for c in &mut m.changes {
        c.commit = ids.get(&c.id).cloned();
        if c.commit.is_none() {
            notes.push(format!(
                "change {} left no edit in the committed harness: it has no commit of its own",
                c.id
            ));
        }
    }
    // Manifest, then tag, then HEAD: a kill between any two steps resumes cleanly.
    it.write_manifest(&m)?;
    repo.set_tag(&tag, &parent)?;
    repo.advance_head(&parent)?;
    Ok(Committed {
        head: parent,
        manifest: m,
        notes,
    })
}
