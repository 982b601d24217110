//! `[evolve] variants = 2` end to end on the smoke benchmark (local sandbox, scripted mock
//! models; two iterations): the structural variant's change set harms (hello-file breaks), the guidance
//! variant's helps (count-errors passes); the screen picks the helpful one, which is
//! committed, and the other stays as a tag; the report and `ahe show` list both. A run
//! killed (-9) during the screen resumes to the same choice without redoing the finished
//! variants, and its screen cost counts the trials of before the kill. The variants' agents
//! run at the same time (an evolve model server that sees two requests in flight), each in
//! its own working tree, at most `variants_concurrency` at once; a screen that the
//! iteration's extra-trial share cannot pay shrinks or is skipped.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ahe_testsupport::{ScriptedReply, TestServer};
use common::{ahe, call, json_file as json, root, text, turns, user_text};
use serde_json::{json as j, Value};

fn config(dir: &Path) -> PathBuf {
    let p = dir.join("variants.toml");
    let body = format!(
        "extends = \"{}\"\niterations = 2\n[evolve]\nvariants = 2\n\
         variant_focus = [\"structural\", \"guidance\"]\nscreen_tasks = 3\npreflight = false\n\
         [attribution]\nmax_extra_share = 1.0\n\
         [models.default]\nscript = \"{}\"\n",
        root().join("configs/smoke-mock.toml").display(),
        root()
            .join("crates/ahe-cli/tests/fixtures/variants.script.toml")
            .display()
    );
    std::fs::write(&p, body).unwrap();
    p
}

