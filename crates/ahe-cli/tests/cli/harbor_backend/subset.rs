//! The adversarial suite's subset on Harbor's docker environment with host-side reading off
//! (the checks inside the sandbox), compared task by task with the docker backend.

use super::*;

/// Tasks of `benchmarks/adversarial` run on Harbor with host-side reading off: one per
/// mechanism (a start-up hook seen by its access time, shadowing judged against the image's
/// paths, image code patched, a survivor rewriting the tests, a background reward writer, a
/// kept server tracing the verifier) and controls (a pip install, a kept server).
/// `scripts/offhost-suite.sh` runs the whole suite.
const SUBSET: &str = "pth-hook,shadow-sha256sum,patched-pytest,survivor-rewrites-tests,\
bg-reward-writer,ptrace-verifier-status,ctl-install-module,ctl-server";

/// `ahe bench check benchmarks/adversarial --oracle` on `sandbox` (with `config`) for
/// [`SUBSET`]: each task's (name, passed, flagged) and the trial dirs.
fn subset(sandbox: &str, config: &Path, out: &Path) -> Vec<(String, bool, bool, String)> {
    subset_of(SUBSET, sandbox, config, out)
}

/// The same for the tasks `tasks` (comma-separated).
fn subset_of(
    tasks: &str,
    sandbox: &str,
    config: &Path,
    out: &Path,
) -> Vec<(String, bool, bool, String)> {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ahe"));
    c.current_dir(root()).args([
        "bench",
        "check",
        "benchmarks/adversarial",
        "--oracle",
        "--sandbox",
        sandbox,
        "--tasks",
        tasks,
        "--json",
        "--out",
        out.to_str().unwrap(),
        "--config",
    ]);
    c.arg(config);
    let o = c.output().unwrap();
    assert!(o.status.success(), "{sandbox}: {}", text(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut v: Vec<(String, bool, bool, String)> = (doc["tasks"].as_array().unwrap().iter())
        .map(|t| {
            let r = &t["oracle"];
            let name = t["name"].as_str().unwrap().to_string();
            let dir = r["trial_dir"].as_str().unwrap_or("").to_string();
            (name, r["status"] == "pass", r["suspect"] == true, dir)
        })
        .collect();
    v.sort();
    v
}

pub(super) fn adversarial_subset_checked_inside_the_sandbox_equals_docker() {
    if !harbor_ready() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // The tests' start window on both (bg-reward-writer leaves a busy loop).
    let harbor_env = "[sandbox]\nbackend = \"harbor\"\n[sandbox.harbor]\nenvironment = \
                      \"docker\"\nhost_layer = false\n";
    let cfg = common::suite_config(d.path(), "harbor", "benchmarks/adversarial", harbor_env);
    let docker_cfg = common::suite_config(d.path(), "docker", "benchmarks/adversarial", "");
    let (h_out, d_out) = (d.path().join("harbor"), d.path().join("docker"));
    let harbor = std::thread::scope(|s| {
        let h = s.spawn(|| subset("harbor", &cfg, &h_out));
        let docker = subset("docker", &docker_cfg, &d_out);
        let harbor = h.join().unwrap();
        // A hack's outcome is "stopped" (failed, or passed flagged), not which of the two:
        // whether a racing hack (`survivor-rewrites-tests`, `bg-reward-writer`) gets its write
        // in before the hand-over ends it depends on timing that differs between the host's
        // and the in-sandbox hand-over (it went both ways here, as on the remote engine; see
        // tests/cli/adversarial_offhost.rs). Controls compare exactly.
        let strip = |v: &[(String, bool, bool, String)]| -> Vec<(String, bool, bool)> {
            v.iter()
                .map(|(n, p, f, _)| match n.starts_with("ctl-") {
                    true => (n.clone(), *p, *f),
                    false => (n.clone(), !*p || *f, false),
                })
                .collect()
        };
        assert_eq!(strip(&docker), strip(&harbor), "harbor (inside) vs docker");
        harbor
    });
    for (name, passed, flagged, dir) in &harbor {
        let hack = !name.starts_with("ctl-");
        assert!(!hack || !passed || *flagged, "hack {name} won on harbor");
        assert!(
            hack || (*passed && !flagged),
            "control {name} failed or was flagged"
        );
        let r = json_file(&Path::new(dir).join("result.json"));
        let notes = r["notes"].to_string();
        assert!(
            notes.contains("change checks and hand-over: inside the sandbox"),
            "{name}: {notes}"
        );
    }
}

/// On Harbor's docker environment read from this host, a flagged pass is verified again in a
/// copy (its container committed through the Engine API, the copy started by Harbor from that
/// image); reached only through Harbor (`host_layer = false`, as the cloud environments), no
/// copy can be made, and the sandbox itself is reverted and verified again once its checks are
/// done. Both ways, a genuine pytest plugin beside a correct answer passes unflagged and a
/// plugin that makes the tests pass stays flagged.
pub(super) fn plugins_are_settled_with_or_without_a_copy_on_harbor_docker() {
    if !harbor_ready() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let ways = [
        ("engine", "", "in a copy of the sandbox"),
        (
            "harbor",
            "[sandbox.harbor]\nhost_layer = false\n",
            "in the sandbox itself",
        ),
    ];
    for (way, extra, at) in ways {
        let harbor_env = format!("[sandbox]\nbackend = \"harbor\"\n{extra}");
        let dir = d.path().join(way);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = common::suite_config(&dir, "harbor", "benchmarks/adversarial", &harbor_env);
        let tasks = "ctl-pytest-plugin,pytest-entrypoint-plugin";
        let got = subset_of(tasks, "harbor", &cfg, &dir.join("out"));
        let outcome: Vec<(&str, bool, bool)> = (got.iter())
            .map(|(n, p, f, _)| (n.as_str(), *p, *f))
            .collect();
        assert_eq!(
            outcome,
            [
                ("ctl-pytest-plugin", true, false),
                ("pytest-entrypoint-plugin", true, true)
            ],
            "{way}: (task, passed, flagged)"
        );
        let r = json_file(&Path::new(&got[0].3).join("result.json"));
        let notes = r["notes"].to_string();
        assert!(
            notes.contains(&format!("counterfactual verification: {at}")),
            "{way}: {notes}"
        );
    }
}
