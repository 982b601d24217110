//! The Attribute phase (DESIGN §6): did each change of the previous manifest do what it
//! predicted? Flips, per-change verdicts, file-matched regressions, prediction quality, and
//! a statistical layer (intervals, paired bootstrap of the delta, Fisher test per flip).
//!
//! Held-out tasks (not in `visible`) are excluded from everything here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ahe_bench::scores::{mean_with_ci, TaskScore};
use ahe_bench::{Scores, TaskStatus, TrialStatus};
use serde::{Deserialize, Serialize};

use crate::evidence::Evidence;
use crate::extra::Tally;
use crate::manifest::{Component, Manifest};
use crate::stats::{excludes_zero, fisher_exact, paired_delta_ci, ALPHA};

mod truth;
use truth::truth_quality;
pub use truth::TruthQuality;

/// Version of the `change_evaluation.json` format.
pub const ATTRIBUTION_SCHEMA_VERSION: u32 = 1;

/// Verdict on one change (DESIGN §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// A predicted risk regressed and no predicted fix happened.
    Harmful,
    /// Some predicted fixes happened and some predicted risk regressed.
    Mixed,
    /// Every predicted fix happened (at least one was predicted), no risk regressed.
    Effective,
    /// Some but not all predicted fixes happened, no risk regressed.
    PartiallyEffective,
    /// No predicted fix happened (or none was predicted), no risk regressed.
    Ineffective,
}

/// How one task moved between the previous and the current iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskMove {
    /// Task name.
    pub task: String,
    /// Status in the previous iteration.
    pub prev_status: TaskStatus,
    /// Status in the current iteration.
    pub cur_status: TaskStatus,
    /// Trials passed in the previous iteration.
    pub prev_passed: u32,
    /// Trials run in the previous iteration.
    pub prev_k: u32,
    /// Trials passed in the current iteration.
    pub cur_passed: u32,
    /// Trials run in the current iteration.
    pub cur_k: u32,
    /// Two-sided Fisher exact test of prev_passed/prev_k against cur_passed/cur_k.
    pub p_value: f64,
    /// `p_value ≥ 0.05`: the move is consistent with sampling noise.
    pub within_noise: bool,
    /// Confirmation trials of the current harness beyond the first k that passed.
    #[serde(default)]
    pub extra_passed: u32,
    /// Confirmation trials beyond the first k (the p-value uses them too; pass@1 does not).
    #[serde(default)]
    pub extra_trials: u32,
}

/// A task matched to changes (by prediction and by the files it exercised).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileMatch {
    /// Task name.
    pub task: String,
    /// Changes whose files intersect the files the task's trials exercised.
    pub matched_changes: Vec<String>,
    /// Changes that named the task (in risk_tasks for regressions, predicted_fixes for fixes).
    pub predicted_by: Vec<String>,
}

/// The evaluation of one change of the previous manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeVerdict {
    /// Change id.
    pub id: String,
    /// Component it lives in.
    pub component: Component,
    /// What it did.
    pub description: String,
    /// Files it touched.
    pub files: Vec<String>,
    /// P_c: predicted fixes (visible tasks only).
    pub predicted_fixes: Vec<String>,
    /// Q_c: risk tasks (visible tasks only).
    pub risk_tasks: Vec<String>,
    /// P_c ∩ F.
    pub actually_fixed: Vec<String>,
    /// P_c − F.
    pub still_failed: Vec<String>,
    /// Q_c ∩ G.
    pub risk_realized: Vec<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// Predicted fixes that moved up without flipping (e.g. 0/2 → 1/2).
    pub improved: Vec<String>,
    /// Predicted or risk tasks with an infra status on either side (not judgeable).
    pub infra_affected: Vec<String>,
    /// Flips behind the verdict (actually_fixed ∪ risk_realized) that are within noise.
    pub flips_within_noise: Vec<String>,
    /// Regressed tasks whose exercised files match this change's files.
    pub regressions_matched: Vec<String>,
    /// Named tasks that are not visible (held out or unknown), ignored.
    pub ignored_tasks: Vec<String>,
    /// Counterfactual tests of this change (None: it was not reverted for any task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counterfactual: Option<CounterfactualSummary>,
    /// Regressions this change is blamed for: by counterfactual where the task was tested,
    /// else by its risk prediction.
    #[serde(default)]
    pub blamed_regressions: Vec<String>,
    /// Fixes this change is credited with: by counterfactual where the task was tested,
    /// else by its fix prediction.
    #[serde(default)]
    pub credited_fixes: Vec<String>,
}

