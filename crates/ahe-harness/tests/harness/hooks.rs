//! Loop paths the other runtime tests leave out: loop detection, after_model hooks (applied
//! and traced, blocking or not), and the context-length compaction retry.

use crate::support;

use ahe_harness::End;
use ahe_testsupport::ScriptedReply as R;
use serde_json::Value;
use support::*;

fn with_middleware(names: &[&str]) -> String {
    let list: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace(
            "middleware = []",
            &format!("middleware = [{}]", list.join(", ")),
        )
}

/// The assistant messages of the n-th request.
fn assistant_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn loop_detection_blocks_the_third_identical_call_with_its_message() {
    let agent = with_middleware(&["loops"]);
    let mw =
        "hooks = [\"before_tool\"]\nkind = \"builtin:loop_detection\"\n[params]\nmax_repeats = 2\n";
    let same = r#"{"command": "echo x >> /app/count"}"#;
    let r = run(
        &[("agent.toml", &agent), ("middleware/loops.toml", mw)],
        vec![
            R::tool_call("run_shell", same),
            R::tool_call("run_shell", same),
            R::tool_call("run_shell", same),
            R::text("done"),
        ],
        T,
    )
    .await;
    assert_eq!(r.end, End::Finished);
    // Two calls ran; the third was blocked with the default message naming the count.
    assert_eq!(
        cat(r.sb.as_ref(), "/app/count").await.as_deref(),
        Some("x\nx\n")
    );
    let fb = fed_back(&r.server, 3);
    assert!(
        fb.contains("You have made this exact call 3 times in a row"),
        "{fb}"
    );
    let mw = events(&r.trace, "middleware");
    assert_eq!(mw.len(), 1, "{mw:?}");
    assert_eq!(mw[0]["hook"], "before_tool");
    assert_eq!(mw[0]["decision"]["action"], "block");
}

const REWRITE_PY: &str = r#"import json, sys
h = json.load(sys.stdin)
text = h.get("content") or ""
if "SECRET" in text:
    print(json.dumps({"action": "modify", "output": text.replace("SECRET", "[redacted]")}))
elif "forbidden" in text:
    print(json.dumps({"action": "block", "message": "Do not say forbidden things."}))
else:
    print(json.dumps({"action": "continue"}))
"#;

#[tokio::test]
async fn after_model_decisions_are_applied_and_traced() {
    let agent = with_middleware(&["rewrite"]);
    let mw = "hooks = [\"after_model\"]\nkind = \"script:middleware/rewrite.py\"\n";
    let r = run(
        &[
            ("agent.toml", &agent),
            ("middleware/rewrite.toml", mw),
            ("middleware/rewrite.py", REWRITE_PY),
        ],
        vec![R::text("a forbidden word"), R::text("the key is SECRET")],
        T,
    )
    .await;
    assert_eq!(r.end, End::Finished);
    let bodies = r.server.bodies();
    assert_eq!(bodies.len(), 2);
    // The blocked answer stays in the conversation with the block message after it.
    assert_eq!(assistant_texts(&bodies[1]), vec!["a forbidden word"]);
    let fb = fed_back(&r.server, 1);
    assert!(fb.contains("Do not say forbidden things."), "{fb}");
    // The second answer was rewritten before the loop used it: the run's final text.
    let end = &events(&r.trace, "run_end")[0];
    assert_eq!(end["final_message"], "the key is [redacted]");
    // The modification is no longer silent: it is traced like the block.
    let mw = events(&r.trace, "middleware");
    let actions: Vec<(&str, &str)> = mw
        .iter()
        .map(|e| {
            (
                e["hook"].as_str().unwrap(),
                e["decision"]["action"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        actions.contains(&("after_model", "modify_output")),
        "{actions:?}"
    );
    assert_eq!(r.model.stats().calls, 2);
}

#[tokio::test]
async fn a_context_overflow_compacts_old_outputs_and_retries_once() {
    let long = r#"{"command": "head -c 3000 /dev/zero | tr '\\0' a"}"#;
    let overflow = R::json(
        400,
        r#"{"error": {"message": "This model's maximum context length is 8192 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}"#,
    );
    let r = run(
        &[],
        vec![
            R::tool_call("run_shell", long),
            R::tool_call("run_shell", r#"{"command": "echo small"}"#),
            R::tool_call("run_shell", r#"{"command": "echo small2"}"#),
            overflow,
            R::text("done"),
        ],
        T,
    )
    .await;
    assert_eq!(r.end, End::Finished);
    let bodies = r.server.bodies();
    assert_eq!(bodies.len(), 5);
    let tool_contents = |b: &Value| -> Vec<String> {
        b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or("").to_string())
            .collect()
    };
    // The refused request held the long output; the retry has it elided.
    assert!(tool_contents(&bodies[3])[0].len() >= 3000);
    let retried = tool_contents(&bodies[4]);
    assert!(
        retried[0].starts_with("[output elided by compaction: "),
        "{retried:?}"
    );
    assert!(retried[2].contains("small2"), "the recent outputs are kept");
    let errors = events(&r.trace, "error");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["kind"], "context_length");
}
