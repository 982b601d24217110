//! `report.html`: view models of the run rendered with the minijinja templates of
//! `templates/report/` (compiled in; auto-escaped: traces hold arbitrary model output).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use minijinja::{context, Environment, Value};
use rayon::prelude::*;
use serde::Serialize;

use super::charts::Charts;
use super::format::{cell_class, cell_text, ci, f3, iter_label, secs, tokens, usd, verdict_class};
use super::model::{phase_name, verdict_name, IterationReport, RunReport, ROLES, VERDICTS};
use super::{href, trial_page_href};
use crate::attribute::{ChangeVerdict, TaskMove};
use crate::journal::Phase;

/// The template environment (report.html, trial.html, report.css).
pub(super) fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut e = Environment::new();
        let t = [
            (
                "report.css",
                include_str!("../../templates/report/report.css"),
            ),
            (
                "report.html",
                include_str!("../../templates/report/report.html"),
            ),
            (
                "trial.html",
                include_str!("../../templates/report/trial.html"),
            ),
        ];
        for (name, src) in t {
            e.add_template(name, src)
                .unwrap_or_else(|err| panic!("report template {name}: {err}"));
        }
        e
    })
}

#[derive(Serialize)]
struct SummaryRow {
    iteration: u32,
    label: String,
    anchor: String,
    best: bool,
    status: String,
    pass: String,
    pass_ci: String,
    holdout: String,
    overall: String,
    delta: String,
    delta_significant: bool,
    fixed: String,
    regressed: String,
    verdicts: Vec<(String, usize, String)>,
    changes: String,
    cost: String,
    wall: String,
}

#[derive(Serialize)]
struct ChangeView {
    id: String,
    kind: String,
    component: String,
    description: String,
    files: Vec<String>,
    failure_pattern: String,
    root_cause: String,
    why: String,
    predicted_fixes: Vec<String>,
    risk_tasks: Vec<String>,
    verdict: String,
    verdict_class: String,
    actually_fixed: Vec<String>,
    still_failed: Vec<String>,
    risk_realized: Vec<String>,
    improved: Vec<String>,
    within_noise: Vec<String>,
    regressions_matched: Vec<String>,
}

#[derive(Serialize)]
struct MoveView {
    task: String,
    from: String,
    to: String,
    p_value: String,
    within_noise: bool,
}

#[derive(Serialize)]
struct AttributionView {
    manifest_iteration: Option<u32>,
    delta: String,
    prev: String,
    moves: Vec<(String, Vec<MoveView>)>,
    has_moves: bool,
    unattributed: Vec<(String, String)>,
    unpredicted: Vec<(String, String)>,
    prediction: Vec<(String, String)>,
    judged: Vec<(String, String, String, String)>,
}

#[derive(Serialize)]
struct TaskRow {
    task: String,
    holdout: bool,
    text: String,
    class: String,
    movement: String,
    detail: Option<String>,
    trials: Vec<(u32, String, String)>,
}

