//! The Attribute phase (docs/attribution.md): did each change of the previous manifest do what it
//! predicted? Flips, per-change verdicts, file-matched regressions, prediction quality, and
//! a statistical layer (intervals, paired bootstrap of the delta, Fisher test per flip).
//!
//! Held-out tasks (not in `visible`) are excluded from everything here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ahe_bench::scores::{mean_with_ci, TaskScore};
use ahe_bench::{Scores, TaskStatus, TrialStatus};

use crate::stats::{excludes_zero, fisher_exact, paired_delta_ci, ALPHA};
use ahe_rundir::evidence::Evidence;
use ahe_rundir::evidence::Tally;
use ahe_rundir::manifest::Manifest;

mod truth;
pub use ahe_rundir::attribution::*;
use truth::truth_quality;

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

/// Attributes the current scores to the changes of the previous manifest (docs/attribution.md#verdicts).
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
    let infra_tasks = classify_moves(&mut ev, &pv, &cv, evidence);
    let moves = ev.clone();
    let flips = Flips::of(&moves, evidence, exercised, infra_tasks);
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
        ev.changes
            .push(change_verdict(c, &pc, &qc, &flips, visible));
    }
    mark_unjudged(&mut ev.changes, &flips);
    let (f, g) = (&flips.f, &flips.g);
    ev.unconfirmed = flips.unconfirmed.iter().map(|t| t.to_string()).collect();
    let g_all: BTreeSet<&str> = g.union(&flips.canary_regressed).copied().collect();
    ev.prediction_vs_truth = truth_quality(&ev.changes, f, &g_all, &|t| flips.tested(t));
    ev.canary = evidence.canary.clone();
    ev.prediction_vs_truth_cumulative = ev.prediction_vs_truth.clone();
    let cost = evidence.total_cost();
    ev.confirm_trials = evidence.confirm_cost.trials;
    ev.counterfactual_trials = evidence.counterfactual_cost.trials;
    ev.extra_cost_usd = cost.cost_usd;
    match_files(&mut ev, changes, &flips, &all_p);
    if prev_manifest.is_some() {
        ev.prediction = prediction_quality(&all_p, &all_q, f, g);
    } else {
        ev.prediction.fixed = f.len();
        ev.prediction.regressed = g.len();
    }
    ev
}

/// Sorts every visible task scored in both iterations into fixed, regressed, improved,
/// worsened or infra changes (new tasks listed apart); returns the tasks infra touched.
fn classify_moves<'a>(
    ev: &mut ChangeEvaluation,
    pv: &'a BTreeMap<String, TaskScore>,
    cv: &'a BTreeMap<String, TaskScore>,
    evidence: &Evidence,
) -> BTreeSet<String> {
    let mut infra_tasks: BTreeSet<&str> = BTreeSet::new();
    use TaskStatus::*;
    for (task, c) in cv {
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
    let all_infra = pv.iter().chain(cv).filter(|x| x.1.status == Infra);
    infra_tasks.extend(all_infra.map(|x| x.0.as_str()));
    infra_tasks.into_iter().map(str::to_string).collect()
}

/// The flips that count as evidence, and what the confirmation, counterfactual and canary
/// trials say about them.
struct Flips<'a> {
    /// Counted fixes (F without the flips confirmation left within noise).
    f: BTreeSet<&'a str>,
    /// Counted regressions (G likewise).
    g: BTreeSet<&'a str>,
    /// Flips that confirmation trials could not make significant.
    unconfirmed: BTreeSet<&'a str>,
    /// Tasks that improved without flipping.
    improved: BTreeSet<&'a str>,
    /// Flips within noise (counted or not).
    noisy: BTreeSet<&'a str>,
    /// Tasks with infra on either side.
    infra_tasks: BTreeSet<String>,
    /// The canary's counterfactual tests.
    canary_tests: Vec<&'a ahe_rundir::evidence::CfTest>,
    /// Tasks the canary found regressed (their culprits reverted before the rollout).
    canary_regressed: BTreeSet<&'a str>,
    /// The iteration's evidence.
    evidence: &'a Evidence,
    /// Harness files each task's trials exercised.
    exercised: &'a BTreeMap<String, BTreeSet<String>>,
    /// No files (for tasks without exercised files).
    no_files: BTreeSet<String>,
}