/// What reverting one change did to the tasks it was tested on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterfactualSummary {
    /// Tasks whose previous status came back with the change reverted.
    pub restored: Vec<String>,
    /// Tasks whose status stayed.
    pub not_restored: Vec<String>,
    /// Trials run with the change reverted.
    pub trials: u32,
}

/// How well the manifest predicted what happened (None when a denominator is 0).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PredictionQuality {
    /// |∪P|.
    pub predicted_fixes: usize,
    /// |F|.
    pub fixed: usize,
    /// |∪P ∩ F| / |∪P|.
    pub fix_precision: Option<f64>,
    /// |∪P ∩ F| / |F|.
    pub fix_recall: Option<f64>,
    /// |∪Q|.
    pub predicted_risks: usize,
    /// |G|.
    pub regressed: usize,
    /// |∪Q ∩ G| / |∪Q|.
    pub risk_precision: Option<f64>,
    /// |∪Q ∩ G| / |G|.
    pub risk_recall: Option<f64>,
}

/// Run-level statistics over visible tasks (infra counted as failure).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    /// Visible tasks scored in the current iteration.
    pub n_tasks: usize,
    /// Current pass@1.
    pub pass_at_1: f64,
    /// 95% bootstrap interval of the current pass@1.
    pub pass_at_1_ci: [f64; 2],
    /// Visible tasks whose current status is infra.
    pub infra_tasks: usize,
    /// Visible tasks scored in the previous iteration.
    pub prev_n_tasks: usize,
    /// Previous pass@1 (None when there was no previous score).
    pub prev_pass_at_1: Option<f64>,
    /// Tasks scored in both iterations (the pairs of the delta).
    pub n_paired: usize,
    /// Mean over paired tasks of cur_rate − prev_rate.
    pub delta: Option<f64>,
    /// Paired bootstrap 95% interval of the delta (tasks resampled; seeded).
    pub delta_ci: Option<[f64; 2]>,
    /// The delta interval excludes 0.
    pub delta_significant: bool,
}

/// The contents of `change_evaluation.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangeEvaluation {
    /// [`ATTRIBUTION_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Iteration whose scores are evaluated.
    pub iteration: u32,
    /// Iteration that wrote the evaluated manifest (None: no manifest).
    pub manifest_iteration: Option<u32>,
    /// pass@1, intervals, delta.
    pub stats: RunStats,
    /// F: fail → pass.
    pub fixed: Vec<TaskMove>,
    /// G: pass → fail.
    pub regressed: Vec<TaskMove>,
    /// Same status, more trials passed (e.g. fail 0/2 → fail 1/2).
    pub improved: Vec<TaskMove>,
    /// Same status, fewer trials passed.
    pub worsened: Vec<TaskMove>,
    /// Status changes with infra on either side (not flips).
    pub infra_changes: Vec<TaskMove>,
    /// Visible tasks scored now but not before.
    pub new_tasks: Vec<String>,
    /// Visible tasks scored before but not now.
    pub dropped_tasks: Vec<String>,
    /// One verdict per change of the manifest, in manifest order.
    pub changes: Vec<ChangeVerdict>,
    /// G − ∪Q, each with the changes whose files it exercised.
    pub unattributed_regressions: Vec<FileMatch>,
    /// Every regression, file-matched to changes.
    pub regressions_by_file: Vec<FileMatch>,
    /// F − ∪P, file-matched to changes (when the caller gave their exercised files).
    pub unpredicted_fixes: Vec<FileMatch>,
    /// Precision and recall of the manifest's predictions.
    pub prediction: PredictionQuality,
    /// Flips that confirmation trials left within noise: not counted in any verdict.
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    /// Change-level prediction quality against counterfactual truth (this iteration).
    #[serde(default)]
    pub prediction_vs_truth: TruthQuality,
    /// The same, summed over every iteration so far.
    #[serde(default)]
    pub prediction_vs_truth_cumulative: TruthQuality,
    /// Confirmation trials run (beyond the rollout's).
    #[serde(default)]
    pub confirm_trials: u32,
    /// Counterfactual trials run.
    #[serde(default)]
    pub counterfactual_trials: u32,
    /// Dollars of the confirmation and counterfactual trials.
    #[serde(default)]
    pub extra_cost_usd: f64,
    /// The canary of this iteration's harness, when one ran: its culprits were reverted
    /// before the rollout, and they are blamed for its regressions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<crate::evidence::CanaryRecord>,
}

