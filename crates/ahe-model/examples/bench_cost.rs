//! scripts/bench-cost.sh: what Anthropic prompt caching saves on one synthetic iteration of
//! agent conversations.
//!
//! Replays TASKS × TRIALS conversations of TURNS tool-use turns (default 89 × 2 × 40) through
//! the real anthropic provider against the strict Messages stand-in, once with
//! `prompt_cache = false` and once with the default caching, and prints the input tokens
//! billed (uncached, cache reads, cache writes), output tokens and dollars at Claude Sonnet
//! 4.5 list prices. Prefix growth is that of a harness run: a ~2.5k-token system prompt,
//! ~1.2k tokens of tool schemas, a ~400-token task, then per turn a ~120-token tool call and
//! a ~700-token observation. Usage: `bench_cost [TASKS [TRIALS [TURNS]]]`; exits 1 when the
//! cached cost is above 35% of the uncached one.

use std::sync::Arc;
use std::time::Instant;

use ahe_model::{
    build_client, ChatRequest, ChatResponse, Message, ModelClient, ModelConfig, ModelError, Role,
    ToolCall, ToolProtocol, ToolSpec, Usage,
};
use ahe_testsupport::{StandIn, StandInOptions};
use serde_json::json;

/// Target: cached cost at most this share of the uncached cost.
const TARGET: f64 = 0.35;

/// Deterministic filler text of about `tokens` tokens (4 characters each), varied by `seed`.
fn text(seed: u64, tokens: usize) -> String {
    let words = [
        "build", "error", "test", "file", "line", "module", "return", "value", "python", "assert",
        "config", "path", "import", "failed", "passed", "output", "src", "main",
    ];
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut s = String::new();
    while s.len() < tokens * 4 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s.push_str(words[(x >> 33) as usize % words.len()]);
        s.push(if (x >> 20).is_multiple_of(9) {
            '\n'
        } else {
            ' '
        });
    }
    s
}

fn tools() -> Vec<ToolSpec> {
    (0..6)
        .map(|i| ToolSpec {
            name: if i == 0 {
                "shell".into()
            } else {
                format!("tool_{i}")
            },
            description: text(1000 + i, 120),
            input_schema: json!({"type": "object", "properties": {
                "command": {"type": "string", "description": text(2000 + i, 60)}}}),
        })
        .collect()
}

/// The agent's answer: a ~120-token tool call on every turn but the last.
fn brain(turns: usize) -> impl Fn(&ChatRequest) -> Result<ChatResponse, ModelError> {
    move |req: &ChatRequest| {
        let n = req.assistant_turns();
        let seed = req.messages.len() as u64 * 7919 + n as u64;
        let call = (n < turns).then(|| ToolCall {
            id: format!("toolu_{n}"),
            name: "shell".into(),
            arguments: json!({"command": text(seed, 50)}),
        });
        Ok(ChatResponse {
            content: Some(text(seed + 1, 70)),
            tool_calls: call.into_iter().collect(),
            usage: Usage::default(),
            finish_reason: None,
            cost_usd: 0.0,
            opaque: vec![],
        })
    }
}

async fn conversation(c: ModelClient, task: u64, trial: u64) -> usize {
    let mut req = ChatRequest {
        role: Role::CodeAgent,
        messages: vec![
            Message::system(text(7, 2500)),
            Message::user(text(100 + task, 400)),
        ],
        tools: tools(),
        protocol: ToolProtocol::Native,
        temperature: None,
        max_tokens: None,
        tool_choice: Default::default(),
    };
    let mut calls = 0;
    loop {
        let a = c.chat(&req).await.expect("stand-in call");
        calls += 1;
        req.messages.push(a.to_message());
        if a.tool_calls.is_empty() {
            return calls;
        }
        for t in &a.tool_calls {
            req.messages.push(Message::Tool {
                tool_call_id: t.id.clone(),
                name: t.name.clone(),
                content: text(task * 1_000_003 + trial * 10_007 + calls as u64, 700),
            });
        }
    }
}

struct Outcome {
    calls: usize,
    usage: Usage,
    cost: f64,
    secs: f64,
}

async fn run(tasks: u64, trials: u64, turns: usize, cache: bool) -> Outcome {
    let server = StandIn::start(StandInOptions::default(), brain(turns));
    let cfg = ModelConfig {
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        base_url: Some(server.anthropic_base_url()),
        api_key_env: Some("AHE_BENCH_COST_NO_KEY".into()),
        max_tokens: Some(16000),
        prompt_cache: Some(cache),
        price_input_per_mtok: 3.0,
        price_cached_input_per_mtok: Some(0.3),
        price_cache_write_per_mtok: Some(3.75),
        price_output_per_mtok: 15.0,
        concurrency: 16,
        ..ModelConfig::default()
    };
    let client = build_client(&cfg).expect("client");
    let t0 = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    let mut handles = Vec::new();
    for task in 0..tasks {
        for trial in 0..trials {
            let (c, sem) = (client.clone(), sem.clone());
            handles.push(tokio::spawn(async move {
                let _p = sem.acquire().await.expect("semaphore");
                conversation(c, task, trial).await
            }));
        }
    }
    let mut calls = 0;
    for h in handles {
        calls += h.await.expect("conversation");
    }
    let st = client.stats();
    Outcome {
        calls,
        usage: st.total_usage(),
        cost: st.total_cost_usd(),
        secs: t0.elapsed().as_secs_f64(),
    }
}

fn m(n: u64) -> String {
    format!("{:.2}M", n as f64 / 1e6)
}

fn line(label: &str, o: &Outcome) -> String {
    let u = &o.usage;
    let uncached = u.input_tokens - u.cached_input_tokens - u.cache_write_input_tokens;
    format!(
        "{label}: {} calls, input {} tokens billed as {} uncached + {} cache reads + {} cache \
         writes, output {} · ${:.2} ({:.1} s)",
        o.calls,
        m(u.input_tokens),
        m(uncached),
        m(u.cached_input_tokens),
        m(u.cache_write_input_tokens),
        m(u.output_tokens),
        o.cost,
        o.secs
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a: Vec<u64> = std::env::args()
        .skip(1)
        .map(|s| s.parse().expect("arguments: TASKS TRIALS TURNS (numbers)"))
        .collect();
    let (tasks, trials) = (
        a.first().copied().unwrap_or(89),
        a.get(1).copied().unwrap_or(2),
    );
    let turns = a.get(2).copied().unwrap_or(40) as usize;
    println!(
        "bench-cost: {tasks} tasks x {trials} trials x {turns} turns, anthropic provider -> \
         strict Messages stand-in; Claude Sonnet 4.5 list prices per MTok: $3 input, $0.30 \
         cache read, $3.75 cache write, $15 output"
    );
    let off = run(tasks, trials, turns, false).await;
    println!("{}", line("caching off", &off));
    let on = run(tasks, trials, turns, true).await;
    println!("{}", line("caching on ", &on));
    let share = on.cost / off.cost;
    println!(
        "cached cost = {:.1}% of uncached (target <= {:.0}%): {}",
        share * 100.0,
        TARGET * 100.0,
        if share <= TARGET { "met" } else { "NOT met" }
    );
    if share > TARGET {
        std::process::exit(1);
    }
}
