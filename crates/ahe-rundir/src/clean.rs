//! The Clean phase (docs/loop.md, docs/run-directory.md): `trace.jsonl` + `result.json` → `trace.clean.json`.
//!
//! A clean trace is the canonical, turn-ordered view of one trial that the debugger reads:
//! the system prompt and task once, then every assistant turn (main agent and sub-agents, in
//! the order they happened) with its tool calls and their outputs, the middleware decisions
//! and runtime feedback of that turn. The raw trace is kept beside it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use ahe_bench::{TrialDir, TrialResult};
use ahe_model::Usage;
use anyhow::Context;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the `trace.clean.json` format.
pub const CLEAN_SCHEMA_VERSION: u32 = 1;

/// How much of the raw trace was there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceState {
    /// The main agent's `run_end` was recorded and every line parsed.
    Complete,
    /// The trace stops early (cut last line, or no `run_end` of the main agent).
    Incomplete,
    /// No `trace.jsonl` (the trial failed before the agent ran).
    Missing,
}

/// One trial, cleaned (`trace.clean.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CleanTrace {
    /// [`CLEAN_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Unique trial id from `result.json`.
    pub trial_id: String,
    /// Task name.
    pub task: String,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Trial status (`pass`, `fail`, `agent_timeout`, `infra_error`, `verifier_error`).
    pub status: String,
    /// Verifier reward.
    pub reward: Option<f64>,
    /// How the agent run ended (`finished`, `timeout`, `turn_limit`, ...), if it ran.
    pub agent_end: Option<String>,
    /// Signs that the agent touched the verifier's ground (empty: none), with their turns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspect: Vec<ahe_bench::SuspectReason>,
    /// Whether the raw trace was complete.
    pub trace: TraceState,
    /// Tokens of the whole trial (sub-agents included).
    pub usage: Usage,
    /// Cost of the trial in USD.
    pub cost_usd: f64,
    /// Wall time of the whole trial.
    pub duration_ms: u64,
    /// Sub-agents that ran, one entry per run, in order.
    pub subagent_runs: Vec<String>,
    /// Errors: trace `error` events, unreadable lines, and the trial's own error (turn 0).
    pub errors: Vec<CleanError>,
    /// The main agent's system prompt.
    pub system_prompt: String,
    /// The task message given to the main agent.
    pub user: String,
    /// Assistant turns in the order they happened.
    pub turns: Vec<CleanTurn>,
}

/// One assistant turn with everything that happened in it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CleanTurn {
    /// Turn number within its agent's run (1-based).
    pub turn: u32,
    /// `main` or the sub-agent's name.
    pub agent: String,
    /// Free text of the answer.
    pub content: Option<String>,
    /// Tool calls of the answer, in order, with their results.
    pub tool_calls: Vec<CleanToolCall>,
    /// Middleware decisions other than `continue` taken in this turn.
    pub middleware: Vec<CleanMiddleware>,
    /// Runtime messages the model got after this turn (e.g. a rejected finish).
    pub feedback: Vec<String>,
    /// Tokens of the model call.
    pub usage: Usage,
    /// Latency of the model call.
    pub duration_ms: u64,
}

/// A tool call and its result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CleanToolCall {
    /// Call id.
    pub id: String,
    /// Tool name as the model wrote it.
    pub name: String,
    /// Arguments (after middleware, when the call ran).
    pub args: Value,
    /// Observation given to the model; `None` when no result was recorded (finish, blocked
    /// answer, crash).
    pub output: Option<String>,
    /// Whether the tool reported success.
    pub ok: bool,
    /// Exit code, for commands.
    pub exit_code: Option<i32>,
    /// Whether the output was cut.
    pub truncated: bool,
    /// Error text.
    pub error: Option<String>,
    /// Run time.
    pub duration_ms: u64,
}

/// A middleware decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CleanMiddleware {
    /// Hook point.
    pub hook: String,
    /// Middleware name.
    pub name: String,
    /// The decision as traced.
    pub decision: Value,
}

