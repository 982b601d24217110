//! The Debug phase (R_t = Debugger(~T_t)): the debuggers started during the rollout
//! ([`DebugOverlap`]) and those of every other visible task, with the debugger model's client.
//! `host_agent` and `text` are the debugger's way in the one agent loop and its model-facing
//! text; the Evolve phase's agents run the same way.

pub mod eval;
pub mod host_agent;
pub mod overlap;
pub mod overview;
pub mod task;
pub mod text;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::debug::host_agent::stop_on_permanent;
use crate::debug::overlap::DebugOverlap;
use crate::debug::task::DebugSettings;
use crate::inputs::ledger::Ledger;
use ahe_rundir::journal::Phase;
use ahe_rundir::run_dir::{IterationDir, RunDir};
use ahe_runner::config::EvolveConfig;

/// What the debug phase of one iteration reads.
pub struct DebugInputs<'a> {
    /// The iteration whose trials are analysed.
    pub it: &'a IterationDir,
    /// Trials per task (a debugger starts once a task has them all).
    pub k: u32,
    /// The tasks analysed (held-out tasks never are).
    pub visible: &'a BTreeSet<String>,
    /// The run directory (the previous iteration's failure patterns).
    pub dir: &'a RunDir,
    /// `[evolve]`: the debugger's limits and the overview's context.
    pub evolve: &'a EvolveConfig,
    /// The `debugger` model.
    pub model: ahe_model::ModelConfig,
    /// Client options (the run's cache and budget).
    pub opts: ahe_model::ClientOptions,
    /// Notes and the journal (whether the phase already finished).
    pub ledger: Ledger<'a>,
}

/// The debuggers of the iteration to start during its rollout; None when its debug phase
/// already finished (a resumed run).
pub fn debugger_ahead(i: &DebugInputs) -> anyhow::Result<Option<DebugOverlap>> {
    if i.ledger.journal.phase_done(i.it.number(), Phase::Debug) {
        return Ok(None);
    }
    let s = settings_for(i.evolve, &i.model, &i.opts)?;
    Ok(Some(DebugOverlap::for_iteration(
        i.it,
        i.k,
        i.visible.clone(),
        s,
    )))
}

/// The debugger's settings from `[evolve]`, with a client of `model` (also used by `ahe
/// debug EVAL_DIR` outside the loop).
pub fn settings_for(
    ec: &EvolveConfig,
    model: &ahe_model::ModelConfig,
    opts: &ahe_model::ClientOptions,
) -> anyhow::Result<DebugSettings> {
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
pub fn overview_chars_for(ec: &EvolveConfig, m: &ahe_model::ModelConfig) -> usize {
    match ec.overview_context_chars {
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
pub async fn debug_phase(i: &DebugInputs<'_>, ahead: Option<&DebugOverlap>) -> anyhow::Result<()> {
    let (it, t) = (i.it, i.it.number());
    let (done, settings) = match ahead.and_then(|a| a.settings.clone().map(|s| (a, s))) {
        Some((a, s)) => (a.finish().await.0, s),
        None => (
            Vec::new(),
            Arc::new(settings_for(i.evolve, &i.model, &i.opts)?),
        ),
    };
    let visible: Vec<String> = i.visible.iter().cloned().collect();
    let scores = it.scores()?.scores;
    let r = crate::debug::task::debug(it, &visible, &scores, &settings, done).await?;
    it.record_role_cost("debugger", &r.usage, r.cost_usd)?;
    stop_on_permanent(settings.model.as_ref(), "debugger")?;
    let prev = (t > 1).then(|| i.dir.iteration(t - 1).patterns()).flatten();
    let model = settings.model.as_ref();
    let chars = overview_chars_for(i.evolve, &i.model);
    let o = overview::write_overview(it, prev.as_ref(), &visible, &scores, model, chars, &r.list);
    // The overview's trace is appended across attempts: what it held before this one.
    let (mut usage, mut cost) = crate::inputs::spend::trace_spend(&it.overview_trace());
    let o = o.await?;
    usage.add(&o.usage);
    cost += o.cost_usd;
    it.record_role_cost("overview", &usage, cost)?;
    if let Some(why) = &o.patterns.fallback {
        let msg = format!("overview: no failure patterns ({why}); the per-task list stands alone");
        i.ledger.note(t, msg)?;
    }
    for task in &r.llm_failures {
        let msg =
            format!("debugger: no LLM analysis for {task}; the deterministic report stands alone");
        i.ledger.note(t, msg)?;
    }
    Ok(())
}
