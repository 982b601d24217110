//! Debug: per-task deterministic pre-analysis plus an LLM debugger with read-only, jailed
//! tools over that task's cleaned traces → `analysis/detail/<task>.md` and `overview.md`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ahe_bench::{Scores, TaskStatus};
use ahe_harness::TraceWriter;
use ahe_model::{ModelClient, Role};
use minijinja::context;
use serde_json::Value;

use crate::debug::host_agent::{run_host_agent, HostLimits, HostTool};
use crate::debug::text;
use ahe_rundir::clean::{read_clean, CleanTrace};
use ahe_rundir::run_dir::IterationDir;
use ahe_runner::turns::{clip, render_turns};

const SYSTEM: &str = include_str!("../../templates/debugger_system.md");
const USER: &str = include_str!("../../templates/debugger_user.md");
const LAST_TURN: &str = include_str!("../../templates/debugger_last_turn.md");
const PRE_ANALYSIS: &str = include_str!("../../templates/pre_analysis.md");
const TASK_LIST: &str = include_str!("../../templates/task_list.md");

/// Settings of the debug phase.
pub struct DebugSettings {
    /// Debugger model; None = deterministic reports only.
    pub model: Option<ModelClient>,
    /// Tasks analysed at once.
    pub concurrency: usize,
    /// Per-task time limit of the LLM debugger.
    pub timeout: Duration,
    /// Turn limit of the LLM debugger.
    pub max_turns: u32,
    /// Whether the tests' output may be shown.
    pub show_verifier_output: bool,
}

/// What the debug phase did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct DebugReport {
    /// Tasks with a report.
    pub tasks: usize,
    /// Tasks the LLM debugger analysed.
    pub llm_reports: usize,
    /// Tasks whose LLM analysis failed (deterministic report only).
    pub llm_failures: Vec<String>,
    /// Debugger tokens.
    pub usage: ahe_model::Usage,
    /// Debugger cost.
    pub cost_usd: f64,
    /// The deterministic per-task list (`overview.md` until the overview step rewrites it).
    #[serde(skip)]
    pub list: String,
}

/// Facts of one trial for the pre-analysis.
struct TrialFacts {
    attempt: u32,
    status: String,
    reward: Option<f64>,
    turns: usize,
    end: String,
    last_commands: Vec<(String, Option<i32>)>,
    errors: BTreeMap<String, u32>,
}

fn command_of(args: &Value, name: &str) -> String {
    match args.get("command").and_then(Value::as_str) {
        Some(c) => c.to_string(),
        None => format!("{name}({})", args),
    }
}

fn facts(t: &CleanTrace) -> TrialFacts {
    let calls: Vec<(String, Option<i32>)> = t
        .turns
        .iter()
        .filter(|x| x.agent == "main")
        .flat_map(|x| {
            x.tool_calls
                .iter()
                .map(|c| (command_of(&c.args, &c.name), c.exit_code))
        })
        .collect();
    let mut errors = BTreeMap::new();
    for e in &t.errors {
        *errors.entry(e.kind.clone()).or_insert(0) += 1;
    }
    for c in t.turns.iter().flat_map(|x| &x.tool_calls) {
        if !c.ok {
            *errors.entry(format!("tool_error:{}", c.name)).or_insert(0) += 1;
        }
    }
    TrialFacts {
        attempt: t.attempt,
        status: t.status.clone(),
        reward: t.reward,
        turns: t.turns.iter().filter(|x| x.agent == "main").count(),
        end: t.agent_end.clone().unwrap_or_else(|| "-".into()),
        last_commands: calls[calls.len().saturating_sub(5)..].to_vec(),
        errors,
    }
}

/// Where a passing and a failing trial first differ (by the commands they ran).
fn divergence(traces: &[CleanTrace]) -> Option<String> {
    let pass = traces.iter().find(|t| t.status == "pass")?;
    let fail = traces
        .iter()
        .find(|t| t.status != "pass" && t.status != "infra_error")?;
    let cmds = |t: &CleanTrace| -> Vec<String> {
        t.turns
            .iter()
            .filter(|x| x.agent == "main")
            .flat_map(|x| x.tool_calls.iter().map(|c| command_of(&c.args, &c.name)))
            .collect()
    };
    let (a, b) = (cmds(pass), cmds(fail));
    let i = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let show = |v: &[String]| {
        v.get(i)
            .map(|c| format!("`{}`", clip(c, 120)))
            .unwrap_or("(stopped)".into())
    };
    Some(format!(
        "Trial {} (pass) and trial {} ({}) run the same first {i} command(s), then diverge: {} vs {}.",
        pass.attempt,
        fail.attempt,
        fail.status,
        show(&a),
        show(&b)
    ))
}

