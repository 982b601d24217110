//! Model error classes end to end, through the `ahe` binary and a real local HTTP server
//! that behaves like the mock oracle (turn 0 runs the task's solve.sh, then "done"):
//! injected 429/500/timeouts/truncated JSON are retried and counted without changing a
//! single score; a 401 stops the run naming the key's env var and scores nothing; a spent
//! budget refuses calls (infra_error, never fail) and stops the run gracefully.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ahe_testsupport::{ScriptedReply, TestServer};
use common::*;
use serde_json::{json, Value};

/// Seed of the fault schedule (request `i` is faulty when 5 divides `mix(i ^ SEED)`).
const SEED: u64 = 4;
/// Retry-After sent with every injected 429, in seconds.
const RETRY_AFTER_SEC: f64 = 0.3;
/// The client's per-attempt timeout (config) and the delay of an injected slow reply.
const TIMEOUT_SEC: f64 = 2.0;
const SLOW_MS: u64 = 5_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    RateLimit,
    ServerError,
    Slow,
    Truncated,
}

/// The fault injected into request `i` (20% of indices; kinds take turns).
fn fault(i: usize) -> Option<Fault> {
    let faulty = |j: usize| mix(j as u64 ^ SEED).is_multiple_of(5);
    if !faulty(i) {
        return None;
    }
    let before = (0..i).filter(|&j| faulty(j)).count();
    Some(
        [
            Fault::RateLimit,
            Fault::ServerError,
            Fault::Slow,
            Fault::Truncated,
        ][before % 4],
    )
}

/// One request as the server saw it: arrival time, body, injected fault.
type Log = Arc<Mutex<Vec<(Instant, Value, Option<Fault>)>>>;

fn faulty_oracle_server() -> (TestServer, Log) {
    let tasks = smoke_tasks();
    let log: Log = Arc::default();
    let l2 = log.clone();
    let server = TestServer::start_dynamic(move |body, i| {
        let f = fault(i);
        l2.lock().unwrap().push((Instant::now(), body.clone(), f));
        let good = code_agent_reply(&tasks, body, |_| true);
        match f {
            None => good,
            Some(Fault::RateLimit) => {
                ScriptedReply::status(429).with_header("retry-after", &RETRY_AFTER_SEC.to_string())
            }
            Some(Fault::ServerError) => ScriptedReply::status(500),
            Some(Fault::Slow) => good.with_delay(SLOW_MS),
            Some(Fault::Truncated) => {
                let half = good.body.len() / 2;
                good.truncated(half)
            }
        }
    });
    (server, log)
}

fn write_config(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, body).unwrap();
    p.to_string_lossy().into_owned()
}

fn model_section(base_url: &str, key_env: &str) -> String {
    format!(
        r#"provider = "openai"
model = "fault-test-model"
base_url = "{base_url}"
api_key_env = "{key_env}"
timeout_sec = {TIMEOUT_SEC}
backoff_base_ms = 10
backoff_max_ms = 1000
max_retries = 6
max_malformed_retries = 4
"#
    )
}

fn eval_config(dir: &Path, base_url: &str, key_env: &str, k: u32) -> String {
    write_config(
        dir,
        "eval",
        &format!(
            "k = {k}\n[benchmark]\npath = \"benchmarks/smoke\"\n[sandbox]\nbackend = \"local\"\n\
             concurrency = 4\ninfra_retries = 0\n[models.default]\n{}",
            model_section(base_url, key_env)
        ),
    )
}

fn eval(cfg: &str, out: &Path, envs: &[(&str, &str)]) -> std::process::Output {
    ahe(
        &[
            "eval",
            "--harness",
            "harness-seed",
            "--benchmark",
            "benchmarks/smoke",
            "--config",
            cfg,
            "--out",
            out.to_str().unwrap(),
        ],
        envs,
    )
}

/// Every `trials/*/*/result.json` under `dir`.
fn results(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(dir.join("trials")) else {
        return out;
    };
    for t in tasks.flatten() {
        for a in std::fs::read_dir(t.path()).unwrap().flatten() {
            let p = a.path().join("result.json");
            if p.is_file() {
                out.push(json_file(&p));
            }
        }
    }
    out
}

