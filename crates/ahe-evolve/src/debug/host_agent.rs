//! The debugger's and evolve agent's ways in the one agent loop body (`ahe_harness::agent_loop`):
//! fixed prompts, jailed tools implemented in Rust, a last turn that may be forced to an answer;
//! the same limits, trace, compaction and stop reasons as the code agent.

use std::time::{Duration, Instant};

use ahe_harness::agent_loop::{self, Agent, Reply, Request};
use ahe_harness::session::{End, Limits, Session, Stop, ToolEvent};
use ahe_harness::TraceWriter;
use ahe_model::{
    ChatResponse, ModelClient, Role, ToolCall, ToolChoice, ToolProtocol, ToolSpec, Usage,
};
use minijinja::context;
use serde_json::Value;

use crate::debug::text::agent_says;

/// What a host tool answers.
pub enum ToolReply {
    /// Observation text; the loop goes on.
    Text(String),
    /// An error the model sees; the loop goes on.
    Error(String),
    /// Observation text, and the agent is done (e.g. a manifest was accepted).
    Stop(String),
}

/// A tool of a host-side agent.
#[async_trait::async_trait]
pub trait HostTool: Send + Sync {
    /// Name, description and schema offered to the model.
    fn spec(&self) -> ToolSpec;
    /// Runs the call.
    async fn call(&self, args: &Value) -> ToolReply;
}

/// How a host agent run ended.
#[derive(Debug, Clone)]
pub struct HostOutcome {
    /// The last text the model wrote (its report, for the debugger).
    pub final_text: Option<String>,
    /// Whether a tool stopped the run (e.g. an accepted manifest).
    pub stopped_by_tool: bool,
    /// Turns taken.
    pub turns: u32,
    /// Tokens.
    pub usage: Usage,
    /// Cost.
    pub cost_usd: f64,
    /// Model error, if the run ended on one.
    pub error: Option<String>,
}

/// Limits of one host agent run.
#[derive(Debug, Clone, Copy)]
pub struct HostLimits {
    /// Maximum model turns.
    pub max_turns: u32,
    /// Wall-time limit.
    pub timeout: Duration,
    /// A note that makes the last turn a text answer: appended as a user message, and no
    /// tool may be called on that turn. The debugger's report is its answer, so a run that
    /// spent its turns on tool calls still reports.
    pub last_turn_note: Option<&'static str>,
}

/// Runs a host agent until it answers without a tool call, a tool stops it, or a limit hits;
/// the turns are the shared loop body's ([`agent_loop::run`]), the role's ways are [`Host`].
pub async fn run_host_agent(
    model: &ModelClient,
    role: Role,
    system: &str,
    user: &str,
    tools: &[Box<dyn HostTool>],
    limits: HostLimits,
    trace: &TraceWriter,
) -> HostOutcome {
    let req = Request {
        role,
        tools: tools.iter().map(|t| t.spec()).collect(),
        protocol: ToolProtocol::Native,
    };
    let lim = Limits {
        max_turns: limits.max_turns,
        deadline: Instant::now() + limits.timeout,
        max_tokens: None,
    };
    let names: Vec<&str> = req.tools.iter().map(|s| s.name.as_str()).collect();
    let model_name = model.describe();
    let s = Session::start(
        role.as_str(),
        trace,
        &model_name,
        req.protocol,
        names,
        lim,
        system,
        user,
    );
    let out = agent_loop::run(s, model, &req, &mut Host { tools, limits }).await;
    HostOutcome {
        stopped_by_tool: out.end == End::StoppedByTool,
        final_text: out.final_message,
        turns: out.turns,
        usage: out.usage,
        cost_usd: out.cost_usd,
        error: out.error,
    }
}

/// A host agent's hooks into the shared loop: its last turn may be forced to an answer, an
/// answer ends the run, and a tool may end it too.
struct Host<'a> {
    tools: &'a [Box<dyn HostTool>],
    limits: HostLimits,
}

