//! One agent conversation: the core that both agent loops share (the harness runtime's code
//! agent and its sub-agents; the debugger and evolve agents on the host). It owns the trace
//! writer calls, the limits check, the timed and traced model call with its usage sums, and
//! the one way a loop stops: a [`Stop`] propagated with `?`, turned into the run's outcome
//! (and its `run_end` event) by [`Session::end`].

use std::time::{Duration, Instant};

use ahe_model::{ChatRequest, ChatResponse, Message, ModelClient, ModelError, ToolProtocol, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::trace::{Event, TraceWriter};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// The model finished and every on_finish hook accepted.
    Finished,
    /// A tool ended the run (e.g. the evolve agent's accepted manifest).
    StoppedByTool,
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

impl End {
    /// snake_case name (as in traces and results).
    pub fn name(self) -> &'static str {
        match self {
            End::Finished => "finished",
            End::StoppedByTool => "stopped_by_tool",
            End::Timeout => "timeout",
            End::TurnLimit => "turn_limit",
            End::TokenLimit => "token_limit",
            End::ContextExceeded => "context_exceeded",
            End::ModelError => "model_error",
            End::Fatal => "fatal",
        }
    }
}

/// Why a loop stops, with the error text of a model failure; every check returns it as
/// `Err`, so a loop leaves by `?` only.
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    /// How the run ended.
    pub end: End,
    /// The model error, when it ended on one.
    pub error: Option<String>,
}

impl Stop {
    /// A stop without an error.
    pub fn at(end: End) -> Stop {
        Stop { end, error: None }
    }

    /// How a model error stops a run (a context overflow that compaction could not fix,
    /// a permanent error, or anything else after the client's retries).
    pub fn on_model_error(e: &ModelError) -> Stop {
        let end = match e {
            ModelError::ContextLength(_) => End::ContextExceeded,
            ModelError::Permanent(_) => End::Fatal,
            _ => End::ModelError,
        };
        Stop {
            end,
            error: Some(e.to_string()),
        }
    }
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

/// The limits of one conversation.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Maximum model turns.
    pub max_turns: u32,
    /// When the wall-time budget runs out.
    pub deadline: Instant,
    /// Token budget (input + output), if any.
    pub max_tokens: Option<u64>,
}

/// What a model call failed with: the deadline, or the model's own error.
#[derive(Debug)]
pub enum CallError {
    /// The wall-time budget ran out during the call.
    Timeout,
    /// The model client's error (after its retries).
    Model(ModelError),
}

impl From<CallError> for Stop {
    fn from(e: CallError) -> Stop {
        match e {
            CallError::Timeout => Stop::at(End::Timeout),
            CallError::Model(m) => Stop::on_model_error(&m),
        }
    }
}

/// One tool call as the trace records it.
pub struct ToolEvent<'a> {
    /// Call id.
    pub id: &'a str,
    /// Tool name.
    pub name: &'a str,
    /// Arguments (after middleware).
    pub args: &'a Value,
    /// Observation text given to the model.
    pub output: &'a str,
    /// Whether the tool reported success.
    pub ok: bool,
    /// Exit code, for commands.
    pub exit_code: Option<i32>,
    /// Whether output was cut.
    pub truncated: bool,
    /// Error text.
    pub error: Option<&'a str>,
    /// Wall time of the call.
    pub duration: Duration,
}

/// One agent conversation in progress.
pub struct Session<'a> {
    agent: &'a str,
    trace: &'a TraceWriter,
    limits: Limits,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tokens of every call (and of nested agents added by the caller).
    pub usage: Usage,
    /// Dollars of every call (and of nested agents added by the caller).
    pub cost: f64,
    /// Turns taken.
    pub turns: u32,
    /// The last non-empty text of the model.
    pub final_text: Option<String>,
}

