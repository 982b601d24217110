//! The Debug phase (R_t = Debugger(~T_t)): the debuggers started during the rollout
//! ([`DebugOverlap`]) and those of every other visible task, with the debugger model's client.

use std::sync::Arc;
use std::time::Duration;

use crate::debug::DebugSettings;
use crate::journal::Phase;
use crate::overlap::DebugOverlap;
use crate::overview;
use crate::run::{stop_on_permanent, Run};
use crate::run_dir::IterationDir;
use crate::RunConfig;

/// The debuggers of iteration `it` to start during its rollout; None when its debug
/// phase already finished (a resumed run).
pub fn debugger_ahead(run: &Run, it: &IterationDir) -> anyhow::Result<Option<DebugOverlap>> {
    if run.journal.phase_done(it.number(), Phase::Debug) {
        return Ok(None);
    }
    let visible = run.visible.clone();
    let s = debug_settings(run)?;
    Ok(Some(DebugOverlap::for_iteration(it, run.cfg.k, visible, s)))
}

/// The debugger's settings from `[evolve]`, with a client of the `debugger` model.
fn debug_settings(run: &Run) -> anyhow::Result<DebugSettings> {
    settings_for(&run.cfg, &run.cfg.model("debugger"), &run.client_opts())
}

/// The debugger's settings from a config's `[evolve]`, with a client of `model` (also used
/// by `ahe debug EVAL_DIR` outside the loop).
pub fn settings_for(
    cfg: &RunConfig,
    model: &ahe_model::ModelConfig,
    opts: &ahe_model::ClientOptions,
) -> anyhow::Result<DebugSettings> {
    let ec = &cfg.evolve;
    let client = ahe_model::build_client_with(model, opts)?;
    Ok(DebugSettings {
        model: Some(client),
        concurrency: ec.debugger_concurrency,
        timeout: Duration::from_secs_f64(ec.debugger_timeout_sec),
        max_turns: ec.debugger_max_turns,
        show_verifier_output: ec.show_verifier_output,
    })
}

/// Characters of reports one overview call reads: `[evolve] overview_context_chars`, else
/// twice a local debugger model's context in tokens (room left for the answer), else 200000.
fn overview_chars(run: &Run) -> usize {
    overview_chars_for(&run.cfg, &run.cfg.model("debugger"))
}

/// [`overview_chars`] of a config whose debugger is `m`.
pub fn overview_chars_for(cfg: &RunConfig, m: &ahe_model::ModelConfig) -> usize {
    match cfg.evolve.overview_context_chars {
        0 => match m.runs_locally() {
            true => 2 * m.context_tokens.unwrap_or(8192) as usize,
            false => 200_000,
        },
        n => n,
    }
}

/// Waits for the debuggers started during the rollout and records what they cost, for
/// a run that stops before its debug phase (budget spent).
pub async fn settle_debuggers(
    it: &IterationDir,
    ahead: Option<&DebugOverlap>,
) -> anyhow::Result<()> {
    let Some(a) = ahead else { return Ok(()) };
    let mut usage = ahe_model::Usage::default();
    let mut cost = 0.0;
    for d in a.finish().await.0.iter() {
        usage.add(&d.spent.0);
        cost += d.spent.1;
    }
    it.record_role_cost("debugger", &usage, cost)
}

/// The debug phase: waits for the debuggers started during the rollout, analyses every
/// other visible task (`analysis/`), and records the debugger's cost.
pub async fn debug_phase(
    run: &Run,
    it: &IterationDir,
    ahead: Option<&DebugOverlap>,
) -> anyhow::Result<()> {
    let t = it.number();
    let (done, settings) = match ahead.and_then(|a| a.settings.clone().map(|s| (a, s))) {
        Some((a, s)) => (a.finish().await.0, s),
        None => (Vec::new(), Arc::new(debug_settings(run)?)),
    };
    let visible: Vec<String> = run.visible.iter().cloned().collect();
    let scores = it.scores()?.scores;
    let r = crate::debug::debug(it, &visible, &scores, &settings, done).await?;
    it.record_role_cost("debugger", &r.usage, r.cost_usd)?;
    stop_on_permanent(settings.model.as_ref(), "debugger")?;
    let prev = (t > 1)
        .then(|| run.dir.iteration(t - 1).patterns())
        .flatten();
    let model = settings.model.as_ref();
    let chars = overview_chars(run);
    let o = overview::write_overview(it, prev.as_ref(), &visible, &scores, model, chars, &r.list);
    // The overview's trace is appended across attempts: what it held before this one.
    let (mut usage, mut cost) = crate::spend::trace_spend(&overview_trace(it));
    let o = o.await?;
    usage.add(&o.usage);
    cost += o.cost_usd;
    it.record_role_cost("overview", &usage, cost)?;
    if let Some(why) = &o.patterns.fallback {
        let msg = format!("overview: no failure patterns ({why}); the per-task list stands alone");
        run.note(t, msg)?;
    }
    for task in &r.llm_failures {
        let msg =
            format!("debugger: no LLM analysis for {task}; the deterministic report stands alone");
        run.note(t, msg)?;
    }
    Ok(())
}

/// The overview's `trace.jsonl` (every model call of its synthesis, appended).
fn overview_trace(it: &IterationDir) -> std::path::PathBuf {
    it.overview_trace_dir().join("trace.jsonl")
}
