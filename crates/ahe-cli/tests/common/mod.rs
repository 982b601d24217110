//! Shared helpers of the tests that drive the `ahe` binary against a local model server
//! (`ahe_testsupport::TestServer`) speaking the OpenAI chat-completions API.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ahe_testsupport::ScriptedReply;
use serde_json::{json, Value};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `ahe` in the workspace root with extra env vars; see [`output_within`] for its limit.
pub fn ahe(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ahe"));
    c.args(args).current_dir(root());
    for (k, v) in envs {
        c.env(k, v);
    }
    output_within(c)
}

#[path = "within.rs"]
mod within;
pub use within::output_within;

/// stdout + stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A JSON file, naming it when it is missing.
pub fn json_file(p: &Path) -> Value {
    let t = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&t).unwrap()
}

/// One smoke task as the fake model sees it.
#[derive(Debug, Clone)]
pub struct SmokeTask {
    /// Task name.
    pub name: String,
    /// `instruction.md`, trimmed.
    pub instruction: String,
    /// `solution/solve.sh` (run inline: the runner uploads `/solution` only for mock models).
    pub solve: String,
}

/// The tasks of `benchmarks/smoke`.
pub fn smoke_tasks() -> Vec<SmokeTask> {
    let dir = root().join("benchmarks/smoke");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        if !p.join("task.toml").is_file() {
            continue;
        }
        out.push(SmokeTask {
            name: e.file_name().to_string_lossy().into_owned(),
            instruction: std::fs::read_to_string(p.join("instruction.md"))
                .unwrap()
                .trim()
                .to_string(),
            solve: std::fs::read_to_string(p.join("solution/solve.sh")).unwrap(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(out.len(), 4, "the smoke benchmark has four tasks");
    out
}

/// The system prompt of a request body.
pub fn system_prompt(body: &Value) -> &str {
    messages(body)
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
}

/// The messages of a request body.
pub fn messages(body: &Value) -> &[Value] {
    body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The text of every user message, joined.
pub fn user_text(body: &Value) -> String {
    messages(body)
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Assistant turns already in the conversation.
pub fn turns(body: &Value) -> usize {
    messages(body)
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count()
}

/// The offered tool with a `command` property (the harness's shell tool).
pub fn shell_tool(body: &Value) -> Option<String> {
    body["tools"].as_array()?.iter().find_map(|t| {
        let f = &t["function"];
        f["parameters"]["properties"]["command"]
            .is_object()
            .then(|| f["name"].as_str().unwrap_or_default().to_string())
    })
}

/// The smoke task a code-agent request is about (matched by its instruction text).
pub fn task_of<'a>(tasks: &'a [SmokeTask], body: &Value) -> Option<&'a SmokeTask> {
    let u = user_text(body);
    tasks.iter().find(|t| u.contains(&t.instruction))
}

/// A tool call with JSON arguments.
pub fn call(name: &str, args: Value) -> ScriptedReply {
    ScriptedReply::tool_call(name, &args.to_string())
}

/// The mock oracle's behaviour: turn 0 runs the task's solve.sh through the shell tool,
/// later turns say "done". `solves` decides whether this task is solved at all.
pub fn code_agent_reply(
    tasks: &[SmokeTask],
    body: &Value,
    solves: impl Fn(&str) -> bool,
) -> ScriptedReply {
    let (Some(task), Some(shell)) = (task_of(tasks, body), shell_tool(body)) else {
        return ScriptedReply::text("I do not know this task.");
    };
    if turns(body) > 0 {
        return ScriptedReply::text("done");
    }
    if solves(&task.name) {
        call(&shell, json!({ "command": task.solve }))
    } else {
        call(
            &shell,
            json!({ "command": "echo 'no idea' > /tmp/guess.txt" }),
        )
    }
}

/// splitmix64: a deterministic pseudo-random number from an index.
pub fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs `ahe` in the workspace root.
pub fn run(args: &[&str]) -> Output {
    ahe(args, &[])
}

/// stdout as one JSON document, or a panic showing the whole output.
pub fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", text(o)))
}

/// Copies a directory tree.
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// Whether the docker tests can run here: an engine answers and `ahe-base:bookworm` is
/// built. Under `CI=true` a missing one fails the test instead of skipping it.
pub fn docker_ready() -> bool {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    if !ahe_sandbox::docker::DockerBackend::available() {
        assert!(!ci, "no Docker engine answers (required when CI=true)");
        eprintln!("note: no Docker engine; skipping this docker test");
        return false;
    }
    let base = Command::new("docker")
        .args(["image", "inspect", "ahe-base:bookworm"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !base {
        assert!(!ci, "ahe-base:bookworm is missing (required when CI=true)");
        eprintln!("note: ahe-base:bookworm is missing; skipping this docker test");
    }
    base
}

/// `chromium --headless --dump-dom` of a file; None (skip) when chromium is missing, unless
/// CI=true, where a missing chromium fails the test.
pub fn dump_dom(file: &Path) -> Option<String> {
    let bin = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    let Some(bin) = bin else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("chromium is not installed (scripts/setup.sh installs it); CI=true requires it");
        }
        eprintln!("note: chromium is not installed; skipping the headless rendering check");
        return None;
    };
    let profile = tempfile::tempdir().unwrap();
    let o = Command::new("timeout")
        .args([
            "120",
            bin,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", file.canonicalize().unwrap().display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "chromium failed: {}", text(&o));
    let dom = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        dom.contains("</html>"),
        "no DOM from chromium: {}",
        text(&o)
    );
    Some(dom)
}

/// `ahe import harbor JOB --out OUT`, which must succeed.
pub fn import_harbor(job: &Path, out: &Path) {
    let (job, out) = (job.to_str().unwrap(), out.to_str().unwrap());
    let o = ahe(&["import", "harbor", job, "--out", out], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// `ahe eval` of the seed harness into `out` with `model` on two smoke tasks (hello-file,
/// fix-sum), k = 2, local sandbox; it must succeed.
pub fn eval_smoke(out: &Path, model: &str) {
    let args = [
        "eval",
        "--harness",
        "harness-seed",
        "--benchmark",
        "benchmarks/smoke",
        "--tasks",
        "hello-file,fix-sum",
        "--model",
        model,
        "--sandbox",
        "local",
        "-k",
        "2",
        "--out",
        out.to_str().unwrap(),
    ];
    let o = ahe(&args, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The start window the tests' hand-overs use (`[verifier] service_start_secs`): hacks that
/// leave a busy loop are killed at its end either way, and the 30 s default would hold each
/// suite that long; the controls' servers bind 1.5 s after the agent ends (10 s leaves them
/// room on a loaded machine).
pub const TEST_START_WINDOW: u32 = 10;

/// A run config `dir/NAME.toml` for `benchmark` (a path under the workspace root) with the
/// mock oracle, [`TEST_START_WINDOW`], and `extra` TOML tables (e.g. `[sandbox]`).
pub fn suite_config(dir: &Path, name: &str, benchmark: &str, extra: &str) -> PathBuf {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(
        &p,
        format!(
            "[benchmark]\npath = \"{}\"\n[verifier]\nservice_start_secs = {TEST_START_WINDOW}\n\
             {extra}\n[models.default]\nprovider = \"mock\"\nmodel = \"oracle\"\n",
            root().join(benchmark).display()
        ),
    )
    .unwrap();
    p
}
