//! OpenAI-compatible chat-completions provider (OpenAI, vLLM, llama.cpp server, ...).

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

/// A provider speaking `POST {base_url}/chat/completions`.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    http: reqwest::Client,
    base_url: String,
    model: String,
    key_env: String,
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
        })
    }

    /// The full chat-completions URL.
    pub fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url)
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
        let mut rb = self.http.post(&url).json(&request_body(&self.model, req));
        if let Some(k) = &key {
            rb = rb.bearer_auth(k);
        }
        let a = http::send(rb, &url).await?;
        if !(200..300).contains(&a.status) {
            return Err(self.status_error(a.status, a.retry_after, &a.body, key.as_deref()));
        }
        parse_response(&a.body).map_err(|e| http::malformed_at(e, &url, key.as_deref()))
    }
}

/// The JSON request body for `req` (tools only with the native protocol and when non-empty).
pub fn request_body(model: &str, req: &ChatRequest) -> Value {
    let messages: Vec<Value> = req.messages.iter().map(message_json).collect();
    let mut body = json!({ "model": model, "messages": messages });
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
    if let Some(m) = req.max_tokens {
        body["max_tokens"] = json!(m);
    }
    body
}

fn message_json(m: &Message) -> Value {
    match m {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
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
                Message::Assistant {
                    content: None,
                    tool_calls: vec![
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
                },
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
        let b = request_body("m1", &req);
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
        assert_eq!(request_body("m1", &none)["tool_choice"], "none");
        let mut jt = req.clone();
        jt.protocol = ToolProtocol::JsonInText;
        jt.temperature = None;
        let b = request_body("m1", &jt);
        assert!(b.get("tools").is_none());
        assert!(b.get("temperature").is_none());
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
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 10,
                cached_input_tokens: 4,
                output_tokens: 3
            }
        );
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
