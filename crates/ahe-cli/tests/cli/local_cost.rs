//! With the embedded local model, progress speaks of tokens and says once that there is no
//! API cost, instead of "cost unknown" on every line.

use crate::common;

use common::{ahe, root, text};

#[test]
fn an_eval_on_the_local_model_says_no_api_cost_once_and_counts_tokens() {
    if ahe_model::local::resolve_model_path(None).is_err() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the local model is required when CI=true (scripts/fetch-model.sh)"
        );
        eprintln!("note: no local model; skipping");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = \"{}\"\nk = 1\n[sandbox]\nbackend = \"local\"\n[agent]\nmax_turns = 2\n",
            root().join("configs/quickstart.toml").display()
        ),
    )
    .unwrap();
    let out = d.path().join("eval");
    let o = ahe(
        &[
            "eval",
            "--config",
            cfg.to_str().unwrap(),
            "--harness",
            "harness-seed",
            "--benchmark",
            "benchmarks/smoke",
            "--tasks",
            "hello-file",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.matches("local model: no API cost").count(), 1, "{e}");
    assert!(!e.contains("cost unknown"), "{e}");
    let line = e
        .lines()
        .find(|l| l.contains("hello-file #1"))
        .unwrap_or_else(|| panic!("no trial line: {e}"));
    let tokens: f64 = line
        .split(" · ")
        .find_map(|p| p.strip_suffix(" tokens"))
        .and_then(|n| n.trim_end_matches('k').parse().ok())
        .unwrap_or_else(|| panic!("no token count: {line}"));
    assert!(tokens > 0.0, "{line}");
}
