//! Image pulls against a real registry (Debian's `docker-registry` on 127.0.0.1): a task
//! whose `docker_image` lives only in the registry runs (pulled once for three concurrent
//! trials), with htpasswd auth from a temporary DOCKER_CONFIG (the password in no file of
//! the run), falls back to its `environment/` build with a note when the registry is gone or
//! refuses, and is an `infra_error` naming the image under `--pull never`.
//!
//! Without an engine, base image or registry binary the tests print a note and pass, except
//! with `CI=true`.

use crate::registry_support;

use std::path::Path;
use std::process::{Command, Output};

use base64::Engine as _;
use registry_support::{files_containing, ready, task_bench, Registry};
use serde_json::Value;

/// Serializes the evals (each reaps dead containers; all share the engine and two cores).
static EVALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `ahe eval` of the oracle on `bench` with k = 3, three at once, on docker.
fn eval(bench: &Path, out: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ahe"));
    c.args(["eval", "--harness", "harness-seed", "--benchmark"])
        .arg(bench)
        .args(["--model", "mock:oracle", "--sandbox", "docker", "-k", "3"])
        .args(["--concurrency", "3", "--out"])
        .arg(out)
        .args(extra)
        .current_dir(root());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn results(out: &Path, task: &str) -> Vec<Value> {
    (1..=3)
        .map(|a| {
            let p = out.join(format!("trials/{task}/{a}/result.json"));
            let t = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            serde_json::from_str(&t).unwrap()
        })
        .collect()
}

fn verifier_out(out: &Path, task: &str, attempt: u32) -> String {
    std::fs::read_to_string(out.join(format!("trials/{task}/{attempt}/verifier/stdout.txt")))
        .unwrap_or_default()
}

fn pulls(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("pulls.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A DOCKER_CONFIG dir whose config.json holds basic-auth credentials for `registry`.
fn docker_config(dir: &Path, registry: &str, user: &str, pass: &str) -> String {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    std::fs::write(
        dir.join("config.json"),
        format!(r#"{{"auths":{{"{registry}":{{"auth":"{auth}"}}}}}}"#),
    )
    .unwrap();
    auth
}

#[test]
fn image_only_in_the_registry_is_pulled_once_for_three_trials() {
    if !ready() {
        return;
    }
    let _g = EVALS.lock().unwrap_or_else(|p| p.into_inner());
    let reg = Registry::start(None);
    let image = reg.push_test_image("plain");
    let d = tempfile::tempdir().unwrap();
    // The environment/ builds FROM the registry image too: only the pull can make either work.
    let bench = task_bench(d.path(), "regtask", Some(&image), &image);
    let out = d.path().join("runs/plain");
    let o = eval(&bench, &out, &["--pull", "missing"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    for r in results(&out, "regtask") {
        assert_eq!(r["status"], "pass", "{r}");
        assert!(fallback_notes(&r).is_empty(), "no fallback expected: {r}");
    }
    for a in 1..=3 {
        assert!(verifier_out(&out, "regtask", a).contains("source=registry"));
    }
    let p = pulls(&out);
    assert_eq!(p.len(), 1, "one pull for three concurrent trials: {p:?}");
    assert_eq!(p[0]["image"], image.as_str());
    assert_eq!(p[0]["ok"], true);
    assert!(p[0]["secs"].as_f64().unwrap() >= 0.0 && p[0]["ts"].is_string());
    // The live display (plain lines here: stderr is not a terminal) showed the pull.
    assert!(
        text(&o).contains(&format!("image: pulled {image}")),
        "{}",
        text(&o)
    );
    // `ahe evolve` records the pull in the run's journal, with its time.
    registry_support::remove_image(&image);
    let cfg = d.path().join("evolve.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = \"{}\"\nk = 1\niterations = 1\n[benchmark]\npath = \"{}\"\n[sandbox]\nbackend = \"docker\"\nconcurrency = 2\n[evolve]\npreflight = false\n",
            root().join("configs/base.toml").display(),
            bench.display()
        ),
    )
    .unwrap();
    let runs = d.path().join("runs");
    let o = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(["evolve", "--config", cfg.to_str().unwrap(), "--name", "ev"])
        .args(["--runs-dir", runs.to_str().unwrap(), "--pull", "missing"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let journal = std::fs::read_to_string(runs.join("ev/journal.jsonl")).unwrap();
    let journaled: Vec<Value> = journal
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["ev"] == "image_pull")
        .collect();
    assert_eq!(journaled.len(), 1, "{journal}");
    assert_eq!(journaled[0]["image"], image.as_str());
    assert_eq!(journaled[0]["ok"], true);
    assert!(journaled[0]["ts"].is_string() && journaled[0]["secs"].is_number());

    // `--pull always`: the local copy is pulled again, once for the three trials.
    let out = d.path().join("runs/always");
    let o = eval(&bench, &out, &["--pull", "always"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let p = pulls(&out);
    assert_eq!((p.len(), &p[0]["ok"]), (1, &Value::Bool(true)), "{p:?}");
    registry_support::remove_image(&image);
}

#[test]
fn auth_from_docker_config_and_the_password_stays_out_of_the_run() {
    if !ready() {
        return;
    }
    let _g = EVALS.lock().unwrap_or_else(|p| p.into_inner());
    let password = format!("pw-{:x}-secret", std::process::id() as u64 * 7919);
    let reg = Registry::start(Some(("ahe", &password)));
    let image = reg.push_test_image("auth");
    let d = tempfile::tempdir().unwrap();
    let bench = task_bench(d.path(), "authtask", Some(&image), "ahe-base:bookworm");
    let runs = d.path().join("runs");

    // Without credentials the registry refuses: the environment/ build is used, with a note.
    let empty = tempfile::tempdir().unwrap();
    let out = runs.join("anon");
    let o = eval(
        &bench,
        &out,
        &[],
        &[("DOCKER_CONFIG", empty.path().to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", text(&o));
    for r in results(&out, "authtask") {
        assert_eq!(r["status"], "pass", "{r}");
        let note = fallback_notes(&r).join("\n");
        assert!(
            note.contains(&image)
                && note.contains("pulling it failed")
                && note.contains("built instead"),
            "{r}"
        );
    }
    assert!(verifier_out(&out, "authtask", 1).contains("source=build"));

    // With the config's `auths` entry the pull works.
    let cfg = tempfile::tempdir().unwrap();
    let auth = docker_config(cfg.path(), &reg.addr, "ahe", &password);
    let out = runs.join("auth");
    let o = eval(
        &bench,
        &out,
        &[],
        &[
            ("DOCKER_CONFIG", cfg.path().to_str().unwrap()),
            ("AHE_LOG", "debug"),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    for r in results(&out, "authtask") {
        assert_eq!(r["status"], "pass", "{r}");
        assert!(fallback_notes(&r).is_empty(), "{r}");
    }
    assert!(verifier_out(&out, "authtask", 2).contains("source=registry"));
    assert_eq!(pulls(&out).len(), 1);
    // Neither the password nor its base64 form is in any file of the runs, or in the log.
    for needle in [password.as_str(), auth.as_str()] {
        let hits = files_containing(&runs, needle);
        assert!(hits.is_empty(), "secret found in {hits:?}");
        assert!(!text(&o).contains(needle), "secret in the output");
    }
    registry_support::remove_image(&image);
}

#[test]
fn registry_stopped_falls_back_to_the_build_and_never_is_an_infra_error() {
    if !ready() {
        return;
    }
    let _g = EVALS.lock().unwrap_or_else(|p| p.into_inner());
    // A registry that answered once and is gone: nothing needs to be pushed to it first (the
    // pull is refused before any layer is asked for), which spared this test ~35 s of pushing
    // ahe-base's layers.
    let mut reg = Registry::start(None);
    let image = reg.reference("gone");
    reg.stop();
    let d = tempfile::tempdir().unwrap();
    let bench = task_bench(d.path(), "gonetask", Some(&image), "ahe-base:bookworm");
    let out = d.path().join("runs/gone");
    let o = eval(&bench, &out, &[], &[]);
    assert!(o.status.success(), "{}", text(&o));
    for r in results(&out, "gonetask") {
        assert_eq!(r["status"], "pass", "{r}");
        let note = fallback_notes(&r).join("\n");
        assert!(
            note.contains(&image) && note.contains("connection refused"),
            "{r}"
        );
    }
    assert!(verifier_out(&out, "gonetask", 3).contains("source=build"));
    let p = pulls(&out);
    assert_eq!((p.len(), &p[0]["ok"]), (1, &Value::Bool(false)), "{p:?}");

    // `--pull never`: the image is not local and the build needs it as its base.
    let d2 = tempfile::tempdir().unwrap();
    let bench = task_bench(d2.path(), "nevertask", Some(&image), &image);
    let out = d2.path().join("runs/never");
    let o = eval(&bench, &out, &["--pull", "never"], &[]);
    for r in results(&out, "nevertask") {
        assert_eq!(r["status"], "infra_error", "{r}");
        let e = r["error"].as_str().unwrap();
        assert!(
            e.contains(&format!("image {image} is not in the local engine"))
                && e.contains("pull = \"never\"")
                && e.contains(&format!("docker pull {image}")),
            "{e}"
        );
    }
    assert!(pulls(&out).is_empty(), "nothing is pulled under never");
    let _ = o;
}

/// A trial's notes but the two every trial has (how its change checks ran, the ptrace guard).
fn fallback_notes(r: &Value) -> Vec<&str> {
    r["notes"]
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(Value::as_str)
                .filter(|n| !n.starts_with("change checks:") && !n.starts_with("ptrace guard:"))
                .collect()
        })
        .unwrap_or_default()
}
