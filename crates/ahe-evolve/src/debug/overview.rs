//! The benchmark overview (`analysis/overview.md`): after the per-task reports, one model
//! call with the debugger's model groups the failing tasks by shared failure mechanism —
//! map–reduce when the reports do not fit `[evolve] overview_context_chars` — into patterns
//! with their tasks, failing-trial count, component, evidence and trend against the
//! previous iteration's `analysis/patterns.json`; then the deterministic per-task list. A
//! failed or budget-refused synthesis leaves the list alone, and says so in the file.

pub(crate) mod render;

use std::collections::BTreeSet;

use ahe_bench::{Scores, TaskStatus, TrialStatus};
use ahe_harness::trace::Event;
use ahe_harness::TraceWriter;
use ahe_model::{ChatRequest, Message, ModelClient, Role, ToolChoice, Usage};
use ahe_rundir::run_dir::analysis::{Pattern, Patterns, Trend};
use minijinja::context;
use serde::Deserialize;

use ahe_rundir::run_dir::IterationDir;

pub use render::{overview_md, trend_of};

const SYSTEM: &str = include_str!("../../templates/overview_system.md");
const USER: &str = include_str!("../../templates/overview_user.md");
const REDUCE_SYSTEM: &str = include_str!("../../templates/overview_reduce_system.md");
const REDUCE_USER: &str = include_str!("../../templates/overview_reduce_user.md");

/// The component names a pattern may point at (the manifest's, snake_case).
pub const COMPONENTS: &[&str] = &[
    "system_prompt",
    "tool_description",
    "tool_impl",
    "middleware",
    "skill",
    "subagent",
    "memory",
];

/// What the overview step did and cost.
#[derive(Debug, Clone, Default)]
pub struct OverviewOutcome {
    /// The patterns as written to `analysis/patterns.json`.
    pub patterns: Patterns,
    /// Model calls made (map parts plus the reduce).
    pub calls: u32,
    /// Tokens of those calls.
    pub usage: Usage,
    /// Their cost.
    pub cost_usd: f64,
}

/// One pattern as the model writes it (every field optional: checked afterwards).
#[derive(Debug, Deserialize)]
struct RawPattern {
    #[serde(default)]
    name: String,
    #[serde(default)]
    mechanism: String,
    #[serde(default)]
    tasks: Vec<String>,
    #[serde(default)]
    component: String,
    #[serde(default)]
    evidence: String,
}

#[derive(Debug, Deserialize)]
struct RawOverview {
    patterns: Vec<RawPattern>,
}

/// One failing task's report as the synthesis reads it.
#[derive(Debug, Clone, serde::Serialize)]
struct Report {
    task: String,
    marks: String,
    text: String,
}

/// The calls' accounting, summed, and their trace (`analysis/overview/trace.jsonl`).
struct Spend {
    calls: u32,
    usage: Usage,
    cost: f64,
    trace: TraceWriter,
}

/// The JSON object in a model answer (the outermost `{…}`), parsed.
fn parse(answer: &str) -> Result<RawOverview, String> {
    let (Some(a), Some(b)) = (answer.find('{'), answer.rfind('}')) else {
        return Err("the answer holds no JSON object".into());
    };
    if b < a {
        return Err("the answer holds no JSON object".into());
    }
    serde_json::from_str(&answer[a..=b]).map_err(|e| format!("the answer's JSON: {e}"))
}

/// One call without tools; the text of the answer.
async fn ask(
    model: &ModelClient,
    system: &str,
    user: &str,
    spend: &mut Spend,
) -> Result<String, String> {
    let req = ChatRequest {
        role: Role::Debugger,
        messages: vec![Message::system(system), Message::user(user)],
        tools: Vec::new(),
        protocol: Default::default(),
        temperature: None,
        max_tokens: None,
        tool_choice: ToolChoice::None,
    };
    spend.calls += 1;
    let agent = "overview";
    for (role, content) in [("system", system), ("user", user)] {
        spend.trace.emit(&Event::Message {
            agent,
            role,
            content,
        });
    }
    let started = std::time::Instant::now();
    let answer = model.chat(&req).await;
    match &answer {
        Ok(r) => spend.trace.emit(&Event::Assistant {
            agent,
            turn: spend.calls,
            content: r.content.as_deref(),
            tool_calls: &r.tool_calls,
            usage: r.usage,
            cost_usd: r.cost_usd,
            duration_ms: started.elapsed().as_millis() as u64,
        }),
        Err(e) => spend.trace.emit(&Event::Error {
            agent,
            turn: spend.calls,
            kind: e.class(),
            message: &e.to_string(),
        }),
    }
    match answer {
        Ok(r) => {
            spend.usage.add(&r.usage);
            spend.cost += r.cost_usd;
            r.content
                .filter(|c| !c.trim().is_empty())
                .ok_or_else(|| "the answer was empty".into())
        }
        Err(ahe_model::ModelError::Budget(e)) => Err(format!("refused by the budget ({e})")),
        Err(e) => Err(format!("the model call failed ({e})")),
    }
}

