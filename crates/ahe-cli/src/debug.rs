//! `ahe debug EVAL_DIR [--config FILE] [--model SPEC]`: the debug phase on its own over an
//! evaluation directory (`ahe eval --out`, `ahe import harbor --out`): the debugger's
//! per-task reports and the benchmark overview under `EVAL_DIR/analysis/`.

use std::path::PathBuf;

use ahe_evolve::debug::eval::debug_eval_dir;
use ahe_model::ModelConfig;
use ahe_runner::config::base_config;
use ahe_runner::config::RunConfig;
use clap::Args;

use crate::CliError;

/// Arguments of `ahe debug`.
#[derive(Args)]
pub struct DebugArgs {
    /// Evaluation directory (what `ahe eval --out` or `ahe import harbor --out` wrote).
    dir: PathBuf,
    /// Run config whose `[models.debugger]` (else `[models.default]`) and `[evolve]` debugger
    /// limits are used (default: the shipped configs/base.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The debugger model as a SPEC (overrides the config's debugger role).
    #[arg(long)]
    model: Option<String>,
}

/// Runs `ahe debug`.
pub fn run(a: DebugArgs) -> Result<(), CliError> {
    if !crate::show::is_eval_dir(&a.dir) {
        return Err(CliError::usage(anyhow::anyhow!(
            "{}: not an evaluation directory (no scores.json, or it is a run: a run's \
             debug phase runs inside `ahe evolve`); pass what `ahe eval --out` or \
             `ahe import harbor --out` wrote",
            a.dir.display()
        )));
    }
    let cfg: RunConfig = match &a.config {
        Some(p) => RunConfig::load(p).map_err(CliError::usage)?,
        None => base_config().map_err(CliError::failed)?,
    };
    let model = match &a.model {
        Some(spec) => {
            ModelConfig::from_spec(spec).map_err(|e| CliError::usage(e.context("--model")))?
        }
        None => cfg.model("debugger"),
    };
    model
        .validate()
        .map_err(|e| CliError::usage(e.context("debugger model")))?;
    let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    let r = rt
        .block_on(debug_eval_dir(&a.dir, &cfg, &model))
        .map_err(CliError::failed)?;
    for (p, e) in &r.unclean {
        eprintln!("warning: {}: trace not cleaned: {e}", p.display());
    }
    for t in &r.llm_failures {
        eprintln!("note: debugger: no LLM analysis for {t}; the deterministic report stands alone");
    }
    if let Some(why) = &r.patterns_fallback {
        eprintln!("note: overview: no failure patterns ({why})");
    }
    println!(
        "debugger {}: {} task reports ({} by the model), {} failure patterns; {} in / {} out tokens, ${:.4}",
        r.model,
        r.tasks,
        r.llm_reports,
        r.patterns,
        r.debugger_usage.input_tokens + r.overview_usage.input_tokens,
        r.debugger_usage.output_tokens + r.overview_usage.output_tokens,
        r.debugger_cost_usd + r.overview_cost_usd
    );
    println!("overview: {}", r.overview.display());
    Ok(())
}
