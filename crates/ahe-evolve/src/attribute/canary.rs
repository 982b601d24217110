//! The Canary phase (`[attribution] canary = true`): before the full rollout of a new
//! harness, its canary set runs first. The set is the previous changes' risk tasks, then the
//! previously passing tasks that exercised the files the changes touched (their own files
//! first, then the global ones), capped at `canary_max_tasks`. A canary regression gets its
//! counterfactual at once; each culprit is reverted on the branch before the full rollout,
//! which then evaluates the harness without it. When nothing is reverted the canary's trials
//! are the rollout's own (trials saved); otherwise they were spent.

use std::collections::BTreeSet;

use ahe_bench::TaskStatus;
use tokio_util::sync::CancellationToken;

use crate::attribute::counterfactual::{find_culprits, harnesses, plan, Budget, Wave};
use crate::attribute::AttributeInputs;
use crate::inputs::trials::{SetResults, Trials};
use ahe_attribution::attribute::{change_touches, is_global, ChangeEvaluation, TaskMove};
use ahe_rundir::evidence::{CanaryRecord, CfTest};
use ahe_rundir::evidence::{SetCost, Tally};
use ahe_rundir::journal::Entry;
use ahe_rundir::manifest::Manifest;
use ahe_rundir::run_dir::IterationDir;
use ahe_runner::repo::HarnessRepo;

/// The name of the canary trial set.
pub const SET: &str = "canary";
/// The trial-set prefix of the canary's counterfactuals (`canary/cf/<change>`).
pub const CF_PREFIX: &str = "canary/cf/";

/// The canary set: visible tasks that passed in the previous iteration, risk tasks of
/// `manifest` first, then tasks whose trials exercised a change's own files, then tasks on
/// a global file (prompt, registry, memory); each group in name order; at most `cap`.
pub fn canary_set(
    manifest: &Manifest,
    passed: &BTreeSet<String>,
    exercised: &crate::inputs::history::Exercised,
    cap: usize,
) -> Vec<String> {
    let none = BTreeSet::new();
    let ex = |t: &str| exercised.get(t).unwrap_or(&none);
    let own = |t: &str| {
        manifest.changes.iter().any(|c| {
            let files: Vec<String> = c.files.iter().filter(|f| !is_global(f)).cloned().collect();
            change_touches(&files, ex(t))
        })
    };
    let global = |t: &str| {
        manifest
            .changes
            .iter()
            .any(|c| change_touches(&c.files, ex(t)))
    };
    let risky = manifest.changes.iter().flat_map(|c| &c.risk_tasks);
    let mut out: Vec<String> = Vec::new();
    let mut push = |t: &String| {
        if passed.contains(t) && !out.contains(t) && out.len() < cap {
            out.push(t.clone());
        }
    };
    risky.for_each(&mut push);
    passed.iter().filter(|t| own(t)).for_each(&mut push);
    passed.iter().filter(|t| global(t)).for_each(&mut push);
    out
}

/// Runs the canary of iteration `it` (t ≥ 2) on the recorded evaluated commit; reverts the
/// culprits of its regressions and records the new evaluated commit; writes the record into
/// `evidence.json`.
pub async fn canary(
    i: &AttributeInputs<'_>,
    trials: &Trials<'_>,
    it: &IterationDir,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let t = it.number();
    let prev = i.dir.iteration(t - 1);
    let Ok(manifest) = prev.manifest() else {
        return Ok(());
    };
    let mut evidence = it.evidence();
    // A resumed phase starts again from the harness the canary first ran.
    let base = match &evidence.canary {
        Some(c) => c.base_commit.clone(),
        None => it
            .evaluated()
            .ok_or_else(|| anyhow::anyhow!("{}: no evaluated commit", it.path().display()))?,
    };
    let prev_scores = prev.scores()?.scores;
    let passed: BTreeSet<String> = prev_scores
        .tasks
        .iter()
        .filter(|(n, s)| i.visible.contains(*n) && s.status == TaskStatus::Pass)
        .map(|(n, _)| n.clone())
        .collect();
    let cfg = i.policy;
    let exercised = crate::inputs::history::exercised(&prev, i.visible);
    let tasks = canary_set(&manifest, &passed, &exercised, cfg.canary_max_tasks);
    let mut rec = CanaryRecord {
        base_commit: base.clone(),
        evaluated_commit: base.clone(),
        tasks: tasks.clone(),
        ..Default::default()
    };
    let (results, cost) = trials
        .run_set(it, SET, &base, &tasks, i.k, cancel.clone())
        .await?;
    rec.cost.add(&cost);
    rec.canary_trials = results.values().map(|v| v.len() as u32).sum();
    let tally = |t: &str| Tally::of(results.get(t).into_iter().flatten());
    rec.regressions = tasks
        .iter()
        .filter(|t| {
            let x = tally(t);
            x.trials > 0 && !x.all_pass()
        })
        .cloned()
        .collect();
    if !rec.regressions.is_empty() {
        let cx = Wave {
            trials,
            it,
            prefix: CF_PREFIX,
        };
        let moves = regressed(&rec.regressions, &prev_scores, &results);
        culprits(i, &cx, &manifest, moves, &mut rec, cancel).await?;
        revert_culprits(trials.repo, it, &manifest, &mut rec)?;
    }
    if rec.rolled_back.is_empty() {
        rec.trials_saved = reuse(trials, it, &results)?;
    }
    for id in &rec.rolled_back {
        trials.ledger.note(
            t,
            format!(
                "canary: reverted {id} before the full rollout (it made {} fail)",
                blamed_on(&rec.tests, id).join(", ")
            ),
        )?;
    }
    let evaluated = rec.evaluated_commit.clone();
    evidence.canary = Some(rec);
    it.write_evidence(&evidence)?;
    if evaluated != base {
        it.write_evaluated(&evaluated)?;
        trials.repo.advance_head(&evaluated)?;
    }
    Ok(())
}