/// The failing visible tasks' reports (the resume marker line dropped).
fn reports(it: &IterationDir, visible: &[String], scores: &Scores) -> Vec<Report> {
    let mut out = Vec::new();
    for task in visible {
        let Some(ts) = scores
            .tasks
            .get(task)
            .filter(|ts| ts.status == TaskStatus::Fail)
        else {
            continue;
        };
        let text = std::fs::read_to_string(it.detail_path(task)).unwrap_or_default();
        let text: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("<!-- cause: "))
            .collect();
        out.push(Report {
            task: task.clone(),
            marks: render::marks(ts),
            text: text.join("\n"),
        });
    }
    out
}

/// Packs the reports into parts of at most `budget` characters each (a report longer
/// than that is clipped to it; 0 = one part).
fn pack(reports: Vec<Report>, budget: usize) -> Vec<Vec<Report>> {
    let budget = match budget {
        0 => usize::MAX / 2,
        b => b.max(1000),
    };
    let mut parts: Vec<Vec<Report>> = Vec::new();
    let mut size = 0;
    for mut r in reports {
        if r.text.len() > budget {
            let cut: String = r.text.chars().take(budget).collect();
            r.text = format!("{cut}\n… (report clipped)");
        }
        let n = r.text.len() + r.task.len() + 64;
        if parts.is_empty() || size + n > budget {
            parts.push(Vec::new());
            size = 0;
        }
        size += n;
        parts.last_mut().expect("a part").push(r);
    }
    parts
}

/// Failing trials of `task` (suspect and infra-error trials not counted).
fn failing_trials(scores: &Scores, task: &str) -> u32 {
    scores.tasks.get(task).map_or(0, |ts| {
        ts.trials
            .iter()
            .filter(|t| {
                !t.suspect && !matches!(t.status, TrialStatus::Pass | TrialStatus::InfraError)
            })
            .count() as u32
    })
}

/// Checks the model's patterns: only failing tasks, no empty pattern, a known component;
/// counts the failing trials.
fn checked(raw: Vec<RawPattern>, failing: &BTreeSet<String>, scores: &Scores) -> Vec<Pattern> {
    let mut out: Vec<Pattern> = Vec::new();
    for (i, p) in raw.into_iter().enumerate() {
        let mut tasks: Vec<String> = p
            .tasks
            .into_iter()
            .filter(|t| failing.contains(t))
            .collect();
        tasks.sort();
        tasks.dedup();
        if tasks.is_empty() {
            continue;
        }
        let component = p
            .component
            .trim()
            .to_ascii_lowercase()
            .replace([' ', '-'], "_");
        let component = if COMPONENTS.contains(&component.as_str()) {
            component
        } else {
            "unclear".into()
        };
        let name = match p.name.trim() {
            "" => format!("pattern {}", i + 1),
            n => n.to_string(),
        };
        out.push(Pattern {
            trials: tasks.iter().map(|t| failing_trials(scores, t)).sum(),
            name,
            mechanism: p.mechanism.trim().to_string(),
            tasks,
            component,
            evidence: p.evidence.trim().to_string(),
            trend: Trend::New,
        });
    }
    out.sort_by(|a, b| {
        b.tasks
            .len()
            .cmp(&a.tasks.len())
            .then(b.trials.cmp(&a.trials))
    });
    out
}

/// Patterns with the same name (ignoring case) merged: the deterministic reduce.
fn merge_by_name(parts: Vec<RawPattern>) -> Vec<RawPattern> {
    let mut out: Vec<RawPattern> = Vec::new();
    for p in parts {
        match out
            .iter_mut()
            .find(|q| q.name.trim().eq_ignore_ascii_case(p.name.trim()))
        {
            Some(q) => q.tasks.extend(p.tasks),
            None => out.push(p),
        }
    }
    out
}

