//! The Counterfactual phase: each regressed task, and each fix claimed by several changes or
//! by none, is re-run on the evaluated harness minus one candidate change (a three-way
//! `git revert` of the change's commit, in memory). The change whose revert restores the
//! task's previous status is blamed (or credited) — whatever it predicted. Candidates are the
//! changes whose files the task's trials exercised; trials run a round at a time and a pair
//! stops at its first decisive trial; everything within the iteration's extra-trial budget.

use std::collections::{BTreeMap, BTreeSet};

use tokio_util::sync::CancellationToken;

use crate::attribute::{change_touches, ChangeEvaluation};
use crate::evidence::{CfKind, CfSkip, CfTest};
use crate::extra::{self, Tally};
use crate::manifest::Manifest;
use crate::run::{Exercised, Run};
use crate::run_dir::IterationDir;

/// One (task, change) pair to test.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    /// Task.
    pub task: String,
    /// Regression or fix.
    pub kind: CfKind,
    /// Change id.
    pub change: String,
    /// The change's commit.
    pub commit: String,
}

/// The trial set of one change's counterfactual harness.
pub fn set_of(change: &str) -> String {
    format!("counterfactual/{change}")
}

/// Which (task, change) pairs to test and which tasks to skip, given the trials `left` in
/// the iteration's budget: regressions counted by the verdicts first (most significant
/// first), then fixes claimed by several changes or none; a task is tested with all its
/// candidates or not at all.
pub fn plan(
    ev: &ChangeEvaluation,
    manifest: &Manifest,
    exercised: &Exercised,
    trials_per_pair: u32,
    max_tasks: usize,
    mut left: usize,
) -> (Vec<Pair>, Vec<CfSkip>) {
    let unconfirmed: BTreeSet<&String> = ev.unconfirmed.iter().collect();
    let mut regressed: Vec<_> = ev
        .regressed
        .iter()
        .filter(|m| !unconfirmed.contains(&m.task))
        .collect();
    regressed.sort_by(|a, b| a.p_value.total_cmp(&b.p_value));
    let claimers = |t: &str| {
        let named = |c: &&crate::Change| c.predicted_fixes.iter().any(|x| x == t);
        manifest.changes.iter().filter(named).count()
    };
    let fixes = ev
        .fixed
        .iter()
        .filter(|m| !unconfirmed.contains(&m.task) && claimers(&m.task) != 1);
    let wanted = regressed
        .into_iter()
        .map(|m| (m, CfKind::Regression))
        .chain(fixes.map(|m| (m, CfKind::Fix)));
    let none = BTreeSet::new();
    let (mut pairs, mut skipped, mut tasks) = (Vec::new(), Vec::new(), 0usize);
    for (m, kind) in wanted {
        let ex = exercised.get(&m.task).unwrap_or(&none);
        let cands: Vec<Pair> = manifest
            .changes
            .iter()
            .filter(|c| change_touches(&c.files, ex))
            .filter_map(|c| {
                c.commit.as_ref().map(|commit| Pair {
                    task: m.task.clone(),
                    kind,
                    change: c.id.clone(),
                    commit: commit.clone(),
                })
            })
            .collect();
        let skip = |reason: String| CfSkip {
            task: m.task.clone(),
            reason,
        };
        let need = cands.len() * trials_per_pair as usize;
        if cands.is_empty() {
            skipped.push(skip(
                "no change with a commit touched the files it exercised".into(),
            ));
        } else if tasks >= max_tasks {
            skipped.push(skip(format!(
                "over [attribution] max_counterfactual_tasks = {max_tasks}"
            )));
        } else if need > left {
            skipped.push(skip(format!(
                "needs {need} trials; {left} left of the iteration's extra-trial budget \
                 ([attribution] max_extra_share)"
            )));
        } else {
            left -= need;
            tasks += 1;
            pairs.extend(cands);
        }
    }
    (pairs, skipped)
}

