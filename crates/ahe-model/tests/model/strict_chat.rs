//! The openai provider (chat completions) against the strict stand-in: reasoning models
//! (`max_completion_tokens`, default temperature only, `reasoning_effort`), `extra_body`,
//! tool-call pairing, usage with reasoning and cached tokens. Each rejection is what the
//! 2024-shaped provider sent (`max_tokens`, temperature 0.7) and what the real API refuses.

use ahe_model::mock::{MockMode, MockProvider};
use ahe_model::openai::{ChatSettings, OpenAiProvider};
use ahe_model::{
    build_client, ChatRequest, Message, ModelConfig, ModelError, Provider, Role, ToolCall,
    ToolProtocol, ToolSpec,
};
use ahe_testsupport::{StandIn, StandInOptions};
use serde_json::json;

fn oracle() -> MockProvider {
    MockProvider::new(MockMode::Oracle)
}

fn server() -> StandIn {
    StandIn::with_mock(StandInOptions::default(), oracle())
}

fn cfg(s: &StandIn, model: &str) -> ModelConfig {
    ModelConfig {
        provider: "openai".into(),
        model: model.into(),
        base_url: Some(s.openai_base_url()),
        api_key_env: Some("AHE_T_STRICT_CHAT_UNSET".into()),
        max_tokens: Some(4000),
        max_retries: 0,
        ..ModelConfig::default()
    }
}

fn shell() -> ToolSpec {
    ToolSpec {
        name: "shell".into(),
        description: "Run a command".into(),
        input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    }
}

/// A system prompt of about 2000 tokens (caching starts at 1024).
fn long_system() -> String {
    "You solve software tasks in a sandbox; read before you write. ".repeat(130)
}

fn req() -> ChatRequest {
    ChatRequest {
        role: Role::CodeAgent,
        messages: vec![Message::system(long_system()), Message::user("fix the bug")],
        tools: vec![shell()],
        protocol: ToolProtocol::Native,
        temperature: None,
        max_tokens: None,
        tool_choice: Default::default(),
    }
}

fn permanent(e: ModelError) -> String {
    assert_eq!(e.class(), "permanent", "{e}");
    e.to_string()
}

#[tokio::test]
async fn reasoning_model_agent_loop_reports_reasoning_and_cached_tokens() {
    let s = server();
    let mut c = cfg(&s, "gpt-5-mini");
    c.reasoning_effort = Some("high".into());
    c.price_input_per_mtok = 0.25;
    c.price_cached_input_per_mtok = Some(0.025);
    c.price_output_per_mtok = 2.0;
    let client = build_client(&c).unwrap();
    let mut r = req();
    let a = client.chat(&r).await.unwrap();
    assert_eq!(a.tool_calls.len(), 1, "{a:?}");
    assert_eq!(a.usage.reasoning_tokens, 256);
    assert_eq!(a.usage.cached_input_tokens, 0);
    r.messages.push(a.to_message());
    r.messages.push(Message::Tool {
        tool_call_id: a.tool_calls[0].id.clone(),
        name: "shell".into(),
        content: "ok".into(),
    });
    let b = client.chat(&r).await.unwrap();
    assert_eq!(b.content.as_deref(), Some("done"));
    // The second call repeats the first's ~2000-token prefix: the stand-in serves it cached.
    assert!(b.usage.cached_input_tokens >= 1024, "{:?}", b.usage);
    let body = &s.exchanges()[0].request.body;
    assert_eq!(body["max_completion_tokens"], 4000);
    assert_eq!(body["reasoning_effort"], "high");
    for absent in ["max_tokens", "temperature", "top_p"] {
        assert!(body.get(absent).is_none(), "{absent} sent: {body}");
    }
    let st = client.stats();
    let ca = &st.per_role["code_agent"];
    assert_eq!(ca.reasoning_tokens, 512);
    assert_eq!(ca.cached_input_tokens, b.usage.cached_input_tokens);
    let uncached = ca.input_tokens - ca.cached_input_tokens;
    let want = (uncached as f64 * 0.25
        + ca.cached_input_tokens as f64 * 0.025
        + ca.output_tokens as f64 * 2.0)
        / 1e6;
    assert!((st.total_cost_usd() - want).abs() < 1e-12);
}

