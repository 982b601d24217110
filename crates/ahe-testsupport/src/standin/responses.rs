//! The Responses API stand-in (`POST /v1/responses`).

use ahe_model::config::frontier::REASONING_EFFORTS;
use ahe_model::openai::{arguments_text, parse_arguments};
use ahe_model::types::{
    ChatRequest, ChatResponse, Message, ToolCall, ToolChoice, ToolProtocol, ToolSpec,
};
use serde_json::{json, Map, Value};

use super::{
    answer_tokens, bad_request, openai_auth, reasoning_model, reasoning_spend, sign, Shared,
};
use crate::lock;
use crate::server::RecordedRequest;

/// Top-level fields the real endpoint takes.
const KNOWN: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_output_tokens",
    "reasoning",
    "store",
    "include",
    "stream",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "text",
    "truncation",
    "user",
    "service_tier",
    "prompt_cache_key",
    "background",
    "max_tool_calls",
    "safety_identifier",
    "top_logprobs",
];

type Reply = (u16, Value);

/// The encrypted content the stand-in issues for reasoning item `id`.
fn encrypted(id: &str) -> String {
    format!("gAAAAB{}", sign(id))
}

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

/// Checks the request as the real API does and translates it to a [`ChatRequest`]: the
/// top-level fields, reasoning options, tools, then the input items.
fn check(s: &Shared, obj: &Map<String, Value>) -> Result<ChatRequest, Reply> {
    for k in obj.keys() {
        if !KNOWN.contains(&k.as_str()) && !s.opts.extra_fields.contains(k) {
            return Err(bad_request(
                &format!("Unknown parameter: '{k}'."),
                Some(k),
                Some("unknown_parameter"),
            ));
        }
    }
    let model = obj.get("model").and_then(Value::as_str).unwrap_or("");
    if model.is_empty() {
        return Err(bad_request(
            "Missing required parameter: 'model'.",
            Some("model"),
            Some("missing_required_parameter"),
        ));
    }
    check_reasoning(obj, reasoning_model(model))?;
    let tools = tools(obj)?;
    let mut messages = Vec::new();
    if let Some(i) = obj.get("instructions").and_then(Value::as_str) {
        messages.push(Message::system(i));
    }
    input(s, obj, &mut messages)?;
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

/// Sampling and reasoning options against the model: a reasoning model takes only the
/// default `temperature`/`top_p`, and only it takes a `reasoning.effort`, of a known level.
fn check_reasoning(obj: &Map<String, Value>, reasoning: bool) -> Result<(), Reply> {
    if reasoning {
        for p in ["temperature", "top_p"] {
            if obj.get(p).is_some_and(|v| v.as_f64() != Some(1.0)) {
                return Err(bad_request(
                    &format!("Unsupported parameter: '{p}' is not supported with this model."),
                    Some(p),
                    Some("unsupported_parameter"),
                ));
            }
        }
    }
    let Some(e) = obj.get("reasoning").and_then(|r| r.get("effort")) else {
        return Ok(());
    };
    if !reasoning {
        return Err(bad_request(
            "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
            Some("reasoning.effort"),
            Some("unsupported_parameter"),
        ));
    }
    if !e.as_str().is_some_and(|e| REASONING_EFFORTS.contains(&e)) {
        return Err(bad_request(
            &format!("Invalid value: {e}. Supported values are: 'none', 'minimal', 'low', 'medium', 'high', and 'xhigh'."),
            Some("reasoning.effort"),
            Some("invalid_value"),
        ));
    }
    Ok(())
}

/// The request's function tools as the brain sees them (each must have a name).
fn tools(obj: &Map<String, Value>) -> Result<Vec<ToolSpec>, Reply> {
    let mut tools = Vec::new();
    for (i, t) in obj
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(name) = t.get("name").and_then(Value::as_str) else {
            let p = format!("tools[{i}].name");
            return Err(bad_request(
                &format!("Missing required parameter: '{p}'."),
                Some(&p),
                Some("missing_required_parameter"),
            ));
        };
        tools.push(ToolSpec {
            name: name.to_string(),
            description: t
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .into(),
            input_schema: t.get("parameters").cloned().unwrap_or(json!({})),
        });
    }
    Ok(tools)
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

fn input_error(message: &str) -> Reply {
    bad_request(message, Some("input"), None)
}

/// Translates and checks the input items.
fn input(s: &Shared, obj: &Map<String, Value>, out: &mut Vec<Message>) -> Result<(), Reply> {
    let items: Vec<Value> = match obj.get("input") {
        Some(Value::String(t)) => vec![json!({"role": "user", "content": t})],
        Some(Value::Array(a)) => a.clone(),
        _ => {
            return Err(bad_request(
                "Missing required parameter: 'input'.",
                Some("input"),
                Some("missing_required_parameter"),
            ))
        }
    };
    let mut reader = Items {
        store: obj.get("store").and_then(Value::as_bool).unwrap_or(true),
        issued: lock(&s.fc_reasoning).clone(),
        seen_reasoning: Vec::new(),
        calls_seen: Vec::new(),
        answered: Vec::new(),
        turn: None,
        out,
    };
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        let id = item.get("id").and_then(Value::as_str).unwrap_or("");
        match kind {
            "reasoning" => reader.reasoning(item, id, i + 1 == items.len())?,
            "function_call" => reader.function_call(item, id)?,
            "function_call_output" => reader.function_call_output(item)?,
            "message" => reader.message(item),
            other => {
                return Err(bad_request(
                    &format!("Invalid value: '{other}'."),
                    Some(&format!("input[{i}].type")),
                    Some("invalid_value"),
                ))
            }
        }
    }
    reader.flush();
    if let Some(c) = reader
        .calls_seen
        .iter()
        .find(|c| !reader.answered.contains(c))
    {
        return Err(input_error(&format!(
            "No tool output found for function call {c}."
        )));
    }
    Ok(())
}

