//! End-to-end tests of the OpenAI provider and client against a real local HTTP server.

use std::time::{Duration, Instant};

use ahe_model::{
    build_client, ChatRequest, Message, ModelClient, ModelConfig, ModelError, Role, ToolProtocol,
    ToolSpec,
};
use ahe_testsupport::{ScriptedReply, TestServer};
use serde_json::{json, Value};

/// A config pointing at `server`, with tiny backoff and a per-test key env var.
fn cfg(server: &TestServer, key_env: &str) -> ModelConfig {
    ModelConfig {
        provider: "openai".into(),
        model: "test-model".into(),
        base_url: Some(server.base_url()),
        api_key_env: Some(key_env.into()),
        backoff_base_ms: 1,
        backoff_max_ms: 20,
        ..ModelConfig::default()
    }
}

fn client(server: &TestServer, key_env: &str) -> ModelClient {
    build_client(&cfg(server, key_env)).unwrap()
}

fn shell_tool() -> ToolSpec {
    ToolSpec {
        name: "shell".into(),
        description: "Run a command".into(),
        input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }
}

fn req(protocol: ToolProtocol) -> ChatRequest {
    ChatRequest {
        role: Role::CodeAgent,
        messages: vec![Message::system("be brief"), Message::user("hello")],
        tools: vec![shell_tool()],
        protocol,
        temperature: None,
        max_tokens: None,
        tool_choice: Default::default(),
    }
}

#[tokio::test]
async fn plain_text_reply() {
    let server = TestServer::start(vec![ScriptedReply::text("hi there")]);
    let c = client(&server, "AHE_T_PLAIN_KEY");
    let r = c.chat(&req(ToolProtocol::Native)).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("hi there"));
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (10, 5));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[0].body["model"], "test-model");
    assert_eq!(reqs[0].body["messages"][1]["content"], "hello");
    assert_eq!(reqs[0].header("authorization"), None);
    // The fallback answers once the queue is empty.
    let r = c.chat(&req(ToolProtocol::Native)).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("done"));
}

