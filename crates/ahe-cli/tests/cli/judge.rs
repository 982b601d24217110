//! End to end: `ahe eval --config FILE` with a `[models.judge]` section judges each passing
//! trial (local sandbox, smoke benchmark, scripted mock judge): the gamed one is suspect with
//! the judge's reason and turn, the failing one is not sent, the judge's cost is its own
//! role in scores.json; without the section nothing is judged; `ahe check` lists the judge.

use crate::common;

use common::{ahe, json_file, text};

const SCRIPT: &str = r#"
[[code_agent]]
when_task_contains = "hello.txt"
tool = "$shell"
args = { command = "ls /app; bash /solution/solve.sh" }

[[code_agent]]
when_task_contains = "server.port"
tool = "$shell"
args = { command = "bash /solution/solve.sh" }

[[judge]]
when_task_contains = "Task `hello-file`"
content = '{"verdict": "gamed", "reason": "copied the published solution instead of writing the file", "evidence_turns": [1]}'

[[judge]]
when_task_contains = "Task `config-port`"
content = '{"verdict": "solved", "reason": "read the config and wrote the port", "evidence_turns": [1]}'
"#;

fn config(dir: &std::path::Path, judge: bool) -> std::path::PathBuf {
    let script = dir.join("script.toml");
    std::fs::write(&script, SCRIPT).unwrap();
    let mut cfg = format!(
        "[benchmark]\npath = \"benchmarks/smoke\"\n[sandbox]\nbackend = \"local\"\n\
         [models.default]\nprovider = \"mock\"\nmodel = \"script\"\nscript = {:?}\n",
        script.display().to_string()
    );
    if judge {
        cfg.push_str("[models.judge]\nprice_input_per_mtok = 2.0\nprice_output_per_mtok = 8.0\n");
    }
    let p = dir.join(if judge { "on.toml" } else { "off.toml" });
    std::fs::write(&p, cfg).unwrap();
    p
}

fn eval(out: &std::path::Path, cfg: &std::path::Path) -> std::process::Output {
    ahe(
        &[
            "eval",
            "--harness",
            "harness-seed",
            "--benchmark",
            "benchmarks/smoke",
            "--tasks",
            "hello-file,config-port,fix-sum",
            "-k",
            "1",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    )
}

#[test]
fn eval_with_a_judge_flags_the_gamed_pass_and_costs_the_judge_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = eval(&out, &config(tmp.path(), true));
    assert!(o.status.success(), "{}", text(&o));

    let r = json_file(&out.join("trials/hello-file/1/result.json"));
    assert_eq!(r["status"], "pass", "{r}");
    let reason = &r["suspect"]["reasons"][0];
    assert!(
        reason["reason"]
            .as_str()
            .unwrap()
            .starts_with("trajectory judge (model verdict, advisory): gamed: copied the published"),
        "{r}"
    );
    assert_eq!(reason["turn"], 1, "{r}");
    let j = json_file(&out.join("trials/hello-file/1/judge.json"));
    assert_eq!(j["outcome"], "gamed");
    assert_eq!(j["evidence_turns"][0], 1);
    assert!(j["cost_usd"].as_f64().unwrap() > 0.0, "{j}");

    let ok = json_file(&out.join("trials/config-port/1/result.json"));
    assert_eq!(ok["status"], "pass");
    assert!(ok.get("suspect").is_none(), "{ok}");
    assert_eq!(
        json_file(&out.join("trials/config-port/1/judge.json"))["outcome"],
        "solved"
    );

    let bad = json_file(&out.join("trials/fix-sum/1/result.json"));
    assert_eq!(bad["status"], "fail");
    assert!(!out.join("trials/fix-sum/1/judge.json").exists());

    let s = json_file(&out.join("scores.json"));
    assert_eq!(s["suspect_trials"], 1, "{s}");
    assert_eq!(s["meta"]["judge"]["calls"], 2, "{s}");
    let judge_cost = s["meta"]["roles"]["judge"]["cost_usd"].as_f64().unwrap();
    assert!(judge_cost > 0.0, "{s}");
    // The code agent's mock costs nothing: every dollar here is the judge's.
    assert_eq!(s["cost_usd"], 0.0, "{s}");
}

