//! Unit tests of `clean.rs`.
use super::*;
use ahe_bench::trial::write_result;
use ahe_bench::{AgentEnd, TrialStatus};
use serde_json::json;

fn result(dir: &Path, task: &str, attempt: u32, status: TrialStatus) -> TrialResult {
    let mut r = TrialResult::new(task, attempt);
    r.status = status;
    r.agent_end = (status != TrialStatus::InfraError).then_some(AgentEnd::Finished);
    r.usage.input_tokens = 100;
    r.timings.total_ms = 1234;
    if status == TrialStatus::InfraError {
        r.error = Some("sandbox: docker daemon unreachable".into());
    }
    write_result(dir, &r);
    r
}

fn write_trace(dir: &Path, events: &[Value], tail: &str) {
    let s: String = events.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(dir.join("trace.jsonl"), s + tail).unwrap();
}

/// A main run that delegates twice to `explorer`, loads a skill, has a middleware
/// decision before its model call, a rejected finish and a format error.
const RICH: &str = r##"
{"event":"run_start","agent":"main","model":"m","protocol":"native","tools":["run_shell"],"limits":{}}
{"event":"message","agent":"main","role":"system","content":"SYS"}
{"event":"message","agent":"main","role":"user","content":"TASK"}
{"event":"assistant","agent":"main","turn":1,"content":"look","tool_calls":[{"id":"a","name":"run_shell","arguments":{"command":"ls"}},{"id":"b","name":"load_skill","arguments":{"name":"git"}}],"usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":1},"duration_ms":7}
{"event":"tool_call","agent":"main","turn":1,"id":"a","name":"run_shell","args":{"command":"ls -la"},"output":"file.txt","ok":true,"exit_code":0,"truncated":false,"error":null,"duration_ms":3}
{"event":"tool_call","agent":"main","turn":1,"id":"b","name":"load_skill","args":{"name":"git"},"output":"# git skill","ok":true,"exit_code":0,"truncated":false,"error":null,"duration_ms":3}
{"event":"assistant","agent":"main","turn":2,"content":null,"tool_calls":[{"id":"c","name":"delegate","arguments":{"agent":"explorer","task":"T1"}}],"usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":1},"duration_ms":7}
{"event":"run_start","agent":"explorer","model":"m","protocol":"native","tools":["run_shell"],"limits":{}}
{"event":"message","agent":"explorer","role":"system","content":"SUB SYS"}
{"event":"message","agent":"explorer","role":"user","content":"T1"}
{"event":"assistant","agent":"explorer","turn":1,"content":null,"tool_calls":[{"id":"x","name":"run_shell","arguments":{"command":"pwd"}}],"usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":1},"duration_ms":7}
{"event":"tool_call","agent":"explorer","turn":1,"id":"x","name":"run_shell","args":{"command":"pwd"},"output":"/app","ok":true,"exit_code":0,"truncated":false,"error":null,"duration_ms":3}
{"event":"run_end","agent":"explorer","end":"finished","turns":1,"usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}
{"event":"tool_call","agent":"main","turn":2,"id":"c","name":"delegate","args":{"agent":"explorer","task":"T1"},"output":"found","ok":true,"exit_code":0,"truncated":false,"error":null,"duration_ms":3}
{"event":"middleware","agent":"main","turn":3,"hook":"before_model","name":"compact","decision":{"action":"modify"}}
{"event":"assistant","agent":"main","turn":3,"content":null,"tool_calls":[{"id":"d","name":"delegate","arguments":{"agent":"explorer","task":"T2"}}],"usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":1},"duration_ms":7}
{"event":"run_start","agent":"explorer","model":"m","protocol":"native","tools":["run_shell"],"limits":{}}
{"event":"message","agent":"explorer","role":"system","content":"SUB SYS"}
{"event":"message","agent":"explorer","role":"user","content":"T2"}
{"event":"assistant","agent":"explorer","turn":1,"content":"nothing","tool_calls":[],"usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":1},"duration_ms":7}
{"event":"run_end","agent":"explorer","end":"finished","turns":1,"usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}
{"event":"tool_call","agent":"main","turn":3,"id":"d","name":"delegate","args":{},"output":"nothing","ok":true,"exit_code":0,"truncated":false,"error":null,"duration_ms":3}
{"event":"assistant","agent":"main","turn":4,"content":null,"tool_calls":[{"id":"f","name":"finish","arguments":{"summary":"done"}}],"usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":1},"duration_ms":7}
{"event":"middleware","agent":"main","turn":4,"hook":"on_finish","name":"verify","decision":{"action":"reject_finish","message":"tests fail"}}
{"event":"message","agent":"main","role":"user","content":"tests fail"}
{"event":"error","agent":"main","turn":5,"kind":"format","message":"bad json"}
{"event":"assistant","agent":"main","turn":5,"content":"done","tool_calls":[],"usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":1},"duration_ms":7}
{"event":"run_end","agent":"main","end":"finished","turns":1,"usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}
"##;

fn rich_events() -> Vec<Value> {
    RICH.trim()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn end(agent: &str) -> Value {
    json!({"event": "run_end", "agent": agent, "end": "finished"})
}

fn tool(turn: u32, id: &str, name: &str) -> Value {
    json!({"event": "tool_call", "agent": "main", "turn": turn, "id": id, "name": name,
               "args": {}, "output": "", "ok": true})
}

#[test]
fn folds_events_into_ordered_turns() {
    let d = tempfile::tempdir().unwrap();
    let r = result(d.path(), "t1", 1, TrialStatus::Pass);
    write_trace(d.path(), &rich_events(), "");
    let t = clean_trial(d.path()).unwrap();
    assert_eq!(t.trial_id, r.trial_id);
    assert_eq!((&*t.task, t.attempt, &*t.status), ("t1", 1, "pass"));
    assert_eq!(t.agent_end.as_deref(), Some("finished"));
    assert_eq!(t.trace, TraceState::Complete);
    assert_eq!((t.system_prompt.as_str(), t.user.as_str()), ("SYS", "TASK"));
    assert_eq!(t.duration_ms, 1234);
    assert_eq!(t.subagent_runs, vec!["explorer", "explorer"]);
    let order: Vec<String> = t
        .turns
        .iter()
        .map(|x| format!("{}{}", x.agent, x.turn))
        .collect();
    assert_eq!(
        order.join(" "),
        "main1 main2 explorer1 main3 explorer1 main4 main5"
    );
    let t1 = &t.turns[0];
    assert_eq!(t1.content.as_deref(), Some("look"));
    assert_eq!(t1.usage.output_tokens, 1);
    assert_eq!(t1.duration_ms, 7);
    assert_eq!(t1.tool_calls.len(), 2);
    assert_eq!(
        t1.tool_calls[0].args,
        json!({"command": "ls -la"}),
        "after middleware"
    );
    assert_eq!(t1.tool_calls[0].output.as_deref(), Some("file.txt"));
    assert_eq!(t1.tool_calls[1].output.as_deref(), Some("# git skill"));
    assert_eq!(t.turns[2].tool_calls[0].output.as_deref(), Some("/app"));
    // The main turn 3's middleware came before its assistant event: same turn.
    assert_eq!(t.turns[3].middleware.len(), 1);
    assert_eq!(t.turns[3].middleware[0].name, "compact");
    assert_eq!(t.turns[3].tool_calls.len(), 1);
    // The sub-agent's second run has its own turn 1, and its task is not feedback.
    assert_eq!(t.turns[4].content.as_deref(), Some("nothing"));
    assert!(t.turns[4].feedback.is_empty());
    // finish: no tool_call event, so no output; the rejection is feedback of turn 4.
    let t4 = &t.turns[5];
    assert_eq!(t4.tool_calls[0].name, "finish");
    assert_eq!(t4.tool_calls[0].output, None);
    assert_eq!(t4.feedback, vec!["tests fail"]);
    assert_eq!(t4.middleware[0].hook, "on_finish");
    assert_eq!(t.errors.len(), 1);
    assert_eq!((t.errors[0].turn, t.errors[0].kind.as_str()), (5, "format"));
}

#[test]
fn tolerates_cut_last_line_and_bad_middle_line() {
    let d = tempfile::tempdir().unwrap();
    result(d.path(), "t1", 1, TrialStatus::Fail);
    let ev = rich_events();
    let cut = r#"{"t_ms":9,"event":"assistant","agent":"main","tu"#;
    write_trace(d.path(), &ev[..6], cut);
    let t = clean_trial(d.path()).unwrap();
    assert_eq!(t.trace, TraceState::Incomplete);
    assert_eq!(t.turns.len(), 1);
    assert_eq!(t.turns[0].tool_calls.len(), 2);
    assert!(t.errors.is_empty(), "a cut last line is no error");

    let mut s = std::fs::read_to_string(d.path().join("trace.jsonl")).unwrap();
    s.truncate(s.rfind('\n').unwrap() + 1);
    s.insert_str(s.find('\n').unwrap() + 1, "{not json\n");
    std::fs::write(
        d.path().join("trace.jsonl"),
        s + &end("main").to_string() + "\n",
    )
    .unwrap();
    let t = clean_trial(d.path()).unwrap();
    assert_eq!(t.trace, TraceState::Complete);
    assert_eq!(t.errors.len(), 1);
    assert_eq!(t.errors[0].kind, "trace");
    assert!(t.errors[0].message.contains("line 2"));
    assert_eq!(t.turns.len(), 1);

    // A crash in the middle of a multi-byte character: still just a cut line.
    let mut raw = std::fs::read(d.path().join("trace.jsonl")).unwrap();
    raw.extend_from_slice(b"{\"event\":\"message\",\"content\":\"caf\xC3");
    std::fs::write(d.path().join("trace.jsonl"), raw).unwrap();
    let t = clean_trial(d.path()).unwrap();
    assert_eq!(t.trace, TraceState::Incomplete);
    assert_eq!(t.errors.len(), 1);
}

#[test]
fn missing_trace_keeps_the_trial_error() {
    let d = tempfile::tempdir().unwrap();
    result(d.path(), "t1", 2, TrialStatus::InfraError);
    let t = clean_trial(d.path()).unwrap();
    assert_eq!(t.trace, TraceState::Missing);
    assert!(t.turns.is_empty());
    assert_eq!(t.agent_end, None);
    assert_eq!(t.errors.len(), 1);
    assert_eq!(t.errors[0].kind, "infra_error");
    assert!(t.errors[0].message.contains("docker"));
    assert!(clean_trial(&d.path().join("nope")).is_err());
}

#[test]
fn write_is_atomic_and_round_trips() {
    let d = tempfile::tempdir().unwrap();
    result(d.path(), "t1", 1, TrialStatus::Pass);
    write_trace(d.path(), &rich_events(), "");
    write_clean(d.path()).unwrap();
    assert!(!d.path().join("trace.clean.json.tmp").exists());
    let back = read_clean(d.path()).unwrap();
    assert_eq!(back, clean_trial(d.path()).unwrap());
    let v: Value =
        serde_json::from_slice(&std::fs::read(TrialDir::new(d.path()).clean_path()).unwrap())
            .unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["trace"], "complete");
    assert_eq!(v["turns"][0]["tool_calls"][0]["exit_code"], 0);
}

#[test]
fn exercised_files_name_what_ran() {
    let d = tempfile::tempdir().unwrap();
    result(d.path(), "t1", 1, TrialStatus::Pass);
    let mut ev = rich_events();
    ev.push(tool(5, "z", "../evil"));
    write_trace(d.path(), &ev, "");
    let ex = exercised_files(&clean_trial(d.path()).unwrap());
    let want = "agent.toml memory/ system_prompt.md tools/run_shell.toml tools/load_skill.toml \
            tools/delegate.toml tools/finish.toml skills/git/SKILL.md middleware/compact.toml \
            middleware/verify.toml subagents/explorer.toml";
    let want: BTreeSet<String> = want.split_whitespace().map(String::from).collect();
    assert_eq!(ex, want);
}

#[test]
fn clean_all_walks_every_trial_and_collects_failures() {
    let d = tempfile::tempdir().unwrap();
    for (task, attempt) in [("a", 1), ("a", 2), ("b", 1)] {
        let dir = d.path().join(task).join(attempt.to_string());
        result(&dir, task, attempt, TrialStatus::Pass);
        let mut ev = rich_events();
        if task == "b" {
            ev.truncate(6);
        }
        write_trace(&dir, &ev, "");
    }
    std::fs::create_dir_all(d.path().join("c/1")).unwrap();
    std::fs::write(d.path().join("stray.txt"), "x").unwrap();
    let s = clean_all(d.path()).unwrap();
    assert_eq!(s.trials, 3);
    assert_eq!(s.failed.len(), 1);
    assert!(s.failed[0].0.ends_with("c/1"));
    assert!(s.failed[0].1.contains("result.json"), "{}", s.failed[0].1);
    assert!(TrialDir::new(d.path().join("a/2")).clean_path().is_file());
    assert!(s.exercised["a"].contains("subagents/explorer.toml"));
    assert!(!s.exercised["b"].contains("subagents/explorer.toml"));
    assert!(s.exercised["b"].contains("skills/git/SKILL.md"));
    assert_eq!(load_results(d.path()).unwrap().len(), 3);
    assert!(clean_all(&d.path().join("missing")).is_err());
}
