//! Helpers of the runtime tests: seed-based harnesses, a scripted model server, the local
//! sandbox, and one run with its trace.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ahe_harness::{End, Runtime, TraceWriter};
use ahe_model::{build_client, ModelClient, ModelConfig};
use ahe_sandbox::local::LocalBackend;
use ahe_sandbox::{Backend, ExecOpts, Sandbox, SandboxSpec};
use ahe_testsupport::{ScriptedReply as R, TestServer};
use serde_json::Value;

pub fn seed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harness-seed")
}

/// Copies the seed harness and writes extra files over it.
pub fn harness(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&seed(), d.path());
    for (rel, text) in files {
        let p = d.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    d
}

pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

pub fn client(server: &TestServer) -> ModelClient {
    let cfg = ModelConfig {
        provider: "openai".into(),
        model: "scripted".into(),
        base_url: Some(server.base_url()),
        api_key_env: Some("AHE_TEST_RUNTIME_NO_KEY".into()),
        max_retries: 2,
        max_malformed_retries: 1,
        backoff_base_ms: 1,
        backoff_max_ms: 5,
        timeout_sec: 10.0,
        ..Default::default()
    };
    build_client(&cfg).unwrap()
}

pub async fn sandbox() -> Box<dyn Sandbox> {
    let spec = SandboxSpec {
        task: "rt".into(),
        trial_id: format!("rt-{}", std::process::id()),
        ..Default::default()
    };
    LocalBackend::detect().create(&spec).await.unwrap()
}

pub async fn cat(sb: &dyn Sandbox, path: &str) -> Option<String> {
    let o = sb
        .exec(&format!("cat {path}"), ExecOpts::default())
        .await
        .unwrap();
    (o.exit_code == Some(0)).then_some(o.stdout)
}

pub struct Run {
    pub end: End,
    pub turns: u32,
    pub server: TestServer,
    pub trace: Vec<Value>,
    pub sb: Box<dyn Sandbox>,
    pub model: ModelClient,
    pub _dirs: (tempfile::TempDir, tempfile::TempDir),
}

pub async fn run(files: &[(&str, &str)], replies: Vec<R>, timeout: Duration) -> Run {
    let h = harness(files);
    let loaded = ahe_harness::load(h.path()).unwrap_or_else(|p| panic!("{p:?}"));
    let server = TestServer::start(replies);
    let model = client(&server);
    let rt = Runtime::new(Arc::new(loaded), model.clone()).unwrap();
    let sb = sandbox().await;
    let tdir = tempfile::tempdir().unwrap();
    let tw = TraceWriter::open(
        &tdir.path().join("trace.jsonl"),
        &tdir.path().join("agent.log"),
    )
    .unwrap();
    let out = rt.run("Do the task.", sb.as_ref(), &tw, timeout).await;
    let trace = std::fs::read_to_string(tdir.path().join("trace.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Run {
        end: out.end,
        turns: out.turns,
        server,
        trace,
        sb,
        model,
        _dirs: (h, tdir),
    }
}

/// The tool/user message contents of the n-th request the server received.
pub fn fed_back(server: &TestServer, n: usize) -> String {
    let b = &server.bodies()[n];
    b["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool" || m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

pub fn events<'a>(trace: &'a [Value], kind: &str) -> Vec<&'a Value> {
    trace.iter().filter(|e| e["event"] == kind).collect()
}

pub const T: Duration = Duration::from_secs(60);
