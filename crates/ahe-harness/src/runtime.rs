//! The agent loop (DESIGN §3): prompt → model → validate → middleware → tool → observation.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahe_model::{
    ChatRequest, Message, ModelClient, ModelError, Role, ToolCall, ToolProtocol, ToolSpec, Usage,
};
use ahe_sandbox::Sandbox;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::format::{Harness, ToolDef};
use crate::middleware::{compact, conversation_chars, Decision, HookInput, Stack};
use crate::prompt::{self, PromptVars, ToolView};
use crate::tools::{self, BuiltinTool, ToolImpl, ToolResult, SCRIPT_ROOT};
use crate::trace::{Event, TraceWriter};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// The model finished and every on_finish hook accepted.
    Finished,
    /// Wall-time limit.
    Timeout,
    /// Turn limit.
    TurnLimit,
    /// Token budget.
    TokenLimit,
    /// The conversation no longer fits the model's context, even compacted.
    ContextExceeded,
    /// The model could not be reached or answered garbage after retries.
    ModelError,
    /// A permanent model error (bad key, unknown model).
    Fatal,
}

/// The result of one agent run.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutcome {
    /// How it ended.
    pub end: End,
    /// Model turns taken.
    pub turns: u32,
    /// Tokens (sub-agents included).
    pub usage: Usage,
    /// Cost in USD (sub-agents included).
    pub cost_usd: f64,
    /// The agent's last text.
    pub final_message: Option<String>,
    /// Error text for model errors.
    pub error: Option<String>,
}

/// A harness bound to a model: runs agents in sandboxes.
pub struct Runtime {
    harness: Arc<Harness>,
    model: ModelClient,
    validators: HashMap<String, jsonschema::Validator>,
}

/// One agent configuration inside a run (the main agent or a sub-agent).
struct Profile<'a> {
    name: &'a str,
    system: String,
    tools: Vec<&'a ToolDef>,
    max_turns: u32,
    deadline: Instant,
}

/// Per-run context shared by nested agents.
struct Cx<'a> {
    sb: &'a dyn Sandbox,
    trace: &'a TraceWriter,
    token_budget: u64,
}

/// Mutable state of one loop.
struct State {
    messages: Vec<Message>,
    usage: Usage,
    cost: f64,
    turns: u32,
    mw: Stack,
    final_text: Option<String>,
}

impl Runtime {
    /// Binds a loaded harness to a model client (compiles the tool schemas once).
    pub fn new(harness: Arc<Harness>, model: ModelClient) -> anyhow::Result<Self> {
        let mut validators = HashMap::new();
        for t in &harness.all_tools {
            let v = jsonschema::validator_for(&t.input_schema)
                .map_err(|e| anyhow::anyhow!("tools/{}.toml: input_schema: {e}", t.name))?;
            validators.insert(t.name.clone(), v);
        }
        Ok(Runtime {
            harness,
            model,
            validators,
        })
    }

    /// The harness this runtime runs.
    pub fn harness(&self) -> &Harness {
        &self.harness
    }

    /// Runs the main agent on a task instruction until it stops.
    pub async fn run(
        &self,
        instruction: &str,
        sb: &dyn Sandbox,
        trace: &TraceWriter,
        timeout: Duration,
    ) -> RunOutcome {
        let limits = &self.harness.agent.limits;
        let timeout = timeout.min(Duration::from_secs_f64(limits.timeout_sec));
        let cx = Cx {
            sb,
            trace,
            token_budget: limits.max_total_tokens,
        };
        self.upload_scripts(sb).await;
        let tools = self.harness.tools();
        let system = self.system_prompt(&self.harness.system_prompt, &tools, sb.workdir());
        let p = Profile {
            name: "main",
            system,
            tools,
            max_turns: limits.max_turns,
            deadline: Instant::now() + timeout,
        };
        self.run_loop(&p, instruction, &cx).await
    }

    fn system_prompt(&self, template: &str, tools: &[&ToolDef], workdir: &str) -> String {
        let h = &self.harness;
        let views: Vec<ToolView> = tools
            .iter()
            .map(|t| ToolView {
                name: t.name.clone(),
                description: t.description.clone(),
                schema: t.input_schema.to_string(),
            })
            .collect();
        let vars = PromptVars {
            working_dir: workdir.to_string(),
            date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
            tools: views.clone(),
            ..prompt::sample_vars(h)
        };
        // The harness validated; a render error here still must not kill the trial.
        let mut s = prompt::render(template, &vars)
            .unwrap_or_else(|e| format!("{template}\n\n[template error: {e}]"));
        if h.agent.tool_protocol == ToolProtocol::JsonInText {
            s.push_str(&prompt::json_protocol(&views));
        }
        s
    }