/// The deterministic part of a task report (Markdown, `templates/pre_analysis.md`).
pub fn pre_analysis(task: &str, traces: &[CleanTrace]) -> String {
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let fs: Vec<TrialFacts> = traces.iter().map(facts).collect();
    let timeout = fs.iter().any(|f| f.end == "timeout");
    let trials: Vec<minijinja::Value> = fs
        .into_iter()
        .map(|f| {
            let errs: Vec<String> = f.errors.iter().map(|(k, v)| format!("{k}×{v}")).collect();
            let last: Vec<minijinja::Value> = (f.last_commands.iter())
                .map(|(c, code)| {
                    context! { command => clip(c, 160), code => dash(code.map(|c| c.to_string())) }
                })
                .collect();
            context! {
                attempt => f.attempt, status => f.status, turns => f.turns, end => f.end,
                reward => dash(f.reward.map(|r| r.to_string())),
                errors => dash((!errs.is_empty()).then(|| errs.join(", "))), last,
            }
        })
        .collect();
    let suspect: Vec<minijinja::Value> = (traces.iter())
        .filter(|t| !t.suspect.is_empty())
        .map(|t| context! { attempt => t.attempt, reasons => t.suspect })
        .collect();
    let divergence = divergence(traces);
    render(
        PRE_ANALYSIS,
        context! { task, trials, suspect, timeout, divergence },
    )
}

#[cfg(test)]
mod md_tests;
mod tools;
use tools::{ListTrials, ReadTrace, ReadVerifier, Search, TaskTraces};

fn render(tpl: &str, ctx: minijinja::Value) -> String {
    ahe_harness::text::render(tpl, ctx)
}

/// Analyses one task; returns (markdown report, one-line cause, LLM outcome).
async fn analyze_task(
    task: &str,
    iteration: u32,
    task_dir: &Path,
    status: TaskStatus,
    settings: &DebugSettings,
    trace_path: &Path,
) -> (
    String,
    String,
    Option<crate::debug::host_agent::HostOutcome>,
) {
    let mut dirs =
        ahe_rundir::clean::trial_dirs(task_dir.parent().unwrap_or(task_dir)).unwrap_or_default();
    dirs.retain(|d| d.parent() == Some(task_dir));
    let traces: Vec<CleanTrace> = dirs.iter().filter_map(|d| read_clean(d).ok()).collect();
    let pre = pre_analysis(task, &traces);
    let needs_llm = status == TaskStatus::Fail && !traces.is_empty();
    let Some(model) = settings.model.as_ref().filter(|_| needs_llm) else {
        let line = match status {
            TaskStatus::Pass => "all trials pass".to_string(),
            TaskStatus::Infra => "no trial could run (infrastructure)".to_string(),
            TaskStatus::Fail => "failed (no LLM analysis)".to_string(),
        };
        return (format!("# `{task}`\n\n{pre}"), line, None);
    };
    let instruction = traces.first().map(|t| t.user.clone()).unwrap_or_default();
    let system = render(
        SYSTEM,
        context! { task, k => traces.len(), show_verifier_output => settings.show_verifier_output },
    );
    let user = render(
        USER,
        context! { task, iteration, instruction, pre_analysis => pre },
    );
    let shared = Arc::new(TaskTraces {
        traces,
        trial_dirs: dirs,
        show_verifier: settings.show_verifier_output,
    });
    let mut tools: Vec<Box<dyn HostTool>> = vec![
        Box::new(ListTrials(shared.clone())),
        Box::new(ReadTrace(shared.clone())),
        Box::new(Search(shared.clone())),
    ];
    if settings.show_verifier_output {
        tools.push(Box::new(ReadVerifier(shared)));
    }
    let (trace, log) = ahe_bench::layout::trace_files(trace_path.parent().unwrap_or(trace_path));
    let tw = TraceWriter::open(&trace, &log).unwrap_or_else(|_| TraceWriter::sink());
    let limits = HostLimits {
        max_turns: settings.max_turns,
        timeout: settings.timeout,
        last_turn_note: Some(LAST_TURN),
    };
    let out = run_host_agent(model, Role::Debugger, &system, &user, &tools, limits, &tw).await;
    let llm = out
        .final_text
        .clone()
        .filter(|t| !t.trim().is_empty() && out.error.is_none());
    let report = match &llm {
        Some(t) => format!("# `{task}`\n\n{pre}\n## Debugger analysis\n\n{t}\n"),
        None => format!(
            "# `{task}`\n\n{pre}\n_The LLM debugger produced no report ({}); the pre-analysis stands alone._\n",
            out.error.as_deref().unwrap_or("no answer")
        ),
    };
    let line = llm
        .as_deref()
        .and_then(|t| {
            t.lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
        })
        .map(|l| clip(l, 200))
        .unwrap_or_else(|| "failed (see pre-analysis)".into());
    (report, line, Some(out))
}

/// What the debugger made of one task (its report is on disk).
#[derive(Debug, Clone)]
pub struct TaskDebug {
    /// The task.
    pub task: String,
    /// Its status in the iteration.
    pub status: TaskStatus,
    /// One mark per trial (✓ pass, ✗ not, ⚑ suspect).
    pub marks: String,
    /// The one-line cause for the overview.
    pub line: String,
    /// The LLM debugger's run; None when the report was deterministic or already on disk.
    pub out: Option<crate::debug::host_agent::HostOutcome>,
    /// Every debugger call on this task so far — also those of an attempt killed before a
    /// resume, and of a report kept from before it — as (tokens, dollars).
    pub spent: (ahe_model::Usage, f64),
}