/// The input items read so far, and the conversation they make.
struct Items<'a> {
    /// Whether the request stores its items (`store`, true by default).
    store: bool,
    /// Function-call item id -> the reasoning item id the stand-in issued with it.
    issued: std::collections::BTreeMap<String, String>,
    /// Reasoning item ids sent back so far.
    seen_reasoning: Vec<String>,
    /// Call ids of the function calls so far.
    calls_seen: Vec<String>,
    /// Call ids with an output so far.
    answered: Vec<String>,
    /// The assistant turn being assembled from consecutive output items.
    turn: Option<(Option<String>, Vec<ToolCall>)>,
    /// The conversation.
    out: &'a mut Vec<Message>,
}

impl Items<'_> {
    /// Ends the assistant turn being assembled, if any.
    fn flush(&mut self) {
        if let Some((c, calls)) = self.turn.take() {
            self.out.push(Message::assistant(c, calls));
        }
    }

    /// A reasoning item sent back: its encrypted content (or a stored item) verified, and
    /// an item after it.
    fn reasoning(&mut self, item: &Value, id: &str, last: bool) -> Result<(), Reply> {
        match item.get("encrypted_content").and_then(Value::as_str) {
            None if !self.store => return Err(input_error(&format!(
                "Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."
            ))),
            Some(e) if e != encrypted(id) => {
                return Err(bad_request(
                    &format!("The encrypted content for item {id} could not be verified."),
                    None,
                    Some("invalid_encrypted_content"),
                ))
            }
            _ => {}
        }
        if last {
            return Err(input_error(&format!(
                "Item '{id}' of type 'reasoning' was provided without its required following item."
            )));
        }
        self.seen_reasoning.push(id.to_string());
        self.turn.get_or_insert((None, vec![]));
        Ok(())
    }

    /// A function call sent back, after the reasoning item issued with it (if one was).
    fn function_call(&mut self, item: &Value, id: &str) -> Result<(), Reply> {
        if let Some(rs) = self.issued.get(id) {
            if !self.seen_reasoning.contains(rs) {
                return Err(input_error(&format!(
                    "Item '{id}' of type 'function_call' was provided without its required 'reasoning' item: '{rs}'."
                )));
            }
        }
        let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
        self.calls_seen.push(call_id.to_string());
        let t = self.turn.get_or_insert((None, vec![]));
        t.1.push(ToolCall {
            id: call_id.to_string(),
            name: item
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .into(),
            arguments: parse_arguments(item.get("arguments").and_then(Value::as_str).unwrap_or("")),
        });
        Ok(())
    }

    /// A function call's output, which must follow its call.
    fn function_call_output(&mut self, item: &Value) -> Result<(), Reply> {
        let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
        if !self.calls_seen.iter().any(|c| c == call_id) {
            return Err(input_error(&format!(
                "No tool call found for function call output with call_id {call_id}."
            )));
        }
        self.answered.push(call_id.to_string());
        self.flush();
        self.out.push(Message::Tool {
            tool_call_id: call_id.to_string(),
            name: String::new(),
            content: text_of(item.get("output")),
        });
        Ok(())
    }

    /// A message item: an assistant's text joins its turn; others end it.
    fn message(&mut self, item: &Value) {
        let role = item.get("role").and_then(Value::as_str).unwrap_or("");
        let text = text_of(item.get("content"));
        match role {
            "assistant" => {
                let t = self.turn.get_or_insert((None, vec![]));
                t.0 = Some(text);
            }
            "system" | "developer" => {
                self.flush();
                self.out.push(Message::system(text));
            }
            _ => {
                self.flush();
                self.out.push(Message::user(text));
            }
        }
    }
}

