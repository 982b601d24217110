//! Input guards and hygiene of the `ahe` binary: `--out` into a non-empty directory,
//! `--concurrency 0` (flags and config files), `ahe sandbox reap` on local sandboxes of dead
//! processes, and control characters from a model kept out of agent.log and `ahe show`.

use crate::common;

use std::path::Path;

use ahe_testsupport::{ScriptedReply, TestServer};
use common::*;
use serde_json::json;

fn eval_oracle(out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "eval",
        "--harness",
        "harness-seed",
        "--benchmark",
        "benchmarks/smoke",
        "--sandbox",
        "local",
        "--model",
        "mock:oracle",
        "--tasks",
        "hello-file",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ahe(&args, &[])
}

#[test]
fn eval_out_refuses_a_non_empty_dir_unless_force_clears_its_old_trials() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // An existing empty directory is fine.
    let o = eval_oracle(&out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // A trial of another evaluation, and a file of the researcher's.
    let stale = out.join("trials/stale-task/1");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("result.json"), "{}").unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let scores_before = std::fs::read_to_string(out.join("scores.json")).unwrap();

    let o = eval_oracle(&out, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains(&format!("--out {}", out.display()))
            && t.contains("not empty")
            && t.contains("--force"),
        "{t}"
    );
    assert!(stale.join("result.json").is_file(), "nothing is touched");
    assert_eq!(
        std::fs::read_to_string(out.join("scores.json")).unwrap(),
        scores_before
    );

    let o = eval_oracle(&out, &["--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !out.join("trials/stale-task").exists(),
        "old trials are gone"
    );
    assert!(out.join("trials/hello-file/1/result.json").is_file());
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "mine"
    );
    let s = json_file(&out.join("scores.json"));
    let tasks: Vec<&String> = s["tasks"].as_object().unwrap().keys().collect();
    assert_eq!(tasks, vec!["hello-file"]);
    assert_eq!(s["pass_at_1"], 1.0);
}

