//! Automatic rollback (docs/attribution.md#verdicts, `rollback = "auto"`): each HARMFUL change of the previous
//! iteration is undone by a three-way `git revert` of its own commit, so other changes in the
//! same file survive. A file whose revert conflicts falls back to a file-level restore (as it
//! was before the change), and the lines of other changes that this removed are named, in
//! the rollback's description and in the evolve prompt. A change without a commit (older
//! manifests) is rolled back by restoring its files from the harness its iteration evaluated.

use std::collections::BTreeMap;

use serde::Serialize;

use ahe_attribution::attribute::{ChangeEvaluation, Verdict};
use ahe_rundir::attribution::ChangeVerdict;
use ahe_rundir::manifest::{Change, ChangeKind, Manifest};
use ahe_rundir::run_dir::IterationDir;
use ahe_rundir::snapshots::ChangeSnapshot;
use ahe_runner::repo::HarnessRepo;

/// Lines per harness-relative file (what `lines_removed` / `lines_added` give).
type FileLines = Vec<(String, Vec<String>)>;

/// Lines a rollback removed that were not the rolled-back change's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostLines {
    /// The change of the previous manifest that added them (`None`: no change's commit did).
    pub change: Option<String>,
    /// Harness-relative file.
    pub file: String,
    /// The lines, as they were.
    pub lines: Vec<String>,
}

/// One automatic rollback, applied to the working tree.
#[derive(Debug, Clone)]
pub struct Rollback {
    /// The manifest entry (kind rollback, `files` = the files it changed).
    pub change: Change,
    /// Tree id of the working tree after it (its snapshot: it gets its own commit).
    pub tree: String,
    /// Files whose revert conflicted and were restored whole instead.
    pub restored: Vec<String>,
    /// What the file-level restore removed besides the change's own lines.
    pub lost: Vec<LostLines>,
}

/// The automatic rollbacks of one evolve phase.
#[derive(Debug, Clone, Default)]
pub struct Rollbacks {
    /// Applied rollbacks, in order.
    pub applied: Vec<Rollback>,
    /// What the orchestrator notes (one line per rollback, and HARMFUL changes left as is).
    pub notes: Vec<String>,
}

impl Rollbacks {
    /// The rollback changes (the first entries of the manifest).
    pub fn changes(&self) -> Vec<Change> {
        self.applied.iter().map(|r| r.change.clone()).collect()
    }

    /// Their snapshots, in order (for `evolve/snapshots.json`).
    pub fn snapshots(&self) -> Vec<ChangeSnapshot> {
        let snap = |r: &Rollback| ChangeSnapshot {
            id: r.change.id.clone(),
            tree: r.tree.clone(),
        };
        self.applied.iter().map(snap).collect()
    }

    /// The tree the evolve agent starts from: the last rollback's, or `evaluated`'s.
    pub fn start_tree(&self, repo: &HarnessRepo, evaluated: &str) -> anyhow::Result<String> {
        match self.applied.last() {
            Some(r) => Ok(r.tree.clone()),
            None => repo.tree_of(evaluated),
        }
    }
}

/// Rolls back the previous iteration's HARMFUL changes in the working tree (which holds
/// `evaluated`), one after the other; returns the rollback changes to record.
pub fn auto_rollback(
    prev: &IterationDir,
    repo: &HarnessRepo,
    ev: &ChangeEvaluation,
    evaluated: &str,
) -> anyhow::Result<Rollbacks> {
    auto_rollback_of(prev, repo, ev, evaluated, &[Verdict::Harmful])
}

/// [`auto_rollback`] of the changes whose verdict is one of `verdicts` (HARMFUL, and
/// UNJUDGED under `[attribution] unjudged = "revert"`).
pub fn auto_rollback_of(
    prev: &IterationDir,
    repo: &HarnessRepo,
    ev: &ChangeEvaluation,
    evaluated: &str,
    verdicts: &[Verdict],
) -> anyhow::Result<Rollbacks> {
    let Some(base) = prev.evaluated() else {
        anyhow::bail!("{}: no evaluated commit", prev.path().display());
    };
    let Ok(manifest) = prev.manifest() else {
        return Ok(Rollbacks::default());
    };
    let mut out = Rollbacks::default();
    let mut onto = evaluated.to_string();
    for v in ev.changes.iter().filter(|v| verdicts.contains(&v.verdict)) {
        let Some(c) = manifest.changes.iter().find(|c| c.id == v.id) else {
            continue;
        };
        let onto_tree = repo.tree_of(&onto)?;
        let commit = c.commit.as_deref().filter(|x| repo.resolve(x).is_ok());
        let (tree, restored, lost) = undo(repo, &manifest, &base, c, commit, &onto, &onto_tree)?;
        let files = repo.tree_diff_files(&onto_tree, &tree)?;
        if files.is_empty() {
            out.notes.push(format!(
                "auto-rollback of {}: nothing left to undo in the harness",
                c.id
            ));
            continue;
        }
        repo.reset_worktree(&tree)?;
        let how = match (commit, restored.is_empty()) {
            (None, _) => "restoring its files".to_string(),
            (Some(_), true) => "reverting its commit".to_string(),
            (Some(_), false) => format!(
                "reverting its commit; {} conflicted with later edits and went back whole to \
                 before the change{}",
                restored.join(", "),
                lost_text(&lost)
            ),
        };
        let change = rollback_change(prev.number(), c, v, files.clone(), &how);
        out.notes.push(format!(
            "auto-rollback: {} ({}){}",
            change.id,
            files.join(", "),
            if lost.is_empty() {
                String::new()
            } else {
                format!("; conflict fallback{}", lost_text(&lost))
            }
        ));
        onto = repo.commit_tree(&tree, &onto, &format!("auto-rollback {}", change.id))?;
        out.applied.push(Rollback {
            change,
            tree,
            restored,
            lost,
        });
    }
    Ok(out)
}

