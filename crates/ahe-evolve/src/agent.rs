//! The host-side agent loop of the debugger and evolve agents: fixed prompts, jailed tools
//! implemented in Rust, the same model client and trace format as the code agent.

use std::time::{Duration, Instant};

use ahe_harness::trace::{Event, TraceWriter};
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
    let name = role.as_str();
    let specs: Vec<ToolSpec> = tools.iter().map(|t| t.spec()).collect();
    let deadline = Instant::now() + limits.timeout;
    trace.emit(&Event::RunStart {
        agent: name,
        model: &model.describe(),
        protocol: "native",
        tools: specs.iter().map(|s| s.name.as_str()).collect(),
        limits: serde_json::json!({"max_turns": limits.max_turns, "timeout_sec": limits.timeout.as_secs_f64()}),
    });
    trace.emit(&Event::Message {
        agent: name,
        role: "system",
        content: system,
    });
    trace.emit(&Event::Message {
        agent: name,
        role: "user",
        content: user,
    });
    let mut messages = vec![Message::system(system), Message::user(user)];
    let mut out = HostOutcome {
        final_text: None,
        stopped_by_tool: false,
        turns: 0,
        usage: Usage::default(),
        cost_usd: 0.0,
        error: None,
    };
    let end = 'run: loop {
        if out.turns >= limits.max_turns {
            break "turn_limit";
        }
        out.turns += 1;
        let last = limits
            .last_turn_note
            .filter(|_| out.turns == limits.max_turns);
        if let Some(note) = last.filter(|_| out.turns > 1) {
            trace.emit(&Event::Message {
                agent: name,
                role: "user",
                content: note,
            });
            messages.push(Message::user(note));
        }
        let req = ChatRequest {
            role,
            messages: messages.clone(),
            tools: specs.clone(),
            protocol: ToolProtocol::Native,
            temperature: None,
            max_tokens: None,
            tool_choice: if last.is_some() {
                ToolChoice::None
            } else {
                ToolChoice::Auto
            },
        };
        let t0 = Instant::now();
        let remaining = deadline.saturating_duration_since(Instant::now());
        let resp = match tokio::time::timeout(remaining, model.chat(&req)).await {
            Err(_) => break "timeout",
            Ok(Err(e)) => {
                let msg = e.to_string();
                trace.emit(&Event::Error {
                    agent: name,
                    turn: out.turns,
                    kind: e.class(),
                    message: &msg,
                });
                out.error = Some(msg);
                break "model_error";
            }
            Ok(Ok(r)) => r,
        };
        out.usage.add(&resp.usage);
        out.cost_usd += resp.cost_usd;
        trace.emit(&Event::Assistant {
            agent: name,
            turn: out.turns,
            content: resp.content.as_deref(),
            tool_calls: &resp.tool_calls,
            usage: resp.usage,
            cost_usd: resp.cost_usd,
            duration_ms: t0.elapsed().as_millis() as u64,
        });
        if resp
            .content
            .as_deref()
            .is_some_and(|c| !c.trim().is_empty())
        {
            out.final_text = resp.content.clone();
        }
        messages.push(resp.to_message());
        if resp.tool_calls.is_empty() {
            break "finished";
        }
        for call in &resp.tool_calls {
            let (text, stop) = dispatch(tools, call).await;
            trace.emit(&Event::ToolCall {
                agent: name,
                turn: out.turns,
                id: &call.id,
                name: &call.name,
                args: &call.arguments,
                output: &text,
                ok: !text.starts_with("[error]"),
                exit_code: None,
                truncated: false,
                error: None,
                duration_ms: 0,
            });
            messages.push(Message::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content: text,
            });
            if stop {
                out.stopped_by_tool = true;
                break 'run "stopped_by_tool";
            }
        }
    };
    trace.emit(&Event::RunEnd {
        agent: name,
        end,
        turns: out.turns,
        usage: out.usage,
        cost_usd: out.cost_usd,
        final_message: out.final_text.as_deref(),
    });
    out
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
