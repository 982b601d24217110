//! `ahe evolve` end to end (local sandbox, scripted mock models) with one commit per change:
//! a harmful and a good change in the same memory file, the harmful one rolled back by
//! `git revert` of its commit so that the good lines survive into the next harness; and a
//! revert that conflicts, whose file-level fallback names the lost lines in the journal and
//! the evolve prompt — where the agent reads them and puts them back.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ahe, json_file, root, text};
use serde_json::Value;

const SEED_MEMORY: &str = "# Notes\n\n- seed note one\n- seed note two\n";
const BAD: &str = "- NO-ECHO: never create files with echo.";
const GOOD: &str = "- HINT-LEVEL-FIELD: when counting log lines by level, match the level field.";

/// The code agent: hello-file passes unless the harness forbids echo; count-errors (and the
/// held-out config-port) only with the level-field hint; fix-sum never.
const CODE_AND_DEBUGGER: &str = r###"
[[code_agent]]
when_task_contains = "hello.txt"
unless_system_contains = "NO-ECHO"
tool = "$shell"
args = { command = "bash /solution/solve.sh" }

[[code_agent]]
when_task_contains = "server.log"
when_system_contains = "HINT-LEVEL-FIELD"
tool = "$shell"
args = { command = "bash /solution/solve.sh" }

[[code_agent]]
when_task_contains = "config.json"
when_system_contains = "HINT-LEVEL-FIELD"
tool = "$shell"
args = { command = "bash /solution/solve.sh" }

[[debugger]]
content = "## Root cause\nThe agent counts substrings."
"###;

fn write_entry(first: &str, content: &str) -> String {
    format!(
        "[[evolve]]\nwhen_task_contains = {first:?}\ntool = \"write_file\"\n\
         args = {{ path = \"harness/memory/MEMORY.md\", content = {content:?} }}\n\n"
    )
}

fn commit_entry(when: &str, id: &str, fixes: &str, risks: &str) -> String {
    format!(
        "[[evolve]]\nwhen_task_contains = {when:?}\ntool = \"commit_change\"\n\
         args = {{ id = \"{id}\", type = \"new\", description = \"Memory: change {id}\", \
         files = [\"memory/MEMORY.md\"], predicted_fixes = [{fixes}], risk_tasks = [{risks}], \
         component = \"memory\", why_this_component = \"a fact for every task\" }}\n\n"
    )
}

/// Iteration 1 of the evolve agent: c1 (harmful: the bad line; predicts fix-sum, risks
/// hello-file) writes `first`, then c2 (good: predicts count-errors) writes `second`.
fn iteration_one(first: &str, second: &str) -> String {
    let when = "# Iteration 1\n";
    let mut s = write_entry(when, first);
    s += &commit_entry(when, "c1", "\"fix-sum\"", "\"hello-file\"");
    s += &write_entry(when, second);
    s += &commit_entry(when, "c2", "\"count-errors\"", "");
    s + &format!(
        "[[evolve]]\nwhen_task_contains = {when:?}\ntool = \"submit_manifest\"\nargs = {{}}\n"
    )
}

/// A run directory (seed with [`SEED_MEMORY`], `script`, 2 iterations) under `d`; runs it.
fn run(d: &Path, script: &str) -> PathBuf {
    let seed = d.join("seed");
    copy(&root().join("harness-seed"), &seed);
    std::fs::write(seed.join("memory/MEMORY.md"), SEED_MEMORY).unwrap();
    let script_path = d.join("script.toml");
    std::fs::write(&script_path, format!("{CODE_AND_DEBUGGER}\n{script}")).unwrap();
    let cfg = d.join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = \"{}\"\niterations = 2\nharness = \"{}\"\n[models.default]\n\
             provider = \"mock\"\nmodel = \"script\"\nscript = \"{}\"\n",
            root().join("configs/smoke-mock.toml").display(),
            seed.display(),
            script_path.display()
        ),
    )
    .unwrap();
    let runs = d.join("runs");
    let args = [
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--name",
        "r",
        "--runs-dir",
        runs.to_str().unwrap(),
    ];
    let o = ahe(&args, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    runs.join("r")
}

