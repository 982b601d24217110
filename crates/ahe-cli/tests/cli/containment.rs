//! `ahe evolve` against a hostile evolve agent (scripted mock): git metadata and oversized
//! writes are refused, the rollout evaluates exactly the commit, one process per run
//! directory, and a config that fails to load creates nothing.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ahe, root, text};
use serde_json::Value;

/// The code agent solves hello-file; the debugger reports; `evolve` is the evolve script.
fn script(evolve: &str) -> String {
    format!(
        r##"[[code_agent]]
when_task_contains = "hello.txt"
tool = "$shell"
args = {{ command = "bash /solution/solve.sh" }}

[[debugger]]
content = "Failure summary: none. Root cause: none."

{evolve}"##
    )
}

/// A one-iteration run config on hello-file (local sandbox) with the given mock script.
fn config(d: &Path, script_text: &str) -> PathBuf {
    let s = d.join("script.toml");
    std::fs::write(&s, script_text).unwrap();
    let cfg = d.join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = \"{}\"\nk = 1\niterations = 1\n[benchmark]\npath = \"benchmarks/smoke\"\ninclude = [\"hello-file\"]\n[sandbox]\nbackend = \"local\"\n[evolve]\npreflight = false\n[models.default]\nprovider = \"mock\"\nmodel = \"script\"\nscript = \"{}\"\n",
            root().join("configs/base.toml").display(),
            s.display()
        ),
    )
    .unwrap();
    cfg
}

fn evolve_args<'a>(cfg: &'a Path, runs: &'a Path, name: &'a str) -> Vec<&'a str> {
    vec![
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--name",
        name,
        "--runs-dir",
        runs.to_str().unwrap(),
    ]
}

