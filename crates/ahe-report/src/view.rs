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
mod attribution;
mod run;
pub mod trial;
mod variants;
use attribution::{attribution_view, change_view};
pub use run::{run_summary, run_view, GridRow, RunSummary, RunView};
pub use variants::{VariantRow, VariantsView};

/// One row of the iterations table: headline figures of an iteration.
#[derive(Debug, Clone, Serialize)]
pub struct SummaryRow {
    /// Iteration number (1-based).
    pub iteration: u32,
    /// Iteration label (`3`, `4 final`).
    pub label: String,
    /// HTML anchor of the iteration.
    pub anchor: String,
    /// The best iteration so far.
    pub best: bool,
    /// `incomplete`, or empty.
    pub status: String,
    /// Visible pass@1.
    pub pass: String,
    /// Its 95% interval.
    pub pass_ci: String,
    /// Held-out pass@1 (or the held-out line of the iteration view).
    pub holdout: String,
    /// pass@1 over every task.
    pub overall: String,
    /// Δ pass@1 against the previous iteration.
    pub delta: String,
    /// Δ with its paired interval, `+0.125 (-0.050…+0.300)`, or `–`.
    pub delta_with_ci: String,
    /// Whether the Δ interval excludes 0.
    pub delta_significant: bool,
    /// Tasks fixed.
    pub fixed: String,
    /// Tasks regressed.
    pub regressed: String,
    /// (verdict, count, CSS class) of the judged changes.
    pub verdicts: Vec<(String, usize, String)>,
    /// The changes of the manifest.
    pub changes: String,
    /// Dollars (or `unknown`).
    pub cost: String,
    /// Wall time of the phases.
    pub wall: String,
}

/// One change of an iteration's manifest with the verdict it got one iteration later.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeView {
    /// Change id.
    pub id: String,
    /// `new`, `improvement` or `rollback`.
    pub kind: String,
    /// Harness component.
    pub component: String,
    /// What the change does.
    pub description: String,
    /// Files it touched (or the iteration's analysis and evolve files: label, path).
    pub files: Vec<String>,
    /// The failure it addresses.
    pub failure_pattern: String,
    /// Its root cause.
    pub root_cause: String,
    /// Why this component.
    pub why: String,
    /// Tasks it predicted to fix.
    pub predicted_fixes: Vec<String>,
    /// Tasks it said it might break.
    pub risk_tasks: Vec<String>,
    /// Verdict name, `PENDING` or `NOT JUDGED`.
    pub verdict: String,
    /// CSS class of the verdict.
    pub verdict_class: String,
    /// Predicted tasks that were fixed.
    pub actually_fixed: Vec<String>,
    /// Predicted tasks still failing.
    pub still_failed: Vec<String>,
    /// Risk tasks that regressed.
    pub risk_realized: Vec<String>,
    /// Tasks that improved without flipping.
    pub improved: Vec<String>,
    /// Flips within noise (or whether this move is).
    pub within_noise: Vec<String>,
    /// Regressions matched to it by exercised files.
    pub regressions_matched: Vec<String>,
    /// Whether a verdict exists (or the judged changes as table tuples).
    pub judged: bool,
}

/// One task whose k-trial result moved between iterations.
#[derive(Debug, Clone, Serialize)]
pub struct MoveView {
    /// Task name.
    pub task: String,
    /// Previous k-trial result (`1/2`).
    pub from: String,
    /// Current k-trial result.
    pub to: String,
    /// Fisher exact p-value of the move.
    pub p_value: String,
    /// Flips within noise (or whether this move is).
    pub within_noise: bool,
}

/// How the previous iteration's changes were judged on these scores.
#[derive(Debug, Clone, Serialize)]
pub struct AttributionView {
    /// The iteration whose changes are judged.
    pub manifest_iteration: Option<u32>,
    /// Δ pass@1 against the previous iteration.
    pub delta: String,
    /// Previous visible pass@1.
    pub prev: String,
    /// Moves by kind (fixed, regressed, improved, worsened, infra).
    pub moves: Vec<(String, Vec<MoveView>)>,
    /// Whether any task moved.
    pub has_moves: bool,
    /// Unpredicted regressions: (task, changes touching its files).
    pub unattributed: Vec<(String, String)>,
    /// Unpredicted fixes: (task, changes).
    pub unpredicted: Vec<(String, String)>,
    /// Prediction quality as (label, value) cells.
    pub prediction: Vec<(String, String)>,
    /// Whether a verdict exists (or the judged changes as table tuples).
    pub judged: Vec<(String, String, String, String)>,
    /// Δ pass@1 as values, when there is a previous iteration.
    pub delta_view: Option<DeltaView>,
    /// The judged changes with their predictions and outcomes.
    pub judged_rows: Vec<JudgedRow>,
    /// Prediction precision and recall.
    pub precision: PredictionView,
    /// What confirmation and counterfactual trials showed, one sentence each: quality
    /// against the truth (iteration and cumulative), each reverted change, unconfirmed
    /// flips, the extra trials and their cost.
    pub evidence: Vec<String>,
}

