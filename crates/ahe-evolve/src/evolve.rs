//! The Evolve phase ((H_t, C_t) = Evolve(H_eval', R_t, V_t, history)): automatic rollbacks
//! (`rollback = "auto"`), the evolve agent's edits and manifest, and the pre-flight check of
//! the new harness.

pub mod agent;
pub mod jail;
pub mod leak;
pub mod lineage;
pub mod preflight;
pub mod prompt;
pub mod screen;
pub mod variants;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::commit::rollback;
use crate::debug::host_agent::stop_on_permanent;
use crate::inputs::history;
use crate::inputs::run::Split;
use crate::inputs::trials::Trials;
use ahe_rundir::run_dir::{IterationDir, RunDir};
use ahe_runner::config::{AttributionConfig, EvolveConfig};
use ahe_runner::repo::caps::WriteCaps;
use ahe_runner::repo::iter_tag;

/// What the evolve phase of one iteration reads besides the trials interface (which also
/// holds the harness repository, notes and budget).
pub struct EvolvePhaseInputs<'a> {
    /// The iteration whose harness is evolved.
    pub it: &'a IterationDir,
    /// The harness commit it evaluated: the agent starts from it.
    pub evaluated: &'a str,
    /// The run directory (the history the agent reads).
    pub dir: &'a RunDir,
    /// The run's tasks (the agent sees the visible ones; the leak guard knows them all).
    pub split: Split<'a>,
    /// Trials per task.
    pub k: u32,
    /// `[evolve]`: the agent's limits, rollback policy, variants, pre-flight.
    pub evolve: &'a EvolveConfig,
    /// `[attribution]`: which verdicts roll back, and the screen's share of extra trials.
    pub policy: &'a AttributionConfig,
    /// The `evolve` model.
    pub model: ahe_model::ModelConfig,
}

/// Rolls back what the policy reverts, runs the evolve agent from the evaluated harness, and
/// pre-flights its edits.
pub async fn evolve_phase(
    i: &EvolvePhaseInputs<'_>,
    trials: &Trials<'_>,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    let (it, t, evaluated, repo) = (i.it, i.it.number(), i.evaluated, trials.repo);
    // A resumed evolve phase starts again from the evaluated harness.
    repo.reset_worktree(evaluated)?;
    let ev = it.change_evaluation()?;
    let rollbacks = rollbacks(i, trials, &ev)?;
    for n in &rollbacks.notes {
        trials.ledger.note(t, n.clone())?;
    }
    history::write_inputs(i.dir, t, i.split.visible)?;
    let past = lineage::past_changes(i.dir, t, &rollbacks.changes());
    let full = i.evolve.history_full_iterations;
    it.write_history_input(&lineage::history_md(i.dir, &past, t, full))?;
    // The prompt names the evaluated harness by its tag (iter-NNN), not its commit id:
    // ids hash the commit time, and a replayed run must send byte-identical requests.
    let prompt = prompt::prompt_vars(i.dir, t, &iter_tag(t - 1), &ev, &rollbacks.applied)?;
    let prompt = minijinja::context! { reverted => lineage::undone(&past), ..prompt };
    let ec = i.evolve;
    let model = ahe_model::build_client_with(&i.model, trials.client_opts())?;
    let (tasks, holdout) = (i.split.tasks, i.split.holdout);
    let inputs = agent::EvolveInputs {
        iteration: t,
        iter_dir: it,
        repo,
        evaluated,
        visible: i.split.visible,
        rollbacks: &rollbacks.applied,
        prompt,
        model: model.clone(),
        max_turns: ec.evolve_max_turns,
        timeout: Duration::from_secs_f64(ec.evolve_timeout_sec),
        show_verifier_output: ec.show_verifier_output,
        caps: WriteCaps::of(ec),
        leak: crate::evolve::leak::LeakSettings::build(ec.leak_guard, tasks, holdout),
        history: past,
        out: None,
    };
    let out = match ec.variants {
        0 | 1 => {
            // The trace is appended across attempts: what it holds now, a killed one spent.
            let (usage, cost) = crate::inputs::spend::trace_spend(&it.evolve_trace());
            let mut out = agent::evolve(inputs).await?;
            out.usage.add(&usage);
            out.cost_usd += cost;
            out
        }
        _ => {
            let start = rollbacks.start_tree(repo, evaluated)?;
            let v = crate::evolve::screen::Screen {
                evolve: ec,
                policy: i.policy,
                rollout_trials: tasks.len() * i.k as usize,
                trials,
            };
            variants::evolve_variants(&v, it, inputs, &start, cancel.clone()).await?
        }
    };
    it.record_role_cost("evolve", &out.usage, out.cost_usd)?;
    for n in &out.notes {
        trials.ledger.note(t, n.clone())?;
    }
    stop_on_permanent(Some(&model), "evolve")?;
    // Without budget the pre-flight trial would be refused and revert sound edits.
    if ec.preflight && !out.changed_files.is_empty() && trials.ledger.budget_spent(t).is_none() {
        let start = rollbacks.start_tree(repo, evaluated)?;
        preflight::preflight(trials, i.split, it, &start, cancel.clone()).await?;
    }
    Ok(())
}

/// The automatic rollbacks of HARMFUL changes, and of UNJUDGED ones unless `[attribution]
/// unjudged = "keep"` (`rollback = "auto"`, from iteration 2 on);
/// none under `rollback = "agent"`.
fn rollbacks(
    i: &EvolvePhaseInputs,
    trials: &Trials,
    ev: &ahe_attribution::attribute::ChangeEvaluation,
) -> anyhow::Result<rollback::Rollbacks> {
    let (it, t) = (i.it, i.it.number());
    if i.evolve.rollback != "auto" || t <= 1 {
        return Ok(rollback::Rollbacks::default());
    }
    // The canary's culprits are not in the evaluated harness any more.
    let gone = it.evidence().canary_reverted();
    let mut ev = ev.clone();
    ev.changes.retain(|c| !gone.contains(&c.id));
    let mut verdicts = vec![ahe_attribution::attribute::Verdict::Harmful];
    if i.policy.unjudged == "revert" {
        verdicts.push(ahe_attribution::attribute::Verdict::Unjudged);
    }
    let prev = i.dir.iteration(t - 1);
    rollback::auto_rollback_of(&prev, trials.repo, &ev, i.evaluated, &verdicts)
}