/// An error of the trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CleanError {
    /// Turn it happened in (0 = outside the agent loop).
    pub turn: u32,
    /// Agent it happened in.
    pub agent: String,
    /// Error class (`format`, `transient`, `trace`, or the trial status for the trial error).
    pub kind: String,
    /// Text.
    pub message: String,
}

/// Outcome of [`clean_all`].
#[derive(Debug, Clone, Default)]
pub struct CleanSummary {
    /// Trials cleaned.
    pub trials: usize,
    /// Trial directories that could not be cleaned, with the reason.
    pub failed: Vec<(PathBuf, String)>,
    /// Per task, the union of [`exercised_files`] over its cleaned trials.
    pub exercised: BTreeMap<String, BTreeSet<String>>,
}

/// One raw trace line; only the fields the cleaner needs (the rest are skipped).
#[derive(Deserialize)]
struct RawEvent {
    event: String,
    agent: Option<String>,
    role: Option<String>,
    content: Option<String>,
    turn: Option<u32>,
    #[serde(default)]
    tool_calls: Vec<RawCall>,
    usage: Option<Usage>,
    duration_ms: Option<u64>,
    id: Option<String>,
    name: Option<String>,
    args: Option<Value>,
    output: Option<String>,
    ok: Option<bool>,
    exit_code: Option<i32>,
    truncated: Option<bool>,
    error: Option<String>,
    hook: Option<String>,
    decision: Option<Value>,
    kind: Option<String>,
    message: Option<String>,
    end: Option<String>,
}

#[derive(Deserialize)]
struct RawCall {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: Value,
}

/// A tool call the model made whose result is not (yet) known.
fn pending(id: String, name: String, args: Value) -> CleanToolCall {
    CleanToolCall {
        id,
        name,
        args,
        ..Default::default()
    }
}

/// Per-agent bookkeeping while folding events into turns.
#[derive(Default)]
struct AgentState {
    name: String,
    /// Turn number → index in `turns`, for the agent's current run.
    turns: HashMap<u32, usize>,
    /// Whether the run's task message was seen (later user messages are feedback).
    seen_user: bool,
    last_turn: Option<usize>,
}

#[derive(Default)]
struct Builder {
    agents: Vec<AgentState>,
    turns: Vec<CleanTurn>,
    errors: Vec<CleanError>,
    system_prompt: Option<String>,
    user: Option<String>,
    subagent_runs: Vec<String>,
    main_ended: bool,
    main_end: Option<String>,
}

impl Builder {
    fn agent(&mut self, name: &str) -> usize {
        match self.agents.iter().position(|a| a.name == name) {
            Some(i) => i,
            None => {
                self.agents.push(AgentState {
                    name: name.to_string(),
                    ..Default::default()
                });
                self.agents.len() - 1
            }
        }
    }

    fn turn(&mut self, a: usize, turn: u32) -> usize {
        if let Some(&i) = self.agents[a].turns.get(&turn) {
            return i;
        }
        let i = self.turns.len();
        self.turns.push(CleanTurn {
            turn,
            agent: self.agents[a].name.clone(),
            ..Default::default()
        });
        self.agents[a].turns.insert(turn, i);
        self.agents[a].last_turn = Some(i);
        i
    }

    /// A message event: the main agent's system prompt, each agent's first user message,
    /// then runtime feedback (belonging to the agent's latest turn).
    fn message(&mut self, a: usize, is_main: bool, e: RawEvent) {
        let text = e.content.unwrap_or_default();
        match e.role.as_deref() {
            Some("system") if is_main && self.system_prompt.is_none() => {
                self.system_prompt = Some(text)
            }
            Some("system") => {}
            _ if !self.agents[a].seen_user => {
                self.agents[a].seen_user = true;
                if is_main && self.user.is_none() {
                    self.user = Some(text);
                }
            }
            _ => {
                let last = self.agents[a].last_turn.or(self.turns.len().checked_sub(1));
                if let Some(i) = last {
                    self.turns[i].feedback.push(text);
                }
            }
        }
    }

