//! The JSON documents of `ahe show --json`: one object per call, its `kind` says which.
//!
//! ```text
//! kind "run" (no flags):
//!   { kind, run, dir, status: "complete"|"stopped"|"incomplete", ended: reason|null,
//!     incomplete: {iteration, phase|null, message}|null, model, k, planned_iterations,
//!     tasks: {visible: [..], holdout: [..]}, best: {iteration, commit, pass_at_1}|null,
//!     cost_usd, wall_sec, iterations: [Summary] }
//! Summary:
//!   { iteration, final, complete, best, evaluated_commit|null,
//!     pass_at_1|null, pass_at_1_ci: [lo, hi]|null            (visible tasks)
//!     holdout_pass_at_1|null, holdout_pass_at_1_ci|null, all_pass_at_1|null,
//!     delta|null, delta_ci|null, fixed|null, regressed|null,
//!     verdicts: {VERDICT: count}   (previous iteration's changes judged here)
//!     changes|null (made here), cost_usd, tokens: {input, output}, wall_sec,
//!     incomplete_phase|null, notes (count of journal notes) }
//! kind "iteration" (--iteration N):
//!   { kind, run, iteration, summary: Summary, incomplete|null,
//!     phases: [{phase, started, finished, secs|null}],
//!     roles: {role: {input_tokens, output_tokens, cost_usd}},
//!     tasks: [{task, holdout, k, passed, status, pass_at_1|null, move|null,
//!              trials: [{attempt, status, reward|null, duration_sec|null, turns|null, tokens|null}]}],
//!     attribution: change_evaluation.json|null,
//!     changes: [{id, type, component, description, files, predicted_fixes, risk_tasks,
//!                failure_pattern, root_cause, why_this_component,
//!                verdict|null, actually_fixed|null, still_failed|null, risk_realized|null}],
//!     notes: [..], files: {overview|null, diff|null, summary|null, details: {task: path}} }
//! kind "task" (--task T [--iteration N]):
//!   { kind, run, task, holdout, history: [{iteration, k, passed, status, pass_at_1|null,
//!     move|null, trials: [..], predicted_fix_by: [change ids], risk_of: [change ids],
//!     detail|null}] }
//! kind "trial" (--iteration N --task T --trial A):
//!   { kind, run, iteration, task, attempt, dir, status, reward|null, agent_end|null,
//!     trace: "complete"|"incomplete"|"missing", usage, cost_usd, duration_ms,
//!     errors: [{turn, agent, kind, message}], system_prompt, user,
//!     turns: [{turn, agent, content|null, tool_calls: [{id, name, args, output|null, ok,
//!              exit_code|null, truncated, error|null, duration_ms}],
//!              middleware: [{hook, name, decision}], feedback: [..], usage, duration_ms}] }
//! ```
//! Paths are relative to the run directory.

use serde_json::{json, Map, Value};

use super::model::{verdict_name, IterationReport, RunReport};

/// The `kind`s of documents.
pub const KINDS: [&str; 4] = ["run", "iteration", "task", "trial"];

/// Keys every document of a kind has (the documented shape; tests check them).
pub fn required_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "run" => &[
            "kind",
            "run",
            "dir",
            "status",
            "ended",
            "incomplete",
            "model",
            "k",
            "planned_iterations",
            "tasks",
            "best",
            "cost_usd",
            "wall_sec",
            "iterations",
        ],
        "iteration" => &[
            "kind",
            "run",
            "iteration",
            "summary",
            "incomplete",
            "phases",
            "roles",
            "tasks",
            "attribution",
            "changes",
            "notes",
            "files",
        ],
        "task" => &["kind", "run", "task", "holdout", "history"],
        "trial" => &[
            "kind",
            "run",
            "iteration",
            "task",
            "attempt",
            "dir",
            "status",
            "reward",
            "agent_end",
            "trace",
            "usage",
            "cost_usd",
            "duration_ms",
            "errors",
            "system_prompt",
            "user",
            "turns",
        ],
        _ => &[],
    }
}

