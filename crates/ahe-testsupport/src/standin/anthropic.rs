//! The Anthropic Messages stand-in (`POST /v1/messages`): prompt caching and extended
//! thinking as the real API checks and reports them.

use std::time::Duration;

use ahe_model::anthropic::MAX_BREAKPOINTS;
use ahe_model::types::{ChatRequest, Message, ToolCall, ToolChoice, ToolProtocol, ToolSpec};
use serde_json::{json, Map, Value};

use super::prefix::Block;
use super::{answer_tokens, anthropic_error, sign, tokens, Shared};
use crate::server::RecordedRequest;

/// Top-level fields the real endpoint takes.
const KNOWN: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "stream",
    "metadata",
    "thinking",
    "service_tier",
];

type Reply = (u16, Value);

fn invalid(message: &str) -> Reply {
    anthropic_error(400, "invalid_request_error", message)
}

/// Checks the request as the real API does, then answers it.
pub(super) fn handle(s: &Shared, req: &RecordedRequest) -> Reply {
    if let Some(want) = &s.opts.api_key {
        if req.header("x-api-key") != Some(want.as_str()) {
            return anthropic_error(401, "authentication_error", "invalid x-api-key");
        }
    }
    if req.header("anthropic-version").is_none() {
        return invalid("anthropic-version: header is required");
    }
    let Some(obj) = req.body.as_object() else {
        return invalid("There was an error parsing the body of your request.");
    };
    match check(s, obj) {
        Ok(chat) => answer(s, obj, chat),
        Err(e) => e,
    }
}

fn blocks_of(v: Option<&Value>) -> Vec<Value> {
    match v {
        Some(Value::String(t)) => vec![json!({"type": "text", "text": t})],
        Some(Value::Array(a)) => a.clone(),
        _ => vec![],
    }
}

fn thinking_on(obj: &Map<String, Value>) -> Option<u64> {
    let t = obj.get("thinking")?;
    (t.get("type").and_then(Value::as_str) == Some("enabled"))
        .then(|| t.get("budget_tokens").and_then(Value::as_u64).unwrap_or(0))
}

