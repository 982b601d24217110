//! What a trial on Harbor's docker environment costs in `docker compose` processes (≈ 0.2
//! CPU-s of Go start-up each, the backend's floor): counted by a `docker` on PATH that logs
//! its arguments and runs the real one. Through the Engine API (the default) a trial is one
//! `up` and one `down` — no `exec`, no `cp`, no `down` before the `up`; through Harbor's own
//! exec (`exec = "harbor"`) the commands and copies are compose processes again.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use super::{eval_cmd, harbor_ready, results};

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

/// Compose subcommands (and how many of each) of one smoke eval (k = 2) run with `exec`, and
/// its number of trials.
fn compose_calls(dir: &Path, exec: &str) -> (BTreeMap<String, usize>, usize) {
    let real = Command::new("sh")
        .args(["-c", "command -v docker"])
        .output()
        .unwrap();
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    let shim = dir.join(format!("shim-{exec}"));
    std::fs::create_dir_all(&shim).unwrap();
    let log = dir.join(format!("docker-{exec}.log"));
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec '{real}' \"$@\"\n",
        log.display()
    );
    let docker = shim.join("docker");
    std::fs::write(&docker, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&docker, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = super::exec_config(dir, exec);
    let (out, state) = (dir.join(format!("out-{exec}")), dir.join("state"));
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = eval_cmd("mock:oracle", &out, &state)
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
        if let Some(sub) = subcommand(line).filter(|s| per_environment.contains(&s.as_str())) {
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
    let (engine, trials) = compose_calls(d.path(), "engine");
    assert_eq!(trials, 8, "smoke: four tasks, k = 2");
    let expected = BTreeMap::from([("down".to_string(), trials), ("up".to_string(), trials)]);
    assert_eq!(engine, expected, "compose processes of {trials} trials");
    // Through Harbor's exec the same trials run their commands and copies as compose
    // processes (the shim sees them: the count above is not blind).
    let (harbor, _) = compose_calls(d.path(), "harbor");
    let execs = harbor.get("exec").copied().unwrap_or(0) + harbor.get("cp").copied().unwrap_or(0);
    assert!(execs >= 2 * trials, "{harbor:?}");
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