/// Keys of each iteration summary (`run.iterations[]`, `iteration.summary`).
pub const SUMMARY_KEYS: [&str; 21] = [
    "iteration",
    "final",
    "complete",
    "best",
    "evaluated_commit",
    "pass_at_1",
    "pass_at_1_ci",
    "holdout_pass_at_1",
    "holdout_pass_at_1_ci",
    "all_pass_at_1",
    "delta",
    "delta_ci",
    "fixed",
    "regressed",
    "verdicts",
    "changes",
    "cost_usd",
    "tokens",
    "wall_sec",
    "incomplete_phase",
    "notes",
];

/// One iteration's summary row.
pub fn summary(run: &RunReport, it: &IterationReport) -> Value {
    let e = it.evaluation.as_ref();
    let (tin, tout) = it.roles.values().fold((0u64, 0u64), |(a, b), r| {
        (a + r.input_tokens, b + r.output_tokens)
    });
    json!({
        "iteration": it.iteration,
        "final": it.is_final,
        "complete": it.complete,
        "best": run.is_best(it.iteration),
        "evaluated_commit": it.evaluated_commit,
        "pass_at_1": it.visible().map(|v| v.0),
        "pass_at_1_ci": it.visible().map(|v| v.1),
        "holdout_pass_at_1": it.holdout().map(|v| v.0),
        "holdout_pass_at_1_ci": it.holdout().map(|v| v.1),
        "all_pass_at_1": it.scores.as_ref().map(|s| s.pass_at_1),
        "delta": e.and_then(|e| e.stats.delta),
        "delta_ci": e.and_then(|e| e.stats.delta_ci),
        "fixed": e.map(|e| e.fixed.len()),
        "regressed": e.map(|e| e.regressed.len()),
        "verdicts": it.verdict_counts(),
        "changes": it.manifest.as_ref().map(|m| m.changes.len()),
        "cost_usd": it.cost_usd(),
        "tokens": {"input": tin, "output": tout},
        "wall_sec": it.wall_sec(),
        "incomplete_phase": it.incomplete.as_ref().and_then(|i| i.phase.clone()),
        "notes": it.notes.len(),
    })
}

/// `kind: "run"`.
pub fn run_doc(run: &RunReport) -> Value {
    json!({
        "kind": "run",
        "run": run.name,
        "dir": run.dir.display().to_string(),
        "status": run.status(),
        "ended": run.ended,
        "incomplete": run.incomplete,
        "model": run.model,
        "k": run.info.k,
        "planned_iterations": run.info.iterations,
        "tasks": {"visible": run.visible_tasks(), "holdout": run.holdout},
        "best": run.best,
        "cost_usd": run.cost_usd(),
        "wall_sec": run.wall_sec(),
        "iterations": run.iterations.iter().map(|i| summary(run, i)).collect::<Vec<_>>(),
    })
}

fn task_entry(run: &RunReport, it: &IterationReport, task: &str) -> Option<Map<String, Value>> {
    let mut m = Map::new();
    if let Some(s) = it.task(task) {
        m.insert("k".into(), s.k.into());
        m.insert("passed".into(), s.passed.into());
        m.insert("status".into(), super::model::status_name(s.status).into());
        m.insert("pass_at_1".into(), s.pass_at_1.into());
        m.insert("trials".into(), serde_json::to_value(&s.trials).ok()?);
    } else {
        let j = it.journal_trials.get(task)?;
        let c = it.cell(task)?;
        m.insert("k".into(), c.k.into());
        m.insert("passed".into(), c.passed.into());
        m.insert("status".into(), c.status.into());
        m.insert("pass_at_1".into(), Value::Null);
        let trials: Vec<Value> = j
            .iter()
            .map(|(a, s)| json!({"attempt": a, "status": s, "reward": null, "duration_sec": null, "turns": null, "tokens": null}))
            .collect();
        m.insert("trials".into(), trials.into());
    }
    m.insert("holdout".into(), run.holdout.contains(task).into());
    m.insert("move".into(), it.task_move(task).into());
    Some(m)
}

