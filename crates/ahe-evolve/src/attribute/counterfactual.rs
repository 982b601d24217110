//! The Counterfactual phase: each regressed task, and each fix claimed by several changes or
//! by none, is re-run on the evaluated harness minus one candidate change (a three-way
//! `git revert` of the change's commit, in memory). The change whose revert restores the
//! task's previous status is blamed (or credited) — whatever it predicted. Candidates are the
//! changes whose files the task's trials exercised; trials run a round at a time and a pair
//! stops at its first decisive trial; everything within the iteration's extra-trial budget.

use std::collections::{BTreeMap, BTreeSet};

use tokio_util::sync::CancellationToken;

use crate::attribute::AttributeInputs;
use crate::inputs::history::Exercised;
use crate::inputs::trials::Trials;
use ahe_attribution::attribute::{change_touches, is_global, ChangeEvaluation, TaskMove};
use ahe_rundir::evidence::{CfKind, CfSkip, CfTest};
use ahe_rundir::evidence::{SetCost, Tally};
use ahe_rundir::manifest::Manifest;
use ahe_rundir::run_dir::IterationDir;
use ahe_runner::repo::HarnessRepo;

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

/// The trial-set prefix of the counterfactual phase (`counterfactual/<change>`).
pub const SET_PREFIX: &str = "counterfactual/";

/// One task to test: its candidate changes, most likely culprit first.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPlan {
    /// Task.
    pub task: String,
    /// Regression or fix.
    pub kind: CfKind,
    /// Candidates in test order: the changes that named the task, then those whose own
    /// (non-global) files the task exercised, then those matched by a global file.
    pub candidates: Vec<Pair>,
}

