//! End-to-end tests of the Anthropic provider against a local server speaking the
//! Messages API: tool-use round trip, usage and cost, error classes.

use std::time::{Duration, Instant};

use ahe_model::{
    build_client, ChatRequest, Message, ModelClient, ModelConfig, Role, ToolProtocol, ToolSpec,
};
use ahe_testsupport::{ScriptedReply, TestServer};
use serde_json::json;

fn cfg(server: &TestServer, key_env: &str) -> ModelConfig {
    ModelConfig {
        provider: "anthropic".into(),
        model: "claude-test".into(),
        base_url: Some(server.anthropic_base_url()),
        api_key_env: Some(key_env.into()),
        backoff_base_ms: 1,
        backoff_max_ms: 20,
        ..ModelConfig::default()
    }
}

fn client_with(server: &TestServer, key: &str, f: impl FnOnce(&mut ModelConfig)) -> ModelClient {
    let mut c = cfg(server, key);
    f(&mut c);
    build_client(&c).unwrap()
}

fn shell() -> ToolSpec {
    ToolSpec {
        name: "shell".into(),
        description: "Run a command".into(),
        input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }
}

fn req() -> ChatRequest {
    ChatRequest {
        role: Role::CodeAgent,
        messages: vec![Message::system("be brief"), Message::user("list files")],
        tools: vec![shell()],
        protocol: ToolProtocol::Native,
        temperature: None,
        max_tokens: None,
        tool_choice: Default::default(),
    }
}

#[tokio::test]
async fn tool_use_round_trip() {
    std::env::set_var("AHE_T_ANTH_RT_KEY", "sk-ant-test-123");
    let server = TestServer::start(vec![
        ScriptedReply::anthropic_tool_use("shell", json!({"command": "ls"})),
        ScriptedReply::anthropic_text("two files"),
    ]);
    // Caching off: the plain (2024) request shape; tests/model/strict_anthropic.rs covers caching.
    let c = client_with(&server, "AHE_T_ANTH_RT_KEY", |c| {
        c.max_tokens = Some(64);
        c.prompt_cache = Some(false);
    });
    let mut r = req();
    let a = c.chat(&r).await.unwrap();
    assert_eq!(a.tool_calls.len(), 1);
    assert_eq!(a.tool_calls[0].id, "toolu_test_0");
    assert_eq!(a.tool_calls[0].name, "shell");
    assert_eq!(a.tool_calls[0].arguments, json!({"command": "ls"}));
    assert_eq!(a.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(a.content, None);
    r.messages.push(a.to_message());
    r.messages.push(Message::Tool {
        tool_call_id: a.tool_calls[0].id.clone(),
        name: "shell".into(),
        content: "a.txt\nb.txt".into(),
    });
    let b = c.chat(&r).await.unwrap();
    assert_eq!(b.content.as_deref(), Some("two files"));
    assert!(b.tool_calls.is_empty());
    assert_eq!(b.finish_reason.as_deref(), Some("end_turn"));

    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    for q in &reqs {
        assert_eq!(q.path, "/v1/messages");
        assert_eq!(q.header("x-api-key"), Some("sk-ant-test-123"));
        assert_eq!(q.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(q.header("authorization"), None);
        assert_eq!(q.body["model"], "claude-test");
        assert_eq!(q.body["system"], "be brief");
        assert_eq!(q.body["max_tokens"], 64);
        assert_eq!(
            q.body["tools"],
            json!([{"name": "shell", "description": "Run a command",
                    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}])
        );
    }
    assert_eq!(
        reqs[0].body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "list files"}]}])
    );
    assert_eq!(
        reqs[1].body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "list files"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_test_0", "name": "shell", "input": {"command": "ls"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_test_0", "content": "a.txt\nb.txt"}]},
        ])
    );
}

