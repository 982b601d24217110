//! Record/replay through the client against a real local server: recorded answers are
//! replayed with the server gone, misses fail clearly, retries and accounting stay in the client.

use std::sync::Arc;

use ahe_model::cache::request_hash;
use ahe_model::{
    build_client_with, Budget, CacheMode, ChatRequest, ClientOptions, Message, ModelConfig, Role,
    ToolProtocol,
};
use ahe_testsupport::{ScriptedReply, TestServer};
use serde_json::json;

fn cfg(base_url: String, mode: CacheMode) -> ModelConfig {
    ModelConfig {
        provider: "openai".into(),
        model: "test-model".into(),
        base_url: Some(base_url),
        api_key_env: Some("AHE_T_CACHE_KEY".into()),
        backoff_base_ms: 1,
        backoff_max_ms: 5,
        max_retries: 2,
        price_input_per_mtok: 1_000.0,
        cache: mode,
        ..ModelConfig::default()
    }
}

fn req(text: &str) -> ChatRequest {
    ChatRequest {
        role: Role::Debugger,
        messages: vec![Message::system("s"), Message::user(text)],
        tools: vec![],
        protocol: ToolProtocol::Native,
        temperature: None,
        max_tokens: None,
        tool_choice: Default::default(),
    }
}

#[tokio::test]
async fn record_then_replay_without_network() {
    let d = tempfile::tempdir().unwrap();
    let opts = ClientOptions {
        default_cache_dir: Some(d.path().join("model-cache")),
        budget: None,
    };
    let server = TestServer::start(vec![
        ScriptedReply::status(503),
        ScriptedReply::tool_call("shell", r#"{"command":"ls"}"#),
        ScriptedReply::text("second"),
        ScriptedReply::text("one, again"),
    ]);
    let url = server.base_url();
    let rec = build_client_with(&cfg(url.clone(), CacheMode::Record), &opts).unwrap();
    let a = rec.chat(&req("one")).await.unwrap();
    let b = rec.chat(&req("two")).await.unwrap();
    // A repeated request (another trial of the same task) gets its own answer.
    let a2 = rec.chat(&req("one")).await.unwrap();
    assert_eq!(a2.content.as_deref(), Some("one, again"));
    assert_eq!(server.request_count(), 4, "503 + three recorded calls");
    let s = rec.stats();
    assert_eq!((s.calls, s.retries, s.faults["transient"]), (3, 1, 1));
    // Cost is recomputed from the prices for stored answers too: 10 prompt tokens each.
    assert!(
        (s.total_cost_usd() - 0.03).abs() < 1e-9,
        "{}",
        s.total_cost_usd()
    );
    let h = request_hash("openai", "test-model", &req("one"));
    let shard = d.path().join("model-cache").join(&h[..2]);
    assert!(shard.join(format!("{h}.json")).is_file());
    assert!(shard.join(format!("{h}.1.json")).is_file());
    drop(server);

    let rep = build_client_with(&cfg(url, CacheMode::Replay), &opts).unwrap();
    assert_eq!(rep.chat(&req("two")).await.unwrap(), b);
    assert_eq!(rep.chat(&req("one")).await.unwrap(), a);
    assert_eq!(rep.chat(&req("one")).await.unwrap(), a2);
    assert_eq!(a.tool_calls[0].arguments, json!({"command": "ls"}));
    let e = rep.chat(&req("never seen")).await.unwrap_err();
    let h = request_hash("openai", "test-model", &req("never seen"));
    assert_eq!(e.class(), "permanent");
    assert!(
        e.to_string().contains(&h) && e.to_string().contains("model-cache"),
        "{e}"
    );
    let s = rep.stats();
    assert_eq!((s.retries, s.failed_calls), (0, 1), "a miss is not retried");
    assert_eq!(s.per_role["debugger"].calls, 3);
}

#[tokio::test]
async fn replayed_calls_count_against_the_budget() {
    let d = tempfile::tempdir().unwrap();
    let server = TestServer::start(vec![]);
    let mut c = cfg(server.base_url(), CacheMode::Record);
    c.cache_dir = Some(d.path().to_path_buf());
    let rec = build_client_with(&c, &ClientOptions::default()).unwrap();
    rec.chat(&req("a")).await.unwrap();
    assert_eq!(server.request_count(), 1);

    // Each replayed answer costs what the recorded one did (10 prompt tokens = $0.01).
    c.cache = CacheMode::Replay;
    let budget = Arc::new(Budget::new(0.015));
    let opts = ClientOptions {
        default_cache_dir: None,
        budget: Some(budget.clone()),
    };
    let rep = build_client_with(&c, &opts).unwrap();
    assert!((rep.chat(&req("a")).await.unwrap().cost_usd - 0.01).abs() < 1e-12);
    rep.chat(&req("a")).await.unwrap();
    assert!(budget.exhausted(), "{}", budget.spent_usd());
    assert_eq!(rep.chat(&req("a")).await.unwrap_err().class(), "budget");
    assert_eq!(server.request_count(), 1, "replay never calls the server");
}
