//! `ahe report`, `ahe show` and `ahe eval` comparisons on a real mock 3-iteration run
//! (configs/smoke-mock.toml: scripted models, local sandbox): report.html rendered in
//! headless Chromium, an interrupted run, `show --json` shapes, live progress lines.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

use crate::common;
use common::dump_dom;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ahe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Demo {
    run: PathBuf,
    stderr: String,
}

/// One `ahe evolve` of the smoke demo per test binary, shared (read-only) by the tests.
fn demo() -> &'static Demo {
    static DEMO: OnceLock<Demo> = OnceLock::new();
    DEMO.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        // Runs of earlier test processes that are gone are removed.
        for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("report-tests-") {
                if !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let runs = tmp.join(format!("report-tests-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&runs);
        let o = ahe(&[
            "evolve",
            "--config",
            "configs/smoke-mock.toml",
            "--name",
            "demo",
            "--runs-dir",
            runs.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        Demo {
            run: runs.join("demo"),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    })
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let p = e.path();
        let to = dst.join(e.file_name());
        if p.is_dir() {
            copy_dir(&p, &to);
        } else {
            std::fs::copy(&p, &to).unwrap();
        }
    }
}

/// A private copy of the demo run (for tests that write into it).
fn demo_copy(name: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let run = d.path().join(name);
    copy_dir(&demo().run, &run);
    (d, run)
}

/// The attribute values of `attr` on elements whose opening tag starts with `prefix`.
fn attrs<'a>(dom: &'a str, prefix: &str, attr: &str) -> Vec<&'a str> {
    dom.match_indices(prefix)
        .filter_map(|(i, _)| {
            let tag = &dom[i..i + dom[i..].find('>')?];
            let key = format!("{attr}=\"");
            let s = tag.find(&key)? + key.len();
            Some(&tag[s..s + tag[s..].find('"')?])
        })
        .collect()
}

#[test]
fn report_renders_in_headless_chromium_with_plots_and_tables() {
    let (_d, run) = demo_copy("demo");
    let o = ahe(&["report", run.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("report: {}", run.join("report.html").display())),
        "{out}"
    );
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(
        !html.contains("<script") && !html.contains("<link"),
        "not self-contained"
    );
    assert!(run.join("report.md").is_file());
    // The mock models name no prices: the cost is unknown, not $0.
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(
        md.contains("- cost: cost unknown (no prices in the config)"),
        "{md}"
    );
    assert!(html.contains("cost unknown (no prices in the config)"));
    let Some(dom) = dump_dom(&run.join("report.html")) else {
        return;
    };
    // pass@1 plot: 4 evaluations (3 iterations + final), each a visible and a held-out point
    // with its interval. best stays iteration 1: on 3 visible tasks no harness beats the seed
    // beyond noise, and the final answer no longer lets the runner-up take best's place on
    // point estimates (issue 40: deliberately changed from iteration 3).
    let vis = attrs(&dom, "<g class=\"point visible\"", "data-value");
    assert_eq!(vis, ["0.3333", "0.3333", "1.0000", "1.0000"]);
    assert_eq!(
        attrs(&dom, "<g class=\"point holdout\"", "data-value"),
        ["0.0000", "1.0000", "1.0000", "1.0000"]
    );
    assert!(dom.matches("class=\"ci\"").count() >= 8 * 3);
    assert_eq!(
        attrs(&dom, "<g class=\"best-mark\"", "data-iteration"),
        ["1"]
    );
    // Heatmap: 4 tasks × 4 iterations, linked to trial pages.
    let cells = attrs(&dom, "<rect class=\"cell c-", "data-task");
    assert_eq!(cells.len(), 16);
    let classes = attrs(&dom, "<rect class=\"cell", "class");
    assert_eq!(
        classes.iter().filter(|c| c.contains("c-pass")).count(),
        11,
        "{classes:?}"
    );
    assert_eq!(
        classes.iter().filter(|c| c.contains("c-fail")).count(),
        5,
        "{classes:?}"
    );
    assert_eq!(dom.matches("<a href=\"report/trials/").count(), 16);
    // Cost and phase bar charts have segments.
    assert!(dom.matches("<rect class=\"seg s").count() >= 12);
    // Tables: the summary has one row per evaluation; changes carry coloured verdicts.
    let summary = &dom[dom.find("<table class=\"summary\"").unwrap()..];
    let summary = &summary[..summary.find("</table>").unwrap()];
    assert_eq!(summary.matches("<tr").count(), 5, "header + 4 rows");
    assert!(dom.contains("<span class=\"verdict v-harmful\">HARMFUL</span>"));
    assert!(dom.contains("<span class=\"verdict v-effective\">EFFECTIVE</span>"));
    assert!(dom.contains("rollback-c2"));
    assert!(dom.contains("fix precision"));
    assert!(dom.contains("edits reverted"), "journal notes are shown");
    assert!(dom.contains("href=\"iterations/002/evolve/diff.patch\""));
    assert!(dom.contains("href=\"iterations/001/analysis/overview.md\""));
    // A trial page: the turns with collapsible tool calls.
    let page = run.join("report/trials/003/fix-sum/1.html");
    let tdom = dump_dom(&page).unwrap();
    assert_eq!(tdom.matches("<div class=\"turn").count(), 2);
    assert_eq!(tdom.matches("<details class=\"call").count(), 1);
    assert!(tdom.contains("bash /solution/solve.sh"));
}

