//! Rollouts against a real OpenAI-compatible HTTP server on 127.0.0.1: model faults become
//! retries or `infra_error`, never a harness `fail`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ahe_bench::{TaskStatus, TrialStatus};
use ahe_model::ModelConfig;
use ahe_runner::rollout::{rollout, select_backend, RolloutSpec};
use ahe_testsupport::{ScriptedReply as R, TestServer};
use tokio_util::sync::CancellationToken;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn spec(server: &TestServer, out: &Path, task: &str) -> RolloutSpec {
    let (tasks, _) = ahe_bench::load_benchmark(&root().join("benchmarks/smoke")).unwrap();
    let tasks = ahe_bench::select_tasks(tasks, &[task.to_string()], &[]).unwrap();
    RolloutSpec {
        harness: Arc::new(ahe_harness::load(&root().join("harness-seed")).unwrap()),
        model_cfg: ModelConfig {
            provider: "openai".into(),
            model: "scripted".into(),
            base_url: Some(server.base_url()),
            api_key_env: Some("AHE_TEST_ROLLOUT_KEY".into()),
            max_retries: 2,
            max_malformed_retries: 1,
            backoff_base_ms: 1,
            backoff_max_ms: 5,
            ..Default::default()
        },
        tasks,
        backend: select_backend("local").unwrap(),
        k: 1,
        concurrency: 1,
        infra_retries: 1,
        verifier: Default::default(),
        default_agent_timeout_sec: 60.0,
        out_dir: out.to_path_buf(),
        run: "test".into(),
        prior: Vec::new(),
        schedule: Default::default(),
        expected_sec: Default::default(),
        judge: None,
        min_free_disk: 0,
    }
}

fn quiet() -> Arc<dyn Fn(ahe_bench::Progress) + Send + Sync> {
    Arc::new(|_| {})
}

#[tokio::test]
async fn garbage_responses_are_infra_errors_not_failures() {
    let server = TestServer::start_with_fallback(vec![], R::garbage());
    let d = tempfile::tempdir().unwrap();
    let s = rollout(
        spec(&server, d.path(), "hello-file"),
        CancellationToken::new(),
        quiet(),
    )
    .await
    .unwrap();
    let t = &s.tasks["hello-file"];
    assert_eq!(t.status, TaskStatus::Infra);
    assert_eq!(t.trials[0].status, TrialStatus::InfraError);
    assert_eq!(s.statuses.get("fail"), None);
    assert_eq!(s.pass_at_1, 0.0, "infra counts as failure in the headline");
    // 2 attempts (1 infra retry) × (1 try + 1 malformed retry)
    assert_eq!(server.request_count(), 4);
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.path().join("trials/hello-file/1/result.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(r["status"], "infra_error");
    assert_eq!(r["infra_retries"], 1);
    assert!(r["error"].as_str().unwrap().contains("malformed"), "{r}");
    assert_eq!(s.meta.model_faults.as_ref().unwrap()["malformed"], 4);
}

#[tokio::test]
async fn transient_errors_are_retried_and_the_task_scores_normally() {
    let server = TestServer::start(vec![
        R::status(429),
        R::status(503),
        R::tool_call(
            "run_shell",
            r#"{"command": "echo 'Hello, world!' > /app/hello.txt"}"#,
        ),
        R::text("done"),
    ]);
    let d = tempfile::tempdir().unwrap();
    let s = rollout(
        spec(&server, d.path(), "hello-file"),
        CancellationToken::new(),
        quiet(),
    )
    .await
    .unwrap();
    assert_eq!(s.pass_at_1, 1.0);
    assert_eq!(s.meta.model_retries, Some(2));
    assert_eq!(s.meta.model_faults.as_ref().unwrap()["transient"], 2);
    assert!(d.path().join("scores.json").is_file());
}

#[tokio::test]
async fn a_401_stops_the_run_naming_the_key_variable() {
    let server = TestServer::start_with_fallback(vec![], R::status(401));
    let d = tempfile::tempdir().unwrap();
    let e = rollout(
        spec(&server, d.path(), "hello-file"),
        CancellationToken::new(),
        quiet(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("AHE_TEST_ROLLOUT_KEY"), "{e}");
    assert!(!d.path().join("scores.json").exists(), "nothing is scored");
    assert_eq!(
        server.request_count(),
        1,
        "permanent errors are not retried"
    );
}
