//! The OpenAI Responses API (`POST {base_url}/responses`, `api = "responses"`), stateless
//! (`store: false`).
//!
//! The system prompt goes in `instructions`; the conversation is a list of input items.
//! Every output item of an assistant turn is kept (in [`Message::Assistant`]'s `opaque`)
//! and sent back in order the next turn — reasoning items with their encrypted content
//! unchanged, so a reasoning model keeps its state across tool calls; function calls and
//! the message are rebuilt from the turn's current calls and text (middleware may have
//! changed them). Tool results are `function_call_output` items.

use serde_json::{json, Value};

use crate::http::excerpt;
use crate::types::{
    ChatRequest, ChatResponse, Message, ModelError, ToolCall, ToolChoice, ToolProtocol, Usage,
};
use crate::wire::{arguments_text, merge_extra, parse_arguments, ChatSettings};

/// The JSON request body for `req`.
pub fn request_body(s: &ChatSettings, req: &ChatRequest) -> Value {
    let system: Vec<&str> = req
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let input = input_items(&req.messages);
    let mut body = json!({"model": s.model, "input": input, "store": false});
    if !system.is_empty() {
        body["instructions"] = json!(system.join("\n\n"));
    }
    if req.protocol == ToolProtocol::Native && !req.tools.is_empty() {
        add_tools(&mut body, req);
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(p) = s.top_p {
        body["top_p"] = json!(p);
    }
    if let Some(m) = req.max_tokens {
        body["max_output_tokens"] = json!(m);
    }
    let mut reasoning = serde_json::Map::new();
    if let Some(e) = &s.reasoning_effort {
        reasoning.insert("effort".into(), json!(e));
    }
    if let Some(sm) = &s.reasoning_summary {
        reasoning.insert("summary".into(), json!(sm));
    }
    if !reasoning.is_empty() {
        body["reasoning"] = Value::Object(reasoning);
    }
    if s.reasoning_model {
        body["include"] = json!(["reasoning.encrypted_content"]);
    }
    merge_extra(&mut body, &s.extra_body);
    body
}

/// The conversation as Responses input items (system messages go in `instructions`).
fn input_items(msgs: &[Message]) -> Vec<Value> {
    let mut input: Vec<Value> = Vec::new();
    for m in msgs {
        match m {
            Message::System { .. } => {}
            Message::User { content } => input.push(json!({
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": content}],
            })),
            Message::Assistant {
                content,
                tool_calls,
                opaque,
            } => assistant_items(content.as_deref(), tool_calls, opaque, &mut input),
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => input.push(json!({
                "type": "function_call_output",
                "call_id": tool_call_id,
                "output": content,
            })),
        }
    }
    input
}

/// Adds the tools as `function` items, and `tool_choice: none` when the request forbids
/// tool calls.
fn add_tools(body: &mut Value, req: &ChatRequest) {
    let tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            })
        })
        .collect();
    body["tools"] = Value::Array(tools);
    if req.tool_choice == ToolChoice::None {
        body["tool_choice"] = json!("none");
    }
}

/// The input items of one assistant turn: its output items in their order (reasoning
/// unchanged, calls and text as they are now), then calls the output did not hold.
fn assistant_items(text: Option<&str>, calls: &[ToolCall], opaque: &[Value], out: &mut Vec<Value>) {
    let text = text.filter(|t| !t.is_empty());
    let message = |t: &str| {
        json!({
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": t}],
        })
    };
    let call_item = |c: &ToolCall, id: Option<&Value>| {
        let mut v = json!({
            "type": "function_call",
            "call_id": c.id,
            "name": c.name,
            "arguments": arguments_text(&c.arguments),
        });
        if let Some(id) = id {
            v["id"] = id.clone();
        }
        v
    };
    let mut sent_text = false;
    let mut sent_calls: Vec<&str> = Vec::new();
    for item in opaque {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let cid = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if let Some(c) = calls.iter().find(|c| c.id == cid) {
                    out.push(call_item(c, item.get("id")));
                    sent_calls.push(cid);
                }
            }
            Some("message") => {
                if let (Some(t), false) = (text, sent_text) {
                    let mut m = message(t);
                    if let Some(id) = item.get("id") {
                        m["id"] = id.clone();
                    }
                    out.push(m);
                    sent_text = true;
                }
            }
            _ => out.push(item.clone()),
        }
    }
    if let (Some(t), false) = (text, sent_text) {
        out.push(message(t));
    }
    for c in calls
        .iter()
        .filter(|c| !sent_calls.contains(&c.id.as_str()))
    {
        out.push(call_item(c, None));
    }
}

/// Parses a 200 Responses body; a non-JSON body or one without `output` is `Malformed`.
pub fn parse_response(body: &str) -> Result<ChatResponse, ModelError> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| ModelError::Malformed(format!("body is not JSON ({e}): {}", excerpt(body))))?;
    let items = v
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| ModelError::Malformed(format!("no output in: {}", excerpt(body))))?;
    let mut text: Vec<&str> = Vec::new();
    let mut tool_calls = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if part.get("type").and_then(Value::as_str) == Some("output_text") {
                        text.extend(part.get("text").and_then(Value::as_str));
                    }
                }
            }
            Some("function_call") => tool_calls.push(function_call(item, i, body)?),
            _ => {}
        }
    }
    let usage = usage(&v);
    let finish_reason = if !tool_calls.is_empty() {
        Some("tool_calls".to_string())
    } else if v.get("status").and_then(Value::as_str) == Some("incomplete") {
        v.pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| Some("incomplete".into()))
    } else {
        Some("stop".to_string())
    };
    Ok(ChatResponse {
        content: (!text.is_empty()).then(|| text.join("")),
        tool_calls,
        usage,
        finish_reason,
        cost_usd: 0.0,
        opaque: items.clone(),
    })
}

