//! Ctrl-C, SIGTERM and SIGHUP stop `ahe evolve` and `ahe eval` the same graceful way: the
//! running trials are abandoned, their local sandboxes torn down, the process exits 1 with
//! "interrupted", and `ahe evolve --resume` then completes the run. A second signal during a
//! stop that waits exits at once.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahe_testsupport::{ScriptedReply, TestServer};
use common::*;
use serde_json::{json, Value};

/// How long a trial's command sleeps while `slow` is set: far longer than the test waits.
const SLEEP_SEC: u32 = 120;

/// A model server: while `slow` is set the code agent's first turn runs `sleep`, otherwise
/// it says "done" at once (as do the debugger and evolve agent).
fn server(slow: Arc<AtomicBool>) -> TestServer {
    let tasks = smoke_tasks();
    TestServer::start_dynamic(
        move |body, _| match (task_of(&tasks, body), shell_tool(body)) {
            (Some(_), Some(shell)) if turns(body) == 0 && slow.load(Ordering::SeqCst) => {
                call(&shell, json!({ "command": format!("sleep {SLEEP_SEC}") }))
            }
            _ => ScriptedReply::text("done"),
        },
    )
}

/// A run config on two smoke tasks, k = 1, one iteration, every role on `base_url`.
fn config(dir: &Path, base_url: &str) -> String {
    let p = dir.join("slow.toml");
    std::fs::write(
        &p,
        format!(
            "extends = \"{}\"\nk = 1\niterations = 1\n[benchmark]\npath = \"benchmarks/smoke\"\n\
             include = [\"hello-file\", \"fix-sum\"]\n[sandbox]\nbackend = \"local\"\n\
             infra_retries = 0\n[evolve]\npreflight = false\n[models.default]\n\
             provider = \"openai\"\nmodel = \"slow-model\"\nbase_url = \"{base_url}\"\n\
             api_key_env = \"AHE_SIGNALS_KEY\"\nbackoff_base_ms = 1\n",
            root().join("configs/base.toml").display()
        ),
    )
    .unwrap();
    p.to_string_lossy().into_owned()
}

/// A private temp dir for the child's sandboxes (so leftovers are easy to see).
fn sandbox_tmp(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let t = dir.join("tmp");
    std::fs::create_dir(&t).unwrap();
    std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o755)).unwrap();
    t
}

/// The local trial dirs under `tmp`.
fn local_sandboxes(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ahe-local-"))
        .collect()
}