/// Checks the request as the real API does and translates it to a [`ChatRequest`]: the
/// top-level fields, the cache breakpoints, the conversation, kept thinking blocks.
fn check(s: &Shared, obj: &Map<String, Value>) -> Result<ChatRequest, Reply> {
    let max_tokens = check_fields(s, obj)?;
    let tools = obj
        .get("tools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let system = blocks_of(obj.get("system"));
    let messages = obj
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    check_breakpoints(&tools, &system, &messages)?;
    if messages.is_empty() {
        return Err(invalid("messages: at least one message is required"));
    }
    if messages[0].get("role").and_then(Value::as_str) != Some("user") {
        return Err(invalid(
            "messages: first message must use the \"user\" role",
        ));
    }
    let out = conversation(&system, &messages)?;
    if thinking_on(obj).is_some() {
        check_thinking_kept(&messages)?;
    }
    let specs = tool_specs(&tools);
    Ok(ChatRequest {
        role: s.opts.role,
        messages: out,
        protocol: if specs.is_empty() {
            ToolProtocol::JsonInText
        } else {
            ToolProtocol::Native
        },
        tools: specs,
        temperature: None,
        max_tokens: Some(max_tokens as u32),
        tool_choice: if obj.get("tool_choice").and_then(|t| t.get("type")) == Some(&json!("none")) {
            ToolChoice::None
        } else {
            ToolChoice::Auto
        },
    })
}

/// The top-level fields: none unknown, `model` and `max_tokens` given, thinking's budget
/// and what it forbids. Returns `max_tokens`.
fn check_fields(s: &Shared, obj: &Map<String, Value>) -> Result<u64, Reply> {
    for k in obj.keys() {
        if !KNOWN.contains(&k.as_str()) && !s.opts.extra_fields.contains(k) {
            return Err(invalid(&format!("{k}: Extra inputs are not permitted")));
        }
    }
    if obj.get("model").and_then(Value::as_str).is_none() {
        return Err(invalid("model: Field required"));
    }
    let Some(max_tokens) = obj.get("max_tokens").and_then(Value::as_u64) else {
        return Err(invalid("max_tokens: Field required"));
    };
    let Some(budget) = thinking_on(obj) else {
        return Ok(max_tokens);
    };
    if budget < 1024 {
        return Err(invalid(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
        ));
    }
    if max_tokens <= budget {
        return Err(invalid("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"));
    }
    if obj
        .get("temperature")
        .is_some_and(|t| t.as_f64() != Some(1.0))
    {
        return Err(invalid("`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility"));
    }
    if obj.contains_key("top_k") {
        return Err(invalid("`top_k` is not allowed when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility"));
    }
    Ok(max_tokens)
}

/// At most [`MAX_BREAKPOINTS`] blocks with `cache_control` over tools, system and messages.
fn check_breakpoints(tools: &[Value], system: &[Value], messages: &[Value]) -> Result<(), Reply> {
    let mut breakpoints = tools
        .iter()
        .chain(system)
        .filter(|b| b.get("cache_control").is_some())
        .count();
    for m in messages {
        breakpoints += blocks_of(m.get("content"))
            .iter()
            .filter(|b| b.get("cache_control").is_some())
            .count();
    }
    if breakpoints > MAX_BREAKPOINTS {
        return Err(invalid(&format!(
            "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {breakpoints}."
        )));
    }
    Ok(())
}

/// What one message's content blocks hold, once checked.
#[derive(Default)]
struct Turn {
    /// Its text blocks.
    text: Vec<String>,
    /// Its `tool_use` blocks.
    calls: Vec<ToolCall>,
    /// Its `tool_result` blocks: the call's id and the result's text.
    results: Vec<(String, String)>,
}

/// The system blocks and messages as the brain's conversation: every `tool_use` of an
/// assistant turn answered by a `tool_result` in the next message, and no result without
/// its call.
fn conversation(system: &[Value], messages: &[Value]) -> Result<Vec<Message>, Reply> {
    let mut out: Vec<Message> = Vec::new();
    let sys_text: Vec<String> = system
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str).map(str::to_string))
        .collect();
    if !sys_text.is_empty() {
        out.push(Message::system(sys_text.join("\n\n")));
    }
    let mut prev_tool_uses: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let turn = read_turn(i, role, &blocks_of(m.get("content")), &prev_tool_uses)?;
        // Every tool_use of the previous assistant turn must be answered right here.
        let missing: Vec<&str> = prev_tool_uses
            .iter()
            .filter(|p| !turn.results.iter().any(|(id, _)| id == *p))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(invalid(&format!(
                "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                i - 1,
                missing.join(", ")
            )));
        }
        prev_tool_uses = turn.calls.iter().map(|c| c.id.clone()).collect();
        push_turn(&mut out, role, turn);
    }
    Ok(out)
}