#[derive(Serialize)]
struct IterView {
    iteration: u32,
    anchor: String,
    title: String,
    is_final: bool,
    best: bool,
    incomplete: Option<String>,
    commit: String,
    score: String,
    holdout: String,
    attribution: Option<AttributionView>,
    changes: Vec<ChangeView>,
    manifest_missing: bool,
    rollbacks: Vec<String>,
    leaks: Vec<String>,
    notes: Vec<(String, bool)>,
    links: Vec<(String, String)>,
    tasks: Vec<TaskRow>,
    phases: Vec<(String, String)>,
    roles: Vec<(String, String, String, String)>,
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
    Some(AttributionView {
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
pub(super) fn trial_href(it: &IterationReport, task: &str, attempt: u32, pages: bool) -> String {
    if pages {
        trial_page_href(it.iteration, task, attempt)
    } else {
        href(&it.trial_rel(task, attempt))
    }
}

fn iter_view(run: &RunReport, it: &IterationReport, pages: bool) -> IterView {
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
    for (label, f) in [
        ("analysis overview", &it.files.overview),
        ("evolve summary", &it.files.summary),
        ("harness diff", &it.files.diff),
    ] {
        if let Some(p) = f {
            links.push((label.to_string(), href(p)));
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
        tasks.push(TaskRow {
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

fn summary_row(run: &RunReport, it: &IterationReport) -> SummaryRow {
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

/// Renders `report.html` (links to trial pages when `pages`, else to trial directories).
pub fn render_report(run: &RunReport, charts: &Charts, pages: bool) -> anyhow::Result<String> {
    let scored: Vec<&IterationReport> = run.iterations.iter().collect();
    let phase_names: Vec<&str> = super::model::EVOLVE_PHASES
        .iter()
        .map(|p: &Phase| phase_name(*p))
        .collect();
    let summary: Vec<SummaryRow> = scored.iter().map(|i| summary_row(run, i)).collect();
    let iterations: Vec<IterView> = scored
        .par_iter()
        .map(|i| iter_view(run, i, pages))
        .collect();
    let role_rows: Vec<(String, Vec<String>, String)> = scored
        .iter()
        .map(|i| {
            let cells = ROLES
                .iter()
                .map(|r| match i.roles.get(*r) {
                    Some(u) => format!(
                        "{} in / {} out · {}",
                        tokens(u.input_tokens),
                        tokens(u.output_tokens),
                        run.usd(u.cost_usd)
                    ),
                    None => "–".into(),
                })
                .collect();
            (iter_label(i), cells, run.usd(i.cost_usd()))
        })
        .collect();
    let phase_rows: Vec<(String, Vec<String>, String)> = scored
        .iter()
        .map(|i| {
            let cells = phase_names
                .iter()
                .map(|p| match i.phases.iter().find(|x| x.phase == *p) {
                    Some(x) => match (x.secs, x.started) {
                        (Some(s), _) => secs(s),
                        (None, true) => "unfinished".into(),
                        _ => "–".into(),
                    },
                    None => "".into(),
                })
                .collect();
            (iter_label(i), cells, secs(i.wall_sec()))
        })
        .collect();
    let mut facts: Vec<(String, String)> = vec![
        ("status".into(), run.status().into()),
        ("model".into(), run.model.clone()),
        (
            "tasks".into(),
            format!(
                "{} visible + {} held out, k = {}",
                run.visible_tasks().len(),
                run.holdout.len(),
                run.info.k
            ),
        ),
        (
            "iterations".into(),
            format!(
                "{} of {} planned + final evaluation",
                run.iterations.iter().filter(|i| !i.is_final).count(),
                run.info.iterations
            ),
        ),
        ("benchmark".into(), run.info.benchmark.clone()),
        ("sandbox".into(), run.info.sandbox.clone()),
        ("rollback policy".into(), run.info.rollback.clone()),
        ("cost".into(), run.cost_text()),
        ("wall time (phases)".into(), secs(run.wall_sec())),
    ];
    if let Some(b) = run.info.budget_usd {
        facts.push(("budget".into(), usd(b)));
    }
    if let Some(r) = &run.ended {
        facts.push(("ended".into(), r.clone()));
    }
    let best = run.best.as_ref().map(|b| {
        format!(
            "iteration {} (visible pass@1 {}, commit {}, git tag best)",
            b.iteration,
            f3(b.pass_at_1),
            b.commit.chars().take(12).collect::<String>()
        )
    });
    let tmpl = env().get_template("report.html")?;
    let html = tmpl.render(context! {
        name => run.name,
        generated => chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string(),
        incomplete => run.incomplete.as_ref().map(|i| i.message.clone()),
        facts => facts,
        best => best,
        best_anchor => run.best.as_ref().map(|b| format!("iter-{:03}", b.iteration)),
        pass_svg => Value::from_safe_string(charts.pass.clone()),
        heatmap_svg => Value::from_safe_string(charts.heatmap.clone()),
        tokens_svg => Value::from_safe_string(charts.tokens.clone()),
        cost_svg => charts.cost.clone().map(Value::from_safe_string),
        phase_svg => Value::from_safe_string(charts.phases.clone()),
        summary => summary,
        roles => ROLES,
        role_rows => role_rows,
        phase_names => phase_names,
        phase_rows => phase_rows,
        iterations => iterations,
        has_holdout => !run.holdout.is_empty(),
        trial_pages => pages,
    })?;
    Ok(html)
}