    fn push(&mut self, e: RawEvent) {
        let a = self.agent(e.agent.as_deref().unwrap_or("main"));
        let is_main = self.agents[a].name == "main";
        let turn = e.turn.unwrap_or(0);
        match &*e.event {
            "run_start" => {
                let st = &mut self.agents[a];
                st.turns.clear();
                st.seen_user = false;
                st.last_turn = None;
                if !is_main {
                    self.subagent_runs.push(st.name.clone());
                }
            }
            "message" => self.message(a, is_main, e),
            "assistant" => {
                let i = self.turn(a, turn);
                let t = &mut self.turns[i];
                t.content = e.content;
                t.usage = e.usage.unwrap_or_default();
                t.duration_ms = e.duration_ms.unwrap_or(0);
                let calls = e.tool_calls.into_iter();
                t.tool_calls
                    .extend(calls.map(|c| pending(c.id, c.name, c.arguments)));
            }
            "tool_call" => {
                let i = self.turn(a, turn);
                tool_result(&mut self.turns[i].tool_calls, e);
            }
            "middleware" => {
                let i = self.turn(a, turn);
                self.turns[i].middleware.push(CleanMiddleware {
                    hook: e.hook.unwrap_or_default(),
                    name: e.name.unwrap_or_default(),
                    decision: e.decision.unwrap_or(Value::Null),
                });
            }
            "error" => self.errors.push(CleanError {
                turn,
                agent: self.agents[a].name.clone(),
                kind: e.kind.unwrap_or_default(),
                message: e.message.unwrap_or_default(),
            }),
            "run_end" if is_main => {
                self.main_ended = true;
                self.main_end = e.end;
            }
            _ => {}
        }
    }
}

/// A tool call's result: fills the pending call with its id (or a new one when the
/// assistant event did not announce it).
fn tool_result(calls: &mut Vec<CleanToolCall>, e: RawEvent) {
    let id = e.id.unwrap_or_default();
    let pos = calls.iter().position(|c| c.output.is_none() && c.id == id);
    let c = match pos {
        Some(p) => &mut calls[p],
        None => {
            calls.push(pending(id, e.name.unwrap_or_default(), Value::Null));
            calls.last_mut().expect("just pushed")
        }
    };
    c.args = e.args.unwrap_or(std::mem::take(&mut c.args));
    c.output = Some(e.output.unwrap_or_default());
    c.ok = e.ok.unwrap_or(false);
    c.exit_code = e.exit_code;
    c.truncated = e.truncated.unwrap_or(false);
    c.error = e.error;
    c.duration_ms = e.duration_ms.unwrap_or(0);
}

/// An error outside any turn (turn 0) of the main agent.
fn outside_error(kind: &str, message: String) -> CleanError {
    let (turn, agent, kind) = (0, "main".to_string(), kind.to_string());
    CleanError {
        turn,
        agent,
        kind,
        message,
    }
}

/// Reads `result.json` of a trial directory.
pub fn read_result(trial_dir: &Path) -> anyhow::Result<TrialResult> {
    let p = TrialDir::new(trial_dir).result_path();
    let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", p.display()))
}