fn git(run: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(args)
        .current_dir(run.join("harness"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// (variant, passed, trials, chosen) of `evolve/variants.json`.
fn figures(run: &Path) -> Vec<(u64, u64, u64, bool)> {
    let v = json(&run.join("iterations/001/evolve/variants.json"));
    v["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["variant"].as_u64().unwrap(),
                s["passed"].as_u64().unwrap(),
                s["trials"].as_u64().unwrap(),
                s["chosen"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn check_choice(run: &Path) {
    assert_eq!(figures(run), [(1, 0, 3, false), (2, 2, 3, true)]);
    // The chosen change set is iteration 1's commit; the other is a tag of its own.
    let memory = git(run, &["show", "iter-001:memory/MEMORY.md"]);
    assert!(memory.contains("HINT-LEVEL-FIELD"), "{memory}");
    assert_eq!(git(run, &["show", "iter-001:memory/style.md"]), "");
    let other = git(run, &["show", "iter-001-v1:memory/style.md"]);
    assert!(other.contains("NO-ECHO"), "{other}");
    let m = json(&run.join("iterations/001/evolve/manifest.json"));
    assert_eq!(m["changes"][0]["files"][0], "memory/MEMORY.md");
    // The screen trials are extra trials of their own sets and cost (role `screen`).
    let it = run.join("iterations/001");
    assert!(it.join("extra/screen/v1/trials").is_dir());
    let s = json(&it.join("scores.json"));
    assert!(s["meta"]["roles"]["screen"].is_object(), "{s}");
    // The final evaluation of the chosen harness: count-errors passes.
    let s2 = json(&run.join("iterations/002/scores.json"));
    assert_eq!(s2["tasks"]["count-errors"]["status"], "pass", "{s2}");
}

#[test]
fn the_helpful_variant_is_chosen_on_the_screen_and_the_other_kept_as_a_tag() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path());
    let runs = d.path().to_str().unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let o = ahe(
        &[
            "evolve",
            "--config",
            cfg_s,
            "--name",
            "clean",
            "--runs-dir",
            runs,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = d.path().join("clean");
    check_choice(&run);
    // The next evolve step's history shows the variant the screen did not choose.
    let h = std::fs::read_to_string(run.join("iterations/002/evolve/inputs/history.md")).unwrap();
    assert!(
        h.contains("**iter-001-v1/c1** (memory; files memory/style.md)")
            && h.contains("NOT CHOSEN: another variant of the iteration passed more of the screen (0/3 against 2); kept as tag iter-001-v1"),
        "{h}"
    );
    let notes = std::fs::read_to_string(run.join("iterations/001/evolve/summary.md")).unwrap();
    assert!(
        notes.contains("v2 [guidance] 2/3 (1 change(s)) chosen"),
        "{notes}"
    );
    check_report(&run);

    // Killed (-9) once the screen's first trial is done, then resumed: the same choice, and
    // neither variant's agent runs again.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args([
            "evolve",
            "--config",
            cfg_s,
            "--name",
            "killed",
            "--runs-dir",
            runs,
        ])
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = d.path().join("killed");
    let t0 = Instant::now();
    let in_screen = |j: &str| {
        j.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|e| {
                e["ev"] == "extra_trial_done"
                    && e["set"].as_str().is_some_and(|s| s.starts_with("screen/"))
            })
    };
    while !in_screen(&std::fs::read_to_string(run.join("journal.jsonl")).unwrap_or_default()) {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the screen never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    assert!(
        !journal.contains("\"phase\":\"commit\""),
        "killed after the screen:\n{journal}"
    );
    let v1 = run.join("iterations/001/evolve/variants/v1/result.json");
    let stamp = std::fs::metadata(&v1).unwrap().modified().unwrap();
    let o = ahe(&["evolve", "--resume", run.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    check_choice(&run);
    assert_eq!(
        std::fs::metadata(&v1).unwrap().modified().unwrap(),
        stamp,
        "v1 ran again"
    );
    // The screen's cost counts its trials of before the kill too: every kept trial, once.
    let it = run.join("iterations/001");
    let mut tokens = 0;
    for v in ["v1", "v2"] {
        for task in std::fs::read_dir(it.join("extra/screen").join(v).join("trials")).unwrap() {
            for a in std::fs::read_dir(task.unwrap().path()).unwrap() {
                let r = json(&a.unwrap().path().join("result.json"));
                tokens += r["usage"]["input_tokens"].as_u64().unwrap();
            }
        }
    }
    let s = json(&it.join("scores.json"));
    assert!(tokens > 0);
    assert_eq!(s["meta"]["roles"]["screen"]["input_tokens"], tokens, "{s}");
    let ev = json(&it.join("evidence.json"));
    assert_eq!(ev["screen_cost"]["trials"], 6, "{ev}");
}

/// The report and `ahe show --iteration 1` list both variants with their screen figures.
fn check_report(run: &Path) {
    let o = ahe(&["report", run.to_str().unwrap(), "--no-trial-pages"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(md.contains("**Variants of the evolve step:**"), "{md}");
    assert!(
        md.contains("| v1 | structural | 1 | 0/3 | tag iter-001-v1 |"),
        "{md}"
    );
    assert!(md.contains("| v2 | guidance | 1 | 2/3 | chosen |"), "{md}");
    assert!(
        md.contains("(one trial per task and variant): 6 trials"),
        "{md}"
    );
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(
        html.contains("<h3>Variants</h3>") && html.contains("tag iter-001-v1"),
        "no variants section in report.html"
    );
    let o = ahe(&["show", run.to_str().unwrap(), "--iteration", "1"], &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("variants:"), "{out}");
    let row = out.lines().find(|l| l.starts_with("v1 ")).unwrap_or("");
    assert!(
        row.contains("structural") && row.contains("0/3") && row.contains("tag iter-001-v1"),
        "{out}"
    );
    let row = out.lines().find(|l| l.starts_with("v2 ")).unwrap_or("");
    assert!(
        row.contains("guidance") && row.contains("2/3") && row.contains("chosen"),
        "{out}"
    );
}

/// A one-iteration run (k = 1) whose evolve agents talk to `evolve_url` (the code agent and
/// debugger stay scripted mocks), with `extra` lines in `[evolve]` and `share` as
/// `[attribution] max_extra_share`.
fn server_config(dir: &Path, evolve_url: Option<&str>, extra: &str, share: f64) -> PathBuf {
    server_config_n(dir, evolve_url, extra, share, 2)
}

/// [`server_config`] with `variants` evolve agents.
fn server_config_n(
    dir: &Path,
    evolve_url: Option<&str>,
    extra: &str,
    share: f64,
    variants: u32,
) -> PathBuf {
    let p = dir.join(format!("variants-{}.toml", dir.read_dir().unwrap().count()));
    let evolve = match evolve_url {
        Some(url) => format!(
            "[models.evolve]\nprovider = \"openai\"\nmodel = \"variants-evolve\"\n\
             base_url = \"{url}\"\napi_key_env = \"AHE_VARIANTS_KEY\"\nbackoff_base_ms = 1\n"
        ),
        None => String::new(),
    };
    let body = format!(
        "extends = \"{}\"\nk = 1\niterations = 1\n[benchmark]\npath = \"benchmarks/smoke\"\n\
         [sandbox]\nbackend = \"local\"\nconcurrency = 4\n[holdout]\ntasks = [\"config-port\"]\n\
         [evolve]\nvariants = {variants}\nvariant_focus = [\"structural\", \"guidance\"]\n\
         screen_tasks = 3\npreflight = false\nfinal_trials = 0\n{extra}\n\
         [attribution]\nmax_extra_share = {share}\n\
         [models.default]\nprovider = \"mock\"\nmodel = \"script\"\nscript = \"{}\"\n{evolve}",
        root().join("configs/base.toml").display(),
        root()
            .join("crates/ahe-cli/tests/fixtures/variants.script.toml")
            .display()
    );
    std::fs::write(&p, body).unwrap();
    p
}

/// An evolve model that answers each turn after `delay_ms`: a note of its own in the
/// variant's file (`memory/<focus>.md`), then its manifest.
fn evolve_server(delay_ms: u64) -> TestServer {
    TestServer::start_dynamic(move |body, _| {
        let focus = match user_text(body).contains("Your focus: STRUCTURAL") {
            true => "structural",
            false => "guidance",
        };
        let file = format!("memory/{focus}.md");
        let reply = match turns(body) {
            0 => call(
                "write_file",
                j!({ "path": format!("harness/{file}"), "content": format!("- {focus} note\n") }),
            ),
            1 => call(
                "submit_manifest",
                j!({ "changes": [{ "id": "c1", "type": "new", "description": format!("Memory: {focus} note"),
                    "files": [file], "predicted_fixes": ["fix-sum"], "risk_tasks": [], "component": "memory" }] }),
            ),
            _ => ScriptedReply::text("done"),
        };
        reply.with_delay(delay_ms)
    })
}

fn evolve_run(cfg: &Path, runs: &Path, name: &str) -> PathBuf {
    let (cfg, runs_s) = (cfg.to_str().unwrap(), runs.to_str().unwrap());
    let args = [
        "evolve",
        "--config",
        cfg,
        "--name",
        name,
        "--runs-dir",
        runs_s,
        "--no-check",
    ];
    let o = ahe(&args, &[("AHE_VARIANTS_KEY", "sk-test")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    runs.join(name)
}

#[test]
fn the_variants_agents_run_at_once_each_in_its_own_working_tree() {
    let d = tempfile::tempdir().unwrap();
    let server = evolve_server(400);
    let cfg = server_config(d.path(), Some(&server.base_url()), "", 1.0);
    let run = evolve_run(&cfg, d.path(), "parallel");
    assert_eq!(server.max_in_flight(), 2, "the variants did not overlap");
    assert_eq!(server.request_count(), 4);
    // Each variant's edit is in its own tag only: no working tree was shared.
    let v1 = git(&run, &["ls-tree", "-r", "--name-only", "iter-001-v1"]);
    let v2 = git(&run, &["ls-tree", "-r", "--name-only", "iter-001-v2"]);
    assert!(
        v1.contains("memory/structural.md") && !v1.contains("memory/guidance.md"),
        "{v1}"
    );
    assert!(
        v2.contains("memory/guidance.md") && !v2.contains("memory/structural.md"),
        "{v2}"
    );
    // Each variant's own files; its working tree is gone once committed.
    let it = run.join("iterations/001/evolve");
    for v in ["v1", "v2"] {
        let dir = it.join("variants").join(v);
        for f in [
            "trace.jsonl",
            "manifest.json",
            "proposed.json",
            "result.json",
        ] {
            assert!(dir.join(f).is_file(), "{v}/{f}");
        }
        assert!(!dir.join("harness").exists(), "{v}'s working tree stayed");
    }
    let wt = run.join("harness/.git/worktrees");
    assert!(
        std::fs::read_dir(&wt).map_or(true, |mut r| r.next().is_none()),
        "worktree records stayed"
    );
    // The evolve role counts both variants' calls (10 prompt tokens each, server usage).
    let s = json(&run.join("iterations/001/scores.json"));
    assert_eq!(s["meta"]["roles"]["evolve"]["input_tokens"], 40, "{s}");

    // One at a time with `variants_concurrency = 1`.
    let server = evolve_server(100);
    let cfg = server_config(
        d.path(),
        Some(&server.base_url()),
        "variants_concurrency = 1",
        1.0,
    );
    evolve_run(&cfg, d.path(), "one-at-a-time");
    assert_eq!(server.max_in_flight(), 1);
    assert_eq!(server.request_count(), 4);
}

#[test]
fn a_screen_the_extra_trial_share_cannot_pay_shrinks_or_is_skipped() {
    let d = tempfile::tempdir().unwrap();
    // 4 tasks × k = 1: a share of 0.5 pays 2 extra trials, one task per variant.
    let run = evolve_run(&server_config(d.path(), None, "", 0.5), d.path(), "shrunk");
    let it = run.join("iterations/001");
    let v = json(&it.join("evolve/variants.json"));
    assert_eq!(v["screen_tasks"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["variants"][0]["trials"], 1);
    assert_eq!(v["variants"][1]["trials"], 1);
    assert!(v["screen_note"]
        .as_str()
        .unwrap()
        .starts_with("variants: screen shrunk to 1 of 3 task(s) per variant: 2 of the iteration's 2 extra trials left"));
    assert_eq!(json(&it.join("evidence.json"))["screen_cost"]["trials"], 2);
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    assert!(journal.contains("screen shrunk to 1 of 3"), "{journal}");

    // No share at all: no screen; the tie on changes goes to the lower number, said so.
    let run = evolve_run(&server_config(d.path(), None, "", 0.0), d.path(), "skipped");
    let it = run.join("iterations/001");
    let v = json(&it.join("evolve/variants.json"));
    assert!(v["screen_tasks"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(v["variants"][0]["chosen"], true, "{v}");
    assert_eq!(v["variants"][0]["trials"], 0);
    assert!(!it.join("extra/screen").exists());
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    assert!(
        journal.contains("variants: screen skipped: 0 of the iteration's 0 extra trials left")
            && journal.contains("the variants are chosen by fewer changes"),
        "{journal}"
    );
    let o = ahe(&["show", run.to_str().unwrap(), "--iteration", "1"], &[]);
    assert!(text(&o).contains("no screen trials"), "{}", text(&o));
}

/// Assistant events (model calls) in a trace.
fn calls_in(trace: &Path) -> u64 {
    std::fs::read_to_string(trace)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"event\":\"assistant\""))
        .count() as u64
}

#[test]
fn a_variant_killed_half_done_starts_again_from_the_start_and_its_calls_still_count() {
    let d = tempfile::tempdir().unwrap();
    let server = evolve_server(700);
    let cfg = server_config(d.path(), Some(&server.base_url()), "", 1.0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args([
            "evolve",
            "--config",
            cfg.to_str().unwrap(),
            "--name",
            "half",
        ])
        .args(["--runs-dir", d.path().to_str().unwrap(), "--no-check"])
        .env("AHE_VARIANTS_KEY", "sk-test")
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = d.path().join("half");
    let v1 = run.join("iterations/001/evolve/variants/v1");
    // Killed (-9) once variant 1 wrote its file and before it submitted.
    let t0 = Instant::now();
    while !v1.join("harness/memory/structural.md").is_file() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "variant 1 never wrote"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !v1.join("result.json").exists(),
        "killed after variant 1 finished"
    );
    let before = calls_in(&v1.join("trace.jsonl"))
        + calls_in(&run.join("iterations/001/evolve/variants/v2/trace.jsonl"));
    assert!(before >= 1);
    let o = ahe(
        &["evolve", "--resume", run.to_str().unwrap()],
        &[("AHE_VARIANTS_KEY", "sk-test")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v1_files = git(&run, &["ls-tree", "-r", "--name-only", "iter-001-v1"]);
    assert!(
        v1_files.contains("memory/structural.md") && !v1_files.contains("memory/guidance.md"),
        "{v1_files}"
    );
    assert!(!v1.join("harness").exists());
    // Every call is counted once, those of the killed attempt too.
    let calls = calls_in(&v1.join("trace.jsonl"))
        + calls_in(&run.join("iterations/001/evolve/variants/v2/trace.jsonl"));
    assert!(calls > 4, "{calls} calls: the killed attempt made none?");
    let s = json(&run.join("iterations/001/scores.json"));
    assert_eq!(
        s["meta"]["roles"]["evolve"]["input_tokens"],
        10 * calls,
        "{s}"
    );
}

#[test]
fn one_evolve_agent_killed_half_done_keeps_its_calls_counted() {
    let d = tempfile::tempdir().unwrap();
    let server = evolve_server(700);
    let cfg = server_config_n(d.path(), Some(&server.base_url()), "", 1.0, 1);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(["evolve", "--config", cfg.to_str().unwrap(), "--name", "one"])
        .args(["--runs-dir", d.path().to_str().unwrap(), "--no-check"])
        .env("AHE_VARIANTS_KEY", "sk-test")
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = d.path().join("one");
    let trace = run.join("iterations/001/evolve/trace.jsonl");
    let t0 = Instant::now();
    while calls_in(&trace) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the evolve agent never answered"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    let o = ahe(
        &["evolve", "--resume", run.to_str().unwrap()],
        &[("AHE_VARIANTS_KEY", "sk-test")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // One agent: no variant directories, the same files as ever.
    assert!(!run.join("iterations/001/evolve/variants").exists());
    assert!(!run.join("iterations/001/evolve/variants.json").exists());
    let calls = calls_in(&trace);
    assert!(calls > 2, "{calls} calls: the killed attempt made none?");
    let s = json(&run.join("iterations/001/scores.json"));
    assert_eq!(
        s["meta"]["roles"]["evolve"]["input_tokens"],
        10 * calls,
        "{s}"
    );
}