impl<'a> Session<'a> {
    /// Starts a conversation: traces `run_start` and the system and user messages.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        agent: &'a str,
        trace: &'a TraceWriter,
        model: &str,
        protocol: ToolProtocol,
        tools: Vec<&str>,
        limits: Limits,
        system: &str,
        user: &str,
    ) -> Session<'a> {
        let mut lim = serde_json::json!({
            "max_turns": limits.max_turns,
            "timeout_sec": limits.deadline.saturating_duration_since(Instant::now()).as_secs_f64(),
        });
        if let Some(t) = limits.max_tokens {
            lim["max_total_tokens"] = t.into();
        }
        trace.emit(&Event::RunStart {
            agent,
            model,
            protocol: match protocol {
                ToolProtocol::Native => "native",
                ToolProtocol::JsonInText => "json_in_text",
            },
            tools,
            limits: lim,
        });
        for (role, content) in [("system", system), ("user", user)] {
            trace.emit(&Event::Message {
                agent,
                role,
                content,
            });
        }
        Session {
            agent,
            trace,
            limits,
            messages: vec![Message::system(system), Message::user(user)],
            usage: Usage::default(),
            cost: 0.0,
            turns: 0,
            final_text: None,
        }
    }

    /// The agent's name in the trace.
    pub fn agent(&self) -> &'a str {
        self.agent
    }

    /// The trace writer.
    pub fn trace(&self) -> &'a TraceWriter {
        self.trace
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Wall time left.
    pub fn remaining(&self) -> Duration {
        self.limits
            .deadline
            .saturating_duration_since(Instant::now())
    }

    /// Starts the next turn, or stops on the turn limit, the deadline or the token budget.
    pub fn next_turn(&mut self) -> Result<u32, Stop> {
        if self.turns >= self.limits.max_turns {
            return Err(Stop::at(End::TurnLimit));
        }
        if Instant::now() >= self.limits.deadline {
            return Err(Stop::at(End::Timeout));
        }
        if self
            .limits
            .max_tokens
            .is_some_and(|m| self.usage.total() >= m)
        {
            return Err(Stop::at(End::TokenLimit));
        }
        self.turns += 1;
        Ok(self.turns)
    }

    /// Adds a user message to the conversation and the trace.
    pub fn note(&mut self, text: &str) {
        self.trace.emit(&Event::Message {
            agent: self.agent,
            role: "user",
            content: text,
        });
        self.messages.push(Message::user(text));
    }

    /// Calls the model within the deadline; traces the answer (or the error) and adds its
    /// usage.
    pub async fn call(
        &mut self,
        model: &ModelClient,
        req: &ChatRequest,
    ) -> Result<ChatResponse, CallError> {
        let t0 = Instant::now();
        let r = match tokio::time::timeout(self.remaining(), model.chat(req)).await {
            Err(_) => return Err(CallError::Timeout),
            Ok(Err(e)) => {
                self.error(e.class(), &e.to_string());
                return Err(CallError::Model(e));
            }
            Ok(Ok(r)) => r,
        };
        self.usage.add(&r.usage);
        self.cost += r.cost_usd;
        self.trace.emit(&Event::Assistant {
            agent: self.agent,
            turn: self.turns,
            content: r.content.as_deref(),
            tool_calls: &r.tool_calls,
            usage: r.usage,
            cost_usd: r.cost_usd,
            duration_ms: t0.elapsed().as_millis() as u64,
        });
        Ok(r)
    }

    /// Keeps an answer's text as the run's final text, when it has one.
    pub fn keep_text(&mut self, r: &ChatResponse) {
        if r.content.as_deref().is_some_and(|c| !c.trim().is_empty()) {
            self.final_text = r.content.clone();
        }
    }

    /// Traces an error of this turn (a model failure, a format error...).
    pub fn error(&self, kind: &str, message: &str) {
        self.trace.emit(&Event::Error {
            agent: self.agent,
            turn: self.turns,
            kind,
            message,
        });
    }

    /// Traces a tool call of this turn.
    pub fn tool_event(&self, e: ToolEvent<'_>) {
        self.trace.emit(&Event::ToolCall {
            agent: self.agent,
            turn: self.turns,
            id: e.id,
            name: e.name,
            args: e.args,
            output: e.output,
            ok: e.ok,
            exit_code: e.exit_code,
            truncated: e.truncated,
            error: e.error,
            duration_ms: e.duration.as_millis() as u64,
        });
    }

    /// Ends the conversation: traces `run_end` and returns the outcome.
    pub fn end(self, stop: Stop) -> RunOutcome {
        self.trace.emit(&Event::RunEnd {
            agent: self.agent,
            end: stop.end.name(),
            turns: self.turns,
            usage: self.usage,
            cost_usd: self.cost,
            final_message: self.final_text.as_deref(),
        });
        RunOutcome {
            end: stop.end,
            turns: self.turns,
            usage: self.usage,
            cost_usd: self.cost,
            final_message: self.final_text,
            error: stop.error,
        }
    }
}
