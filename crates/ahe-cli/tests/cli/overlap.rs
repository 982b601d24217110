//! The debugger overlaps the rollout: a task's debugger starts once its trials are done,
//! while another task's trial still runs; a run killed (SIGKILL) in that overlapped phase
//! resumes without running any finished trial or written debugger report again, and the
//! debugger's cost still counts the kept report's call.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ahe_testsupport::{ScriptedReply, TestServer};
use common::*;
use serde_json::{json, Value};

/// What the model server saw, in order: `code:<task>:<turn>` and `debugger:<task>`.
type Log = Arc<Mutex<Vec<String>>>;

/// A model server: `hello-file`'s code agent answers "done" at once (its trial fails fast);
/// `fix-sum`'s first trial sleeps `first_sleep` seconds in the sandbox, later ones do not;
/// the debugger answers a report; the evolve agent says "done".
fn server(log: Log, first_sleep: u32) -> TestServer {
    let tasks = smoke_tasks();
    let sleeps = Arc::new(AtomicU32::new(0));
    TestServer::start_dynamic(move |body, _| {
        let sys = system_prompt(body);
        if sys.starts_with("You are the Debugger") {
            let task = sys
                .split("benchmark task `")
                .nth(1)
                .and_then(|r| r.split('`').next())
                .unwrap_or("?");
            log.lock().unwrap().push(format!("debugger:{task}"));
            return ScriptedReply::text("## Failure summary\nThe agent stopped at once.\n");
        }
        match (task_of(&tasks, body), shell_tool(body)) {
            (Some(t), Some(shell)) => {
                let turn = turns(body);
                log.lock().unwrap().push(format!("code:{}:{turn}", t.name));
                let first = t.name == "fix-sum" && turn == 0;
                if first && sleeps.fetch_add(1, Ordering::SeqCst) == 0 {
                    call(&shell, json!({ "command": format!("sleep {first_sleep}") }))
                } else {
                    ScriptedReply::text("done")
                }
            }
            _ => ScriptedReply::text("done"),
        }
    })
}

/// A run config on `hello-file` and `fix-sum`, k = 1, one iteration, all roles on `base_url`.
fn config(dir: &Path, base_url: &str) -> String {
    let p = dir.join("overlap.toml");
    std::fs::write(
        &p,
        format!(
            "extends = \"{}\"\nk = 1\niterations = 1\n[benchmark]\npath = \"benchmarks/smoke\"\n\
             include = [\"hello-file\", \"fix-sum\"]\n[sandbox]\nbackend = \"local\"\n\
             concurrency = 2\ninfra_retries = 0\n[evolve]\npreflight = false\n\
             final_trials = 0\ndebugger_concurrency = 2\n[models.default]\nprovider = \"openai\"\n\
             model = \"overlap-model\"\nbase_url = \"{base_url}\"\n\
             api_key_env = \"AHE_OVERLAP_KEY\"\nbackoff_base_ms = 1\n",
            root().join("configs/base.toml").display()
        ),
    )
    .unwrap();
    p.to_string_lossy().into_owned()
}

