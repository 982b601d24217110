//! What model calls already cost, read back from a `trace.jsonl`: every `assistant` event
//! carries its call's tokens and dollars, and the traces of the host agents (debugger,
//! overview, evolve) are appended across attempts. A resumed phase adds what the trace held
//! before its own attempt to what that attempt spent, so the calls of a killed attempt are
//! counted once and the role's cost survives a resume.

use std::path::Path;

use ahe_model::Usage;

/// Tokens and dollars of the model calls recorded in the trace at `path` (nothing when it
/// does not exist; unreadable lines are skipped).
pub fn trace_spend(path: &Path) -> (Usage, f64) {
    let mut usage = Usage::default();
    let mut cost = 0.0;
    let Ok(text) = std::fs::read_to_string(path) else {
        return (usage, cost);
    };
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["event"] != "assistant" {
            continue;
        }
        if let Ok(u) = serde_json::from_value::<Usage>(v["usage"].clone()) {
            usage.add(&u);
        }
        cost += v["cost_usd"].as_f64().unwrap_or(0.0);
    }
    (usage, cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_assistant_events_count_and_a_missing_trace_is_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("trace.jsonl");
        assert_eq!(trace_spend(&p), (Usage::default(), 0.0));
        let lines = [
            r#"{"event":"run_start","agent":"evolve"}"#,
            r#"{"event":"assistant","usage":{"input_tokens":10,"output_tokens":2},"cost_usd":0.5}"#,
            "not json",
            r#"{"event":"tool_call","usage":{"input_tokens":99},"cost_usd":9.0}"#,
            r#"{"event":"assistant","usage":{"input_tokens":5,"output_tokens":1},"cost_usd":0.25}"#,
        ];
        std::fs::write(&p, lines.join("\n")).unwrap();
        let (u, c) = trace_spend(&p);
        assert_eq!((u.input_tokens, u.output_tokens), (15, 3));
        assert_eq!(c, 0.75);
    }
}
