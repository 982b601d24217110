//! OpenAI-compatible provider (OpenAI, vLLM, llama.cpp server, ...): chat completions, or
//! the Responses API with `api = "responses"` (see [`crate::responses`]).

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::config::ModelConfig;
pub use crate::http::parse_retry_after;
use crate::http::{self, excerpt, Endpoint};
use crate::types::{
    ChatRequest, ChatResponse, Message, ModelError, Provider, ToolCall, ToolChoice, ToolProtocol,
    Usage,
};

/// Base URL used when neither the config nor `OPENAI_BASE_URL` sets one.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

pub use crate::wire::{arguments_text, merge_extra, parse_arguments, ChatSettings};

/// A provider speaking `POST {base_url}/chat/completions` (or `/responses`).
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    http: reqwest::Client,
    base_url: String,
    model: String,
    key_env: String,
    settings: ChatSettings,
    responses: bool,
}

impl OpenAiProvider {
    /// Builds the provider from a config (base URL: config, else `OPENAI_BASE_URL`, else default).
    pub fn new(cfg: &ModelConfig) -> anyhow::Result<OpenAiProvider> {
        let base_url = cfg
            .base_url
            .clone()
            .or_else(|| {
                std::env::var("OPENAI_BASE_URL")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .context("building the HTTP client")?;
        Ok(OpenAiProvider {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            model: cfg.model.clone(),
            key_env: cfg
                .api_key_env
                .clone()
                .unwrap_or_else(|| "OPENAI_API_KEY".to_string()),
            settings: ChatSettings::from_config(cfg),
            responses: cfg.uses_responses_api(),
        })
    }

    /// The full URL called: chat completions, or the Responses endpoint.
    pub fn endpoint(&self) -> String {
        if self.responses {
            format!("{}/responses", self.base_url)
        } else {
            format!("{}/chat/completions", self.base_url)
        }
    }

    /// Maps a non-success HTTP status and body to a `ModelError`.
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
impl Provider for OpenAiProvider {
    fn describe(&self) -> String {
        format!("openai:{}", self.model)
    }

    async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let url = self.endpoint();
        let key = http::key_from_env(&self.key_env);
        let body = if self.responses {
            crate::responses::request_body(&self.settings, req)
        } else {
            request_body(&self.settings, req)
        };
        let mut rb = self.http.post(&url).json(&body);
        if let Some(k) = &key {
            rb = rb.bearer_auth(k);
        }
        let a = http::send(rb, &url).await?;
        if !(200..300).contains(&a.status) {
            return Err(self.status_error(a.status, a.retry_after, &a.body, key.as_deref()));
        }
        let parsed = if self.responses {
            crate::responses::parse_response(&a.body)
        } else {
            parse_response(&a.body)
        };
        parsed.map_err(|e| http::malformed_at(e, &url, key.as_deref()))
    }
}

/// The JSON request body for `req` (tools only with the native protocol and when non-empty;
/// temperature and top_p only when set; the output limit under `s.max_tokens_field`).
pub fn request_body(s: &ChatSettings, req: &ChatRequest) -> Value {
    let messages: Vec<Value> = req.messages.iter().map(message_json).collect();
    let mut body = json!({ "model": s.model, "messages": messages });
    if req.protocol == ToolProtocol::Native && !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    }
                })
            })
            .collect();
        body["tools"] = Value::Array(tools);
        if req.tool_choice == ToolChoice::None {
            body["tool_choice"] = json!("none");
        }
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(p) = s.top_p {
        body["top_p"] = json!(p);
    }
    if let Some(m) = req.max_tokens {
        body[s.max_tokens_field] = json!(m);
    }
    if let Some(e) = &s.reasoning_effort {
        body["reasoning_effort"] = json!(e);
    }
    merge_extra(&mut body, &s.extra_body);
    body
}

fn message_json(m: &Message) -> Value {
    match m {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
            ..
        } => {
            let mut v = json!({"role": "assistant", "content": content});
            if !tool_calls.is_empty() {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": arguments_text(&c.arguments)},
                        })
                    })
                    .collect();
                v["tool_calls"] = Value::Array(calls);
            }
            v
        }
        Message::Tool {
            tool_call_id,
            content,
            ..
        } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
    }
}