/// The tool call of output item `i`, a `function_call` (a call without an id gets
/// `call_{i}`; arguments that are not JSON travel as text).
fn function_call(item: &Value, i: usize, body: &str) -> Result<ToolCall, ModelError> {
    let name = item.get("name").and_then(Value::as_str).ok_or_else(|| {
        ModelError::Malformed(format!("function_call {i} without name: {}", excerpt(body)))
    })?;
    let id = item
        .get("call_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| format!("call_{i}"));
    let arguments = match item.get("arguments") {
        Some(Value::String(raw)) => parse_arguments(raw),
        Some(Value::Null) | None => json!({}),
        Some(other) => other.clone(),
    };
    Ok(ToolCall {
        id,
        name: name.to_string(),
        arguments,
    })
}

/// The token counts of a Responses body's `usage` (0 for those missing).
fn usage(v: &Value) -> Usage {
    let u = v.get("usage");
    let num = |path: &[&str]| -> u64 {
        let mut cur = u;
        for p in path {
            cur = cur.and_then(|c| c.get(*p));
        }
        cur.and_then(Value::as_u64).unwrap_or(0)
    };
    Usage {
        input_tokens: num(&["input_tokens"]),
        cached_input_tokens: num(&["input_tokens_details", "cached_tokens"]),
        output_tokens: num(&["output_tokens"]),
        reasoning_tokens: num(&["output_tokens_details", "reasoning_tokens"]),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use crate::types::{Role, ToolSpec};

    fn settings() -> ChatSettings {
        let mut cfg = ModelConfig::from_spec("openai:gpt-5").unwrap();
        cfg.reasoning_effort = Some("medium".into());
        cfg.reasoning_summary = Some("auto".into());
        ChatSettings::from_config(&cfg)
    }

    const OUT: &str = r#"{"id":"resp_1","status":"completed","output":[
        {"type":"reasoning","id":"rs_1","encrypted_content":"gAAA-secret","summary":[]},
        {"type":"function_call","id":"fc_1","call_id":"call_a","name":"shell","arguments":"{\"command\":\"ls\"}"}],
        "usage":{"input_tokens":1500,"input_tokens_details":{"cached_tokens":1024},
                 "output_tokens":200,"output_tokens_details":{"reasoning_tokens":150}}}"#;

    #[test]
    fn round_trip_keeps_reasoning_items_in_order() {
        let r = parse_response(OUT).unwrap();
        assert_eq!(r.tool_calls[0].id, "call_a");
        assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls"}));
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            (r.usage.input_tokens, r.usage.cached_input_tokens),
            (1500, 1024)
        );
        assert_eq!(
            (r.usage.output_tokens, r.usage.reasoning_tokens),
            (200, 150)
        );
        let req = ChatRequest {
            role: Role::CodeAgent,
            messages: vec![
                Message::system("sys"),
                Message::user("task"),
                r.to_message(),
                Message::Tool {
                    tool_call_id: "call_a".into(),
                    name: "shell".into(),
                    content: "a.txt".into(),
                },
            ],
            tools: vec![ToolSpec {
                name: "shell".into(),
                description: "d".into(),
                input_schema: json!({"type": "object"}),
            }],
            protocol: ToolProtocol::Native,
            temperature: None,
            max_tokens: Some(4000),
            tool_choice: Default::default(),
        };
        let b = request_body(&settings(), &req);
        assert_eq!(b["instructions"], "sys");
        assert_eq!(b["store"], false);
        assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(
            b["reasoning"],
            json!({"effort": "medium", "summary": "auto"})
        );
        assert_eq!(b["max_output_tokens"], 4000);
        assert!(b.get("temperature").is_none() && b.get("max_tokens").is_none());
        assert_eq!(
            b["tools"][0],
            json!({"type": "function", "name": "shell", "description": "d",
                   "parameters": {"type": "object"}})
        );
        let input = b["input"].as_array().unwrap();
        let kinds: Vec<&str> = input.iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "message",
                "reasoning",
                "function_call",
                "function_call_output"
            ]
        );
        assert_eq!(input[1]["encrypted_content"], "gAAA-secret");
        assert_eq!(input[2]["id"], "fc_1");
        assert_eq!(
            input[3],
            json!({"type": "function_call_output", "call_id": "call_a", "output": "a.txt"})
        );
    }

    #[test]
    fn changed_calls_are_sent_as_they_are_now() {
        let r = parse_response(OUT).unwrap();
        let Message::Assistant { opaque, .. } = r.to_message() else {
            unreachable!()
        };
        let calls = vec![ToolCall {
            id: "call_a".into(),
            name: "shell".into(),
            arguments: json!({"command": "pwd"}),
        }];
        let mut out = Vec::new();
        assistant_items(Some("note"), &calls, &opaque, &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(out[1]["arguments"], r#"{"command":"pwd"}"#);
        assert_eq!(out[2]["content"][0]["text"], "note");
        for bad in ["{", r#"{"status":"completed"}"#] {
            assert_eq!(parse_response(bad).unwrap_err().class(), "malformed");
        }
        let cut = parse_response(
            r#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}"#,
        )
        .unwrap();
        assert_eq!(cut.finish_reason.as_deref(), Some("max_output_tokens"));
        assert_eq!(cut.content, None);
    }
}
