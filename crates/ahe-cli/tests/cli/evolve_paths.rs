//! Paths of `ahe evolve` the demo run does not take: the pre-flight revert of an edit that
//! breaks the code agent's model, `rollback = "agent"` (no automatic rollback; the agent is
//! told), and what the debug phase writes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use ahe_testsupport::{ScriptedReply, TestServer};
use common::{ahe, json_file, root, system_prompt, text};
use serde_json::Value;

fn evolve(cfg: &Path, runs: &Path, name: &str) -> std::process::Output {
    let args = [
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--name",
        name,
        "--runs-dir",
        runs.to_str().unwrap(),
    ];
    ahe(&args, &[])
}

fn git(run: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(args)
        .current_dir(run.join("harness"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn journal(run: &Path) -> String {
    std::fs::read_to_string(run.join("journal.jsonl")).unwrap()
}

/// The text of every user message the evolve agent of iteration `t` was given.
fn evolve_prompt(run: &Path, t: u32) -> String {
    std::fs::read_to_string(run.join(format!("iterations/{t:03}/evolve/trace.jsonl")))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "message" && e["role"] == "user")
        .map(|e| e["content"].as_str().unwrap_or("").to_string())
        .collect()
}

const BREAKING_EVOLVE: &str = r###"[[debugger]]
content = "## Root cause\nNone found."

[[evolve]]
tool = "write_file"
args = { path = "harness/memory/MEMORY.md", content = "- BREAK-THE-MODEL: a line this model's server cannot take.\n" }

[[evolve]]
tool = "submit_manifest"
[evolve.args]
changes = [
  { id = "c1", type = "new", description = "Memory: a line that breaks the model", files = ["memory/MEMORY.md"], predicted_fixes = ["hello-file"], component = "memory", why_this_component = "test" },
]
"###;

#[test]
fn an_edit_whose_preflight_trial_hits_an_infra_error_is_reverted() {
    // The code agent's model answers 500 (an infra error after retries) once the system
    // prompt holds the new memory line, and "done" otherwise.
    let server = TestServer::start_dynamic(|body, _| {
        if system_prompt(body).contains("BREAK-THE-MODEL") {
            ScriptedReply::status(500)
        } else {
            ScriptedReply::text("done")
        }
    });
    let d = tempfile::tempdir().unwrap();
    let script = d.path().join("script.toml");
    std::fs::write(&script, BREAKING_EVOLVE).unwrap();
    let cfg = d.path().join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = \"{base}\"\nk = 1\niterations = 1\n[benchmark]\npath = \"benchmarks/smoke\"\n\
             include = [\"hello-file\"]\n[sandbox]\nbackend = \"local\"\ninfra_retries = 0\n\
             [evolve]\npreflight = true\n\
             [models.default]\nprovider = \"mock\"\nmodel = \"script\"\nscript = \"{script}\"\n\
             [models.code_agent]\nprovider = \"openai\"\nmodel = \"breakable\"\nbase_url = \"{url}\"\n\
             api_key_env = \"AHE_T_PREFLIGHT_KEY\"\nmax_retries = 1\nbackoff_base_ms = 1\nbackoff_max_ms = 2\n",
            base = root().join("configs/base.toml").display(),
            script = script.display(),
            url = server.base_url(),
        ),
    )
    .unwrap();
    let runs = d.path().join("runs");
    let o = evolve(&cfg, &runs, "pf");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = runs.join("pf");
    // The pre-flight trial ran and met the infra error ...
    let pf = json_file(&run.join("iterations/001/evolve/preflight/scores.json"));
    assert_eq!(pf["statuses"]["infra_error"], 1, "{pf}");
    // ... so the edit is gone from the commit and from the manifest, and the journal says why.
    assert!(!git(&run, &["show", "iter-001:memory/MEMORY.md"]).contains("BREAK-THE-MODEL"));
    let m = json_file(&run.join("iterations/001/evolve/manifest.json"));
    assert_eq!(m["changes"].as_array().unwrap().len(), 0, "{m}");
    // No stale commit of the reverted change: iteration 1 is one commit, the seed's tree.
    assert_eq!(
        git(&run, &["rev-list", "--count", "iter-000..iter-001"]),
        "1"
    );
    assert_eq!(
        git(&run, &["rev-parse", "iter-001^{tree}"]),
        git(&run, &["rev-parse", "iter-000^{tree}"])
    );
    assert!(
        journal(&run).contains("pre-flight trial of hello-file hit an infra error"),
        "{}",
        journal(&run)
    );
    // The final evaluation ran the reverted harness: no infra error there.
    let s2 = json_file(&run.join("iterations/002/scores.json"));
    assert!(s2["statuses"].get("infra_error").is_none(), "{s2}");
}