/// Δ pass@1 against the previous iteration with its paired interval.
#[derive(Debug, Clone, Serialize)]
pub struct DeltaView {
    /// Δ, signed, three decimals.
    pub value: String,
    /// Lower end of the paired 95% interval.
    pub lo: String,
    /// Upper end.
    pub hi: String,
    /// Whether the interval excludes 0.
    pub significant: bool,
    /// Tasks paired between the two iterations.
    pub n_paired: usize,
}

/// A judged change: what it predicted and what happened.
#[derive(Debug, Clone, Serialize)]
pub struct JudgedRow {
    /// Change id.
    pub id: String,
    /// Verdict name, `PENDING` or `NOT JUDGED`.
    pub verdict: String,
    /// Tasks it predicted to fix.
    pub predicted_fixes: Vec<String>,
    /// Predicted tasks that were fixed.
    pub actually_fixed: Vec<String>,
    /// Tasks it said it might break.
    pub risk_tasks: Vec<String>,
    /// Risk tasks that regressed.
    pub risk_realized: Vec<String>,
}

/// Prediction precision and recall, `–` when undefined.
#[derive(Debug, Clone, Serialize)]
pub struct PredictionView {
    /// Fix-prediction precision.
    pub fix_precision: String,
    /// Fix-prediction recall.
    pub fix_recall: String,
    /// Risk-prediction precision.
    pub risk_precision: String,
    /// Risk-prediction recall.
    pub risk_recall: String,
}

/// One task in one iteration: its result, movement, analysis and trials.
#[derive(Debug, Clone, Serialize)]
pub struct TaskRow {
    /// Task name.
    pub task: String,
    /// Held-out pass@1 (or the held-out line of the iteration view).
    pub holdout: bool,
    /// k-trial result (`1/2`, `infra`).
    pub text: String,
    /// CSS class of the result.
    pub class: String,
    /// `fixed`, `regressed`… or empty.
    pub movement: String,
    /// Link to the debugger's report.
    pub detail: Option<String>,
    /// (attempt, link, status) per trial.
    pub trials: Vec<(u32, String, String)>,
    /// `incomplete`, or empty.
    pub status: String,
    /// Whether the task has a result in this iteration.
    pub has_cell: bool,
    /// Suspect trials (attempts), or the iteration's suspect line.
    pub suspect: Vec<u32>,
    /// The first failing trial: (attempt, link).
    pub first_failing: Option<(u32, String)>,
}

/// Everything shown about one iteration.
#[derive(Debug, Clone, Serialize)]
pub struct IterView {
    /// Iteration number (1-based).
    pub iteration: u32,
    /// HTML anchor of the iteration.
    pub anchor: String,
    /// Heading.
    pub title: String,
    /// The final evaluation (N+1).
    pub is_final: bool,
    /// The best iteration so far.
    pub best: bool,
    /// Why the iteration is incomplete.
    pub incomplete: Option<String>,
    /// Evaluated commit (12 characters).
    pub commit: String,
    /// The headline score line.
    pub score: String,
    /// Held-out pass@1 (or the held-out line of the iteration view).
    pub holdout: String,
    /// How the previous changes were judged.
    pub attribution: Option<AttributionView>,
    /// The changes of the manifest.
    pub changes: Vec<ChangeView>,
    /// An evolve iteration without a manifest.
    pub manifest_missing: bool,
    /// Rollback changes of this iteration.
    pub rollbacks: Vec<String>,
    /// Leak-guard findings.
    pub leaks: Vec<String>,
    /// Journal notes with a warning flag.
    pub notes: Vec<(String, bool)>,
    /// (label, link) of the analysis and evolve files.
    pub links: Vec<(String, String)>,
    /// Every task with a result or a trial.
    pub tasks: Vec<TaskRow>,
    /// (phase, wall time) in order.
    pub phases: Vec<(String, String)>,
    /// (role, input tokens, output tokens, dollars).
    pub roles: Vec<(String, String, String, String)>,
    /// Visible pass@1 and its interval.
    pub visible: Option<(String, String)>,
    /// Held-out pass@1 and its interval.
    pub holdout_score: Option<(String, String)>,
    /// Suspect trials (attempts), or the iteration's suspect line.
    pub suspect: Option<String>,
    /// Files it touched (or the iteration's analysis and evolve files: label, path).
    pub files: Vec<(String, String)>,
    /// Whether scores.json exists.
    pub scored: bool,
    /// Iteration label (`3`, `4 final`).
    pub label: String,
    /// The evolve step's variants and their screen (`[evolve] variants > 1`).
    pub variants: Option<VariantsView>,
}