#[test]
fn concurrency_zero_is_refused_on_the_command_line() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let o = eval_oracle(&out, &["--concurrency", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--concurrency"), "{}", text(&o));
    assert!(!out.exists(), "nothing ran");
    let o = ahe(
        &["bench", "check", "benchmarks/smoke", "--concurrency", "0"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--concurrency"), "{}", text(&o));
    // 1 is the smallest accepted value.
    let o = ahe(
        &["bench", "check", "benchmarks/smoke", "--concurrency", "1"],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn concurrency_zero_in_a_config_file_is_refused_naming_file_and_field() {
    let d = tempfile::tempdir().unwrap();
    let base = root().join("configs/smoke-mock.toml");
    for (section, field) in [
        ("sandbox", "concurrency"),
        ("evolve", "debugger_concurrency"),
    ] {
        let cfg = d.path().join(format!("{field}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "extends = \"{}\"\n[{section}]\n{field} = 0\n",
                base.display()
            ),
        )
        .unwrap();
        let want = format!("{}: {section}.{field}: must be at least 1", cfg.display());
        let o = ahe(
            &[
                "evolve",
                "--config",
                cfg.to_str().unwrap(),
                "--runs-dir",
                d.path().join("runs").to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(&want), "{}", text(&o));
        let o = ahe(
            &[
                "eval",
                "--harness",
                "harness-seed",
                "--benchmark",
                "benchmarks/smoke",
                "--config",
                cfg.to_str().unwrap(),
                "--out",
                d.path().join("out").to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(&want), "{}", text(&o));
    }
}

#[test]
fn sandbox_reap_removes_local_sandboxes_of_dead_processes_only() {
    let d = tempfile::tempdir().unwrap();
    let tmp = d.path();
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let dead = c.id();
    c.wait().unwrap();
    assert!(!Path::new(&format!("/proc/{dead}")).exists());
    // This test process stays alive while `ahe sandbox reap` runs.
    let live = std::process::id();
    let dead_dir = tmp.join(format!("ahe-local-hello-file-hello-file-1-{dead}-0-1f"));
    let live_dir = tmp.join(format!("ahe-local-hello-file-hello-file-1-{live}-0-1f"));
    for dir in [&dead_dir, &live_dir] {
        std::fs::create_dir_all(dir.join("fs/app")).unwrap();
        std::fs::write(dir.join("fs/app/out.txt"), "x").unwrap();
    }
    // No engine: the docker part fails after the local sandboxes are reaped.
    let o = ahe(
        &["sandbox", "reap"],
        &[
            ("TMPDIR", tmp.to_str().unwrap()),
            ("DOCKER_HOST", "unix:///nonexistent/docker.sock"),
        ],
    );
    let t = text(&o);
    assert!(
        t.contains("removed 1 local sandbox and ") && t.contains("(1 of running ones kept)"),
        "{t}"
    );
    assert!(t.contains("docker containers not reaped"), "{t}");
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(!dead_dir.exists(), "the dead process's sandbox is gone");
    assert!(
        live_dir.join("fs/app/out.txt").is_file(),
        "a live one is kept"
    );
}

/// What a hostile model says: clear the screen, ring the bell, set the title, CSI via C1.
const EVIL: &str = "done\x1b[2J\x07\x1b]0;pwned\x07\u{9b}31m";
/// The same, as agent.log and `ahe show` print it.
const EVIL_SHOWN: &str = "done\\x1b[2J\\x07\\x1b]0;pwned\\x07\\u{9b}31m";

fn assert_no_controls(what: &str, s: &str) {
    let bad: Vec<char> = s
        .chars()
        .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
        .collect();
    assert!(
        bad.is_empty(),
        "{what} holds raw control characters {bad:?}: {s}"
    );
}

#[test]
fn control_characters_from_a_model_are_escaped_in_agent_log_and_show() {
    let tasks = smoke_tasks();
    let server =
        TestServer::start_dynamic(
            move |body, _| match (task_of(&tasks, body), shell_tool(body)) {
                (Some(_), Some(shell)) if turns(body) == 0 => call(
                    &shell,
                    json!({ "command": "printf 'out\\033[31mred\\007\\n'" }),
                ),
                (Some(_), _) => ScriptedReply::text(EVIL),
                _ => ScriptedReply::text("done"),
            },
        );
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("evil.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = \"{}\"\nk = 1\niterations = 1\n[benchmark]\npath = \"benchmarks/smoke\"\n\
             include = [\"hello-file\"]\n[sandbox]\nbackend = \"local\"\n[evolve]\npreflight = false\n\
             [models.default]\nprovider = \"openai\"\nmodel = \"evil\"\nbase_url = \"{}\"\n\
             api_key_env = \"AHE_GUARDS_KEY\"\nbackoff_base_ms = 1\n",
            root().join("configs/base.toml").display(),
            server.base_url()
        ),
    )
    .unwrap();
    let runs = d.path().join("runs");
    let envs = [("AHE_GUARDS_KEY", "sk-test")];
    let o = ahe(
        &[
            "evolve",
            "--config",
            cfg.to_str().unwrap(),
            "--name",
            "evil",
            "--runs-dir",
            runs.to_str().unwrap(),
        ],
        &envs,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = runs.join("evil");
    let trial = run.join("iterations/001/trials/hello-file/1");

    let log = std::fs::read_to_string(trial.join("agent.log")).unwrap();
    assert_no_controls("agent.log", &log);
    assert!(log.contains(EVIL_SHOWN), "{log}");
    assert!(
        log.contains("out\\x1b[31mred\\x07"),
        "the tool output too: {log}"
    );
    // trace.jsonl keeps the exact text (JSON escapes it).
    let trace = std::fs::read_to_string(trial.join("trace.jsonl")).unwrap();
    assert!(
        trace
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|v| v["content"] == EVIL),
        "{trace}"
    );

    let r = run.to_str().unwrap();
    let o = ahe(
        &[
            "show",
            r,
            "--iteration",
            "1",
            "--task",
            "hello-file",
            "--trial",
            "1",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shown = String::from_utf8_lossy(&o.stdout);
    assert_no_controls("ahe show --trial", &shown);
    assert!(shown.contains(EVIL_SHOWN), "{shown}");
    assert!(shown.contains("out\\x1b[31mred\\x07"), "{shown}");
    for args in [
        vec!["show", r],
        vec!["show", r, "--iteration", "1"],
        vec!["show", r, "--task", "hello-file"],
    ] {
        let o = ahe(&args, &[]);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        assert_no_controls(&format!("{args:?}"), &String::from_utf8_lossy(&o.stdout));
    }
}

#[test]
fn eval_of_a_run_ref_removes_its_exported_harness() {
    let d = tempfile::tempdir().unwrap();
    let runs = d.path().join("runs");
    let o = ahe(
        &[
            "evolve",
            "--config",
            "configs/smoke-mock.toml",
            "--iterations",
            "1",
            "--name",
            "r",
            "--runs-dir",
            runs.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let tmp = d.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let spec = format!("{}@best", runs.join("r").display());
    let out = d.path().join("out");
    let o = ahe(
        &[
            "eval",
            "--harness",
            &spec,
            "--benchmark",
            "benchmarks/smoke",
            "--model",
            "mock:oracle",
            "--sandbox",
            "local",
            "--tasks",
            "hello-file",
            "--out",
            out.to_str().unwrap(),
        ],
        &[("TMPDIR", tmp.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json_file(&out.join("scores.json"))["pass_at_1"], 1.0);
    let left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        left,
        Vec::<String>::new(),
        "nothing is left in the temp dir"
    );
}