#[tokio::test]
async fn max_tokens_for_a_reasoning_model_is_rejected_as_the_api_does() {
    let s = server();
    // What the 2024 provider sent: `max_tokens`.
    let mut c = cfg(&s, "o3");
    c.max_tokens_field = Some("max_tokens".into());
    let e = permanent(build_client(&c).unwrap().chat(&req()).await.unwrap_err());
    assert!(
        e.contains("HTTP 400") && e.contains("Use 'max_completion_tokens' instead"),
        "{e}"
    );
    let reply = &s.last().unwrap().reply;
    assert_eq!(reply["error"]["param"], "max_tokens");
    assert_eq!(reply["error"]["type"], "invalid_request_error");
    assert_eq!(reply["error"]["code"], "unsupported_parameter");
    // `auto` picks the right field; a non-reasoning model keeps `max_tokens`.
    c.max_tokens_field = None;
    build_client(&c).unwrap().chat(&req()).await.unwrap();
    build_client(&cfg(&s, "gpt-4o"))
        .unwrap()
        .chat(&req())
        .await
        .unwrap();
    assert_eq!(s.last().unwrap().request.body["max_tokens"], 4000);
}

#[tokio::test]
async fn non_default_temperature_is_rejected_and_only_sent_when_set() {
    let s = server();
    // The old configs/openai.toml set temperature = 0.7; the config check now names it ...
    let mut c = cfg(&s, "gpt-5");
    c.temperature = Some(0.7);
    let e = build_client(&c).unwrap_err().to_string();
    assert!(e.contains("temperature: reasoning model `gpt-5`"), "{e}");
    // ... and the stand-in refuses it the way the API does (provider used without the check).
    let p = OpenAiProvider::new(&c).unwrap();
    let mut r = req();
    r.temperature = Some(0.7);
    let e = permanent(p.chat(&r).await.unwrap_err());
    assert!(e.contains("Unsupported value: 'temperature'"), "{e}");
    assert_eq!(s.last().unwrap().reply["error"]["param"], "temperature");
    r.temperature = None;
    p.chat(&r).await.unwrap();
    assert!(s.last().unwrap().request.body.get("temperature").is_none());
    // An unknown effort is the API's invalid_value.
    c.temperature = None;
    c.reasoning_effort = Some("extreme".into());
    let e = permanent(
        OpenAiProvider::new(&c)
            .unwrap()
            .chat(&req())
            .await
            .unwrap_err(),
    );
    assert!(e.contains("Invalid value"), "{e}");
    assert_eq!(s.last().unwrap().reply["error"]["code"], "invalid_value");
}

#[tokio::test]
async fn extra_body_is_merged_and_unknown_fields_refused() {
    let or = StandIn::with_mock(
        StandInOptions {
            extra_fields: vec!["provider".into()],
            ..StandInOptions::default()
        },
        oracle(),
    );
    let mut c = cfg(&or, "gpt-4o");
    c.extra_body.insert(
        "provider".into(),
        json!({"order": ["openai"], "allow_fallbacks": false}),
    );
    build_client(&c).unwrap().chat(&req()).await.unwrap();
    assert_eq!(
        or.last().unwrap().request.body["provider"]["order"],
        json!(["openai"])
    );
    // OpenAI itself does not take `provider`.
    let s = server();
    c.base_url = Some(s.openai_base_url());
    let e = permanent(build_client(&c).unwrap().chat(&req()).await.unwrap_err());
    assert!(
        e.contains("Unrecognized request argument supplied: provider"),
        "{e}"
    );
}

#[tokio::test]
async fn tool_replies_must_pair_with_their_calls() {
    let s = server();
    let p = OpenAiProvider::new(&cfg(&s, "gpt-4o")).unwrap();
    // A tool reply with no call before it.
    let mut r = req();
    r.messages.push(Message::Tool {
        tool_call_id: "call_x".into(),
        name: "shell".into(),
        content: "out".into(),
    });
    let e = permanent(p.chat(&r).await.unwrap_err());
    assert!(
        e.contains("must be a response to a preceeding message with 'tool_calls'"),
        "{e}"
    );
    assert_eq!(
        s.last().unwrap().reply["error"]["param"],
        "messages.[2].role"
    );
    // A call with no reply.
    let mut r = req();
    r.messages.push(Message::assistant(
        None,
        vec![ToolCall {
            id: "call_y".into(),
            name: "shell".into(),
            arguments: json!({"command": "ls"}),
        }],
    ));
    r.messages.push(Message::user("go on"));
    let e = permanent(p.chat(&r).await.unwrap_err());
    assert!(e.contains("did not have response messages: call_y"), "{e}");
    // The plain body builder still makes the 2024 shape for servers that want it.
    let b = ahe_model::openai::request_body(&ChatSettings::plain("gpt-4o"), &req());
    assert!(b.get("max_completion_tokens").is_none());
}