/// Waits until both trials are inside their `sleep` (two model calls answered, two
/// sandboxes up), failing after a minute or when the child ends.
fn wait_until_sleeping(child: &mut Child, server: &TestServer, tmp: &Path) {
    let t0 = Instant::now();
    while server.request_count() < 2 || local_sandboxes(tmp).len() < 2 {
        assert!(child.try_wait().unwrap().is_none(), "the child ended early");
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "trials never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The tool call is sent; give the sandbox a moment to start the command.
    std::thread::sleep(Duration::from_millis(500));
}

/// Sends `sig` (INT, TERM, HUP) to the child and collects its exit, stderr and how long it
/// took to stop.
fn interrupt(mut child: Child, sig: &str) -> (Option<i32>, String, Duration) {
    let t0 = Instant::now();
    let ok = Command::new("kill")
        .args(["-s", sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("SIG{sig}: the child did not stop within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = t0.elapsed();
    let o = child.wait_with_output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        took,
    )
}

fn journal(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Starts `ahe evolve` on trials that sleep, sends `sig`, and checks the graceful outcome;
/// then resumes the run to its end.
fn evolve_stops_gracefully_on(sig: &str, label: &str) {
    let d = tempfile::tempdir().unwrap();
    let slow = Arc::new(AtomicBool::new(true));
    let server = server(slow.clone());
    let cfg = config(d.path(), &server.base_url());
    let tmp = sandbox_tmp(d.path());
    let runs = d.path().join("runs");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(["evolve", "--config", &cfg, "--name", "sig", "--runs-dir"])
        .arg(&runs)
        .env("TMPDIR", &tmp)
        .env("AHE_SIGNALS_KEY", "sk-test")
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_sleeping(&mut child, &server, &tmp);
    let (code, stderr, took) = interrupt(child, sig);
    assert_eq!(
        code,
        Some(1),
        "SIG{sig} ends the run as a failure, not a kill: {stderr}"
    );
    assert!(
        stderr.contains(&format!("interrupted ({label}): stopping")),
        "{stderr}"
    );
    assert!(
        stderr.contains("resume with: ahe evolve --resume"),
        "{stderr}"
    );
    assert!(
        took < Duration::from_secs(SLEEP_SEC as u64 / 2),
        "stopped in {took:?}: the sleeping trials were not abandoned"
    );
    assert_eq!(
        local_sandboxes(&tmp),
        Vec::<String>::new(),
        "SIG{sig}: every local sandbox is torn down"
    );
    let run = runs.join("sig");
    let before = journal(&run);
    assert!(
        before
            .iter()
            .all(|e| e["ev"] != "trial_done" && e["ev"] != "run_end"),
        "no trial finished, the run did not end: {before:?}"
    );

    slow.store(false, Ordering::SeqCst);
    let o = ahe(
        &["evolve", "--resume", run.to_str().unwrap()],
        &[
            ("TMPDIR", tmp.to_str().unwrap()),
            ("AHE_SIGNALS_KEY", "sk-test"),
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "resume after SIG{sig}: {}",
        text(&o)
    );
    let after = journal(&run);
    let done = after.iter().filter(|e| e["ev"] == "trial_done").count();
    assert_eq!(done, 2 * 2, "both tasks in iterations 1 and 2: {after:?}");
    assert_eq!(after.last().unwrap()["ev"], "run_end");
}

#[test]
fn ctrl_c_stops_evolve_gracefully_and_resume_completes() {
    evolve_stops_gracefully_on("INT", "Ctrl-C");
}

#[test]
fn sigterm_stops_evolve_like_ctrl_c_and_resume_completes() {
    evolve_stops_gracefully_on("TERM", "SIGTERM");
}

#[test]
fn sighup_stops_evolve_like_ctrl_c_and_resume_completes() {
    evolve_stops_gracefully_on("HUP", "SIGHUP");
}

#[test]
fn sigterm_stops_eval_gracefully_and_tears_down_its_sandboxes() {
    let d = tempfile::tempdir().unwrap();
    let server = server(Arc::new(AtomicBool::new(true)));
    let cfg = config(d.path(), &server.base_url());
    let tmp = sandbox_tmp(d.path());
    let out = d.path().join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args([
            "eval",
            "--harness",
            "harness-seed",
            "--benchmark",
            "benchmarks/smoke",
        ])
        .args(["--tasks", "hello-file,fix-sum", "--config", &cfg, "--out"])
        .arg(&out)
        .env("TMPDIR", &tmp)
        .env("AHE_SIGNALS_KEY", "sk-test")
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_sleeping(&mut child, &server, &tmp);
    let (code, stderr, took) = interrupt(child, "TERM");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("interrupted (SIGTERM): stopping trials")
            && stderr.contains("0 of 2 trials finished"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(SLEEP_SEC as u64 / 2), "{took:?}");
    assert_eq!(local_sandboxes(&tmp), Vec::<String>::new());
    assert!(!out.join("scores.json").exists(), "nothing is scored");
}

#[test]
fn a_second_signal_exits_at_once_while_the_graceful_stop_waits_and_the_run_resumes() {
    // The debug phase does not stop for a signal: its model call answers after SLEEP_SEC.
    let slow = Arc::new(AtomicBool::new(true));
    let s2 = slow.clone();
    let server = TestServer::start_dynamic(move |body, _| {
        let reply = ScriptedReply::text("done");
        if system_prompt(body).contains("You are the Debugger") && s2.load(Ordering::SeqCst) {
            reply.with_delay(SLEEP_SEC as u64 * 1000)
        } else {
            reply
        }
    });
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), &server.base_url());
    let tmp = sandbox_tmp(d.path());
    let runs = d.path().join("runs");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(["evolve", "--config", &cfg, "--name", "twice", "--runs-dir"])
        .arg(&runs)
        .env("TMPDIR", &tmp)
        .env("AHE_SIGNALS_KEY", "sk-test")
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    // The debugger's call is under way and the loop is in the debug phase (a debugger can
    // start during the rollout, which a signal stops at once).
    let in_debug = || {
        journal(&runs.join("twice"))
            .iter()
            .any(|e| e["ev"] == "phase_start" && e["phase"] == "debug")
    };
    while !server
        .bodies()
        .iter()
        .any(|b| system_prompt(b).contains("You are the Debugger"))
        || !in_debug()
    {
        assert!(child.try_wait().unwrap().is_none(), "the child ended early");
        assert!(t0.elapsed() < Duration::from_secs(60), "no debugger call");
        std::thread::sleep(Duration::from_millis(100));
    }
    let kill = |pid: u32| {
        let ok = Command::new("kill")
            .args(["-s", "TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    };
    kill(child.id());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the graceful stop waits for the debug phase"
    );
    let (code, stderr, took) = interrupt(child, "TERM");
    assert_eq!(code, Some(128 + 15), "{stderr}");
    assert!(
        stderr.contains("interrupted (SIGTERM): stopping")
            && stderr.contains("interrupted again (SIGTERM): exiting now"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");

    slow.store(false, Ordering::SeqCst);
    let run = runs.join("twice");
    let o = ahe(
        &["evolve", "--resume", run.to_str().unwrap()],
        &[
            ("TMPDIR", tmp.to_str().unwrap()),
            ("AHE_SIGNALS_KEY", "sk-test"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(journal(&run).last().unwrap()["ev"], "run_end");
}

#[test]
fn sighup_with_the_terminal_gone_still_stops_gracefully() {
    // A hung-up terminal fails every write to stderr: the stop must not depend on them.
    let d = tempfile::tempdir().unwrap();
    let slow = Arc::new(AtomicBool::new(true));
    let server = server(slow.clone());
    let cfg = config(d.path(), &server.base_url());
    let tmp = sandbox_tmp(d.path());
    let runs = d.path().join("runs");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(["evolve", "--config", &cfg, "--name", "hup", "--runs-dir"])
        .arg(&runs)
        .env("TMPDIR", &tmp)
        .env("AHE_SIGNALS_KEY", "sk-test")
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_sleeping(&mut child, &server, &tmp);
    drop(child.stderr.take()); // the reading end closes: writes now fail with EPIPE
    let (code, _, took) = interrupt(child, "HUP");
    assert_eq!(
        code,
        Some(1),
        "a failed write must not turn the stop into a panic"
    );
    assert!(took < Duration::from_secs(SLEEP_SEC as u64 / 2), "{took:?}");
    assert_eq!(local_sandboxes(&tmp), Vec::<String>::new());
    slow.store(false, Ordering::SeqCst);
    let run = runs.join("hup");
    let o = ahe(
        &["evolve", "--resume", run.to_str().unwrap()],
        &[
            ("TMPDIR", tmp.to_str().unwrap()),
            ("AHE_SIGNALS_KEY", "sk-test"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