#[async_trait::async_trait]
impl Agent for Host<'_> {
    async fn before_model(&mut self, s: &mut Session<'_>, turn: u32) -> ToolChoice {
        let last = self
            .limits
            .last_turn_note
            .filter(|_| turn == self.limits.max_turns);
        if let Some(note) = last.filter(|_| turn > 1) {
            s.note(note);
        }
        match last {
            Some(_) => ToolChoice::None,
            None => ToolChoice::Auto,
        }
    }

    async fn after_model(&mut self, s: &mut Session<'_>, resp: ChatResponse) -> Reply {
        s.keep_text(&resp);
        s.messages.push(resp.to_message());
        match resp.tool_calls.is_empty() {
            true => Reply::Answer(resp.content.unwrap_or_default()),
            false => Reply::Calls(resp.tool_calls),
        }
    }

    async fn answer(&mut self, _s: &mut Session<'_>, _text: String) -> Result<String, Stop> {
        Err(Stop::at(End::Finished))
    }

    async fn tool(&mut self, s: &mut Session<'_>, call: &ToolCall) -> Result<String, Stop> {
        let t0 = Instant::now();
        let (text, stop) = dispatch(self.tools, call).await;
        s.tool_event(ToolEvent {
            id: &call.id,
            name: &call.name,
            args: &call.arguments,
            output: &text,
            ok: !text.starts_with("[error]"),
            exit_code: None,
            truncated: false,
            error: None,
            duration: t0.elapsed(),
        });
        match stop {
            true => Err(Stop::at(End::StoppedByTool)),
            false => Ok(text),
        }
    }
}

async fn dispatch(tools: &[Box<dyn HostTool>], call: &ToolCall) -> (String, bool) {
    let Some(tool) = tools.iter().find(|t| t.spec().name == call.name) else {
        let names: Vec<String> = tools.iter().map(|t| t.spec().name).collect();
        let ctx = context! { name => &call.name, available => names };
        return (error(agent_says("unknown_tool", ctx)), false);
    };
    if !call.arguments.is_object() {
        return (error(agent_says("not_an_object", context! {})), false);
    }
    match tool.call(&call.arguments).await {
        ToolReply::Text(t) => (t, false),
        ToolReply::Error(e) => (error(e), false),
        ToolReply::Stop(t) => (t, true),
    }
}

/// A tool's error as the model reads it (`[error] …`).
fn error(message: String) -> String {
    agent_says("error", context! { message })
}

/// A string argument, or an error naming it.
pub fn arg_str<'a>(args: &'a Value, k: &str) -> Result<&'a str, String> {
    args.get(k)
        .and_then(Value::as_str)
        .ok_or_else(|| agent_says("missing_arg", context! { key => k }))
}

/// A JSON schema object with string properties (all required unless listed in `optional`).
pub fn schema(props: &[(&str, &str)], optional: &[&str]) -> Value {
    let mut p = serde_json::Map::new();
    for (k, ty) in props {
        p.insert(k.to_string(), serde_json::json!({"type": ty}));
    }
    let req: Vec<&str> = props
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| !optional.contains(k))
        .collect();
    let mut s = serde_json::json!({"type": "object", "properties": p, "required": req});
    if props.is_empty() {
        // A tool without arguments takes `{}` (a grammar-constrained model writes exactly that).
        s["additionalProperties"] = Value::Bool(false);
    }
    s
}

