//! The Confirm phase: a flip within noise (k = 2 makes every flip so) gets extra trials of
//! the evaluated harness, one round at a time, until it is significant, can no longer
//! become so, or `[attribution] confirm_trials` is reached — within what the iteration's
//! extra-trial budget has left after the counterfactual phase (harm first: it runs before
//! this one). Verdicts then use every trial; pass@1 keeps the first k.

use std::collections::BTreeMap;

use tokio_util::sync::CancellationToken;

use crate::attribute::AttributeInputs;
use crate::inputs::trials::Trials;
use ahe_attribution::attribute::TaskMove;
use ahe_rundir::evidence::Tally;
use ahe_rundir::run_dir::IterationDir;

/// The name of the confirmation trial set.
pub const SET: &str = "confirm";

use ahe_attribution::confirm::decided;

/// Trials (infra errors included) a set's results hold.
pub fn trials_in(results: &BTreeMap<String, Vec<ahe_bench::TrialResult>>) -> usize {
    results.values().map(Vec::len).sum()
}

/// Runs the confirmation rounds of iteration `it` and records them in `evidence.json`.
pub async fn confirm(
    i: &AttributeInputs<'_>,
    trials: &Trials<'_>,
    it: &IterationDir,
    evaluated: &str,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let cap = i.policy.confirm_trials;
    let ev = it.change_evaluation()?;
    let mut evidence = it.evidence();
    let spent = evidence.counterfactual_cost.trials as usize
        + evidence.canary.as_ref().map_or(0, |c| c.cf_trials) as usize;
    let budget = (i.policy)
        .extra_trial_cap(trials.tasks.len() * i.k as usize)
        .saturating_sub(spent);
    let flips: Vec<&TaskMove> = ev
        .fixed
        .iter()
        .chain(&ev.regressed)
        .filter(|m| m.within_noise)
        .collect();
    let mut results: BTreeMap<String, Vec<ahe_bench::TrialResult>> = BTreeMap::new();
    for round in 1..=cap {
        let tally = |t: &str| Tally::of(results.get(t).into_iter().flatten());
        let left = budget.saturating_sub(trials_in(&results));
        let pending: Vec<String> = flips
            .iter()
            .filter(|m| !decided(m, tally(&m.task), cap))
            .map(|m| m.task.clone())
            .take(left)
            .collect();
        if pending.is_empty() {
            break;
        }
        let (r, cost) = trials
            .run_set(it, SET, evaluated, &pending, round, cancel.clone())
            .await?;
        results = r;
        evidence.confirm_cost.add(&cost);
    }
    evidence.confirm = results
        .iter()
        .map(|(t, r)| (t.clone(), Tally::of(r)))
        .collect();
    evidence.confirm_cost.trials = trials_in(&results) as u32;
    evidence.confirm_cap = cap;
    it.write_evidence(&evidence)
}
