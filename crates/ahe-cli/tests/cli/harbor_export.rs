//! `ahe export harbor`: an evaluation and a run's iteration as Harbor job directories that
//! Harbor's own models load (in the venv of scripts/setup-harbor.sh; skipped only when there
//! is none, never under CI=true).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ahe, json_file, root, text};
use serde_json::Value;

/// The Harbor venv's python, or None (skip) outside CI.
fn harbor_python() -> Option<PathBuf> {
    let venv = std::env::var_os("HARBOR_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/ahe/harbor-venv")
        });
    let py = venv.join("bin/python");
    if py.is_file() {
        return Some(py);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "no Harbor venv at {} (scripts/setup-harbor.sh makes it; required when CI=true)",
        venv.display()
    );
    eprintln!(
        "note: no Harbor venv at {}; Harbor's models not checked",
        venv.display()
    );
    None
}

/// Loads every file of the job with Harbor's models; returns the counts per kind.
fn validate(job: &Path) -> Option<Value> {
    let py = harbor_python()?;
    let o = Command::new(py)
        .arg(root().join("scripts/harbor/validate_job.py"))
        .arg(job)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    Some(serde_json::from_slice(&o.stdout).unwrap())
}

fn trial_dirs(job: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(job)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

#[test]
fn an_eval_exports_as_a_harbor_job_that_harbors_models_load() {
    let d = tempfile::tempdir().unwrap();
    let eval = d.path().join("eval");
    let o = ahe(
        &[
            "eval",
            "--harness",
            "harness-seed",
            "--benchmark",
            "benchmarks/smoke",
            "--model",
            "mock:oracle",
            "--sandbox",
            "local",
            "-k",
            "2",
            "--out",
            eval.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let job = d.path().join("job");
    let o = ahe(
        &[
            "export",
            "harbor",
            eval.to_str().unwrap(),
            "--out",
            job.to_str().unwrap(),
            "--benchmark",
            "benchmarks/smoke",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let trials = trial_dirs(&job);
    assert_eq!(trials.len(), 8, "4 tasks × k=2");
    for t in &trials {
        let r = json_file(&t.join("result.json"));
        assert_eq!(r["verifier_result"]["rewards"]["reward"], 1.0, "{r}");
        assert_eq!(r["agent_info"]["model_info"]["provider"], "mock");
        assert_eq!(r["task_checksum"].as_str().unwrap().len(), 64);
        assert_eq!(
            std::fs::read_to_string(t.join("verifier/reward.txt"))
                .unwrap()
                .trim(),
            "1"
        );
        let traj = json_file(&t.join("agent/trajectory.json"));
        let steps = traj["steps"].as_array().unwrap();
        let call = steps
            .iter()
            .find(|s| s["tool_calls"].is_array())
            .expect("the oracle's shell call");
        assert_eq!(
            call["tool_calls"][0]["arguments"]["command"],
            "bash /solution/solve.sh"
        );
        assert_eq!(
            call["observation"]["results"][0]["source_call_id"],
            call["tool_calls"][0]["tool_call_id"]
        );
    }
    let job_result = json_file(&job.join("result.json"));
    assert_eq!(job_result["n_total_trials"], 8);
    let eval_stats = job_result["stats"]["evals"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    assert_eq!(eval_stats["metrics"][0]["mean"], 1.0);
    if let Some(counts) = validate(&job) {
        assert_eq!(counts["trial result"], 8, "{counts}");
        assert_eq!(counts["trajectory"], 8, "{counts}");
    }
    // A second export to the same place is refused rather than mixed.
    let o = ahe(
        &[
            "export",
            "harbor",
            eval.to_str().unwrap(),
            "--out",
            job.to_str().unwrap(),
        ],
        &[],
    );
    assert_ne!(o.status.code(), Some(0));
}

#[test]
fn a_runs_iteration_with_infra_errors_and_failures_exports_and_loads() {
    let d = tempfile::tempdir().unwrap();
    let runs = d.path().join("runs");
    let o = ahe(
        &[
            "evolve",
            "--config",
            "configs/smoke-mock.toml",
            "--name",
            "demo",
            "--runs-dir",
            runs.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = runs.join("demo");
    let job = d.path().join("job");
    let src = format!("{}@1", run.display());
    let o = ahe(
        &["export", "harbor", &src, "--out", job.to_str().unwrap()],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let results: Vec<Value> = trial_dirs(&job)
        .iter()
        .map(|t| json_file(&t.join("result.json")))
        .collect();
    let scores = json_file(&run.join("iterations/001/scores.json"));
    let passes = results
        .iter()
        .filter(|r| r["verifier_result"]["rewards"]["reward"] == 1.0)
        .count();
    let want: u64 = scores["tasks"]
        .as_object()
        .unwrap()
        .values()
        .map(|t| t["passed"].as_u64().unwrap())
        .sum();
    assert_eq!(passes as u64, want, "the same passes as the iteration");
    assert!(results.iter().all(|r| r["task_id"]["path"]
        .as_str()
        .unwrap()
        .ends_with(r["task_name"].as_str().unwrap())));
    validate(&job);
    // An infra error (a trial whose sandbox never started) has an exception and no trajectory.
    let bad = d.path().join("absent");
    common::copy_dir(
        &root().join("benchmarks/smoke/hello-file"),
        &bad.join("hello-file"),
    );
    let toml = bad.join("hello-file/task.toml");
    let t = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        t.replace(
            "[environment]",
            "[environment]\ndocker_image = \"ahe-test/absent:1\"",
        ),
    )
    .unwrap();
    std::fs::remove_dir_all(bad.join("hello-file/environment")).unwrap();
    if !common::docker_ready() {
        return;
    }
    let eval = d.path().join("infra");
    let o = ahe(
        &[
            "eval",
            "--harness",
            "harness-seed",
            "--benchmark",
            bad.to_str().unwrap(),
            "--model",
            "mock:oracle",
            "--sandbox",
            "docker",
            "--pull",
            "never",
            "-k",
            "1",
            "--out",
            eval.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.code().is_some(), "{}", text(&o));
    let job = d.path().join("job-infra");
    let o = ahe(
        &[
            "export",
            "harbor",
            eval.to_str().unwrap(),
            "--out",
            job.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = &trial_dirs(&job)[0];
    let r = json_file(&t.join("result.json"));
    assert_eq!(r["exception_info"]["exception_type"], "InfraError", "{r}");
    assert!(r["verifier_result"].is_null(), "{r}");
    assert!(!t.join("agent/trajectory.json").exists());
    validate(&job);
}

#[test]
fn a_harbor_job_whose_environment_never_started_imports_as_infra_errors_not_failures() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("eval");
    let job = root().join("crates/ahe-cli/tests/fixtures/harbor-job-compose-missing");
    let o = ahe(
        &[
            "import",
            "harbor",
            job.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = json_file(&out.join("scores.json"));
    assert_eq!(s["statuses"]["infra_error"], 2, "{s}");
    assert!(s["statuses"].get("fail").is_none(), "{s}");
    let r = json_file(&out.join("trials/hello-file/1/result.json"));
    assert_eq!(r["status"], "infra_error");
    assert!(
        r["error"].as_str().unwrap().contains("docker compose"),
        "{r}"
    );
    assert_eq!(s["meta"]["model"], "oracle", "{s}");
}