fn git(run: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(args)
        .current_dir(run.join("harness"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The tool results the evolve agent saw, in order.
fn evolve_tool_outputs(run: &Path) -> Vec<String> {
    std::fs::read_to_string(run.join("iterations/001/evolve/trace.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "tool_call")
        .map(|e| format!("{} {}", e["output"].as_str().unwrap_or(""), e["error"]))
        .collect()
}

const MANIFEST: &str = r##"[[evolve]]
tool = "submit_manifest"
[evolve.args]
changes = [
  { id = "c1", type = "new", description = "A check tool", files = ["tools/check.sh", "tools/check.toml", "agent.toml"], component = "tool_impl" },
]
"##;

const CHECK_TOOL: &str = r##"[[evolve]]
tool = "write_file"
args = { path = "harness/tools/check.sh", content = "#!/bin/sh\ncat >/dev/null\necho '{\"ok\": true, \"output\": \"checked\"}'\n" }

[[evolve]]
tool = "write_file"
args = { path = "harness/tools/check.toml", content = "name = \"check\"\ndescription = \"Check the work.\"\nimplementation = \"script:tools/check.sh\"\n[input_schema]\ntype = \"object\"\n" }

[[evolve]]
tool = "edit_file"
args = { path = "harness/agent.toml", old_text = "tools = [\"run_shell\"]", new_text = "tools = [\"run_shell\", \"check\"]" }
"##;

#[test]
fn a_gitignore_cannot_hide_new_tool_files_from_the_commit() {
    let d = tempfile::tempdir().unwrap();
    let hide = r##"[[evolve]]
tool = "write_file"
args = { path = "harness/tools/.gitignore", content = "check.sh\ncheck.toml\n" }
"##;
    let cfg = config(
        d.path(),
        &script(&format!("{CHECK_TOOL}\n{hide}\n{MANIFEST}")),
    );
    let runs = d.path().join("runs");
    let o = ahe(&evolve_args(&cfg, &runs, "hide"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = runs.join("hide");
    let outs = evolve_tool_outputs(&run);
    assert!(
        outs[3].contains("tools/.gitignore: refused: git metadata"),
        "{outs:?}"
    );
    assert!(!run.join("harness/tools/.gitignore").exists());
    let files = git(&run, &["ls-tree", "-r", "--name-only", "iter-001"]);
    for f in ["tools/check.sh", "tools/check.toml"] {
        assert!(files.lines().any(|l| l == f), "{f} committed: {files}");
    }
    assert!(!files.contains(".gitignore"), "{files}");
    // The final evaluation ran the committed harness, and a replay of the commit loads.
    let exported = run.join("iterations/002/harness/tools/check.sh");
    assert!(
        exported.is_file(),
        "iteration 2 evaluated a checkout of iter-001"
    );
    let out = d.path().join("replay");
    let spec = format!("{}@iter-001", run.display());
    let o = ahe(
        &[
            "eval",
            "--harness",
            &spec,
            "--benchmark",
            "benchmarks/smoke",
            "--model",
            "mock:nop",
            "--sandbox",
            "local",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn a_nested_git_repository_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let plant = r##"[[evolve]]
tool = "write_file"
args = { path = "harness/memory/.git/config", content = "[core]\n\tfsmonitor = touch /tmp/ahe-fsmonitor-ran\n" }

[[evolve]]
tool = "write_file"
args = { path = "harness/memory/.git/HEAD", content = "ref: refs/heads/main\n" }

[[evolve]]
tool = "write_file"
args = { path = "harness/memory/MEMORY.md", content = "- a note\n" }

[[evolve]]
tool = "submit_manifest"
[evolve.args]
changes = [
  { id = "c1", type = "new", description = "A note", files = ["memory/MEMORY.md"], component = "memory" },
]
"##;
    let cfg = config(d.path(), &script(plant));
    let runs = d.path().join("runs");
    let o = ahe(&evolve_args(&cfg, &runs, "nested"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = runs.join("nested");
    let outs = evolve_tool_outputs(&run);
    for (i, p) in ["memory/.git/config", "memory/.git/HEAD"]
        .iter()
        .enumerate()
    {
        assert!(
            outs[i].contains(&format!("{p}: refused: git metadata")),
            "{outs:?}"
        );
    }
    assert!(!run.join("harness/memory/.git").exists());
    let files = git(&run, &["ls-tree", "-r", "--name-only", "iter-001"]);
    assert!(files.contains("memory/MEMORY.md") && !files.contains(".git/"));
}

#[test]
fn an_oversized_write_is_refused_with_the_limit_and_its_config_key() {
    let d = tempfile::tempdir().unwrap();
    let big = format!(
        r##"[[evolve]]
tool = "write_file"
args = {{ path = "harness/memory/big.md", content = "{}" }}

[[evolve]]
tool = "write_file"
args = {{ path = "harness/memory/MEMORY.md", content = "- short\n" }}

[[evolve]]
tool = "submit_manifest"
[evolve.args]
changes = [
  {{ id = "c1", type = "new", description = "Notes", files = ["memory/MEMORY.md"], component = "memory" }},
]
"##,
        "x".repeat(300_000)
    );
    let cfg = config(d.path(), &script(&big));
    let runs = d.path().join("runs");
    let o = ahe(&evolve_args(&cfg, &runs, "big"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = runs.join("big");
    let outs = evolve_tool_outputs(&run);
    assert!(
        outs[0].contains(
            "memory/big.md: refused: the file would be 300000 bytes; limit 262144 (config [evolve] max_file_bytes)"
        ),
        "{:?}",
        outs.iter().map(|o| &o[..o.len().min(300)]).collect::<Vec<_>>()
    );
    let system = std::fs::read_to_string(run.join("iterations/001/evolve/trace.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "message" && e["role"] == "system")
        .unwrap();
    let system = system["content"].as_str().unwrap();
    assert!(
        system.contains("a file over\n262144 bytes and for a harness over 2097152 bytes"),
        "the guide states the caps: {system}"
    );
    let files = git(&run, &["ls-tree", "-r", "--name-only", "iter-001"]);
    assert!(!files.contains("memory/big.md"), "{files}");
    assert!(!run.join("harness/memory/big.md").exists());
}

/// Drops iteration `t` and everything after it from a finished run (as if it stopped
/// right after committing iteration t - 1).
fn rewind_to(run: &Path, t: u64) {
    let j = run.join("journal.jsonl");
    let kept: Vec<String> = std::fs::read_to_string(&j)
        .unwrap()
        .lines()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["ev"] != "run_end" && v["iter"].as_u64().is_none_or(|i| i < t)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&j, kept.concat()).unwrap();
    std::fs::remove_dir_all(run.join(format!("iterations/{t:03}"))).unwrap();
}

#[test]
fn the_rollout_evaluates_the_commit_not_the_working_tree() {
    let d = tempfile::tempdir().unwrap();
    let o = ahe(
        &[
            "evolve",
            "--config",
            "configs/smoke-mock.toml",
            "--iterations",
            "1",
            "--name",
            "w",
            "--runs-dir",
            d.path().to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = d.path().join("w");
    rewind_to(&run, 2);
    // An uncommitted file, hidden from git by info/exclude, that would fix fix-sum.
    let h = run.join("harness");
    std::fs::write(
        h.join("memory/extra.md"),
        "- HINT-FIX-SIGN: check the arithmetic sign of accumulators.\n",
    )
    .unwrap();
    std::fs::write(h.join(".git/info/exclude"), "memory/extra.md\n").unwrap();
    let o = ahe(&["evolve", "--resume", run.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = common::json_file(&run.join("iterations/002/scores.json"));
    assert_eq!(
        s["tasks"]["hello-file"]["status"], "fail",
        "iter-001 has NO-ECHO"
    );
    assert_eq!(
        s["tasks"]["fix-sum"]["status"], "fail",
        "the uncommitted hint must not be evaluated"
    );
    let trace =
        std::fs::read_to_string(run.join("iterations/002/trials/fix-sum/1/trace.jsonl")).unwrap();
    assert!(
        trace.contains("HINT-LEVEL-FIELD"),
        "the committed memory is"
    );
    assert!(!trace.contains("HINT-FIX-SIGN"));
    assert!(
        h.join("memory/extra.md").is_file(),
        "the working tree is untouched"
    );
}

#[test]
fn files_planted_on_disk_before_the_commit_are_removed_reverted_and_recorded() {
    let d = tempfile::tempdir().unwrap();
    let o = ahe(
        &[
            "evolve",
            "--config",
            "configs/smoke-mock.toml",
            "--iterations",
            "1",
            "--name",
            "p",
            "--runs-dir",
            d.path().to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = d.path().join("p");
    // Back to "iteration 1 evolved, not yet committed" ...
    rewind_to(&run, 2);
    let j = run.join("journal.jsonl");
    let kept: String = std::fs::read_to_string(&j)
        .unwrap()
        .lines()
        .filter(|l| !(l.contains("\"phase\":\"commit\"") && l.contains("\"iter\":1,")))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&j, kept).unwrap();
    git(&run, &["tag", "-d", "iter-001"]);
    git(&run, &["reset", "--soft", "iter-000"]);
    // ... and files planted directly on disk, not through the jail's tools.
    let h = run.join("harness");
    std::fs::create_dir_all(h.join("memory/.git")).unwrap();
    std::fs::write(
        h.join("memory/.git/config"),
        "[core]\n\tfsmonitor = touch /tmp/ahe-fsmonitor-ran\n",
    )
    .unwrap();
    std::fs::write(h.join("tools/.gitignore"), "x.sh\n").unwrap();
    std::fs::write(h.join("tools/x.sh"), "#!/bin/sh\n").unwrap();
    std::fs::write(h.join("memory/big.md"), "x".repeat(300_000)).unwrap();
    let o = ahe(&["evolve", "--resume", run.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let journal = std::fs::read_to_string(&j).unwrap();
    assert!(
        journal.contains("removed git metadata from the harness")
            && journal.contains("memory/.git, tools/.gitignore"),
        "{journal}"
    );
    assert!(
        journal.contains(
            "reverted memory/big.md: 300000 bytes; limit 262144 (config [evolve] max_file_bytes)"
        ),
        "{journal}"
    );
    let files = git(&run, &["ls-tree", "-r", "--name-only", "iter-001"]);
    assert!(files.lines().any(|l| l == "tools/x.sh"), "{files}");
    assert!(files.contains("memory/MEMORY.md"));
    for f in ["memory/big.md", ".git", ".gitignore"] {
        assert!(!files.contains(f), "{f}: {files}");
    }
    assert!(!h.join("memory/.git").exists() && !h.join("memory/big.md").exists());
    // The seed, one commit per change (c1, c2), and one for the planted file no change names.
    assert_eq!(git(&run, &["rev-list", "--count", "iter-001"]), "4");
    let last = git(&run, &["show", "--name-only", "--format=", "iter-001"]);
    assert_eq!(last.trim(), "tools/x.sh", "{last}");
}

fn wait_for_pid(lock: &Path, timeout: Duration) -> String {
    let t0 = Instant::now();
    loop {
        let pid = std::fs::read_to_string(lock).unwrap_or_default();
        if !pid.trim().is_empty() {
            return pid.trim().to_string();
        }
        assert!(t0.elapsed() < timeout, "{} never written", lock.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_second_evolve_on_a_running_run_is_refused_and_a_dead_holder_is_taken_over() {
    let d = tempfile::tempdir().unwrap();
    let slow = r##"[[code_agent]]
tool = "$shell"
args = { command = "sleep 15" }
"##;
    let cfg = config(d.path(), slow);
    let runs = d.path().join("runs");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(evolve_args(&cfg, &runs, "busy"))
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = runs.join("busy");
    let pid = wait_for_pid(&run.join(".lock"), Duration::from_secs(60));
    assert_eq!(pid, child.id().to_string());
    let o = ahe(&["evolve", "--resume", run.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("in use by another `ahe evolve` (pid {pid}")),
        "{err}"
    );
    let o = ahe(&evolve_args(&cfg, &runs, "busy"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains(&format!("pid {pid}")), "{}", text(&o));

    // kill -9 leaves the lock file with a dead pid: the next resume takes it over.
    let t0 = Instant::now();
    while !run.join("harness/.git/refs/tags/iter-000").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the seed was never committed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        std::fs::read_to_string(run.join(".lock")).unwrap().trim(),
        pid
    );
    // A kill inside a git write leaves `index.lock` (seen in CI): the resume clears it.
    std::fs::write(run.join("harness/.git/index.lock"), "").unwrap();
    std::fs::write(d.path().join("script.toml"), script("")).unwrap();
    let o = ahe(&["evolve", "--resume", run.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("index.lock (left by the killed run)"),
        "{}",
        text(&o)
    );
    assert!(run.join("iterations/002/scores.json").is_file());
    assert_eq!(
        std::fs::read_to_string(run.join(".lock")).unwrap(),
        "",
        "released at the end"
    );
}

#[test]
fn a_config_that_fails_to_load_creates_nothing() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), &script(""));
    let text_ok = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text_ok.replace("benchmarks/smoke", "benchmarks/no-such-bench"),
    )
    .unwrap();
    let runs = d.path().join("runs");
    let o = ahe(&evolve_args(&cfg, &runs, "typo"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no-such-bench"), "{}", text(&o));
    assert!(!runs.join("typo").exists(), "nothing created");
    std::fs::write(&cfg, text_ok).unwrap();
    let o = ahe(&evolve_args(&cfg, &runs, "typo"), &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "the name is still free: {}",
        text(&o)
    );
}
