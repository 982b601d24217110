//! The Markdown the debugger and the evolve agent read (a task's pre-analysis, the per-task
//! list, the overview) is model-facing prose: a replayed run must send byte-identical
//! requests, so it is pinned here against golden files (`tests/fixtures/debug-md/`; set
//! `AHE_BLESS=1` to rewrite them after a deliberate change).

use ahe_bench::{Suspect, SuspectReason, TaskStatus, TrialResult, TrialStatus};
use ahe_rundir::clean::CleanTrace;
use ahe_rundir::run_dir::analysis::{Pattern, Patterns, Trend};
use serde_json::json;

use super::{overview, pre_analysis, render_turns};
use crate::debug::overview::render::overview_md;

/// A zero usage record.
fn usage() -> serde_json::Value {
    serde_json::to_value(ahe_model::Usage::default()).unwrap()
}

/// Compares `got` with golden file `name` (or writes it under `AHE_BLESS=1`).
fn golden(name: &str, got: &str) {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/debug-md")
        .join(name);
    if std::env::var_os("AHE_BLESS").is_some() {
        std::fs::write(&p, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert_eq!(got, want, "{name} differs from its golden file");
}

/// A cleaned trace of `task` attempt `attempt` with `status`, its main agent running
/// `commands` (exit codes), one failed tool call when `broken`, and a sub-agent turn.
fn trace(
    task: &str,
    attempt: u32,
    status: &str,
    commands: &[(&str, i32)],
    broken: bool,
) -> CleanTrace {
    let mut turns: Vec<serde_json::Value> = commands
        .iter()
        .enumerate()
        .map(|(i, (c, code))| {
            json!({"turn": i as u32 + 1, "agent": "main",
                "content": if i == 0 { Some("I will look around.\nThen fix it.") } else { None },
                "tool_calls": [{"id": format!("c{i}"), "name": "shell", "args": {"command": c},
                    "output": format!("out {i}\nline two"), "ok": *code == 0, "exit_code": code,
                    "truncated": false, "error": null, "duration_ms": 5}],
                "middleware": if i == 1 { json!([{"hook": "after_tool", "name": "loop_guard",
                    "decision": {"action": "warn"}}]) } else { json!([]) },
                "feedback": if i == 1 { json!(["you repeated a command"]) } else { json!([]) },
                "usage": usage(), "duration_ms": 10})
        })
        .collect();
    if broken {
        turns.push(json!({"turn": commands.len() as u32 + 1, "agent": "main", "content": null,
            "tool_calls": [{"id": "w", "name": "write_file", "args": {"path": "/app/x", "content": "y"},
                "output": "permission denied", "ok": false, "exit_code": null, "truncated": false,
                "error": "EACCES", "duration_ms": 1}],
            "middleware": [], "feedback": [], "usage": usage(), "duration_ms": 3}));
    }
    turns.push(
        json!({"turn": 1, "agent": "researcher", "content": "sub-agent notes",
        "tool_calls": [], "middleware": [], "feedback": [], "usage": usage(), "duration_ms": 1}),
    );
    serde_json::from_value(json!({
        "schema_version": 1, "trial_id": format!("{task}/{attempt}"), "task": task,
        "attempt": attempt, "status": status,
        "reward": if status == "pass" { Some(1.0) } else if status == "fail" { Some(0.0) } else { None },
        "agent_end": if attempt == 3 { Some("timeout") } else { Some("final_answer") },
        "trace": "complete", "usage": usage(), "cost_usd": 0.0, "duration_ms": 100,
        "subagent_runs": ["researcher"],
        "errors": if broken { json!([{"turn": 2, "agent": "main", "kind": "model_error",
            "message": "429"}]) } else { json!([]) },
        "system_prompt": "sys", "user": "do it", "turns": turns,
    }))
    .unwrap()
}

/// Three trials of one task: a pass, a fail that diverges at its third command (with a
/// failed tool call and an error), and a timeout whose pass is SUSPECT.
fn traces() -> Vec<CleanTrace> {
    let long = format!("python3 -c '{}'", "x".repeat(200));
    let mut v = vec![
        trace(
            "fix-sum",
            1,
            "pass",
            &[
                ("ls /app", 0),
                ("cat sum.py", 0),
                ("sed -i s/-/+/ sum.py", 0),
            ],
            false,
        ),
        trace(
            "fix-sum",
            2,
            "fail",
            &[
                ("ls /app", 0),
                ("cat sum.py", 0),
                (&long, 1),
                ("pytest\n-q", 2),
            ],
            true,
        ),
        trace("fix-sum", 3, "pass", &[("ls", 0); 7], false),
    ];
    v[2].suspect = vec![
        SuspectReason {
            reason: "tool call `shell` names the reward file".into(),
            turn: Some(4),
        },
        SuspectReason {
            reason: "/tests changed".into(),
            turn: None,
        },
    ];
    v
}

#[test]
fn the_pre_analysis_of_a_task_is_pinned() {
    golden("pre_analysis.md", &pre_analysis("fix-sum", &traces()));
    let one = trace("hello", 1, "infra_error", &[], false);
    golden("pre_analysis_infra.md", &pre_analysis("hello", &[one]));
}

#[test]
fn rendered_turns_are_pinned() {
    let t = &traces()[1];
    golden("turns.txt", &render_turns(t, 2, 5));
    golden("turns_none.txt", &render_turns(t, 40, 50));
}

#[test]
fn the_per_task_list_is_pinned() {
    let lines = vec![
        (
            "a-task".to_string(),
            TaskStatus::Fail,
            "0/2".to_string(),
            "it never ran the tests".to_string(),
        ),
        (
            "b-task".into(),
            TaskStatus::Pass,
            "2/2 ⚑".into(),
            "passed (one SUSPECT)".into(),
        ),
        (
            "c-task".into(),
            TaskStatus::Infra,
            "0/2".into(),
            "the image did not start".into(),
        ),
        (
            "d-task".into(),
            TaskStatus::Fail,
            "1/2".into(),
            "flaky".into(),
        ),
    ];
    golden("list.md", &overview(3, &lines));
    golden("list_eval.md", &overview(0, &lines[..1]));
}

/// Scores of four tasks over two trials each; `b-task`'s second trial is suspect.
fn scores() -> ahe_bench::Scores {
    let mut rs = Vec::new();
    for (task, passes) in [
        ("a-task", [false, false]),
        ("b-task", [true, true]),
        ("c-task", [false, false]),
        ("d-task", [true, false]),
    ] {
        for (i, p) in passes.iter().enumerate() {
            let mut r = TrialResult::new(task, i as u32 + 1);
            r.status = if *p {
                TrialStatus::Pass
            } else {
                TrialStatus::Fail
            };
            if task == "b-task" && i == 1 {
                r.suspect = Some(Suspect {
                    reasons: vec![SuspectReason {
                        reason: "x".into(),
                        turn: None,
                    }],
                });
            }
            rs.push(r);
        }
    }
    ahe_bench::scores::compute(2, &rs, 1.0)
}

#[test]
fn the_overview_is_pinned() {
    let pattern = |name: &str, tasks: &[&str], trend: Trend| Pattern {
        name: name.into(),
        mechanism: if name.starts_with('N') {
            String::new()
        } else {
            format!("{name}: the agent stops early")
        },
        tasks: tasks.iter().map(|t| t.to_string()).collect(),
        trials: 3,
        component: "system_prompt".into(),
        evidence: if name.starts_with('N') {
            String::new()
        } else {
            "detail/a-task.md turn 4".into()
        },
        trend,
    };
    let p = Patterns {
        iteration: 3,
        patterns: vec![
            pattern("Stops early", &["a-task"], Trend::Grew { from: 1 }),
            pattern("No tests run", &["a-task"], Trend::New),
            pattern("Shrinking", &["a-task"], Trend::Shrank { from: 4 }),
            pattern("Steady one", &["a-task"], Trend::Steady),
        ],
        fallback: None,
        gone: vec!["Old pattern".into(), "Another".into()],
    };
    let failing = ["a-task".to_string(), "d-task".to_string()]
        .into_iter()
        .collect();
    let visible = vec!["a-task".to_string(), "b-task".into(), "d-task".into()];
    let list = overview(
        3,
        &[(
            "a-task".into(),
            TaskStatus::Fail,
            "0/2".into(),
            "stopped".into(),
        )],
    );
    let s = scores();
    golden(
        "overview.md",
        &overview_md(
            3,
            &p,
            &failing,
            &s,
            Some("2 map calls, 1 reduce"),
            &visible,
            &list,
        ),
    );
    let fb = Patterns {
        fallback: Some("the model answered no JSON".into()),
        ..Default::default()
    };
    golden(
        "overview_fallback.md",
        &overview_md(
            3,
            &fb,
            &failing,
            &s,
            None,
            &visible,
            "## Failing: 0 task(s)\n",
        ),
    );
    let none = Default::default();
    golden(
        "overview_clean.md",
        &overview_md(0, &Patterns::default(), &none, &s, None, &[], "no title\n"),
    );
}
