//! The Rollout phase of one iteration of a run (the trials themselves are [`ahe_runner::rollout`]).

use std::collections::BTreeSet;

use ahe_bench::{Progress, Scores};
use tokio_util::sync::CancellationToken;

use crate::debug::overlap::DebugOverlap;
use crate::inputs::run::Split;
use crate::inputs::trials::Trials;
use ahe_rundir::journal::Entry;
use ahe_rundir::run_dir::{IterationDir, IterationRecord, IterationScores, RunDir};

/// What the rollout of one iteration reads besides the trials interface.
pub struct RolloutInputs<'a> {
    /// The iteration being rolled out.
    pub it: &'a IterationDir,
    /// The harness commit it evaluates (committed, never the working tree).
    pub evaluated: &'a str,
    /// Trials per task.
    pub k: u32,
    /// The run's tasks: all are run; pass@1 is recorded for the visible and held-out ones.
    pub split: Split<'a>,
    /// The run directory (the previous iteration's times order the tasks).
    pub dir: &'a RunDir,
    /// The debuggers that start as each task's trials finish, with `[evolve]
    /// debugger_concurrency` (their time weighs into the order).
    pub ahead: Option<(&'a DebugOverlap, usize)>,
}

/// The Rollout phase of iteration `it`: exports the evaluated commit, runs its trials (those
/// the journal has as done are kept), journals each finished trial, and writes `scores.json`
/// with the iteration record.
pub async fn rollout_iteration(
    i: &RolloutInputs<'_>,
    trials: &Trials<'_>,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let (it, t) = (i.it, i.it.number());
    let harness = trials.checkout(i.evaluated, &it.harness_checkout())?;
    let journal = trials.ledger.journal;
    let done = journal.trials_done(t);
    let prior = crate::inputs::trials::journaled(&it.trials(), &done);
    let ahead = i.ahead.map(|a| a.0);
    if let Some(a) = ahead {
        a.prime(&prior);
    }
    let on_progress = |p: Progress| {
        if let Progress::TrialDone { result } = &p {
            let _ = journal.append(Entry::TrialDone {
                iter: t,
                task: result.task.clone(),
                attempt: result.attempt,
                status: result.status.as_str().into(),
            });
            // Journaled first: a debugger never runs ahead of its trials' record.
            if let Some(a) = ahead {
                a.trial_done(result);
            }
        }
        (trials.ledger.progress)(p);
        Ok(())
    };
    let mut spec = trials.spec(harness, i.split.tasks.to_vec(), i.k, it.path(), prior);
    // Longest first, by the previous iteration's trial and debugger times (else the tasks'
    // timeouts); the debugger counts only when it runs during this rollout.
    if t > 1 {
        let weight = match i.ahead {
            Some((_, dc)) => spec.concurrency as f64 / dc.max(1) as f64,
            None => 0.0,
        };
        let prev = i.dir.iteration(t - 1);
        spec.expected_sec = crate::debug::overlap::expected_with_debugger(&prev, weight);
    }
    let scores = trials.drive(spec, cancel, on_progress).await?;
    it.write_scores(record(scores, t, i.evaluated, &i.split))?;
    Ok(())
}

/// The iteration's scores with its record: the evaluated commit and the pass@1 (with its
/// interval) of the visible and held-out tasks.
fn record(scores: Scores, t: u32, evaluated: &str, split: &Split) -> IterationScores {
    let subset = |set: &BTreeSet<String>| -> (f64, [f64; 2]) {
        let rates: Vec<f64> = scores
            .tasks
            .iter()
            .filter(|(k, _)| set.contains(*k))
            .map(|(_, v)| v.pass_at_1)
            .collect();
        ahe_bench::scores::mean_with_ci(&rates)
    };
    let (vp, vci) = subset(split.visible);
    let (hp, hci) = subset(split.holdout);
    let held = !split.holdout.is_empty();
    let mut s = IterationScores::of(scores);
    s.record = IterationRecord {
        iteration: Some(t),
        evaluated_commit: Some(evaluated.into()),
        visible_pass_at_1: Some(vp),
        visible_pass_at_1_ci: Some(vci),
        holdout_pass_at_1: held.then_some(hp),
        holdout_pass_at_1_ci: held.then_some(hci),
        holdout_tasks: held.then(|| split.holdout.clone()),
        // The judge's cost, when it ran (the other roles are added by their phases).
        roles: s.record.roles.take(),
    };
    s
}
