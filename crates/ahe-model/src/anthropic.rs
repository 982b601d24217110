//! Anthropic Messages API provider (`POST {base_url}/v1/messages`).
//!
//! The system prompt goes in the top-level `system`; tools are `{name, description,
//! input_schema}` (native protocol only); assistant `tool_use` blocks map to our
//! [`ToolCall`]s, and our tool messages become `tool_result` blocks of a user message
//! (consecutive messages of the same role are merged, as the API wants them alternating).
//!
//! Prompt caching (`prompt_cache`, on by default) marks at most 4 `cache_control`
//! breakpoints: the last tool, the system prompt, the previous turn's last block and the
//! latest turn's last block, so each call reads the conversation so far from the cache.
//! Extended thinking (`thinking_budget_tokens`) keeps each reply's thinking blocks (with
//! their signatures) in the turn's `opaque` items and sends them back first, unchanged.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::config::ModelConfig;
use crate::http::{self, excerpt, Endpoint};
use crate::types::{
    ChatRequest, ChatResponse, Message, ModelError, Provider, ToolCall, ToolChoice, ToolProtocol,
    Usage,
};

/// Base URL used when neither the config nor `ANTHROPIC_BASE_URL` sets one.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header sent with every request.
pub const API_VERSION: &str = "2023-06-01";

use crate::config::frontier::ANTHROPIC_DEFAULT_MAX_TOKENS as DEFAULT_MAX_TOKENS;

/// Most `cache_control` breakpoints the API takes in one request.
pub const MAX_BREAKPOINTS: usize = 4;

/// What a Messages request carries beyond the conversation (from the model config).
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicSettings {
    /// Model name.
    pub model: String,
    /// Whether to mark cache breakpoints.
    pub prompt_cache: bool,
    /// Cache TTL (`1h`), when not the default 5 minutes.
    pub cache_ttl: Option<String>,
    /// Extended thinking budget, when on.
    pub thinking_budget: Option<u32>,
    /// `top_p`, when set (not sent with thinking on).
    pub top_p: Option<f32>,
}

impl AnthropicSettings {
    /// The settings of `cfg`.
    pub fn from_config(cfg: &ModelConfig) -> AnthropicSettings {
        AnthropicSettings {
            model: cfg.model.clone(),
            prompt_cache: cfg.prompt_cache_on(),
            cache_ttl: cfg.prompt_cache_ttl.clone().filter(|t| t != "5m"),
            thinking_budget: cfg.thinking_budget_tokens,
            top_p: cfg.top_p,
        }
    }
    /// Settings for `model` with caching off and no thinking (the 2024 request shape).
    pub fn plain(model: &str) -> AnthropicSettings {
        AnthropicSettings {
            model: model.into(),
            prompt_cache: false,
            cache_ttl: None,
            thinking_budget: None,
            top_p: None,
        }
    }
    fn cache_control(&self) -> Value {
        match &self.cache_ttl {
            Some(ttl) => json!({"type": "ephemeral", "ttl": ttl}),
            None => json!({"type": "ephemeral"}),
        }
    }
}

/// A provider speaking the Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    http: reqwest::Client,
    base_url: String,
    model: String,
    key_env: String,
    settings: AnthropicSettings,
}

impl AnthropicProvider {
    /// Builds the provider (base URL: config, else `ANTHROPIC_BASE_URL`, else the public API;
    /// a trailing `/v1` is accepted and dropped).
    pub fn new(cfg: &ModelConfig) -> anyhow::Result<AnthropicProvider> {
        let base_url = cfg
            .base_url
            .clone()
            .or_else(|| {
                std::env::var("ANTHROPIC_BASE_URL")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
        let base = base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base).to_string();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .context("building the HTTP client")?;
        Ok(AnthropicProvider {
            http,
            base_url: base,
            model: cfg.model.clone(),
            key_env: cfg.key_env(),
            settings: AnthropicSettings::from_config(cfg),
        })
    }

    /// The full Messages URL.
    pub fn endpoint(&self) -> String {
        format!("{}/v1/messages", self.base_url)
    }

    fn status_error(
        &self,
        status: u16,
        retry_after: Option<f64>,
        body: &str,
        key: Option<&str>,
    ) -> ModelError {
        let url = self.endpoint();
        let ep = Endpoint {
            url: &url,
            model: &self.model,
            key_env: &self.key_env,
        };
        http::status_error(&ep, status, retry_after, body, key)
    }
}

#[async_trait::async_trait]
impl Provider for AnthropicProvider {
    fn describe(&self) -> String {
        format!("anthropic:{}", self.model)
    }