#[test]
fn injected_faults_are_retried_counted_and_change_no_score() {
    let d = tempfile::tempdir().unwrap();
    let (server, log) = faulty_oracle_server();
    let cfg = eval_config(d.path(), &server.base_url(), "AHE_FAULTS_TEST_KEY", 2);
    let out = d.path().join("out");
    let o = eval(&cfg, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = json_file(&out.join("scores.json"));

    // Scored exactly as without faults: every task passes on its first attempt.
    assert_eq!(s["pass_at_1"], 1.0, "{}", text(&o));
    assert_eq!(s["statuses"], json!({"pass": 8}));
    for (name, t) in s["tasks"].as_object().unwrap() {
        assert_eq!(t["status"], "pass", "{name}");
    }
    for r in results(&out) {
        assert_eq!(r["infra_retries"], 0, "{}", r["task"]);
    }

    // The client saw exactly what the server injected.
    let log = log.lock().unwrap();
    let mut injected: BTreeMap<Fault, u64> = BTreeMap::new();
    for (_, _, f) in log.iter() {
        if let Some(f) = f {
            *injected.entry(*f).or_default() += 1;
        }
    }
    let n = |f: Fault| injected.get(&f).copied().unwrap_or(0);
    for f in [
        Fault::RateLimit,
        Fault::ServerError,
        Fault::Slow,
        Fault::Truncated,
    ] {
        assert!(n(f) >= 1, "the schedule injects every kind: {injected:?}");
    }
    let transient = n(Fault::RateLimit) + n(Fault::ServerError) + n(Fault::Slow);
    let malformed = n(Fault::Truncated);
    let meta = &s["meta"];
    assert_eq!(
        meta["model_faults"],
        json!({"transient": transient, "malformed": malformed}),
        "injected: {injected:?}"
    );
    assert_eq!(meta["model_retries"], transient + malformed);
    assert_eq!(meta["model_failed_calls"], 0);
    assert_eq!(
        meta["model_calls"].as_u64().unwrap() + transient + malformed,
        log.len() as u64
    );
    eprintln!(
        "fault injection: {} requests, {injected:?} → model_faults {}",
        log.len(),
        meta["model_faults"]
    );

    // Retry-After is honoured: the client's retry log gives the 429's retry its delay.
    let stderr = strip_ansi(&String::from_utf8_lossy(&o.stderr));
    let retries: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("retrying") && l.contains("HTTP 429"))
        .collect();
    assert_eq!(retries.len() as u64, n(Fault::RateLimit), "{stderr}");
    let want = format!("delay_ms={}", (RETRY_AFTER_SEC * 1000.0) as u64);
    for l in retries {
        assert!(l.contains(&want), "{l}");
    }
}

/// The text without terminal colour codes (`ESC [ ... m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn unauthorized_stops_the_run_naming_the_env_var_and_fails_no_trial() {
    let d = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_fallback(vec![], ScriptedReply::status(401));
    let cfg = eval_config(d.path(), &server.base_url(), "AHE_FAULTS_401_KEY", 1);
    let out = d.path().join("out");
    let o = eval(
        &cfg,
        &out,
        &[("AHE_FAULTS_401_KEY", "sk-fault-test-secret")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("AHE_FAULTS_401_KEY"), "{t}");
    assert!(
        !t.contains("sk-fault-test-secret"),
        "the key never appears: {t}"
    );
    assert!(!out.join("scores.json").exists(), "nothing is scored");
    for r in results(&out) {
        assert_eq!(r["status"], "infra_error", "{r}");
        assert_eq!(r["agent_end"], "fatal", "{r}");
        assert!(r["error"].as_str().unwrap().contains("AHE_FAULTS_401_KEY"));
    }
    // Each trial asked once: a permanent error is neither retried by the client nor
    // re-run as an infra error.
    assert!(server.request_count() <= 4, "{}", server.request_count());
}

/// `ahe evolve` without the preflight `ahe check`: these tests are about faults met during
/// the run (the check would catch the 401 before it starts, and spend a scripted reply).
fn evolve(cfg: &str, runs: &Path, name: &str, envs: &[(&str, &str)]) -> std::process::Output {
    ahe(
        &[
            "evolve",
            "--no-check",
            "--config",
            cfg,
            "--name",
            name,
            "--runs-dir",
            runs.to_str().unwrap(),
        ],
        envs,
    )
}

#[test]
fn unauthorized_evolve_model_stops_the_run() {
    let d = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_fallback(vec![], ScriptedReply::status(401));
    let cfg = write_config(
        d.path(),
        "evolve401",
        &format!(
            "extends = \"{}\"\nk = 1\niterations = 1\n[models.evolve]\n{}",
            root().join("configs/smoke-mock.toml").display(),
            model_section(&server.base_url(), "AHE_FAULTS_EVOLVE_KEY")
        ),
    );
    let o = evolve(&cfg, d.path(), "e401", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("evolve model cannot be used")
            && t.contains("AHE_FAULTS_EVOLVE_KEY (it is not set)"),
        "{t}"
    );
    assert_eq!(server.request_count(), 1);
    let journal = std::fs::read_to_string(d.path().join("e401/journal.jsonl")).unwrap();
    assert!(
        !journal.contains("run_end"),
        "the run did not finish: {journal}"
    );
}

