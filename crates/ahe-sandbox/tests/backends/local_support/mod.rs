//! Helpers of the `local` backend tests: the backend (bwrap when installed), specs, build
//! contexts, a shell exec, and leftover-process scans.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use ahe_sandbox::local::LocalBackend;
use ahe_sandbox::{ExecOpts, Sandbox, SandboxSpec};

/// The bubblewrap backend, or `None` (with a note) when `bwrap` is not installed.
/// With `CI=true` a missing `bwrap` is a failure.
pub fn bwrap() -> Option<LocalBackend> {
    let installed = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .any(|d| d.join("bwrap").is_file());
    if !installed {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "bwrap is not installed (required when CI=true)"
        );
        eprintln!("note: bwrap is not installed; skipping bubblewrap tests");
        return None;
    }
    assert!(
        LocalBackend::bubblewrap_available(),
        "bwrap is installed but does not work"
    );
    let b = LocalBackend::bubblewrap();
    assert!(b.isolated());
    Some(b)
}

pub fn spec(task: &str) -> SandboxSpec {
    SandboxSpec {
        task: task.into(),
        trial_id: "t1".into(),
        run: "test".into(),
        ..Default::default()
    }
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

pub async fn sh(sb: &dyn Sandbox, cmd: &str) -> ahe_sandbox::ExecOutput {
    sb.exec(cmd, ExecOpts::default()).await.expect("exec")
}

/// Host pids whose argv is exactly `argv`.
pub fn pids_with_argv(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// Waits up to 3 s for every `sleep <marker>` process to be gone; returns the leftovers.
pub async fn leftovers(markers: &[&str]) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left: Vec<u32> = markers
            .iter()
            .flat_map(|m| pids_with_argv(&["sleep", m]))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