/// Undoes change `c` on top of `onto`: reverts its commit (a conflicting file goes back whole
/// to before the change, with the lines that loses), or restores its files from `base` when
/// it has no commit. Returns the new tree, the files restored whole and the lost lines.
fn undo(
    repo: &HarnessRepo,
    manifest: &Manifest,
    base: &str,
    c: &Change,
    commit: Option<&str>,
    onto: &str,
    onto_tree: &str,
) -> anyhow::Result<(String, Vec<String>, Vec<LostLines>)> {
    let Some(commit) = commit else {
        repo.restore_files(base, &c.files)?;
        return Ok((repo.snapshot_worktree()?, Vec::new(), Vec::new()));
    };
    let r = repo.revert_or_restore(onto, commit)?;
    let lost = match r.restored.is_empty() {
        true => Vec::new(),
        false => lost_lines(repo, manifest, commit, onto_tree, &r.tree, &r.restored)?,
    };
    Ok((r.tree, r.restored, lost))
}

/// The rollback change that undoes `c` (judged `v` in iteration `t`) by `how`, touching `files`.
fn rollback_change(t: u32, c: &Change, v: &ChangeVerdict, files: Vec<String>, how: &str) -> Change {
    let unjudged = v.verdict == Verdict::Unjudged;
    Change {
        id: format!("rollback-{}", c.id),
        kind: ChangeKind::Rollback,
        description: format!(
            "Automatic rollback of {} change {} (iteration {t}: {}) by {how}",
            ahe_attribution::attribute::verdict_name(v.verdict),
            c.id,
            c.description
        ),
        files,
        failure_pattern: match unjudged {
            true => format!("unexplained regressions that {} may have caused", c.id),
            false => format!("regressions caused by {}", c.id),
        },
        root_cause: c.root_cause.clone(),
        predicted_fixes: match unjudged {
            true => v.regressions_matched.clone(),
            false => v.blamed_regressions.clone(),
        },
        risk_tasks: Vec::new(),
        component: c.component,
        why_this_component: match unjudged {
            true => {
                "undoes a change the budget could not clear ([attribution] unjudged = \"revert\")"
                    .into()
            }
            false => "undoes the harmful change".into(),
        },
        commit: None,
    }
}

/// `, which also removed 2 line(s) of c3 and 1 of no change` (empty when nothing was lost).
fn lost_text(lost: &[LostLines]) -> String {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for l in lost {
        let who = l
            .change
            .clone()
            .unwrap_or_else(|| "edits of no change".into());
        *by.entry(who).or_default() += l.lines.len();
    }
    if by.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(k, n)| format!("{n} line(s) of {k}"))
        .collect();
    format!(", which also removed {}", parts.join(" and "))
}

/// The lines a file-level restore removed (`from_tree` → `to_tree`, in `files`) that were not
/// the culprit `commit`'s own, each attributed to the change of `m` whose commit added it.
fn lost_lines(
    repo: &HarnessRepo,
    m: &Manifest,
    commit: &str,
    from_tree: &str,
    to_tree: &str,
    files: &[String],
) -> anyhow::Result<Vec<LostLines>> {
    let own = repo.lines_added(commit)?;
    // Who added what: the later a change, the likelier its line is the one that survived.
    let mut added: Vec<(String, FileLines)> = Vec::new();
    for c in m.changes.iter().rev() {
        if let Some(x) = c.commit.as_deref().filter(|x| *x != commit) {
            if repo.resolve(x).is_ok() {
                added.push((c.id.clone(), repo.lines_added(x)?));
            }
        }
    }
    let lines_in = |v: &[(String, Vec<String>)], f: &str| -> Vec<String> {
        v.iter()
            .filter(|(g, _)| g == f)
            .flat_map(|(_, l)| l.clone())
            .collect()
    };
    let mut out: Vec<LostLines> = Vec::new();
    for (file, lines) in repo.lines_removed(from_tree, to_tree)? {
        if !files.contains(&file) {
            continue;
        }
        let mut own_left = lines_in(&own, &file);
        for line in lines {
            if let Some(i) = own_left.iter().position(|l| *l == line) {
                own_left.remove(i);
                continue;
            }
            let who = added
                .iter()
                .find(|(_, a)| lines_in(a, &file).contains(&line))
                .map(|(id, _)| id.clone());
            match out.iter_mut().find(|l| l.file == file && l.change == who) {
                Some(l) => l.lines.push(line),
                None => out.push(LostLines {
                    change: who,
                    file: file.clone(),
                    lines: vec![line],
                }),
            }
        }
    }
    Ok(out)
}
