//! The Commit phase (Commit(H_t, C_t, t)): the guarded working tree as a chain of one commit
//! per change, the last tagged `iter-NNN`; the manifest with each change's commit, the diff
//! and the summary.

pub mod chain;
pub mod rollback;

use crate::inputs::history;
use ahe_rundir::journal::Journal;
use ahe_rundir::run_dir::IterationDir;
use ahe_runner::repo::caps::WriteCaps;
use ahe_runner::repo::{iter_tag, HarnessRepo};

/// Commits iteration `it`'s edits on top of `evaluated`, recording each note as it comes.
pub fn commit(
    repo: &HarnessRepo,
    it: &IterationDir,
    evaluated: &str,
    caps: &WriteCaps,
    journal: &Journal,
    note: &dyn Fn(String) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let t = it.number();
    // Files planted by other means than the jail's tools are caught here too.
    if !repo.has_tag(&iter_tag(t)) {
        for n in repo.guard(evaluated, caps)? {
            note(n)?;
        }
    }
    let done = chain::commit_iteration(repo, it, evaluated)?;
    for n in done.notes {
        note(n)?;
    }
    let (m, id) = (&done.manifest, &done.head);
    let summary = history::summary_md(t, m, journal, evaluated, id);
    it.write_commit_files(&repo.diff_patch(evaluated, id)?, &summary)
}
