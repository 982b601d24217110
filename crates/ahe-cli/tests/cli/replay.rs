//! Record/replay of a whole `ahe evolve` run: a 2-iteration run whose three roles use the
//! `openai` provider against a local scripted server is recorded (`cache = "record"`), the
//! server is stopped, and the run is replayed (`cache = "replay"`) under another name: the
//! change manifests and scores are identical (after removing wall-clock fields).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use ahe_testsupport::{ScriptedReply, TestServer};
use common::*;
use serde_json::{json, Value};

const REPORT: &str = "## Failure summary\nThe agent answered without checking the data.\n\
## Root cause\nNothing in the harness says how the data is structured.\n\
## Harness-level fix ideas\nA memory note (memory).";

const HINT1: &str =
    "- HINT-LEVEL-FIELD: when counting log lines by level, match the level field.\n";
const HINT2: &str = "- HINT-FIX-SIGN: check the sign of accumulators in scripts you fix.\n";

/// The evolve agent: iteration N writes memory/MEMORY.md, then submits one change.
fn evolve_reply(body: &Value) -> ScriptedReply {
    let u = user_text(body);
    let iteration = if u.contains("# Iteration 1\n") { 1 } else { 2 };
    let (content, change) = if iteration == 1 {
        (
            HINT1.to_string(),
            json!({"id": "c1", "type": "new", "description": "Memory: count by the level field",
                   "files": ["memory/MEMORY.md"], "failure_pattern": "substring counts",
                   "root_cause": "no hint about log structure", "predicted_fixes": ["count-errors"],
                   "risk_tasks": [], "component": "memory",
                   "why_this_component": "a fact needed in every task"}),
        )
    } else {
        (
            format!("{HINT1}{HINT2}"),
            json!({"id": "c2", "type": "improvement", "description": "Memory: check accumulator signs",
                   "files": ["memory/MEMORY.md"], "failure_pattern": "wrong arithmetic",
                   "root_cause": "sum.sh subtracts", "predicted_fixes": ["fix-sum"],
                   "risk_tasks": ["count-errors"], "component": "memory",
                   "why_this_component": "a general debugging habit"}),
        )
    };
    match turns(body) {
        0 => call(
            "write_file",
            json!({"path": "harness/memory/MEMORY.md", "content": content}),
        ),
        1 => call("submit_manifest", json!({ "changes": [change] })),
        _ => ScriptedReply::text("done"),
    }
}

fn start_server() -> TestServer {
    let tasks = smoke_tasks();
    TestServer::start_dynamic(move |body, _| {
        let sys = system_prompt(body);
        if sys.contains("You are the Evolve agent") {
            evolve_reply(body)
        } else if sys.contains("You are the Debugger") {
            ScriptedReply::text(REPORT)
        } else {
            code_agent_reply(&tasks, body, |task| match task {
                "hello-file" => true,
                "count-errors" | "config-port" => sys.contains("HINT-LEVEL-FIELD"),
                "fix-sum" => sys.contains("HINT-FIX-SIGN"),
                _ => false,
            })
        }
    })
}

fn config(dir: &Path, name: &str, base_url: &str, cache: &str, cache_dir: Option<&Path>) -> String {
    let cache_dir = cache_dir
        .map(|d| format!("cache_dir = \"{}\"\n", d.display()))
        .unwrap_or_default();
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(
        &p,
        format!(
            r#"k = 2
iterations = 2
harness = "harness-seed"

[benchmark]
path = "benchmarks/smoke"

[sandbox]
backend = "local"
concurrency = 4
infra_retries = 0

[holdout]
tasks = ["config-port"]

[evolve]
rollback = "auto"
debugger_max_turns = 4
evolve_max_turns = 6

[models.default]
provider = "openai"
model = "replay-test-model"
base_url = "{base_url}"
api_key_env = "AHE_REPLAY_TEST_KEY"
price_input_per_mtok = 1.0
price_output_per_mtok = 2.0
timeout_sec = 30.0
backoff_base_ms = 10
backoff_max_ms = 200
cache = "{cache}"
{cache_dir}"#
        ),
    )
    .unwrap();
    p.to_string_lossy().into_owned()
}