/// Whether a change to this harness file affects every task (prompt, registry, memory).
pub fn is_global(file: &str) -> bool {
    let f = file.trim_start_matches("./");
    f == "system_prompt.md" || f == "agent.toml" || f == "memory" || f.starts_with("memory/")
}

/// `(component dir, name)` of a per-item harness file: `tools/x.toml` and `tools/x.py` →
/// `("tools", "x")`, likewise middleware/ and subagents/; `skills/x/...` → `("skills", "x")`.
fn item_key(p: &str) -> Option<(&str, &str)> {
    let (dir, rest) = p.split_once('/')?;
    match dir {
        "tools" | "middleware" | "subagents" if !rest.contains('/') => {
            let stem = rest.split('.').next().unwrap_or(rest);
            (!stem.is_empty()).then_some((dir, stem))
        }
        "skills" => {
            let name = rest.split('/').next().unwrap_or(rest);
            (!name.is_empty()).then_some((dir, name))
        }
        _ => None,
    }
}

/// Whether a file a change touched matches a file a trial exercised (exact, directory
/// prefix on either side, same tool/middleware/sub-agent stem or skill dir, or global).
pub fn file_matches(change_file: &str, exercised: &str) -> bool {
    let f = change_file.trim_start_matches("./");
    let e = exercised.trim_start_matches("./");
    if is_global(f) || f == e {
        return true;
    }
    let under = |path: &str, dir: &str| {
        let dir = dir.trim_end_matches('/');
        !dir.is_empty()
            && path.len() > dir.len()
            && path.starts_with(dir)
            && path.as_bytes()[dir.len()] == b'/'
    };
    if (e.ends_with('/') && (under(f, e) || f == e.trim_end_matches('/'))) || under(e, f) {
        return true;
    }
    matches!((item_key(f), item_key(e)), (Some(a), Some(b)) if a == b)
}

/// Whether any of a change's files matches any exercised file (global files always do).
pub fn change_touches(files: &[String], exercised: &BTreeSet<String>) -> bool {
    files
        .iter()
        .any(|f| is_global(f) || exercised.iter().any(|e| file_matches(f, e)))
}

fn task_move(task: &str, p: &TaskScore, c: &TaskScore, extra: Tally) -> TaskMove {
    let p_value = fisher_exact(p.passed, p.k, c.passed + extra.passed, c.k + extra.trials);
    TaskMove {
        task: task.to_string(),
        prev_status: p.status,
        cur_status: c.status,
        prev_passed: p.passed,
        prev_k: p.k,
        cur_passed: c.passed,
        cur_k: c.k,
        p_value,
        within_noise: p_value >= ALPHA,
        extra_passed: extra.passed,
        extra_trials: extra.trials,
    }
}

/// The named tasks that are visible.
fn keep<'a>(ts: &'a [String], visible: &BTreeSet<String>) -> BTreeSet<&'a str> {
    ts.iter()
        .map(String::as_str)
        .filter(|t| visible.contains(*t))
        .collect()
}

/// A failing task whose only non-passing trials are infra errors: not the harness's doing.
fn only_infra_failed(t: &TaskScore) -> bool {
    let mut bad = t.trials.iter().filter(|x| x.status != TrialStatus::Pass);
    t.status == TaskStatus::Fail && bad.all(|x| x.status == TrialStatus::InfraError)
}

fn ratio(num: usize, den: usize) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

fn names(moves: &[TaskMove]) -> BTreeSet<&str> {
    moves.iter().map(|m| m.task.as_str()).collect()
}

