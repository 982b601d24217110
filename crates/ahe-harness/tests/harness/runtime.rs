//! The agent loop end to end: a real OpenAI-compatible HTTP server on 127.0.0.1 serving
//! scripted replies, the real local sandbox, and harnesses built from the seed.

use crate::support;

use std::path::Path;
use std::time::Duration;

use ahe_harness::End;
use ahe_testsupport::ScriptedReply as R;
use support::*;

#[tokio::test]
async fn invalid_arguments_become_observations_and_the_loop_goes_on() {
    let r = run(
        &[],
        vec![
            R::tool_call("run_shell", r#"{"cmd": "ls"}"#),
            R::tool_call("run_shell", "{not json"),
            R::tool_call("no_such_tool", "{}"),
            R::tool_call("run_shell", r#"{"command": "echo hi > /app/out.txt"}"#),
            R::text("done"),
        ],
        T,
    )
    .await;
    assert_eq!(r.end, End::Finished);
    assert_eq!(r.turns, 5);
    let second = fed_back(&r.server, 1);
    assert!(
        second.contains("invalid arguments for run_shell"),
        "{second}"
    );
    assert!(
        second.contains("command"),
        "the schema error names the missing field: {second}"
    );
    assert!(fed_back(&r.server, 2).contains("not a JSON object"));
    assert!(fed_back(&r.server, 3).contains("unknown tool \"no_such_tool\""));
    assert_eq!(
        cat(r.sb.as_ref(), "/app/out.txt").await.as_deref(),
        Some("hi\n")
    );
    let calls = events(&r.trace, "tool_call");
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[0]["ok"], false);
    assert_eq!(calls[3]["exit_code"], 0);
}

#[tokio::test]
async fn a_429_is_retried_and_the_run_continues() {
    let r = run(
        &[],
        vec![
            R::status(429),
            R::tool_call("run_shell", r#"{"command": "touch /app/x"}"#),
            R::text("done"),
        ],
        T,
    )
    .await;
    assert_eq!(r.end, End::Finished);
    let s = r.model.stats();
    assert_eq!(s.retries, 1);
    assert_eq!(s.faults.get("transient"), Some(&1));
    assert!(cat(r.sb.as_ref(), "/app/x").await.is_some());
}

#[tokio::test]
async fn garbage_json_ends_as_model_error_after_retries() {
    let r = run(&[], vec![R::garbage(), R::garbage(), R::garbage()], T).await;
    assert_eq!(r.end, End::ModelError);
    assert_eq!(
        r.server.request_count(),
        2,
        "1 try + max_malformed_retries = 1"
    );
    let errs = events(&r.trace, "error");
    assert_eq!(errs[0]["kind"], "malformed");
}

const GUARD: &str = r#"
hooks = ["before_tool"]
kind = "builtin:command_guard"
[params]
patterns = ['rm\s+-rf']
message = "Blocked: recursive deletes are not allowed ({pattern})."
"#;

#[tokio::test]
async fn command_guard_blocks_a_matching_command_with_its_message() {
    let agent = std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace("middleware = []", "middleware = [\"guard\"]");
    let r = run(
        &[("agent.toml", &agent), ("middleware/guard.toml", GUARD)],
        vec![
            R::tool_call(
                "run_shell",
                r#"{"command": "rm -rf /app/*; echo ran > /app/ran"}"#,
            ),
            R::tool_call("run_shell", r#"{"command": "echo safe > /app/safe"}"#),
            R::text("done"),
        ],
        T,
    )
    .await;
    assert_eq!(r.end, End::Finished);
    let fb = fed_back(&r.server, 1);
    assert!(
        fb.contains("Blocked: recursive deletes are not allowed"),
        "{fb}"
    );
    assert!(
        cat(r.sb.as_ref(), "/app/ran").await.is_none(),
        "the blocked command must not run"
    );
    assert!(cat(r.sb.as_ref(), "/app/safe").await.is_some());
    let mw = events(&r.trace, "middleware");
    assert_eq!(mw.len(), 1);
    assert_eq!(mw[0]["name"], "guard");
    assert_eq!(mw[0]["decision"]["action"], "block");
}

#[tokio::test]
async fn truncation_cuts_long_output_and_says_so() {
    let agent = std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace("middleware = []", "middleware = [\"trunc\"]");
    let trunc = "hooks = [\"after_tool\"]\nkind = \"builtin:output_truncation\"\n[params]\nmax_chars = 400\n";
    let r = run(
        &[("agent.toml", &agent), ("middleware/trunc.toml", trunc)],
        vec![
            R::tool_call("run_shell", r#"{"command": "seq 1 20000"}"#),
            R::text("done"),
        ],
        T,
    )
    .await;
    let fb = fed_back(&r.server, 1);
    assert!(fb.contains("characters cut from the middle"), "{fb}");
    assert!(
        fb.contains("\n1\n2\n3\n") || fb.contains("Do the task.\n---\n1\n2\n3"),
        "head kept: {fb:.300}"
    );
    assert!(fb.contains("19999\n20000"), "tail kept");
    assert!(fb.len() < 1500, "cut to about max_chars: {}", fb.len());
    assert_eq!(events(&r.trace, "tool_call")[0]["truncated"], true);
}

#[tokio::test]
async fn finish_verification_rejects_a_finish_whose_check_fails() {
    let agent = std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace("middleware = []", "middleware = [\"verify\"]");
    let verify = "hooks = [\"on_finish\"]\nkind = \"builtin:finish_verification\"\n[params]\ncommand = \"test -s /app/report.txt && echo present || { echo report missing; exit 3; }\"\n";
    let r = run(
        &[("agent.toml", &agent), ("middleware/verify.toml", verify)],
        vec![
            R::text("All done."),
            R::tool_call("run_shell", r#"{"command": "echo ok > /app/report.txt"}"#),
            R::text("All done now."),
        ],
        T,
    )
    .await;
    assert_eq!(r.end, End::Finished);
    assert_eq!(r.turns, 3);
    let fb = fed_back(&r.server, 1);
    assert!(
        fb.contains("Not finished") && fb.contains("exit code 3") && fb.contains("report missing"),
        "{fb}"
    );
    let mw = events(&r.trace, "middleware");
    assert_eq!(mw.len(), 1);
    assert_eq!(mw[0]["decision"]["action"], "reject_finish");
}

#[tokio::test]
async fn json_in_text_protocol_round_trip() {
    let agent = std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace(
            "tool_protocol = \"native\"",
            "tool_protocol = \"json_in_text\"",
        );
    let r = run(
        &[("agent.toml", &agent)],
        vec![
            R::text("Plan: write it.\n{\"tool\": \"run_shell\", \"args\": {\"command\": \"echo j > /app/j.txt\"}}"),
            R::text("{\"tool\": \"run_shell\", \"args\": {\"command\""),
            R::text("Finished: wrote /app/j.txt."),
        ],
        T,
    )
    .await;
    assert_eq!(r.end, End::Finished);
    let first = &r.server.bodies()[0];
    assert!(
        first.get("tools").is_none(),
        "no native tools in json_in_text mode"
    );
    let sys = first["messages"][0]["content"].as_str().unwrap();
    assert!(
        sys.contains("How to act") && sys.contains("`run_shell`"),
        "{sys}"
    );
    assert!(fed_back(&r.server, 1).contains("Result of `run_shell`"));
    assert!(fed_back(&r.server, 2).contains("could not be read as an action"));
    assert_eq!(
        cat(r.sb.as_ref(), "/app/j.txt").await.as_deref(),
        Some("j\n")
    );
}

#[tokio::test]
async fn skills_subagents_and_file_tools() {
    let agent = std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace(
            "tools = [\"run_shell\"]",
            "tools = [\"run_shell\", \"load_skill\", \"delegate\", \"edit_file\"]",
        )
        .replace("skills = []", "skills = [\"demo\"]")
        .replace("subagents = []", "subagents = [\"helper\"]");
    let tool = |name: &str, kind: &str, props: &str, req: &str| {
        format!("name = \"{name}\"\ndescription = \"{name}\"\nimplementation = \"builtin:{kind}\"\n[input_schema]\ntype = \"object\"\nrequired = [{req}]\n[input_schema.properties]\n{props}\n")
    };
    let ls = tool(
        "load_skill",
        "load_skill",
        "name = { type = \"string\" }",
        "\"name\"",
    );
    let dg = tool(
        "delegate",
        "delegate",
        "agent = { type = \"string\" }\ntask = { type = \"string\" }",
        "\"agent\", \"task\"",
    );
    let ed = tool(
        "edit_file",
        "edit_file",
        "path = { type = \"string\" }\nold_text = { type = \"string\" }\nnew_text = { type = \"string\" }",
        "\"path\", \"old_text\", \"new_text\"",
    );
    let skill = "---\nname: demo\ndescription: How to greet.\n---\nSay SKILL-BODY-42.\n";
    let sub = "name = \"helper\"\ndescription = \"writes files\"\nprompt = \"You help in {{ working_dir }}.\"\ntools = [\"run_shell\"]\nmax_turns = 5\n";
    let r = run(
        &[
            ("agent.toml", &agent),
            ("tools/load_skill.toml", &ls),
            ("tools/delegate.toml", &dg),
            ("tools/edit_file.toml", &ed),
            ("skills/demo/SKILL.md", skill),
            ("subagents/helper.toml", sub),
        ],
        vec![
            R::tool_call("load_skill", r#"{"name": "demo"}"#),
            R::tool_call(
                "delegate",
                r#"{"agent": "helper", "task": "write /app/s.txt"}"#,
            ),
            // the sub-agent's two turns
            R::tool_call(
                "run_shell",
                r#"{"command": "printf 'a\\na\\nb\\n' > /app/s.txt"}"#,
            ),
            R::text("sub-agent wrote the file"),
            // back in the main agent
            R::tool_call(
                "edit_file",
                r#"{"path": "/app/s.txt", "old_text": "zzz", "new_text": "c"}"#,
            ),
            R::tool_call(
                "edit_file",
                r#"{"path": "/app/s.txt", "old_text": "a", "new_text": "c"}"#,
            ),
            R::tool_call(
                "edit_file",
                r#"{"path": "/app/s.txt", "old_text": "b", "new_text": "c"}"#,
            ),
            R::text("done"),
        ],
        T,
    )
    .await;
    assert_eq!(r.end, End::Finished);
    let sys0 = r.server.bodies()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !sys0.contains("SKILL-BODY-42"),
        "skill bodies load on demand only"
    );
    // The seed prompt renders no `skills`/`subagents`: the tool descriptions carry the
    // indexes (natively, and in the prompt's own list of tools).
    let described = |name: &str| -> String {
        r.server.bodies()[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["function"]["name"] == name)
            .map(|t| t["function"]["description"].as_str().unwrap().to_string())
            .unwrap_or_default()
    };
    assert!(described("load_skill").contains("- demo: How to greet."));
    assert!(described("delegate").contains("- helper: writes files"));
    assert!(!described("run_shell").contains("demo"));
    assert!(fed_back(&r.server, 1).contains("SKILL-BODY-42"));
    let sub_sys = r.server.bodies()[2]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(sub_sys.starts_with("You help in /app."), "{sub_sys}");
    assert!(fed_back(&r.server, 4).contains("sub-agent wrote the file"));
    assert!(fed_back(&r.server, 5).contains("was not found"));
    assert!(fed_back(&r.server, 6).contains("occurs 2 times"));
    assert_eq!(
        cat(r.sb.as_ref(), "/app/s.txt").await.as_deref(),
        Some("a\na\nc\n")
    );
    let ends = events(&r.trace, "run_end");
    assert_eq!(ends.len(), 2);
    assert_eq!(ends[0]["agent"], "helper");
}

#[tokio::test]
async fn the_agent_timeout_stops_a_long_command() {
    let t0 = std::time::Instant::now();
    let r = run(
        &[],
        vec![
            R::tool_call("run_shell", r#"{"command": "sleep 30"}"#),
            R::text("done"),
        ],
        Duration::from_secs(2),
    )
    .await;
    assert!(t0.elapsed() < Duration::from_secs(15));
    assert_eq!(r.end, End::Timeout);
}

const WORDS_PY: &str = r#"import json, sys
args = json.load(sys.stdin)
text = open(args["path"]).read()
print("noise before the result")
print(json.dumps({"ok": True, "output": "words=%d" % len(text.split()), "summary": "counted"}))
"#;

const NO_SECRETS_PY: &str = r#"import json, sys
req = json.load(sys.stdin)
cmd = req.get("args", {}).get("command", "")
if "secret" in cmd:
    print(json.dumps({"action": "block", "message": "script guard: no secrets"}))
elif req["hook"] == "before_tool" and req["tool"] == "run_shell":
    print(json.dumps({"action": "modify", "args": {"command": cmd + " && echo MODIFIED"}}))
else:
    print(json.dumps({"action": "continue"}))
"#;

#[tokio::test]
async fn script_tools_and_script_middleware_run_inside_the_sandbox() {
    let agent = std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace(
            "tools = [\"run_shell\"]",
            "tools = [\"run_shell\", \"words\"]",
        )
        .replace("middleware = []", "middleware = [\"guard\"]");
    let words = "name = \"words\"\ndescription = \"count words\"\nimplementation = \"script:tools/words.py\"\n[input_schema]\ntype = \"object\"\nrequired = [\"path\"]\n[input_schema.properties.path]\ntype = \"string\"\n";
    let guard = "hooks = [\"before_tool\"]\nkind = \"script:middleware/no_secrets.py\"\n";
    let r = run(
        &[
            ("agent.toml", &agent),
            ("tools/words.toml", words),
            ("tools/words.py", WORDS_PY),
            ("middleware/guard.toml", guard),
            ("middleware/no_secrets.py", NO_SECRETS_PY),
        ],
        vec![
            R::tool_call(
                "run_shell",
                r#"{"command": "echo one two three > /app/w.txt"}"#,
            ),
            R::tool_call("words", r#"{"path": "/app/w.txt"}"#),
            R::tool_call("run_shell", r#"{"command": "cat /etc/secret-stuff"}"#),
            R::text("done"),
        ],
        T,
    )
    .await;
    assert_eq!(r.end, End::Finished);
    assert!(
        fed_back(&r.server, 1).contains("MODIFIED"),
        "modify decision changed the args"
    );
    assert!(
        fed_back(&r.server, 2).contains("words=3"),
        "{}",
        fed_back(&r.server, 2)
    );
    assert!(fed_back(&r.server, 3).contains("script guard: no secrets"));
    // the script ran in the sandbox: its copy lives under the sandbox's /tmp, not on the host
    assert!(cat(r.sb.as_ref(), "/tmp/.ahe-harness/tools/words.py")
        .await
        .is_some());
    assert!(!Path::new("/tmp/.ahe-harness").exists());
}

#[tokio::test]
async fn turn_and_token_limits_end_the_run() {
    let agent = std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace("max_turns = 100", "max_turns = 2");
    let call = || R::tool_call("run_shell", r#"{"command": "true"}"#);
    let r = run(&[("agent.toml", &agent)], vec![call(), call(), call()], T).await;
    assert_eq!((r.end, r.turns), (End::TurnLimit, 2));

    let agent = std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace("max_total_tokens = 4000000", "max_total_tokens = 250");
    let r = run(
        &[("agent.toml", &agent)],
        vec![
            call().with_usage(100, 50, 0),
            call().with_usage(100, 50, 0),
            call(),
        ],
        T,
    )
    .await;
    assert_eq!((r.end, r.turns), (End::TokenLimit, 2));
}

#[tokio::test]
async fn the_system_prompt_states_the_trials_time_and_turn_limits() {
    // The trial's limit (45 s, as a task's own timeout would give) is below the harness's
    // 1800 s; the turn limit is the harness's (after any run-config cap).
    let prompt =
        "Work in {{ working_dir }}. You have {{ timeout_sec }} s and {{ max_turns }} turns.\n";
    let agent = std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace("max_turns = 100", "max_turns = 7");
    let r = run(
        &[("system_prompt.md", prompt), ("agent.toml", &agent)],
        vec![R::text("done")],
        Duration::from_secs(45),
    )
    .await;
    let system = r.server.bodies()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("You have 45 s and 7 turns."), "{system}");
}