/// Link to a trial: its page when the pages are written, else its directory.
pub fn trial_href(it: &IterationReport, task: &str, attempt: u32, pages: bool) -> String {
    if pages {
        trial_page_href(it.iteration, task, attempt)
    } else {
        href(&it.trial_rel(task, attempt))
    }
}

/// The (label, link) and (label, path) of an iteration's analysis and evolve files.
type Files = (Vec<(String, String)>, Vec<(String, String)>);

/// The analysis and evolve files of an iteration: as links (scores.json included) and as
/// run-relative paths.
fn iteration_links(it: &IterationReport) -> Files {
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
        links.push((ahe_bench::layout::SCORES.into(), href(&it.scores_rel())));
    }
    (links, files)
}

/// One row per task with a result or a trial in the iteration.
fn task_rows(run: &RunReport, it: &IterationReport, pages: bool) -> Vec<TaskRow> {
    let mut by_task: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for tr in &it.trials {
        by_task.entry(&tr.task).or_default().push(tr.attempt);
    }
    let mut tasks: Vec<TaskRow> = Vec::new();
    for task in run.tasks.iter() {
        let attempts = by_task.get(task.as_str()).cloned().unwrap_or_default();
        if let Some(row) = task_row(run, it, task, attempts, pages) {
            tasks.push(row);
        }
    }
    tasks
}

/// One task's row of the iteration (none when it has neither a result nor a trial).
fn task_row(
    run: &RunReport,
    it: &IterationReport,
    task: &String,
    attempts: Vec<u32>,
    pages: bool,
) -> Option<TaskRow> {
    let cell = it.cell(task);
    if cell.is_none() && attempts.is_empty() {
        return None;
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
    Some(TaskRow {
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
    })
}

/// The headline score line: visible pass@1 with its interval and all tasks', or not yet.
fn score_line(it: &IterationReport) -> String {
    match it.visible() {
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
    }
}

/// Journal notes, each flagged when it reads like a warning (revert, budget, failure...).
fn flagged_notes(it: &IterationReport) -> Vec<(String, bool)> {
    it.notes
        .iter()
        .map(|n| {
            let l = n.to_lowercase();
            let warn = ["revert", "rollback", "budget", "could not", "infra", "fail"]
                .iter()
                .any(|w| l.contains(w));
            (n.clone(), warn)
        })
        .collect()
}

/// (phase, wall time, `unfinished` or `–`) of the iteration's phases, in order.
fn phase_cells(it: &IterationReport) -> Vec<(String, String)> {
    it.phases
        .iter()
        .map(|p| {
            let v = match (p.secs, p.started) {
                (Some(s), _) => secs(s),
                (None, true) => "unfinished".into(),
                (None, false) => "–".into(),
            };
            (p.phase.clone(), v)
        })
        .collect()
}

/// (role, input tokens, output tokens, dollars) of the roles that ran in the iteration.
fn role_cells(run: &RunReport, it: &IterationReport) -> Vec<(String, String, String, String)> {
    ROLES
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
        .collect()
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
        .filter(|c| c.kind == ahe_rundir::manifest::ChangeKind::Rollback)
        .map(|c| format!("{}: {} ({})", c.id, c.description, c.files.join(", ")))
        .collect();
    let (links, files) = iteration_links(it);
    IterView {
        variants: variants::variants_view(run, it),
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
        score: score_line(it),
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
        notes: flagged_notes(it),
        links,
        tasks: task_rows(run, it, pages),
        phases: phase_cells(it),
        roles: role_cells(run, it),
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
        delta_with_ci: e
            .and_then(|e| e.stats.delta.zip(e.stats.delta_ci))
            .map(|(d, c)| format!("{d:+.3} ({:+.3}…{:+.3})", c[0], c[1]))
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