/// Cleans one trial directory (`trace.jsonl` + `result.json`); tolerates a cut last line
/// and a missing trace.
pub fn clean_trial(trial_dir: &Path) -> anyhow::Result<CleanTrace> {
    let r = read_result(trial_dir)?;
    let mut b = Builder::default();
    let trace_path = TrialDir::new(trial_dir).trace_path();
    let state = match File::open(&trace_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => TraceState::Missing,
        Err(e) => return Err(e).with_context(|| format!("opening {}", trace_path.display())),
        Ok(f) => {
            let cut = fold_lines(BufReader::with_capacity(1 << 16, f), &mut b)
                .with_context(|| format!("reading {}", trace_path.display()))?;
            if cut || !b.main_ended {
                TraceState::Incomplete
            } else {
                TraceState::Complete
            }
        }
    };
    if let Some(err) = &r.error {
        b.errors.push(outside_error(r.status.as_str(), err.clone()));
    }
    let agent_end = r
        .agent_end
        .as_ref()
        .and_then(|e| serde_json::to_value(e).ok())
        .and_then(|v| v.as_str().map(String::from))
        .or(b.main_end);
    Ok(CleanTrace {
        schema_version: CLEAN_SCHEMA_VERSION,
        trial_id: r.trial_id,
        task: r.task,
        attempt: r.attempt,
        status: r.status.as_str().into(),
        reward: r.reward,
        agent_end,
        suspect: r.suspect.map(|s| s.reasons).unwrap_or_default(),
        trace: state,
        usage: r.usage,
        cost_usd: r.cost_usd,
        duration_ms: r.timings.total_ms,
        subagent_runs: b.subagent_runs,
        errors: b.errors,
        system_prompt: b.system_prompt.unwrap_or_default(),
        user: b.user.unwrap_or_default(),
        turns: b.turns,
    })
}

/// Folds every line into the builder; returns whether the last line was cut (unparseable
/// and without a newline). Unparseable lines elsewhere are recorded as `trace` errors.
fn fold_lines(mut rd: impl BufRead, b: &mut Builder) -> std::io::Result<bool> {
    let mut line: Vec<u8> = Vec::new();
    let mut n = 0u32;
    loop {
        line.clear();
        if rd.read_until(b'\n', &mut line)? == 0 {
            return Ok(false);
        }
        n += 1;
        let text = line.trim_ascii_end();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_slice::<RawEvent>(text) {
            Ok(e) => b.push(e),
            Err(_) if line.last() != Some(&b'\n') => return Ok(true),
            Err(e) => b.errors.push(outside_error(
                "trace",
                format!("trace.jsonl line {n} is not a valid event: {e}"),
            )),
        }
    }
}

/// Writes `trace.clean.json` into a trial directory (atomically: temp file then rename).
pub fn write_clean(trial_dir: &Path) -> anyhow::Result<()> {
    clean_and_write(trial_dir).map(|_| ())
}

fn clean_and_write(trial_dir: &Path) -> anyhow::Result<CleanTrace> {
    let t = clean_trial(trial_dir)?;
    let path = TrialDir::new(trial_dir).clean_path();
    let tmp = path.with_extension("json.tmp");
    let write = || -> std::io::Result<()> {
        let mut w = BufWriter::with_capacity(1 << 18, File::create(&tmp)?);
        serde_json::to_writer_pretty(&mut w, &t)?;
        w.write_all(b"\n")?;
        w.into_inner().map_err(|e| e.into_error())?;
        std::fs::rename(&tmp, &path)
    };
    write().with_context(|| format!("writing {}", path.display()))?;
    Ok(t)
}

/// Reads a `trace.clean.json` written by [`write_clean`].
pub fn read_clean(trial_dir: &Path) -> anyhow::Result<CleanTrace> {
    let p = TrialDir::new(trial_dir).clean_path();
    let f = File::open(&p).with_context(|| format!("opening {}", p.display()))?;
    serde_json::from_reader(BufReader::new(f)).with_context(|| format!("parsing {}", p.display()))
}

