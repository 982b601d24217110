//! What the OpenAI chat-completions and Responses request shapes share: the settings a
//! request carries beyond the conversation, `extra_body` merging, and tool-call arguments
//! as text.

use serde_json::{json, Map, Value};

use crate::config::frontier;
use crate::config::ModelConfig;

/// What an openai request carries beyond the conversation (from the model config).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatSettings {
    /// Model name.
    pub model: String,
    /// Output limit field of chat completions (`max_tokens` or `max_completion_tokens`).
    pub max_tokens_field: &'static str,
    /// `reasoning_effort` (chat) / `reasoning.effort` (responses), when set.
    pub reasoning_effort: Option<String>,
    /// `reasoning.summary` (responses), when set.
    pub reasoning_summary: Option<String>,
    /// `top_p`, when set.
    pub top_p: Option<f32>,
    /// Fields merged into every body.
    pub extra_body: Map<String, Value>,
    /// Whether the model is a reasoning family (Responses: ask for encrypted reasoning).
    pub reasoning_model: bool,
}

impl ChatSettings {
    /// The settings of `cfg` (`max_tokens_field = "auto"` resolved by model family).
    pub fn from_config(cfg: &ModelConfig) -> ChatSettings {
        ChatSettings {
            model: cfg.model.clone(),
            max_tokens_field: frontier::max_tokens_field(cfg),
            reasoning_effort: cfg.reasoning_effort.clone(),
            reasoning_summary: cfg.reasoning_summary.clone(),
            top_p: cfg.top_p,
            extra_body: cfg.extra_body.clone(),
            reasoning_model: frontier::is_reasoning_model(&cfg.model)
                || cfg.reasoning_effort.as_deref().is_some_and(|e| e != "none"),
        }
    }
    /// Plain settings for `model` (as `openai:MODEL` with no other fields).
    pub fn plain(model: &str) -> ChatSettings {
        ChatSettings::from_config(&ModelConfig {
            provider: "openai".into(),
            model: model.into(),
            ..ModelConfig::default()
        })
    }
}

/// Deep-merges `extra` into `body` (objects merge, everything else replaces).
pub fn merge_extra(body: &mut Value, extra: &Map<String, Value>) {
    for (k, v) in extra {
        match (body.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => {
                let mut inner = Value::Object(std::mem::take(b));
                merge_extra(&mut inner, o);
                body[k] = inner;
            }
            _ => body[k] = v.clone(),
        }
    }
}

/// The argument text sent back for a call (a raw string is sent verbatim).
pub fn arguments_text(args: &Value) -> String {
    match args {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// Parses a model's argument text: JSON when it parses, else `Value::String(raw)`;
/// empty text means no arguments (`{}`).
pub fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}