/// Parses a 200 response body; a non-JSON body or one without choices is `Malformed`.
pub fn parse_response(body: &str) -> Result<ChatResponse, ModelError> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| ModelError::Malformed(format!("body is not JSON ({e}): {}", excerpt(body))))?;
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| ModelError::Malformed(format!("no choices in: {}", excerpt(body))))?;
    let msg = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| {
            ModelError::Malformed(format!("choice without message: {}", excerpt(body)))
        })?;
    let content = match msg.get("content") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => None,
    };
    let mut tool_calls = Vec::new();
    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
        for (i, c) in calls.iter().enumerate() {
            let f = c.get("function").ok_or_else(|| {
                ModelError::Malformed(format!("tool call {i} without function: {}", excerpt(body)))
            })?;
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                ModelError::Malformed(format!("tool call {i} without name: {}", excerpt(body)))
            })?;
            let arguments = match f.get("arguments") {
                Some(Value::String(raw)) => parse_arguments(raw),
                Some(Value::Null) | None => json!({}),
                Some(other) => other.clone(),
            };
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .unwrap_or_else(|| format!("call_{i}"));
            tool_calls.push(ToolCall {
                id,
                name: name.to_string(),
                arguments,
            });
        }
    }
    let u = v.get("usage");
    let num = |path: &[&str]| -> u64 {
        let mut cur = u;
        for p in path {
            cur = cur.and_then(|c| c.get(*p));
        }
        cur.and_then(Value::as_u64).unwrap_or(0)
    };
    let usage = Usage {
        input_tokens: num(&["prompt_tokens"]),
        cached_input_tokens: num(&["prompt_tokens_details", "cached_tokens"]),
        output_tokens: num(&["completion_tokens"]),
        reasoning_tokens: num(&["completion_tokens_details", "reasoning_tokens"]),
        ..Default::default()
    };
    Ok(ChatResponse {
        content,
        tool_calls,
        usage,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        cost_usd: 0.0,
        opaque: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Role, ToolSpec};

    fn provider() -> OpenAiProvider {
        OpenAiProvider::new(&ModelConfig {
            provider: "openai".into(),
            model: "m1".into(),
            base_url: Some("http://x/v1/".into()),
            api_key_env: Some("AHE_TEST_KEY_UNIT".into()),
            ..ModelConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn endpoint_and_describe() {
        let p = provider();
        assert_eq!(p.endpoint(), "http://x/v1/chat/completions");
        assert_eq!(p.describe(), "openai:m1");
    }

    #[test]
    fn body_serializes_history() {
        let req = ChatRequest {
            role: Role::CodeAgent,
            messages: vec![
                Message::system("s"),
                Message::user("u"),
                Message::assistant(
                    None,
                    vec![
                        ToolCall {
                            id: "c1".into(),
                            name: "shell".into(),
                            arguments: json!({"command": "ls"}),
                        },
                        ToolCall {
                            id: "c2".into(),
                            name: "shell".into(),
                            arguments: Value::String("{bad".into()),
                        },
                    ],
                ),
                Message::Tool {
                    tool_call_id: "c1".into(),
                    name: "shell".into(),
                    content: "out".into(),
                },
            ],
            tools: vec![ToolSpec {
                name: "shell".into(),
                description: "d".into(),
                input_schema: json!({"type": "object"}),
            }],
            protocol: ToolProtocol::Native,
            temperature: Some(0.5),
            max_tokens: Some(9),
            tool_choice: Default::default(),
        };
        let b = request_body(&ChatSettings::plain("m1"), &req);
        assert_eq!(b["model"], "m1");
        assert_eq!(b["messages"][0], json!({"role": "system", "content": "s"}));
        let a = &b["messages"][2];
        assert_eq!(a["content"], Value::Null);
        assert_eq!(a["tool_calls"][0]["type"], "function");
        let args: Value = serde_json::from_str(
            a["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(args, json!({"command": "ls"}));
        assert_eq!(a["tool_calls"][1]["function"]["arguments"], "{bad");
        assert_eq!(
            b["messages"][3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "out"})
        );
        assert_eq!(
            b["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        assert_eq!(b["max_tokens"], 9);
        assert_eq!(b["temperature"], 0.5);
        assert!(b.get("tool_choice").is_none());
        let none = ChatRequest {
            tool_choice: ToolChoice::None,
            ..req.clone()
        };
        assert_eq!(
            request_body(&ChatSettings::plain("m1"), &none)["tool_choice"],
            "none"
        );
        let mut jt = req.clone();
        jt.protocol = ToolProtocol::JsonInText;
        jt.temperature = None;
        let b = request_body(&ChatSettings::plain("m1"), &jt);
        assert!(b.get("tools").is_none());
        assert!(b.get("temperature").is_none());
    }

    #[test]
    fn reasoning_settings_shape_the_body() {
        let mut cfg = ModelConfig::from_spec("openai:gpt-5-mini").unwrap();
        cfg.reasoning_effort = Some("high".into());
        cfg.extra_body
            .insert("provider".into(), json!({"order": ["a"]}));
        cfg.extra_body.insert("seed".into(), json!(7));
        let req = ChatRequest {
            role: Role::CodeAgent,
            messages: vec![Message::user("u")],
            tools: vec![],
            protocol: ToolProtocol::Native,
            temperature: None,
            max_tokens: Some(900),
            tool_choice: Default::default(),
        };
        let b = request_body(&ChatSettings::from_config(&cfg), &req);
        assert_eq!(b["max_completion_tokens"], 900);
        assert!(b.get("max_tokens").is_none() && b.get("temperature").is_none());
        assert!(b.get("top_p").is_none());
        assert_eq!(b["reasoning_effort"], "high");
        assert_eq!(
            (b["provider"]["order"][0].clone(), b["seed"].clone()),
            (json!("a"), json!(7))
        );
        cfg.model = "gpt-4o".into();
        cfg.max_tokens_field = None;
        let b = request_body(&ChatSettings::from_config(&cfg), &req);
        assert_eq!(b["max_tokens"], 900);
        cfg.max_tokens_field = Some("max_completion_tokens".into());
        let b = request_body(&ChatSettings::from_config(&cfg), &req);
        assert_eq!(b["max_completion_tokens"], 900);
        let mut body = json!({"reasoning": {"effort": "low"}, "x": 1});
        let extra = json!({"reasoning": {"summary": "auto"}, "x": 2});
        merge_extra(&mut body, extra.as_object().unwrap());
        assert_eq!(
            body,
            json!({"reasoning": {"effort": "low", "summary": "auto"}, "x": 2})
        );
        let r = parse_response(
            r#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":2000,"completion_tokens":300,
            "prompt_tokens_details":{"cached_tokens":1024},
            "completion_tokens_details":{"reasoning_tokens":256}}}"#,
        )
        .unwrap();
        assert_eq!(
            (r.usage.cached_input_tokens, r.usage.reasoning_tokens),
            (1024, 256)
        );
    }

    #[test]
    fn response_parsing() {
        let body = r#"{"choices":[{"message":{"content":null,"tool_calls":[
            {"id":"a","type":"function","function":{"name":"shell","arguments":"{\"command\":\"ls\"}"}},
            {"type":"function","function":{"name":"shell","arguments":"{oops"}}]},
            "finish_reason":"tool_calls"}],
            "usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        let r = parse_response(body).unwrap();
        assert_eq!(r.content, None);
        assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
        assert_eq!(r.tool_calls[1].arguments, Value::String("{oops".into()));
        assert_eq!(r.tool_calls[1].id, "call_1");
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.usage, Usage::new(10, 4, 3));
        assert_eq!(parse_response("nope").unwrap_err().class(), "malformed");
        assert_eq!(
            parse_response(r#"{"choices":[]}"#).unwrap_err().class(),
            "malformed"
        );
        assert_eq!(
            parse_response(r#"{"error":1}"#).unwrap_err().class(),
            "malformed"
        );
    }

    #[test]
    fn status_mapping_names_the_key_env() {
        let p = provider();
        let m = p.status_error(401, None, "", None).to_string();
        assert!(
            m.contains("AHE_TEST_KEY_UNIT") && m.contains("/chat/completions"),
            "{m}"
        );
        assert_eq!(p.status_error(503, None, "", None).class(), "transient");
    }

    #[test]
    fn argument_helpers() {
        assert_eq!(parse_arguments(""), json!({}));
        assert_eq!(arguments_text(&json!({"a": 1})), r#"{"a":1}"#);
    }
}
