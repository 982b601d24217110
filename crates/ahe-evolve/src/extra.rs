//! Trials beyond an iteration's rollout — confirmation, counterfactual and canary trials:
//! a harness commit run on a few tasks into a set directory of its own
//! (`iterations/NNN/extra/<set>/`), each finished trial journaled so that a resumed phase
//! runs none of them twice. Their costs are counted apart from the rollout's.

use std::collections::BTreeMap;
use std::sync::Arc;

use ahe_bench::{Progress, TrialResult};
use tokio_util::sync::CancellationToken;

use crate::journal::Entry;
use crate::run::Run;
use crate::run_dir::IterationDir;

pub use ahe_rundir::evidence::{SetCost, Tally};

/// Runs attempts `1..=k` of each task in `tasks` (those the journal has as done are kept)
/// of harness `commit` as extra trial set `set` of iteration `it`; returns every finished
/// trial of the set, by task, and what this call's trials cost.
pub async fn run_set(
    run: &Run,
    it: &IterationDir,
    set: &str,
    commit: &str,
    tasks: &[String],
    k: u32,
    cancel: CancellationToken,
) -> anyhow::Result<(BTreeMap<String, Vec<TrialResult>>, SetCost)> {
    let conc = run.cfg.sandbox.concurrency;
    run_set_with(run, it, set, commit, tasks, k, conc, cancel).await
}

/// [`run_set`] with at most `concurrency` trials of the set at once (several sets running
/// side by side share the sandbox concurrency).
#[allow(clippy::too_many_arguments)]
pub async fn run_set_with(
    run: &Run,
    it: &IterationDir,
    set: &str,
    commit: &str,
    tasks: &[String],
    k: u32,
    concurrency: usize,
    cancel: CancellationToken,
) -> anyhow::Result<(BTreeMap<String, Vec<TrialResult>>, SetCost)> {
    let t = it.number();
    let dir = it.extra(set);
    let checkout = it.extra_harness(set);
    let _ = std::fs::remove_dir_all(&checkout);
    run.repo.export(commit, &checkout)?;
    let harness = crate::run::load_harness(&checkout)?;
    let done = run.journal.extra_trials_done(t, set);
    let prior: Vec<TrialResult> = crate::clean::load_results(&it.extra_eval(set).trials())
        .unwrap_or_default()
        .into_iter()
        .filter(|r| done.contains(&(r.task.clone(), r.attempt)))
        .collect();
    let missing = tasks
        .iter()
        .flat_map(|x| (1..=k).map(move |a| (x.clone(), a)))
        .filter(|p| !done.contains(p))
        .count();
    let chosen: Vec<ahe_bench::Task> = run
        .tasks
        .iter()
        .filter(|x| tasks.contains(&x.name))
        .cloned()
        .collect();
    let mut cost = SetCost::default();
    if missing > 0 && !chosen.is_empty() {
        run.say(format!(
            "[iter {t}] {set}: {missing} trial(s) on {} task(s)",
            chosen.len()
        ));
        let mut spec = run.rollout_spec(harness, chosen, k, &dir, prior);
        spec.concurrency = concurrency.max(1);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<TrialResult>();
        let cb: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(move |p| {
            if let Progress::TrialDone { result } = p {
                let _ = tx.send(*result);
            }
        });
        let journal = |r: TrialResult| {
            run.journal.append(Entry::ExtraTrialDone {
                iter: t,
                set: set.to_string(),
                task: r.task,
                attempt: r.attempt,
                status: r.status.as_str().into(),
            })
        };
        let opts = run.client_opts();
        let fut = crate::rollout_with(spec, &opts, cancel, cb);
        tokio::pin!(fut);
        let scores = loop {
            tokio::select! {
                r = &mut fut => break r?,
                Some(r) = rx.recv() => journal(r)?,
            }
        };
        while let Ok(r) = rx.try_recv() {
            journal(r)?;
        }
        cost = SetCost {
            trials: missing as u32,
            cost_usd: scores.meta.model_cost_usd.unwrap_or(scores.cost_usd),
            usage: ahe_model::Usage {
                input_tokens: scores.tokens.input,
                cached_input_tokens: scores.tokens.cached_input,
                output_tokens: scores.tokens.output,
                cache_write_input_tokens: scores.tokens.cache_write_input,
                reasoning_tokens: scores.tokens.reasoning,
            },
        };
    }
    let done = run.journal.extra_trials_done(t, set);
    let mut out: BTreeMap<String, Vec<TrialResult>> = BTreeMap::new();
    for r in crate::clean::load_results(&it.extra_eval(set).trials()).unwrap_or_default() {
        if done.contains(&(r.task.clone(), r.attempt)) {
            out.entry(r.task.clone()).or_default().push(r);
        }
    }
    for v in out.values_mut() {
        v.sort_by_key(|r| r.attempt);
    }
    Ok((out, cost))
}