/// Attributes the current scores to the changes of the previous manifest (DESIGN §6).
/// `exercised` maps tasks to the harness files their trials exercised (at least for the
/// regressed tasks; `clean::CleanSummary::exercised` has every task). `evidence` holds the
/// confirmation and counterfactual trials run so far (empty before those phases): flips that
/// confirmation left within noise count in no verdict, and where a task was re-run with
/// changes reverted, the counterfactual decides which change it is blamed on or credited to.
pub fn attribute(
    iteration: u32,
    prev_manifest: Option<&Manifest>,
    prev: &Scores,
    cur: &Scores,
    visible: &BTreeSet<String>,
    exercised: &BTreeMap<String, BTreeSet<String>>,
    evidence: &Evidence,
) -> ChangeEvaluation {
    let vis = |m: &BTreeMap<String, TaskScore>| -> BTreeMap<String, TaskScore> {
        m.iter()
            .filter(|(t, _)| visible.contains(*t))
            .map(|(t, s)| (t.clone(), s.clone()))
            .collect()
    };
    let (pv, cv) = (vis(&prev.tasks), vis(&cur.tasks));

    let mut ev = ChangeEvaluation {
        schema_version: ATTRIBUTION_SCHEMA_VERSION,
        iteration,
        manifest_iteration: prev_manifest.map(|m| m.iteration),
        stats: stats(&pv, &cv),
        dropped_tasks: pv
            .keys()
            .filter(|t| !cv.contains_key(*t))
            .cloned()
            .collect(),
        ..Default::default()
    };
    let mut infra_tasks: BTreeSet<&str> = BTreeSet::new();
    use TaskStatus::*;
    for (task, c) in &cv {
        let Some(p) = pv.get(task) else {
            ev.new_tasks.push(task.clone());
            continue;
        };
        let extra = evidence.confirm.get(task).copied().unwrap_or_default();
        let m = task_move(task, p, c, extra);
        let infra_flip = only_infra_failed(p) || only_infra_failed(c);
        match (p.status, c.status) {
            (Fail, Pass) if !infra_flip => ev.fixed.push(m),
            (Pass, Fail) if !infra_flip => ev.regressed.push(m),
            (Fail, Fail) | (Pass, Pass) if c.pass_at_1 > p.pass_at_1 => ev.improved.push(m),
            (Fail, Fail) | (Pass, Pass) if c.pass_at_1 < p.pass_at_1 => ev.worsened.push(m),
            (Fail, Fail) | (Pass, Pass) => {}
            _ => {
                // Infra on either side, or a flip whose only failures are infra errors.
                infra_tasks.insert(task);
                ev.infra_changes
                    .extend((p.status != c.status || infra_flip).then_some(m));
            }
        }
    }
    let all_infra = pv.iter().chain(&cv).filter(|x| x.1.status == Infra);
    infra_tasks.extend(all_infra.map(|x| x.0.as_str()));

    // Flips that confirmation trials could not make significant are not evidence (those
    // whose confirmation the budget cut short still count, flagged within noise).
    let hopeless = |m: &TaskMove| {
        let extra = evidence.confirm.get(&m.task).copied().unwrap_or_default();
        extra.trials > 0 && crate::confirm::decided(m, extra, evidence.confirm_cap)
    };
    let unconfirmed: BTreeSet<&str> = ev
        .fixed
        .iter()
        .chain(&ev.regressed)
        .filter(|m| m.within_noise && hopeless(m))
        .map(|m| m.task.as_str())
        .collect();
    let f: BTreeSet<&str> = names(&ev.fixed).difference(&unconfirmed).copied().collect();
    let g: BTreeSet<&str> = names(&ev.regressed)
        .difference(&unconfirmed)
        .copied()
        .collect();
    // The canary's regressions never reach the rollout (their culprits were reverted first):
    // its counterfactuals are the truth for them.
    let canary_tests: Vec<&crate::evidence::CfTest> =
        evidence.canary.iter().flat_map(|c| &c.tests).collect();
    let canary_regressed: BTreeSet<&str> = canary_tests.iter().map(|x| x.task.as_str()).collect();
    let tested = |t: &str| evidence.tests_of(t).next().is_some() || canary_regressed.contains(t);
    let cf_restored = |c: &str, t: &str| evidence.tests_of(t).any(|x| x.change == c && x.restored);
    let improved = names(&ev.improved);
    let noisy: BTreeSet<&str> = ev
        .fixed
        .iter()
        .chain(&ev.regressed)
        .filter(|m| m.within_noise)
        .map(|m| m.task.as_str())
        .collect();
    let no_files = BTreeSet::new();
    let ex = |t: &str| exercised.get(t).unwrap_or(&no_files);

    let changes = prev_manifest.map(|m| m.changes.as_slice()).unwrap_or(&[]);
    let mut all_p: BTreeSet<&str> = BTreeSet::new();
    let mut all_q: BTreeSet<&str> = BTreeSet::new();
    for c in changes {
        let (pc, qc) = (
            keep(&c.predicted_fixes, visible),
            keep(&c.risk_tasks, visible),
        );
        all_p.extend(&pc);
        all_q.extend(&qc);
        let own = |s: &BTreeSet<&str>| -> Vec<String> { s.iter().map(|t| t.to_string()).collect() };
        let fixed: BTreeSet<&str> = pc.intersection(&f).copied().collect();
        let realized: BTreeSet<&str> = qc.intersection(&g).copied().collect();
        // Where a task was re-run with changes reverted, the counterfactual is the truth.
        fn by_evidence<'a>(
            set: &BTreeSet<&'a str>,
            named: &BTreeSet<&str>,
            tested: &dyn Fn(&str) -> bool,
            restored: &dyn Fn(&str) -> bool,
        ) -> BTreeSet<&'a str> {
            set.iter()
                .filter(|t| match tested(t) {
                    true => restored(t),
                    false => named.contains(*t),
                })
                .copied()
                .collect()
        }
        let mine = |t: &str| cf_restored(&c.id, t);
        let credited = by_evidence(&f, &pc, &tested, &mine);
        let mut blamed = by_evidence(&g, &qc, &tested, &mine);
        blamed.extend(
            canary_tests
                .iter()
                .filter(|x| x.change == c.id && x.restored)
                .map(|x| x.task.as_str()),
        );
        let verdict = match (credited.is_empty(), blamed.is_empty()) {
            (true, false) => Verdict::Harmful,
            (false, false) => Verdict::Mixed,
            _ if !pc.is_empty() && pc.iter().all(|t| credited.contains(t)) => Verdict::Effective,
            _ if pc.is_empty() && !credited.is_empty() => Verdict::Effective,
            (false, true) => Verdict::PartiallyEffective,
            _ => Verdict::Ineffective,
        };
        let tests: Vec<_> = evidence
            .counterfactual
            .iter()
            .filter(|x| x.change == c.id)
            .collect();
        let counterfactual = (!tests.is_empty()).then(|| CounterfactualSummary {
            restored: tests
                .iter()
                .filter(|x| x.restored)
                .map(|x| x.task.clone())
                .collect(),
            not_restored: tests
                .iter()
                .filter(|x| !x.restored)
                .map(|x| x.task.clone())
                .collect(),
            trials: tests.iter().map(|x| x.tally.trials + x.tally.infra).sum(),
        });
        let all = c.predicted_fixes.iter().chain(&c.risk_tasks);
        let ignored: BTreeSet<&String> = all.filter(|t| !visible.contains(*t)).collect();
        ev.changes.push(ChangeVerdict {
            id: c.id.clone(),
            component: c.component,
            description: c.description.clone(),
            files: c.files.clone(),
            predicted_fixes: own(&pc),
            risk_tasks: own(&qc),
            actually_fixed: own(&fixed),
            still_failed: own(&pc.difference(&f).copied().collect()),
            risk_realized: own(&realized),
            verdict,
            improved: own(&pc.intersection(&improved).copied().collect()),
            infra_affected: own(&pc
                .union(&qc)
                .filter(|t| infra_tasks.contains(*t))
                .copied()
                .collect()),
            flips_within_noise: own(&fixed
                .union(&realized)
                .filter(|t| noisy.contains(*t))
                .copied()
                .collect()),
            regressions_matched: g
                .iter()
                .filter(|t| change_touches(&c.files, ex(t)))
                .map(|t| t.to_string())
                .collect(),
            ignored_tasks: ignored.into_iter().cloned().collect(),
            counterfactual,
            blamed_regressions: own(&blamed),
            credited_fixes: own(&credited),
        });
    }
    ev.unconfirmed = unconfirmed.iter().map(|t| t.to_string()).collect();
    let g_all: BTreeSet<&str> = g.union(&canary_regressed).copied().collect();
    ev.prediction_vs_truth = truth_quality(&ev.changes, &f, &g_all, &tested);
    ev.canary = evidence.canary.clone();
    ev.prediction_vs_truth_cumulative = ev.prediction_vs_truth.clone();
    let cost = evidence.total_cost();
    ev.confirm_trials = evidence.confirm_cost.trials;
    ev.counterfactual_trials = evidence.counterfactual_cost.trials;
    ev.extra_cost_usd = cost.cost_usd;

    let file_match = |task: &str, named: &dyn Fn(&crate::manifest::Change) -> bool| FileMatch {
        task: task.to_string(),
        matched_changes: changes
            .iter()
            .filter(|c| change_touches(&c.files, ex(task)))
            .map(|c| c.id.clone())
            .collect(),
        predicted_by: changes
            .iter()
            .filter(|c| named(c))
            .map(|c| c.id.clone())
            .collect(),
    };
    for t in &g {
        let m = file_match(t, &|c| c.risk_tasks.iter().any(|r| r == t));
        let blamed = ev
            .changes
            .iter()
            .any(|c| c.blamed_regressions.iter().any(|b| b == t));
        if !blamed {
            ev.unattributed_regressions.push(m.clone());
        }
        ev.regressions_by_file.push(m);
    }
    for t in f.iter().filter(|t| !all_p.contains(*t)) {
        ev.unpredicted_fixes.push(file_match(t, &|_| false));
    }

    if prev_manifest.is_some() {
        let hit_p = all_p.intersection(&f).count();
        let hit_q = all_q.intersection(&g).count();
        ev.prediction = PredictionQuality {
            predicted_fixes: all_p.len(),
            fixed: f.len(),
            fix_precision: ratio(hit_p, all_p.len()),
            fix_recall: ratio(hit_p, f.len()),
            predicted_risks: all_q.len(),
            regressed: g.len(),
            risk_precision: ratio(hit_q, all_q.len()),
            risk_recall: ratio(hit_q, g.len()),
        };
    } else {
        ev.prediction.fixed = f.len();
        ev.prediction.regressed = g.len();
    }
    ev
}

