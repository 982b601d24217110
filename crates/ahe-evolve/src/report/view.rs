//! The one view of a run that every renderer shows: `report.html`, `report.md` and
//! `ahe show` (its tables) all render these values, computed here once from the read model
//! ([`RunReport`]) and formatted for people (`0.500`, `–`, `$0.12`); renderers only lay
//! them out and escape them for their medium. (`ahe show --json` keeps its documented
//! shapes: [`super::json`].)

use std::collections::BTreeMap;

use serde::Serialize;

use super::format::{cell_class, cell_text, ci, f3, iter_label, secs, tokens, verdict_class};
use super::model::{verdict_name, IterationReport, RunReport, ROLES, VERDICTS};
use super::{href, trial_page_href};
use crate::attribute::{ChangeVerdict, TaskMove};

/// One row of the iterations table: headline figures of an iteration.
#[derive(Debug, Clone, Serialize)]
pub struct SummaryRow {
    pub iteration: u32,
    pub label: String,
    pub anchor: String,
    pub best: bool,
    pub status: String,
    pub pass: String,
    pub pass_ci: String,
    pub holdout: String,
    pub overall: String,
    pub delta: String,
    pub delta_significant: bool,
    pub fixed: String,
    pub regressed: String,
    pub verdicts: Vec<(String, usize, String)>,
    pub changes: String,
    pub cost: String,
    pub wall: String,
}

/// One change of an iteration's manifest with the verdict it got one iteration later.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeView {
    pub id: String,
    pub kind: String,
    pub component: String,
    pub description: String,
    pub files: Vec<String>,
    pub failure_pattern: String,
    pub root_cause: String,
    pub why: String,
    pub predicted_fixes: Vec<String>,
    pub risk_tasks: Vec<String>,
    pub verdict: String,
    pub verdict_class: String,
    pub actually_fixed: Vec<String>,
    pub still_failed: Vec<String>,
    pub risk_realized: Vec<String>,
    pub improved: Vec<String>,
    pub within_noise: Vec<String>,
    pub regressions_matched: Vec<String>,
    pub judged: bool,
}

/// One task whose k-trial result moved between iterations.
#[derive(Debug, Clone, Serialize)]
pub struct MoveView {
    pub task: String,
    pub from: String,
    pub to: String,
    pub p_value: String,
    pub within_noise: bool,
}

/// How the previous iteration's changes were judged on these scores.
#[derive(Debug, Clone, Serialize)]
pub struct AttributionView {
    pub manifest_iteration: Option<u32>,
    pub delta: String,
    pub prev: String,
    pub moves: Vec<(String, Vec<MoveView>)>,
    pub has_moves: bool,
    pub unattributed: Vec<(String, String)>,
    pub unpredicted: Vec<(String, String)>,
    pub prediction: Vec<(String, String)>,
    pub judged: Vec<(String, String, String, String)>,
    pub delta_view: Option<DeltaView>,
    pub judged_rows: Vec<JudgedRow>,
    pub precision: PredictionView,
}

/// Δ pass@1 against the previous iteration with its paired interval.
#[derive(Debug, Clone, Serialize)]
pub struct DeltaView {
    pub value: String,
    pub lo: String,
    pub hi: String,
    pub significant: bool,
    pub n_paired: usize,
}

/// A judged change: what it predicted and what happened.
#[derive(Debug, Clone, Serialize)]
pub struct JudgedRow {
    pub id: String,
    pub verdict: String,
    pub predicted_fixes: Vec<String>,
    pub actually_fixed: Vec<String>,
    pub risk_tasks: Vec<String>,
    pub risk_realized: Vec<String>,
}

/// Prediction precision and recall, `–` when undefined.
#[derive(Debug, Clone, Serialize)]
pub struct PredictionView {
    pub fix_precision: String,
    pub fix_recall: String,
    pub risk_precision: String,
    pub risk_recall: String,
}

/// One task in one iteration: its result, movement, analysis and trials.
#[derive(Debug, Clone, Serialize)]
pub struct TaskRow {
    pub task: String,
    pub holdout: bool,
    pub text: String,
    pub class: String,
    pub movement: String,
    pub detail: Option<String>,
    pub trials: Vec<(u32, String, String)>,
    pub status: String,
    pub has_cell: bool,
    pub suspect: Vec<u32>,
    pub first_failing: Option<(u32, String)>,
}