    async fn upload_scripts(&self, sb: &dyn Sandbox) {
        let tool_scripts = self
            .harness
            .all_tools
            .iter()
            .filter_map(|t| match &t.implementation {
                ToolImpl::Script(p) => Some(p.clone()),
                _ => None,
            });
        let mw_scripts = self
            .harness
            .middleware
            .iter()
            .filter_map(|m| match &m.kind {
                crate::middleware::MiddlewareKind::Script(p) => Some(p.clone()),
                _ => None,
            });
        for rel in tool_scripts.chain(mw_scripts) {
            if let Err(e) = sb
                .put(
                    &self.harness.dir.join(&rel),
                    &format!("{SCRIPT_ROOT}/{rel}"),
                )
                .await
            {
                tracing::warn!("cannot copy harness script {rel} into the sandbox: {e}");
            }
        }
    }

    async fn run_loop(&self, p: &Profile<'_>, instruction: &str, cx: &Cx<'_>) -> RunOutcome {
        let protocol = self.harness.agent.tool_protocol;
        let specs: Vec<ToolSpec> = p
            .tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
            })
            .collect();
        cx.trace.emit(&Event::RunStart {
            agent: p.name,
            model: &self.model.describe(),
            protocol: if protocol == ToolProtocol::Native { "native" } else { "json_in_text" },
            tools: p.tools.iter().map(|t| t.name.as_str()).collect(),
            limits: serde_json::json!({"max_turns": p.max_turns, "timeout_sec": p.deadline.saturating_duration_since(Instant::now()).as_secs_f64(), "max_total_tokens": cx.token_budget}),
        });
        cx.trace.emit(&Event::Message {
            agent: p.name,
            role: "system",
            content: &p.system,
        });
        cx.trace.emit(&Event::Message {
            agent: p.name,
            role: "user",
            content: instruction,
        });
        let mut st = State {
            messages: vec![
                Message::system(p.system.clone()),
                Message::user(instruction),
            ],
            usage: Usage::default(),
            cost: 0.0,
            turns: 0,
            mw: Stack::new(self.harness.middleware.clone()),
            final_text: None,
        };
        let end = loop {
            if st.turns >= p.max_turns {
                break (End::TurnLimit, None);
            }
            if Instant::now() >= p.deadline {
                break (End::Timeout, None);
            }
            if st.usage.total() >= cx.token_budget {
                break (End::TokenLimit, None);
            }
            st.turns += 1;
            let turn = st.turns;
            for (name, d) in st.mw.run(HookInput::BeforeModel(&st.messages), cx.sb).await {
                trace_decision(cx, p, turn, "before_model", &name, &d);
                if let Decision::ModifyMessages { messages } = d {
                    st.messages = messages;
                }
            }
            let resp = match self.call_model(p, &specs, &mut st, cx).await {
                Ok(r) => r,
                Err(end) => break end,
            };
            let blocked = st.mw.run(HookInput::AfterModel(&resp), cx.sb).await;
            let (calls, format_error) = parse_calls(&resp, protocol);
            st.messages.push(match protocol {
                ToolProtocol::Native => resp.to_message(),
                ToolProtocol::JsonInText => Message::Assistant {
                    content: resp.content.clone(),
                    tool_calls: vec![],
                    opaque: resp.opaque.clone(),
                },
            });
            if let Some((name, Decision::Block { message })) = blocked.last() {
                trace_decision(cx, p, turn, "after_model", name, &blocked.last().unwrap().1);
                for c in &calls {
                    if protocol == ToolProtocol::Native {
                        st.messages
                            .push(tool_msg(c, "not run: the answer was blocked"));
                    }
                }
                st.messages.push(Message::user(message.clone()));
                continue;
            }
            if let Some(err) = format_error {
                cx.trace.emit(&Event::Error {
                    agent: p.name,
                    turn,
                    kind: "format",
                    message: &err,
                });
                let names: Vec<String> = p.tools.iter().map(|t| t.name.clone()).collect();
                st.messages
                    .push(Message::user(prompt::json_format_error(&err, &names)));
                continue;
            }
            if resp
                .content
                .as_deref()
                .is_some_and(|c| !c.trim().is_empty())
            {
                st.final_text = resp.content.clone();
            }
            if calls.is_empty() {
                match self
                    .try_finish(p, &mut st, cx, resp.content.as_deref().unwrap_or(""))
                    .await
                {
                    None => break (End::Finished, None),
                    Some(msg) => {
                        st.messages.push(Message::user(msg));
                        continue;
                    }
                }
            }
            let mut json_obs = Vec::new();
            for call in &calls {
                let is_finish = p.tools.iter().any(|t| {
                    t.name == call.name
                        && t.implementation == ToolImpl::Builtin(BuiltinTool::Finish)
                });
                let obs = if is_finish {
                    let summary = call
                        .arguments
                        .get("summary")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    match self.try_finish(p, &mut st, cx, summary).await {
                        None => {
                            if !summary.is_empty() {
                                st.final_text = Some(summary.to_string());
                            }
                            return self.outcome(p, cx, st, End::Finished, None);
                        }
                        Some(msg) => msg,
                    }
                } else {
                    self.call_tool(call, p, &mut st, cx).await.observation()
                };
                match protocol {
                    ToolProtocol::Native => st.messages.push(tool_msg(call, &obs)),
                    ToolProtocol::JsonInText => {
                        json_obs.push(prompt::json_observation(&call.name, &obs))
                    }
                }
            }
            if !json_obs.is_empty() {
                st.messages.push(Message::user(json_obs.join("\n\n")));
            }
        };
        self.outcome(p, cx, st, end.0, end.1)
    }

    fn outcome(
        &self,
        p: &Profile<'_>,
        cx: &Cx<'_>,
        st: State,
        end: End,
        error: Option<String>,
    ) -> RunOutcome {
        let end_name = serde_json::to_value(end)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        cx.trace.emit(&Event::RunEnd {
            agent: p.name,
            end: &end_name,
            turns: st.turns,
            usage: st.usage,
            cost_usd: st.cost,
            final_message: st.final_text.as_deref(),
        });
        RunOutcome {
            end,
            turns: st.turns,
            usage: st.usage,
            cost_usd: st.cost,
            final_message: st.final_text,
            error,
        }
    }

    /// One model call within the deadline; on a context overflow compacts once and retries.
    async fn call_model(
        &self,
        p: &Profile<'_>,
        specs: &[ToolSpec],
        st: &mut State,
        cx: &Cx<'_>,
    ) -> Result<ahe_model::ChatResponse, (End, Option<String>)> {
        let mut compacted = false;
        loop {
            let req = ChatRequest {
                role: Role::CodeAgent,
                messages: st.messages.clone(),
                tools: specs.to_vec(),
                protocol: self.harness.agent.tool_protocol,
                temperature: None,
                max_tokens: None,
                tool_choice: Default::default(),
            };
            let remaining = p.deadline.saturating_duration_since(Instant::now());
            let t0 = Instant::now();
            let res = tokio::time::timeout(remaining, self.model.chat(&req)).await;
            let err = match res {
                Err(_) => return Err((End::Timeout, None)),
                Ok(Ok(r)) => {
                    st.usage.add(&r.usage);
                    st.cost += r.cost_usd;
                    cx.trace.emit(&Event::Assistant {
                        agent: p.name,
                        turn: st.turns,
                        content: r.content.as_deref(),
                        tool_calls: &r.tool_calls,
                        usage: r.usage,
                        cost_usd: r.cost_usd,
                        duration_ms: t0.elapsed().as_millis() as u64,
                    });
                    return Ok(r);
                }
                Ok(Err(e)) => e,
            };
            let msg = err.to_string();
            cx.trace.emit(&Event::Error {
                agent: p.name,
                turn: st.turns,
                kind: err.class(),
                message: &msg,
            });
            match err {
                ModelError::ContextLength(_) if !compacted => {
                    compacted = true;
                    let half = conversation_chars(&st.messages) / 2;
                    match compact(&st.messages, half, 4) {
                        Some(m) => st.messages = m,
                        None => return Err((End::ContextExceeded, Some(msg))),
                    }
                }
                ModelError::ContextLength(_) => return Err((End::ContextExceeded, Some(msg))),
                ModelError::Permanent(_) => return Err((End::Fatal, Some(msg))),
                _ => return Err((End::ModelError, Some(msg))),
            }
        }
    }

    /// Runs the on_finish hooks: None = accepted, Some(message) = rejected.
    async fn try_finish(
        &self,
        p: &Profile<'_>,
        st: &mut State,
        cx: &Cx<'_>,
        summary: &str,
    ) -> Option<String> {
        for (name, d) in st.mw.run(HookInput::OnFinish(summary), cx.sb).await {
            trace_decision(cx, p, st.turns, "on_finish", &name, &d);
            if let Decision::RejectFinish { message } = d {
                return Some(message);
            }
        }
        None
    }

    /// Validates, runs middleware around, and executes one tool call.
    async fn call_tool(
        &self,
        call: &ToolCall,
        p: &Profile<'_>,
        st: &mut State,
        cx: &Cx<'_>,
    ) -> ToolResult {
        let t0 = Instant::now();
        let mut args = call.arguments.clone();
        let result = 'r: {
            let Some(def) = p.tools.iter().find(|t| t.name == call.name) else {
                let names: Vec<&str> = p.tools.iter().map(|t| t.name.as_str()).collect();
                break 'r ToolResult::fail(
                    format!("unknown tool {:?}", call.name),
                    Some(&format!("available tools: {}", names.join(", "))),
                );
            };
            if let Value::String(raw) = &args {
                break 'r tools::invalid_args(
                    &def.name,
                    &[format!("the arguments are not a JSON object: {raw:.200}")],
                    &def.input_schema,
                );
            }
            if let Some(v) = self.validators.get(&def.name) {
                let errs: Vec<String> = v
                    .iter_errors(&args)
                    .map(|e| format!("{} (at {})", e, e.instance_path()))
                    .collect();
                if !errs.is_empty() {
                    break 'r tools::invalid_args(&def.name, &errs, &def.input_schema);
                }
            }
            for (name, d) in st
                .mw
                .run(HookInput::BeforeTool(&def.name, &args), cx.sb)
                .await
            {
                trace_decision(cx, p, st.turns, "before_tool", &name, &d);
                match d {
                    Decision::ModifyArgs { args: a } => args = a,
                    Decision::Block { message } => {
                        break 'r ToolResult {
                            ok: false,
                            output: message,
                            error: Some(format!("blocked by middleware {name}")),
                            ..Default::default()
                        }
                    }
                    _ => {}
                }
            }
            let budget = p.deadline.saturating_duration_since(Instant::now());
            let mut r = match &def.implementation {
                ToolImpl::Builtin(BuiltinTool::Delegate) => self.delegate(&args, p, st, cx).await,
                ToolImpl::Builtin(b) => {
                    tools::run_builtin(*b, def, &args, cx.sb, &self.harness, budget).await
                }
                ToolImpl::Script(rel) => tools::run_script(def, rel, &args, cx.sb, budget).await,
            };
            for (name, d) in st
                .mw
                .run(HookInput::AfterTool(&def.name, &args, &r), cx.sb)
                .await
            {
                trace_decision(cx, p, st.turns, "after_tool", &name, &d);
                if let Decision::ModifyOutput { output } = d {
                    r.truncated = Some(true);
                    r.output = output;
                }
            }
            r
        };
        let obs = result.observation();
        cx.trace.emit(&Event::ToolCall {
            agent: p.name,
            turn: st.turns,
            id: &call.id,
            name: &call.name,
            args: &args,
            output: &obs,
            ok: result.ok,
            exit_code: result.exit_code,
            truncated: result.truncated.unwrap_or(false),
            error: result.error.as_deref(),
            duration_ms: t0.elapsed().as_millis() as u64,
        });
        result
    }

    /// The `delegate` tool: runs a sub-agent's own loop in the same sandbox.
    async fn delegate(
        &self,
        args: &Value,
        p: &Profile<'_>,
        st: &mut State,
        cx: &Cx<'_>,
    ) -> ToolResult {
        let name = args.get("agent").and_then(Value::as_str).unwrap_or("");
        let task = args.get("task").and_then(Value::as_str).unwrap_or("");
        let Some(sub) = self.harness.subagents.iter().find(|s| s.name == name) else {
            let names: Vec<&str> = self
                .harness
                .subagents
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            return ToolResult::fail(
                format!("no sub-agent named {name:?}"),
                Some(&format!("available: {}", names.join(", "))),
            );
        };
        if p.name != "main" {
            return ToolResult::fail("sub-agents cannot delegate further", None);
        }
        let tools: Vec<&ToolDef> = sub
            .tools
            .iter()
            .filter_map(|t| self.harness.tool(t))
            .filter(|t| t.implementation != ToolImpl::Builtin(BuiltinTool::Delegate))
            .collect();
        let system = self.system_prompt(&sub.prompt, &tools, cx.sb.workdir());
        let deadline = p
            .deadline
            .min(Instant::now() + Duration::from_secs_f64(sub.timeout_sec));
        let sp = Profile {
            name: &sub.name,
            system,
            tools,
            max_turns: sub.max_turns,
            deadline,
        };
        let out = Box::pin(self.run_loop(&sp, task, cx)).await;
        st.usage.add(&out.usage);
        st.cost += out.cost_usd;
        let text = out.final_message.unwrap_or_default();
        ToolResult {
            ok: out.end == End::Finished,
            output: text,
            error: (out.end != End::Finished)
                .then(|| format!("sub-agent {name} ended: {:?}", out.end)),
            summary: Some(format!("{} turns", out.turns)),
            ..Default::default()
        }
    }
}

