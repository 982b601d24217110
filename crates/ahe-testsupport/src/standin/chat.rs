//! The chat-completions stand-in (`POST /v1/chat/completions`).

use ahe_model::config::frontier::REASONING_EFFORTS;
use ahe_model::openai::{arguments_text, parse_arguments};
use ahe_model::types::{ChatRequest, Message, ToolCall, ToolChoice, ToolProtocol, ToolSpec};
use serde_json::{json, Map, Value};

use super::{answer_tokens, bad_request, openai_auth, reasoning_model, reasoning_spend, Shared};
use crate::server::RecordedRequest;

/// Top-level fields the real endpoint takes.
const KNOWN: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "reasoning_effort",
    "stream",
    "n",
    "seed",
    "stop",
    "user",
    "response_format",
    "parallel_tool_calls",
    "store",
    "metadata",
    "logprobs",
    "top_logprobs",
    "frequency_penalty",
    "presence_penalty",
    "prompt_cache_key",
    "service_tier",
    "verbosity",
];

type Reply = (u16, Value);

/// Checks the request as the real API does, then answers it.
pub(super) fn handle(s: &Shared, req: &RecordedRequest) -> Reply {
    if let Some(e) = openai_auth(s, req) {
        return e;
    }
    let Some(obj) = req.body.as_object() else {
        return bad_request(
            "We could not parse the JSON body of your request.",
            None,
            None,
        );
    };
    match check(s, obj) {
        Ok(chat) => answer(s, obj, chat),
        Err(e) => e,
    }
}

fn check(s: &Shared, obj: &Map<String, Value>) -> Result<ChatRequest, Reply> {
    for k in obj.keys() {
        if !KNOWN.contains(&k.as_str()) && !s.opts.extra_fields.contains(k) {
            return Err(bad_request(
                &format!("Unrecognized request argument supplied: {k}"),
                None,
                None,
            ));
        }
    }
    let model = obj.get("model").and_then(Value::as_str).unwrap_or("");
    if model.is_empty() {
        return Err(bad_request(
            "you must provide a model parameter",
            None,
            None,
        ));
    }
    if reasoning_model(model) {
        if obj.contains_key("max_tokens") {
            return Err(bad_request(
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                Some("max_tokens"),
                Some("unsupported_parameter"),
            ));
        }
        for p in ["temperature", "top_p"] {
            if let Some(v) = obj.get(p) {
                if v.as_f64() != Some(1.0) {
                    return Err(bad_request(
                        &format!("Unsupported value: '{p}' does not support {v} with this model. Only the default (1) value is supported."),
                        Some(p),
                        Some("unsupported_value"),
                    ));
                }
            }
        }
        if let Some(e) = obj.get("reasoning_effort") {
            if !e.as_str().is_some_and(|e| REASONING_EFFORTS.contains(&e)) {
                return Err(bad_request(
                    &format!("Invalid value: {e}. Supported values are: 'none', 'minimal', 'low', 'medium', 'high', and 'xhigh'."),
                    Some("reasoning_effort"),
                    Some("invalid_value"),
                ));
            }
        }
    } else if obj.contains_key("reasoning_effort") {
        return Err(bad_request(
            "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
            Some("reasoning_effort"),
            Some("unsupported_parameter"),
        ));
    }
    let tools = tools(obj)?;
    let messages = messages(obj)?;
    Ok(ChatRequest {
        role: s.opts.role,
        messages,
        protocol: if tools.is_empty() {
            ToolProtocol::JsonInText
        } else {
            ToolProtocol::Native
        },
        tools,
        temperature: None,
        max_tokens: None,
        tool_choice: if obj.get("tool_choice") == Some(&json!("none")) {
            ToolChoice::None
        } else {
            ToolChoice::Auto
        },
    })
}

fn tools(obj: &Map<String, Value>) -> Result<Vec<ToolSpec>, Reply> {
    let mut out = Vec::new();
    for (i, t) in obj
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let f = t.get("function");
        let Some(name) = f.and_then(|f| f.get("name")).and_then(Value::as_str) else {
            let p = format!("tools[{i}].function.name");
            return Err(bad_request(
                &format!("Missing required parameter: '{p}'."),
                Some(&p),
                Some("missing_required_parameter"),
            ));
        };
        out.push(ToolSpec {
            name: name.to_string(),
            description: f
                .and_then(|f| f.get("description"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            input_schema: f
                .and_then(|f| f.get("parameters"))
                .cloned()
                .unwrap_or(json!({})),
        });
    }
    Ok(out)
}

fn text_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn unanswered(at: usize, ids: &[String]) -> Reply {
    let p = format!("messages.[{at}].role");
    bad_request(
        &format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", ids.join(", ")),
        Some(&p),
        None,
    )
}

/// The last assistant turn with calls: its index and the call ids not answered yet.
type Pending = Option<(usize, Vec<String>)>;

/// The messages, checked and translated: known roles only, every call of an assistant turn
/// answered by the tool messages right after it, and no tool message without its call.
fn messages(obj: &Map<String, Value>) -> Result<Vec<Message>, Reply> {
    let Some(list) = obj.get("messages").and_then(Value::as_array) else {
        return Err(bad_request(
            "Missing required parameter: 'messages'.",
            Some("messages"),
            Some("missing_required_parameter"),
        ));
    };
    let mut out = Vec::new();
    let mut pending: Pending = None;
    for (i, m) in list.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "tool" {
            all_answered(pending.take())?;
        }
        match role {
            "system" | "developer" => out.push(Message::system(text_of(m.get("content")))),
            "user" => out.push(Message::user(text_of(m.get("content")))),
            "assistant" => {
                let message = assistant_message(m);
                if let Message::Assistant { tool_calls, .. } = &message {
                    if !tool_calls.is_empty() {
                        pending = Some((i, tool_calls.iter().map(|c| c.id.clone()).collect()));
                    }
                }
                out.push(message);
            }
            "tool" => out.push(tool_message(i, m, &mut pending)?),
            other => {
                let p = format!("messages[{i}].role");
                return Err(bad_request(
                    &format!("Invalid value: '{other}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."),
                    Some(&p),
                    Some("invalid_value"),
                ));
            }
        }
    }
    all_answered(pending)?;
    Ok(out)
}

