//! The debug phase on its own (`ahe debug EVAL_DIR`): an evaluation directory (`ahe eval
//! --out`, `ahe import harbor --out`) gets what an iteration of the loop gets — cleaned
//! traces, the debugger's per-task reports under `analysis/detail/`, and the benchmark
//! overview (`analysis/overview.md`, `analysis/patterns.json`) — with the config's debugger
//! model. Every task of the evaluation is analysed (there is no held-out split here).

use std::path::{Path, PathBuf};

use ahe_bench::EvalDir;
use serde::Serialize;

use crate::debug::{overview_chars_for, settings_for};
use ahe_rundir::run_dir::IterationDir;
use ahe_runner::config::RunConfig;

/// What `ahe debug` did, as written to `analysis/debug.json`.
#[derive(Debug, Clone, Serialize)]
pub struct EvalDebug {
    /// The debugger model (`provider:model`).
    pub model: String,
    /// Tasks with a report under `analysis/detail/`.
    pub tasks: usize,
    /// Tasks the LLM debugger analysed.
    pub llm_reports: usize,
    /// Failing tasks whose LLM analysis failed (deterministic report only).
    pub llm_failures: Vec<String>,
    /// Trials whose trace could not be cleaned: (trial directory, reason).
    pub unclean: Vec<(PathBuf, String)>,
    /// Failure patterns the overview found.
    pub patterns: usize,
    /// Why the overview has no patterns, when it has none.
    pub patterns_fallback: Option<String>,
    /// Debugger tokens (per-task reports).
    pub debugger_usage: ahe_model::Usage,
    /// Debugger dollars (per-task reports).
    pub debugger_cost_usd: f64,
    /// Overview tokens.
    pub overview_usage: ahe_model::Usage,
    /// Overview dollars.
    pub overview_cost_usd: f64,
    /// `analysis/overview.md`.
    pub overview: PathBuf,
}

/// Runs the debug phase over every task of the evaluation at `dir` with `model` as the
/// debugger and `cfg`'s `[evolve]` limits; writes `analysis/` and `analysis/debug.json`.
/// Reports already under `analysis/detail/` are kept (delete them to analyse again).
pub async fn debug_eval_dir(
    dir: &Path,
    cfg: &RunConfig,
    model: &ahe_model::ModelConfig,
) -> anyhow::Result<EvalDebug> {
    let eval = EvalDir::new(dir);
    let scores = eval.read_scores()?;
    let clean = ahe_rundir::clean::clean_all(&eval.trials())?;
    let opts = ahe_model::ClientOptions {
        default_cache_dir: Some(eval.model_cache()),
        budget: None,
    };
    let settings = settings_for(&cfg.evolve, model, &opts)?;
    let it = IterationDir::at(dir);
    let tasks: Vec<String> = scores.tasks.keys().cloned().collect();
    let r = crate::debug::task::debug(&it, &tasks, &scores, &settings, Vec::new()).await?;
    let chars = overview_chars_for(&cfg.evolve, model);
    let client = settings.model.as_ref();
    let o =
        crate::debug::overview::write_overview(&it, None, &tasks, &scores, client, chars, &r.list);
    let o = o.await?;
    let out = EvalDebug {
        model: client.map(|c| c.describe()).unwrap_or_default(),
        tasks: r.tasks,
        llm_reports: r.llm_reports,
        llm_failures: r.llm_failures,
        unclean: clean.failed,
        patterns: o.patterns.patterns.len(),
        patterns_fallback: o.patterns.fallback.clone(),
        debugger_usage: r.usage,
        debugger_cost_usd: r.cost_usd,
        overview_usage: o.usage,
        overview_cost_usd: o.cost_usd,
        overview: it.overview_path(),
    };
    ahe_rundir::write_json(&it.debug_summary_path(), &out)?;
    Ok(out)
}