/// Everything shown about one iteration.
#[derive(Debug, Clone, Serialize)]
pub struct IterView {
    pub iteration: u32,
    pub anchor: String,
    pub title: String,
    pub is_final: bool,
    pub best: bool,
    pub incomplete: Option<String>,
    pub commit: String,
    pub score: String,
    pub holdout: String,
    pub attribution: Option<AttributionView>,
    pub changes: Vec<ChangeView>,
    pub manifest_missing: bool,
    pub rollbacks: Vec<String>,
    pub leaks: Vec<String>,
    pub notes: Vec<(String, bool)>,
    pub links: Vec<(String, String)>,
    pub tasks: Vec<TaskRow>,
    pub phases: Vec<(String, String)>,
    pub roles: Vec<(String, String, String, String)>,
    pub visible: Option<(String, String)>,
    pub holdout_score: Option<(String, String)>,
    pub suspect: Option<String>,
    pub files: Vec<(String, String)>,
    pub scored: bool,
    pub label: String,
}

fn moves(v: &[TaskMove]) -> Vec<MoveView> {
    v.iter()
        .map(|m| MoveView {
            task: m.task.clone(),
            from: format!("{}/{}", m.prev_passed, m.prev_k),
            to: format!("{}/{}", m.cur_passed, m.cur_k),
            p_value: format!("{:.3}", m.p_value),
            within_noise: m.within_noise,
        })
        .collect()
}

fn change_view(
    c: &crate::manifest::Change,
    out: Option<&ChangeVerdict>,
    judged: bool,
) -> ChangeView {
    let kind = serde_json::to_value(c.kind)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let component = serde_json::to_value(c.component)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let verdict = match out {
        Some(o) => verdict_name(o.verdict).to_string(),
        None if judged => "NOT JUDGED".into(),
        None => "PENDING".into(),
    };
    let l = |f: fn(&ChangeVerdict) -> &Vec<String>| out.map(|o| f(o).clone()).unwrap_or_default();
    ChangeView {
        judged: out.is_some(),
        id: c.id.clone(),
        kind,
        component,
        description: c.description.clone(),
        files: c.files.clone(),
        failure_pattern: c.failure_pattern.clone(),
        root_cause: c.root_cause.clone(),
        why: c.why_this_component.clone(),
        predicted_fixes: c.predicted_fixes.clone(),
        risk_tasks: c.risk_tasks.clone(),
        verdict_class: verdict_class(&verdict),
        verdict,
        actually_fixed: l(|o| &o.actually_fixed),
        still_failed: l(|o| &o.still_failed),
        risk_realized: l(|o| &o.risk_realized),
        improved: l(|o| &o.improved),
        within_noise: l(|o| &o.flips_within_noise),
        regressions_matched: l(|o| &o.regressions_matched),
    }
}

fn opt_ratio(v: Option<f64>) -> String {
    v.map(f3).unwrap_or_else(|| "–".into())
}

fn attribution_view(it: &IterationReport) -> Option<AttributionView> {
    let e = it.evaluation.as_ref()?;
    let st = &e.stats;
    let delta = match (st.delta, st.delta_ci) {
        (Some(d), Some(c)) => format!(
            "Δ pass@1 = {d:+.3} (paired 95% CI {:+.3}…{:+.3}{}) over {} paired tasks",
            c[0],
            c[1],
            if st.delta_significant {
                ", significant"
            } else {
                ", within noise"
            },
            st.n_paired
        ),
        _ => "no previous iteration to compare with".into(),
    };
    let p = &e.prediction;
    let delta_view = match (st.delta, st.delta_ci) {
        (Some(d), Some(c)) => Some(DeltaView {
            value: format!("{d:+.3}"),
            lo: format!("{:+.3}", c[0]),
            hi: format!("{:+.3}", c[1]),
            significant: st.delta_significant,
            n_paired: st.n_paired,
        }),
        _ => None,
    };
    Some(AttributionView {
        delta_view,
        judged_rows: e
            .changes
            .iter()
            .map(|c| JudgedRow {
                id: c.id.clone(),
                verdict: verdict_name(c.verdict).to_string(),
                predicted_fixes: c.predicted_fixes.clone(),
                actually_fixed: c.actually_fixed.clone(),
                risk_tasks: c.risk_tasks.clone(),
                risk_realized: c.risk_realized.clone(),
            })
            .collect(),
        precision: PredictionView {
            fix_precision: opt_ratio(p.fix_precision),
            fix_recall: opt_ratio(p.fix_recall),
            risk_precision: opt_ratio(p.risk_precision),
            risk_recall: opt_ratio(p.risk_recall),
        },
        manifest_iteration: e.manifest_iteration,
        delta,
        prev: st.prev_pass_at_1.map(f3).unwrap_or_else(|| "–".into()),
        has_moves: !(e.fixed.is_empty()
            && e.regressed.is_empty()
            && e.improved.is_empty()
            && e.worsened.is_empty()
            && e.infra_changes.is_empty()),
        moves: vec![
            ("fixed".into(), moves(&e.fixed)),
            ("regressed".into(), moves(&e.regressed)),
            ("improved".into(), moves(&e.improved)),
            ("worsened".into(), moves(&e.worsened)),
            ("infra".into(), moves(&e.infra_changes)),
        ],
        unattributed: e
            .unattributed_regressions
            .iter()
            .map(|m| (m.task.clone(), m.matched_changes.join(", ")))
            .collect(),
        unpredicted: e
            .unpredicted_fixes
            .iter()
            .map(|m| (m.task.clone(), m.matched_changes.join(", ")))
            .collect(),
        prediction: vec![
            ("fix precision".into(), opt_ratio(p.fix_precision)),
            ("fix recall".into(), opt_ratio(p.fix_recall)),
            ("risk precision".into(), opt_ratio(p.risk_precision)),
            ("risk recall".into(), opt_ratio(p.risk_recall)),
            (
                "predicted fixes / fixed".into(),
                format!("{} / {}", p.predicted_fixes, p.fixed),
            ),
            (
                "predicted risks / regressed".into(),
                format!("{} / {}", p.predicted_risks, p.regressed),
            ),
        ],
        judged: e
            .changes
            .iter()
            .map(|c| {
                let v = verdict_name(c.verdict);
                let anchor = format!("iter-{:03}-{}", e.manifest_iteration.unwrap_or(0), c.id);
                (c.id.clone(), v.to_string(), verdict_class(v), anchor)
            })
            .collect(),
    })
}