impl<'a> Flips<'a> {
    fn of(
        ev: &'a ChangeEvaluation,
        evidence: &'a Evidence,
        exercised: &'a BTreeMap<String, BTreeSet<String>>,
        infra_tasks: BTreeSet<String>,
    ) -> Flips<'a> {
        // Flips that confirmation trials could not make significant are not evidence (those
        // whose confirmation the budget cut short still count, flagged within noise).
        let hopeless = |m: &TaskMove| {
            let extra = evidence.confirm.get(&m.task).copied().unwrap_or_default();
            extra.trials > 0 && crate::confirm::decided(m, extra, evidence.confirm_cap)
        };
        let flips = || ev.fixed.iter().chain(&ev.regressed);
        let unconfirmed: BTreeSet<&str> = flips()
            .filter(|m| m.within_noise && hopeless(m))
            .map(|m| m.task.as_str())
            .collect();
        // The canary's regressions never reach the rollout (their culprits were reverted
        // first): its counterfactuals are the truth for them.
        let canary_tests: Vec<&ahe_rundir::evidence::CfTest> =
            evidence.canary.iter().flat_map(|c| &c.tests).collect();
        Flips {
            f: names(&ev.fixed).difference(&unconfirmed).copied().collect(),
            g: names(&ev.regressed)
                .difference(&unconfirmed)
                .copied()
                .collect(),
            improved: names(&ev.improved),
            noisy: flips()
                .filter(|m| m.within_noise)
                .map(|m| m.task.as_str())
                .collect(),
            canary_regressed: canary_tests.iter().map(|x| x.task.as_str()).collect(),
            canary_tests,
            unconfirmed,
            infra_tasks,
            evidence,
            exercised,
            no_files: BTreeSet::new(),
        }
    }

    /// Whether counterfactual trials (or the canary's) re-ran this task.
    fn tested(&self, t: &str) -> bool {
        self.evidence.tests_of(t).next().is_some() || self.canary_regressed.contains(t)
    }

    /// Whether reverting change `c` restored task `t`.
    fn restored(&self, c: &str, t: &str) -> bool {
        self.evidence
            .tests_of(t)
            .any(|x| x.change == c && x.restored)
    }

    /// The harness files task `t` exercised.
    fn exercised(&self, t: &str) -> &BTreeSet<String> {
        self.exercised.get(t).unwrap_or(&self.no_files)
    }
}

/// The tasks of `set` the evidence gives to a change: where a task was re-run with changes
/// reverted the counterfactual is the truth, else the change's own prediction (`named`).
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

/// The verdict of a change from the fixes it is credited with and the regressions it is
/// blamed for (docs/attribution.md#verdicts); `pc` are its visible predicted fixes.
fn verdict_of(credited: &BTreeSet<&str>, blamed: &BTreeSet<&str>, pc: &BTreeSet<&str>) -> Verdict {
    match (credited.is_empty(), blamed.is_empty()) {
        (true, false) => Verdict::Harmful,
        (false, false) => Verdict::Mixed,
        _ if !pc.is_empty() && pc.iter().all(|t| credited.contains(t)) => Verdict::Effective,
        _ if pc.is_empty() && !credited.is_empty() => Verdict::Effective,
        (false, true) => Verdict::PartiallyEffective,
        _ => Verdict::Ineffective,
    }
}

/// What the counterfactual trials with change `id` reverted showed, when there were any.
fn counterfactual_summary(evidence: &Evidence, id: &str) -> Option<CounterfactualSummary> {
    let tests: Vec<_> = evidence
        .counterfactual
        .iter()
        .filter(|x| x.change == id)
        .collect();
    let tasks = |restored: bool| {
        tests
            .iter()
            .filter(|x| x.restored == restored)
            .map(|x| x.task.clone())
            .collect()
    };
    (!tests.is_empty()).then(|| CounterfactualSummary {
        restored: tasks(true),
        not_restored: tasks(false),
        trials: tests.iter().map(|x| x.tally.trials + x.tally.infra).sum(),
    })
}

/// The verdict on one change of the previous manifest; `pc`/`qc` are its visible predicted
/// fixes and risks.
fn change_verdict(
    c: &ahe_rundir::manifest::Change,
    pc: &BTreeSet<&str>,
    qc: &BTreeSet<&str>,
    flips: &Flips,
    visible: &BTreeSet<String>,
) -> ChangeVerdict {
    let (f, g) = (&flips.f, &flips.g);
    let own = |s: &BTreeSet<&str>| -> Vec<String> { s.iter().map(|t| t.to_string()).collect() };
    let fixed: BTreeSet<&str> = pc.intersection(f).copied().collect();
    let realized: BTreeSet<&str> = qc.intersection(g).copied().collect();
    let tested = |t: &str| flips.tested(t);
    let mine = |t: &str| flips.restored(&c.id, t);
    let credited = by_evidence(f, pc, &tested, &mine);
    let mut blamed = by_evidence(g, qc, &tested, &mine);
    blamed.extend(
        flips
            .canary_tests
            .iter()
            .filter(|x| x.change == c.id && x.restored)
            .map(|x| x.task.as_str()),
    );
    let all = c.predicted_fixes.iter().chain(&c.risk_tasks);
    let ignored: BTreeSet<&String> = all.filter(|t| !visible.contains(*t)).collect();
    let within = |s: &BTreeSet<&str>, keep: &dyn Fn(&str) -> bool| -> Vec<String> {
        s.iter()
            .filter(|t| keep(t))
            .map(|t| t.to_string())
            .collect()
    };
    ChangeVerdict {
        id: c.id.clone(),
        component: c.component,
        description: c.description.clone(),
        files: c.files.clone(),
        predicted_fixes: own(pc),
        risk_tasks: own(qc),
        actually_fixed: own(&fixed),
        still_failed: own(&pc.difference(f).copied().collect()),
        risk_realized: own(&realized),
        verdict: verdict_of(&credited, &blamed, pc),
        improved: own(&pc.intersection(&flips.improved).copied().collect()),
        infra_affected: within(&pc.union(qc).copied().collect(), &|t| {
            flips.infra_tasks.contains(t)
        }),
        flips_within_noise: within(&fixed.union(&realized).copied().collect(), &|t| {
            flips.noisy.contains(t)
        }),
        regressions_matched: g
            .iter()
            .filter(|t| change_touches(&c.files, flips.exercised(t)))
            .map(|t| t.to_string())
            .collect(),
        ignored_tasks: ignored.into_iter().cloned().collect(),
        counterfactual: counterfactual_summary(flips.evidence, &c.id),
        blamed_regressions: own(&blamed),
        credited_fixes: own(&credited),
        unjudged_reason: None,
    }
}