    async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let url = self.endpoint();
        let key = http::key_from_env(&self.key_env);
        let mut rb = self
            .http
            .post(&url)
            .header("anthropic-version", API_VERSION)
            .json(&request_body(&self.settings, req));
        if let Some(k) = &key {
            rb = rb.header("x-api-key", k);
        }
        let a = http::send(rb, &url).await?;
        if !(200..300).contains(&a.status) {
            return Err(self.status_error(a.status, a.retry_after, &a.body, key.as_deref()));
        }
        parse_response(&a.body).map_err(|e| http::malformed_at(e, &url, key.as_deref()))
    }
}

/// The JSON request body for `req`.
pub fn request_body(s: &AnthropicSettings, req: &ChatRequest) -> Value {
    let system: Vec<&str> = req
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let mut messages = turns(&req.messages);
    let cc = s.cache_control();
    if s.prompt_cache {
        mark_turn_breakpoints(&mut messages, &cc);
    }
    let mut body = json!({
        "model": s.model,
        "max_tokens": req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
    });
    if !system.is_empty() {
        let text = system.join("\n\n");
        body["system"] = if s.prompt_cache {
            json!([{"type": "text", "text": text, "cache_control": cc}])
        } else {
            json!(text)
        };
    }
    if req.protocol == ToolProtocol::Native && !req.tools.is_empty() {
        add_tools(&mut body, s, req, &cc);
    }
    add_sampling(&mut body, s, req);
    body
}

