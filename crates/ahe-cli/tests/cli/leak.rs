//! The leak guard end to end (`ahe evolve` on the smoke benchmark, local sandbox, scripted
//! mock models): a scripted evolve agent that writes a task name into memory, and one that
//! copies a test's expected string into a skill, each beside a legitimate edit in another
//! file. Under `reject` the leaking file is refused, then reverted, and the legitimate edit
//! is committed; under `warn` everything is kept and recorded; under `off` nothing is checked.

use crate::common;

use common::{json_file as json, root, text};

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

/// A file of the committed harness at `tag` (`None` when absent).
fn committed(run: &Path, tag: &str, file: &str) -> Option<String> {
    let o = Command::new("git")
        .args(["show", &format!("{tag}:{file}")])
        .current_dir(run.join("harness"))
        .output()
        .unwrap();
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// A fix-sum test line, 46 characters: copying it into the harness is a span leak.
const TEST_LINE: &str = r#"[ "$(bash /app/sum.sh 10 -4)" = "6" ] || ok=0"#;

/// The mock script: iteration 1 names a task in memory/tasks.md; iteration 2 copies a test
/// line into a skill (and resubmits it unchanged); iteration 3 names a task, is refused, and
/// rewrites the line as general advice before resubmitting.
fn script() -> String {
    let skill = format!(
        "---\nname: sum-check\ndescription: check sums\n---\nBefore finishing, run:\n{TEST_LINE}\n"
    );
    let submit = |iter: u32, changes: Value| {
        format!(
            "[[evolve]]\nwhen_task_contains = \"# Iteration {iter}\\n\"\ntool = \"submit_manifest\"\nargs_raw = {}\n",
            toml_str(&json!({ "changes": changes }).to_string())
        )
    };
    let write = |iter: u32, path: &str, content: &str| {
        format!(
            "[[evolve]]\nwhen_task_contains = \"# Iteration {iter}\\n\"\ntool = \"write_file\"\nargs_raw = {}\n",
            toml_str(&json!({ "path": path, "content": content }).to_string())
        )
    };
    let change = |id: &str, file: &str, comp: &str| {
        json!({"id": id, "type": "new", "description": format!("change {id}"), "files": [file],
               "predicted_fixes": [], "risk_tasks": [], "component": comp})
    };
    let mut s = String::from(
        "[[code_agent]]\nwhen_task_contains = \"server.log\"\nwhen_system_contains = \"HINT-LEVEL-FIELD\"\n\
         tool = \"$shell\"\nargs = { command = \"bash /solution/solve.sh\" }\n\n\
         [[debugger]]\ncontent = \"## Failure summary\\nThe agent stopped early.\"\n\n",
    );
    s += &write(
        1,
        "harness/memory/MEMORY.md",
        "- HINT-LEVEL-FIELD: count log lines by their level field, not by substring.\n",
    );
    s += &write(
        1,
        "harness/memory/tasks.md",
        "- For fix-sum, flip the sign.\n",
    );
    s += &submit(
        1,
        json!([
            change("c1", "memory/MEMORY.md", "memory"),
            change("c2", "memory/tasks.md", "memory")
        ]),
    );
    s += &write(
        2,
        "harness/memory/MEMORY.md",
        "- HINT-LEVEL-FIELD: count log lines by their level field, not by substring.\n\
         - HINT-FIX-SIGN: check the sign of accumulators.\n",
    );
    s += &write(2, "harness/skills/sum-check/SKILL.md", &skill);
    let c2 = json!([
        change("c3", "memory/MEMORY.md", "memory"),
        change("c4", "skills/sum-check/SKILL.md", "skill")
    ]);
    s += &submit(2, c2.clone());
    s += &submit(2, c2);
    s += &write(
        3,
        "harness/memory/style.md",
        "- hello-file needs no newline.\n",
    );
    s += &submit(3, json!([change("c5", "memory/style.md", "memory")]));
    s += &write(
        3,
        "harness/memory/style.md",
        "- Match the exact output format the task asks for.\n",
    );
    s += &submit(3, json!([change("c5", "memory/style.md", "memory")]));
    s
}

/// A TOML basic string (serde_json's escapes are all valid TOML escapes).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// Runs `ahe evolve` with `iterations` and `[evolve] leak_guard = policy`; returns the run.
fn run(d: &Path, policy: Option<&str>, iterations: u32) -> PathBuf {
    std::fs::write(d.join("script.toml"), script()).unwrap();
    let r = root().canonicalize().unwrap();
    let guard = policy
        .map(|p| format!("leak_guard = \"{p}\"\n"))
        .unwrap_or_default();
    let cfg = format!(
        "k = 1\niterations = {iterations}\nharness = \"{h}\"\n[benchmark]\npath = \"{b}\"\n\
         [sandbox]\nbackend = \"local\"\n[holdout]\ntasks = [\"config-port\"]\n\
         [evolve]\npreflight = false\n{guard}\
         [models.default]\nprovider = \"mock\"\nmodel = \"script\"\nscript = \"{s}\"\n",
        h = r.join("harness-seed").display(),
        b = r.join("benchmarks/smoke").display(),
        s = d.join("script.toml").display(),
    );
    std::fs::write(d.join("cfg.toml"), cfg).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(["evolve", "--config"])
        .arg(d.join("cfg.toml"))
        .args(["--name", "r", "--runs-dir"])
        .arg(d)
        .current_dir(&r)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    d.join("r")
}

/// `ahe report RUN`, then `report.md`.
fn report(run: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .arg("report")
        .arg(run)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    std::fs::read_to_string(run.join("report.md")).unwrap()
}

fn manifest(run: &Path, t: u32) -> Value {
    json(&run.join(format!("iterations/{t:03}/evolve/manifest.json")))
}

fn ids(m: &Value) -> Vec<&str> {
    m["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect()
}

#[test]
fn reject_refuses_reverts_the_leaking_file_and_keeps_the_legitimate_edit() {
    let d = tempfile::tempdir().unwrap();
    let run = run(d.path(), None, 3);
    let frozen = std::fs::read_to_string(run.join("run.toml")).unwrap();
    assert!(frozen.contains("leak_guard = \"reject\""), "{frozen}");

    // Iteration 1: the task name in memory/tasks.md is refused and reverted; MEMORY.md stays.
    let mem = committed(&run, "iter-001", "memory/MEMORY.md").unwrap();
    assert!(mem.contains("HINT-LEVEL-FIELD"), "{mem}");
    assert_eq!(committed(&run, "iter-001", "memory/tasks.md"), None);
    let m1 = manifest(&run, 1);
    assert_eq!(ids(&m1), vec!["c1"]);
    let g = &m1["leak_guard"];
    assert_eq!(g["policy"], "reject");
    assert_eq!(
        (&g["refused"][0]["file"], &g["refused"][0]["line"]),
        (&json!("memory/tasks.md"), &json!(1))
    );
    assert_eq!(
        (&g["refused"][0]["task"], &g["refused"][0]["kind"]),
        (&json!("fix-sum"), &json!("name"))
    );
    assert_eq!(g["refused"].as_array().unwrap().len(), 1);
    assert_eq!(g["reverted"], json!(["memory/tasks.md"]));
    assert_eq!(g["rejected_submissions"], 1);
    assert_eq!(g["dropped_changes"], json!(["c2"]));
    // The agent got the reason as the result of its submit call.
    let trace = std::fs::read_to_string(run.join("iterations/001/evolve/trace.jsonl")).unwrap();
    assert!(
        trace.contains("memory/tasks.md line 1: names the task fix-sum"),
        "{trace}"
    );
    // The kept edit did what it was for: count-errors passes in iteration 2.
    let s2 = json(&run.join("iterations/002/scores.json"));
    assert_eq!(s2["tasks"]["count-errors"]["status"], "pass");

    // Iteration 2: the copied test line in the skill is refused twice, then reverted.
    let mem = committed(&run, "iter-002", "memory/MEMORY.md").unwrap();
    assert!(mem.contains("HINT-FIX-SIGN"), "{mem}");
    assert_eq!(
        committed(&run, "iter-002", "skills/sum-check/SKILL.md"),
        None
    );
    let m2 = manifest(&run, 2);
    assert_eq!(ids(&m2), vec!["c3"]);
    let g = &m2["leak_guard"];
    let hit = &g["refused"][0];
    assert_eq!(
        (&hit["file"], &hit["line"], &hit["task"], &hit["kind"]),
        (
            &json!("skills/sum-check/SKILL.md"),
            &json!(6),
            &json!("fix-sum"),
            &json!("span")
        )
    );
    let excerpt = hit["excerpt"].as_str().unwrap();
    assert!(
        excerpt.chars().count() <= 40 && TEST_LINE.starts_with(excerpt.trim_end_matches('…')),
        "{excerpt}"
    );
    assert_eq!(g["reverted"], json!(["skills/sum-check/SKILL.md"]));
    assert_eq!(g["rejected_submissions"], 2);

    // Iteration 3: refused once, fixed by the agent, accepted: nothing reverted.
    let m3 = manifest(&run, 3);
    assert_eq!(ids(&m3), vec!["c5"]);
    assert_eq!(m3["leak_guard"]["refused"], json!([]));
    assert_eq!(m3["leak_guard"]["reverted"], json!([]));
    assert_eq!(m3["leak_guard"]["rejected_submissions"], 1);
    assert!(committed(&run, "iter-003", "memory/style.md")
        .unwrap()
        .contains("exact output format"));

    // The report shows one short line per refusal in the iteration's section.
    let report = report(&run);
    assert!(report.contains("**Leak guard:**"), "{report}");
    assert!(
        report.contains("reject: memory/tasks.md:1 names task fix-sum"),
        "{report}"
    );
    assert!(
        report.contains(
            "reject: skills/sum-check/SKILL.md:6 copies ≥ 40 characters verbatim from fix-sum"
        ),
        "{report}"
    );
    assert!(
        report.contains("- 1 submission(s) refused, then fixed by the agent"),
        "{report}"
    );
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("<h3>Leak guard</h3>"));
    // The held-out task never reaches the records the next agent reads.
    for t in 1..=3 {
        let m =
            std::fs::read_to_string(run.join(format!("iterations/{t:03}/evolve/manifest.json")))
                .unwrap();
        assert!(!m.contains("config-port"));
    }
}

#[test]
fn warn_records_and_keeps_off_checks_nothing() {
    let d = tempfile::tempdir().unwrap();
    let run_warn = run(d.path(), Some("warn"), 1);
    assert!(std::fs::read_to_string(run_warn.join("run.toml"))
        .unwrap()
        .contains("leak_guard = \"warn\""));
    assert!(committed(&run_warn, "iter-001", "memory/tasks.md")
        .unwrap()
        .contains("fix-sum"));
    let m = manifest(&run_warn, 1);
    assert_eq!(ids(&m), vec!["c1", "c2"]);
    assert_eq!(m["leak_guard"]["policy"], "warn");
    assert_eq!(m["leak_guard"]["refused"][0]["task"], "fix-sum");
    assert_eq!(m["leak_guard"]["reverted"], json!([]));
    assert_eq!(m["leak_guard"]["rejected_submissions"], 0);
    let report = report(&run_warn);
    assert!(
        report.contains("warn: memory/tasks.md:1 names task fix-sum"),
        "{report}"
    );

    let d = tempfile::tempdir().unwrap();
    let run_off = run(d.path(), Some("off"), 1);
    assert!(committed(&run_off, "iter-001", "memory/tasks.md").is_some());
    let m = manifest(&run_off, 1);
    assert_eq!(ids(&m), vec!["c1", "c2"]);
    assert!(m.get("leak_guard").is_none(), "{m}");
}
