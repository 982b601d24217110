//! The agent runtime (docs/harness.md#the-agent-runtime): a harness bound to a model runs an agent in a sandbox.
//! The loop itself is [`agent_loop`] over a [`Session`] (limits, model calls, trace, one way
//! to stop); this module adds what a harness brings: its tools (validated against their schemas), its
//! middleware (every decision applied in one place, [`Runtime::hook`], and traced), its tool
//! protocol ([`Wire`]), finish hooks and sub-agents.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahe_model::{
    ChatResponse, Message, ModelClient, Role, ToolCall, ToolChoice, ToolProtocol, ToolSpec,
};
use ahe_sandbox::Sandbox;
use minijinja::context;
use serde_json::Value;

use crate::agent_loop::{self, Agent, Reply, Request};
use crate::builtin_mw::{self, Compiled};
use crate::format::{Harness, ToolDef};
use crate::middleware::{Applied, HookInput, Stack};
use crate::prompt::{self, PromptVars, ToolView};
use crate::session::{End, Limits, RunOutcome, Session, Stop, ToolEvent};
use crate::text;
use crate::tools::{self, BuiltinTool, ToolImpl, ToolResult, SCRIPT_ROOT};
use crate::trace::Event;
use crate::wire::Wire;

/// A harness bound to a model: runs agents in sandboxes.
pub struct Runtime {
    harness: Arc<Harness>,
    model: ModelClient,
    validators: HashMap<String, jsonschema::Validator>,
    middleware: Arc<[Compiled]>,
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
    trace: &'a crate::TraceWriter,
    token_budget: u64,
}