/// The `<task>/<attempt>` directories under a `trials/` directory, sorted.
pub fn trial_dirs(trials_root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(trials_root)
        .with_context(|| format!("listing {}", trials_root.display()))?;
    for task in rd {
        let task = task?.path();
        if !task.is_dir() {
            continue;
        }
        for attempt in std::fs::read_dir(&task)? {
            let attempt = attempt?.path();
            if attempt.is_dir() {
                out.push(attempt);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Reads every trial's `result.json` under a `trials/` directory (in parallel), skipping
/// trials without one; the input of `ahe_bench::scores::compute`.
pub fn load_results(trials_root: &Path) -> anyhow::Result<Vec<TrialResult>> {
    let dirs = trial_dirs(trials_root)?;
    Ok(dirs
        .par_iter()
        .filter_map(|d| read_result(d).ok())
        .collect())
}

/// The files one trial exercised, with its task name.
type TaskFiles = (BTreeSet<String>, String);

/// Cleans every `<task>/<attempt>` directory under `trials_root` in parallel, writing each
/// `trace.clean.json`; failures are collected, not fatal.
pub fn clean_all(trials_root: &Path) -> anyhow::Result<CleanSummary> {
    let dirs = trial_dirs(trials_root)?;
    let outs: Vec<(PathBuf, anyhow::Result<TaskFiles>)> = dirs
        .into_par_iter()
        .map(|d| {
            // A trace cleaned as its trial finished (the overlapped debugger) is read back.
            let t = if is_current(&d) {
                read_clean(&d).or_else(|_| clean_and_write(&d))
            } else {
                clean_and_write(&d)
            };
            (d, t.map(|t| (exercised_files(&t), t.task)))
        })
        .collect();
    let mut s = CleanSummary::default();
    for (d, r) in outs {
        match r {
            Ok((ex, task)) => {
                s.trials += 1;
                s.exercised.entry(task).or_default().extend(ex);
            }
            Err(e) => s.failed.push((d, format!("{e:#}"))),
        }
    }
    Ok(s)
}

/// Whether a trial's `trace.clean.json` is newer than its `result.json` and `trace.jsonl`.
fn is_current(trial_dir: &Path) -> bool {
    let t = TrialDir::new(trial_dir);
    let mtime = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(clean) = mtime(t.clean_path()) else {
        return false;
    };
    [t.result_path(), t.trace_path()]
        .into_iter()
        .all(|p| mtime(p).is_none_or(|m| m <= clean))
}

/// Harness files that are exercised by every trial (prefix `memory/` = any memory file).
pub const ALWAYS_EXERCISED: &[&str] = &["agent.toml", "memory/", "system_prompt.md"];

/// A name usable as one path component (no separators, not `.`/`..`, not empty).
fn plain_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0'])
}

/// The harness files a trial exercised: `tools/<name>.toml` per tool called,
/// `middleware/<name>.toml` per middleware decision, `skills/<name>/SKILL.md` per skill
/// loaded, `subagents/<agent>.toml` per sub-agent run, and [`ALWAYS_EXERCISED`].
pub fn exercised_files(t: &CleanTrace) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = ALWAYS_EXERCISED.iter().map(|s| s.to_string()).collect();
    let mut tools: BTreeSet<&str> = BTreeSet::new();
    let mut mws: BTreeSet<&str> = BTreeSet::new();
    let mut agents: BTreeSet<&str> = t.subagent_runs.iter().map(String::as_str).collect();
    for turn in &t.turns {
        if turn.agent != "main" {
            agents.insert(&turn.agent);
        }
        for c in &turn.tool_calls {
            tools.insert(&c.name);
            if c.name == "load_skill" || c.name.contains("skill") {
                if let Some(n) = c.args.get("name").and_then(Value::as_str) {
                    if plain_name(n) {
                        out.insert(format!("skills/{n}/SKILL.md"));
                    }
                }
            }
        }
        for m in &turn.middleware {
            mws.insert(&m.name);
        }
    }
    let sets = [("tools", tools), ("middleware", mws), ("subagents", agents)];
    for (dir, names) in sets {
        for n in names.into_iter().filter(|n| plain_name(n)) {
            out.insert(format!("{dir}/{n}.toml"));
        }
    }
    out
}

#[cfg(test)]
#[path = "clean_tests.rs"]
mod tests;