/// Analyses one task of an iteration from its cleaned trials and writes
/// `analysis/detail/<task>.md` (atomically: it is the resume record); a task whose report
/// exists is not analysed again.
pub async fn debug_task(
    iter_dir: &IterationDir,
    task: &str,
    ts: &ahe_bench::scores::TaskScore,
    settings: &DebugSettings,
) -> TaskDebug {
    let existing = iter_dir.detail_path(task);
    let marks: String = ts
        .trials
        .iter()
        .map(
            |t| match (t.suspect, t.status == ahe_bench::TrialStatus::Pass) {
                (true, _) => "⚑",
                (false, true) => "✓",
                (false, false) => "✗",
            },
        )
        .collect();
    let trace = iter_dir.debugger_trace(task);
    // The trace is appended across attempts: what it holds before this one was spent.
    let before = crate::inputs::spend::trace_spend(&trace);
    let done = |line: String, out: Option<crate::debug::host_agent::HostOutcome>| {
        let mut spent = before;
        if let Some(o) = &out {
            spent.0.add(&o.usage);
            spent.1 += o.cost_usd;
        }
        TaskDebug {
            task: task.to_string(),
            status: ts.status,
            marks: marks.clone(),
            line,
            out,
            spent,
        }
    };
    if let Ok(text) = std::fs::read_to_string(&existing) {
        // Resume: a finished report is kept.
        let cause = text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("<!-- cause: "));
        return done(
            cause.unwrap_or_default().trim_end_matches(" -->").into(),
            None,
        );
    }
    let dir = iter_dir.trials().join(task);
    let t = iter_dir.number();
    let (md, line, out) = analyze_task(task, t, &dir, ts.status, settings, &trace).await;
    let _ = std::fs::create_dir_all(iter_dir.details());
    let _ = ahe_bench::layout::write_atomic(
        &existing,
        format!("{md}\n<!-- cause: {line} -->\n").as_bytes(),
    );
    done(line, out)
}

/// Runs the debug phase over the visible tasks of an iteration; writes the reports and
/// `overview.md`. Tasks in `ahead` were analysed already (during the rollout) and are
/// only counted.
pub async fn debug(
    iter_dir: &IterationDir,
    visible: &[String],
    scores: &Scores,
    settings: &DebugSettings,
    ahead: Vec<TaskDebug>,
) -> anyhow::Result<DebugReport> {
    let iteration = iter_dir.number();
    std::fs::create_dir_all(iter_dir.details())?;
    let sem = Arc::new(tokio::sync::Semaphore::new(settings.concurrency.max(1)));
    let mut report = DebugReport::default();
    let futs = visible.iter().filter_map(|task| {
        let ts = scores.tasks.get(task)?;
        if ahead.iter().any(|d| &d.task == task) {
            return None;
        }
        let sem = sem.clone();
        Some(async move {
            let _p = sem.acquire().await.ok();
            debug_task(iter_dir, task, ts, settings).await
        })
    });
    let mut all = futures::future::join_all(futs).await;
    all.extend(ahead.into_iter().filter(|d| visible.contains(&d.task)));
    let mut lines: Vec<(String, TaskStatus, String, String)> = Vec::new();
    for d in all {
        report.tasks += 1;
        report.usage.add(&d.spent.0);
        report.cost_usd += d.spent.1;
        if let Some(o) = &d.out {
            if o.final_text.is_some() && o.error.is_none() {
                report.llm_reports += 1;
            } else {
                report.llm_failures.push(d.task.clone());
            }
        }
        lines.push((d.task, d.status, d.marks, d.line));
    }
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    report.list = overview(iteration, &lines);
    std::fs::write(iter_dir.overview_path(), &report.list)?;
    Ok(report)
}

/// The deterministic per-task list (`templates/task_list.md`): failing, infrastructure
/// errors and passing tasks, each row `(task, status, result, one-line cause)`.
fn overview(iteration: u32, lines: &[(String, TaskStatus, String, String)]) -> String {
    let rows = |st: TaskStatus| -> Vec<minijinja::Value> {
        (lines.iter().filter(|l| l.1 == st))
            .map(|(task, _, result, line)| context! { task, result, line })
            .collect()
    };
    let sections = [
        ("Failing", TaskStatus::Fail),
        (
            "Infrastructure errors (not the harness's fault)",
            TaskStatus::Infra,
        ),
        ("Passing", TaskStatus::Pass),
    ]
    .map(|(title, st)| context! { title, rows => rows(st) });
    let suspect = lines.iter().any(|l| l.2.contains('⚑'));
    render(TASK_LIST, context! { iteration, sections, suspect })
}