fn evolve(cfg: &str, runs: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ahe"));
    c.args(["evolve", "--config", cfg, "--name", "ov", "--runs-dir"])
        .arg(runs)
        .env("AHE_OVERLAP_KEY", "sk-test")
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn count(log: &Log, what: &str) -> usize {
    log.lock().unwrap().iter().filter(|e| *e == what).count()
}

fn position(log: &Log, what: &str) -> Option<usize> {
    log.lock().unwrap().iter().position(|e| e == what)
}

fn journal(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(ahe_rundir::RunDir::new(run).journal_path())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_tasks_debugger_starts_before_the_last_trial_finishes() {
    let d = tempfile::tempdir().unwrap();
    let log: Log = Default::default();
    let server = server(log.clone(), 4);
    let cfg = config(d.path(), &server.base_url());
    let runs = d.path().join("runs");
    let o = evolve(&cfg, &runs).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let early = position(&log, "debugger:hello-file").expect("hello-file was debugged");
    // fix-sum's turn 1 is asked for only once its 4 s sleep (the last trial) has ended.
    let last_trial_ends = position(&log, "code:fix-sum:1").expect("fix-sum's trial went on");
    assert!(
        early < last_trial_ends,
        "hello-file's debugger waited for the last trial: {:?}",
        log.lock().unwrap()
    );
    assert_eq!(count(&log, "debugger:hello-file"), 1);
    assert_eq!(count(&log, "debugger:fix-sum"), 1);
    let it = ahe_rundir::RunDir::new(runs.join("ov")).iteration(1);
    let overview = std::fs::read_to_string(it.overview_path()).unwrap();
    assert!(
        overview.contains("`hello-file`") && overview.contains("`fix-sum`"),
        "{overview}"
    );
}

#[test]
fn killed_during_the_overlapped_phase_the_run_resumes_without_repeating_work() {
    let d = tempfile::tempdir().unwrap();
    let log: Log = Default::default();
    let server = server(log.clone(), 120);
    let cfg = config(d.path(), &server.base_url());
    let runs = d.path().join("runs");
    let run = runs.join("ov");
    let detail = ahe_rundir::RunDir::new(&run)
        .iteration(1)
        .detail_path("hello-file");
    let mut child = evolve(&cfg, &runs).spawn().unwrap();
    let t0 = Instant::now();
    // hello-file's report is written while fix-sum's trial sleeps: kill -9 then.
    while !detail.is_file() {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "no overlapped debugger report: {:?}",
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        position(&log, "code:fix-sum:1"),
        None,
        "fix-sum still sleeps"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let before = journal(&run);
    let done = |j: &[Value]| -> Vec<(String, u64)> {
        j.iter()
            .filter(|e| e["ev"] == "trial_done" && e["iter"] == 1)
            .map(|e| {
                (
                    e["task"].as_str().unwrap().to_string(),
                    e["attempt"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(done(&before), vec![("hello-file".to_string(), 1)]);

    let o = ahe(
        &["evolve", "--resume", run.to_str().unwrap()],
        &[("AHE_OVERLAP_KEY", "sk-test")],
    );
    assert_eq!(o.status.code(), Some(0), "resume: {}", text(&o));
    let after = journal(&run);
    assert_eq!(after.last().unwrap()["ev"], "run_end");
    let mut iter1 = done(&after);
    iter1.sort();
    assert_eq!(
        iter1,
        vec![("fix-sum".to_string(), 1), ("hello-file".to_string(), 1)],
        "each trial of iteration 1 finished once"
    );
    // hello-file ran twice in all: iteration 1 (before the kill) and the final evaluation.
    assert_eq!(
        count(&log, "code:hello-file:0"),
        2,
        "{:?}",
        log.lock().unwrap()
    );
    assert_eq!(
        count(&log, "debugger:hello-file"),
        1,
        "report kept on resume"
    );
    assert_eq!(count(&log, "debugger:fix-sum"), 1);
    // The debugger's cost survives the resume: the kept report's call (before the kill) and
    // fix-sum's, 10 prompt tokens each (the server's usage), each counted once.
    let s = json_file(
        &ahe_rundir::RunDir::new(&run)
            .iteration(1)
            .eval()
            .scores_path(),
    );
    assert_eq!(s["meta"]["roles"]["debugger"]["input_tokens"], 20, "{s}");
}

/// Assistant events (model calls) in a trace.
fn calls_in(trace: &Path) -> u64 {
    std::fs::read_to_string(trace)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"event\":\"assistant\""))
        .count() as u64
}

#[test]
fn killed_during_the_overview_the_resumed_run_counts_every_overview_call_once() {
    let d = tempfile::tempdir().unwrap();
    // Every code agent gives up at once; each debugger report is long enough to be a part of
    // its own for the overview (map–reduce: two parts, then the merge), whose calls take 1 s.
    let server = TestServer::start_dynamic(|body, _| {
        let sys = system_prompt(body);
        if sys.contains("writing the benchmark overview")
            || sys.contains("merging partial benchmark overviews")
        {
            return ScriptedReply::text("{\"patterns\": []}").with_delay(1000);
        }
        if sys.starts_with("You are the Debugger") {
            let long = "The agent stopped at once without looking at the task. ".repeat(20);
            return ScriptedReply::text(&format!("## Failure summary\n{long}\n"));
        }
        ScriptedReply::text("done")
    });
    let cfg = config(d.path(), &server.base_url());
    let cfg_text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[evolve]\n", "[evolve]\noverview_context_chars = 1000\n");
    std::fs::write(&cfg, cfg_text).unwrap();
    let runs = d.path().join("runs");
    let run = runs.join("ov");
    let it = ahe_rundir::RunDir::new(&run).iteration(1);
    let trace = it.overview_trace();
    let mut child = evolve(&cfg, &runs).spawn().unwrap();
    let t0 = Instant::now();
    // Killed (-9) once the first part's call is done, while the second one's runs.
    while calls_in(&trace) == 0 {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        assert!(t0.elapsed() < Duration::from_secs(90), "no overview call");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!journal(&run)
        .iter()
        .any(|e| e["ev"] == "phase_end" && e["phase"] == "debug"));
    let o = ahe(
        &["evolve", "--resume", run.to_str().unwrap()],
        &[("AHE_OVERLAP_KEY", "sk-test")],
    );
    assert_eq!(o.status.code(), Some(0), "resume: {}", text(&o));
    let calls = calls_in(&trace);
    assert!(
        calls >= 4,
        "{calls}: the resumed overview makes 3 calls, the killed one 1"
    );
    let s = json_file(&it.eval().scores_path());
    assert_eq!(
        s["meta"]["roles"]["overview"]["input_tokens"],
        10 * calls,
        "{s}"
    );
    assert_eq!(s["meta"]["roles"]["debugger"]["input_tokens"], 20, "{s}");
}