fn copy(from: &Path, to: &Path) {
    let st = Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

fn git(run: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(args)
        .current_dir(run.join("harness"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn iteration(run: &Path, t: u32, rel: &str) -> Value {
    json_file(&run.join(format!("iterations/{t:03}/{rel}")))
}

fn verdict(ev: &Value, id: &str) -> String {
    let c = ev["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id);
    c.unwrap()["verdict"].as_str().unwrap().to_string()
}

fn status(run: &Path, t: u32, task: &str) -> String {
    let s = iteration(run, t, "scores.json");
    s["tasks"][task]["status"].as_str().unwrap().to_string()
}

/// Every user message of iteration `t`'s evolve agent.
fn evolve_prompt(run: &Path, t: u32) -> String {
    let trace = run.join(format!("iterations/{t:03}/evolve/trace.jsonl"));
    std::fs::read_to_string(trace)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "message" && e["role"] == "user")
        .map(|e| e["content"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The commits of `range` (oldest first), as `git log --format=%s`.
fn subjects(run: &Path, range: &str) -> Vec<String> {
    let log = git(run, &["log", "--reverse", "--format=%s", range]);
    log.lines().map(str::to_string).collect()
}

#[test]
fn the_harmful_change_is_reverted_alone_and_the_good_one_in_the_same_file_survives() {
    let d = tempfile::tempdir().unwrap();
    // The bad line above the seed notes, the good one below: the two hunks do not touch.
    let first = format!("{BAD}\n\n{SEED_MEMORY}");
    let second = format!("{first}\n{GOOD}\n");
    let run = run(d.path(), &iteration_one(&first, &second));

    // Iteration 1 made two commits, c1 then c2 = iter-001.
    let m1 = iteration(&run, 1, "evolve/manifest.json");
    let (c1, c2) = (&m1["changes"][0]["commit"], &m1["changes"][1]["commit"]);
    assert_eq!(git(&run, &["rev-parse", "iter-001"]), c2.as_str().unwrap());
    assert_eq!(git(&run, &["rev-parse", "iter-001^"]), c1.as_str().unwrap());
    // Iteration 2 judged c1 HARMFUL (hello-file regressed) and c2 EFFECTIVE ...
    let e2 = iteration(&run, 2, "change_evaluation.json");
    assert_eq!(verdict(&e2, "c1"), "HARMFUL");
    assert_eq!(verdict(&e2, "c2"), "EFFECTIVE");
    // ... and reverted c1's commit alone: its own commit, the good line kept.
    let m2 = iteration(&run, 2, "evolve/manifest.json");
    assert_eq!(m2["changes"].as_array().unwrap().len(), 1, "{m2}");
    assert_eq!(m2["changes"][0]["id"], "rollback-c1");
    let rb = m2["changes"][0]["commit"].as_str().unwrap();
    assert_eq!(git(&run, &["rev-parse", "iter-002"]), rb);
    let log = subjects(&run, "iter-001..iter-002");
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(
        log[0].starts_with("iter-002: rollback-c1: Automatic rollback"),
        "{log:?}"
    );
    let memory = git(&run, &["show", "iter-002:memory/MEMORY.md"]);
    assert_eq!(memory, format!("{SEED_MEMORY}\n{GOOD}").trim_end());
    let prompt = evolve_prompt(&run, 2);
    assert!(
        prompt.contains("- rollback-c1: Automatic rollback"),
        "{prompt}"
    );
    assert!(!prompt.contains("LOST"), "{prompt}");
    // The next harness passes both: the regression is gone and the fix stayed.
    assert_eq!(status(&run, 3, "hello-file"), "pass");
    assert_eq!(status(&run, 3, "count-errors"), "pass");
    let e3 = iteration(&run, 3, "change_evaluation.json");
    assert_eq!(verdict(&e3, "rollback-c1"), "EFFECTIVE");
}

#[test]
fn a_conflicting_revert_falls_back_to_a_file_restore_and_the_agent_is_told_what_was_lost() {
    let d = tempfile::tempdir().unwrap();
    // The good line right after the bad one: reverting c1 alone conflicts.
    let first = format!("{SEED_MEMORY}{BAD}\n");
    let second = format!("{first}{GOOD}\n");
    let mut script = iteration_one(&first, &second);
    // Iteration 2's agent puts the lost lines back only when the prompt names them.
    let told = "LOST with it: 1 line(s) of change c2 in `memory/MEMORY.md`";
    script += &write_entry(told, &format!("{SEED_MEMORY}{GOOD}\n"));
    script += &commit_entry(told, "c3", "\"count-errors\"", "");
    script += &format!(
        "[[evolve]]\nwhen_task_contains = {told:?}\ntool = \"submit_manifest\"\nargs = {{}}\n"
    );
    let run = run(d.path(), &script);

    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    assert!(
        journal.contains(
            "auto-rollback: rollback-c1 (memory/MEMORY.md); conflict fallback, which also \
             removed 1 line(s) of c2"
        ),
        "{journal}"
    );
    let m2 = iteration(&run, 2, "evolve/manifest.json");
    let rb = &m2["changes"][0];
    assert_eq!(rb["id"], "rollback-c1");
    let desc = rb["description"].as_str().unwrap();
    assert!(desc.contains("memory/MEMORY.md conflicted"), "{desc}");
    assert!(desc.contains("1 line(s) of c2"), "{desc}");
    let prompt = evolve_prompt(&run, 2);
    assert!(prompt.contains(told), "{prompt}");
    assert!(prompt.contains(&format!("      {GOOD}")), "{prompt}");
    // The agent restored them as c3: rollback and c3 are two commits of iteration 2.
    assert_eq!(m2["changes"][1]["id"], "c3");
    assert_eq!(subjects(&run, "iter-001..iter-002").len(), 2);
    let at_rollback = git(&run, &["show", "iter-002^:memory/MEMORY.md"]);
    assert_eq!(at_rollback, SEED_MEMORY.trim_end(), "the file restore");
    let memory = git(&run, &["show", "iter-002:memory/MEMORY.md"]);
    assert!(memory.contains(GOOD) && !memory.contains(BAD), "{memory}");
    assert_eq!(status(&run, 3, "hello-file"), "pass");
    assert_eq!(status(&run, 3, "count-errors"), "pass");
}
