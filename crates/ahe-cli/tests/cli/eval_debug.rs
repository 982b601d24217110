//! `ahe report EVAL_DIR` and `ahe debug EVAL_DIR` on an `ahe eval` directory and on an
//! imported Harbor job of another agent (an ATIF trajectory): the report's per-task counts,
//! trial pages with the trace, and the debugger (a scripted mock model) reading the trials'
//! traces through its tools into `analysis/`.

use crate::common;

use std::path::Path;

use common::{ahe, json_file, text};
use serde_json::json;

/// The debugger's script: the overview's patterns, then per task one `read_trace` of
/// attempt 1 and a report.
fn script(dir: &Path, tasks: &[&str]) -> String {
    let patterns = json!({"patterns": [{
        "name": "Works on a file it never checked",
        "mechanism": "The agent acts on the task's file without looking at it first.",
        "tasks": tasks, "component": "memory",
        "evidence": format!("detail/{}.md: the trace of trial 1", tasks[0]),
    }]});
    let s = format!(
        r###"[[debugger]]
when_system_contains = "writing the benchmark overview"
content = '''{patterns}'''

[[debugger]]
tool = "read_trace"
args = {{ attempt = 1, from_turn = 1, to_turn = 5 }}

[[debugger]]
content = """## Failure summary
SCRIPTED-ANALYSIS: the agent never checked the file.
## Root cause
Nothing in the harness says to look first."""
"###
    );
    let p = dir.join("debugger.script.toml");
    std::fs::write(&p, s).unwrap();
    format!("mock:script={}", p.display())
}

