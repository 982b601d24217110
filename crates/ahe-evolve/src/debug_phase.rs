//! The Debug phase (R_t = Debugger(~T_t)): the debuggers started during the rollout
//! ([`DebugOverlap`]) and those of every other visible task, with the debugger model's client.

use std::sync::Arc;
use std::time::Duration;

use crate::debug::DebugSettings;
use crate::journal::Phase;
use crate::overlap::DebugOverlap;
use crate::run::{stop_on_permanent, Run};
use crate::run_dir::IterationDir;

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
    let ec = &run.cfg.evolve;
    let client = ahe_model::build_client_with(&run.cfg.model("debugger"), &run.client_opts())?;
    Ok(DebugSettings {
        model: Some(client),
        concurrency: ec.debugger_concurrency,
        timeout: Duration::from_secs_f64(ec.debugger_timeout_sec),
        max_turns: ec.debugger_max_turns,
        show_verifier_output: ec.show_verifier_output,
    })
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
    for o in a.finish().await.0.iter().filter_map(|d| d.out.as_ref()) {
        usage.add(&o.usage);
        cost += o.cost_usd;
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
    for task in &r.llm_failures {
        let msg =
            format!("debugger: no LLM analysis for {task}; the deterministic report stands alone");
        run.note(t, msg)?;
    }
    Ok(())
}