/// Whether a pair needs no more trials: a regression stops at its first failure (not
/// restored), a fix at its first failure (restored); `n` trials decide either way.
fn decided(t: &Tally, n: u32) -> bool {
    t.trials > t.passed || t.trials + t.infra >= n
}

/// Whether the pair's trials restored the task's previous status.
fn restored(kind: CfKind, t: &Tally) -> bool {
    match kind {
        CfKind::Regression => t.all_pass(),
        CfKind::Fix => t.trials > t.passed,
    }
}

/// Runs the counterfactual trials of iteration `it` (judging the previous iteration's
/// changes) and records them in `evidence.json`.
pub async fn counterfactual(
    run: &Run,
    it: &IterationDir,
    evaluated: &str,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let t = it.number();
    let cfg = &run.cfg.attribution;
    let Some(manifest) = (t > 1)
        .then(|| run.dir.iteration(t - 1).manifest().ok())
        .flatten()
    else {
        return Ok(());
    };
    let n = cfg.counterfactual_trials;
    let mut evidence = it.evidence();
    if n == 0 {
        return Ok(());
    }
    let ev = it.change_evaluation()?;
    let budget = cfg.extra_trial_cap(run.tasks.len() * run.cfg.k as usize);
    let used = evidence
        .confirm
        .values()
        .map(|x| x.trials + x.infra)
        .sum::<u32>() as usize;
    let exercised = crate::history::exercised(it, &run.visible);
    let (pairs, mut skipped) = plan(
        &ev,
        &manifest,
        &exercised,
        n,
        cfg.max_counterfactual_tasks,
        budget.saturating_sub(used),
    );
    // One counterfactual harness per change: H_eval minus its commit.
    let mut harness: BTreeMap<String, Option<String>> = BTreeMap::new();
    for p in &pairs {
        if !harness.contains_key(&p.change) {
            let c = run.repo.reverted_commit(evaluated, &p.commit)?;
            harness.insert(p.change.clone(), c);
        }
    }
    let (runnable, conflicting): (Vec<Pair>, Vec<Pair>) = pairs
        .into_iter()
        .partition(|p| harness.get(&p.change).is_some_and(Option::is_some));
    for p in conflicting {
        skipped.push(CfSkip {
            task: p.task,
            reason: format!(
                "reverting {} conflicts with later edits of the same lines",
                p.change
            ),
        });
    }
    let mut tallies: BTreeMap<(String, String), Tally> = BTreeMap::new();
    let mut cost = evidence.counterfactual_cost.clone();
    cost.trials = 0;
    for round in 1..=n {
        let mut by_change: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for p in &runnable {
            let tl = tallies.get(&(p.change.clone(), p.task.clone()));
            if !decided(&tl.copied().unwrap_or_default(), n) {
                by_change.entry(&p.change).or_default().push(p.task.clone());
            }
        }
        if by_change.is_empty() {
            break;
        }
        for (change, tasks) in by_change {
            let commit = harness[change].as_deref().unwrap_or_default();
            let set = set_of(change);
            let (res, c) =
                extra::run_set(run, it, &set, commit, &tasks, round, cancel.clone()).await?;
            cost.add(&c);
            for task in tasks {
                let tl = Tally::of(res.get(&task).into_iter().flatten());
                tallies.insert((change.to_string(), task), tl);
            }
        }
    }
    evidence.counterfactual = runnable
        .iter()
        .map(|p| {
            let tally = tallies
                .get(&(p.change.clone(), p.task.clone()))
                .copied()
                .unwrap_or_default();
            CfTest {
                task: p.task.clone(),
                change: p.change.clone(),
                kind: p.kind,
                commit: harness[&p.change].clone().unwrap_or_default(),
                tally,
                restored: restored(p.kind, &tally),
            }
        })
        .collect();
    cost.trials = evidence
        .counterfactual
        .iter()
        .map(|x| x.tally.trials + x.tally.infra)
        .sum();
    evidence.counterfactual_cost = cost;
    evidence.counterfactual_skipped = skipped;
    it.write_evidence(&evidence)
}