/// The demo config with `rollback = "agent"` and two iterations, in `d`.
fn agent_rollback_config(d: &Path) -> PathBuf {
    let cfg = d.join("agent-rollback.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = \"{}\"\niterations = 2\n[evolve]\nrollback = \"agent\"\n",
            root().join("configs/smoke-mock.toml").display()
        ),
    )
    .unwrap();
    cfg
}

#[test]
fn with_rollback_agent_a_harmful_change_stays_and_the_agent_is_told() {
    let d = tempfile::tempdir().unwrap();
    let cfg = agent_rollback_config(d.path());
    let o = evolve(&cfg, &d.path().join("runs"), "ra");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = d.path().join("runs/ra");
    // c2 was judged HARMFUL in iteration 2 ...
    let e2 = json_file(&run.join("iterations/002/change_evaluation.json"));
    let c2 = e2["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "c2")
        .unwrap();
    assert_eq!(c2["verdict"], "HARMFUL");
    // ... but nothing rolled it back: no rollback change, its file still in iter-002.
    let m2 = json_file(&run.join("iterations/002/evolve/manifest.json"));
    assert!(m2["changes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["type"] != "rollback"));
    assert!(git(&run, &["ls-tree", "-r", "--name-only", "iter-002"]).contains("memory/style.md"));
    assert!(!journal(&run).contains("auto-rollback"));
    // The agent was told, in words: the verdict and the realized risk.
    let prompt = evolve_prompt(&run, 2);
    assert!(prompt.contains("- c2 [HARMFUL]"), "{prompt}");
    assert!(prompt.contains("realized hello-file"), "{prompt}");
    assert!(!prompt.contains("## Automatic rollbacks"), "{prompt}");

    // The debug phase of iteration 1: one report per visible task, the LLM's analysis in
    // each failing task's report, and an overview that names every failing task's cause.
    let analysis = run.join("iterations/001/analysis");
    let detail = std::fs::read_to_string(analysis.join("detail/count-errors.md")).unwrap();
    assert!(detail.starts_with("# `count-errors`"), "{detail}");
    assert!(detail.contains("## Debugger analysis"), "{detail}");
    assert!(
        detail.contains("Nothing in the harness tells the agent to parse fields"),
        "{detail}"
    );
    let overview = std::fs::read_to_string(analysis.join("overview.md")).unwrap();
    assert!(overview.starts_with("# Debugger analysis overview — iteration 1"));
    for task in ["count-errors", "fix-sum"] {
        assert!(overview.contains(task), "{task} missing from:\n{overview}");
    }
    assert!(!overview.contains("config-port"), "held out: {overview}");
    let reports: Vec<String> = std::fs::read_dir(analysis.join("detail"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!reports.iter().any(|r| r.starts_with("config-port")));
}

#[test]
fn a_run_killed_before_its_seed_commit_resumes_from_the_seed() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("one.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = \"{}\"\niterations = 1\n[benchmark]\ninclude = [\"hello-file\", \"fix-sum\"]\n[holdout]\ntasks = []\n",
            root().join("configs/smoke-mock.toml").display()
        ),
    )
    .unwrap();
    let runs = d.path().join("runs");
    let o = evolve(&cfg, &runs, "early");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Make it look like a kill -9 between `git init` and the seed's commit: an unborn
    // repository, no journal, no iterations.
    let run = runs.join("early");
    for p in ["harness", "iterations"] {
        std::fs::remove_dir_all(run.join(p)).unwrap();
    }
    std::fs::remove_file(run.join("journal.jsonl")).unwrap();
    std::fs::create_dir_all(run.join("harness")).unwrap();
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(run.join("harness"))
        .status()
        .unwrap();
    assert!(init.success());
    let o = ahe(&["evolve", "--resume", run.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(git(&run, &["tag", "--list"]).contains("iter-000"));
    assert!(run.join("iterations/002/scores.json").is_file());
}
