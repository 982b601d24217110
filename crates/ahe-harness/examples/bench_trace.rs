//! Benchmark of trace writing (`trace.jsonl` + `agent.log`): TRIALS trials × TURNS turns,
//! each turn an assistant event and a tool call whose output is OUTPUT bytes of shell-like
//! text (newlines, quotes, tabs), the way the runtime emits them.
//!
//! `cargo run --release -p ahe-harness --example bench_trace -- [TRIALS [TURNS [OUTPUT]]]`
//! (defaults 20 × 300 × 1500). Prints µs per event and a `FIGURE trace_event_us` line.

use std::time::Instant;

use ahe_harness::trace::{Event, TraceWriter};
use ahe_model::{ToolCall, Usage};
use serde_json::json;

/// Shell-like output of about `len` bytes.
fn output(len: usize, seed: usize) -> String {
    let words = [
        "error:",
        "warning",
        "src/main.rs:42",
        "\"quoted\"",
        "ok",
        "FAILED",
        "\ttab",
        "héllo",
    ];
    let mut s = String::with_capacity(len + 16);
    let mut i = seed;
    while s.len() < len {
        s.push_str(words[i % words.len()]);
        s.push(if i.is_multiple_of(7) { '\n' } else { ' ' });
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    s
}

fn main() {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let trials = a.first().copied().unwrap_or(20);
    let turns = a.get(1).copied().unwrap_or(300) as u32;
    let out_len = a.get(2).copied().unwrap_or(1500);
    let tmp = tempfile::tempdir().expect("temp dir");
    let outputs: Vec<String> = (0..16).map(|i| output(out_len, i)).collect();
    let usage = Usage {
        input_tokens: 12000,
        cached_input_tokens: 9000,
        output_tokens: 150,
        ..Default::default()
    };
    let system = "You solve software tasks in a non-interactive setting. ".repeat(60);
    let mut events = 0u64;
    let t = Instant::now();
    for trial in 0..trials {
        let dir = tmp.path().join(format!("t{trial}"));
        let w = TraceWriter::open(&dir.join("trace.jsonl"), &dir.join("agent.log"))
            .expect("open trace");
        w.emit(&Event::RunStart {
            agent: "main",
            model: "bench",
            protocol: "native",
            tools: vec!["run_shell"],
            limits: json!({"max_turns": turns}),
        });
        w.emit(&Event::Message {
            agent: "main",
            role: "system",
            content: &system,
        });
        events += 2;
        for turn in 1..=turns {
            let args = json!({"command": format!("cd /app && cargo test --lib module_{turn} 2>&1 | tail -50")});
            let calls = [ToolCall {
                id: format!("call_{turn}"),
                name: "run_shell".into(),
                arguments: args.clone(),
            }];
            w.emit(&Event::Assistant {
                agent: "main",
                turn,
                content: Some("Let me look at the failing test output."),
                tool_calls: &calls,
                usage,
                cost_usd: 0.004,
                duration_ms: 900,
            });
            w.emit(&Event::ToolCall {
                agent: "main",
                turn,
                id: &calls[0].id,
                name: "run_shell",
                args: &args,
                output: &outputs[turn as usize % outputs.len()],
                ok: true,
                exit_code: Some(0),
                truncated: false,
                error: None,
                duration_ms: 350,
            });
            events += 2;
        }
        w.emit(&Event::RunEnd {
            agent: "main",
            end: "finished",
            turns,
            usage,
            cost_usd: 1.2,
            final_message: Some("done"),
        });
        events += 1;
    }
    let secs = t.elapsed().as_secs_f64();
    let bytes: u64 = (0..trials)
        .map(|i| {
            std::fs::metadata(tmp.path().join(format!("t{i}/trace.jsonl")))
                .map(|m| m.len())
                .unwrap_or(0)
        })
        .sum();
    let us = secs * 1e6 / events as f64;
    println!(
        "trace writing: {trials} trials × {turns} turns ({out_len} B outputs): {events} events, {:.1} MB of trace.jsonl in {:.3} s = {us:.2} µs/event ({:.1} ms per 300-turn trial)",
        bytes as f64 / 1e6,
        secs,
        secs * 1e3 / trials as f64 * 300.0 / turns as f64
    );
    println!("FIGURE trace_event_us {us:.2}");
}