/// `kind: "iteration"`; None when the iteration does not exist.
pub fn iteration_doc(run: &RunReport, t: u32) -> Option<Value> {
    let it = run.iteration(t)?;
    let tasks: Vec<Value> = run
        .tasks
        .iter()
        .filter_map(|task| {
            let mut m = task_entry(run, it, task)?;
            m.insert("task".into(), task.clone().into());
            Some(Value::Object(m))
        })
        .collect();
    let changes: Vec<Value> = it
        .manifest
        .iter()
        .flat_map(|m| &m.changes)
        .map(|c| {
            let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
            let out = run.outcome(t, &c.id);
            if let Value::Object(m) = &mut v {
                m.insert(
                    "verdict".into(),
                    out.map(|o| verdict_name(o.verdict)).into(),
                );
                m.insert(
                    "actually_fixed".into(),
                    json!(out.map(|o| &o.actually_fixed)),
                );
                m.insert("still_failed".into(), json!(out.map(|o| &o.still_failed)));
                m.insert("risk_realized".into(), json!(out.map(|o| &o.risk_realized)));
            }
            v
        })
        .collect();
    Some(json!({
        "kind": "iteration",
        "run": run.name,
        "iteration": t,
        "summary": summary(run, it),
        "incomplete": it.incomplete,
        "phases": it.phases,
        "roles": it.roles,
        "tasks": tasks,
        "attribution": it.evaluation,
        "changes": changes,
        "notes": it.notes,
        "files": it.files,
    }))
}

/// `kind: "task"`: the task across iterations (only `only` when given); None when the task
/// never ran.
pub fn task_doc(run: &RunReport, task: &str, only: Option<u32>) -> Option<Value> {
    if !run.tasks.iter().any(|t| t == task) {
        return None;
    }
    let history: Vec<Value> = run
        .iterations
        .iter()
        .filter(|it| only.is_none_or(|o| o == it.iteration))
        .filter_map(|it| {
            let mut m = task_entry(run, it, task)?;
            m.remove("holdout");
            let prev = it
                .iteration
                .checked_sub(1)
                .and_then(|p| run.iteration(p))
                .and_then(|p| p.manifest.as_ref());
            let ids = |f: fn(&ahe_rundir::manifest::Change) -> &Vec<String>| -> Vec<String> {
                prev.iter()
                    .flat_map(|m| &m.changes)
                    .filter(|c| f(c).iter().any(|x| x == task))
                    .map(|c| c.id.clone())
                    .collect()
            };
            m.insert("iteration".into(), it.iteration.into());
            m.insert(
                "predicted_fix_by".into(),
                ids(|c| &c.predicted_fixes).into(),
            );
            m.insert("risk_of".into(), ids(|c| &c.risk_tasks).into());
            m.insert("detail".into(), it.files.details.get(task).cloned().into());
            Some(Value::Object(m))
        })
        .collect();
    Some(json!({
        "kind": "task",
        "run": run.name,
        "task": task,
        "holdout": run.holdout.contains(task),
        "history": history,
    }))
}

/// `kind: "trial"`: one trial's clean trace.
pub fn trial_doc(run: &RunReport, t: u32, task: &str, attempt: u32) -> anyhow::Result<Value> {
    let tr = run.trial(t, task, attempt)?;
    let mut v = serde_json::to_value(&tr)?;
    if let Value::Object(m) = &mut v {
        m.remove("schema_version");
        m.insert("kind".into(), "trial".into());
        m.insert("run".into(), run.name.clone().into());
        m.insert("iteration".into(), t.into());
        let it = ahe_rundir::RunDir::new(&run.dir).iteration(t);
        let dir = it.rel(it.trial(task, attempt).path());
        m.insert("dir".into(), dir.into());
    }
    Ok(v)
}