/// Runs `ahe debug` and checks what every debug phase writes; returns `analysis/debug.json`.
fn debug(eval: &Path, model: &str, failing: &[&str]) -> serde_json::Value {
    let o = ahe(&["debug", eval.to_str().unwrap(), "--model", model], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let d = json_file(&eval.join("analysis/debug.json"));
    assert_eq!(d["llm_reports"], failing.len(), "{d}");
    assert_eq!(d["patterns"], 1, "{d}");
    for t in failing {
        let md = std::fs::read_to_string(eval.join(format!("analysis/detail/{t}.md"))).unwrap();
        assert!(md.contains("## Debugger analysis"), "{md}");
        assert!(md.contains("SCRIPTED-ANALYSIS"), "{md}");
    }
    let overview = std::fs::read_to_string(eval.join("analysis/overview.md")).unwrap();
    assert!(
        overview.contains("Works on a file it never checked"),
        "{overview}"
    );
    d
}

/// A path as the HTML templates write it (auto-escaping turns `/` into `&#x2f;`).
fn esc(s: &str) -> String {
    s.replace('/', "&#x2f;")
}

/// The report's files exist, name every task with its counts, and link trial pages.
fn report(eval: &Path, cells: &[(&str, &str)]) -> (String, String) {
    let o = ahe(&["report", eval.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let html = std::fs::read_to_string(eval.join("report.html")).unwrap();
    let md = std::fs::read_to_string(eval.join("report.md")).unwrap();
    for (task, cell) in cells {
        assert!(
            html.contains(&format!("href=\"#task-{task}\">{task}</a>")),
            "{task}"
        );
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| {} |", task)))
            .unwrap_or_else(|| panic!("no row of {task} in report.md:\n{md}"));
        assert!(row.contains(&format!("| {cell} |")), "{row}");
        let page = eval.join(format!("report/trials/{task}/1.html"));
        assert!(page.is_file(), "{}", page.display());
        assert!(html.contains(&esc(&format!("report/trials/{task}/1.html"))));
    }
    assert!(!html.contains("<script"), "self-contained, no scripts");
    (html, md)
}

#[test]
fn an_ahe_eval_directory_reports_and_debugs() {
    let d = tempfile::tempdir().unwrap();
    let eval = d.path().join("eval");
    common::eval_smoke(&eval, "mock:nop");
    let (html, md) = report(&eval, &[("fix-sum", "0/2"), ("hello-file", "0/2")]);
    assert!(md.contains("pass@1: **0.000**"), "{md}");
    assert!(html.contains("mock:nop"), "the model is named");
    let page = std::fs::read_to_string(eval.join("report/trials/fix-sum/2.html")).unwrap();
    assert!(page.contains("evaluation eval"), "{page}");
    assert!(page.contains(&esc("../../../trials/fix-sum/2/trace.jsonl")));

    let model = script(d.path(), &["fix-sum", "hello-file"]);
    let r = debug(&eval, &model, &["fix-sum", "hello-file"]);
    assert_eq!(r["tasks"], 2);
    // The debugger read the trial's cleaned trace through its tool.
    let trace =
        std::fs::read_to_string(eval.join("analysis/debugger/fix-sum/trace.jsonl")).unwrap();
    assert!(trace.contains("--- turn 1 [main]"), "{trace}");
    // An evaluation is no iteration of a run: none is named to the model or in the overview.
    assert!(trace.contains(r"# Task `fix-sum`\n## Task"), "{trace}");
    assert!(!trace.contains("iteration 0"), "{trace}");
    let overview = std::fs::read_to_string(eval.join("analysis/overview.md")).unwrap();
    assert!(
        overview.starts_with("# Debugger analysis overview\n"),
        "{overview}"
    );
    // A second report links the debugger's reports.
    let (html, _) = report(&eval, &[("fix-sum", "0/2")]);
    assert!(html.contains(&esc("analysis/detail/fix-sum.md")));
    assert!(html.contains(&esc("analysis/overview.md")));

    // A run directory or a stray path is not an evaluation to debug.
    let o = ahe(
        &["debug", d.path().to_str().unwrap(), "--model", "mock:nop"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("not an evaluation directory"),
        "{}",
        text(&o)
    );
}

/// A Harbor trial of another agent (Terminus-2 shaped): result.json and an ATIF trajectory.
fn harbor_trial(job: &Path, name: &str, task: &str, reward: f64, started: &str) {
    let t = job.join(name);
    std::fs::create_dir_all(t.join("agent")).unwrap();
    std::fs::create_dir_all(t.join("verifier")).unwrap();
    let result = json!({
        "task_name": task, "trial_name": name, "started_at": started,
        "finished_at": "2026-01-01T00:05:00Z",
        "agent_info": {"name": "terminus-2", "version": "2.0",
                       "model_info": {"name": "gpt-x", "provider": "openai"}},
        "agent_result": {"n_input_tokens": 1200, "n_cache_tokens": 0, "n_output_tokens": 300,
                         "cost_usd": 0.01},
        "verifier_result": {"rewards": {"reward": reward}},
        "exception_info": null,
    });
    std::fs::write(t.join("result.json"), result.to_string()).unwrap();
    let traj = json!({
        "schema_version": "ATIF-v1.4", "session_id": name,
        "agent": {"name": "terminus-2", "version": "2.0", "model_name": "openai/gpt-x"},
        "steps": [
            {"step_id": 1, "source": "user", "message": format!("Solve {task}.")},
            {"step_id": 2, "source": "agent", "message": "Let me look at the input.",
             "tool_calls": [{"tool_call_id": "c1", "function_name": "bash_command",
                             "arguments": {"keystrokes": "cat /app/input.txt\n"}}],
             "observation": {"results": [{"source_call_id": "c1",
                                           "content": "cat: /app/input.txt: OBSERVED-7731"}]},
             "metrics": {"prompt_tokens": 600, "completion_tokens": 150}},
            {"step_id": 3, "source": "agent", "message": "Done.",
             "tool_calls": [{"function_name": "mark_task_complete", "arguments": {}}],
             "observation": {"results": [{"content": [{"type": "text", "text": "ok"}]}]}}
        ]
    });
    std::fs::write(t.join("agent/trajectory.json"), traj.to_string()).unwrap();
    std::fs::write(t.join("agent/terminus.txt"), "terminus log line\n").unwrap();
    std::fs::write(
        t.join("verifier/test-stdout.txt"),
        format!("reward {reward}\n"),
    )
    .unwrap();
}

#[test]
fn an_imported_harbor_job_of_another_agent_reports_and_debugs() {
    let d = tempfile::tempdir().unwrap();
    let job = d.path().join("job");
    std::fs::create_dir_all(&job).unwrap();
    std::fs::write(job.join("config.json"), r#"{"job_name": "t2"}"#).unwrap();
    harbor_trial(
        &job,
        "write-out__a",
        "write-out",
        0.0,
        "2026-01-01T00:00:00Z",
    );
    harbor_trial(
        &job,
        "write-out__b",
        "write-out",
        0.0,
        "2026-01-01T00:01:00Z",
    );
    harbor_trial(&job, "easy__a", "easy", 1.0, "2026-01-01T00:00:00Z");
    harbor_trial(&job, "easy__b", "easy", 1.0, "2026-01-01T00:01:00Z");
    let eval = d.path().join("eval");
    common::import_harbor(&job, &eval);
    // The agent's logs and the verifier's output are where ahe's readers look.
    let t1 = eval.join("trials/write-out/1");
    let log = std::fs::read_to_string(t1.join("agent.log")).unwrap();
    assert!(log.contains("==> agent/terminus.txt <==") && log.contains("terminus log line"));
    let v = std::fs::read_to_string(t1.join("verifier/stdout.txt")).unwrap();
    assert_eq!(v, "reward 0\n");

    let (html, md) = report(&eval, &[("easy", "2/2"), ("write-out", "0/2")]);
    assert!(md.contains("pass@1: **0.500**"), "{md}");
    assert!(html.contains("openai:gpt-x"));
    // The trial page shows the ATIF steps as turns, the tool call and its output.
    let page = std::fs::read_to_string(eval.join("report/trials/write-out/1.html")).unwrap();
    assert!(page.contains("OBSERVED-7731"), "{page}");
    assert!(page.contains("bash_command") && page.contains("mark_task_complete"));
    assert!(page.contains("Solve write-out."));

    let model = script(d.path(), &["write-out"]);
    let r = debug(&eval, &model, &["write-out"]);
    assert_eq!(r["tasks"], 2, "{r}");
    assert_eq!(r["unclean"], json!([]), "{r}");
    // The debugger's read_trace returned the imported trajectory's observation.
    let trace =
        std::fs::read_to_string(eval.join("analysis/debugger/write-out/trace.jsonl")).unwrap();
    assert!(trace.contains("OBSERVED-7731"), "{trace}");
    let easy = std::fs::read_to_string(eval.join("analysis/detail/easy.md")).unwrap();
    assert!(
        !easy.contains("Debugger analysis"),
        "a passing task is not sent to the model"
    );
}

#[test]
fn infra_errors_show_clipped_in_the_tables_and_whole_on_the_trial_page() {
    let d = tempfile::tempdir().unwrap();
    let eval = d.path().join("eval");
    let job = common::root().join("crates/ahe-cli/tests/fixtures/harbor-job-compose-missing");
    common::import_harbor(&job, &eval);
    let (html, md) = report(&eval, &[("fix-sum", "infra"), ("hello-file", "infra")]);
    let row = md
        .lines()
        .find(|l| l.starts_with("| fix-sum | [#1]"))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(row.contains("| infra_error |"), "{row}");
    assert!(
        row.contains("Docker compose command failed") && row.contains('…'),
        "{row}"
    );
    assert!(row.chars().count() < 600, "clipped: {row}");
    assert!(html.contains("status-infra_error"));
    let page = std::fs::read_to_string(eval.join("report/trials/fix-sum/1.html")).unwrap();
    assert!(
        page.contains("Stderr: None"),
        "the whole error on the trial page"
    );
}
