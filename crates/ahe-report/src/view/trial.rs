//! One trial's view: its result, timings, tokens, errors and turns (each tool call with its
//! arguments on one line and its observation), computed once from the cleaned trace and
//! rendered by the trial page (`trial.html`) and by `ahe show --trial` (text).

use ahe_rundir::clean::{CleanToolCall, CleanTrace, CleanTurn};
use serde::Serialize;

use crate::format::{secs, tokens, usd};

/// Characters of a tool call's one-line arguments in the page's call summary.
pub const PAGE_SUMMARY_CHARS: usize = 120;

/// Characters of a tool call's one-line arguments in `ahe show --trial`.
pub const TEXT_SUMMARY_CHARS: usize = 140;

/// Characters of one line of an excerpt (task, answer, observation) in `ahe show --trial`.
pub const EXCERPT_LINE_CHARS: usize = 160;

/// One trial as its page and `ahe show --trial` show it.
#[derive(Debug, Clone, Serialize)]
pub struct TrialView {
    /// Task name.
    pub task: String,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Unique trial id (`result.json`).
    pub trial_id: String,
    /// `pass`, `fail`, `agent_timeout`, `infra_error`, `verifier_error`.
    pub status: String,
    /// Verifier reward, if the verifier gave one (each renderer writes it its own way).
    pub reward: Option<f64>,
    /// How the agent run ended (`finished`, `timeout`...), if it ran.
    pub agent_end: Option<String>,
    /// `complete`, `incomplete` or `missing`: the raw trace's state.
    pub trace_state: String,
    /// Tokens of the whole trial, `12.3k in / 456 out`.
    pub tokens: String,
    /// Dollars of the whole trial.
    pub cost: String,
    /// Wall time of the whole trial.
    pub duration: String,
    /// Sub-agents that ran, one entry per run.
    pub subagents: Vec<String>,
    /// Signs the agent touched the verifier's ground: (turn, if known; reason).
    pub suspect: Vec<(Option<u32>, String)>,
    /// Every error of the trial: (turn, 0 = outside the loop; agent; kind; message).
    pub errors: Vec<(u32, String, String, String)>,
    /// The main agent's system prompt.
    pub system_prompt: String,
    /// The task message.
    pub user: String,
    /// The assistant turns, in order.
    pub turns: Vec<TurnView>,
}

/// One assistant turn of a trial.
#[derive(Debug, Clone, Serialize)]
pub struct TurnView {
    /// Turn number within its agent's run.
    pub turn: u32,
    /// `main` or the sub-agent's name.
    pub agent: String,
    /// The answer's free text, when not empty.
    pub content: Option<String>,
    /// Its tool calls with their results.
    pub calls: Vec<CallView>,
    /// Middleware decisions: (hook, middleware, decision as JSON).
    pub middleware: Vec<(String, String, String)>,
    /// Runtime messages the model got after the turn.
    pub feedback: Vec<String>,
    /// Errors of this turn (turn > 0): (kind, message).
    pub errors: Vec<(String, String)>,
    /// Tokens of the model call, `1.5k in / 20 out`.
    pub tokens: String,
    /// Latency of the model call, `999 ms`.
    pub duration: String,
    /// Whether the turn had an error or a failed call (the page marks it).
    pub has_error: bool,
}

/// One tool call and its result.
#[derive(Debug, Clone, Serialize)]
pub struct CallView {
    /// Tool name.
    pub name: String,
    /// The arguments on one line, raw: the only argument's value, else the arguments' JSON.
    pub one_line: String,
    /// The page's call summary: `one_line` clipped to [`PAGE_SUMMARY_CHARS`], `…` when cut.
    pub summary: String,
    /// The arguments as pretty JSON.
    pub args: String,
    /// The observation given to the model, if one was recorded.
    pub output: Option<String>,
    /// The tool reported success and no error was recorded.
    pub ok: bool,
    /// The tool's own success flag (an error may be recorded beside a `true`).
    pub reported_ok: bool,
    /// Exit code, for commands.
    pub exit_code: Option<i32>,
    /// Whether the observation was cut by the harness.
    pub truncated: bool,
    /// Error text.
    pub error: Option<String>,
    /// Run time, `12 ms`.
    pub duration: String,
}