fn stats(pv: &BTreeMap<String, TaskScore>, cv: &BTreeMap<String, TaskScore>) -> RunStats {
    let rates: Vec<f64> = cv.values().map(|t| t.pass_at_1).collect();
    let (pass_at_1, pass_at_1_ci) = mean_with_ci(&rates);
    let prev_pass_at_1 =
        (!pv.is_empty()).then(|| pv.values().map(|t| t.pass_at_1).sum::<f64>() / pv.len() as f64);
    let (p, c): (Vec<f64>, Vec<f64>) = cv
        .iter()
        .filter_map(|(t, c)| pv.get(t).map(|p| (p.pass_at_1, c.pass_at_1)))
        .unzip();
    let d = paired_delta_ci(&p, &c);
    RunStats {
        n_tasks: cv.len(),
        pass_at_1,
        pass_at_1_ci,
        infra_tasks: cv
            .values()
            .filter(|t| t.status == TaskStatus::Infra)
            .count(),
        prev_n_tasks: pv.len(),
        prev_pass_at_1,
        n_paired: p.len(),
        delta: d.map(|x| x.0),
        delta_ci: d.map(|x| x.1),
        delta_significant: d.is_some_and(|x| excludes_zero(x.1)),
    }
}

/// Ids of the changes judged HARMFUL (what `rollback = "auto"` reverts).
pub fn harmful_changes(ev: &ChangeEvaluation) -> Vec<String> {
    ev.changes
        .iter()
        .filter(|c| c.verdict == Verdict::Harmful)
        .map(|c| c.id.clone())
        .collect()
}

/// Writes `change_evaluation.json` into the iteration directory `dir`.
pub fn write(dir: &Path, ev: &ChangeEvaluation) -> anyhow::Result<()> {
    crate::run_dir::IterationDir::at(dir).write_change_evaluation(ev)
}

/// Reads `change_evaluation.json` from the iteration directory `dir`.
pub fn read(dir: &Path) -> anyhow::Result<ChangeEvaluation> {
    crate::run_dir::IterationDir::at(dir).change_evaluation()
}

#[cfg(test)]
#[path = "attribute_tests.rs"]
mod tests;