/// Answers a checked request: the brain's reply as output items (a reasoning item first
/// for a reasoning model), usage with cache reads and reasoning tokens, cut short at
/// `max_output_tokens`.
fn answer(s: &Shared, obj: &Map<String, Value>, chat: ChatRequest) -> Reply {
    let model = obj["model"].as_str().unwrap_or("").to_string();
    let resp = match s.answer(&chat) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let prompt = format!(
        "{}{}{}",
        obj.get("instructions").cloned().unwrap_or(Value::Null),
        obj.get("tools").cloned().unwrap_or(Value::Null),
        obj.get("input").cloned().unwrap_or(Value::Null),
    );
    let cache = s.with_cache("responses", |c| c.openai(&prompt));
    let reasoning_on = reasoning_model(&model);
    let effort = obj
        .get("reasoning")
        .and_then(|r| r.get("effort"))
        .and_then(Value::as_str);
    let reasoning = if reasoning_on {
        reasoning_spend(effort)
    } else {
        0
    };
    let n = s.next_id();
    let mut output = Vec::new();
    let rs_id = format!("rs_standin_{n}");
    if reasoning_on {
        output.push(reasoning_item(obj, &rs_id));
    }
    let out = answer_tokens(&resp);
    let limit = obj.get("max_output_tokens").and_then(Value::as_u64);
    let truncated = limit.is_some_and(|l| reasoning + out > l);
    if !truncated {
        let rs = reasoning_on.then_some(rs_id.as_str());
        output.extend(answer_items(s, &resp, n, rs));
    }
    let completion = if truncated {
        limit.unwrap_or(0)
    } else {
        reasoning + out
    };
    let mut body = json!({
        "id": format!("resp_standin_{n}"),
        "object": "response",
        "created_at": 0,
        "status": if truncated { "incomplete" } else { "completed" },
        "model": model,
        "output": output,
        "usage": {
            "input_tokens": cache.total,
            "input_tokens_details": {"cached_tokens": cache.read},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning.min(completion)},
            "total_tokens": cache.total + completion,
        },
    });
    if truncated {
        body["incomplete_details"] = json!({"reason": "max_output_tokens"});
    }
    (200, body)
}

/// The reasoning item `rs_id`: a summary when the request asks for one, its encrypted
/// content when it includes `reasoning.encrypted_content`.
fn reasoning_item(obj: &Map<String, Value>, rs_id: &str) -> Value {
    let mut item = json!({"type": "reasoning", "id": rs_id, "summary": []});
    if obj
        .get("reasoning")
        .and_then(|r| r.get("summary"))
        .is_some()
    {
        item["summary"] = json!([{"type": "summary_text", "text": "Planned the next step."}]);
    }
    let include = obj.get("include").and_then(Value::as_array);
    if include.is_some_and(|i| i.contains(&json!("reasoning.encrypted_content"))) {
        item["encrypted_content"] = json!(encrypted(rs_id));
    }
    item
}

/// The brain's text and calls as output items of answer `n`; with `reasoning` (the id of
/// the reasoning item issued before them), each call is remembered as needing it back.
fn answer_items(s: &Shared, resp: &ChatResponse, n: u64, reasoning: Option<&str>) -> Vec<Value> {
    let mut output = Vec::new();
    if let Some(t) = resp.content.as_deref().filter(|t| !t.is_empty()) {
        output.push(json!({
            "type": "message", "id": format!("msg_standin_{n}"), "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": t, "annotations": []}],
        }));
    }
    for (k, c) in resp.tool_calls.iter().enumerate() {
        let fc = format!("fc_standin_{n}_{k}");
        if let Some(rs) = reasoning {
            lock(&s.fc_reasoning).insert(fc.clone(), rs.to_string());
        }
        output.push(json!({
            "type": "function_call", "id": fc, "call_id": c.id, "name": c.name,
            "arguments": arguments_text(&c.arguments), "status": "completed",
        }));
    }
    output
}
