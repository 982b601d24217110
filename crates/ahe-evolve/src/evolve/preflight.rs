//! The pre-flight check of the evolve step: one smoke trial of the new harness before it
//! is committed; an infra error (the edit broke the harness's own machinery) reverts the
//! agent's edits, keeping only the rollbacks (so the agent's changes get no commit).

use tokio_util::sync::CancellationToken;

use crate::inputs::run::Split;
use crate::inputs::trials::Trials;
use ahe_rundir::manifest::ChangeKind;
use ahe_rundir::run_dir::IterationDir;

/// Runs one trial of the working tree's harness on the first visible task; on an infra
/// error resets the working tree to `start` (the tree the agent started from: the evaluated
/// harness with the automatic rollbacks) and rewrites the manifest and snapshots without
/// the agent's changes. Returns whether the edits were reverted.
pub async fn preflight(
    trials: &Trials<'_>,
    split: Split<'_>,
    it: &IterationDir,
    start: &str,
    cancel: CancellationToken,
) -> anyhow::Result<bool> {
    let t = it.number();
    let Some(task) = split.tasks.iter().find(|x| split.visible.contains(&x.name)) else {
        return Ok(false);
    };
    // A harness that does not validate is caught by the rollout, with its problems listed.
    let Ok(harness) = ahe_harness::load(trials.repo.dir()) else {
        return Ok(false);
    };
    let out = ahe_bench::EvalDir::new(it.preflight());
    let _ = std::fs::remove_dir_all(out.path());
    let mut spec = trials.spec(harness, vec![task.clone()], 1, out.path(), vec![]);
    spec.concurrency = 1;
    spec.infra_retries = 0;
    let s = trials.drive(spec, cancel, |_| Ok(())).await?;
    out.write_scores(&s)?;
    if s.statuses.get("infra_error").copied().unwrap_or(0) == 0 {
        return Ok(false);
    }
    trials.ledger.note(
        t,
        format!(
            "pre-flight trial of {} hit an infra error: the evolve edits are reverted",
            task.name
        ),
    )?;
    trials.repo.reset_worktree(start)?;
    let mut snaps = it.change_snapshots()?;
    snaps.agent.clear();
    it.write_change_snapshots(&snaps)?;
    let mut m = it.manifest()?;
    let auto: std::collections::BTreeSet<&String> = snaps.rollbacks.iter().map(|s| &s.id).collect();
    m.changes
        .retain(|c| c.kind == ChangeKind::Rollback && auto.contains(&c.id));
    it.write_manifest(&m)?;
    Ok(true)
}