#[tokio::test]
async fn usage_and_cost_with_cached_input_price() {
    let server = TestServer::start(vec![
        ScriptedReply::anthropic_text("a").with_anthropic_usage(600_000, 100_000, 400_000),
        ScriptedReply::anthropic_text("b").with_anthropic_usage(1_000, 0, 0),
    ]);
    let c = client_with(&server, "AHE_T_ANTH_USAGE_KEY", |c| {
        c.price_input_per_mtok = 3.0;
        c.price_cached_input_per_mtok = Some(0.3);
        c.price_output_per_mtok = 15.0;
    });
    let r = c.chat(&req()).await.unwrap();
    // 600k uncached + 400k cache reads = 1M prompt tokens, 400k of them cached.
    assert_eq!(
        (
            r.usage.input_tokens,
            r.usage.cached_input_tokens,
            r.usage.output_tokens
        ),
        (1_000_000, 400_000, 100_000)
    );
    let expected = 0.6 * 3.0 + 0.4 * 0.3 + 0.1 * 15.0;
    assert!((r.cost_usd - expected).abs() < 1e-9, "{}", r.cost_usd);
    let mut evolve = req();
    evolve.role = Role::Evolve;
    let r2 = c.chat(&evolve).await.unwrap();
    assert!((r2.cost_usd - 0.003).abs() < 1e-12);
    let s = c.stats();
    let ca = &s.per_role["code_agent"];
    assert_eq!(
        (
            ca.calls,
            ca.input_tokens,
            ca.cached_input_tokens,
            ca.output_tokens
        ),
        (1, 1_000_000, 400_000, 100_000)
    );
    assert_eq!(s.per_role["evolve"].input_tokens, 1_000);
    assert!((s.total_cost_usd() - expected - 0.003).abs() < 1e-9);
}

#[tokio::test]
async fn transient_errors_retried_honouring_retry_after() {
    let server = TestServer::start(vec![
        ScriptedReply::anthropic_error(429, "rate_limit_error", "slow down")
            .with_header("retry-after", "0.3"),
        ScriptedReply::anthropic_error(529, "overloaded_error", "overloaded"),
        ScriptedReply::anthropic_error(500, "api_error", "oops"),
        ScriptedReply::anthropic_text("ok").truncated(40),
        ScriptedReply::anthropic_text("ok"),
    ]);
    let c = client_with(&server, "AHE_T_ANTH_RETRY_KEY", |c| {
        c.backoff_max_ms = 5_000;
    });
    let t0 = Instant::now();
    let r = c.chat(&req()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("ok"));
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t0.elapsed()
    );
    let s = c.stats();
    assert_eq!(server.request_count(), 5);
    assert_eq!(s.retries, 4);
    assert_eq!(s.faults["transient"], 3);
    assert_eq!(s.faults["malformed"], 1);
}

#[tokio::test]
async fn permanent_and_context_errors() {
    std::env::remove_var("AHE_T_ANTH_401_KEY");
    let server = TestServer::start(vec![ScriptedReply::anthropic_error(
        401,
        "authentication_error",
        "invalid x-api-key",
    )]);
    let c = client_with(&server, "AHE_T_ANTH_401_KEY", |_| {});
    let e = c.chat(&req()).await.unwrap_err();
    assert_eq!(e.class(), "permanent");
    assert!(
        e.to_string().contains("AHE_T_ANTH_401_KEY (it is not set)"),
        "{e}"
    );
    assert_eq!(server.request_count(), 1, "not retried");

    let server = TestServer::start(vec![ScriptedReply::anthropic_error(
        400,
        "invalid_request_error",
        "prompt is too long: 210000 tokens > 200000 maximum",
    )]);
    let c = client_with(&server, "AHE_T_ANTH_CTX_KEY", |_| {});
    assert_eq!(c.chat(&req()).await.unwrap_err().class(), "context_length");

    let server = TestServer::start(vec![ScriptedReply::anthropic_error(
        404,
        "not_found_error",
        "model: claude-test",
    )]);
    let c = client_with(&server, "AHE_T_ANTH_404_KEY", |_| {});
    let m = c.chat(&req()).await.unwrap_err().to_string();
    assert!(
        m.contains("claude-test") && m.contains("/v1/messages"),
        "{m}"
    );

    let server = TestServer::start_with_fallback(vec![], ScriptedReply::garbage());
    let c = client_with(&server, "AHE_T_ANTH_BAD_KEY", |c| {
        c.max_malformed_retries = 1
    });
    assert_eq!(c.chat(&req()).await.unwrap_err().class(), "malformed");
    assert_eq!(server.request_count(), 2);
}