fn tool_msg(call: &ToolCall, content: &str) -> Message {
    Message::Tool {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content: content.to_string(),
    }
}

fn trace_decision(cx: &Cx<'_>, p: &Profile<'_>, turn: u32, hook: &str, name: &str, d: &Decision) {
    let mut v = serde_json::to_value(d).unwrap_or(Value::Null);
    if let Some(m) = v.get_mut("messages") {
        *m = Value::String("[rewritten conversation]".into());
    }
    cx.trace.emit(&Event::Middleware {
        agent: p.name,
        turn,
        hook,
        name,
        decision: v,
    });
}

#[derive(Deserialize)]
struct JsonAction {
    tool: String,
    #[serde(default, alias = "arguments")]
    args: Option<Value>,
}

/// Tool calls of an answer; for the JSON-in-text protocol also a format error when the text
/// tries to act (mentions `"tool"`) but holds no readable action.
pub fn parse_calls(
    resp: &ahe_model::ChatResponse,
    protocol: ToolProtocol,
) -> (Vec<ToolCall>, Option<String>) {
    if protocol == ToolProtocol::Native {
        return (resp.tool_calls.clone(), None);
    }
    let text = resp.content.as_deref().unwrap_or("");
    for (i, _) in text.match_indices('{') {
        let mut it = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
        if let Some(Ok(v)) = it.next() {
            if let Ok(a) = serde_json::from_value::<JsonAction>(v) {
                let args = a.args.unwrap_or(Value::Object(Default::default()));
                return (
                    vec![ToolCall {
                        id: "json_0".into(),
                        name: a.tool,
                        arguments: args,
                    }],
                    None,
                );
            }
        }
    }
    if text.contains("\"tool\"") {
        return (
            vec![],
            Some("no complete JSON object with a \"tool\" field was found".into()),
        );
    }
    (vec![], None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(text: &str) -> ahe_model::ChatResponse {
        ahe_model::ChatResponse {
            content: Some(text.into()),
            tool_calls: vec![],
            usage: Usage::default(),
            finish_reason: None,
            cost_usd: 0.0,
            opaque: vec![],
        }
    }

    #[test]
    fn json_in_text_parsing() {
        let (c, e) = parse_calls(
            &resp("I will list.\n{\"tool\": \"sh\", \"args\": {\"command\": \"ls\"}}"),
            ToolProtocol::JsonInText,
        );
        assert!(e.is_none());
        assert_eq!(c[0].name, "sh");
        assert_eq!(c[0].arguments["command"], "ls");
        let (c, e) = parse_calls(
            &resp("All done, the file {x} exists."),
            ToolProtocol::JsonInText,
        );
        assert!(c.is_empty() && e.is_none());
        let (c, e) = parse_calls(
            &resp("{\"tool\": \"sh\", \"args\": {\"command\""),
            ToolProtocol::JsonInText,
        );
        assert!(c.is_empty() && e.is_some());
    }
}