/// Message `i`'s content blocks, checked: non-empty text, thinking blocks with their
/// signature and no `cache_control`, tool results only for `prev_tool_uses` in a user turn,
/// known block types only.
fn read_turn(
    i: usize,
    role: &str,
    blocks: &[Value],
    prev_tool_uses: &[String],
) -> Result<Turn, Reply> {
    let mut turn = Turn::default();
    for (j, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => {
                let t = b.get("text").and_then(Value::as_str).unwrap_or("");
                if t.is_empty() {
                    return Err(invalid("messages: text content blocks must be non-empty"));
                }
                turn.text.push(t.to_string());
            }
            "thinking" => check_thinking_block(i, j, b)?,
            "redacted_thinking" => {}
            "tool_use" => turn.calls.push(ToolCall {
                id: b.get("id").and_then(Value::as_str).unwrap_or("").into(),
                name: b.get("name").and_then(Value::as_str).unwrap_or("").into(),
                arguments: b.get("input").cloned().unwrap_or(json!({})),
            }),
            "tool_result" => {
                let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                if role != "user" || !prev_tool_uses.iter().any(|p| p == id) {
                    return Err(invalid(&format!(
                        "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    )));
                }
                let content = match b.get("content") {
                    Some(Value::String(t)) => t.clone(),
                    c => blocks_of(c)
                        .iter()
                        .filter_map(|x| x.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(""),
                };
                turn.results.push((id.to_string(), content));
            }
            other => return Err(invalid(&format!("messages.{i}.content.{j}.type: Input tag '{other}' found using 'type' does not match any of the expected tags"))),
        }
    }
    Ok(turn)
}

/// A thinking block sent back (block `j` of message `i`): signed by the stand-in, unchanged,
/// without `cache_control`.
fn check_thinking_block(i: usize, j: usize, b: &Value) -> Result<(), Reply> {
    if b.get("cache_control").is_some() {
        return Err(invalid(&format!(
            "messages.{i}.content.{j}.thinking.cache_control: Extra inputs are not permitted"
        )));
    }
    let t = b.get("thinking").and_then(Value::as_str).unwrap_or("");
    if b.get("signature").and_then(Value::as_str) != Some(sign(t).as_str()) {
        return Err(invalid(&format!(
            "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
        )));
    }
    Ok(())
}

/// Appends a checked turn: an assistant message with its calls, or the tool results and
/// then the user's text.
fn push_turn(out: &mut Vec<Message>, role: &str, turn: Turn) {
    if role == "assistant" {
        let content = (!turn.text.is_empty()).then(|| turn.text.join(""));
        out.push(Message::assistant(content, turn.calls));
        return;
    }
    for (id, content) in turn.results {
        out.push(Message::Tool {
            tool_call_id: id,
            name: String::new(),
            content,
        });
    }
    if !turn.text.is_empty() {
        out.push(Message::user(turn.text.join("\n")));
    }
}

/// Thinking on: the assistant turn the last tool results answer must open with its
/// thinking block, sent back unchanged.
fn check_thinking_kept(messages: &[Value]) -> Result<(), Reply> {
    if messages.len() < 2 {
        return Ok(());
    }
    let last = &messages[messages.len() - 1];
    let has_results = blocks_of(last.get("content"))
        .iter()
        .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"));
    let ai = messages.len() - 2;
    let prev = blocks_of(messages[ai].get("content"));
    let first = prev
        .first()
        .and_then(|b| b.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if has_results && !matches!(first, "thinking" | "redacted_thinking") {
        return Err(invalid(&format!(
            "messages.{ai}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{first}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
        )));
    }
    Ok(())
}

/// The request's tools as the brain sees them.
fn tool_specs(tools: &[Value]) -> Vec<ToolSpec> {
    tools
        .iter()
        .map(|t| ToolSpec {
            name: t.get("name").and_then(Value::as_str).unwrap_or("").into(),
            description: t
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .into(),
            input_schema: t.get("input_schema").cloned().unwrap_or(json!({})),
        })
        .collect()
}

/// The prompt as the cache sees it: tools, system, then message blocks, in order.
fn prompt_blocks(obj: &Map<String, Value>) -> Vec<Block> {
    let mut out = Vec::new();
    let mut push = |b: &Value, prefix: &str| {
        let ttl = b.get("cache_control").map(|c| {
            if c.get("ttl").and_then(Value::as_str) == Some("1h") {
                Duration::from_secs(3600)
            } else {
                Duration::from_secs(300)
            }
        });
        let mut plain = b.clone();
        if let Some(m) = plain.as_object_mut() {
            m.remove("cache_control");
        }
        out.push(Block {
            text: format!("{prefix}{plain}"),
            breakpoint: ttl,
        });
    };
    for t in obj
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push(t, "");
    }
    for b in blocks_of(obj.get("system")) {
        push(&b, "");
    }
    for m in obj
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        for (j, b) in blocks_of(m.get("content")).iter().enumerate() {
            push(b, if j == 0 { role } else { "" });
        }
    }
    out
}

fn answer(s: &Shared, obj: &Map<String, Value>, chat: ChatRequest) -> Reply {
    let model = obj["model"].as_str().unwrap_or("").to_string();
    let resp = match s.answer(&chat) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let min = if model.contains("haiku") { 2048 } else { 1024 };
    let cache = s.with_cache("messages", |c| c.anthropic(&prompt_blocks(obj), min));
    let n = s.next_id();
    let mut content = Vec::new();
    let mut thinking_tokens = 0;
    if thinking_on(obj).is_some() {
        let t = format!(
            "Step {n}: the last observation decides what to run next; check it before acting."
        );
        thinking_tokens = tokens(&t);
        content.push(json!({"type": "thinking", "thinking": t, "signature": sign(&t)}));
    }
    if let Some(t) = resp.content.as_deref().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": t}));
    }
    for c in &resp.tool_calls {
        let input = match &c.arguments {
            Value::Object(_) => c.arguments.clone(),
            other => json!({"_raw": other}),
        };
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
    }
    let stop = if resp.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    (
        200,
        json!({
            "id": format!("msg_standin_{n}"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": null,
            "usage": {
                "input_tokens": cache.total - cache.read - cache.write,
                "cache_creation_input_tokens": cache.write,
                "cache_read_input_tokens": cache.read,
                "output_tokens": answer_tokens(&resp) + thinking_tokens,
            },
        }),
    )
}