impl Runtime {
    /// Binds a loaded harness to a model client (compiles the tool schemas and the
    /// middleware params once).
    pub fn new(harness: Arc<Harness>, model: ModelClient) -> anyhow::Result<Self> {
        let mut validators = HashMap::new();
        for t in &harness.all_tools {
            let v = jsonschema::validator_for(&t.input_schema)
                .map_err(|e| anyhow::anyhow!("tools/{}.toml: input_schema: {e}", t.name))?;
            validators.insert(t.name.clone(), v);
        }
        let middleware = builtin_mw::compile(&harness.middleware).map_err(anyhow::Error::msg)?;
        Ok(Runtime {
            harness,
            model,
            validators,
            middleware,
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
        trace: &crate::TraceWriter,
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
        let system = self.system_prompt(
            &self.harness.system_prompt,
            &tools,
            sb.workdir(),
            (timeout, limits.max_turns),
        );
        let p = Profile {
            name: "main",
            system,
            tools,
            max_turns: limits.max_turns,
            deadline: Instant::now() + timeout,
        };
        self.run_loop(&p, instruction, &cx).await
    }

    /// The rendered prompt; `limits` are the agent's (wall time, turns) after every cap.
    fn system_prompt(
        &self,
        template: &str,
        tools: &[&ToolDef],
        workdir: &str,
        limits: (Duration, u32),
    ) -> String {
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
            timeout_sec: limits.0.as_secs(),
            max_turns: limits.1,
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

    /// One agent's conversation, from its first turn to its [`Stop`], through the shared
    /// loop body ([`agent_loop::run`]) with the harness's hooks ([`CodeAgent`]).
    async fn run_loop(&self, p: &Profile<'_>, task: &str, cx: &Cx<'_>) -> RunOutcome {
        let wire = Wire(self.harness.agent.tool_protocol);
        let limits = Limits {
            max_turns: p.max_turns,
            deadline: p.deadline,
            max_tokens: Some(cx.token_budget),
        };
        let names: Vec<&str> = p.tools.iter().map(|t| t.name.as_str()).collect();
        let model = self.model.describe();
        let s = Session::start(
            p.name, cx.trace, &model, wire.0, names, limits, &p.system, task,
        );
        let req = Request {
            role: Role::CodeAgent,
            tools: p
                .tools
                .iter()
                .map(|t| ToolSpec {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    input_schema: t.input_schema.clone(),
                })
                .collect(),
            protocol: wire.0,
        };
        let mut agent = CodeAgent {
            rt: self,
            p,
            cx,
            mw: Stack::new(self.middleware.clone()),
            wire,
        };
        agent_loop::run(s, &self.model, &req, &mut agent).await
    }

    fn is_finish(&self, p: &Profile<'_>, call: &ToolCall) -> bool {
        p.tools.iter().any(|t| {
            t.name == call.name && t.implementation == ToolImpl::Builtin(BuiltinTool::Finish)
        })
    }

    /// Runs one hook through the middleware stack and traces every decision; the caller
    /// applies the combined effect.
    async fn hook(
        &self,
        s: &Session<'_>,
        mw: &mut Stack,
        input: HookInput<'_>,
        cx: &Cx<'_>,
    ) -> Applied {
        let hook = input.name();
        let decisions = mw.run(input, cx.sb).await;
        for (name, d) in &decisions {
            let mut v = serde_json::to_value(d).unwrap_or(Value::Null);
            if let Some(m) = v.get_mut("messages") {
                *m = Value::String("[rewritten conversation]".into());
            }
            cx.trace.emit(&Event::Middleware {
                agent: s.agent(),
                turn: s.turns,
                hook,
                name,
                decision: v,
            });
        }
        Applied::of(&decisions)
    }

    /// Runs the on_finish hooks: `Err(Finished)` when they accept, else the rejection
    /// message for the model.
    async fn finish(
        &self,
        s: &Session<'_>,
        mw: &mut Stack,
        cx: &Cx<'_>,
        summary: &str,
    ) -> Result<String, Stop> {
        match self
            .hook(s, mw, HookInput::OnFinish(summary), cx)
            .await
            .reject
        {
            Some(msg) => Ok(msg),
            None => Err(Stop::at(End::Finished)),
        }
    }

    /// Validates, runs middleware around, and executes one tool call.
    async fn call_tool(
        &self,
        call: &ToolCall,
        p: &Profile<'_>,
        s: &mut Session<'_>,
        mw: &mut Stack,
        cx: &Cx<'_>,
    ) -> ToolResult {
        let t0 = Instant::now();
        let mut args = call.arguments.clone();
        let result = 'r: {
            let Some(def) = p.tools.iter().find(|t| t.name == call.name) else {
                let names: Vec<&str> = p.tools.iter().map(|t| t.name.as_str()).collect();
                break 'r ToolResult::fail(
                    text::say("tools", "unknown_tool", context! { name => &call.name }),
                    Some(&text::say("tools", "available_tools", context! { names })),
                );
            };
            if let Value::String(raw) = &args {
                let raw: String = raw.chars().take(200).collect();
                let e = text::say("tools", "not_an_object", context! { raw });
                break 'r tools::invalid_args(&def.name, &[e], &def.input_schema);
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
            let before = self
                .hook(s, mw, HookInput::BeforeTool(&def.name, &args), cx)
                .await;
            if let Some(a) = before.args {
                args = a;
            }
            if let Some((name, message)) = before.block {
                break 'r ToolResult {
                    ok: false,
                    output: message,
                    error: Some(text::say("middleware", "blocked", context! { name })),
                    ..Default::default()
                };
            }
            let budget = s.remaining();
            let mut r = match &def.implementation {
                ToolImpl::Builtin(BuiltinTool::Delegate) => self.delegate(&args, p, s, cx).await,
                ToolImpl::Builtin(b) => {
                    tools::run_builtin(*b, def, &args, cx.sb, &self.harness, budget).await
                }
                ToolImpl::Script(rel) => tools::run_script(def, rel, &args, cx.sb, budget).await,
            };
            let after = self
                .hook(s, mw, HookInput::AfterTool(&def.name, &args, &r), cx)
                .await;
            if let Some(output) = after.output {
                r.truncated = Some(true);
                r.output = output;
            }
            r
        };
        let obs = result.observation();
        s.tool_event(ToolEvent {
            id: &call.id,
            name: &call.name,
            args: &args,
            output: &obs,
            ok: result.ok,
            exit_code: result.exit_code,
            truncated: result.truncated.unwrap_or(false),
            error: result.error.as_deref(),
            duration: t0.elapsed(),
        });
        result
    }

    /// The `delegate` tool: runs a sub-agent's own loop in the same sandbox.
    async fn delegate(
        &self,
        args: &Value,
        p: &Profile<'_>,
        s: &mut Session<'_>,
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
                text::say("tools", "no_subagent", context! { name }),
                Some(&text::say(
                    "tools",
                    "available_subagents",
                    context! { names },
                )),
            );
        };
        if p.name != "main" {
            let msg = text::say("tools", "no_nested_delegation", context! {});
            return ToolResult::fail(msg, None);
        }
        let tools: Vec<&ToolDef> = sub
            .tools
            .iter()
            .filter_map(|t| self.harness.tool(t))
            .filter(|t| t.implementation != ToolImpl::Builtin(BuiltinTool::Delegate))
            .collect();
        let deadline = p
            .deadline
            .min(Instant::now() + Duration::from_secs_f64(sub.timeout_sec));
        let system = self.system_prompt(
            &sub.prompt,
            &tools,
            cx.sb.workdir(),
            (
                deadline.saturating_duration_since(Instant::now()),
                sub.max_turns,
            ),
        );
        let sp = Profile {
            name: &sub.name,
            system,
            tools,
            max_turns: sub.max_turns,
            deadline,
        };
        let out = Box::pin(self.run_loop(&sp, task, cx)).await;
        s.usage.add(&out.usage);
        s.cost += out.cost_usd;
        let text = out.final_message.unwrap_or_default();
        ToolResult {
            ok: out.end == End::Finished,
            output: text,
            error: (out.end != End::Finished).then(|| {
                let end = out.end.name();
                text::say("tools", "subagent_ended", context! { name, end })
            }),
            summary: Some(text::say(
                "tools",
                "subagent_turns",
                context! { turns => out.turns },
            )),
            ..Default::default()
        }
    }
}