/// The synthesis: map over the parts, then reduce; the raw patterns and a note on how the
/// reduce went (or why it all failed).
async fn synthesize(
    model: &ModelClient,
    iteration: u32,
    parts: Vec<Vec<Report>>,
    spend: &mut Spend,
) -> Result<(Vec<RawPattern>, Option<String>), String> {
    let system = ahe_harness::text::render(SYSTEM, context! { components => COMPONENTS });
    let n = parts.len();
    let mut partial: Vec<(String, Vec<RawPattern>)> = Vec::new();
    for (i, reports) in parts.into_iter().enumerate() {
        let user = ahe_harness::text::render(
            USER,
            context! { iteration, part => i + 1, parts => n, reports },
        );
        let answer = ask(model, &system, &user, spend).await;
        let raw = answer.and_then(|a| parse(&a).map(|r| (a, r)));
        match raw {
            Ok((a, r)) => partial.push((a, r.patterns)),
            Err(e) if n > 1 => return Err(format!("part {} of {n}: {e}", i + 1)),
            Err(e) => return Err(e),
        }
    }
    if n == 1 {
        return Ok((partial.pop().map(|p| p.1).unwrap_or_default(), None));
    }
    let rsys = ahe_harness::text::render(REDUCE_SYSTEM, context! { components => COMPONENTS });
    let texts: Vec<&str> = partial.iter().map(|p| p.0.as_str()).collect();
    let ruser = ahe_harness::text::render(
        REDUCE_USER,
        context! { iteration, parts => n, partials => texts },
    );
    match ask(model, &rsys, &ruser, spend)
        .await
        .and_then(|a| parse(&a))
    {
        Ok(r) => Ok((
            r.patterns,
            Some(format!("merged from {n} parts by the model")),
        )),
        Err(e) => {
            let all = partial.into_iter().flat_map(|p| p.1).collect();
            let note = format!("{n} parts; the merge call failed ({e}), patterns merged by name");
            Ok((merge_by_name(all), Some(note)))
        }
    }
}

/// Writes `analysis/overview.md` (patterns, then `list`, the deterministic per-task list)
/// and `analysis/patterns.json`. `model` None = no synthesis (the list alone, said so);
/// `context_chars`: characters of reports one call reads (0 = all in one call).
pub async fn write_overview(
    it: &IterationDir,
    prev: Option<&Patterns>,
    visible: &[String],
    scores: &Scores,
    model: Option<&ModelClient>,
    context_chars: usize,
    list: &str,
) -> anyhow::Result<OverviewOutcome> {
    let iteration = it.number();
    let reports = reports(it, visible, scores);
    let failing: BTreeSet<String> = reports.iter().map(|r| r.task.clone()).collect();
    let mut spend = Spend {
        calls: 0,
        usage: Usage::default(),
        cost: 0.0,
        trace: TraceWriter::sink(),
    };
    if model.is_some() && !reports.is_empty() {
        let (trace, log) = ahe_bench::layout::trace_files(&it.overview_trace_dir());
        spend.trace = TraceWriter::open(&trace, &log)?;
    }
    let mut patterns = Patterns {
        iteration,
        ..Patterns::default()
    };
    let mut how = None;
    match model {
        _ if reports.is_empty() => {}
        None => patterns.fallback = Some("no debugger model".into()),
        Some(m) => match synthesize(m, iteration, pack(reports, context_chars), &mut spend).await {
            Ok((raw, note)) => {
                patterns.patterns = checked(raw, &failing, scores);
                how = note;
            }
            Err(e) => patterns.fallback = Some(e),
        },
    }
    if patterns.fallback.is_none() {
        patterns.gone = render::apply_trends(&mut patterns.patterns, prev);
    }
    let md = overview_md(
        iteration,
        &patterns,
        &failing,
        scores,
        how.as_deref(),
        visible,
        list,
    );
    std::fs::create_dir_all(it.analysis())?;
    it.write_patterns(&patterns)?;
    ahe_bench::layout::write_atomic(&it.overview_path(), md.as_bytes())?;
    Ok(OverviewOutcome {
        patterns,
        calls: spend.calls,
        usage: spend.usage,
        cost_usd: spend.cost,
    })
}