/// Link to a trial: its page when the pages are written, else its directory.
pub fn trial_href(it: &IterationReport, task: &str, attempt: u32, pages: bool) -> String {
    if pages {
        trial_page_href(it.iteration, task, attempt)
    } else {
        href(&it.trial_rel(task, attempt))
    }
}

/// The view of one iteration (links to trial pages when `pages`, else to directories).
pub fn iter_view(run: &RunReport, it: &IterationReport, pages: bool) -> IterView {
    let t = it.iteration;
    let next_judged = run.iteration(t + 1).is_some_and(|n| n.evaluation.is_some());
    let changes: Vec<ChangeView> = it
        .manifest
        .iter()
        .flat_map(|m| &m.changes)
        .map(|c| change_view(c, run.outcome(t, &c.id), next_judged))
        .collect();
    let rollbacks: Vec<String> = it
        .manifest
        .iter()
        .flat_map(|m| &m.changes)
        .filter(|c| c.kind == crate::manifest::ChangeKind::Rollback)
        .map(|c| format!("{}: {} ({})", c.id, c.description, c.files.join(", ")))
        .collect();
    let mut links = Vec::new();
    let mut files = Vec::new();
    for (label, f) in [
        ("analysis overview", &it.files.overview),
        ("evolve summary", &it.files.summary),
        ("harness diff", &it.files.diff),
    ] {
        if let Some(p) = f {
            links.push((label.to_string(), href(p)));
            files.push((label.to_string(), p.clone()));
        }
    }
    if it.scores.is_some() {
        links.push(("scores.json".into(), href(&it.scores_rel())));
    }
    let mut by_task: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for tr in &it.trials {
        by_task.entry(&tr.task).or_default().push(tr.attempt);
    }
    let mut tasks: Vec<TaskRow> = Vec::new();
    for task in run.tasks.iter() {
        let cell = it.cell(task);
        let attempts = by_task.get(task.as_str()).cloned().unwrap_or_default();
        if cell.is_none() && attempts.is_empty() {
            continue;
        }
        let status_of = |a: u32| -> String {
            it.task(task)
                .and_then(|s| s.trials.iter().find(|x| x.attempt == a))
                .map(|x| x.status.as_str().to_string())
                .or_else(|| it.journal_trials.get(task).and_then(|m| m.get(&a)).cloned())
                .unwrap_or_else(|| "running".into())
        };
        let scored_trials = it.task(task).map(|s| s.trials.as_slice()).unwrap_or(&[]);
        let first_failing = cell
            .as_ref()
            .filter(|c| c.passed < c.k || c.status == "infra")
            .map(|_| {
                let a = scored_trials
                    .iter()
                    .find(|x| x.status.as_str() != "pass")
                    .map(|x| x.attempt)
                    .unwrap_or(1);
                (a, trial_href(it, task, a, pages))
            });
        tasks.push(TaskRow {
            status: cell.as_ref().map(|c| c.status.clone()).unwrap_or_default(),
            has_cell: cell.is_some(),
            suspect: scored_trials
                .iter()
                .filter(|x| x.suspect)
                .map(|x| x.attempt)
                .collect(),
            first_failing,
            task: task.clone(),
            holdout: run.holdout.contains(task),
            text: cell.as_ref().map(cell_text).unwrap_or_default(),
            class: cell.as_ref().map(cell_class).unwrap_or("c-none").into(),
            movement: it.task_move(task).unwrap_or("").into(),
            detail: it.files.details.get(task).map(|p| href(p)),
            trials: attempts
                .iter()
                .map(|a| (*a, trial_href(it, task, *a, pages), status_of(*a)))
                .collect(),
        });
    }
    let score = match it.visible() {
        Some((p, c)) => {
            let s = it.scores.as_ref().map(|s| s.pass_at_1).unwrap_or(p);
            format!(
                "visible pass@1 {} (95% CI {}), all tasks {}",
                f3(p),
                ci(c),
                f3(s)
            )
        }
        None => "not scored yet".into(),
    };
    IterView {
        visible: it.visible().map(|(p, c)| (f3(p), ci(c))),
        holdout_score: it.holdout().map(|(p, c)| (f3(p), ci(c))),
        suspect: it.suspect_line(),
        files,
        scored: it.scores.is_some(),
        label: iter_label(it),
        iteration: t,
        anchor: format!("iter-{t:03}"),
        title: if it.is_final {
            format!("Iteration {t} — final evaluation")
        } else {
            format!("Iteration {t}")
        },
        is_final: it.is_final,
        best: run.is_best(t),
        incomplete: it.incomplete.as_ref().map(|i| i.message.clone()),
        commit: it
            .evaluated_commit
            .as_deref()
            .map(|c| c.chars().take(12).collect())
            .unwrap_or_default(),
        score,
        holdout: it
            .holdout()
            .map(|(p, c)| format!("held-out pass@1 {} (95% CI {})", f3(p), ci(c)))
            .into_iter()
            .chain(it.suspect_line())
            .collect::<Vec<_>>()
            .join(" · "),
        attribution: attribution_view(it),
        manifest_missing: !it.is_final && it.manifest.is_none(),
        changes,
        rollbacks,
        leaks: super::format::leak_lines(it.manifest.as_ref()),
        notes: it
            .notes
            .iter()
            .map(|n| {
                let l = n.to_lowercase();
                let warn = ["revert", "rollback", "budget", "could not", "infra", "fail"]
                    .iter()
                    .any(|w| l.contains(w));
                (n.clone(), warn)
            })
            .collect(),
        links,
        tasks,
        phases: it
            .phases
            .iter()
            .map(|p| {
                let v = match (p.secs, p.started) {
                    (Some(s), _) => secs(s),
                    (None, true) => "unfinished".into(),
                    (None, false) => "–".into(),
                };
                (p.phase.clone(), v)
            })
            .collect(),
        roles: ROLES
            .iter()
            .filter_map(|r| {
                it.roles.get(*r).map(|u| {
                    (
                        r.to_string(),
                        tokens(u.input_tokens),
                        tokens(u.output_tokens),
                        run.usd(u.cost_usd),
                    )
                })
            })
            .collect(),
    }
}

