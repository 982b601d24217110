//! `ahe matrix`: harnesses × benchmarks × models offline with mock models on the local
//! sandbox — resumes after kill -9 with no trial run twice, the report's figures equal the
//! cells' scores, ablations isolate the component that carries the gain, and a cell that
//! fails as infrastructure is marked so (docker).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ahe, copy_dir, root, text};
use serde_json::Value;

/// The seed plus a memory lesson the scripted model acts on, a system prompt line and a
/// tool description tweak that change nothing.
fn evolved(d: &Path) -> PathBuf {
    let h = d.join("evolved");
    copy_dir(&root().join("harness-seed"), &h);
    let mem = h.join("memory/MEMORY.md");
    let old = std::fs::read_to_string(&mem).unwrap();
    std::fs::write(
        &mem,
        format!("{old}\nLESSON-42: run the task's own check script first.\n"),
    )
    .unwrap();
    let sp = h.join("system_prompt.md");
    let old = std::fs::read_to_string(&sp).unwrap();
    std::fs::write(&sp, format!("{old}\nPrefer small, verifiable steps.\n")).unwrap();
    let tool = h.join("tools/run_shell.toml");
    let old = std::fs::read_to_string(&tool).unwrap();
    std::fs::write(
        &tool,
        old.replacen("description = \"", "description = \"(bash) ", 1),
    )
    .unwrap();
    h
}

/// A scripted model that solves a task only when the lesson is in its system prompt.
fn lesson_script(d: &Path) -> PathBuf {
    let s = d.join("script.toml");
    std::fs::write(
        &s,
        "[[code_agent]]\nwhen_system_contains = \"LESSON-42\"\ntool = \"$shell\"\nargs = { command = \"bash /solution/solve.sh\" }\n",
    )
    .unwrap();
    s
}

fn matrix_json(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("matrix.json")).unwrap()).unwrap()
}

/// Every finished trial's result.json under `out`, by path, with its content.
fn results(out: &Path) -> BTreeMap<PathBuf, String> {
    let mut m = BTreeMap::new();
    let Ok(cells) = std::fs::read_dir(out.join("cells")) else {
        return m;
    };
    for c in cells.flatten() {
        let Ok(tasks) = std::fs::read_dir(c.path().join("trials")) else {
            continue;
        };
        for t in tasks.flatten() {
            for a in std::fs::read_dir(t.path()).unwrap().flatten() {
                let r = a.path().join("result.json");
                if let Ok(s) = std::fs::read_to_string(&r) {
                    m.insert(r, s);
                }
            }
        }
    }
    m
}