/// An error when the pending assistant turn still has calls without a tool message.
fn all_answered(pending: Pending) -> Result<(), Reply> {
    match pending {
        Some((at, ids)) if !ids.is_empty() => Err(unanswered(at, &ids)),
        _ => Ok(()),
    }
}

/// An assistant message with its tool calls (argument text parsed as the provider does).
fn assistant_message(m: &Value) -> Message {
    let content = match m.get("content") {
        None | Some(Value::Null) => None,
        c => Some(text_of(c)),
    };
    let calls = m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let f = c.get("function");
            let field = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
            ToolCall {
                id: field(c.get("id")),
                name: field(f.and_then(|f| f.get("name"))),
                arguments: parse_arguments(&field(f.and_then(|f| f.get("arguments")))),
            }
        })
        .collect();
    Message::assistant(content, calls)
}

/// Tool message `i`, which must answer a call of the pending assistant turn (the call is
/// then no longer pending).
fn tool_message(i: usize, m: &Value, pending: &mut Pending) -> Result<Message, Reply> {
    let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
    let known = match pending {
        Some((_, ids)) => match ids.iter().position(|x| x == id) {
            Some(p) => {
                ids.remove(p);
                true
            }
            None => false,
        },
        None => false,
    };
    if !known {
        let p = format!("messages.[{i}].role");
        return Err(bad_request(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
            Some(&p),
            None,
        ));
    }
    Ok(Message::Tool {
        tool_call_id: id.to_string(),
        name: String::new(),
        content: text_of(m.get("content")),
    })
}

/// The prompt as the cache sees it: system messages, then tools, then the rest.
fn prompt_text(obj: &Map<String, Value>) -> String {
    let msgs = obj
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (sys, rest): (Vec<Value>, Vec<Value>) = msgs
        .into_iter()
        .partition(|m| m.get("role").and_then(Value::as_str) == Some("system"));
    let mut out = String::new();
    for m in &sys {
        out.push_str(&m.to_string());
    }
    out.push_str(&obj.get("tools").cloned().unwrap_or(Value::Null).to_string());
    for m in &rest {
        out.push_str(&m.to_string());
    }
    out
}

fn answer(s: &Shared, obj: &Map<String, Value>, chat: ChatRequest) -> Reply {
    let model = obj["model"].as_str().unwrap_or("").to_string();
    let resp = match s.answer(&chat) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let cache = s.with_cache("chat", |c| c.openai(&prompt_text(obj)));
    let reasoning = if reasoning_model(&model) {
        reasoning_spend(obj.get("reasoning_effort").and_then(Value::as_str))
    } else {
        0
    };
    let out = answer_tokens(&resp);
    let limit = obj
        .get("max_completion_tokens")
        .or_else(|| obj.get("max_tokens"))
        .and_then(Value::as_u64);
    let mut message = json!({"role": "assistant", "content": resp.content});
    let (finish, completion) = match limit {
        // Reasoning counts against the limit: a small one ends in an empty reply.
        Some(l) if reasoning + out > l => {
            message["content"] = json!("");
            ("length", l)
        }
        _ => {
            if !resp.tool_calls.is_empty() {
                let calls: Vec<Value> = resp
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": arguments_text(&c.arguments)}})
                    })
                    .collect();
                message["tool_calls"] = Value::Array(calls);
            }
            let f = if resp.tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            (f, reasoning + out)
        }
    };
    let id = s.next_id();
    (
        200,
        json!({
            "id": format!("chatcmpl-standin-{id}"),
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": cache.total,
                "completion_tokens": completion,
                "total_tokens": cache.total + completion,
                "prompt_tokens_details": {"cached_tokens": cache.read},
                "completion_tokens_details": {"reasoning_tokens": reasoning.min(completion)},
            },
        }),
    )
}
