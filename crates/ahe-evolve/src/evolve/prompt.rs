//! The evolve agent's user prompt: its template variables, from what earlier iterations left
//! (`inputs::history`) and the automatic rollbacks this phase applied.

use minijinja::context;

use crate::commit::rollback::Rollback;
use crate::inputs::history::{change_summary, ci_text, score_history};
use ahe_attribution::attribute::ChangeEvaluation;
use ahe_rundir::run_dir::RunDir;

/// Template variables of the evolve agent's user prompt.
pub fn prompt_vars(
    run: &RunDir,
    t: u32,
    evaluated: &str,
    ev: &ChangeEvaluation,
    rollbacks: &[Rollback],
) -> anyhow::Result<minijinja::Value> {
    let it = run.iteration(t);
    let scores = it.scores()?;
    let best = run.best();
    let rb: Vec<minijinja::Value> = rollbacks
        .iter()
        .map(|r| {
            context! {
                id => &r.change.id, description => &r.change.description,
                restored => &r.restored, lost => &r.lost,
            }
        })
        .collect();
    Ok(context! {
        iteration => t,
        commit => &evaluated[..evaluated.len().min(12)],
        pass_at_1 => format!("{:.3}", scores.visible_pass_at_1()),
        ci => ci_text(scores.record.visible_pass_at_1_ci),
        best_iteration => best.as_ref().map(|b| b.iteration).unwrap_or(t),
        best_pass_at_1 => best.as_ref().map(|b| format!("{:.3}", b.pass_at_1)).unwrap_or_default(),
        history => score_history(run, t),
        change_summary => change_summary(ev),
        rollbacks => rb,
        rollbacks_lost => rollbacks.iter().any(|r| !r.lost.is_empty()),
        overview => it.overview(),
    })
}
