//! `ahe eval --sandbox docker` end to end, and reaping after `kill -9` of a running eval.
//!
//! Without an engine (or the base image) the tests print a note and pass, except with
//! `CI=true`, where a missing engine or base image is a failure.

mod common;

use common::{docker_ready, root, run as ahe, text};

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ahe_sandbox::docker::DockerBackend;
use serde_json::Value;

/// Serializes the tests that run evals: every `ahe eval --sandbox docker` reaps the
/// containers of dead processes, which would race with the kill test's checks.
static EVALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn evals() -> std::sync::MutexGuard<'static, ()> {
    EVALS.lock().unwrap_or_else(|p| p.into_inner())
}

fn eval_args<'a>(model: &'a str, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "eval",
        "--harness",
        "harness-seed",
        "--benchmark",
        "benchmarks/smoke",
        "--sandbox",
        "docker",
        "--model",
        model,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args
}

fn scores(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("scores.json")).unwrap()).unwrap()
}

/// Ids of the containers (running or not) labelled with run `run`.
fn containers_of(run: &str) -> Vec<String> {
    let o = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=ahe.run={run}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn oracle_passes_and_nop_fails_in_docker() {
    if !docker_ready() {
        return;
    }
    let _serial = evals();
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("oracle");
    let o = ahe(&eval_args("mock:oracle", &out, &["--concurrency", "4"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("on docker sandbox"), "{}", text(&o));
    let s = scores(&out);
    assert_eq!(s["pass_at_1"], 1.0, "{s:#}");
    let tasks = s["tasks"].as_object().unwrap();
    assert_eq!(tasks.len(), 4);
    for (name, t) in tasks {
        assert_eq!(t["status"], "pass", "{name}");
        let dir = out.join(format!("trials/{name}/1"));
        assert!(
            dir.join("verifier/reward.txt").is_file(),
            "{}",
            dir.display()
        );
    }
    assert!(containers_of("oracle").is_empty(), "containers left behind");

    let out = d.path().join("nop");
    let o = ahe(&eval_args("mock:nop", &out, &["--concurrency", "4"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = scores(&out);
    assert_eq!(s["pass_at_1"], 0.0, "{s:#}");
    assert!(containers_of("nop").is_empty(), "containers left behind");
}

/// Starts an eval whose agent sleeps in its container (run name = `name`).
fn spawn_sleeping_eval(dir: &Path, name: &str) -> Child {
    let script = dir.join("sleep.toml");
    std::fs::write(
        &script,
        "[[code_agent]]\ntool = \"$shell\"\nargs = { command = \"sleep 300\" }\n",
    )
    .unwrap();
    let out = dir.join(name);
    let model = format!("mock:script={}", script.display());
    let args = eval_args(&model, &out, &["--tasks", "hello-file"]);
    Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(&args)
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until run `name` has a container; SIGKILLs the eval then (no teardown runs).
fn kill_when_container_exists(child: &mut Child, name: &str) -> Vec<String> {
    let end = Instant::now() + Duration::from_secs(120);
    let ids = loop {
        let ids = containers_of(name);
        if !ids.is_empty() {
            // Let the agent's exec start too.
            std::thread::sleep(Duration::from_millis(500));
            break ids;
        }
        if Instant::now() > end {
            break ids;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!ids.is_empty(), "no container of run {name} appeared");
    ids
}

#[test]
fn killed_eval_leaves_containers_that_reap_removes() {
    if !docker_ready() {
        return;
    }
    let _serial = evals();
    let d = tempfile::tempdir().unwrap();
    let name = format!("reap-cli-{}", std::process::id());
    let mut child = spawn_sleeping_eval(d.path(), &name);
    let ids = kill_when_container_exists(&mut child, &name);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        containers_of(&name),
        ids,
        "the killed eval's container should remain"
    );
    let o = ahe(&["sandbox", "reap"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("removed"), "{}", text(&o));
    assert!(containers_of(&name).is_empty(), "{}", text(&o));

    // A new backend reaps on connect, too.
    let name = format!("reap-connect-{}", std::process::id());
    let mut child = spawn_sleeping_eval(d.path(), &name);
    let ids = kill_when_container_exists(&mut child, &name);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(containers_of(&name), ids);
    // (Not asserting `reaped() >= 1`: another ahe process may have reaped it first.)
    let _b = DockerBackend::connect().unwrap();
    assert!(containers_of(&name).is_empty());
}

#[test]
fn sandbox_docker_without_engine_is_a_clear_error() {
    let o = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(eval_args("mock:nop", Path::new("/tmp/unused-ahe-out"), &[]))
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("no Docker engine answers at unix:///nonexistent/docker.sock")
            && t.contains("--sandbox local"),
        "{t}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(["sandbox", "reap"])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

#[test]
fn auto_picks_docker_when_an_engine_answers_else_local() {
    if !docker_ready() {
        return;
    }
    let _serial = evals();
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("auto");
    let mut args = eval_args("mock:oracle", &out, &["--tasks", "hello-file"]);
    args[6] = "auto";
    let o = ahe(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("sandbox auto: using docker"), "{t}");
    assert!(t.contains("on docker sandbox"), "{t}");
    assert_eq!(scores(&out)["pass_at_1"], 1.0);

    let out = d.path().join("auto-local");
    let mut args = eval_args("mock:oracle", &out, &["--tasks", "hello-file"]);
    args[6] = "auto";
    let o = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(&args)
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .current_dir(root())
        .output()
        .unwrap();
    let t = text(&o);
    assert!(
        t.contains("sandbox auto: using local (no Docker engine answers at unix:///nonexistent"),
        "{t}"
    );
    assert!(t.contains("on local sandbox"), "{t}");
}