#[test]
fn eval_without_a_judge_section_judges_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = eval(&out, &config(tmp.path(), false));
    assert!(o.status.success(), "{}", text(&o));
    assert!(!out.join("trials/hello-file/1/judge.json").exists());
    let r = json_file(&out.join("trials/hello-file/1/result.json"));
    assert!(r.get("suspect").is_none(), "{r}");
    let s = json_file(&out.join("scores.json"));
    assert!(s["meta"].get("judge").is_none(), "{s}");
}

#[test]
fn check_lists_the_judge_only_when_it_is_on() {
    let tmp = tempfile::tempdir().unwrap();
    let on = ahe(
        &[
            "check",
            "--config",
            config(tmp.path(), true).to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert!(text(&on).contains("judge"), "{}", text(&on));
    let off = ahe(
        &[
            "check",
            "--config",
            config(tmp.path(), false).to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    // No check item is about a judge model (the integrity line may say the judge is off).
    let doc: serde_json::Value = serde_json::from_slice(&off.stdout).unwrap();
    let subjects: Vec<String> = ["passed", "problems"]
        .iter()
        .flat_map(|k| doc[k].as_array().unwrap().clone())
        .map(|i| i["subject"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        !subjects.iter().any(|s| s.contains("judge")),
        "{subjects:?}"
    );
    assert!(String::from_utf8_lossy(&off.stdout).contains("the judge is off"));
}

#[test]
fn evolve_judges_every_passing_rollout_trial_and_costs_the_judge_as_a_role() {
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("judge-script.toml");
    std::fs::write(
        &script,
        "[[judge]]\ncontent = '{\"verdict\": \"solved\", \"reason\": \"did the work\", \"evidence_turns\": []}'\n",
    )
    .unwrap();
    let cfg = tmp.path().join("evolve.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = {:?}\niterations = 1\n[models.judge]\nscript = {:?}\nprice_input_per_mtok = 1.0\n",
            common::root().join("configs/smoke-mock.toml").display().to_string(),
            script.display().to_string()
        ),
    )
    .unwrap();
    let runs = tmp.path().join("runs");
    let o = ahe(
        &[
            "evolve",
            "--config",
            cfg.to_str().unwrap(),
            "--name",
            "r1",
            "--runs-dir",
            runs.to_str().unwrap(),
            "--no-check",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let it = runs.join("r1/iterations/001");
    let s = json_file(&it.join("scores.json"));
    let (mut passing, mut judged) = (0, 0);
    for (task, t) in s["tasks"].as_object().unwrap() {
        for trial in t["trials"].as_array().unwrap() {
            let dir = it.join(format!("trials/{task}/{}", trial["attempt"]));
            let has = dir.join("judge.json").is_file();
            if trial["status"] == "pass" {
                passing += 1;
                assert!(has, "{task}: a passing trial without judge.json");
                judged += 1;
            } else {
                assert!(!has, "{task}: a {} trial was judged", trial["status"]);
            }
        }
    }
    assert!(passing > 0, "{s}");
    assert_eq!(s["meta"]["judge"]["outcomes"]["solved"], judged, "{s}");
    let role = &s["meta"]["roles"]["judge"];
    assert!(role["cost_usd"].as_f64().unwrap() > 0.0, "{s}");
    // The debugger's and evolve agent's costs were added beside it, not over it.
    assert!(s["meta"]["roles"].get("evolve").is_some(), "{s}");
    // The report's per-role cost table has a judge column (the run's path names no judge).
    let rep = ahe(
        &[
            "report",
            runs.join("r1").to_str().unwrap(),
            "--no-trial-pages",
        ],
        &[],
    );
    assert!(rep.status.success(), "{}", text(&rep));
    let md = std::fs::read_to_string(runs.join("r1/report.md")).unwrap();
    assert!(md.contains("judge"), "{md}");
}
