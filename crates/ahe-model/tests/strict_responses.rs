//! The openai provider with `api = "responses"` against the strict Responses stand-in:
//! function tools at the top level, `store: false`, reasoning items carried (unchanged)
//! into the next turn, usage mapped; and the API's rejections.

use ahe_model::mock::{MockMode, MockProvider};
use ahe_model::openai::OpenAiProvider;
use ahe_model::{
    build_client, ChatRequest, Message, ModelConfig, ModelError, Provider, Role, ToolProtocol,
    ToolSpec,
};
use ahe_testsupport::{StandIn, StandInOptions};
use serde_json::{json, Value};

fn server() -> StandIn {
    StandIn::with_mock(
        StandInOptions::default(),
        MockProvider::new(MockMode::Oracle),
    )
}

fn cfg(s: &StandIn) -> ModelConfig {
    ModelConfig {
        provider: "openai".into(),
        model: "gpt-5".into(),
        api: Some("responses".into()),
        base_url: Some(s.openai_base_url()),
        api_key_env: Some("AHE_T_STRICT_RESP_KEY".into()),
        reasoning_effort: Some("medium".into()),
        max_tokens: Some(8000),
        max_retries: 0,
        ..ModelConfig::default()
    }
}

fn req() -> ChatRequest {
    ChatRequest {
        role: Role::CodeAgent,
        messages: vec![
            Message::system("You solve software tasks. ".repeat(300)),
            Message::user("make the tests pass"),
        ],
        tools: vec![ToolSpec {
            name: "shell".into(),
            description: "Run a command".into(),
            input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        }],
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

fn tool_reply(a: &ahe_model::ChatResponse) -> Message {
    Message::Tool {
        tool_call_id: a.tool_calls[0].id.clone(),
        name: "shell".into(),
        content: "2 passed".into(),
    }
}

#[tokio::test]
async fn reasoning_items_are_carried_across_tool_calls() {
    std::env::set_var("AHE_T_STRICT_RESP_KEY", "sk-resp-test-1");
    let s = StandIn::with_mock(
        StandInOptions {
            api_key: Some("sk-resp-test-1".into()),
            ..StandInOptions::default()
        },
        MockProvider::new(MockMode::Oracle),
    );
    let c = build_client(&cfg(&s)).unwrap();
    let mut r = req();
    let a = c.chat(&r).await.unwrap();
    assert_eq!(a.tool_calls[0].name, "shell");
    assert_eq!(a.usage.reasoning_tokens, 64);
    r.messages.push(a.to_message());
    r.messages.push(tool_reply(&a));
    let b = c.chat(&r).await.unwrap();
    assert_eq!(b.content.as_deref(), Some("done"));
    assert!(b.usage.cached_input_tokens >= 1024, "{:?}", b.usage);
    let x = s.exchanges();
    assert!(x.iter().all(|e| e.status == 200));
    let first = &x[0].request.body;
    assert_eq!(x[0].request.path, "/v1/responses");
    assert_eq!(first["store"], false);
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(first["reasoning"], json!({"effort": "medium"}));
    assert_eq!(first["max_output_tokens"], 8000);
    assert_eq!(first["tools"][0]["name"], "shell");
    assert!(first["instructions"]
        .as_str()
        .unwrap()
        .starts_with("You solve"));
    // The second input holds the first output's items as returned, reasoning first.
    let input = x[1].request.body["input"].as_array().unwrap().clone();
    let output = x[0].reply["output"].as_array().unwrap().clone();
    assert_eq!(output[0]["type"], "reasoning");
    assert_eq!(input[1], output[0], "reasoning item sent back unchanged");
    assert_eq!(input[2]["id"], output[1]["id"]);
    assert_eq!(input[3]["type"], "function_call_output");
    let st = c.stats();
    let ca = &st.per_role["code_agent"];
    assert_eq!(ca.reasoning_tokens, 128);
    assert!(ca.cached_input_tokens >= 1024);
    // The key travels only in the Authorization header.
    assert_eq!(
        x[0].request.header("authorization"),
        Some("Bearer sk-resp-test-1")
    );
    assert!(!x[0].request.body.to_string().contains("sk-resp-test-1"));
}

#[tokio::test]
async fn dropped_or_altered_reasoning_items_are_refused() {
    let s = server();
    let p = OpenAiProvider::new(&cfg(&s)).unwrap();
    let a = p.chat(&req()).await.unwrap();
    // A turn sent back without its reasoning item (state lost between tool calls).
    let mut dropped = req();
    let kept: Vec<Value> = a
        .opaque
        .iter()
        .filter(|i| i["type"] != "reasoning")
        .cloned()
        .collect();
    dropped.messages.push(ahe_model::Message::Assistant {
        content: None,
        tool_calls: a.tool_calls.clone(),
        opaque: kept,
    });
    dropped.messages.push(tool_reply(&a));
    let e = permanent(p.chat(&dropped).await.unwrap_err());
    assert!(e.contains("without its required 'reasoning' item"), "{e}");
    assert_eq!(s.last().unwrap().reply["error"]["param"], "input");
    // A reasoning item whose encrypted content was changed.
    let mut altered = req();
    let mut items = a.opaque.clone();
    items[0]["encrypted_content"] = json!("gAAAAB-tampered");
    altered.messages.push(ahe_model::Message::Assistant {
        content: None,
        tool_calls: a.tool_calls.clone(),
        opaque: items,
    });
    altered.messages.push(tool_reply(&a));
    let e = permanent(p.chat(&altered).await.unwrap_err());
    assert!(e.contains("could not be verified"), "{e}");
    assert_eq!(
        s.last().unwrap().reply["error"]["code"],
        "invalid_encrypted_content"
    );
    // A function_call_output with no call.
    let mut orphan = req();
    orphan.messages.push(tool_reply(&a));
    let e = permanent(p.chat(&orphan).await.unwrap_err());
    assert!(
        e.contains("No tool call found for function call output"),
        "{e}"
    );
}

#[tokio::test]
async fn chat_shaped_requests_are_refused() {
    let s = server();
    let post = |body: Value| {
        let url = format!("{}/responses", s.openai_base_url());
        async move {
            let r = reqwest::Client::new()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (st, b) = post(json!({"model": "gpt-5", "input": "hi", "max_tokens": 10})).await;
    assert_eq!(
        (st, b["error"]["code"].clone()),
        (400, json!("unknown_parameter"))
    );
    assert_eq!(b["error"]["message"], "Unknown parameter: 'max_tokens'.");
    let chat_tool = json!([{"type": "function", "function": {"name": "shell", "parameters": {}}}]);
    let (st, b) = post(json!({"model": "gpt-5", "input": "hi", "tools": chat_tool})).await;
    assert_eq!(st, 400);
    assert_eq!(b["error"]["param"], "tools[0].name");
    let (st, b) = post(json!({"model": "gpt-5", "input": "hi", "temperature": 0.2})).await;
    assert_eq!(
        (st, b["error"]["param"].clone()),
        (400, json!("temperature"))
    );
    let tool = json!([{"type": "function", "name": "shell",
                       "parameters": {"type": "object", "properties": {"command": {}}}}]);
    let (st, b) = post(json!({"model": "gpt-5", "input": "hi", "tools": tool})).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["output"][1]["type"], "function_call");
}