/// The non-system messages as alternating `{role, content}` turns: blocks of consecutive
/// messages of one role merged, tool results as user blocks, empty messages dropped.
fn turns(msgs: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for m in msgs {
        let (role, blocks) = match m {
            Message::System { .. } => continue,
            Message::User { content } => ("user", text_block(content)),
            Message::Assistant {
                content,
                tool_calls,
                opaque,
            } => {
                let mut b: Vec<Value> = opaque.clone();
                b.extend(text_block(content.as_deref().unwrap_or("")));
                b.extend(tool_calls.iter().map(|c| {
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": tool_input(&c.arguments)})
                }));
                ("assistant", b)
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => (
                "user",
                vec![
                    json!({"type": "tool_result", "tool_use_id": tool_call_id, "content": content}),
                ],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, b)) if *r == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// Marks `cc` on the last cacheable block of the latest turn (the moving breakpoint) and of
/// the previous user turn (where the last call put its moving breakpoint), so a turn adding
/// many blocks still hits.
fn mark_turn_breakpoints(messages: &mut [Value], cc: &Value) {
    let last = messages.len().checked_sub(1);
    let prev_user = last.and_then(|l| {
        (0..l)
            .rev()
            .skip_while(|&i| messages[i]["role"] != "assistant")
            .find(|&i| messages[i]["role"] == "user")
    });
    for i in [prev_user, last].into_iter().flatten() {
        if let Some(b) = messages[i]["content"]
            .as_array_mut()
            .and_then(|b| b.iter_mut().rev().find(|b| is_cacheable(b)))
        {
            b["cache_control"] = cc.clone();
        }
    }
}

/// Adds `tools` (the last one a cache breakpoint when caching) and `tool_choice: none` when
/// the request forbids tool calls.
fn add_tools(body: &mut Value, s: &AnthropicSettings, req: &ChatRequest, cc: &Value) {
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
        .collect();
    if s.prompt_cache {
        if let Some(t) = tools.last_mut() {
            t["cache_control"] = cc.clone();
        }
    }
    body["tools"] = Value::Array(tools);
    if req.tool_choice == ToolChoice::None {
        body["tool_choice"] = json!({"type": "none"});
    }
}

/// Adds extended thinking when it fits the token limit, else `temperature` and `top_p`.
fn add_sampling(body: &mut Value, s: &AnthropicSettings, req: &ChatRequest) {
    // The API wants `max_tokens` above the thinking budget: an unset limit makes room for
    // the budget plus a default answer; a request capped at or below the budget (a one-token
    // probe of `ahe check`) is sent without thinking.
    let thinking = match (s.thinking_budget, req.max_tokens) {
        (Some(b), None) => {
            body["max_tokens"] = json!(b as u64 + DEFAULT_MAX_TOKENS as u64);
            Some(b)
        }
        (Some(b), Some(m)) if (m as u64) > b as u64 => Some(b),
        _ => None,
    };
    match thinking {
        Some(b) => body["thinking"] = json!({"type": "enabled", "budget_tokens": b}),
        None => {
            if let Some(t) = req.temperature {
                body["temperature"] = json!(t);
            }
            if let Some(p) = s.top_p {
                body["top_p"] = json!(p);
            }
        }
    }
}

/// Whether a block may carry `cache_control` (thinking blocks may not).
fn is_cacheable(b: &Value) -> bool {
    !matches!(
        b.get("type").and_then(Value::as_str),
        Some("thinking" | "redacted_thinking")
    )
}

/// Thinking tokens of a reply, estimated from the thinking text (the API bills them as
/// output and reports no separate count): about 4 characters a token.
pub fn estimate_thinking_tokens(blocks: &[Value]) -> u64 {
    let chars: usize = blocks
        .iter()
        .filter_map(|b| b.get("thinking").and_then(Value::as_str))
        .map(|t| t.chars().count())
        .sum();
    chars.div_ceil(4) as u64
}

/// A text block, or none for empty text (the API rejects empty text blocks).
fn text_block(text: &str) -> Vec<Value> {
    if text.is_empty() {
        vec![]
    } else {
        vec![json!({"type": "text", "text": text})]
    }
}

/// `tool_use.input` must be an object: arguments that were not JSON travel as `{"_raw": ...}`.
fn tool_input(args: &Value) -> Value {
    match args {
        Value::Object(_) => args.clone(),
        Value::Null => json!({}),
        other => json!({ "_raw": other }),
    }
}

/// Parses a 200 Messages response; a non-JSON body or one without `content` is `Malformed`.
pub fn parse_response(body: &str) -> Result<ChatResponse, ModelError> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| ModelError::Malformed(format!("body is not JSON ({e}): {}", excerpt(body))))?;
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ModelError::Malformed(format!("no content in: {}", excerpt(body))))?;
    let mut text = Vec::new();
    let mut tool_calls = Vec::new();
    let mut opaque = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(t) = b.get("text").and_then(Value::as_str) {
                    text.push(t);
                }
            }
            Some("tool_use") => {
                let name = b.get("name").and_then(Value::as_str).ok_or_else(|| {
                    ModelError::Malformed(format!("tool_use {i} without name: {}", excerpt(body)))
                })?;
                let id = b
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("toolu_{i}"));
                tool_calls.push(ToolCall {
                    id,
                    name: name.to_string(),
                    arguments: b.get("input").cloned().unwrap_or_else(|| json!({})),
                });
            }
            // Sent back unchanged (signatures included) in later turns.
            Some("thinking" | "redacted_thinking") => opaque.push(b.clone()),
            // Server tool blocks...: not ours to show.
            _ => {}
        }
    }
    let u = v.get("usage");
    let num = |k: &str| {
        u.and_then(|u| u.get(k))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let cache_read = num("cache_read_input_tokens");
    let cache_write = num("cache_creation_input_tokens");
    let output = num("output_tokens");
    // `input_tokens` excludes cached and cache-written tokens; ours includes every prompt token.
    let usage = Usage {
        input_tokens: num("input_tokens") + cache_read + cache_write,
        cached_input_tokens: cache_read,
        output_tokens: output,
        cache_write_input_tokens: cache_write,
        reasoning_tokens: estimate_thinking_tokens(&opaque).min(output),
    };
    Ok(ChatResponse {
        content: (!text.is_empty()).then(|| text.join("")),
        tool_calls,
        usage,
        finish_reason: v
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        cost_usd: 0.0,
        opaque,
    })
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
