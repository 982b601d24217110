//! The trial view (`view::trial`) that the trial page and `ahe show --trial` both render:
//! what it computes from a cleaned trace, and that the page shows those very values.

use ahe_report::trial::{render_trial_page, PageContext};
use ahe_report::view::trial::{
    excerpt_lines, one_line_clip, trial_view, PAGE_SUMMARY_CHARS, TEXT_SUMMARY_CHARS,
};
use ahe_rundir::clean::CleanTrace;
use serde_json::json;

/// A cleaned trace with a long command, a failed call, a middleware decision, a suspect
/// sign and errors in and outside the turns.
fn trace() -> CleanTrace {
    let usage =
        |i: u64, o: u64| json!({"input_tokens": i, "cached_input_tokens": 0, "output_tokens": o});
    let long_command = format!("cd /app\n{}", "x".repeat(300));
    let output: String = (0..12)
        .map(|i| format!("line {i} {}\n", "y".repeat(i * 30)))
        .collect();
    serde_json::from_value(json!({
        "schema_version": 1, "trial_id": "fix-sum/1-abc", "task": "fix-sum", "attempt": 1,
        "status": "fail", "reward": 0.0, "agent_end": "finished", "trace": "complete",
        "suspect": [{"reason": "wrote /tests/x", "turn": 1}],
        "usage": usage(123_456, 789), "cost_usd": 0.0123, "duration_ms": 123_456,
        "subagent_runs": [],
        "errors": [
            {"turn": 0, "agent": "main", "kind": "fail", "message": "tests failed"},
            {"turn": 1, "agent": "main", "kind": "format", "message": "bad json"}
        ],
        "system_prompt": "be brief", "user": "fix /app/sum.sh",
        "turns": [
            {"turn": 1, "agent": "main", "content": "", "usage": usage(1500, 20),
             "duration_ms": 999, "feedback": ["finish rejected"],
             "middleware": [{"hook": "pre_tool", "name": "guard", "decision": {"block": "no"}}],
             "tool_calls": [
                {"id": "a", "name": "run_shell", "args": {"command": long_command},
                 "output": output, "ok": true, "exit_code": 0, "truncated": false,
                 "error": null, "duration_ms": 12},
                {"id": "b", "name": "write_file", "args": {"path": "/app/x", "content": "a"},
                 "output": null, "ok": true, "exit_code": null, "truncated": false,
                 "error": "denied", "duration_ms": 3}
             ]},
            {"turn": 2, "agent": "main", "content": "done", "usage": usage(5, 1),
             "duration_ms": 1, "feedback": [], "middleware": [], "tool_calls": []}
        ]
    }))
    .unwrap()
}

#[test]
fn the_view_holds_the_trials_figures_and_each_turns_own_errors() {
    let v = trial_view(&trace());
    assert_eq!(v.tokens, "123.5k in / 789 out");
    assert_eq!(v.cost, "$0.0123");
    assert_eq!(v.duration, "2 m 03 s");
    assert_eq!(v.trace_state, "complete");
    assert_eq!(v.suspect, vec![(Some(1), "wrote /tests/x".to_string())]);
    assert_eq!(
        v.errors.len(),
        2,
        "every error, the trial's own (turn 0) too"
    );
    let t1 = &v.turns[0];
    assert_eq!(t1.content, None, "an empty answer is no content");
    assert_eq!(
        t1.errors,
        vec![("format".to_string(), "bad json".to_string())]
    );
    assert_eq!(t1.tokens, "1500 in / 20 out");
    assert!(t1.has_error);
    assert!(!v.turns[1].has_error);
    let failed = &t1.calls[1];
    assert!(
        failed.reported_ok && !failed.ok,
        "an error beside the tool's ok flag makes the call failed on the page, not in its flag"
    );
    assert_eq!(
        t1.middleware,
        vec![(
            "pre_tool".to_string(),
            "guard".to_string(),
            r#"{"block":"no"}"#.to_string()
        )]
    );
}

#[test]
fn a_calls_arguments_are_clipped_on_one_line_by_one_rule_for_page_and_text() {
    let v = trial_view(&trace());
    let call = &v.turns[0].calls[0];
    assert!(
        call.one_line.starts_with("cd /app\nxxx"),
        "{:?}",
        call.one_line
    );
    let page = one_line_clip(&call.one_line, PAGE_SUMMARY_CHARS);
    assert_eq!(call.summary, format!("{page}…"), "cut, so marked");
    assert!(page.starts_with("cd /app ⏎ xxx"));
    assert_eq!(page.chars().count(), PAGE_SUMMARY_CHARS);
    let text = one_line_clip(&call.one_line, TEXT_SUMMARY_CHARS);
    assert!(
        text.starts_with(&page),
        "the text summary is the page's, only longer"
    );
    let short = &v.turns[0].calls[1];
    assert_eq!(short.one_line, r#"{"content":"a","path":"/app/x"}"#);
    assert_eq!(short.summary, short.one_line, "not cut, not marked");
}

#[test]
fn an_observation_excerpt_keeps_whole_lines_up_to_a_width_and_counts_the_rest() {
    let v = trial_view(&trace());
    let out = v.turns[0].calls[0].output.as_deref().unwrap();
    let (lines, more) = excerpt_lines(out, 8, 160);
    assert_eq!((lines.len(), more), (8, 4));
    assert_eq!(lines[0], "line 0 ");
    assert_eq!(lines[5].chars().count(), 157, "157 characters: not cut");
    assert!(lines[6].ends_with('…') && lines[6].chars().count() == 161);
}

/// Text as the page's templates escape it.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .replace('/', "&#x2f;")
}

#[test]
fn the_page_shows_the_views_values() {
    let t = trace();
    let v = trial_view(&t);
    let ctx = PageContext {
        source: "run-x".into(),
        iteration: Some(3),
        back: "../report.html".into(),
        raw: "../trials/fix-sum/1/".into(),
    };
    let page = render_trial_page(&ctx, &t).unwrap();
    for fact in [&v.tokens, &v.cost, &v.duration] {
        let dd = format!("<dd>{}</dd>", esc(fact));
        assert!(page.contains(&dd), "{fact} not on the page");
    }
    let call = &v.turns[0].calls[0];
    assert!(
        page.contains(&format!("<b>run_shell</b> {}", esc(&call.summary))),
        "the call's summary is the view's"
    );
    let head = format!(
        "<b>turn 1</b> · main · {} · 999 ms",
        esc(&v.turns[0].tokens)
    );
    assert!(page.contains(&head), "{head}");
    assert!(page.contains("<b>format</b>: bad json"));
}