/// `12.3k in / 456 out`.
fn in_out(input: u64, output: u64) -> String {
    format!("{} in / {} out", tokens(input), tokens(output))
}

/// The first `n` characters of `s` with each newline shown as ` ⏎ ` (no mark when cut: the
/// caller decides, see [`CallView::summary`]).
pub fn one_line_clip(s: &str, n: usize) -> String {
    s.replace('\n', " ⏎ ").chars().take(n).collect()
}

/// At most `max_lines` lines of `text`, each cut to `width` characters with `…` when cut,
/// and how many lines were left out.
pub fn excerpt_lines(text: &str, max_lines: usize, width: usize) -> (Vec<String>, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let kept = lines
        .iter()
        .take(max_lines)
        .map(|l| {
            let mut cut: String = l.chars().take(width).collect();
            if l.chars().count() > width {
                cut.push('…');
            }
            cut
        })
        .collect();
    (kept, lines.len().saturating_sub(max_lines))
}

/// A tool call's arguments on one line: the only argument's value, else their JSON.
fn args_one_line(args: &serde_json::Value) -> String {
    match args {
        serde_json::Value::Object(m) if m.len() == 1 => m
            .values()
            .next()
            .map(|v| {
                v.as_str()
                    .map(String::from)
                    .unwrap_or_else(|| v.to_string())
            })
            .unwrap_or_default(),
        v => v.to_string(),
    }
}

fn call_view(c: &CleanToolCall) -> CallView {
    let one_line = args_one_line(&c.args);
    let mut summary = one_line_clip(&one_line, PAGE_SUMMARY_CHARS);
    if one_line.chars().count() > PAGE_SUMMARY_CHARS {
        summary.push('…');
    }
    CallView {
        name: c.name.clone(),
        summary,
        one_line,
        args: serde_json::to_string_pretty(&c.args).unwrap_or_default(),
        output: c.output.clone(),
        ok: c.ok && c.error.is_none(),
        reported_ok: c.ok,
        exit_code: c.exit_code,
        truncated: c.truncated,
        error: c.error.clone(),
        duration: format!("{} ms", c.duration_ms),
    }
}

fn turn_view(t: &CleanTrace, turn: &CleanTurn) -> TurnView {
    let calls: Vec<CallView> = turn.tool_calls.iter().map(call_view).collect();
    let errors: Vec<(String, String)> = t
        .errors
        .iter()
        .filter(|e| e.turn == turn.turn && e.agent == turn.agent && e.turn > 0)
        .map(|e| (e.kind.clone(), e.message.clone()))
        .collect();
    TurnView {
        turn: turn.turn,
        agent: turn.agent.clone(),
        content: turn.content.clone().filter(|c| !c.is_empty()),
        has_error: !errors.is_empty() || calls.iter().any(|c| !c.ok),
        calls,
        middleware: turn
            .middleware
            .iter()
            .map(|m| (m.hook.clone(), m.name.clone(), m.decision.to_string()))
            .collect(),
        feedback: turn.feedback.clone(),
        errors,
        tokens: in_out(turn.usage.input_tokens, turn.usage.output_tokens),
        duration: format!("{} ms", turn.duration_ms),
    }
}

/// Builds one trial's view from its cleaned trace.
pub fn trial_view(t: &CleanTrace) -> TrialView {
    TrialView {
        task: t.task.clone(),
        attempt: t.attempt,
        trial_id: t.trial_id.clone(),
        status: t.status.clone(),
        reward: t.reward,
        agent_end: t.agent_end.clone(),
        trace_state: serde_json::to_value(t.trace)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        tokens: in_out(t.usage.input_tokens, t.usage.output_tokens),
        cost: usd(t.cost_usd),
        duration: secs(t.duration_ms as f64 / 1000.0),
        subagents: t.subagent_runs.clone(),
        suspect: t
            .suspect
            .iter()
            .map(|s| (s.turn, s.reason.clone()))
            .collect(),
        errors: t
            .errors
            .iter()
            .map(|e| (e.turn, e.agent.clone(), e.kind.clone(), e.message.clone()))
            .collect(),
        system_prompt: t.system_prompt.clone(),
        user: t.user.clone(),
        turns: t.turns.iter().map(|turn| turn_view(t, turn)).collect(),
    }
}
