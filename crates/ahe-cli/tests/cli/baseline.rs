//! `ahe baseline`: the seed's matched-budget pass@N after an evolve run (offline demo:
//! scripted mock models, no prices, so the budget is matched in tokens); resumable.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{ahe, text};
use serde_json::Value;

fn result_files(dir: &Path) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for t in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for a in std::fs::read_dir(t.path()).unwrap().flatten() {
            if let Ok(s) = std::fs::read_to_string(a.path().join("result.json")) {
                m.insert(a.path().display().to_string(), s);
            }
        }
    }
    m
}

#[test]
fn the_seed_gets_the_trials_the_evolve_spend_buys_and_its_pass_at_n_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let runs = d.path().join("runs");
    let o = ahe(
        &[
            "evolve",
            "--config",
            "configs/smoke-mock.toml",
            "--name",
            "demo",
            "--runs-dir",
            runs.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = runs.join("demo");
    let o = ahe(
        &[
            "baseline",
            "--run",
            run.to_str().unwrap(),
            "--max-trials",
            "6",
            "--json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let b: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(b["basis"], "tokens", "mock models name no prices: {b}");
    let affordable = b["affordable_per_task"].as_u64().unwrap();
    assert!(
        affordable >= 6,
        "the run's tokens buy more than the cap: {b}"
    );
    assert_eq!(b["n"], 6, "{b}");
    assert!(b["label"].as_str().unwrap().contains("perfect picker"));
    // The first iteration's k = 2 seed trials are reused: 4 more per task were run.
    let trials = run.join("baseline/trials");
    let files = result_files(&trials);
    let tasks = b["tasks"].as_u64().unwrap() as usize;
    assert_eq!(files.len(), tasks * 4, "{files:?}");
    // pass@6 from 6 samples per task is "any of them passed", averaged over tasks.
    let scores: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("baseline/scores.json")).unwrap())
            .unwrap();
    let per_task = scores["tasks"].as_object().unwrap();
    assert_eq!(per_task.len(), tasks);
    let any = per_task
        .values()
        .filter(|t| t["passed"].as_u64().unwrap() > 0)
        .count();
    let want = any as f64 / tasks as f64;
    assert!(
        (b["seed_pass_at_n"].as_f64().unwrap() - want).abs() < 1e-9,
        "{b}"
    );
    assert!(
        b["seed_pass_at_n"].as_f64() >= b["seed_pass_at_1"].as_f64(),
        "{b}"
    );
    let best: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("best.json")).unwrap()).unwrap();
    assert_eq!(b["best_pass_at_1"], best["pass_at_1"]);
    // Again, through the config: nothing re-runs, the same figures.
    let o = ahe(
        &[
            "baseline",
            "--config",
            "configs/smoke-mock.toml",
            "--name",
            "demo",
            "--runs-dir",
            runs.to_str().unwrap(),
            "--max-trials",
            "6",
            "--json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let again: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(again["seed_pass_at_n"], b["seed_pass_at_n"]);
    assert_eq!(result_files(&trials), files, "no trial ran twice");
    assert!(run.join("baseline/baseline.json").is_file());
}