/// The summary-table row of one iteration.
pub fn summary_row(run: &RunReport, it: &IterationReport) -> SummaryRow {
    let e = it.evaluation.as_ref();
    let vc = it.verdict_counts();
    SummaryRow {
        iteration: it.iteration,
        label: iter_label(it),
        anchor: format!("iter-{:03}", it.iteration),
        best: run.is_best(it.iteration),
        status: if it.complete { "" } else { "incomplete" }.into(),
        pass: it.visible().map(|v| f3(v.0)).unwrap_or_else(|| "–".into()),
        pass_ci: it.visible().map(|v| ci(v.1)).unwrap_or_default(),
        holdout: it.holdout().map(|v| f3(v.0)).unwrap_or_else(|| "–".into()),
        overall: it
            .scores
            .as_ref()
            .map(|s| f3(s.pass_at_1))
            .unwrap_or_else(|| "–".into()),
        delta: e
            .and_then(|e| e.stats.delta)
            .map(|d| format!("{d:+.3}"))
            .unwrap_or_else(|| "–".into()),
        delta_significant: e.is_some_and(|e| e.stats.delta_significant),
        fixed: e
            .map(|e| e.fixed.len().to_string())
            .unwrap_or_else(|| "–".into()),
        regressed: e
            .map(|e| e.regressed.len().to_string())
            .unwrap_or_else(|| "–".into()),
        verdicts: VERDICTS
            .iter()
            .filter_map(|v| {
                let n = verdict_name(*v);
                vc.get(n).map(|c| (n.to_string(), *c, verdict_class(n)))
            })
            .collect(),
        changes: it
            .manifest
            .as_ref()
            .map(|m| m.changes.len().to_string())
            .unwrap_or_else(|| "–".into()),
        cost: run.usd(it.cost_usd()),
        wall: secs(it.wall_sec()),
    }
}
