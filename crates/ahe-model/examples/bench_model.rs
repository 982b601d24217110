//! Throughput and latency of the `local` provider on this machine.
//!
//! `cargo run --release -p ahe-model --example bench_model -- [--model PATH] [--threads N]
//! [--turns N] [--ctx TOKENS] [--kv-slots N]` (scripts/bench-model.sh runs it): prints decode and prefill tokens/s, and
//! the latency of each turn of an agent conversation with and without KV prefix reuse.

use std::time::Instant;

use ahe_model::local::{GenOutput, GenRequest, LocalProvider};
use ahe_model::{ChatRequest, Message, ModelConfig, Role, ToolCall, ToolProtocol, ToolSpec};
use serde_json::json;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn plain(turns: Vec<(String, String)>, max_tokens: u32) -> GenRequest {
    GenRequest {
        turns,
        grammar: None,
        temperature: 0.0,
        seed: 0,
        max_tokens,
        reuse_prefix: false,
    }
}

fn tok_s(tokens: u32, ms: f64) -> f64 {
    tokens as f64 / (ms / 1000.0).max(1e-9)
}

fn main() -> anyhow::Result<()> {
    let threads: Option<usize> = arg("--threads").map(|t| t.parse()).transpose()?;
    let turns: usize = arg("--turns").map(|t| t.parse()).transpose()?.unwrap_or(8);
    let cfg = ModelConfig {
        provider: "local".into(),
        model: "local".into(),
        path: arg("--model").map(Into::into),
        threads,
        context_tokens: Some(arg("--ctx").map(|t| t.parse()).transpose()?.unwrap_or(8192)),
        kv_slots: arg("--kv-slots").map(|t| t.parse()).transpose()?,
        ..ModelConfig::default()
    };
    let t_load = Instant::now();
    let p = LocalProvider::new(&cfg)?;
    let e = p.engine().clone();
    println!(
        "model: {}  (loaded in {:.2} s; {} threads; context {} tokens)",
        ahe_model::local::resolve_model_path(cfg.path.as_deref())?.display(),
        t_load.elapsed().as_secs_f64(),
        threads.map_or("default".into(), |t| t.to_string()),
        e.context_tokens()
    );
    // Warm-up (first-call allocations).
    e.generate_blocking(plain(vec![("user".into(), "Hi".into())], 8))?;

    let story = vec![(
        "user".into(),
        "Write a long story about a lighthouse keeper and a storm.".into(),
    )];
    let d: GenOutput = e.generate_blocking(plain(story, 256))?;
    println!(
        "decode, short prompt:        {:7.1} tok/s  ({} tokens)",
        tok_s(d.output_tokens, d.decode_ms),
        d.output_tokens
    );

    let doc = "The harness keeps the model frozen and edits the prompts, tools and memory \
               around it, then checks on the next round whether each edit did what it promised. "
        .repeat(50);
    let long = vec![(
        "user".into(),
        format!("{doc}\nSummarize the text above in one long paragraph."),
    )];
    let pf = e.generate_blocking(plain(long, 128))?;
    println!(
        "prefill, {:4}-token prompt:   {:7.1} tok/s  ({:.0} ms)",
        pf.prompt_tokens,
        tok_s(pf.prompt_tokens, pf.prefill_ms),
        pf.prefill_ms
    );
    println!(
        "decode after {:4} tokens:     {:7.1} tok/s  ({} tokens)",
        pf.prompt_tokens,
        tok_s(pf.output_tokens, pf.decode_ms),
        pf.output_tokens
    );

    // An agent conversation: the same transcript timed with and without prefix reuse.
    let tool = ToolSpec {
        name: "run_shell".into(),
        description: "Run a bash command in the task's working directory and return its output and exit code.".into(),
        input_schema: json!({"type": "object", "required": ["command"],
            "properties": {"command": {"type": "string", "description": "The bash command to run."}}}),
    };
    let system = "You solve software tasks in a non-interactive setting: nobody will answer \
                  questions, so decide for yourself and act. The task's working directory is /app.";
    let mut req = ChatRequest {
        role: Role::CodeAgent,
        messages: vec![
            Message::system(system),
            Message::user("`/app/sum.sh` should print the sum of its integer arguments, but it is broken. Fix it in place."),
        ],
        tools: vec![tool],
        protocol: ToolProtocol::Native,
        temperature: Some(0.0),
        max_tokens: Some(48),
        tool_choice: Default::default(),
    };
    let listing: String = (1..=12)
        .map(|i| {
            format!(
                "-rw-r--r-- 1 root root {:5} Jan  1 00:00 file{i}.txt\n",
                i * 37
            )
        })
        .collect();
    println!("\nturn  prompt  new  | with reuse: ms (prefill+decode) | without: ms | ratio");
    let mut last_ratio = 0.0;
    for turn in 1..=turns {
        let mut g = p.gen_request(&req);
        let t0 = Instant::now();
        let with = e.generate_blocking(g.clone())?;
        let ms_with = t0.elapsed().as_secs_f64() * 1000.0;
        g.reuse_prefix = false;
        let t1 = Instant::now();
        e.generate_blocking(g)?;
        let ms_without = t1.elapsed().as_secs_f64() * 1000.0;
        // The full prefill left the cache holding this turn too: the next turn reuses it.
        last_ratio = ms_with / ms_without;
        println!(
            "{turn:4}  {:6}  {:4} | {:8.0} ({:5.0}+{:4.0})            | {:8.0}    | {:5.1}%",
            with.prompt_tokens,
            with.prompt_tokens - with.cached_tokens,
            ms_with,
            with.prefill_ms,
            with.decode_ms,
            ms_without,
            100.0 * last_ratio
        );
        let call = ToolCall {
            id: format!("local_{turn}"),
            name: "run_shell".into(),
            arguments: match ahe_model::local::parse_reply(&with.text) {
                ahe_model::local::Reply::Action { args, .. } => args,
                _ => json!({"command": "ls -la"}),
            },
        };
        req.messages.push(Message::Assistant {
            content: None,
            tool_calls: vec![call.clone()],
            opaque: vec![],
        });
        req.messages.push(Message::Tool {
            tool_call_id: call.id,
            name: call.name,
            content: format!("exit code 0\n{listing}"),
        });
    }
    println!(
        "\nlast turn with prefix reuse costs {:.1}% of the same turn with a full prefill",
        100.0 * last_ratio
    );
    Ok(())
}
