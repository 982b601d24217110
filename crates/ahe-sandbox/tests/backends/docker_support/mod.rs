//! Shared helpers of the docker integration tests.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use ahe_sandbox::docker::{self, DockerBackend};
use ahe_sandbox::{ExecOpts, ExecOutput, Sandbox, SandboxSpec};

pub const BASE: &str = "ahe-base:bookworm";

/// The backend, or `None` (with a note) when no engine or base image is there.
pub fn backend() -> Option<DockerBackend> {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    if !DockerBackend::available() {
        assert!(
            !ci,
            "no Docker engine answers at {} (required when CI=true; scripts/setup.sh starts one)",
            docker::engine_address()
        );
        eprintln!(
            "note: no Docker engine at {}; skipping docker tests",
            docker::engine_address()
        );
        return None;
    }
    let b = DockerBackend::connect().expect("connect");
    let has_base = std::process::Command::new("docker")
        .args(["image", "inspect", BASE])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has_base {
        assert!(
            !ci,
            "{BASE} is missing (scripts/build-base-image.sh builds it)"
        );
        eprintln!("note: {BASE} is missing; skipping docker tests");
        return None;
    }
    Some(b)
}

/// The shared test environment (a fixed Dockerfile: built once, then reused by every run).
pub fn base_context() -> tempfile::TempDir {
    context(&[("Dockerfile", "FROM ahe-base:bookworm\nWORKDIR /app\n")])
}

/// Writes `files` (path -> content) into a fresh temp dir.
pub fn context(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (p, content) in files {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    dir
}

pub fn spec(task: &str, ctx: &Path) -> SandboxSpec {
    SandboxSpec {
        task: task.into(),
        trial_id: format!("{task}/1"),
        run: "docker-tests".into(),
        context_dir: Some(ctx.to_path_buf()),
        ..Default::default()
    }
}

pub async fn sh(sb: &dyn Sandbox, cmd: &str) -> ExecOutput {
    sb.exec(cmd, ExecOpts::default()).await.expect("exec")
}

/// `docker inspect` of a container as JSON (`None` once it is gone).
pub fn inspect(id: &str) -> Option<serde_json::Value> {
    let o = std::process::Command::new("docker")
        .args(["container", "inspect", id])
        .output()
        .unwrap();
    o.status
        .success()
        .then(|| serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()[0].clone())
}

/// Waits until the container is gone (up to `secs`).
pub fn gone_within(id: &str, secs: u64) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if inspect(id).is_none() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Ids of this process's containers of a run and task.
pub fn containers_with_task(run: &str, task: &str) -> Vec<String> {
    let o = std::process::Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=ahe.run={run}"),
            "--filter",
            &format!("label=ahe.task={task}"),
            "--filter",
            &format!("label=ahe.pid={}", std::process::id()),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}
