//! `ahe show EVAL_DIR [--task T] [--json]`: an evaluation directory (`ahe eval --out`,
//! `ahe import harbor --out`) rather than a run: its per-task table, or one task's trials.

use std::path::Path;

use ahe_bench::EvalDir;

use crate::CliError;

/// Whether `dir` is an evaluation directory (its `scores.json`), not a run (no journal,
/// `run.toml` or `iterations/`).
pub(crate) fn is_eval_dir(dir: &Path) -> bool {
    !ahe_rundir::RunDir::new(dir).looks_like_run() && EvalDir::new(dir).scores_path().is_file()
}

/// Prints the evaluation's table (or `scores.json` with `json`), or one task's trials.
pub(super) fn show(dir: &Path, task: Option<&str>, json: bool) -> Result<(), CliError> {
    let ev = EvalDir::new(dir);
    let scores = ev.read_scores().map_err(CliError::usage)?;
    let Some(task) = task else {
        if json {
            let doc = serde_json::to_string_pretty(&scores).map_err(CliError::failed)?;
            println!("{doc}");
        } else {
            print!("{}", super::clean(&ahe_bench::eval::table(&scores)));
        }
        return Ok(());
    };
    if !scores.tasks.contains_key(task) {
        return Err(CliError::usage(anyhow::anyhow!(
            "{}: no task {task:?} in this evaluation",
            dir.display()
        )));
    }
    let mut results: Vec<ahe_bench::TrialResult> = ev
        .trial_dirs()
        .into_iter()
        .filter(|t| t.task() == task)
        .filter_map(|t| t.read_result().ok())
        .collect();
    results.sort_by_key(|r| r.attempt);
    if json {
        let doc = serde_json::json!({"kind": "eval_task", "task": task, "trials": results});
        let doc = serde_json::to_string_pretty(&doc).map_err(CliError::failed)?;
        println!("{doc}");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.attempt.to_string(),
                r.status.as_str().to_string(),
                r.reward.map_or("-".into(), |x| format!("{x}")),
                r.turns.to_string(),
                format!("{:.1}s", r.timings.total_ms as f64 / 1000.0),
                super::clean(r.error.as_deref().unwrap_or("")),
            ]
        })
        .collect();
    let head = ["trial", "status", "reward", "turns", "time", "error"];
    print!("{}", super::table(&head, &rows, &[0, 2, 3, 4]));
    Ok(())
}
