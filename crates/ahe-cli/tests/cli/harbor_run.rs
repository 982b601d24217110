//! A job made live by Harbor's own CLI (`harbor run`, its oracle agent, its docker
//! environment) on two smoke tasks passes, imports with `ahe import harbor`, and shows its
//! passes in `ahe show` and `ahe report`. The Harbor venv comes from
//! scripts/setup-harbor.sh; the test is skipped only when that cannot make it (or, as every
//! docker test, without a Docker engine and ahe-base:bookworm), and never under CI=true.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ahe, docker_ready, json_file, root, text};

/// The Harbor venv's `harbor` (made by scripts/setup-harbor.sh), or None (skip) outside CI.
fn harbor_cli() -> Option<PathBuf> {
    let o = Command::new("bash")
        .arg(root().join("scripts/setup-harbor.sh"))
        .output()
        .unwrap();
    let py = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let cli = Path::new(&py).with_file_name("harbor");
    if o.status.success() && cli.is_file() {
        return Some(cli);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "scripts/setup-harbor.sh could not make the Harbor venv (required when CI=true):\n{}",
        text(&o)
    );
    eprintln!(
        "note: skipped: scripts/setup-harbor.sh could not make the Harbor venv:\n{}",
        text(&o)
    );
    None
}

/// Copies smoke tasks; `allow_internet = true` because Harbor enforces `false` with an
/// egress-control sidecar whose images (gogost/gost, alpine) come from Docker Hub, which
/// this offline machine cannot reach ("network_mode='no-network' is not supported").
fn tasks(dir: &Path, names: &[&str]) {
    for n in names {
        let from = root().join("benchmarks/smoke").join(n);
        let o = Command::new("cp")
            .arg("-r")
            .arg(&from)
            .arg(dir.join(n))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let toml = dir.join(n).join("task.toml");
        let t = std::fs::read_to_string(&toml).unwrap();
        std::fs::write(
            &toml,
            t.replace("allow_internet = false", "allow_internet = true"),
        )
        .unwrap();
    }
}

#[test]
fn a_passing_harbor_run_job_imports_shows_and_reports() {
    // The smoke tasks build FROM ahe-base:bookworm on the local engine.
    if !docker_ready() {
        return;
    }
    let Some(harbor) = harbor_cli() else { return };
    let d = tempfile::tempdir().unwrap();
    let task_dir = d.path().join("tasks");
    std::fs::create_dir_all(&task_dir).unwrap();
    tasks(&task_dir, &["hello-file", "fix-sum"]);
    let jobs = d.path().join("jobs");
    let o = Command::new(&harbor)
        .args(["run", "-p"])
        .arg(&task_dir)
        .args(["-a", "oracle", "-e", "docker", "-k", "1", "-n", "2", "-o"])
        .arg(&jobs)
        .args(["--job-name", "oracle-job", "-y", "-q"])
        // Offline: LiteLLM must not fetch its price list.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .unwrap();
    let job = jobs.join("oracle-job");
    assert!(
        o.status.success() && job.join("result.json").is_file(),
        "harbor run failed: {}",
        text(&o)
    );
    let r = json_file(&job.join("result.json"));
    assert_eq!(r["n_total_trials"], 2, "{r}");

    let eval = d.path().join("eval");
    let (job_s, eval_s) = (job.to_str().unwrap(), eval.to_str().unwrap());
    let o = ahe(&["import", "harbor", job_s, "--out", eval_s], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let scores = json_file(&eval.join("scores.json"));
    assert_eq!(scores["pass_at_1"], 1.0, "{scores}");
    for t in ["hello-file", "fix-sum"] {
        let ts = &scores["tasks"][t];
        assert_eq!(
            (ts["passed"].as_u64(), ts["k"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(ts["status"], "pass", "{ts}");
    }
    assert_eq!(scores["meta"]["model"], "oracle");
    let wall = scores["durations"]["wall_sec"].as_f64().unwrap();
    assert!(wall > 1.0, "the job's own wall time: {wall}");
    // The oracle writes no trajectory; its log and the verifier's output come along.
    let t = eval.join("trials/fix-sum/1");
    let log = std::fs::read_to_string(t.join("agent.log")).unwrap();
    assert!(log.contains("==> agent/oracle.txt <=="), "{log}");
    assert!(t.join("verifier/stdout.txt").is_file());

    let o = ahe(&["show", eval_s], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shown = text(&o);
    assert!(shown.contains("pass@1 = 1.000"), "{shown}");
    let o = ahe(&["show", eval_s, "--task", "hello-file"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("pass"), "{}", text(&o));

    let o = ahe(&["report", eval_s], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let md = std::fs::read_to_string(eval.join("report.md")).unwrap();
    assert!(md.contains("pass@1: **1.000**"), "{md}");
    assert!(md.contains("tasks passed: 2 of 2"), "{md}");
    for t in ["hello-file", "fix-sum"] {
        assert!(md.contains(&format!("| {} | 1/1 |", t)), "{md}");
        assert!(eval.join(format!("report/trials/{t}/1.html")).is_file());
    }
    let html = std::fs::read_to_string(eval.join("report.html")).unwrap();
    assert!(html.contains("imported from") && html.contains("oracle-job"));
    eprintln!("harbor run job: {shown}");
}