/// `ahe evolve` without the preflight check, whose one-token probe would be one more
/// request than the run's own calls that this test counts.
fn evolve(cfg: &str, runs: &Path, name: &str) {
    let o = ahe(
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
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
}

/// Removes what legitimately differs between two executions of the same run: wall-clock
/// durations, and the facts that name this run (its harness path, and git commit ids,
/// which hash the commit time).
fn normalise_scores(mut v: Value) -> Value {
    v["durations"] = Value::Null;
    for t in v["tasks"].as_object_mut().unwrap().values_mut() {
        for tr in t["trials"].as_array_mut().unwrap() {
            tr["duration_sec"] = Value::Null;
        }
    }
    let meta = v["meta"].as_object_mut().unwrap();
    for k in ["harness", "evaluated_commit"] {
        assert!(meta.remove(k).is_some(), "meta.{k} is expected");
    }
    v
}

/// `iterations/NNN/<rel>` of a run, by iteration.
fn files(run: &Path, rel: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(run.join("iterations")).unwrap().flatten() {
        let p = e.path().join(rel);
        if p.is_file() {
            out.insert(
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            );
        }
    }
    out
}

#[test]
fn recorded_evolve_run_replays_identically_without_network() {
    let d = tempfile::tempdir().unwrap();
    let runs = d.path().join("runs");
    let server = start_server();
    let url = server.base_url();
    let rec_cfg = config(d.path(), "record", &url, "record", None);
    evolve(&rec_cfg, &runs, "rec");
    let recorded_requests = server.request_count();
    drop(server);
    let rec = runs.join("rec");
    let cache = rec.join("model-cache");
    assert!(
        cache.is_dir(),
        "record mode stores under the run's model-cache/"
    );
    let stored: usize = walk(&cache);
    assert!(stored > 10, "{stored} responses stored");
    assert_eq!(
        stored, recorded_requests,
        "one entry per call, repeats included"
    );
    let frozen = std::fs::read_to_string(rec.join("run.toml")).unwrap();
    assert!(frozen.contains("cache = \"record\""), "{frozen}");

    // The server is gone: the replay can only answer from the store.
    let rep_cfg = config(d.path(), "replay", &url, "replay", Some(&cache));
    evolve(&rep_cfg, &runs, "rep");
    let rep = runs.join("rep");
    assert!(std::fs::read_to_string(rep.join("run.toml"))
        .unwrap()
        .contains("cache = \"replay\""));
    assert_eq!(walk(&cache), stored, "replay stores nothing");

    // The recorded run did what the script says: iteration 1 evaluates the seed,
    // c1 fixes count-errors (and the held-out config-port), c2 fixes fix-sum.
    let s = |run: &Path, t: u32| json_file(&run.join(format!("iterations/{t:03}/scores.json")));
    let status = |v: &Value, task: &str| v["tasks"][task]["status"].as_str().unwrap().to_string();
    let r1 = s(&rec, 1);
    assert_eq!(status(&r1, "hello-file"), "pass");
    assert_eq!(status(&r1, "count-errors"), "fail");
    assert_eq!(status(&s(&rec, 2), "count-errors"), "pass");
    assert_eq!(status(&s(&rec, 3), "fix-sum"), "pass");
    assert_eq!(s(&rec, 3)["pass_at_1"], 1.0);

    let manifests = (
        files(&rec, "evolve/manifest.json"),
        files(&rep, "evolve/manifest.json"),
    );
    assert_eq!(manifests.0.keys().collect::<Vec<_>>(), ["001", "002"]);
    // Identical but for each change's commit id (ids hash the commit time): its tree is.
    let by_tree = |run: &Path, bytes: &[u8]| -> String {
        let mut m: Value = serde_json::from_slice(bytes).unwrap();
        for c in m["changes"].as_array_mut().unwrap() {
            let id = c["commit"].as_str().expect("each change names its commit");
            c["commit"] = json!(git(run, &["rev-parse", &format!("{id}^{{tree}}")]));
        }
        serde_json::to_string_pretty(&m).unwrap()
    };
    for (it, bytes) in &manifests.0 {
        assert_eq!(
            by_tree(&rec, bytes),
            by_tree(&rep, &manifests.1[it]),
            "iteration {it}: manifests differ"
        );
    }
    let m1: Value = serde_json::from_slice(&manifests.0["001"]).unwrap();
    assert_eq!(m1["changes"][0]["id"], "c1");

    let (sr, sp) = (files(&rec, "scores.json"), files(&rep, "scores.json"));
    assert_eq!(sr.keys().collect::<Vec<_>>(), ["001", "002", "003"]);
    assert_eq!(sp.keys().collect::<Vec<_>>(), ["001", "002", "003"]);
    for (it, bytes) in &sr {
        let a = normalise_scores(serde_json::from_slice(bytes).unwrap());
        let b = normalise_scores(serde_json::from_slice(&sp[it]).unwrap());
        assert!(b["meta"]["model_calls"].as_u64().unwrap() > 0);
        assert_eq!(
            b["meta"]["model_faults"],
            json!({}),
            "iteration {it}: no network, no faults"
        );
        assert_eq!(
            serde_json::to_string_pretty(&a).unwrap(),
            serde_json::to_string_pretty(&b).unwrap(),
            "iteration {it}: scores differ"
        );
    }
    // Commit ids differ (they hash the commit time), the committed trees do not.
    for tag in ["iter-000", "iter-001", "iter-002", "best"] {
        let spec = format!("{tag}^{{tree}}");
        assert_eq!(
            git(&rec, &["rev-parse", &spec]),
            git(&rep, &["rev-parse", &spec])
        );
    }

    // A request that was never recorded stops the run and names the hash and the store.
    let miss_cfg = config(d.path(), "miss", &url, "replay", Some(&cache));
    let text_cfg = std::fs::read_to_string(&miss_cfg)
        .unwrap()
        .replace("replay-test-model", "another-model");
    std::fs::write(&miss_cfg, text_cfg).unwrap();
    let o = ahe(
        &[
            "evolve",
            "--config",
            &miss_cfg,
            "--name",
            "miss",
            "--runs-dir",
            runs.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("no recorded response for request") && t.contains(&cache.display().to_string()),
        "{t}"
    );
    assert!(
        !runs.join("miss/iterations/001/scores.json").exists(),
        "nothing scored"
    );
}

fn git(run: &Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git")
        .args(args)
        .current_dir(run.join("harness"))
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn walk(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_dir() {
            n += walk(&e.path());
        } else if e.path().extension().is_some_and(|x| x == "json") {
            n += 1;
        }
    }
    n
}