fn cell_scores(out: &Path, cell: &Value) -> Value {
    let p = out.join(cell["dir"].as_str().unwrap()).join("scores.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn a_2x2x2_matrix_resumes_after_kill_9_with_no_trial_twice_and_reports_the_cells_figures() {
    let d = tempfile::tempdir().unwrap();
    let evolved = evolved(d.path());
    let out = d.path().join("mx");
    // A second benchmark of three transfer-lite tasks (the whole one ran 80 more trials that
    // test nothing more; issue 42's time budget).
    let lite = d.path().join("lite");
    for t in ["clean-contacts", "linear-fit", "sort-by-magic"] {
        copy_dir(
            &root().join("benchmarks/transfer-lite").join(t),
            &lite.join(t),
        );
    }
    let lite_s = lite.to_str().unwrap().to_string();
    let args: Vec<String> = [
        "matrix",
        "--harness",
        "harness-seed",
        "--harness",
        evolved.to_str().unwrap(),
        "--benchmark",
        "benchmarks/smoke",
        "--benchmark",
        lite_s.as_str(),
        "--model",
        "mock:oracle",
        "--model",
        "mock:nop",
        "-k",
        "2",
        "--sandbox",
        "local",
        "--concurrency",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(&args)
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while results(&out).len() < 6 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no trials finished"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = results(&out);
    let total = 2 * 2 * 2 * (4 + 3); // harnesses × models × k × (smoke + the lite tasks)
    assert!(before.len() < total, "killed too late to test the resume");

    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = ahe(&argv, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let after = results(&out);
    assert_eq!(after.len(), total);
    for (path, content) in &before {
        assert_eq!(
            after.get(path),
            Some(content),
            "{} ran twice",
            path.display()
        );
    }
    let m = matrix_json(&out);
    let cells = m["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 8);
    for c in cells {
        assert_eq!(c["status"], "ok", "{c}");
        let s = cell_scores(&out, c);
        assert_eq!(c["pass_at_1"], s["pass_at_1"], "{c}");
        assert_eq!(c["pass_at_1_ci"], s["pass_at_1_ci"], "{c}");
        let want = if c["model"] == "mock:oracle" {
            1.0
        } else {
            0.0
        };
        assert_eq!(c["pass_at_1"].as_f64(), Some(want), "{c}");
        assert!(["benchmarks/smoke", lite_s.as_str()].contains(&c["benchmark"].as_str().unwrap()));
    }
    // Paired deltas against the reference (the first harness): one per other cell.
    let deltas = m["deltas"].as_array().unwrap();
    assert_eq!(deltas.len(), 4);
    assert!(deltas
        .iter()
        .all(|x| x["delta"] == 0.0 && x["against"] == "harness-seed"));
    let md = std::fs::read_to_string(out.join("matrix.md")).unwrap();
    assert!(md.contains("/lite · mock:nop"), "{md}");
    assert!(
        md.contains("cost unknown (no prices in the config)"),
        "{md}"
    );
    let html = std::fs::read_to_string(out.join("matrix.html")).unwrap();
    assert!(
        html.contains("<h2>benchmarks/smoke · mock:oracle</h2>"),
        "{html}"
    );
    assert!(
        !html.contains("<script") && !html.contains("<link"),
        "not self-contained"
    );
    // Rendered by a browser: 4 tables of 2 harnesses, an oracle bar per harness at 100%.
    if let Some(dom) = common::dump_dom(&out.join("matrix.html")) {
        assert_eq!(dom.matches("<table>").count(), 4, "{dom}");
        assert_eq!(
            dom.matches("class=\"bar\" style=\"width:80px\"").count(),
            4,
            "{dom}"
        );
    }

    // A third run reuses every cell and runs nothing.
    let o = ahe(&argv, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(results(&out), after);
    let m = matrix_json(&out);
    assert!(
        m["cells"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] == "reused"),
        "{m}"
    );
}

fn contributions(m: &Value) -> BTreeMap<String, (f64, [f64; 2])> {
    m["ablation"]["contributions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let ci = r["delta_ci"].as_array().unwrap();
            (
                r["type"].as_str().unwrap().to_string(),
                (
                    r["delta"].as_f64().unwrap(),
                    [ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap()],
                ),
            )
        })
        .collect()
}

#[test]
fn ablations_credit_the_gain_to_memory_alone_removed_or_added() {
    let d = tempfile::tempdir().unwrap();
    let evolved = evolved(d.path());
    let script = format!("mock:script={}", lesson_script(d.path()).display());
    for (mode, sign) in [("components", "-"), ("add-one", "+")] {
        let out = d.path().join(mode);
        let o = ahe(
            &[
                "matrix",
                "--harness",
                "harness-seed",
                "--harness",
                evolved.to_str().unwrap(),
                "--benchmark",
                "benchmarks/smoke",
                "--model",
                &script,
                "-k",
                "2",
                "--sandbox",
                "local",
                "--ablate",
                mode,
                "--out",
                out.to_str().unwrap(),
                "--json",
            ],
            &[],
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let m: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(m["ablation"]["mode"], mode);
        let c = contributions(&m);
        // The three changed types, and only they, were ablated.
        let types: Vec<&String> = c.keys().collect();
        assert_eq!(
            types,
            ["memory", "system_prompt", "tool_descriptions"],
            "{m}"
        );
        let (mem, ci) = c["memory"];
        assert_eq!(mem, 1.0, "{m}");
        assert!(ci[0] > 0.0, "memory's interval excludes 0: {ci:?}");
        for t in ["system_prompt", "tool_descriptions"] {
            let (x, ci) = c[t];
            assert_eq!(x, 0.0, "{t}: {m}");
            assert!(ci[0] <= 0.0 && ci[1] >= 0.0, "{t}: {ci:?}");
        }
        let labels: Vec<&str> = m["harnesses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["label"].as_str().unwrap())
            .collect();
        assert!(
            labels
                .iter()
                .any(|l| l.ends_with(&format!(" {sign}memory"))),
            "{labels:?}"
        );
        let md = std::fs::read_to_string(out.join("matrix.md")).unwrap();
        assert!(md.contains("Component contributions"), "{md}");
    }
}

#[test]
fn a_cell_that_fails_as_infrastructure_is_marked_not_scored() {
    if !common::docker_ready() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // A benchmark whose only task names an image this engine does not have (pull = never).
    let bad = d.path().join("absent-image");
    copy_dir(
        &root().join("benchmarks/smoke/hello-file"),
        &bad.join("hello-file"),
    );
    std::fs::remove_dir_all(bad.join("hello-file/environment")).unwrap();
    let toml = bad.join("hello-file/task.toml");
    let t = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        t.replace(
            "memory_mb = 512",
            "memory_mb = 512\ndocker_image = \"ahe-test/absent:1\"",
        ),
    )
    .unwrap();
    let run_cfg = d.path().join("run.toml");
    std::fs::write(
        &run_cfg,
        format!(
            "extends = \"{}\"\n[sandbox]\nbackend = \"docker\"\npull = \"never\"\ninfra_retries = 0\n",
            root().join("configs/base.toml").display()
        ),
    )
    .unwrap();
    let mfile = d.path().join("matrix.toml");
    std::fs::write(
        &mfile,
        format!(
            "run_config = \"{}\"\nharnesses = [\"harness-seed\"]\nbenchmarks = [\"benchmarks/smoke\", \"{}\"]\nmodels = [\"oracle\"]\nk = 1\n[model.oracle]\nprovider = \"mock\"\nmodel = \"oracle\"\n",
            run_cfg.display(),
            bad.display()
        ),
    )
    .unwrap();
    let out = d.path().join("mx");
    let o = ahe(
        &[
            "matrix",
            "--config",
            mfile.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let m: Value = serde_json::from_slice(&o.stdout).unwrap();
    let cells = m["cells"].as_array().unwrap();
    let good = cells
        .iter()
        .find(|c| c["benchmark"] == "benchmarks/smoke")
        .unwrap();
    assert_eq!(
        (good["status"].as_str(), good["pass_at_1"].as_f64()),
        (Some("ok"), Some(1.0)),
        "{good}"
    );
    let infra = cells
        .iter()
        .find(|c| c["benchmark"] != "benchmarks/smoke")
        .unwrap();
    assert_eq!(infra["status"], "infra_error", "{infra}");
    assert!(
        infra["pass_at_1"].is_null(),
        "an infra failure is not a score: {infra}"
    );
    assert!(
        infra["message"]
            .as_str()
            .unwrap()
            .contains("infrastructure"),
        "{infra}"
    );
    assert!(!out
        .join(infra["dir"].as_str().unwrap())
        .join("scores.json")
        .exists());
    let md = std::fs::read_to_string(out.join("matrix.md")).unwrap();
    assert!(md.contains("infra_error"), "{md}");
}

#[test]
fn an_ablation_that_does_not_validate_is_reported_and_not_run() {
    let d = tempfile::tempdir().unwrap();
    // The evolved harness adds a script tool: its description (tools/hello.toml), its code
    // (tools/hello.py) and its registration (agent.toml).
    let h = d.path().join("evolved");
    copy_dir(&root().join("harness-seed"), &h);
    std::fs::write(
        h.join("tools/hello.toml"),
        "name = \"hello\"\ndescription = \"Says hello.\"\nimplementation = \"script:tools/hello.py\"\n[input_schema]\ntype = \"object\"\n",
    )
    .unwrap();
    std::fs::write(
        h.join("tools/hello.py"),
        "print('{\"ok\": true, \"output\": \"hello\"}')\n",
    )
    .unwrap();
    let agent = std::fs::read_to_string(h.join("agent.toml")).unwrap();
    std::fs::write(
        h.join("agent.toml"),
        agent.replace(
            "tools = [\"run_shell\"]",
            "tools = [\"run_shell\", \"hello\"]",
        ),
    )
    .unwrap();
    assert!(
        ahe_harness::load(&h).is_ok(),
        "the evolved harness itself is valid"
    );
    let out = d.path().join("mx");
    let o = ahe(
        &[
            "matrix",
            "--harness",
            "harness-seed",
            "--harness",
            h.to_str().unwrap(),
            "--benchmark",
            "benchmarks/smoke",
            "--model",
            "mock:nop",
            "-k",
            "1",
            "--sandbox",
            "local",
            "--ablate",
            "components",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let m: Value = serde_json::from_slice(&o.stdout).unwrap();
    let cell = |label: &str| {
        m["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["harness"] == label)
            .cloned()
            .unwrap_or_else(|| panic!("no cell {label}: {m}"))
    };
    let evolved = h.to_str().unwrap();
    // Without its description, agent.toml enables a tool that does not exist: invalid.
    let bad = cell(&format!("{evolved} -tool_descriptions"));
    assert_eq!(bad["status"], "invalid_harness", "{bad}");
    assert!(bad["message"].as_str().unwrap().contains("hello"), "{bad}");
    assert!(bad["pass_at_1"].is_null(), "{bad}");
    assert!(
        !out.join(bad["dir"].as_str().unwrap())
            .join("trials")
            .exists(),
        "not run"
    );
    // Without the registration the tool is merely off: valid, and run.
    assert_eq!(cell(&format!("{evolved} -agent_config"))["status"], "ok");
}
