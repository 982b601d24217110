//! Every text a model reads in a run of the offline demo (system and user prompts of the
//! code agent, the debugger and the evolve agent; tool feedback; middleware messages) is
//! formatted for people: no Rust debug output (`Some(…)`, `None`), no template errors.

use crate::common;

use std::path::{Path, PathBuf};

use common::{ahe, text};
use serde_json::Value;

/// Every `trace.jsonl` under `dir`.
fn traces(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(traces(&p));
        } else if p.file_name().is_some_and(|n| n == "trace.jsonl") {
            out.push(p);
        }
    }
    out
}

/// The model-facing texts of one trace: prompts, tool observations, middleware messages.
fn model_facing(trace: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in std::fs::read_to_string(trace).unwrap().lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let kind = v["event"].as_str().unwrap_or("").to_string();
        for key in ["content", "output", "error", "message"] {
            if let Some(s) = v[key].as_str() {
                // A shell command's own output is the task's text, not ours.
                let ours = kind != "tool_call" || v["exit_code"].is_null();
                if ours {
                    out.push((format!("{kind}.{key}"), s.to_string()));
                }
            }
        }
    }
    out
}

fn debug_output(s: &str) -> Option<&'static str> {
    let re = regex::Regex::new(r"\bSome\(|\bNone\b|\[template error").unwrap();
    re.find(s).map(|m| match m.as_str() {
        "None" => "None",
        "[template error" => "[template error",
        _ => "Some(",
    })
}

#[test]
fn every_prompt_of_the_demo_run_is_formatted_for_people() {
    let d = tempfile::tempdir().unwrap();
    let runs = d.path().to_str().unwrap();
    let o = ahe(
        &[
            "evolve",
            "--config",
            "configs/smoke-mock.toml",
            "--name",
            "p",
            "--runs-dir",
            runs,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = d.path().join("p");
    let files = traces(&run);
    let roles = |needle: &str| files.iter().any(|f| f.to_string_lossy().contains(needle));
    assert!(roles("/trials/") && roles("/analysis/debugger/") && roles("/evolve/"));
    let mut texts = 0;
    let mut bad = Vec::new();
    for f in &files {
        for (what, s) in model_facing(f) {
            texts += 1;
            if let Some(m) = debug_output(&s) {
                bad.push(format!("{} {what}: {m} in {:.300}", f.display(), s));
            }
        }
    }
    // The evolve prompt of iteration 2 judges iteration 1's changes: its precision line is in.
    let evolve2 = run.join("iterations/002/evolve/trace.jsonl");
    let prompt: String = model_facing(&evolve2).into_iter().map(|(_, s)| s).collect();
    assert!(
        prompt.contains("Fix-prediction precision"),
        "{prompt:.2000}"
    );
    assert!(texts > 50, "only {texts} texts found");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_checker_catches_debug_output() {
    assert_eq!(debug_output("precision Some(1.0)"), Some("Some("));
    assert_eq!(
        debug_output("risk precision None, recall n/a"),
        Some("None")
    );
    assert_eq!(debug_output("precision 1.00, recall n/a"), None);
}
