//! The `ahe` binary end to end: eval on the smoke benchmark (local sandbox, mock model),
//! and the errors bad input gets (exit 2, naming file and field).

use crate::common;

use common::{copy_dir, root, run as ahe, text};

use std::path::Path;
use std::process::Output;

use serde_json::Value;

fn eval(model: &str, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "eval",
        "--harness",
        "harness-seed",
        "--benchmark",
        "benchmarks/smoke",
        "--sandbox",
        "local",
        "--model",
        model,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ahe(&args)
}

fn scores(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("scores.json")).unwrap()).unwrap()
}

#[test]
fn oracle_passes_every_smoke_task() {
    let d = tempfile::tempdir().unwrap();
    let o = eval("mock:oracle", d.path(), &["-k", "2", "--concurrency", "4"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = scores(d.path());
    assert_eq!(s["pass_at_1"], 1.0);
    assert_eq!(s["pass_at_1_ci"], serde_json::json!([1.0, 1.0]));
    let tasks = s["tasks"].as_object().unwrap();
    assert_eq!(tasks.len(), 4);
    for (name, t) in tasks {
        assert_eq!(t["status"], "pass", "{name}");
        assert_eq!(
            (t["k"].as_u64(), t["passed"].as_u64()),
            (Some(2), Some(2)),
            "{name}"
        );
        for a in 1..=2 {
            let dir = d.path().join(format!("trials/{name}/{a}"));
            for f in [
                "result.json",
                "trace.jsonl",
                "agent.log",
                "verifier/reward.txt",
                "verifier/stdout.txt",
            ] {
                assert!(dir.join(f).is_file(), "{}/{f}", dir.display());
            }
        }
    }
    assert!(s["tokens"]["input"].as_u64().unwrap() > 0);
    assert_eq!(s["cost_usd"], 0.0);
    assert!(text(&o).contains("pass@1 = 1.000"));
}

#[test]
fn nop_fails_every_smoke_task() {
    let d = tempfile::tempdir().unwrap();
    let o = eval("mock:nop", d.path(), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = scores(d.path());
    assert_eq!(s["pass_at_1"], 0.0);
    assert_eq!(s["statuses"]["fail"], 4);
    for t in s["tasks"].as_object().unwrap().values() {
        assert_eq!(t["status"], "fail");
    }
}

#[test]
fn json_output_is_one_document() {
    let d = tempfile::tempdir().unwrap();
    let o = eval(
        "mock:oracle",
        d.path(),
        &["--tasks", "hello-file,fix-sum", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    assert_eq!(v["n_tasks"], 2);
    assert_eq!(v["pass_at_1"], 1.0);
}

#[test]
fn bad_inputs_exit_2_naming_file_and_field() {
    let d = tempfile::tempdir().unwrap();
    // unknown task name
    let o = eval("mock:oracle", d.path(), &["--tasks", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("unknown task \"nope\""), "{}", text(&o));
    // bad model spec
    let o = eval("gpt4", d.path(), &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("mock:oracle"), "{}", text(&o));
    // no model at all
    let o = ahe(&[
        "eval",
        "--harness",
        "harness-seed",
        "--benchmark",
        "benchmarks/smoke",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--model"), "{}", text(&o));

    // bad config: unknown key
    let cfg = d.path().join("bad.toml");
    std::fs::write(&cfg, "[benchmark]\npath = \"benchmarks/smoke\"\n[sandbox]\nbackend = \"local\"\nconcurency = 2\n").unwrap();
    let o = ahe(&[
        "eval",
        "--harness",
        "harness-seed",
        "--benchmark",
        "benchmarks/smoke",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let t = text(&o);
    assert!(
        t.contains("bad.toml") && t.contains("sandbox") && t.contains("concurency"),
        "{t}"
    );

    // bad harness: invalid schema
    let h = d.path().join("h");
    copy_dir(&root().join("harness-seed"), &h);
    let tool = std::fs::read_to_string(h.join("tools/run_shell.toml"))
        .unwrap()
        .replace("type = \"object\"", "type = 7");
    std::fs::write(h.join("tools/run_shell.toml"), tool).unwrap();
    let o = ahe(&[
        "eval",
        "--harness",
        h.to_str().unwrap(),
        "--benchmark",
        "benchmarks/smoke",
        "--model",
        "mock:nop",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("tools/run_shell.toml: input_schema"),
        "{}",
        text(&o)
    );
    let o = ahe(&["validate", h.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("tools/run_shell.toml: input_schema"),
        "{}",
        text(&o)
    );
    assert_eq!(ahe(&["validate", "harness-seed"]).status.code(), Some(0));

    // bad task: verifier timeout of the wrong type
    let b = d.path().join("bench");
    copy_dir(&root().join("benchmarks/smoke"), &b);
    let tt = std::fs::read_to_string(b.join("fix-sum/task.toml"))
        .unwrap()
        .replace("timeout_sec = 60.0", "timeout_sec = \"1m\"");
    std::fs::write(b.join("fix-sum/task.toml"), tt).unwrap();
    let o = ahe(&[
        "eval",
        "--harness",
        "harness-seed",
        "--benchmark",
        b.to_str().unwrap(),
        "--model",
        "mock:nop",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let t = text(&o);
    assert!(
        t.contains("fix-sum/task.toml") && t.contains("timeout_sec"),
        "{t}"
    );
}

#[test]
fn config_agent_max_turns_caps_the_eval_harness() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("cap.toml");
    std::fs::write(
        &cfg,
        "[benchmark]\npath = \"benchmarks/smoke\"\n[agent]\nmax_turns = 1\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let o = eval(
        "mock:oracle",
        &out,
        &["--config", cfg.to_str().unwrap(), "--tasks", "config-port"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let dir = out.join("trials/config-port/1");
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap();
    // The oracle needs two turns (run the solution, then finish): capped at one.
    assert_eq!(result["turns"], 1, "{result}");
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
    let start: Value = serde_json::from_str(trace.lines().next().unwrap()).unwrap();
    assert_eq!(start["limits"]["max_turns"], 1, "{start}");
}
