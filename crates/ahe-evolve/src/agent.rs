//! The host-side agent loop of the debugger and evolve agents: fixed prompts, jailed tools
//! implemented in Rust, the same model client and trace format as the code agent.

use std::time::{Duration, Instant};

use std::convert::Infallible;

use ahe_harness::session::{End, Limits, Session, Stop, ToolEvent};
use ahe_harness::TraceWriter;
use ahe_model::{
    ChatRequest, Message, ModelClient, Role, ToolCall, ToolChoice, ToolProtocol, ToolSpec, Usage,
};
use minijinja::context;
use serde_json::Value;

use crate::text::agent_says;

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

/// Runs a host agent until it answers without a tool call, a tool stops it, or a limit hits.
pub async fn run_host_agent(
    model: &ModelClient,
    role: Role,
    system: &str,
    user: &str,
    tools: &[Box<dyn HostTool>],
    limits: HostLimits,
    trace: &TraceWriter,
) -> HostOutcome {
    let specs: Vec<ToolSpec> = tools.iter().map(|t| t.spec()).collect();
    let lim = Limits {
        max_turns: limits.max_turns,
        deadline: Instant::now() + limits.timeout,
        max_tokens: None,
    };
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let model_name = model.describe();
    let mut s = Session::start(
        role.as_str(),
        trace,
        &model_name,
        ToolProtocol::Native,
        names,
        lim,
        system,
        user,
    );
    let stop = match turns(&mut s, model, role, &specs, tools, limits).await {
        Err(stop) => stop,
        Ok(never) => match never {},
    };
    let out = s.end(stop);
    HostOutcome {
        stopped_by_tool: out.end == End::StoppedByTool,
        final_text: out.final_message,
        turns: out.turns,
        usage: out.usage,
        cost_usd: out.cost_usd,
        error: out.error,
    }
}

/// The turns of a host agent; leaves only by `?` with the [`Stop`].
async fn turns(
    s: &mut Session<'_>,
    model: &ModelClient,
    role: Role,
    specs: &[ToolSpec],
    tools: &[Box<dyn HostTool>],
    limits: HostLimits,
) -> Result<Infallible, Stop> {
    loop {
        let turn = s.next_turn()?;
        let last = limits.last_turn_note.filter(|_| turn == limits.max_turns);
        if let Some(note) = last.filter(|_| turn > 1) {
            s.note(note);
        }
        let req = ChatRequest {
            role,
            messages: s.messages.clone(),
            tools: specs.to_vec(),
            protocol: ToolProtocol::Native,
            temperature: None,
            max_tokens: None,
            tool_choice: if last.is_some() {
                ToolChoice::None
            } else {
                ToolChoice::Auto
            },
        };
        let resp = s.call(model, &req).await?;
        s.keep_text(&resp);
        s.messages.push(resp.to_message());
        if resp.tool_calls.is_empty() {
            return Err(Stop::at(End::Finished));
        }
        for call in &resp.tool_calls {
            let t0 = Instant::now();
            let (text, stop) = dispatch(tools, call).await;
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
            s.messages.push(Message::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content: text,
            });
            if stop {
                return Err(Stop::at(End::StoppedByTool));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use ahe_model::testserver::{ScriptedReply, TestServer};
    use ahe_model::{build_client, ModelConfig};

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
            max_turns: 3,
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
}
