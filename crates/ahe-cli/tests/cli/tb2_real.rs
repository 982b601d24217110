//! Real Terminal-Bench 2 tasks (`benchmarks/tb2-real`, copied unchanged) end to end through
//! `ahe eval --model mock:oracle` on docker: their own Dockerfiles (on the stand-in bases of
//! `scripts/tb2-standins.sh` where Docker Hub is out of reach), solutions and `test.sh`
//! (`apt-get install curl`, `uvx … pytest`). Every oracle pass must be unflagged, the service
//! a solution leaves (kv-store-grpc's `setsid python server.py &`) kept, and the witness must
//! have seen each `uvx` pytest session (the same on Harbor's docker environment:
//! `harbor_backend::tb2`). Needs Debian's mirror and PyPI (the verifiers install);
//! `.ci/run` makes the stand-ins and sets `AHE_TB2_REAL=1`, which turns a skip into a failure.

use crate::common;

use std::process::Command;

use common::{ahe, text};
use serde_json::Value;

const BASES: [&str; 2] = ["python:3.13-slim-bookworm", "ubuntu:24.04"];

fn ready() -> Result<(), String> {
    if !ahe_sandbox::docker::DockerBackend::available() {
        return Err("no Docker engine".into());
    }
    for b in BASES {
        let ok = Command::new("docker")
            .args(["image", "inspect", b])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Err(format!(
                "base image {b} missing (bash scripts/tb2-standins.sh {})",
                BASES.join(" ")
            ));
        }
    }
    Ok(())
}

/// Whether the task's base is a stand-in here (its image carries `ahe.standin=1`).
fn standin(task: &str) -> bool {
    let base = if task == "regex-log" {
        BASES[1]
    } else {
        BASES[0]
    };
    Command::new("docker")
        .args([
            "image",
            "inspect",
            "-f",
            "{{index .Config.Labels \"ahe.standin\"}}",
            base,
        ])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "1")
}

/// Whether the real tasks can run here; when not, says why and skips (a failure when
/// `AHE_TB2_REAL` is set).
pub(crate) fn ready_or_skip() -> bool {
    match ready() {
        Ok(()) => true,
        Err(why) => {
            assert!(
                std::env::var_os("AHE_TB2_REAL").is_none(),
                "AHE_TB2_REAL is set but {why}"
            );
            eprintln!("skipped: {why}");
            false
        }
    }
}

#[test]
fn real_tb2_oracles_pass_unflagged_on_docker() {
    if !ready_or_skip() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("eval");
    let o = ahe(
        &[
            "eval",
            "--harness",
            "harness-seed",
            "--benchmark",
            "benchmarks/tb2-real",
            "--model",
            "mock:oracle",
            "--sandbox",
            "docker",
            "-k",
            "1",
            "--pull",
            "never",
            "--out",
            dir.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_oracles(&dir);
}

/// The three tasks' oracle trials in the eval directory `dir` passed unflagged, the witness
/// saw each `uvx` pytest session, stand-in bases are named, kv-store-grpc's server was kept.
pub(crate) fn assert_oracles(dir: &std::path::Path) {
    let mut seen = 0;
    for task in ["kv-store-grpc", "regex-log", "nginx-request-logging"] {
        let p = dir.join("trials").join(task).join("1").join("result.json");
        let r: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(r["status"], "pass", "{task}: {r:#}");
        assert!(r["suspect"].is_null(), "{task} flagged: {:#}", r["suspect"]);
        let witness = r["witness"].to_string();
        assert!(
            witness.contains("pytest 8.") && witness.contains("ctrf.json"),
            "{task}: the witness did not see the uvx pytest session: {witness}"
        );
        assert!(
            r["notes"].to_string().contains("stand-in") || !standin(task),
            "{task}: {r:#}"
        );
        if task == "kv-store-grpc" {
            let kept = r["handover"]["kept"].to_string();
            assert!(
                kept.contains("5328"),
                "{task}: the gRPC server was not kept: {r:#}"
            );
        }
        seen += 1;
    }
    assert_eq!(seen, 3);
}