/// A permanent model error (bad key, unknown model, replay miss) stops the run: the
/// debugger and evolve agents would otherwise carry on without their model.
pub fn stop_on_permanent(
    client: Option<&ahe_model::ModelClient>,
    role: &str,
) -> anyhow::Result<()> {
    let Some(stats) = client.map(|c| c.stats()) else {
        return Ok(());
    };
    match stats.permanent_error() {
        Some(e) => anyhow::bail!("the {role} model cannot be used: {e}"),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahe_model::{build_client, ModelConfig};
    use ahe_testsupport::{ScriptedReply, TestServer};

    struct Echo;

    #[async_trait::async_trait]
    impl HostTool for Echo {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "echo".into(),
                description: "Echoes its text.".into(),
                input_schema: schema(&[("text", "string")], &[]),
            }
        }
        async fn call(&self, args: &Value) -> ToolReply {
            ToolReply::Text(arg_str(args, "text").unwrap_or("?").to_string())
        }
    }

    async fn run(
        note: Option<&'static str>,
        replies: Vec<ScriptedReply>,
    ) -> (HostOutcome, Vec<Value>) {
        run_turns(note, replies, 3).await
    }

    async fn run_turns(
        note: Option<&'static str>,
        replies: Vec<ScriptedReply>,
        max_turns: u32,
    ) -> (HostOutcome, Vec<Value>) {
        let server = TestServer::start(replies);
        let cfg = ModelConfig {
            provider: "openai".into(),
            model: "test-model".into(),
            base_url: Some(server.base_url()),
            api_key_env: Some("AHE_T_HOST_AGENT_KEY".into()),
            ..ModelConfig::default()
        };
        let model = build_client(&cfg).unwrap();
        let tools: Vec<Box<dyn HostTool>> = vec![Box::new(Echo)];
        let limits = HostLimits {
            max_turns,
            timeout: Duration::from_secs(30),
            last_turn_note: note,
        };
        let out = run_host_agent(
            &model,
            Role::Debugger,
            "sys",
            "task",
            &tools,
            limits,
            &TraceWriter::sink(),
        )
        .await;
        (out, server.bodies())
    }

    fn calls() -> Vec<ScriptedReply> {
        (0..3)
            .map(|_| ScriptedReply::tool_call("echo", r#"{"text": "again"}"#))
            .collect()
    }

    #[tokio::test]
    async fn the_last_turn_is_an_answer_when_a_note_is_set() {
        let mut replies = calls();
        replies[2] = ScriptedReply::text("## Failure summary\nIt looped.");
        let (out, bodies) = run(Some("Last turn: report now."), replies).await;
        assert_eq!(bodies.len(), 3);
        for b in &bodies[..2] {
            assert!(b.get("tool_choice").is_none(), "{b}");
        }
        let last = &bodies[2];
        assert_eq!(last["tool_choice"], "none");
        assert!(last["tools"].is_array(), "the tools stay described");
        let msgs = last["messages"].as_array().unwrap();
        let note = msgs.last().unwrap();
        assert_eq!(
            (note["role"].as_str(), note["content"].as_str()),
            (Some("user"), Some("Last turn: report now."))
        );
        assert_eq!(out.turns, 3);
        assert!(!out.stopped_by_tool);
        assert_eq!(
            out.final_text.as_deref(),
            Some("## Failure summary\nIt looped.")
        );
    }

    #[tokio::test]
    async fn without_a_note_every_turn_may_call_tools() {
        let (out, bodies) = run(None, calls()).await;
        assert_eq!(bodies.len(), 3);
        assert!(bodies.iter().all(|b| b.get("tool_choice").is_none()));
        assert_eq!(
            bodies[2]["messages"].as_array().unwrap().last().unwrap()["role"],
            "tool"
        );
        assert_eq!(out.final_text, None);
    }

    /// The debugger and evolve agent turn in the code agent's loop body: an overflowing
    /// context is compacted once and the call retried, not the end of the run.
    #[tokio::test]
    async fn a_host_agent_compacts_an_overflowing_context_and_goes_on() {
        let overflow = ScriptedReply::json(
            400,
            r#"{"error": {"message": "This model's maximum context length is 8192 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}"#,
        );
        let long = format!(r#"{{"text": "{}"}}"#, "x".repeat(3000));
        let mut replies: Vec<ScriptedReply> = (0..4)
            .map(|_| ScriptedReply::tool_call("echo", &long))
            .collect();
        replies.push(overflow);
        replies.push(ScriptedReply::text("done"));
        let (out, bodies) = run_turns(None, replies, 6).await;
        assert_eq!(bodies.len(), 6, "the overflowing call is retried once");
        assert_eq!(out.error, None, "{out:?}");
        assert_eq!(out.final_text.as_deref(), Some("done"));
        assert_eq!(out.turns, 5);
        let chars = |b: &Value| b["messages"].to_string().len();
        assert!(
            chars(&bodies[5]) + 3000 < chars(&bodies[4]),
            "the retry sends a compacted conversation: {} then {} chars",
            chars(&bodies[4]),
            chars(&bodies[5])
        );
        let first_tool = |b: &Value| {
            let m = b["messages"].as_array().unwrap();
            let t = m.iter().find(|m| m["role"] == "tool").unwrap();
            t["content"].as_str().unwrap().len()
        };
        assert_eq!(first_tool(&bodies[4]), 3000);
        assert!(first_tool(&bodies[5]) < 200, "the oldest output is elided");
    }
}