/// Which tasks to test and which to skip, given the trials `left` in the iteration's
/// budget: regressions counted by the verdicts first (most significant first), then fixes
/// claimed by several changes or none. A task is taken while at least one candidate's
/// trials fit; candidates are tested in order and a task stops at its first culprit.
pub fn plan(
    ev: &ChangeEvaluation,
    manifest: &Manifest,
    exercised: &Exercised,
    trials_per_pair: u32,
    max_tasks: usize,
    left: usize,
) -> (Vec<TaskPlan>, Vec<CfSkip>) {
    let unconfirmed: BTreeSet<&String> = ev.unconfirmed.iter().collect();
    let mut regressed: Vec<_> = ev
        .regressed
        .iter()
        .filter(|m| !unconfirmed.contains(&m.task))
        .collect();
    regressed.sort_by(|a, b| a.p_value.total_cmp(&b.p_value));
    let claimers = |t: &str| {
        let named = |c: &&ahe_rundir::manifest::Change| c.predicted_fixes.iter().any(|x| x == t);
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
    let (mut plans, mut skipped) = (Vec::new(), Vec::new());
    for (m, kind) in wanted {
        let cands = candidates(m, kind, manifest, exercised.get(&m.task).unwrap_or(&none));
        let skip = |reason: String| CfSkip {
            task: m.task.clone(),
            reason,
        };
        if cands.is_empty() {
            skipped.push(skip(
                "no change with a commit touched the files it exercised".into(),
            ));
        } else if plans.len() >= max_tasks {
            skipped.push(skip(format!(
                "over [attribution] max_counterfactual_tasks = {max_tasks}"
            )));
        } else if left < trials_per_pair as usize * (plans.len() + 1) {
            skipped.push(skip(format!(
                "{left} trials left of the iteration's extra-trial budget \
                 ([attribution] max_extra_share)"
            )));
        } else {
            plans.push(TaskPlan {
                task: m.task.clone(),
                kind,
                candidates: cands,
            });
        }
    }
    (plans, skipped)
}

/// The changes with a commit whose files task `m` exercised (`ex`), in test order: those
/// that named the task (risk or predicted fix, by `kind`), then those matched by their own
/// (non-global) files, then those matched by a global file.
fn candidates(m: &TaskMove, kind: CfKind, manifest: &Manifest, ex: &BTreeSet<String>) -> Vec<Pair> {
    let rank = |c: &ahe_rundir::manifest::Change| {
        let named = match kind {
            CfKind::Regression => &c.risk_tasks,
            CfKind::Fix => &c.predicted_fixes,
        };
        let own: Vec<String> = c.files.iter().filter(|f| !is_global(f)).cloned().collect();
        match () {
            _ if named.contains(&m.task) => 0,
            _ if change_touches(&own, ex) => 1,
            _ => 2,
        }
    };
    let mut cands: Vec<(u8, Pair)> = manifest
        .changes
        .iter()
        .filter(|c| change_touches(&c.files, ex))
        .filter_map(|c| {
            let pair = Pair {
                task: m.task.clone(),
                kind,
                change: c.id.clone(),
                commit: c.commit.clone()?,
            };
            Some((rank(c), pair))
        })
        .collect();
    cands.sort_by_key(|x| x.0);
    cands.into_iter().map(|x| x.1).collect()
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
/// changes) and records them in `evidence.json`. Harm first: regressions of tasks that passed
/// every earlier trial are tested before anything else, within the iteration's extra-trial
/// budget or `[attribution] harm_floor_trials`, whichever is larger; then the other
/// regressions and the disputed fixes, within what the budget has left.
pub async fn counterfactual(
    i: &AttributeInputs<'_>,
    trials: &Trials<'_>,
    it: &IterationDir,
    evaluated: &str,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let t = it.number();
    let cfg = i.policy;
    let Some(mut manifest) = (t > 1)
        .then(|| i.dir.iteration(t - 1).manifest().ok())
        .flatten()
    else {
        return Ok(());
    };
    let n = cfg.counterfactual_trials;
    let mut evidence = it.evidence();
    // Changes the canary already reverted are not in H_eval: nothing to revert.
    let gone = evidence.canary_reverted();
    manifest.changes.retain(|c| !gone.contains(&c.id));
    if n == 0 {
        return Ok(());
    }
    let ev = it.change_evaluation()?;
    let budget = cfg.extra_trial_cap(trials.tasks.len() * i.k as usize);
    let used = evidence.extra_trials_used() as usize;
    let exercised = crate::inputs::history::exercised(it, i.visible);
    let (harm, rest) = split_harm(&ev, &solid_before(i, t));
    let share_left = budget.saturating_sub(used);
    let mut left = share_left.max(cfg.harm_floor_trials as usize);
    let (harm_plans, mut skipped) = plan(&harm, &manifest, &exercised, n, usize::MAX, left);
    let mut cost = evidence.counterfactual_cost.clone();
    let mut budget = Budget {
        n,
        left: &mut left,
        skipped: &mut skipped,
        cost: &mut cost,
    };
    let cx = Wave {
        trials,
        it,
        prefix: SET_PREFIX,
    };
    let mut tests = test_plans(&cx, evaluated, &harm_plans, &mut budget, &cancel).await?;
    let spent: u32 = tests.iter().map(|x| x.tally.trials + x.tally.infra).sum();
    *budget.left = share_left.saturating_sub(spent as usize);
    let max = cfg.max_counterfactual_tasks;
    let (rest_plans, s) = plan(&rest, &manifest, &exercised, n, max, *budget.left);
    budget.skipped.extend(s);
    tests.extend(test_plans(&cx, evaluated, &rest_plans, &mut budget, &cancel).await?);
    cost.trials = tests.iter().map(|x| x.tally.trials + x.tally.infra).sum();
    evidence.counterfactual = tests;
    evidence.counterfactual_cost = cost;
    evidence.counterfactual_skipped = skipped;
    it.write_evidence(&evidence)
}

/// What the tests of one phase may still spend, and what they skipped and cost.
pub(crate) struct Budget<'a> {
    /// Trials of each counterfactual harness on a task.
    pub n: u32,
    /// Trials left.
    pub left: &'a mut usize,
    /// Tasks or candidates left untested, with the reason.
    pub skipped: &'a mut Vec<CfSkip>,
    /// What the trials cost.
    pub cost: &'a mut SetCost,
}

/// Where the counterfactual trials of a phase run: iteration `it`'s extra sets
/// `<prefix><change>`, through `trials`.
pub(crate) struct Wave<'a> {
    /// The trials interface.
    pub trials: &'a Trials<'a>,
    /// The iteration the sets belong to.
    pub it: &'a IterationDir,
    /// The sets' name prefix.
    pub prefix: &'a str,
}

/// Tests the candidates of `plans` on `evaluated` minus each one, within `b`.
async fn test_plans(
    cx: &Wave<'_>,
    evaluated: &str,
    plans: &[TaskPlan],
    b: &mut Budget<'_>,
    cancel: &CancellationToken,
) -> anyhow::Result<Vec<CfTest>> {
    if plans.is_empty() {
        return Ok(Vec::new());
    }
    let harness = harnesses(cx.trials.repo, evaluated, plans)?;
    find_culprits(cx, plans, &harness, b, cancel.clone()).await
}

/// Tasks that passed every trial of every earlier iteration that scored them (infra errors
/// aside): a regression of one is never noise to shrug off.
fn solid_before(inputs: &AttributeInputs, t: u32) -> BTreeSet<String> {
    let mut solid: Option<BTreeSet<String>> = None;
    for i in 1..t {
        let Ok(s) = inputs.dir.iteration(i).scores() else {
            continue;
        };
        let all: BTreeSet<String> = s
            .scores
            .tasks
            .iter()
            .filter(|(_, x)| x.k > 0 && x.passed == x.k)
            .map(|(t, _)| t.clone())
            .collect();
        solid = Some(match solid {
            None => all,
            Some(prev) => prev.intersection(&all).cloned().collect(),
        });
    }
    solid.unwrap_or_default()
}

