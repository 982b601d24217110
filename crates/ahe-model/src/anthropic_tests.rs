use super::*;
use crate::types::{Role, ToolSpec};

fn provider(base: &str) -> AnthropicProvider {
    AnthropicProvider::new(&ModelConfig {
        provider: "anthropic".into(),
        model: "claude-test".into(),
        base_url: Some(base.into()),
        ..ModelConfig::default()
    })
    .unwrap()
}

#[test]
fn endpoint_key_env_and_describe() {
    let p = provider("http://x/");
    assert_eq!(p.endpoint(), "http://x/v1/messages");
    assert_eq!(provider("http://x/v1").endpoint(), "http://x/v1/messages");
    assert_eq!(p.describe(), "anthropic:claude-test");
    let m = p.status_error(401, None, "", None).to_string();
    assert!(m.contains("ANTHROPIC_API_KEY (it is not set)"), "{m}");
    assert_eq!(
        p.status_error(529, Some(1.0), "", None).class(),
        "transient"
    );
}

fn call(id: &str, args: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "shell".into(),
        arguments: args,
    }
}

fn tool(id: &str, out: &str) -> Message {
    Message::Tool {
        tool_call_id: id.into(),
        name: "shell".into(),
        content: out.into(),
    }
}

#[test]
fn thinking_leaves_room_above_its_budget_or_stays_off_for_a_short_probe() {
    let s = AnthropicSettings {
        thinking_budget: Some(2048),
        ..AnthropicSettings::plain("claude-test")
    };
    let mut req = ChatRequest {
        role: Role::CodeAgent,
        messages: vec![Message::user("hi")],
        tools: vec![],
        protocol: ToolProtocol::Native,
        temperature: None,
        max_tokens: None,
        tool_choice: ToolChoice::Auto,
    };
    let b = request_body(&s, &req);
    assert_eq!(b["thinking"]["budget_tokens"], 2048);
    assert!(b["max_tokens"].as_u64().unwrap() > 2048, "{b}");
    req.max_tokens = Some(1);
    let b = request_body(&s, &req);
    assert!(b.get("thinking").is_none(), "{b}");
    assert_eq!(b["max_tokens"], 1);
    req.max_tokens = Some(4096);
    assert_eq!(request_body(&s, &req)["thinking"]["budget_tokens"], 2048);
}

#[test]
fn body_maps_system_tools_and_merges_tool_results() {
    let req = ChatRequest {
        role: Role::CodeAgent,
        messages: vec![
            Message::system("sys"),
            Message::user("task"),
            Message::assistant(
                Some("looking".into()),
                vec![
                    call("t1", json!({"command": "ls"})),
                    call("t2", Value::String("{bad".into())),
                ],
            ),
            tool("t1", "a b"),
            tool("t2", "err"),
            Message::user("note"),
            Message::assistant(None, vec![]),
            Message::assistant(Some("done".into()), vec![]),
        ],
        tools: vec![ToolSpec {
            name: "shell".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
        }],
        protocol: ToolProtocol::Native,
        temperature: Some(0.25),
        max_tokens: None,
        tool_choice: Default::default(),
    };
    let b = request_body(&AnthropicSettings::plain("claude-test"), &req);
    assert_eq!(b["system"], "sys");
    assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
    assert_eq!(b["temperature"], 0.25);
    assert_eq!(
        b["tools"],
        json!([{"name": "shell", "description": "d", "input_schema": {"type": "object"}}])
    );
    assert!(b.get("tool_choice").is_none());
    let none = ChatRequest {
        tool_choice: ToolChoice::None,
        ..req.clone()
    };
    assert_eq!(
        request_body(&AnthropicSettings::plain("claude-test"), &none)["tool_choice"],
        json!({"type": "none"})
    );
    let msgs = b["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    assert_eq!(
        msgs[0]["content"],
        json!([{"type": "text", "text": "task"}])
    );
    assert_eq!(
        msgs[1]["content"],
        json!([
            {"type": "text", "text": "looking"},
            {"type": "tool_use", "id": "t1", "name": "shell", "input": {"command": "ls"}},
            {"type": "tool_use", "id": "t2", "name": "shell", "input": {"_raw": "{bad"}},
        ])
    );
    assert_eq!(
        msgs[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "t1", "content": "a b"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "err"},
            {"type": "text", "text": "note"},
        ])
    );
    assert_eq!(
        msgs[3]["content"],
        json!([{"type": "text", "text": "done"}])
    );

    let mut jt = req.clone();
    jt.protocol = ToolProtocol::JsonInText;
    jt.temperature = None;
    jt.max_tokens = Some(9);
    jt.messages.remove(0);
    let b = request_body(&AnthropicSettings::plain("claude-test"), &jt);
    assert!(b.get("tools").is_none() && b.get("temperature").is_none());
    assert!(b.get("system").is_none());
    assert_eq!(b["max_tokens"], 9);
}

#[test]
fn response_parsing() {
    let body = r#"{"id":"msg_1","type":"message","role":"assistant","content":[
        {"type":"text","text":"Let me "},{"type":"thinking","thinking":"hm"},
        {"type":"text","text":"look."},
        {"type":"tool_use","id":"toolu_a","name":"shell","input":{"command":"ls"}}],
        "stop_reason":"tool_use",
        "usage":{"input_tokens":100,"output_tokens":20,"cache_read_input_tokens":300,
                 "cache_creation_input_tokens":50}}"#;
    let r = parse_response(body).unwrap();
    assert_eq!(r.content.as_deref(), Some("Let me look."));
    assert_eq!(
        r.tool_calls,
        vec![call("toolu_a", json!({"command": "ls"}))]
    );
    assert_eq!(r.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 450,
            cached_input_tokens: 300,
            output_tokens: 20,
            cache_write_input_tokens: 50,
            reasoning_tokens: 1,
        }
    );
    assert_eq!(
        r.opaque,
        vec![json!({"type": "thinking", "thinking": "hm"})]
    );
    let r = parse_response(r#"{"content":[],"stop_reason":"end_turn"}"#).unwrap();
    assert_eq!((r.content, r.tool_calls.len()), (None, 0));
    for bad in [
        "{\"content\":[{\"type\":\"text\",\"te",
        r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
        r#"{"content":[{"type":"tool_use","id":"x","input":{}}]}"#,
    ] {
        assert_eq!(
            parse_response(bad).unwrap_err().class(),
            "malformed",
            "{bad}"
        );
    }
}