#[test]
fn report_on_an_interrupted_run_names_the_incomplete_iteration() {
    let (_d, run) = demo_copy("cut");
    // Interrupted during iteration 3's evolve phase.
    let j = run.join("journal.jsonl");
    let text_j = std::fs::read_to_string(&j).unwrap();
    let mut kept = Vec::new();
    for l in text_j.lines() {
        kept.push(l);
        let e: Value = serde_json::from_str(l).unwrap();
        if e["ev"] == "phase_start" && e["iter"] == 3 && e["phase"] == "evolve" {
            break;
        }
    }
    std::fs::write(&j, kept.join("\n") + "\n").unwrap();
    std::fs::remove_dir_all(run.join("iterations/003/evolve")).unwrap();
    std::fs::remove_dir_all(run.join("iterations/004")).unwrap();
    let o = ahe(&["report", run.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("incomplete") && err.contains("iteration 3: phase evolve did not finish"),
        "{err}"
    );
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(
        html.contains("Incomplete run.")
            && html.contains("iteration 3: phase evolve did not finish")
    );
    let o = ahe(&["show", run.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["status"], "incomplete");
    assert_eq!(v["incomplete"]["iteration"], 3);
    assert_eq!(v["incomplete"]["phase"], "evolve");
    assert_eq!(v["iterations"].as_array().unwrap().len(), 3);
    let o = ahe(&["show", run.to_str().unwrap()]);
    assert!(text(&o).contains("3 (incomplete)"), "{}", text(&o));
    assert!(text(&o).contains("1 ★"), "{}", text(&o));
}

/// The report says what the run's trials were checked with, counted from the trials'
/// records: all verified trials of the demo (local sandbox, layer readable, no judge), then
/// the same run with one trial marked as unchecked (a layer this host could not read).
#[test]
fn report_states_the_reward_integrity_its_trials_had() {
    let (_d, run) = demo_copy("integrity");
    let mut scores = Vec::new();
    let mut verified = 0;
    for it in std::fs::read_dir(run.join("iterations")).unwrap().flatten() {
        let p = it.path().join("scores.json");
        if let Ok(t) = std::fs::read_to_string(&p) {
            let v: Value = serde_json::from_str(&t).unwrap();
            for task in v["tasks"].as_object().unwrap().values() {
                for tr in task["trials"].as_array().unwrap() {
                    assert_eq!(tr["checked"], true, "{p:?}: {tr}");
                    verified += 1;
                }
            }
            scores.push(p);
        }
    }
    assert!(verified >= 8, "{verified} trials");
    let report = |run: &Path| {
        let o = ahe(&["report", run.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let md = std::fs::read_to_string(run.join("report.md")).unwrap();
        let html = std::fs::read_to_string(run.join("report.html")).unwrap();
        (md, html)
    };
    let (md, html) = report(&run);
    let want = format!(
        "- reward integrity: 11 of 14 hack classes stopped by mechanism on all {verified} verified trials; only the trajectory judge sees"
    );
    assert!(md.contains(&want), "{md}");
    assert!(md.contains("(the judge was off)"), "{md}");
    assert!(
        html.contains("<dt>reward integrity</dt><dd>11 of 14 hack classes"),
        "{html}"
    );
    // One trial whose layer could not be read.
    let p = &scores[0];
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let task = v["tasks"]
        .as_object_mut()
        .unwrap()
        .values_mut()
        .next()
        .unwrap();
    task["trials"][0]["checked"] = Value::Bool(false);
    std::fs::write(p, serde_json::to_string(&v).unwrap()).unwrap();
    let (md, _) = report(&run);
    let want = format!(
        "on {} of {verified} verified trials; on the other 1 the change checks did not run",
        verified - 1
    );
    assert!(md.contains(&want), "{md}");
}

/// The documented keys of each `ahe show --json` document (docs/cli.md#ahe-show, report::json).
const RUN_KEYS: &[&str] = &[
    "kind",
    "run",
    "dir",
    "status",
    "ended",
    "incomplete",
    "model",
    "k",
    "planned_iterations",
    "tasks",
    "best",
    "cost_usd",
    "wall_sec",
    "iterations",
];
const SUMMARY_KEYS: &[&str] = &[
    "iteration",
    "final",
    "complete",
    "best",
    "evaluated_commit",
    "pass_at_1",
    "pass_at_1_ci",
    "holdout_pass_at_1",
    "holdout_pass_at_1_ci",
    "all_pass_at_1",
    "delta",
    "delta_ci",
    "fixed",
    "regressed",
    "verdicts",
    "changes",
    "cost_usd",
    "tokens",
    "wall_sec",
];
const ITERATION_KEYS: &[&str] = &[
    "kind",
    "run",
    "iteration",
    "summary",
    "incomplete",
    "phases",
    "roles",
    "tasks",
    "attribution",
    "changes",
    "notes",
    "files",
];
const TASK_KEYS: &[&str] = &["kind", "run", "task", "holdout", "history"];
const TRIAL_KEYS: &[&str] = &[
    "kind",
    "run",
    "iteration",
    "task",
    "attempt",
    "dir",
    "status",
    "reward",
    "agent_end",
    "trace",
    "usage",
    "cost_usd",
    "duration_ms",
    "errors",
    "system_prompt",
    "user",
    "turns",
];

fn show_json(args: &[&str]) -> Value {
    let run = demo().run.to_str().unwrap().to_string();
    let mut a = vec!["show", run.as_str()];
    a.extend_from_slice(args);
    a.push("--json");
    let o = ahe(&a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", text(&o)))
}

fn has_keys(v: &Value, keys: &[&str], what: &str) {
    for k in keys {
        assert!(v.get(k).is_some(), "{what} lacks {k}: {v}");
    }
}

#[test]
fn show_json_is_one_document_with_the_documented_shape() {
    let r = show_json(&[]);
    has_keys(&r, RUN_KEYS, "run");
    assert_eq!(r["kind"], "run");
    assert_eq!(r["status"], "complete");
    // best stays the seed (issue 40: no runner-up switch on point estimates).
    assert_eq!(r["best"]["iteration"], 1);
    assert_eq!(r["tasks"]["holdout"], serde_json::json!(["config-port"]));
    let its = r["iterations"].as_array().unwrap();
    assert_eq!(its.len(), 4);
    for s in its {
        has_keys(s, SUMMARY_KEYS, "iteration summary");
    }
    assert_eq!(its[3]["final"], true);
    assert_eq!(
        its[1]["verdicts"],
        serde_json::json!({"EFFECTIVE": 1, "HARMFUL": 1})
    );
    assert_eq!(its[0]["best"], true);

    let i = show_json(&["--iteration", "2"]);
    has_keys(&i, ITERATION_KEYS, "iteration");
    assert_eq!(i["kind"], "iteration");
    assert_eq!(i["summary"]["pass_at_1"].as_f64().unwrap(), 1.0 / 3.0);
    let ch = i["changes"].as_array().unwrap();
    assert_eq!(ch[0]["id"], "rollback-c2");
    assert_eq!(ch[0]["verdict"], "EFFECTIVE");
    assert_eq!(i["attribution"]["changes"][1]["verdict"], "HARMFUL");
    assert_eq!(i["tasks"].as_array().unwrap().len(), 4);
    assert!(i["notes"][0].as_str().unwrap().contains("auto-rollback"));

    let t = show_json(&["--task", "hello-file"]);
    has_keys(&t, TASK_KEYS, "task");
    let moves: Vec<Value> = t["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["move"].clone())
        .collect();
    assert_eq!(
        moves,
        [Value::Null, "regressed".into(), "fixed".into(), Value::Null]
    );
    assert_eq!(t["history"][1]["risk_of"], serde_json::json!(["c2"]));

    let tr = show_json(&["--iteration", "3", "--task", "fix-sum", "--trial", "1"]);
    has_keys(&tr, TRIAL_KEYS, "trial");
    assert_eq!(tr["kind"], "trial");
    assert_eq!(tr["status"], "pass");
    assert_eq!(tr["turns"][0]["tool_calls"][0]["name"], "run_shell");
}

#[test]
fn show_tables_and_usage_errors() {
    let run = demo().run.to_str().unwrap().to_string();
    let o = ahe(&["show", &run]);
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("best: iteration 1"), "{s}");
    assert!(s.contains("E1 H1"), "{s}");
    let o = ahe(&["show", &run, "--iteration", "2"]);
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("c2      HARMFUL") && s.contains("rollback-c2") && s.contains("regressed"),
        "{s}"
    );
    let o = ahe(&["show", &run, "--task", "fix-sum", "--iteration", "3"]);
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("#1") && s.contains("predicted fix by"), "{s}");
    let o = ahe(&[
        "show",
        &run,
        "--iteration",
        "3",
        "--task",
        "fix-sum",
        "--trial",
        "1",
    ]);
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("turn 1 (main)") && s.contains("→ run_shell bash /solution/solve.sh  [exit 0]"),
        "{s}"
    );
    for bad in [
        vec!["show", run.as_str(), "--trial", "1"],
        vec!["show", run.as_str(), "--iteration", "9"],
        vec!["show", run.as_str(), "--task", "no-such-task"],
        vec![
            "show",
            run.as_str(),
            "--iteration",
            "1",
            "--task",
            "fix-sum",
            "--trial",
            "5",
        ],
        vec!["show", "/nonexistent/run"],
        vec!["report", "/nonexistent/run"],
    ] {
        let o = ahe(&bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", text(&o));
    }
}

#[test]
fn evolve_prints_a_line_per_phase_and_trial_when_not_a_terminal() {
    let e = &demo().stderr;
    assert!(e.contains("[iter 1/4 rollout] started"), "{e}");
    assert!(e.contains("[iter 2/4 evolve] started"), "{e}");
    assert!(e.contains("[iter 1/4 rollout] [8/8] "), "{e}");
    // The last of the 4 is the evaluation of the final harness: it says so.
    assert!(e.contains("[iter 4/4 final rollout] started"), "{e}");
    assert!(!e.contains("[iter 3/4 final"), "{e}");
    // The mock models name no prices: the cost is unknown, not $0.
    assert!(
        e.contains(" passed · cost unknown (no prices in the config) · eta "),
        "{e}"
    );
    assert!(!e.contains("$0.0000 spent"), "{e}");
    assert!(e.contains("[iter 2] note: auto-rollback"), "{e}");
}

#[test]
fn eval_compares_harnesses_with_a_paired_interval() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("cmp");
    // Iteration 3's harness (iter-002's commit), which solves every task: best stays the seed.
    let against = format!("{}@iter-002", demo().run.display());
    let o = ahe(&[
        "eval",
        "--harness",
        "harness-seed",
        "--against",
        &against,
        "--benchmark",
        "benchmarks/smoke",
        "--model",
        "mock:script=configs/smoke-mock.script.toml",
        "--sandbox",
        "local",
        "-k",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    assert_eq!(v["kind"], "comparison");
    assert_eq!(v["baseline"], "demo@iter-002");
    assert_eq!(v["k"], 2);
    let hs = v["harnesses"].as_array().unwrap();
    assert_eq!(hs.len(), 2);
    assert_eq!(hs[0]["pass_at_1"], 1.0);
    assert_eq!(hs[1]["pass_at_1"], 0.25);
    for h in hs {
        assert!(Path::new(h["out"].as_str().unwrap())
            .join("scores.json")
            .is_file());
    }
    let c = &v["comparisons"][0];
    assert_eq!(c["other"], "harness-seed");
    assert_eq!(c["n_paired"], 4);
    assert_eq!(c["delta"], -0.75);
    let ci = c["delta_ci"].as_array().unwrap();
    assert!(ci[0].as_f64().unwrap() <= -0.75 && -0.75 <= ci[1].as_f64().unwrap());
    assert_eq!(c["changed"], 3);
    let t: Vec<&Value> = c["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["task"] == "fix-sum")
        .collect();
    assert_eq!(
        (
            t[0]["baseline_passed"].clone(),
            t[0]["other_passed"].clone()
        ),
        (2.into(), 0.into())
    );
    assert_eq!(t[0]["within_noise"], true);
}
