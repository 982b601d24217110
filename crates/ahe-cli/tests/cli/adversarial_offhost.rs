//! The adversarial suite where this host does not read the sandbox's layer: on a second
//! Docker engine reached as a remote engine of the pool (`remote = true`: its layer is never
//! read from here, although its data root is on this machine), the change checks and the
//! hand-over run inside each sandbox with ahe's static busybox. Its results must equal the
//! local docker backend's, task by task (`adversarial::every_hack_is_blocked_on_docker` runs
//! both at once), and every trial's notes must say the checks ran inside.

use crate::common;
use crate::pool_support;

use std::path::Path;

use common::{ahe, text};
use serde_json::Value;

/// The engine the suite runs on (its own data root, socket and bridge; see `pool_support`;
/// not one of the `pool` tests' engines 1–3, which those tests kill).
const ENGINE: u32 = 4;

/// A run config whose only Docker engine is `url`, treated as remote (the tests' start
/// window, as on the local docker run it is compared with).
pub fn remote_config(dir: &Path, url: &str) -> std::path::PathBuf {
    let sandbox = format!(
        "[sandbox]\nbackend = \"docker\"\nhosts = [{{name = \"far\", url = \"{url}\", \
         capacity = 4, remote = true}}]\n"
    );
    common::suite_config(dir, "remote", "benchmarks/adversarial", &sandbox)
}

/// `ahe bench check benchmarks/adversarial --oracle` with `config`, plus `args`; the
/// `--json` document and the dir holding the trial logs. It exits 1 when a check failed
/// (a control flagged): [`assert_same`] judges the document.
pub fn run_with(config: &Path, sandbox: &str, args: &[&str]) -> (Value, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let mut all = vec![
        "bench",
        "check",
        "benchmarks/adversarial",
        "--oracle",
        "--sandbox",
        sandbox,
        "--config",
        config.to_str().unwrap(),
        "--json",
        "--out",
        out.path().to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let o = ahe(&all, &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let doc = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    (doc, out)
}

/// The suite on the remote-flagged engine; `None` when this machine cannot start it.
pub fn remote_engine_suite() -> Option<(Value, tempfile::TempDir)> {
    let e = pool_support::engine(ENGINE)?;
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = remote_config(cfg_dir.path(), &e.url());
    // Four at once, like the local docker run: most of a trial's in-sandbox work waits on
    // the engine (copies in and out, execs).
    Some(run_with(&cfg, "docker", &["--concurrency", "4"]))
}

/// Each task's outcome: (hack blocked or control passed, flagged). A hack's pass/fail is not
/// compared: whether a racing hack (a survivor rewriting the tests, a loop writing the
/// reward) gets its write in before the hand-over ends it, and so fails instead of passing
/// flagged, depends on timing that differs between the host and the in-sandbox hand-over
/// (`survivor-rewrites-tests` went both ways); stopped either way is the result.
fn outcomes(doc: &Value) -> Vec<(String, bool, bool)> {
    let mut v: Vec<(String, bool, bool)> = (doc["tasks"].as_array().unwrap().iter())
        .map(|t| {
            let o = &t["oracle"];
            let name = t["name"].as_str().unwrap().to_string();
            let (pass, flagged) = (o["status"] == "pass", o["suspect"] == true);
            if o["hack"] == true {
                (name, !pass || flagged, false)
            } else {
                (name, pass, flagged)
            }
        })
        .collect();
    v.sort();
    v
}

/// `other` (a run where the checks ran inside the sandbox) has the outcome of `local` for
/// every task (`ctl-pytest-plugin` too: its flag is settled by a counterfactual copy made on
/// the pool host the trial ran on), and each of its trials says in its notes how the checks
/// ran.
pub fn assert_same(local: &Value, other: &Value, what: &str) {
    let (want, got) = (outcomes(local), outcomes(other));
    assert_eq!(
        want, got,
        "{what}: outcomes differ from the local docker backend's"
    );
    for t in other["tasks"].as_array().unwrap() {
        let dir = t["oracle"]["trial_dir"].as_str().unwrap();
        let r: Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{dir}/result.json")).unwrap())
                .unwrap();
        let notes = r["notes"].to_string();
        assert!(
            notes.contains(
                "change checks and hand-over: inside the sandbox with ahe's static busybox"
            ),
            "{what}: {} does not say the checks ran inside: {notes}",
            t["name"]
        );
        assert!(
            r["change_set"]["inside_ms"].as_u64().is_some(),
            "{what}: {}: {r}",
            t["name"]
        );
    }
}

/// Every trial of `doc` says `what` in its notes.
pub fn assert_noted(doc: &Value, what: &str) {
    for t in doc["tasks"].as_array().unwrap() {
        let dir = t["oracle"]["trial_dir"].as_str().unwrap();
        let notes = std::fs::read_to_string(format!("{dir}/result.json")).unwrap();
        assert!(
            notes.contains(what),
            "{}: no {what:?} in {notes}",
            t["name"]
        );
    }
}

/// The in-sandbox cost per trial of a run (ms): (mean, max).
pub fn inside_cost(doc: &Value) -> (u64, u64) {
    let ms: Vec<u64> = (doc["tasks"].as_array().unwrap().iter())
        .filter_map(|t| {
            let dir = t["oracle"]["trial_dir"].as_str()?;
            let r: Value =
                serde_json::from_str(&std::fs::read_to_string(format!("{dir}/result.json")).ok()?)
                    .ok()?;
            r["change_set"]["inside_ms"].as_u64()
        })
        .collect();
    let n = ms.len().max(1) as u64;
    (
        ms.iter().sum::<u64>() / n,
        ms.iter().copied().max().unwrap_or(0),
    )
}
