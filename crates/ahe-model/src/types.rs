//! The provider-neutral chat types every provider speaks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which role a call is made for: the three agent roles and the optional trajectory judge
/// (accounting and mock scripts use it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The harness-driven agent that solves benchmark tasks.
    CodeAgent,
    /// The agent that explains failures.
    Debugger,
    /// The agent that edits the harness.
    Evolve,
    /// The optional trajectory judge: reads a passing trial's trace and says whether the
    /// task was solved or the check gamed.
    Judge,
}

impl Role {
    /// The snake_case name used in configs, scripts and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::CodeAgent => "code_agent",
            Role::Debugger => "debugger",
            Role::Evolve => "evolve",
            Role::Judge => "judge",
        }
    }
}

/// One tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned call id (echoed back in the tool message).
    pub id: String,
    /// Tool name as the model wrote it (may name a tool that does not exist).
    pub name: String,
    /// Parsed arguments; when the model's argument text is not JSON this is `Value::String(raw)`.
    pub arguments: Value,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// System prompt.
    System {
        /// Text.
        content: String,
    },
    /// User turn (task instruction, or runtime feedback in the JSON-in-text protocol).
    User {
        /// Text.
        content: String,
    },
    /// Model turn.
    Assistant {
        /// Free text, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// Tool calls, possibly none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Provider items that must go back unchanged in later turns (Anthropic thinking
        /// blocks with their signatures, Responses API reasoning items); opaque to ahe.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        opaque: Vec<Value>,
    },
    /// Result of one tool call.
    Tool {
        /// The id of the call this answers.
        tool_call_id: String,
        /// The tool's name.
        name: String,
        /// Observation text shown to the model.
        content: String,
    },
}

impl Message {
    /// A system message.
    pub fn system(s: impl Into<String>) -> Self {
        Message::System { content: s.into() }
    }
    /// A user message.
    pub fn user(s: impl Into<String>) -> Self {
        Message::User { content: s.into() }
    }
    /// An assistant message with no provider items attached.
    pub fn assistant(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message::Assistant {
            content,
            tool_calls,
            opaque: vec![],
        }
    }
    /// The text of the message (tool calls not included).
    pub fn text(&self) -> &str {
        match self {
            Message::System { content } | Message::User { content } => content,
            Message::Tool { content, .. } => content,
            Message::Assistant { content, .. } => content.as_deref().unwrap_or(""),
        }
    }
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What the tool does, as the model reads it.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
}

/// How tools are offered to the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolProtocol {
    /// Provider-native tool calling (`tools` in the request, `tool_calls` in the answer).
    #[default]
    Native,
    /// Tools described in the prompt; the model answers `{"tool": NAME, "args": {...}}` in text.
    JsonInText,
}

/// Whether the model may call a tool this turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model calls a tool or answers, as it likes.
    #[default]
    Auto,
    /// The model must answer in text; the tools stay described (the conversation may
    /// hold earlier calls) but cannot be called (OpenAI `"none"`, Anthropic `{"type":
    /// "none"}`, the local model's grammar admits only the answer).
    None,
}

impl ToolChoice {
    /// Whether this is the default, [`ToolChoice::Auto`].
    pub fn is_auto(&self) -> bool {
        *self == ToolChoice::Auto
    }
}

/// One chat-completion request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Role the call is made for.
    pub role: Role,
    /// Conversation so far.
    pub messages: Vec<Message>,
    /// Tools available this turn (sent natively only with `ToolProtocol::Native`).
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// How the tools are offered.
    #[serde(default)]
    pub protocol: ToolProtocol,
    /// Sampling temperature, if set.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Output token cap, if set.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Whether a tool may be called this turn.
    #[serde(default, skip_serializing_if = "ToolChoice::is_auto")]
    pub tool_choice: ToolChoice,
}