/// Turns INEFFECTIVE into UNJUDGED for a change that may have caused a regression nobody
/// explained: a counted regression no change is blamed for, whose trials exercised the
/// change's files, and no counterfactual trial cleared the change (a failure with it
/// reverted). The reason names the tasks and why they stayed untested.
fn mark_unjudged(verdicts: &mut [ChangeVerdict], flips: &Flips) {
    let explained: BTreeSet<String> = verdicts
        .iter()
        .flat_map(|v| v.blamed_regressions.iter().cloned())
        .collect();
    let unexplained: Vec<&str> = flips
        .g
        .iter()
        .filter(|t| !explained.contains(**t))
        .copied()
        .collect();
    for v in verdicts
        .iter_mut()
        .filter(|v| v.verdict == Verdict::Ineffective)
    {
        let cleared = |t: &str| {
            let ev = flips.evidence;
            ev.tests_of(t)
                .any(|x| x.change == v.id && x.tally.trials > x.tally.passed)
        };
        let open: Vec<&str> = unexplained
            .iter()
            .filter(|t| change_touches(&v.files, flips.exercised(t)) && !cleared(t))
            .copied()
            .collect();
        if open.is_empty() {
            continue;
        }
        let why: BTreeSet<&str> = flips
            .evidence
            .counterfactual_skipped
            .iter()
            .filter(|s| open.contains(&s.task.as_str()))
            .map(|s| s.reason.as_str())
            .collect();
        let why = match why.is_empty() {
            true => "no counterfactual trial with this change reverted ran for them".to_string(),
            false => why.into_iter().collect::<Vec<_>>().join("; "),
        };
        v.verdict = Verdict::Unjudged;
        v.unjudged_reason = Some(format!(
            "{} regressed, exercised its files and no change is blamed; not cleared by a \
             counterfactual trial: {why}",
            open.join(", ")
        ));
    }
}

/// Every counted regression and every unpredicted fix, matched to the changes whose files
/// its trials exercised; regressions no change is blamed for are also unattributed.
fn match_files(
    ev: &mut ChangeEvaluation,
    changes: &[ahe_rundir::manifest::Change],
    flips: &Flips,
    all_p: &BTreeSet<&str>,
) {
    let file_match =
        |task: &str, named: &dyn Fn(&ahe_rundir::manifest::Change) -> bool| FileMatch {
            task: task.to_string(),
            matched_changes: changes
                .iter()
                .filter(|c| change_touches(&c.files, flips.exercised(task)))
                .map(|c| c.id.clone())
                .collect(),
            predicted_by: changes
                .iter()
                .filter(|c| named(c))
                .map(|c| c.id.clone())
                .collect(),
        };
    for t in &flips.g {
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
    for t in flips.f.iter().filter(|t| !all_p.contains(*t)) {
        ev.unpredicted_fixes.push(file_match(t, &|_| false));
    }
}

/// Precision and recall of the manifest's predicted fixes and risks against the counted
/// flips.
fn prediction_quality(
    all_p: &BTreeSet<&str>,
    all_q: &BTreeSet<&str>,
    f: &BTreeSet<&str>,
    g: &BTreeSet<&str>,
) -> PredictionQuality {
    let hit_p = all_p.intersection(f).count();
    let hit_q = all_q.intersection(g).count();
    PredictionQuality {
        predicted_fixes: all_p.len(),
        fixed: f.len(),
        fix_precision: ratio(hit_p, all_p.len()),
        fix_recall: ratio(hit_p, f.len()),
        predicted_risks: all_q.len(),
        regressed: g.len(),
        risk_precision: ratio(hit_q, all_q.len()),
        risk_recall: ratio(hit_q, g.len()),
    }
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

/// Writes `change_evaluation.json` into the iteration directory `dir`.
pub fn write(dir: &Path, ev: &ChangeEvaluation) -> anyhow::Result<()> {
    ahe_rundir::run_dir::IterationDir::at(dir).write_change_evaluation(ev)
}

/// Reads `change_evaluation.json` from the iteration directory `dir`.
pub fn read(dir: &Path) -> anyhow::Result<ChangeEvaluation> {
    ahe_rundir::run_dir::IterationDir::at(dir).change_evaluation()
}

#[cfg(test)]
#[path = "attribute_tests.rs"]
mod tests;