/// Tasks a change's revert restored.
fn blamed_on(tests: &[CfTest], id: &str) -> Vec<String> {
    let mine = tests.iter().filter(|x| x.change == id && x.restored);
    mine.map(|x| x.task.clone()).collect()
}

/// The canary's regressions as moves from the previous iteration's scores (`prev`) to the
/// canary's trials, each within noise (the counterfactual decides).
fn regressed(tasks: &[String], prev: &ahe_bench::Scores, results: &SetResults) -> Vec<TaskMove> {
    tasks
        .iter()
        .filter_map(|t| {
            let p = prev.tasks.get(t)?;
            let c = Tally::of(results.get(t).into_iter().flatten());
            Some(TaskMove {
                task: t.clone(),
                prev_status: p.status,
                cur_status: TaskStatus::Fail,
                prev_passed: p.passed,
                prev_k: p.k,
                cur_passed: c.passed,
                cur_k: c.trials,
                p_value: ahe_attribution::stats::fisher_exact(p.passed, p.k, c.passed, c.trials),
                within_noise: true,
                extra_passed: 0,
                extra_trials: 0,
            })
        })
        .collect()
}

/// The counterfactuals of the canary's regressions (`regressed`), recorded in `rec`.
async fn culprits(
    i: &AttributeInputs<'_>,
    cx: &Wave<'_>,
    manifest: &Manifest,
    regressed: Vec<TaskMove>,
    rec: &mut CanaryRecord,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let cfg = i.policy;
    let n = cfg.counterfactual_trials.max(1);
    let ev = ChangeEvaluation {
        regressed,
        ..Default::default()
    };
    let cleaned = ahe_rundir::clean::clean_all(&cx.it.extra_eval(SET).trials())?;
    let budget = cfg.extra_trial_cap(cx.trials.tasks.len() * i.k as usize);
    let (plans, skipped) = plan(
        &ev,
        manifest,
        &cleaned.exercised,
        n,
        cfg.max_counterfactual_tasks,
        budget,
    );
    let harness = harnesses(cx.trials.repo, &rec.base_commit, &plans)?;
    let (mut skipped, mut left) = (skipped, budget);
    let mut cost = SetCost::default();
    let mut b = Budget {
        n,
        left: &mut left,
        skipped: &mut skipped,
        cost: &mut cost,
    };
    rec.tests = find_culprits(cx, &plans, &harness, &mut b, cancel).await?;
    rec.skipped = skipped;
    rec.cf_trials = rec
        .tests
        .iter()
        .map(|x| x.tally.trials + x.tally.infra)
        .sum();
    rec.cost.add(&cost);
    Ok(())
}

/// Reverts the culprits `rec`'s tests found, in manifest order, one after the other on top
/// of the base commit (commits that move no ref until the phase ends).
fn revert_culprits(
    repo: &HarnessRepo,
    it: &IterationDir,
    manifest: &Manifest,
    rec: &mut CanaryRecord,
) -> anyhow::Result<()> {
    let mut onto = rec.base_commit.clone();
    for c in &manifest.changes {
        let Some(commit) = c.commit.as_deref() else {
            continue;
        };
        if blamed_on(&rec.tests, &c.id).is_empty() {
            continue;
        }
        let r = repo.revert_or_restore(&onto, commit)?;
        let msg = format!(
            "{}: canary rollback of {}",
            ahe_runner::repo::iter_tag(it.number() - 1),
            c.id
        );
        onto = repo.commit_tree(&r.tree, &onto, &msg)?;
        rec.restored_files.extend(r.restored);
        rec.rolled_back.push(c.id.clone());
    }
    rec.evaluated_commit = onto;
    Ok(())
}

/// Hands the canary's trials to the rollout (same harness): copies their directories into
/// the iteration's `trials/` and journals them as done. Returns how many.
fn reuse(trials: &Trials, it: &IterationDir, results: &SetResults) -> anyhow::Result<u32> {
    let t = it.number();
    let from = it.extra_eval(SET);
    let journal = trials.ledger.journal;
    let journaled = journal.trials_done(t);
    let mut n = 0;
    for r in results.values().flatten() {
        n += 1;
        if journaled.contains(&(r.task.clone(), r.attempt)) {
            continue;
        }
        let src = from.trial(&r.task, r.attempt);
        let dst = it.trial(&r.task, r.attempt);
        if !dst.result_path().is_file() {
            let _ = std::fs::remove_dir_all(dst.path());
            ahe_runner::repo::copy_tree(src.path(), dst.path())?;
        }
        journal.append(Entry::TrialDone {
            iter: t,
            task: r.task.clone(),
            attempt: r.attempt,
            status: r.status.as_str().into(),
        })?;
    }
    Ok(n)
}