impl ChatRequest {
    /// The system prompt text ("" when there is none).
    pub fn system_prompt(&self) -> &str {
        self.messages
            .iter()
            .find_map(|m| match m {
                Message::System { content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or("")
    }
    /// Number of assistant turns already in the conversation.
    pub fn assistant_turns(&self) -> usize {
        self.messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count()
    }
}

/// Token counts of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens (including cached reads and cache writes).
    pub input_tokens: u64,
    /// Of the prompt tokens, how many were read from the provider's prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Completion tokens (reasoning/thinking tokens included).
    pub output_tokens: u64,
    /// Of the prompt tokens, how many were written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`; priced apart).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_input_tokens: u64,
    /// Of the completion tokens, how many were reasoning (OpenAI `reasoning_tokens`;
    /// Anthropic thinking, estimated from the thinking text).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Prompt and completion tokens with no cache or reasoning detail.
    pub fn new(input_tokens: u64, cached_input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            cached_input_tokens,
            output_tokens,
            ..Usage::default()
        }
    }
    /// Adds another usage into this one.
    pub fn add(&mut self, o: &Usage) {
        self.input_tokens += o.input_tokens;
        self.cached_input_tokens += o.cached_input_tokens;
        self.output_tokens += o.output_tokens;
        self.cache_write_input_tokens += o.cache_write_input_tokens;
        self.reasoning_tokens += o.reasoning_tokens;
    }
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// The model's answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// Free text, if any.
    pub content: Option<String>,
    /// Tool calls, possibly none.
    pub tool_calls: Vec<ToolCall>,
    /// Token usage reported (or estimated) for this call.
    pub usage: Usage,
    /// Provider's stop reason, if given.
    pub finish_reason: Option<String>,
    /// Cost of this call in USD (filled by the client from configured prices).
    #[serde(default)]
    pub cost_usd: f64,
    /// Provider items to send back unchanged with this turn (see [`Message::Assistant`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opaque: Vec<Value>,
}

impl ChatResponse {
    /// The assistant message to append to the conversation (provider items included).
    pub fn to_message(&self) -> Message {
        Message::Assistant {
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
            opaque: self.opaque.clone(),
        }
    }
}

/// Why a model call failed, by what the caller should do about it.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ModelError {
    /// 429, 5xx, timeout, connection reset: retry with backoff.
    #[error("transient model error: {message}")]
    Transient {
        /// What happened.
        message: String,
        /// Server's Retry-After, in seconds, when given.
        retry_after_sec: Option<f64>,
    },
    /// The response could not be parsed: retry a bounded number of times.
    #[error("malformed model response: {0}")]
    Malformed(String),
    /// 401/403/404 and other errors retrying cannot fix: stop the run.
    #[error("permanent model error: {0}")]
    Permanent(String),
    /// The request exceeded the model's context window.
    #[error("context length exceeded: {0}")]
    ContextLength(String),
    /// The run's budget is spent: the call was refused before reaching the provider.
    #[error("budget exhausted: {0}")]
    Budget(String),
}

impl ModelError {
    /// Short class name used in fault counters ("transient", "malformed", ...).
    pub fn class(&self) -> &'static str {
        match self {
            ModelError::Transient { .. } => "transient",
            ModelError::Malformed(_) => "malformed",
            ModelError::Permanent(_) => "permanent",
            ModelError::ContextLength(_) => "context_length",
            ModelError::Budget(_) => "budget",
        }
    }
    /// Whether the request never reached a server (refused connection, DNS or TLS failure):
    /// waiting does not change that answer the way it can for a 429 or a 5xx.
    pub fn is_cannot_connect(&self) -> bool {
        matches!(self, ModelError::Transient { message, .. } if message.starts_with(CANNOT_CONNECT))
    }
    /// Whether the client should retry the call.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ModelError::Transient { .. } | ModelError::Malformed(_)
        )
    }
}

/// How a transient error that never reached the server (nothing listens, DNS, TLS set-up)
/// begins: `ahe check` does not wait out retries for it.
pub const CANNOT_CONNECT: &str = "cannot connect to";

/// A chat model backend (one HTTP API, the embedded model, or the mock).
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// Provider and model, e.g. `openai:gpt-4o` (for logs and results).
    fn describe(&self) -> String;
    /// Performs one call, without retries (the client retries).
    async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError>;
}
