//! The Evolve phase ((H_t, C_t) = Evolve(H_eval', R_t, V_t, history)): automatic rollbacks
//! (`rollback = "auto"`), the evolve agent's edits and manifest, and the pre-flight check of
//! the new harness.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::commit::iter_tag;
use crate::jail::WriteCaps;
use crate::run::{stop_on_permanent, Run};
use crate::run_dir::IterationDir;
use crate::{evolve, history, lineage, preflight, rollback, variants};

/// Rolls back what the policy reverts, runs the evolve agent from the evaluated harness, and
/// pre-flights its edits.
pub async fn evolve_phase(
    run: &Run,
    it: &IterationDir,
    evaluated: &str,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    let t = it.number();
    // A resumed evolve phase starts again from the evaluated harness.
    run.repo.reset_worktree(evaluated)?;
    let ev = it.change_evaluation()?;
    let rollbacks = rollbacks(run, it, &ev, evaluated)?;
    for n in &rollbacks.notes {
        run.note(t, n.clone())?;
    }
    history::write_inputs(&run.dir, t, &run.visible)?;
    let past = lineage::past_changes(&run.dir, t, &rollbacks.changes());
    let full = run.cfg.evolve.history_full_iterations;
    it.write_history_input(&lineage::history_md(&run.dir, &past, t, full))?;
    // The prompt names the evaluated harness by its tag (iter-NNN), not its commit id:
    // ids hash the commit time, and a replayed run must send byte-identical requests.
    let prompt = history::prompt_vars(&run.dir, t, &iter_tag(t - 1), &ev, &rollbacks.applied)?;
    let prompt = minijinja::context! { reverted => lineage::undone(&past), ..prompt };
    let ec = &run.cfg.evolve;
    let model = ahe_model::build_client_with(&run.cfg.model("evolve"), &run.client_opts())?;
    let inputs = evolve::EvolveInputs {
        iteration: t,
        iter_dir: it,
        repo: &run.repo,
        evaluated,
        visible: &run.visible,
        rollbacks: &rollbacks.applied,
        prompt,
        model: model.clone(),
        max_turns: ec.evolve_max_turns,
        timeout: Duration::from_secs_f64(ec.evolve_timeout_sec),
        show_verifier_output: ec.show_verifier_output,
        caps: WriteCaps::of(ec),
        leak: crate::leak::LeakSettings::build(ec.leak_guard, &run.tasks, &run.holdout),
        history: past,
        out: None,
    };
    let out = match ec.variants {
        0 | 1 => {
            // The trace is appended across attempts: what it holds now, a killed one spent.
            let (usage, cost) = crate::spend::trace_spend(&it.evolve_trace());
            let mut out = evolve::evolve(inputs).await?;
            out.usage.add(&usage);
            out.cost_usd += cost;
            out
        }
        _ => {
            let start = rollbacks.start_tree(&run.repo, evaluated)?;
            variants::evolve_variants(run, it, inputs, &start, cancel.clone()).await?
        }
    };
    it.record_role_cost("evolve", &out.usage, out.cost_usd)?;
    for n in &out.notes {
        run.note(t, n.clone())?;
    }
    stop_on_permanent(Some(&model), "evolve")?;
    // Without budget the pre-flight trial would be refused and revert sound edits.
    if ec.preflight && !out.changed_files.is_empty() && run.budget_spent(t).is_none() {
        let start = rollbacks.start_tree(&run.repo, evaluated)?;
        preflight::preflight(run, it, &start, cancel.clone()).await?;
    }
    Ok(())
}

/// The automatic rollbacks of HARMFUL changes, and of UNJUDGED ones unless `[attribution]
/// unjudged = "keep"` (`rollback = "auto"`, from iteration 2 on);
/// none under `rollback = "agent"`.
fn rollbacks(
    run: &Run,
    it: &IterationDir,
    ev: &crate::attribute::ChangeEvaluation,
    evaluated: &str,
) -> anyhow::Result<rollback::Rollbacks> {
    let t = it.number();
    if run.cfg.evolve.rollback != "auto" || t <= 1 {
        return Ok(rollback::Rollbacks::default());
    }
    // The canary's culprits are not in the evaluated harness any more.
    let gone = it.evidence().canary_reverted();
    let mut ev = ev.clone();
    ev.changes.retain(|c| !gone.contains(&c.id));
    let mut verdicts = vec![crate::attribute::Verdict::Harmful];
    if run.cfg.attribution.unjudged == "revert" {
        verdicts.push(crate::attribute::Verdict::Unjudged);
    }
    let prev = run.dir.iteration(t - 1);
    rollback::auto_rollback_of(&prev, &run.repo, &ev, evaluated, &verdicts)
}