#[test]
fn spent_budget_refuses_calls_as_infra_errors_and_stops_the_run() {
    let d = tempfile::tempdir().unwrap();
    let tasks = smoke_tasks();
    // Every call costs 10 prompt tokens × $1000/M + 5 completion tokens × $1000/M = $0.015.
    let server = TestServer::start_dynamic(move |body, _| code_agent_reply(&tasks, body, |_| true));
    let cfg = write_config(
        d.path(),
        "budget",
        &format!(
            "k = 1\niterations = 2\n[benchmark]\npath = \"benchmarks/smoke\"\n[sandbox]\n\
             backend = \"local\"\nconcurrency = 4\n[evolve]\nbudget_usd = 0.05\n\
             [models.default]\n{}price_input_per_mtok = 1000.0\nprice_output_per_mtok = 1000.0\n",
            model_section(&server.base_url(), "AHE_FAULTS_BUDGET_KEY")
        ),
    );
    let o = evolve(&cfg, d.path(), "b", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let it1 = d.path().join("b/iterations/001");
    let s = json_file(&it1.join("scores.json"));
    // A full rollout needs 8 calls; the budget covers at most 3 plus those already
    // checked when the third was charged (4 trials run at once).
    let requests = server.request_count();
    assert!(
        (1..8).contains(&requests),
        "{requests} calls reached the server"
    );
    let all = results(&it1);
    assert_eq!(all.len(), 4);
    let refused: Vec<&Value> = all
        .iter()
        .filter(|r| r["error"].as_str().is_some_and(|e| e.contains("budget")))
        .collect();
    assert!(!refused.is_empty(), "{all:?}");
    for r in &all {
        assert_ne!(r["status"], "fail", "{r}");
    }
    for r in &refused {
        assert_eq!(r["status"], "infra_error", "{r}");
        assert_eq!(r["agent_end"], "infra_error", "{r}");
    }
    assert!(s["meta"]["model_faults"]["budget"].as_u64().unwrap() >= 1);
    let journal = std::fs::read_to_string(d.path().join("b/journal.jsonl")).unwrap();
    assert!(
        journal.contains("budget reached") && journal.contains("\"reason\":\"budget\""),
        "{journal}"
    );
    assert!(
        !it1.join("evolve").exists(),
        "no evolve step after the budget is spent"
    );
    assert!(!d.path().join("b/iterations/002").exists());
}

#[test]
fn budget_spent_by_the_evolve_agent_stops_the_run_after_the_commit() {
    let d = tempfile::tempdir().unwrap();
    // Every evolve call costs $0.015 and edits memory; the budget allows only the first.
    let server = TestServer::start_dynamic(|_, _| {
        call(
            "write_file",
            json!({"path": "harness/memory/MEMORY.md", "content": "- a note\n"}),
        )
    });
    let cfg = write_config(
        d.path(),
        "evolve-budget",
        &format!(
            "extends = \"{}\"\nk = 1\niterations = 2\n[evolve]\nbudget_usd = 0.01\n\
             [models.evolve]\n{}price_input_per_mtok = 1000.0\nprice_output_per_mtok = 1000.0\n",
            root().join("configs/smoke-mock.toml").display(),
            model_section(&server.base_url(), "AHE_FAULTS_EVOLVE_BUDGET_KEY")
        ),
    );
    let o = evolve(&cfg, d.path(), "eb", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        server.request_count(),
        1,
        "the second evolve call was refused"
    );
    let run = d.path().join("eb");
    let trace = std::fs::read_to_string(run.join("iterations/001/evolve/trace.jsonl")).unwrap();
    assert!(trace.contains("budget exhausted"), "{trace}");
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    assert!(
        journal.contains("budget reached during the evolve phase")
            && journal.contains("\"reason\":\"budget\""),
        "{journal}"
    );
    assert!(
        journal.contains("submitted no manifest"),
        "unsubmitted edits are reverted"
    );
    assert!(
        run.join("iterations/001/evolve/summary.md").is_file(),
        "committed"
    );
    assert!(!run.join("iterations/002").exists());
}
