//! The Clean phase (DESIGN §1, §7): `trace.jsonl` + `result.json` → `trace.clean.json`.
//!
//! A clean trace is the canonical, turn-ordered view of one trial that the debugger reads:
//! the system prompt and task once, then every assistant turn (main agent and sub-agents, in
//! the order they happened) with its tool calls and their outputs, the middleware decisions
//! and runtime feedback of that turn. The raw trace is kept beside it.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use ahe_bench::TrialResult;
use ahe_model::Usage;
use anyhow::Context;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the `trace.clean.json` format.
pub const CLEAN_SCHEMA_VERSION: u32 = 1;

/// File name of a clean trace inside a trial directory.
pub const CLEAN_FILE: &str = "trace.clean.json";

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
struct RawEvent<'a> {
    #[serde(borrow)]
    event: Cow<'a, str>,
    #[serde(borrow, default)]
    agent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    turn: Option<u32>,
    #[serde(default)]
    tool_calls: Vec<RawCall>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    duration_ms: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    ok: Option<bool>,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    truncated: Option<bool>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    hook: Option<String>,
    #[serde(default)]
    decision: Option<Value>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
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
            content: None,
            tool_calls: Vec::new(),
            middleware: Vec::new(),
            feedback: Vec::new(),
            usage: Usage::default(),
            duration_ms: 0,
        });
        self.agents[a].turns.insert(turn, i);
        self.agents[a].last_turn = Some(i);
        i
    }

    fn push(&mut self, e: RawEvent<'_>) {
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
            "message" => {
                let text = e.content.unwrap_or_default();
                match e.role.as_deref() {
                    Some("system") => {
                        if is_main && self.system_prompt.is_none() {
                            self.system_prompt = Some(text);
                        }
                    }
                    _ if !self.agents[a].seen_user => {
                        self.agents[a].seen_user = true;
                        if is_main && self.user.is_none() {
                            self.user = Some(text);
                        }
                    }
                    _ => {
                        if let Some(i) =
                            self.agents[a].last_turn.or(self.turns.len().checked_sub(1))
                        {
                            self.turns[i].feedback.push(text);
                        }
                    }
                }
            }
            "assistant" => {
                let i = self.turn(a, turn);
                let t = &mut self.turns[i];
                t.content = e.content;
                t.usage = e.usage.unwrap_or_default();
                t.duration_ms = e.duration_ms.unwrap_or(0);
                t.tool_calls
                    .extend(e.tool_calls.into_iter().map(|c| CleanToolCall {
                        id: c.id,
                        name: c.name,
                        args: c.arguments,
                        output: None,
                        ok: false,
                        exit_code: None,
                        truncated: false,
                        error: None,
                        duration_ms: 0,
                    }));
            }
            "tool_call" => {
                let i = self.turn(a, turn);
                let id = e.id.unwrap_or_default();
                let calls = &mut self.turns[i].tool_calls;
                let pos = calls.iter().position(|c| c.output.is_none() && c.id == id);
                let c = match pos {
                    Some(p) => &mut calls[p],
                    None => {
                        calls.push(CleanToolCall {
                            id,
                            name: e.name.unwrap_or_default(),
                            args: Value::Null,
                            output: None,
                            ok: false,
                            exit_code: None,
                            truncated: false,
                            error: None,
                            duration_ms: 0,
                        });
                        calls.last_mut().expect("just pushed")
                    }
                };
                if let Some(args) = e.args {
                    c.args = args;
                }
                c.output = Some(e.output.unwrap_or_default());
                c.ok = e.ok.unwrap_or(false);
                c.exit_code = e.exit_code;
                c.truncated = e.truncated.unwrap_or(false);
                c.error = e.error;
                c.duration_ms = e.duration_ms.unwrap_or(0);
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

/// Reads `result.json` of a trial directory.
pub fn read_result(trial_dir: &Path) -> anyhow::Result<TrialResult> {
    let p = trial_dir.join("result.json");
    let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", p.display()))
}

/// Cleans one trial directory (`trace.jsonl` + `result.json`); tolerates a cut last line
/// and a missing trace.
pub fn clean_trial(trial_dir: &Path) -> anyhow::Result<CleanTrace> {
    let r = read_result(trial_dir)?;
    let mut b = Builder::default();
    let trace_path = trial_dir.join("trace.jsonl");
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
        b.errors.push(CleanError {
            turn: 0,
            agent: "main".into(),
            kind: r.status.as_str().into(),
            message: err.clone(),
        });
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
    let mut line = String::new();
    let mut n = 0u32;
    loop {
        line.clear();
        if rd.read_line(&mut line)? == 0 {
            return Ok(false);
        }
        n += 1;
        let text = line.trim_end();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<RawEvent<'_>>(text) {
            Ok(e) => b.push(e),
            Err(_) if !line.ends_with('\n') => return Ok(true),
            Err(e) => b.errors.push(CleanError {
                turn: 0,
                agent: "main".into(),
                kind: "trace".into(),
                message: format!("trace.jsonl line {n} is not a valid event: {e}"),
            }),
        }
    }
}

/// Writes `trace.clean.json` into a trial directory (atomically: temp file then rename).
pub fn write_clean(trial_dir: &Path) -> anyhow::Result<()> {
    clean_and_write(trial_dir).map(|_| ())
}

fn clean_and_write(trial_dir: &Path) -> anyhow::Result<CleanTrace> {
    let t = clean_trial(trial_dir)?;
    let tmp = trial_dir.join(format!("{CLEAN_FILE}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut w = BufWriter::with_capacity(1 << 18, File::create(&tmp)?);
        serde_json::to_writer_pretty(&mut w, &t)?;
        w.write_all(b"\n")?;
        w.into_inner().map_err(|e| e.into_error())?;
        std::fs::rename(&tmp, trial_dir.join(CLEAN_FILE))
    };
    write().with_context(|| format!("writing {}", trial_dir.join(CLEAN_FILE).display()))?;
    Ok(t)
}

/// Reads a `trace.clean.json` written by [`write_clean`].
pub fn read_clean(trial_dir: &Path) -> anyhow::Result<CleanTrace> {
    let p = trial_dir.join(CLEAN_FILE);
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
    let rs: Vec<Option<TrialResult>> = dirs.par_iter().map(|d| read_result(d).ok()).collect();
    Ok(rs.into_iter().flatten().collect())
}

/// A task name with the files one of its trials exercised.
type TaskFiles = (String, BTreeSet<String>);

/// Cleans every `<task>/<attempt>` directory under `trials_root` in parallel, writing each
/// `trace.clean.json`; failures are collected, not fatal.
pub fn clean_all(trials_root: &Path) -> anyhow::Result<CleanSummary> {
    let dirs = trial_dirs(trials_root)?;
    let outs: Vec<(PathBuf, anyhow::Result<TaskFiles>)> = dirs
        .into_par_iter()
        .map(|d| {
            let r = clean_and_write(&d).map(|t| {
                let ex = exercised_files(&t);
                (t.task, ex)
            });
            (d, r)
        })
        .collect();
    let mut s = CleanSummary::default();
    for (d, r) in outs {
        match r {
            Ok((task, ex)) => {
                s.trials += 1;
                s.exercised.entry(task).or_default().extend(ex);
            }
            Err(e) => s.failed.push((d, format!("{e:#}"))),
        }
    }
    Ok(s)
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
mod tests {
    use super::*;
    use ahe_bench::trial::write_result;
    use ahe_bench::{AgentEnd, TrialStatus};
    use serde_json::json;

    fn result(dir: &Path, task: &str, attempt: u32, status: TrialStatus) -> TrialResult {
        let mut r = TrialResult::new(task, attempt);
        r.status = status;
        r.agent_end = (status != TrialStatus::InfraError).then_some(AgentEnd::Finished);
        r.usage.input_tokens = 100;
        r.timings.total_ms = 1234;
        if status == TrialStatus::InfraError {
            r.error = Some("sandbox: docker daemon unreachable".into());
        }
        write_result(dir, &r);
        r
    }

    fn write_trace(dir: &Path, events: &[Value], tail: &str) {
        let mut s = String::new();
        for (i, e) in events.iter().enumerate() {
            let mut e = e.clone();
            e["t_ms"] = json!(i);
            e["ts"] = json!("2026-01-01T00:00:00.000Z");
            s.push_str(&e.to_string());
            s.push('\n');
        }
        s.push_str(tail);
        std::fs::write(dir.join("trace.jsonl"), s).unwrap();
    }

    fn asst(agent: &str, turn: u32, content: Option<&str>, calls: Value) -> Value {
        json!({"event": "assistant", "agent": agent, "turn": turn, "content": content,
               "tool_calls": calls, "usage": {"input_tokens": 10, "cached_input_tokens": 0,
               "output_tokens": turn}, "cost_usd": 0.0, "duration_ms": 7})
    }

    fn tool(agent: &str, turn: u32, id: &str, name: &str, args: Value, out: &str) -> Value {
        json!({"event": "tool_call", "agent": agent, "turn": turn, "id": id, "name": name,
               "args": args, "output": out, "ok": true, "exit_code": 0, "truncated": false,
               "error": null, "duration_ms": 3})
    }

    fn msg(agent: &str, role: &str, content: &str) -> Value {
        json!({"event": "message", "agent": agent, "role": role, "content": content})
    }

    fn start(agent: &str) -> Value {
        json!({"event": "run_start", "agent": agent, "model": "m", "protocol": "native",
               "tools": ["run_shell"], "limits": {}})
    }

    fn end(agent: &str) -> Value {
        json!({"event": "run_end", "agent": agent, "end": "finished", "turns": 1,
               "usage": {"input_tokens": 1, "cached_input_tokens": 0, "output_tokens": 1},
               "cost_usd": 0.0, "final_message": null})
    }

    /// A main run that delegates twice to `explorer`, loads a skill, has a middleware
    /// decision before its model call, a rejected finish and a format error.
    fn rich_events() -> Vec<Value> {
        let call =
            |id: &str, name: &str, args: Value| json!({"id": id, "name": name, "arguments": args});
        vec![
            start("main"),
            msg("main", "system", "SYS"),
            msg("main", "user", "TASK"),
            asst(
                "main",
                1,
                Some("look"),
                json!([
                    call("a", "run_shell", json!({"command": "ls"})),
                    call("b", "load_skill", json!({"name": "git"}))
                ]),
            ),
            tool(
                "main",
                1,
                "a",
                "run_shell",
                json!({"command": "ls -la"}),
                "file.txt",
            ),
            tool(
                "main",
                1,
                "b",
                "load_skill",
                json!({"name": "git"}),
                "# git skill",
            ),
            asst(
                "main",
                2,
                None,
                json!([call(
                    "c",
                    "delegate",
                    json!({"agent": "explorer", "task": "T1"})
                )]),
            ),
            start("explorer"),
            msg("explorer", "system", "SUB SYS"),
            msg("explorer", "user", "T1"),
            asst(
                "explorer",
                1,
                None,
                json!([call("x", "run_shell", json!({"command": "pwd"}))]),
            ),
            tool(
                "explorer",
                1,
                "x",
                "run_shell",
                json!({"command": "pwd"}),
                "/app",
            ),
            end("explorer"),
            tool(
                "main",
                2,
                "c",
                "delegate",
                json!({"agent": "explorer", "task": "T1"}),
                "found",
            ),
            json!({"event": "middleware", "agent": "main", "turn": 3, "hook": "before_model",
                   "name": "compact", "decision": {"action": "modify"}}),
            asst(
                "main",
                3,
                None,
                json!([call(
                    "d",
                    "delegate",
                    json!({"agent": "explorer", "task": "T2"})
                )]),
            ),
            start("explorer"),
            msg("explorer", "system", "SUB SYS"),
            msg("explorer", "user", "T2"),
            asst("explorer", 1, Some("nothing"), json!([])),
            end("explorer"),
            tool("main", 3, "d", "delegate", json!({}), "nothing"),
            asst(
                "main",
                4,
                None,
                json!([call("f", "finish", json!({"summary": "done"}))]),
            ),
            json!({"event": "middleware", "agent": "main", "turn": 4, "hook": "on_finish",
                   "name": "verify", "decision": {"action": "reject_finish", "message": "tests fail"}}),
            msg("main", "user", "tests fail"),
            json!({"event": "error", "agent": "main", "turn": 5, "kind": "format", "message": "bad json"}),
            asst("main", 5, Some("done"), json!([])),
            end("main"),
        ]
    }

    #[test]
    fn folds_events_into_ordered_turns() {
        let d = tempfile::tempdir().unwrap();
        let r = result(d.path(), "t1", 1, TrialStatus::Pass);
        write_trace(d.path(), &rich_events(), "");
        let t = clean_trial(d.path()).unwrap();
        assert_eq!(t.trial_id, r.trial_id);
        assert_eq!(
            (t.task.as_str(), t.attempt, t.status.as_str()),
            ("t1", 1, "pass")
        );
        assert_eq!(t.agent_end.as_deref(), Some("finished"));
        assert_eq!(t.trace, TraceState::Complete);
        assert_eq!((t.system_prompt.as_str(), t.user.as_str()), ("SYS", "TASK"));
        assert_eq!(t.duration_ms, 1234);
        assert_eq!(t.subagent_runs, vec!["explorer", "explorer"]);
        let order: Vec<(&str, u32)> = t.turns.iter().map(|x| (x.agent.as_str(), x.turn)).collect();
        assert_eq!(
            order,
            vec![
                ("main", 1),
                ("main", 2),
                ("explorer", 1),
                ("main", 3),
                ("explorer", 1),
                ("main", 4),
                ("main", 5)
            ]
        );
        let t1 = &t.turns[0];
        assert_eq!(t1.content.as_deref(), Some("look"));
        assert_eq!(t1.usage.output_tokens, 1);
        assert_eq!(t1.duration_ms, 7);
        assert_eq!(t1.tool_calls.len(), 2);
        assert_eq!(
            t1.tool_calls[0].args,
            json!({"command": "ls -la"}),
            "args after middleware"
        );
        assert_eq!(t1.tool_calls[0].output.as_deref(), Some("file.txt"));
        assert_eq!(t1.tool_calls[1].output.as_deref(), Some("# git skill"));
        assert_eq!(t.turns[2].tool_calls[0].output.as_deref(), Some("/app"));
        // The main turn 3's middleware came before its assistant event: same turn.
        assert_eq!(t.turns[3].middleware.len(), 1);
        assert_eq!(t.turns[3].middleware[0].name, "compact");
        assert_eq!(t.turns[3].tool_calls.len(), 1);
        // The sub-agent's second run has its own turn 1, and its task is not feedback.
        assert_eq!(t.turns[4].content.as_deref(), Some("nothing"));
        assert!(t.turns[4].feedback.is_empty());
        // finish: no tool_call event, so no output; the rejection is feedback of turn 4.
        let t4 = &t.turns[5];
        assert_eq!(t4.tool_calls[0].name, "finish");
        assert_eq!(t4.tool_calls[0].output, None);
        assert_eq!(t4.feedback, vec!["tests fail"]);
        assert_eq!(t4.middleware[0].hook, "on_finish");
        assert_eq!(t.errors.len(), 1);
        assert_eq!((t.errors[0].turn, t.errors[0].kind.as_str()), (5, "format"));
    }

    #[test]
    fn tolerates_cut_last_line_and_bad_middle_line() {
        let d = tempfile::tempdir().unwrap();
        result(d.path(), "t1", 1, TrialStatus::Fail);
        let ev = rich_events();
        write_trace(
            d.path(),
            &ev[..6],
            r#"{"t_ms":9,"event":"assistant","agent":"main","tu"#,
        );
        let t = clean_trial(d.path()).unwrap();
        assert_eq!(t.trace, TraceState::Incomplete);
        assert_eq!(t.turns.len(), 1);
        assert_eq!(t.turns[0].tool_calls.len(), 2);
        assert!(
            t.errors.is_empty(),
            "a cut last line is not an error: {:?}",
            t.errors
        );

        let mut s = std::fs::read_to_string(d.path().join("trace.jsonl")).unwrap();
        s.truncate(s.rfind('\n').unwrap() + 1);
        s.insert_str(s.find('\n').unwrap() + 1, "{not json\n");
        std::fs::write(
            d.path().join("trace.jsonl"),
            s + &end("main").to_string() + "\n",
        )
        .unwrap();
        let t = clean_trial(d.path()).unwrap();
        assert_eq!(t.trace, TraceState::Complete);
        assert_eq!(t.errors.len(), 1);
        assert_eq!(t.errors[0].kind, "trace");
        assert!(
            t.errors[0].message.contains("line 2"),
            "{}",
            t.errors[0].message
        );
        assert_eq!(t.turns.len(), 1);
    }

    #[test]
    fn missing_trace_keeps_the_trial_error() {
        let d = tempfile::tempdir().unwrap();
        result(d.path(), "t1", 2, TrialStatus::InfraError);
        let t = clean_trial(d.path()).unwrap();
        assert_eq!(t.trace, TraceState::Missing);
        assert!(t.turns.is_empty());
        assert_eq!(t.agent_end, None);
        assert_eq!(t.errors.len(), 1);
        assert_eq!(t.errors[0].kind, "infra_error");
        assert!(t.errors[0].message.contains("docker"));
        assert!(clean_trial(&d.path().join("nope")).is_err());
    }

    #[test]
    fn write_is_atomic_and_round_trips() {
        let d = tempfile::tempdir().unwrap();
        result(d.path(), "t1", 1, TrialStatus::Pass);
        write_trace(d.path(), &rich_events(), "");
        write_clean(d.path()).unwrap();
        assert!(!d.path().join("trace.clean.json.tmp").exists());
        let back = read_clean(d.path()).unwrap();
        assert_eq!(back, clean_trial(d.path()).unwrap());
        let v: Value =
            serde_json::from_slice(&std::fs::read(d.path().join(CLEAN_FILE)).unwrap()).unwrap();
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["trace"], "complete");
        assert_eq!(v["turns"][0]["tool_calls"][0]["exit_code"], 0);
    }

    #[test]
    fn exercised_files_name_what_ran() {
        let d = tempfile::tempdir().unwrap();
        result(d.path(), "t1", 1, TrialStatus::Pass);
        let mut ev = rich_events();
        ev.push(tool("main", 5, "z", "../evil", json!({}), ""));
        write_trace(d.path(), &ev, "");
        let ex = exercised_files(&clean_trial(d.path()).unwrap());
        let want: BTreeSet<String> = [
            "agent.toml",
            "memory/",
            "system_prompt.md",
            "tools/run_shell.toml",
            "tools/load_skill.toml",
            "tools/delegate.toml",
            "tools/finish.toml",
            "skills/git/SKILL.md",
            "middleware/compact.toml",
            "middleware/verify.toml",
            "subagents/explorer.toml",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(ex, want);
    }

    #[test]
    fn clean_all_walks_every_trial_and_collects_failures() {
        let d = tempfile::tempdir().unwrap();
        for (task, attempt) in [("a", 1), ("a", 2), ("b", 1)] {
            let dir = d.path().join(task).join(attempt.to_string());
            result(&dir, task, attempt, TrialStatus::Pass);
            let mut ev = rich_events();
            if task == "b" {
                ev.truncate(6);
            }
            write_trace(&dir, &ev, "");
        }
        std::fs::create_dir_all(d.path().join("c/1")).unwrap();
        std::fs::write(d.path().join("stray.txt"), "x").unwrap();
        let s = clean_all(d.path()).unwrap();
        assert_eq!(s.trials, 3);
        assert_eq!(s.failed.len(), 1);
        assert!(s.failed[0].0.ends_with("c/1"));
        assert!(s.failed[0].1.contains("result.json"), "{}", s.failed[0].1);
        assert!(d.path().join("a/2").join(CLEAN_FILE).is_file());
        assert!(s.exercised["a"].contains("subagents/explorer.toml"));
        assert!(!s.exercised["b"].contains("subagents/explorer.toml"));
        assert!(s.exercised["b"].contains("skills/git/SKILL.md"));
        assert_eq!(load_results(d.path()).unwrap().len(), 3);
        assert!(clean_all(&d.path().join("missing")).is_err());
    }
}
