//! The anthropic provider against the strict Messages stand-in: prompt caching (breakpoints,
//! reads of the conversation so far, priced reads and writes), extended thinking (thinking
//! blocks sent back unchanged), and the API's rejections with its error shape.

use ahe_model::mock::{MockMode, MockProvider};
use ahe_model::{
    build_client, AnthropicProvider, ChatRequest, Message, ModelConfig, ModelError, Provider, Role,
    ToolProtocol, ToolSpec,
};
use ahe_testsupport::{StandIn, StandInOptions};
use serde_json::{json, Value};

/// A brain that calls the shell tool `turns` times, then answers.
fn stepper(turns: usize) -> impl Fn(&ChatRequest) -> Result<ahe_model::ChatResponse, ModelError> {
    move |req: &ChatRequest| {
        let n = req.assistant_turns();
        let mut r = MockProvider::new(MockMode::Nop).answer(req)?;
        if n < turns {
            r.content = None;
            r.tool_calls = vec![ahe_model::ToolCall {
                id: format!("toolu_{n}"),
                name: "shell".into(),
                arguments: json!({"command": format!("step {n}")}),
            }];
        }
        Ok(r)
    }
}

fn cfg(s: &StandIn) -> ModelConfig {
    ModelConfig {
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        base_url: Some(s.anthropic_base_url()),
        api_key_env: Some("AHE_T_STRICT_ANTH_KEY".into()),
        max_tokens: Some(16000),
        price_input_per_mtok: 3.0,
        price_output_per_mtok: 15.0,
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

fn req() -> ChatRequest {
    ChatRequest {
        role: Role::CodeAgent,
        messages: vec![
            Message::system("You solve software tasks in a sandbox. ".repeat(250)),
            Message::user("fix the failing test"),
        ],
        tools: vec![shell()],
        protocol: ToolProtocol::Native,
        temperature: Some(0.3),
        max_tokens: None,
        tool_choice: Default::default(),
    }
}

/// Runs the agent loop until the model answers; returns every response.
async fn agent_loop(
    c: &ahe_model::ModelClient,
    r: &mut ChatRequest,
) -> Vec<ahe_model::ChatResponse> {
    let mut out = Vec::new();
    loop {
        let a = c.chat(r).await.unwrap();
        r.messages.push(a.to_message());
        let done = a.tool_calls.is_empty();
        for call in &a.tool_calls {
            r.messages.push(Message::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content: format!("output of {}\n", call.arguments).repeat(20),
            });
        }
        out.push(a);
        if done {
            return out;
        }
    }
}

fn permanent(e: ModelError) -> String {
    assert_eq!(e.class(), "permanent", "{e}");
    e.to_string()
}

#[tokio::test]
async fn caching_reads_the_conversation_so_far_and_prices_reads_and_writes() {
    let s = StandIn::start(StandInOptions::default(), stepper(5));
    let c = build_client(&cfg(&s)).unwrap();
    let turns = agent_loop(&c, &mut req()).await;
    assert_eq!(turns.len(), 6);
    assert_eq!(turns[0].usage.cached_input_tokens, 0);
    assert!(
        turns[0].usage.cache_write_input_tokens >= 1024,
        "{:?}",
        turns[0].usage
    );
    for t in &turns[1..] {
        // Everything but the newest turn comes from the cache.
        let u = t.usage;
        assert!(u.cached_input_tokens * 10 >= u.input_tokens * 8, "{u:?}");
        assert!(u.cache_write_input_tokens > 0, "{u:?}");
    }
    for x in s.exchanges() {
        assert_eq!(x.status, 200, "{}", x.reply);
        let b = &x.request.body;
        let marks = b.to_string().matches("cache_control").count();
        assert!((2..=4).contains(&marks), "{marks} breakpoints");
        assert_eq!(
            b["system"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert_eq!(b["tools"][0]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(b["temperature"], json!(0.3f32));
    }
    let st = c.stats();
    let ca = &st.per_role["code_agent"];
    assert!(ca.cached_input_tokens > 0 && ca.cache_write_input_tokens > 0);
    // Defaults: reads at 0.1x input, writes at 1.25x.
    let uncached = ca.input_tokens - ca.cached_input_tokens - ca.cache_write_input_tokens;
    let want = (uncached as f64 * 3.0
        + ca.cached_input_tokens as f64 * 0.3
        + ca.cache_write_input_tokens as f64 * 3.75
        + ca.output_tokens as f64 * 15.0)
        / 1e6;
    assert!((st.total_cost_usd() - want).abs() < 1e-9);

    // The 2024 request (no cache_control): the same loop reads nothing from the cache.
    let s2 = StandIn::start(StandInOptions::default(), stepper(5));
    let mut off = cfg(&s2);
    off.prompt_cache = Some(false);
    let c2 = build_client(&off).unwrap();
    let plain = agent_loop(&c2, &mut req()).await;
    assert!(plain.iter().all(|t| t.usage.cached_input_tokens == 0));
    assert!(c2.stats().total_cost_usd() > 2.0 * st.total_cost_usd());
}

async fn post(s: &StandIn, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages", s.anthropic_base_url()))
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn more_than_four_breakpoints_is_the_apis_error() {
    let s = StandIn::start(StandInOptions::default(), stepper(0));
    let cc = json!({"type": "ephemeral"});
    let blocks: Vec<Value> = (0..5)
        .map(|i| json!({"type": "text", "text": format!("part {i}"), "cache_control": cc}))
        .collect();
    let (status, body) = post(
        &s,
        json!({"model": "claude-sonnet-4-5", "max_tokens": 100,
               "messages": [{"role": "user", "content": blocks}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(
        body["error"]["message"],
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    );
    // Through the provider: a 40-turn conversation never marks more than 4.
    let s = StandIn::start(StandInOptions::default(), stepper(40));
    let c = build_client(&cfg(&s)).unwrap();
    assert_eq!(agent_loop(&c, &mut req()).await.len(), 41);
}

#[tokio::test]
async fn thinking_blocks_go_back_unchanged_or_the_request_is_refused() {
    let s = StandIn::start(StandInOptions::default(), stepper(2));
    let mut c = cfg(&s);
    c.thinking_budget_tokens = Some(4096);
    c.temperature = Some(0.3);
    let client = build_client(&c).unwrap();
    let mut r = req();
    let turns = agent_loop(&client, &mut r).await;
    assert_eq!(turns.len(), 3);
    for x in s.exchanges() {
        assert_eq!(x.status, 200, "{}", x.reply);
        assert_eq!(
            x.request.body["thinking"],
            json!({"type": "enabled", "budget_tokens": 4096})
        );
        assert!(
            x.request.body.get("temperature").is_none(),
            "no temperature with thinking"
        );
    }
    // The second request's assistant turn opens with the first reply's thinking block.
    let sent = &s.exchanges()[1].request.body["messages"][1]["content"][0];
    assert_eq!(sent, &s.exchanges()[0].reply["content"][0]);
    assert!(turns.iter().all(|t| t.usage.reasoning_tokens > 0));
    assert!(client.stats().per_role["code_agent"].reasoning_tokens > 0);

    let p = AnthropicProvider::new(&c).unwrap();
    let mut first = req();
    first.messages.truncate(2);
    let a = p.chat(&first).await.unwrap();
    let tool = Message::Tool {
        tool_call_id: a.tool_calls[0].id.clone(),
        name: "shell".into(),
        content: "ok".into(),
    };
    // What the 2024 provider sent back: the turn without its thinking block.
    let mut dropped = first.clone();
    dropped
        .messages
        .push(Message::assistant(a.content.clone(), a.tool_calls.clone()));
    dropped.messages.push(tool.clone());
    let e = permanent(p.chat(&dropped).await.unwrap_err());
    assert!(
        e.contains("Expected `thinking` or `redacted_thinking`, but found `tool_use`"),
        "{e}"
    );
    // An altered thinking block.
    let mut altered = first.clone();
    let mut block = a.opaque[0].clone();
    block["thinking"] = json!("I changed my mind.");
    altered.messages.push(Message::Assistant {
        content: None,
        tool_calls: a.tool_calls.clone(),
        opaque: vec![block],
    });
    altered.messages.push(tool.clone());
    let e = permanent(p.chat(&altered).await.unwrap_err());
    assert!(e.contains("Invalid `signature` in `thinking` block"), "{e}");
    // Unchanged: accepted.
    let mut kept = first.clone();
    kept.messages.push(a.to_message());
    kept.messages.push(tool);
    p.chat(&kept).await.unwrap();
    // Temperature with thinking on, sent by hand, is refused.
    let (status, body) = post(
        &s,
        json!({"model": "claude-sonnet-4-5", "max_tokens": 8000, "temperature": 0.3,
               "thinking": {"type": "enabled", "budget_tokens": 2048},
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("`temperature` may only be set to 1"));
}

#[tokio::test]
async fn a_tool_result_needs_its_tool_use() {
    let s = StandIn::start(StandInOptions::default(), stepper(1));
    let p = AnthropicProvider::new(&cfg(&s)).unwrap();
    let mut r = req();
    r.messages.push(Message::Tool {
        tool_call_id: "toolu_x".into(),
        name: "shell".into(),
        content: "out".into(),
    });
    let e = permanent(p.chat(&r).await.unwrap_err());
    assert!(
        e.contains("unexpected `tool_use_id` found in `tool_result` blocks: toolu_x"),
        "{e}"
    );
    let mut r = req();
    r.messages.push(Message::assistant(
        None,
        vec![ahe_model::ToolCall {
            id: "toolu_y".into(),
            name: "shell".into(),
            arguments: json!({"command": "ls"}),
        }],
    ));
    r.messages.push(Message::user("go on"));
    let e = permanent(p.chat(&r).await.unwrap_err());
    assert!(
        e.contains(
            "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_y"
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_thinking_conversation_records_and_replays_offline() {
    let d = tempfile::tempdir().unwrap();
    let s = StandIn::start(StandInOptions::default(), stepper(2));
    let mut c = cfg(&s);
    c.thinking_budget_tokens = Some(2048);
    c.cache = ahe_model::CacheMode::Record;
    c.cache_dir = Some(d.path().to_path_buf());
    let recorded = agent_loop(&build_client(&c).unwrap(), &mut req()).await;
    let calls = s.exchanges().len();
    drop(s);
    // Replay: no server; the carried thinking blocks are part of each key.
    c.cache = ahe_model::CacheMode::Replay;
    let replayed = agent_loop(&build_client(&c).unwrap(), &mut req()).await;
    assert_eq!(calls, 3);
    assert_eq!(replayed.len(), recorded.len());
    for (a, b) in recorded.iter().zip(&replayed) {
        assert_eq!(
            (&a.tool_calls, &a.opaque, a.usage),
            (&b.tool_calls, &b.opaque, b.usage)
        );
    }
    // Another thinking budget is another key: a replay miss, named.
    c.thinking_budget_tokens = Some(4096);
    let e = build_client(&c).unwrap().chat(&req()).await.unwrap_err();
    assert!(e.to_string().contains("no recorded response"), "{e}");
}