#[tokio::test]
async fn tool_calls_parsed_and_invalid_arguments_kept_raw() {
    let server = TestServer::start(vec![
        ScriptedReply::tool_call("shell", r#"{"command": "ls -la"}"#),
        ScriptedReply::tool_call("shell", r#"{"command": "ls"#),
    ]);
    let c = client(&server, "AHE_T_TOOL_KEY");
    let r = c.chat(&req(ToolProtocol::Native)).await.unwrap();
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].name, "shell");
    assert_eq!(r.tool_calls[0].id, "call_test_0");
    assert_eq!(r.tool_calls[0].arguments, json!({"command": "ls -la"}));
    let r = c.chat(&req(ToolProtocol::Native)).await.unwrap();
    assert_eq!(
        r.tool_calls[0].arguments,
        Value::String(r#"{"command": "ls"#.into())
    );
}

#[tokio::test]
async fn tools_sent_only_with_native_protocol() {
    let server = TestServer::start(vec![]);
    let c = client(&server, "AHE_T_PROTO_KEY");
    c.chat(&req(ToolProtocol::Native)).await.unwrap();
    c.chat(&req(ToolProtocol::JsonInText)).await.unwrap();
    let mut no_tools = req(ToolProtocol::Native);
    no_tools.tools.clear();
    c.chat(&no_tools).await.unwrap();
    let bodies = server.bodies();
    assert_eq!(bodies[0]["tools"][0]["type"], "function");
    assert_eq!(bodies[0]["tools"][0]["function"]["name"], "shell");
    assert_eq!(
        bodies[0]["tools"][0]["function"]["parameters"],
        shell_tool().input_schema
    );
    assert!(bodies[1].get("tools").is_none(), "{}", bodies[1]);
    assert!(bodies[2].get("tools").is_none(), "{}", bodies[2]);
}

#[tokio::test]
async fn rate_limit_is_retried() {
    let server = TestServer::start(vec![ScriptedReply::status(429), ScriptedReply::text("ok")]);
    let c = client(&server, "AHE_T_429_KEY");
    let r = c.chat(&req(ToolProtocol::Native)).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("ok"));
    let s = c.stats();
    assert_eq!((s.calls, s.retries), (1, 1));
    assert_eq!(s.faults.get("transient"), Some(&1));
    assert_eq!(s.per_role["code_agent"].calls, 1);
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn retry_after_is_honoured_and_capped() {
    let server = TestServer::start(vec![
        ScriptedReply::status(503).with_header("Retry-After", "0.4"),
        ScriptedReply::text("ok"),
    ]);
    let mut c = cfg(&server, "AHE_T_RA_KEY");
    c.backoff_max_ms = 5000;
    let client = build_client(&c).unwrap();
    let t0 = Instant::now();
    client.chat(&req(ToolProtocol::Native)).await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );

    // A huge Retry-After is capped at backoff_max_ms.
    let server = TestServer::start(vec![
        ScriptedReply::status(429).with_header("Retry-After", "3600"),
        ScriptedReply::text("ok"),
    ]);
    let client = client_with(&server, "AHE_T_RA2_KEY", |c| c.backoff_max_ms = 30);
    let t0 = Instant::now();
    client.chat(&req(ToolProtocol::Native)).await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

fn client_with(server: &TestServer, key: &str, f: impl FnOnce(&mut ModelConfig)) -> ModelClient {
    let mut c = cfg(server, key);
    f(&mut c);
    build_client(&c).unwrap()
}

#[tokio::test]
async fn server_errors_beyond_max_retries_fail_transient() {
    let server = TestServer::start_with_fallback(vec![], ScriptedReply::status(500));
    let c = client_with(&server, "AHE_T_500_KEY", |c| c.max_retries = 2);
    let e = c.chat(&req(ToolProtocol::Native)).await.unwrap_err();
    assert!(matches!(e, ModelError::Transient { .. }), "{e:?}");
    assert!(e.to_string().contains("500"), "{e}");
    assert_eq!(server.request_count(), 3);
    let s = c.stats();
    assert_eq!(
        (s.retries, s.failed_calls, s.faults["transient"]),
        (2, 1, 3)
    );
}

#[tokio::test]
async fn garbage_body_is_malformed_after_bounded_retries() {
    let server = TestServer::start_with_fallback(vec![], ScriptedReply::garbage());
    let c = client(&server, "AHE_T_GARBAGE_KEY");
    let e = c.chat(&req(ToolProtocol::Native)).await.unwrap_err();
    assert_eq!(e.class(), "malformed");
    // Default max_malformed_retries = 2 → 3 attempts.
    assert_eq!(server.request_count(), 3);
    assert_eq!(c.stats().faults["malformed"], 3);
    // A 200 without choices is malformed too.
    let server = TestServer::start_with_fallback(vec![], ScriptedReply::json(200, "{}"));
    let c = client_with(&server, "AHE_T_GARBAGE2_KEY", |c| {
        c.max_malformed_retries = 0
    });
    assert_eq!(
        c.chat(&req(ToolProtocol::Native))
            .await
            .unwrap_err()
            .class(),
        "malformed"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn unauthorized_names_env_var_but_not_key() {
    let secret = "sk-test-SECRET-value-42";
    std::env::set_var("AHE_T_401_KEY", secret);
    let server = TestServer::start(vec![ScriptedReply::json(
        401,
        format!(r#"{{"error":{{"message":"Incorrect API key provided: {secret}"}}}}"#),
    )]);
    let c = client(&server, "AHE_T_401_KEY");
    let e = c.chat(&req(ToolProtocol::Native)).await.unwrap_err();
    assert!(matches!(e, ModelError::Permanent(_)), "{e:?}");
    let m = e.to_string();
    assert!(m.contains("AHE_T_401_KEY"), "{m}");
    assert!(!m.contains(secret), "{m}");
    assert_eq!(
        server.request_count(),
        1,
        "permanent errors are not retried"
    );
    assert_eq!(
        server.requests()[0].header("Authorization"),
        Some(format!("Bearer {secret}").as_str())
    );
}

#[tokio::test]
async fn not_found_names_url_and_model() {
    let server = TestServer::start(vec![ScriptedReply::status(404)]);
    let c = client(&server, "AHE_T_404_KEY");
    let m = c
        .chat(&req(ToolProtocol::Native))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("test-model") && m.contains(&server.base_url()),
        "{m}"
    );
}

#[tokio::test]
async fn context_length_is_classified() {
    let body = r#"{"error":{"message":"This model's maximum context length is 128000 tokens","code":"context_length_exceeded"}}"#;
    let server = TestServer::start(vec![
        ScriptedReply::json(400, body),
        ScriptedReply::json(400, r#"{"error":{"message":"bad temperature"}}"#),
    ]);
    let c = client(&server, "AHE_T_CTX_KEY");
    let e = c.chat(&req(ToolProtocol::Native)).await.unwrap_err();
    assert!(matches!(e, ModelError::ContextLength(_)), "{e:?}");
    let e = c.chat(&req(ToolProtocol::Native)).await.unwrap_err();
    assert!(
        matches!(&e, ModelError::Permanent(m) if m.contains("bad temperature")),
        "{e:?}"
    );
    assert_eq!(c.stats().faults["context_length"], 1);
}

#[tokio::test]
async fn cost_from_prices_and_sampling_from_config() {
    let server = TestServer::start(vec![ScriptedReply::text("x").with_usage(2000, 500, 1000)]);
    let c = client_with(&server, "AHE_T_COST_KEY", |c| {
        c.price_input_per_mtok = 3.0;
        c.price_cached_input_per_mtok = Some(1.0);
        c.price_output_per_mtok = 15.0;
        c.temperature = Some(0.25);
        c.max_tokens = Some(321);
    });
    let r = c.chat(&req(ToolProtocol::Native)).await.unwrap();
    // 1000 uncached × 3 + 1000 cached × 1 + 500 out × 15 = 11500 µ$·M → 0.0115 $
    assert!((r.cost_usd - 0.0115).abs() < 1e-12, "{}", r.cost_usd);
    assert_eq!(r.usage.cached_input_tokens, 1000);
    let role = &c.stats().per_role["code_agent"];
    assert_eq!(
        (
            role.input_tokens,
            role.cached_input_tokens,
            role.output_tokens
        ),
        (2000, 1000, 500)
    );
    assert!((role.cost_usd - 0.0115).abs() < 1e-12);
    let body = &server.bodies()[0];
    assert_eq!(body["temperature"], 0.25);
    assert_eq!(body["max_tokens"], 321);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_cap_is_respected() {
    for (cap, want_serial) in [(1usize, true), (4, false)] {
        let server = TestServer::start_dynamic(|_, _| ScriptedReply::text("ok").with_delay(60));
        let c = client_with(&server, "AHE_T_CONC_KEY", |c| c.concurrency = cap);
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(async move { c.chat(&req(ToolProtocol::Native)).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert_eq!(server.request_count(), 4);
        if want_serial {
            assert_eq!(server.max_in_flight(), 1);
        } else {
            assert!(server.max_in_flight() > 1, "{}", server.max_in_flight());
        }
        assert_eq!(c.stats().calls, 4);
    }
}

#[tokio::test]
async fn timeout_is_transient_and_retried() {
    let server = TestServer::start(vec![
        ScriptedReply::text("slow").with_delay(2000),
        ScriptedReply::text("fast"),
    ]);
    let c = client_with(&server, "AHE_T_TIMEOUT_KEY", |c| c.timeout_sec = 0.2);
    let r = c.chat(&req(ToolProtocol::Native)).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("fast"));
    assert_eq!(c.stats().faults["transient"], 1);
}

#[tokio::test]
async fn connection_refused_is_transient() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let c = build_client(&ModelConfig {
        provider: "openai".into(),
        model: "m".into(),
        base_url: Some(format!("http://127.0.0.1:{port}/v1")),
        api_key_env: Some("AHE_T_REFUSED_KEY".into()),
        max_retries: 1,
        backoff_base_ms: 1,
        backoff_max_ms: 2,
        ..ModelConfig::default()
    })
    .unwrap();
    let e = c.chat(&req(ToolProtocol::Native)).await.unwrap_err();
    assert_eq!(e.class(), "transient", "{e}");
    assert_eq!(c.stats().faults["transient"], 2);
}

#[tokio::test]
async fn dynamic_replies_see_history() {
    // The dynamic reply depends on how many assistant turns the request carries.
    let server = TestServer::start_dynamic(|body, _| {
        let turns = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|x| x["role"] == "assistant").count());
        if turns == 0 {
            ScriptedReply::tool_call("shell", r#"{"command":"echo hi"}"#)
        } else {
            ScriptedReply::text("finished")
        }
    });
    let c = client(&server, "AHE_T_DYN_KEY");
    let mut r = req(ToolProtocol::Native);
    let a = c.chat(&r).await.unwrap();
    assert_eq!(a.tool_calls[0].arguments, json!({"command": "echo hi"}));
    r.messages.push(a.to_message());
    r.messages.push(Message::Tool {
        tool_call_id: a.tool_calls[0].id.clone(),
        name: "shell".into(),
        content: "hi".into(),
    });
    let b = c.chat(&r).await.unwrap();
    assert_eq!(b.content.as_deref(), Some("finished"));
    let sent = &server.bodies()[1]["messages"];
    assert_eq!(
        sent[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"command":"echo hi"}"#
    );
    assert_eq!(sent[3]["tool_call_id"], "call_test_0");
}
