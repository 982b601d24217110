//! The Confirm phase: a flip within noise (k = 2 makes every flip so) gets extra trials of
//! the evaluated harness, one round at a time, until it is significant, can no longer
//! become so, or `[attribution] confirm_trials` is reached — within the iteration's
//! extra-trial budget. Verdicts then use every trial; pass@1 keeps the first k.

use std::collections::BTreeMap;

use tokio_util::sync::CancellationToken;

use crate::attribute::TaskMove;
use crate::extra::{self, Tally};
use crate::run::Run;
use crate::run_dir::IterationDir;
use crate::stats::{fisher_exact, ALPHA};

/// The name of the confirmation trial set.
pub const SET: &str = "confirm";

/// Whether a flip needs no more confirmation trials: significant with `extra`, or `cap`
/// attempts made, or not significant even if every remaining attempt went its way.
pub fn decided(m: &TaskMove, extra: Tally, cap: u32) -> bool {
    let attempts = extra.trials + extra.infra;
    let p = |passed: u32, n: u32| fisher_exact(m.prev_passed, m.prev_k, passed, n);
    let (cp, ck) = (m.cur_passed + extra.passed, m.cur_k + extra.trials);
    if attempts >= cap || p(cp, ck) < ALPHA {
        return true;
    }
    let left = cap - attempts;
    let improving = m.cur_passed * m.prev_k > m.prev_passed * m.cur_k;
    let best = match improving {
        true => p(cp + left, ck + left),
        false => p(cp, ck + left),
    };
    best >= ALPHA
}

/// Trials (infra errors included) a set's results hold.
pub fn trials_in(results: &BTreeMap<String, Vec<ahe_bench::TrialResult>>) -> usize {
    results.values().map(Vec::len).sum()
}

/// Runs the confirmation rounds of iteration `it` and records them in `evidence.json`.
pub async fn confirm(
    run: &Run,
    it: &IterationDir,
    evaluated: &str,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let cap = run.cfg.attribution.confirm_trials;
    let ev = it.change_evaluation()?;
    let budget = run
        .cfg
        .attribution
        .extra_trial_cap(run.tasks.len() * run.cfg.k as usize);
    let flips: Vec<&TaskMove> = ev
        .fixed
        .iter()
        .chain(&ev.regressed)
        .filter(|m| m.within_noise)
        .collect();
    let mut evidence = it.evidence();
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
        let (r, cost) =
            extra::run_set(run, it, SET, evaluated, &pending, round, cancel.clone()).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use ahe_bench::TaskStatus;

    fn mv(pp: u32, pk: u32, cp: u32, ck: u32) -> TaskMove {
        TaskMove {
            task: "t".into(),
            prev_status: TaskStatus::Fail,
            cur_status: TaskStatus::Pass,
            prev_passed: pp,
            prev_k: pk,
            cur_passed: cp,
            cur_k: ck,
            p_value: fisher_exact(pp, pk, cp, ck),
            within_noise: true,
            extra_passed: 0,
            extra_trials: 0,
        }
    }

    fn tally(passed: u32, trials: u32) -> Tally {
        Tally {
            passed,
            trials,
            infra: 0,
        }
    }

    #[test]
    fn a_clean_fix_needs_three_more_passes_at_k2() {
        let m = mv(0, 2, 2, 2);
        assert!(!decided(&m, Tally::default(), 4));
        assert!(!decided(&m, tally(2, 2), 4), "0/2 vs 4/4 has p = 0.067");
        assert!(decided(&m, tally(3, 3), 4), "0/2 vs 5/5 has p = 0.048");
        // One failure among the extras: 0/2 vs 4/5 can still reach 5/6 at most (p > α).
        assert!(decided(&m, tally(2, 3), 4));
        assert!(decided(&m, Tally::default(), 0), "no trials allowed");
    }

    #[test]
    fn a_regression_is_confirmed_by_failures() {
        let m = mv(2, 2, 0, 2);
        assert!(!decided(&m, tally(0, 2), 4));
        assert!(decided(&m, tally(0, 3), 4));
        assert!(decided(&m, tally(1, 1), 4), "a pass makes it hopeless");
        let infra = Tally {
            passed: 0,
            trials: 1,
            infra: 3,
        };
        assert!(decided(&m, infra, 4), "infra errors use up attempts");
    }
}
