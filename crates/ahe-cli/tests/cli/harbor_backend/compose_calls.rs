//! What a trial on Harbor's docker environment costs in `docker compose` processes (≈ 0.2
//! CPU-s of Go start-up each, the backend's floor): counted by a `docker` on PATH that logs
//! its arguments and runs the real one. Through the Engine API (the default) a trial is one
//! `up` and one `down` — no `exec`, no `cp`, no `down` before the `up`; through Harbor's own
//! exec (`exec = "harbor"`) the commands and copies are compose processes again. The `up`
//! has no `--wait` (a 0.5 s poll) unless the image declares a HEALTHCHECK to wait for.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use super::{eval_on, harbor_ready, results};

/// The compose subcommand of one logged `docker` command line (`None`: not compose).
fn subcommand(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    words.by_ref().find(|w| *w == "compose")?;
    let mut words = words.peekable();
    while let Some(w) = words.next() {
        match w {
            "--project-name" | "--project-directory" | "-f" | "--file" | "-p" => {
                words.next();
            }
            w if w.starts_with('-') => {}
            w => return Some(w.to_string()),
        }
    }
    None
}

/// Compose subcommands (and how many of each; `up --wait` apart) of one eval of `bench`
/// (k = 2) run with `exec`, and its number of trials.
fn compose_calls(dir: &Path, bench: &Path, exec: &str) -> (BTreeMap<String, usize>, usize) {
    let real = Command::new("sh")
        .args(["-c", "command -v docker"])
        .output()
        .unwrap();
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    let name = format!("{}-{exec}", bench.file_name().unwrap().to_string_lossy());
    let shim = dir.join(format!("shim-{name}"));
    std::fs::create_dir_all(&shim).unwrap();
    let log = dir.join(format!("docker-{name}.log"));
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec '{real}' \"$@\"\n",
        log.display()
    );
    let docker = shim.join("docker");
    std::fs::write(&docker, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&docker, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = super::exec_config(dir, exec);
    let (out, state) = (dir.join(format!("out-{name}")), dir.join("state"));
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = eval_on(bench, "mock:oracle", &out, &state)
        .arg("--config")
        .arg(&cfg)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{exec}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rs = results(&out);
    assert!(rs.iter().all(|r| r["status"] == "pass"), "{exec}: {rs:#?}");
    let mut calls = BTreeMap::new();
    for line in std::fs::read_to_string(&log).unwrap_or_default().lines() {
        // What environments cost (not a preflight's `compose version`).
        let per_environment = ["up", "down", "exec", "cp", "build", "start", "stop", "run"];
        if let Some(mut sub) = subcommand(line).filter(|s| per_environment.contains(&s.as_str())) {
            if sub == "up" && line.split_whitespace().any(|w| w == "--wait") {
                sub.push_str(" --wait");
            }
            *calls.entry(sub).or_insert(0) += 1;
        }
    }
    (calls, rs.len())
}

pub(super) fn a_trial_through_the_engine_is_one_compose_up_and_one_down() {
    if !harbor_ready() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let smoke = Path::new("benchmarks/smoke");
    let (engine, trials) = compose_calls(d.path(), smoke, "engine");
    assert_eq!(trials, 8, "smoke: four tasks, k = 2");
    let expected = BTreeMap::from([("down".to_string(), trials), ("up".to_string(), trials)]);
    assert_eq!(engine, expected, "compose processes of {trials} trials");
    // Through Harbor's exec the same trials run their commands and copies as compose
    // processes (the shim sees them: the count above is not blind).
    let (harbor, _) = compose_calls(d.path(), smoke, "harbor");
    let execs = harbor.get("exec").copied().unwrap_or(0) + harbor.get("cp").copied().unwrap_or(0);
    assert!(execs >= 2 * trials, "{harbor:?}");
    // An image with a HEALTHCHECK: its `up` waits for it (and the trials pass).
    let bench = d.path().join("healthy");
    let task = bench.join("hello-file");
    copy_dir(&super::root().join(smoke).join("hello-file"), &task);
    let dockerfile = task.join("environment/Dockerfile");
    let mut text = std::fs::read_to_string(&dockerfile).unwrap();
    text.push_str(&format!(
        "HEALTHCHECK --interval=1s --timeout=5s CMD true\nLABEL ahe.test={}\n",
        std::process::id()
    ));
    std::fs::write(&dockerfile, text).unwrap();
    let (healthy, trials) = compose_calls(d.path(), &bench, "engine");
    // This test's own image goes (it is kept for later runs otherwise).
    let label = format!("label=ahe.test={}", std::process::id());
    let ids = Command::new("docker")
        .args(["images", "-q", "--filter", &label])
        .output()
        .unwrap();
    for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
        let _ = Command::new("docker").args(["rmi", "-f", id]).output();
    }
    let expected = BTreeMap::from([("down".into(), trials), ("up --wait".into(), trials)]);
    assert_eq!(healthy, expected, "compose processes of {trials} trials");
}

/// Copies directory `from` to `to` (files and directories).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn the_subcommand_is_read_past_the_options() {
    let line =
        "compose --project-name p --project-directory /d -f a.yaml -f b.json up --detach --wait";
    assert_eq!(subcommand(line).as_deref(), Some("up"));
    assert_eq!(subcommand("info --format x"), None);
    assert_eq!(
        subcommand("compose -p x exec -T main bash -c ls").as_deref(),
        Some("exec")
    );
}
