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

use crate::manifest::{Component, Manifest};
use crate::stats::{excludes_zero, fisher_exact, paired_delta_ci, ALPHA};

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

fn task_move(task: &str, p: &TaskScore, c: &TaskScore) -> TaskMove {
    let p_value = fisher_exact(p.passed, p.k, c.passed, c.k);
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
/// regressed tasks; `clean::CleanSummary::exercised` has every task).
pub fn attribute(
    iteration: u32,
    prev_manifest: Option<&Manifest>,
    prev: &Scores,
    cur: &Scores,
    visible: &BTreeSet<String>,
    exercised: &BTreeMap<String, BTreeSet<String>>,
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
        let m = task_move(task, p, c);
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

    let f = names(&ev.fixed);
    let g = names(&ev.regressed);
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
        let verdict = match (fixed.is_empty(), realized.is_empty()) {
            (true, false) => Verdict::Harmful,
            (false, false) => Verdict::Mixed,
            _ if !pc.is_empty() && fixed.len() == pc.len() => Verdict::Effective,
            (false, true) => Verdict::PartiallyEffective,
            _ => Verdict::Ineffective,
        };
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
        });
    }

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
        if m.predicted_by.is_empty() {
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
mod tests {
    use super::*;
    use crate::manifest::{Change, ChangeKind};
    use ahe_bench::TrialResult;

    /// Scores from `name=passed/k ...`; `x` for passed marks an all-infra task.
    fn scores(spec: &str) -> Scores {
        let mut rs = Vec::new();
        for item in spec.split_whitespace() {
            let (task, rest) = item.split_once('=').unwrap();
            let (passed, k) = rest.split_once('/').unwrap();
            for a in 1..=k.parse::<u32>().unwrap() {
                let mut r = TrialResult::new(task, a);
                r.status = match passed.parse::<u32>() {
                    Err(_) => TrialStatus::InfraError,
                    Ok(p) if a <= p => TrialStatus::Pass,
                    Ok(_) => TrialStatus::Fail,
                };
                rs.push(r);
            }
        }
        ahe_bench::scores::compute(2, &rs, 1.0)
    }

    fn change(id: &str, files: &[&str], fixes: &[&str], risks: &[&str]) -> Change {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        Change {
            id: id.into(),
            kind: ChangeKind::Improvement,
            description: format!("change {id}"),
            files: v(files),
            failure_pattern: String::new(),
            root_cause: String::new(),
            predicted_fixes: v(fixes),
            risk_tasks: v(risks),
            component: Component::ToolImpl,
            why_this_component: String::new(),
        }
    }

    fn set(xs: &str) -> BTreeSet<String> {
        xs.split_whitespace().map(String::from).collect()
    }

    fn all_visible(s: &Scores) -> BTreeSet<String> {
        s.tasks.keys().cloned().collect()
    }

    #[test]
    fn every_verdict_and_prediction_quality() {
        let prev = scores("f1=0/2 f2=1/2 f3=0/2 u1=0/2 r1=2/2 r2=2/2 r3=2/2 s1=2/2");
        let cur = scores("f1=2/2 f2=2/2 f3=0/2 u1=2/2 r1=0/2 r2=1/2 r3=0/2 s1=2/2");
        let m = Manifest {
            iteration: 3,
            changes: vec![
                change("eff", &["tools/run_shell.py"], &["f1"], &[]),
                change("part", &["skills/git/SKILL.md"], &["f2", "f3"], &[]),
                change("harm", &["system_prompt.md"], &["f3"], &["r1"]),
                change("mixed", &["middleware/loop.toml"], &["f1"], &["r1"]),
                change("inef", &["middleware/loop.toml"], &["f3"], &["s1"]),
                change("empty", &["middleware/loop.toml"], &[], &[]),
                change("harm2", &["middleware/loop.toml"], &[], &["r2"]),
            ],
            leak_guard: None,
        };
        let mut ex = BTreeMap::new();
        ex.insert(
            "r3".to_string(),
            set("agent.toml memory/ system_prompt.md tools/run_shell.toml middleware/other.toml"),
        );
        let ev = attribute(4, Some(&m), &prev, &cur, &all_visible(&cur), &ex);
        assert_eq!(ev.manifest_iteration, Some(3));
        assert_eq!(names(&ev.fixed), ["f1", "f2", "u1"].into());
        assert_eq!(names(&ev.regressed), ["r1", "r2", "r3"].into());
        use Verdict::*;
        let want = [
            Effective,
            PartiallyEffective,
            Harmful,
            Mixed,
            Ineffective,
            Ineffective,
            Harmful,
        ];
        let got: Vec<Verdict> = ev.changes.iter().map(|c| c.verdict).collect();
        assert_eq!(got, want);
        assert_eq!(harmful_changes(&ev), vec!["harm", "harm2"]);
        let part = &ev.changes[1];
        assert_eq!(part.actually_fixed, vec!["f2"]);
        assert_eq!(part.still_failed, vec!["f3"]);
        assert_eq!(ev.changes[2].risk_realized, vec!["r1"]);
        // r3 regressed unpredicted; it ran run_shell (stem match with tools/run_shell.py)
        // and every task matches a system_prompt.md change.
        let (u, by_file) = (&ev.unattributed_regressions, &ev.regressions_by_file);
        assert_eq!((u.len(), u[0].task.as_str()), (1, "r3"));
        assert_eq!(u[0].matched_changes, vec!["eff", "harm"]);
        assert_eq!(by_file.len(), 3);
        assert_eq!(by_file[0].predicted_by, vec!["harm", "mixed"]);
        assert_eq!(ev.changes[0].regressions_matched, vec!["r3"]);
        assert_eq!(ev.changes[2].regressions_matched, vec!["r1", "r2", "r3"]);
        assert_eq!(ev.unpredicted_fixes.len(), 1);
        assert_eq!(ev.unpredicted_fixes[0].task, "u1");
        assert_eq!(ev.unpredicted_fixes[0].matched_changes, vec!["harm"]);
        // ∪P = {f1,f2,f3}, F = {f1,f2,u1}; ∪Q = {r1,s1,r2}, G = {r1,r2,r3}.
        let p = &ev.prediction;
        assert_eq!(
            (p.predicted_fixes, p.fixed, p.predicted_risks, p.regressed),
            (3, 3, 3, 3)
        );
        assert!((p.fix_precision.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert!((p.fix_recall.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert!((p.risk_precision.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert!((p.risk_recall.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        // With k = 2 every flip here is within noise (best case p = 1/3).
        assert!(ev.fixed.iter().all(|m| m.within_noise));
        assert!((ev.fixed[0].p_value - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(ev.changes[0].flips_within_noise, vec!["f1"]);
    }

    #[test]
    fn partial_moves_infra_new_and_dropped() {
        let prev = scores("p1=0/2 p2=1/2 i1=2/2 i2=x/2 i3=x/2 d1=0/2 same=1/2 m1=2/2");
        let mut cur = scores("p1=1/2 p2=0/2 i1=x/2 i2=2/2 i3=x/2 n1=2/2 same=1/2 m1=1/2");
        // m1: one pass and one infra error now; a Fail, but not the harness's doing.
        let m1 = cur.tasks.get_mut("m1").unwrap();
        m1.trials[1].status = TrialStatus::InfraError;
        let m = Manifest {
            iteration: 1,
            changes: vec![change("c1", &["tools/x.toml"], &["p1", "i2"], &["i1"])],
            leak_guard: None,
        };
        let vis = set("p1 p2 i1 i2 i3 d1 n1 same m1");
        let ev = attribute(2, Some(&m), &prev, &cur, &vis, &BTreeMap::new());
        assert!(ev.fixed.is_empty() && ev.regressed.is_empty());
        assert_eq!(names(&ev.improved), ["p1"].into());
        assert_eq!(names(&ev.worsened), ["p2"].into());
        assert_eq!(names(&ev.infra_changes), ["i1", "i2", "m1"].into());
        assert_eq!(ev.new_tasks, vec!["n1"]);
        assert_eq!(ev.dropped_tasks, vec!["d1"]);
        let c = &ev.changes[0];
        assert_eq!(c.verdict, Verdict::Ineffective);
        assert_eq!(c.improved, vec!["p1"]);
        assert_eq!(c.infra_affected, vec!["i1", "i2"]);
        assert!(ev.unattributed_regressions.is_empty());
        assert_eq!(ev.prediction.fix_precision, Some(0.0));
        assert_eq!(ev.prediction.fix_recall, None);
        assert_eq!(ev.prediction.risk_recall, None);
        assert_eq!(ev.stats.infra_tasks, 2);
        // p1 (0/2 → 1/2) is a move, and noise: Fisher p = 1.
        assert_eq!(ev.improved[0].p_value, 1.0);
    }

    #[test]
    fn held_out_tasks_are_ignored_everywhere() {
        let prev = scores("a=0/2 h1=0/2 h2=2/2");
        let cur = scores("a=0/2 h1=2/2 h2=0/2");
        let m = Manifest {
            iteration: 1,
            changes: vec![change("c1", &["agent.toml"], &["h1"], &["h2"])],
            leak_guard: None,
        };
        let ev = attribute(2, Some(&m), &prev, &cur, &set("a"), &BTreeMap::new());
        assert!(ev.fixed.is_empty() && ev.regressed.is_empty());
        let c = &ev.changes[0];
        assert!(c.predicted_fixes.is_empty() && c.risk_tasks.is_empty());
        assert_eq!(c.ignored_tasks, vec!["h1", "h2"]);
        assert_eq!(c.verdict, Verdict::Ineffective);
        assert_eq!(
            (ev.stats.n_tasks, ev.stats.prev_n_tasks, ev.stats.n_paired),
            (1, 1, 1)
        );
        assert_eq!(ev.stats.pass_at_1, 0.0);
        assert_eq!(ev.stats.delta, Some(0.0));
    }

    #[test]
    fn first_iteration_without_manifest() {
        let empty = scores("");
        let cur = scores("a=2/2 b=0/2");
        let ev = attribute(1, None, &empty, &cur, &all_visible(&cur), &BTreeMap::new());
        assert_eq!(ev.new_tasks, vec!["a", "b"]);
        assert!(ev.changes.is_empty() && ev.fixed.is_empty());
        assert_eq!(ev.manifest_iteration, None);
        assert_eq!(ev.prediction, PredictionQuality::default());
        assert_eq!(ev.stats.prev_pass_at_1, None);
        assert_eq!((ev.stats.delta, ev.stats.delta_significant), (None, false));
        assert!((ev.stats.pass_at_1 - 0.5).abs() < 1e-12);

        // A previous score without a manifest: flips and stats, no verdicts, and every
        // regression is unattributed.
        let prev = scores("a=0/2 b=2/2");
        let ev = attribute(2, None, &prev, &cur, &all_visible(&cur), &BTreeMap::new());
        assert_eq!((ev.fixed.len(), ev.regressed.len()), (1, 1));
        assert_eq!(ev.unattributed_regressions[0].task, "b");
        assert!(ev.unattributed_regressions[0].matched_changes.is_empty());
        assert_eq!(ev.prediction.fix_precision, None);
        assert_eq!(ev.prediction.fixed, 1);
    }

    #[test]
    fn noise_and_significance() {
        // 0/10 → 10/10 is not noise; 0/2 → 2/2 is.
        let mut p10 = scores("a=0/10");
        let mut c10 = scores("a=10/10");
        p10.k = 10;
        c10.k = 10;
        let ev = attribute(2, None, &p10, &c10, &all_visible(&c10), &BTreeMap::new());
        assert!(ev.fixed[0].p_value < 1e-4, "{}", ev.fixed[0].p_value);
        assert!(!ev.fixed[0].within_noise);

        // 30 tasks all flipping up: a significant delta; the interval brackets it.
        let spec = |passed: u32| -> String {
            let p = |i: u32| if i < 5 { 2 } else { passed };
            (0..30).map(|i| format!("t{i:02}={}/2 ", p(i))).collect()
        };
        let prev = scores(&spec(0));
        let cur = scores(&spec(2));
        let vis = all_visible(&cur);
        let ev = attribute(2, None, &prev, &cur, &vis, &BTreeMap::new());
        let s = &ev.stats;
        let d = s.delta.unwrap();
        assert!((d - 25.0 / 30.0).abs() < 1e-12);
        let ci = s.delta_ci.unwrap();
        assert!(ci[0] <= d && d <= ci[1] && ci[0] > 0.0, "{ci:?}");
        assert!(s.delta_significant);
        assert_eq!(s.prev_pass_at_1, Some(5.0 / 30.0));
        assert!(s.pass_at_1_ci[0] <= s.pass_at_1 && s.pass_at_1 <= s.pass_at_1_ci[1]);
        let again = attribute(2, None, &prev, &cur, &vis, &BTreeMap::new());
        assert_eq!(again.stats, ev.stats);

        // One flip up, one down, rest unchanged: no significant delta.
        let prev = scores("a=0/2 b=2/2 c=1/2 d=2/2");
        let cur = scores("a=2/2 b=0/2 c=1/2 d=2/2");
        let ev = attribute(2, None, &prev, &cur, &all_visible(&cur), &BTreeMap::new());
        assert_eq!(ev.stats.delta, Some(0.0));
        assert!(!ev.stats.delta_significant);
    }

    #[test]
    fn file_matching_rules() {
        // change file, exercised file, whether they match
        let cases = "tools/run_shell.py tools/run_shell.toml 1
            tools/run_shell.toml tools/run_shell.toml 1
            tools/run.py tools/run_shell.toml 0
            tools/lib/run_shell.py tools/run_shell.toml 0
            middleware/guard.py middleware/guard.toml 1
            skills/git/helper.sh skills/git/SKILL.md 1
            skills/gitx/SKILL.md skills/git/SKILL.md 0
            subagents/explorer.toml subagents/explorer.toml 1
            subagents/explorer.toml tools/explorer.toml 0
            memory/notes.md tools/x.toml 1
            ./agent.toml tools/x.toml 1
            tools/ tools/x.toml 1
            skills skills/git/SKILL.md 1
            tool tools/x.toml 0
            middleware/x.toml memory/ 0";
        for line in cases.lines() {
            let v: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(file_matches(v[0], v[1]), v[2] == "1", "{line}");
        }
        let none = BTreeSet::new();
        assert!(change_touches(&["system_prompt.md".into()], &none));
        assert!(!change_touches(
            &["tools/a.py".into()],
            &set("tools/b.toml")
        ));
    }

    #[test]
    fn json_shape_and_round_trip() {
        let prev = scores("a=1/2 b=2/2");
        let cur = scores("a=2/2 b=2/2");
        let m = Manifest {
            iteration: 1,
            changes: vec![change("c1", &["tools/x.py"], &["a", "b"], &[])],
            leak_guard: None,
        };
        let (vis, none) = (all_visible(&cur), BTreeMap::new());
        let ev = attribute(2, Some(&m), &prev, &cur, &vis, &none);
        let d = tempfile::tempdir().unwrap();
        write(d.path(), &ev).unwrap();
        assert!(!d.path().join("change_evaluation.json.tmp").exists());
        assert_eq!(read(d.path()).unwrap(), ev);
        let text =
            std::fs::read(crate::run_dir::IterationDir::at(d.path()).change_evaluation_path())
                .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(v["changes"][0]["verdict"], "PARTIALLY_EFFECTIVE");
        assert_eq!(v["changes"][0]["component"], "tool_impl");
        assert_eq!(v["fixed"][0]["prev_status"], "fail");
        assert_eq!(v["fixed"][0]["within_noise"], true);
        assert_eq!(v["prediction"]["fix_precision"], 0.5);
        assert!(v["stats"]["delta_ci"].is_array());
        assert_eq!(v["schema_version"], 1);
    }
}
