//! The leak guard of an evolve phase: the run's index and policy, the baseline harness,
//! the check of a submission, the revert of what stays refused, and the model-facing text.

use std::collections::BTreeMap;
use std::path::Path;

use rayon::prelude::*;

use super::{added_lines, LeakIndex, TaskText};
use ahe_rundir::leak::{describe, LeakHit, LeakPolicy, LeakRecord, SPAN};

const REFUSED: &str = include_str!("../../../templates/leak_refused.md");

/// The leak guard of a run: the policy and the index of the run's tasks (visible and
/// held-out). `None` in [`crate::evolve::agent::EvolveInputs`] means the guard is off.
#[derive(Clone)]
pub struct LeakSettings {
    /// Reject or warn (off is `None`).
    pub policy: LeakPolicy,
    /// Names and text windows of every task of the run.
    pub index: std::sync::Arc<LeakIndex>,
}

impl LeakSettings {
    /// Indexes `tasks` (held-out ones marked) under `policy`; `None` when the policy is off.
    pub fn build(
        policy: LeakPolicy,
        tasks: &[ahe_bench::Task],
        held_out: &std::collections::BTreeSet<String>,
    ) -> Option<LeakSettings> {
        if policy == LeakPolicy::Off {
            return None;
        }
        let texts: Vec<TaskText> = tasks
            .par_iter()
            .map(|t| TaskText::read(&t.name, &t.dir, held_out.contains(&t.name)))
            .collect();
        Some(LeakSettings {
            policy,
            index: std::sync::Arc::new(LeakIndex::build(&texts)),
        })
    }
}

/// One evolve phase's guard: what the harness looked like before the agent edited it
/// (the evaluated commit, plus the files automatic rollbacks had already restored).
pub struct Guard {
    /// Policy and index.
    pub settings: LeakSettings,
    dir: std::path::PathBuf,
    evaluated: String,
    /// Rollback-restored files: their content when the agent started (`None` = absent).
    snapshot: BTreeMap<String, Option<Vec<u8>>>,
}

impl Guard {
    /// A guard over the harness working tree `dir` whose baseline is `evaluated` with the
    /// current content of `rollback_files`.
    pub fn new(
        settings: LeakSettings,
        dir: &Path,
        evaluated: &str,
        rollback_files: &[String],
    ) -> Guard {
        let snapshot = rollback_files
            .iter()
            .map(|f| (f.clone(), std::fs::read(dir.join(f)).ok()))
            .collect();
        Guard {
            settings,
            dir: dir.to_path_buf(),
            evaluated: evaluated.to_string(),
            snapshot,
        }
    }

    /// The baseline content of a harness-relative file (`None` = it did not exist).
    fn baseline(&self, repo: &git2::Repository, rel: &str) -> anyhow::Result<Option<Vec<u8>>> {
        if let Some(s) = self.snapshot.get(rel) {
            return Ok(s.clone());
        }
        let tree = repo
            .find_commit(git2::Oid::from_str(&self.evaluated)?)?
            .tree()?;
        Ok(match tree.get_path(Path::new(rel)) {
            Ok(e) => Some(e.to_object(repo)?.peel_to_blob()?.content().to_vec()),
            Err(_) => None,
        })
    }

    /// Hits in what the working tree adds to the baseline (editable files only).
    pub fn check(&self) -> anyhow::Result<Vec<LeakHit>> {
        let files =
            ahe_runner::repo::HarnessRepo::open(&self.dir)?.changed_files(&self.evaluated)?;
        let repo = git2::Repository::open(&self.dir)?;
        let mut hits = Vec::new();
        for f in files
            .iter()
            .filter(|f| ahe_rundir::manifest::is_editable(f))
        {
            let Ok(new) = std::fs::read(self.dir.join(f)) else {
                continue; // deleted: adds nothing
            };
            let old = self.baseline(&repo, f)?;
            if old.as_deref() == Some(&new[..]) {
                continue;
            }
            hits.extend(
                self.settings
                    .index
                    .scan(f, &added_lines(old.as_deref(), &new)),
            );
        }
        Ok(hits)
    }

    /// The leak guard after the agent stopped: checks the final tree; under reject reverts the
    /// leaking files and drops the changes left with no file. Returns the manifest's record.
    pub fn finish(
        &self,
        m: &mut ahe_rundir::manifest::Manifest,
        rejected_submissions: u32,
        notes: &mut Vec<String>,
    ) -> anyhow::Result<Option<LeakRecord>> {
        let refused = self.check()?;
        if refused.is_empty() && rejected_submissions == 0 {
            return Ok(None);
        }
        let policy = self.settings.policy;
        let lines: Vec<String> = refused.iter().map(describe).collect();
        let mut reverted: Vec<String> = Vec::new();
        let mut dropped = Vec::new();
        if policy == LeakPolicy::Reject && !refused.is_empty() {
            reverted = refused.iter().map(|h| h.file.clone()).collect();
            reverted.sort();
            reverted.dedup();
            self.revert(&reverted)?;
            m.changes.retain(|c| {
                let gone = !c.files.is_empty() && c.files.iter().all(|f| reverted.contains(f));
                if gone {
                    dropped.push(c.id.clone());
                }
                !gone
            });
            notes.push(format!(
                "leak guard reverted {} ({}){}",
                reverted.join(", "),
                lines.join("; "),
                if dropped.is_empty() {
                    String::new()
                } else {
                    format!("; dropped change(s) {}", dropped.join(", "))
                }
            ));
        } else if !refused.is_empty() {
            notes.push(format!("leak guard (warn), kept: {}", lines.join("; ")));
        }
        Ok(Some(LeakRecord {
            policy,
            refused,
            reverted,
            rejected_submissions,
            dropped_changes: dropped,
        }))
    }

    /// Restores `files` to their baseline content (deleting those that did not exist, and
    /// the directory such a file leaves empty).
    pub fn revert(&self, files: &[String]) -> anyhow::Result<()> {
        let repo = git2::Repository::open(&self.dir)?;
        for f in files {
            let path = self.dir.join(f);
            match self.baseline(&repo, f)? {
                Some(b) => std::fs::write(&path, b)?,
                None if path.is_file() => {
                    std::fs::remove_file(&path)?;
                    // A directory the file was the only entry of goes too (fails if not empty).
                    if let Some(parent) = path.parent().filter(|p| *p != self.dir) {
                        let _ = std::fs::remove_dir(parent);
                    }
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// The submit tool's answer to a refused submission (template `leak_refused.md`).
pub fn refusal(hits: &[LeakHit]) -> String {
    let files: std::collections::BTreeSet<&str> = hits.iter().map(|h| h.file.as_str()).collect();
    let env = minijinja::Environment::new();
    env.render_str(
        REFUSED,
        minijinja::context! { hits => hits, files => files, span => SPAN },
    )
    .unwrap_or_else(|e| format!("leak guard: the refusal template does not render: {e}"))
}
