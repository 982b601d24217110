//! Real Terminal-Bench 2 tasks (`benchmarks/tb2-real`) on Harbor's docker environment: each
//! names a `docker_image` on Docker Hub, out of reach here, so ahe resolves it as its docker
//! backend does (the task's own Dockerfile built on the stand-in bases, `--pull never`) and
//! Harbor starts the trials from that image; every oracle passes unflagged, as on docker.

use super::harbor_ready;
use crate::common::{root, text};
use crate::tb2_real::{assert_oracles, ready_or_skip};

pub(super) fn real_tb2_oracles_pass_unflagged_on_harbor_docker() {
    if !harbor_ready() || !ready_or_skip() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (out, state) = (d.path().join("eval"), d.path().join("state"));
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args([
            "eval",
            "--harness",
            "harness-seed",
            "--benchmark",
            "benchmarks/tb2-real",
        ])
        .args(["--sandbox", "harbor", "--model", "mock:oracle", "-k", "1"])
        .args(["--concurrency", "3", "--pull", "never", "--out"])
        .arg(&out)
        .env("AHE_HARBOR_STATE", &state)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_oracles(&out);
}