/// The evaluation split in two: the regressions of `solid` tasks (tested first, under the
/// harm floor), and everything else.
fn split_harm(
    ev: &ChangeEvaluation,
    solid: &BTreeSet<String>,
) -> (ChangeEvaluation, ChangeEvaluation) {
    let (hard, soft): (Vec<_>, Vec<_>) = ev
        .regressed
        .iter()
        .cloned()
        .partition(|m| solid.contains(&m.task));
    let harm = ChangeEvaluation {
        regressed: hard,
        unconfirmed: ev.unconfirmed.clone(),
        ..Default::default()
    };
    let rest = ChangeEvaluation {
        regressed: soft,
        ..ev.clone()
    };
    (harm, rest)
}

/// One counterfactual harness per candidate change: `onto` minus its commit (None: the
/// revert conflicts), as commits that move no ref.
pub(crate) fn harnesses(
    repo: &HarnessRepo,
    onto: &str,
    plans: &[TaskPlan],
) -> anyhow::Result<BTreeMap<String, Option<String>>> {
    let mut harness: BTreeMap<String, Option<String>> = BTreeMap::new();
    for p in plans.iter().flat_map(|p| &p.candidates) {
        if !harness.contains_key(&p.change) {
            harness.insert(p.change.clone(), repo.reverted_commit(onto, &p.commit)?);
        }
    }
    Ok(harness)
}

/// Tests the planned tasks' candidates in waves — wave w tests candidate w of every task
/// whose culprit is not found yet — within `b`'s trials left; conflicting reverts and
/// candidates past the budget go to its `skipped`.
pub(crate) async fn find_culprits(
    cx: &Wave<'_>,
    plans: &[TaskPlan],
    harness: &BTreeMap<String, Option<String>>,
    b: &mut Budget<'_>,
    cancel: CancellationToken,
) -> anyhow::Result<Vec<CfTest>> {
    let (n, left, skipped) = (b.n, &mut *b.left, &mut *b.skipped);
    let mut tests: Vec<CfTest> = Vec::new();
    let mut open: Vec<(&TaskPlan, usize)> = plans.iter().map(|p| (p, 0)).collect();
    while !open.is_empty() {
        let mut wave: Vec<&Pair> = Vec::new();
        for (p, i) in open.iter_mut() {
            while let Some(c) = p.candidates.get(*i) {
                if harness[&c.change].is_some() {
                    break;
                }
                skipped.push(CfSkip {
                    task: c.task.clone(),
                    reason: format!(
                        "reverting {} conflicts with later edits of the same lines",
                        c.change
                    ),
                });
                *i += 1;
            }
            if let Some(c) = p.candidates.get(*i) {
                if *left >= n as usize {
                    *left -= n as usize;
                    wave.push(c);
                } else {
                    skipped.push(CfSkip {
                        task: c.task.clone(),
                        reason: format!(
                            "the extra-trial budget ran out before {} was tested",
                            c.change
                        ),
                    });
                }
            }
        }
        if wave.is_empty() {
            break;
        }
        let done = run_wave(cx, &wave, harness, n, b.cost, cancel.clone()).await?;
        // A pair stops at its first decisive trial: what it did not use goes back.
        let used: usize = done
            .iter()
            .map(|x| (x.tally.trials + x.tally.infra) as usize)
            .sum();
        *left += (n as usize * wave.len()).saturating_sub(used);
        let found: BTreeSet<&str> = done
            .iter()
            .filter(|x| x.restored)
            .map(|x| x.task.as_str())
            .collect();
        tests.extend(done.iter().cloned());
        open = open
            .into_iter()
            .filter(|(p, _)| !found.contains(p.task.as_str()))
            .map(|(p, i)| (p, i + 1))
            .filter(|(p, i)| *i < p.candidates.len())
            .collect();
    }
    Ok(tests)
}

/// Runs one wave of pairs, a round at a time (a pair stops at its first decisive trial),
/// each change's trials in set `<prefix><change>`.
async fn run_wave(
    cx: &Wave<'_>,
    wave: &[&Pair],
    harness: &BTreeMap<String, Option<String>>,
    n: u32,
    cost: &mut SetCost,
    cancel: CancellationToken,
) -> anyhow::Result<Vec<CfTest>> {
    let mut tallies: BTreeMap<(String, String), Tally> = BTreeMap::new();
    for round in 1..=n {
        let mut by_change: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for p in wave {
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
            let set = format!("{}{change}", cx.prefix);
            let (res, c) = (cx.trials)
                .run_set(cx.it, &set, commit, &tasks, round, cancel.clone())
                .await?;
            cost.add(&c);
            for task in tasks {
                let tl = Tally::of(res.get(&task).into_iter().flatten());
                tallies.insert((change.to_string(), task), tl);
            }
        }
    }
    Ok(wave
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
        .collect())
}
