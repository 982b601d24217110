//! The Rollout phase of one iteration of a run (the trials themselves are [`crate::rollout`]).

use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use ahe_bench::Progress;

use crate::rollout::rollout_with;

/// The Rollout phase of iteration `it`: exports the evaluated commit (evaluated ==
/// committed, never the working tree), runs its trials (those the journal has as done are
/// kept), journals each finished trial, and writes `scores.json` with the iteration record.
pub async fn rollout_iteration(
    run: &crate::run::Run,
    it: &crate::run_dir::IterationDir,
    evaluated: &str,
    ahead: Option<&crate::overlap::DebugOverlap>,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    use crate::journal::Entry;
    use std::collections::BTreeSet;
    let t = it.number();
    let checkout = it.harness_checkout();
    if checkout.exists() {
        std::fs::remove_dir_all(&checkout)?;
    }
    run.repo.export(evaluated, &checkout)?;
    let harness = crate::run::load_harness(&checkout)?;
    let done = run.journal.trials_done(t);
    let prior: Vec<ahe_bench::TrialResult> = crate::clean::load_results(&it.trials())
        .unwrap_or_default()
        .into_iter()
        .filter(|r| done.contains(&(r.task.clone(), r.attempt)))
        .collect();
    if let Some(a) = ahead {
        a.prime(&prior);
    }
    let on_progress = |p: Progress| {
        if let Progress::TrialDone { result } = &p {
            let _ = run.journal.append(Entry::TrialDone {
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
        (run.progress)(p);
    };
    // The callback must be 'static for the trial tasks: bridge through a channel.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
    let cb: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(move |p| {
        let _ = tx.send(p);
    });
    let mut spec = run.rollout_spec(harness, run.tasks.clone(), run.cfg.k, it.path(), prior);
    // Longest first, by the previous iteration's trial and debugger times (else the tasks'
    // timeouts); the debugger counts only when it runs during this rollout.
    if t > 1 {
        let ec = &run.cfg.evolve;
        let weight = match ahead {
            Some(_) => spec.concurrency as f64 / ec.debugger_concurrency.max(1) as f64,
            None => 0.0,
        };
        let prev = run.dir.iteration(t - 1);
        spec.expected_sec = crate::overlap::expected_with_debugger(&prev, weight);
    }
    let opts = run.client_opts();
    let fut = rollout_with(spec, &opts, cancel, cb);
    tokio::pin!(fut);
    let scores = loop {
        tokio::select! {
            r = &mut fut => break r?,
            Some(p) = rx.recv() => on_progress(p),
        }
    };
    while let Ok(p) = rx.try_recv() {
        on_progress(p);
    }
    let subset = |set: &BTreeSet<String>| -> (f64, [f64; 2]) {
        let rates: Vec<f64> = scores
            .tasks
            .iter()
            .filter(|(k, _)| set.contains(*k))
            .map(|(_, v)| v.pass_at_1)
            .collect();
        ahe_bench::scores::mean_with_ci(&rates)
    };
    let (vp, vci) = subset(&run.visible);
    let (hp, hci) = subset(&run.holdout);
    let held = !run.holdout.is_empty();
    let mut s = crate::run_dir::IterationScores::of(scores);
    s.record = crate::run_dir::IterationRecord {
        iteration: Some(t),
        evaluated_commit: Some(evaluated.into()),
        visible_pass_at_1: Some(vp),
        visible_pass_at_1_ci: Some(vci),
        holdout_pass_at_1: held.then_some(hp),
        holdout_pass_at_1_ci: held.then_some(hci),
        holdout_tasks: held.then(|| run.holdout.clone()),
        // The judge's cost, when it ran (the other roles are added by their phases).
        roles: s.record.roles.take(),
    };
    it.write_scores(s)?;
    Ok(())
}