/// The code agent's (and a sub-agent's) hooks into the shared loop: the harness's
/// middleware around every step, its tool protocol, its finish hooks and tools.
struct CodeAgent<'r> {
    rt: &'r Runtime,
    p: &'r Profile<'r>,
    cx: &'r Cx<'r>,
    mw: Stack,
    wire: Wire,
}

#[async_trait::async_trait]
impl Agent for CodeAgent<'_> {
    async fn before_model(&mut self, s: &mut Session<'_>, _turn: u32) -> ToolChoice {
        let hook = HookInput::BeforeModel(&s.messages);
        let before = self.rt.hook(s, &mut self.mw, hook, self.cx).await;
        if let Some(m) = before.messages {
            s.messages = m;
        }
        ToolChoice::Auto
    }

    async fn after_model(&mut self, s: &mut Session<'_>, mut resp: ChatResponse) -> Reply {
        let hook = HookInput::AfterModel(&resp);
        let after = self.rt.hook(s, &mut self.mw, hook, self.cx).await;
        if let Some(text) = after.output {
            resp.content = Some(text);
        }
        let (calls, format_error) = self.wire.parse(&resp);
        s.messages.push(self.wire.assistant(&resp));
        if let Some(m) = after.messages {
            s.messages = m;
        }
        if let Some((_, message)) = after.block {
            if self.wire.0 == ToolProtocol::Native {
                let mut obs = self.wire.observations();
                let not_run = text::say("middleware", "not_run", context! {});
                calls.iter().for_each(|c| obs.push(c, &not_run));
                obs.send(&mut s.messages);
            }
            s.messages.push(Message::user(message));
            return Reply::Handled;
        }
        if let Some(err) = format_error {
            s.error("format", &err);
            let names: Vec<String> = self.p.tools.iter().map(|t| t.name.clone()).collect();
            s.messages
                .push(Message::user(prompt::json_format_error(&err, &names)));
            return Reply::Handled;
        }
        s.keep_text(&resp);
        match calls.is_empty() {
            true => Reply::Answer(resp.content.unwrap_or_default()),
            false => Reply::Calls(calls),
        }
    }

    async fn answer(&mut self, s: &mut Session<'_>, text: String) -> Result<String, Stop> {
        self.rt.finish(s, &mut self.mw, self.cx, &text).await
    }

    async fn tool(&mut self, s: &mut Session<'_>, call: &ToolCall) -> Result<String, Stop> {
        if !self.rt.is_finish(self.p, call) {
            let r = self
                .rt
                .call_tool(call, self.p, s, &mut self.mw, self.cx)
                .await;
            return Ok(r.observation());
        }
        let summary = call.arguments.get("summary").and_then(Value::as_str);
        let summary = summary.unwrap_or("");
        let r = self.rt.finish(s, &mut self.mw, self.cx, summary).await;
        if r.is_err() && !summary.is_empty() {
            s.final_text = Some(summary.to_string());
        }
        r
    }
}
