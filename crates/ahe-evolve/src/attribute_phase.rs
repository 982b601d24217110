//! The Attribute phase (V_t = Attribute(C_{t-1}, T_{t-1}, T_t)) and the `best` update: the
//! verdicts of the previous iteration's changes from the records of both iterations, written
//! to `change_evaluation.json` (again after each phase that adds evidence).

use std::collections::BTreeSet;

use crate::commit::HarnessRepo;
use crate::run_dir::{Best, IterationDir, RunDir};
use crate::{attribute, history};

/// What attribution reads besides the iteration itself.
pub struct AttributeInputs<'a> {
    /// The run directory (the previous iteration's scores, manifest and evaluation).
    pub dir: &'a RunDir,
    /// Trials per task (the empty scores of "iteration 0").
    pub k: u32,
    /// The visible tasks (held-out tasks are never attributed).
    pub visible: &'a BTreeSet<String>,
}

/// Judges the previous iteration's changes on these scores and the evidence so far
/// (`change_evaluation.json`, with the cumulative prediction quality).
pub fn judge(i: &AttributeInputs, it: &IterationDir) -> anyhow::Result<()> {
    let t = it.number();
    let cur = it.scores()?;
    let prev_it = i.dir.iteration(t.saturating_sub(1));
    let (prev, manifest) = if t > 1 {
        (prev_it.scores()?.scores, prev_it.manifest().ok())
    } else {
        (ahe_bench::scores::compute(i.k, &[], 0.0), None)
    };
    let exercised = history::exercised(it, i.visible);
    let mut ev = attribute::attribute(
        t,
        manifest.as_ref(),
        &prev,
        &cur.scores,
        i.visible,
        &exercised,
        &it.evidence(),
    );
    if let Ok(p) = (t > 1).then(|| prev_it.change_evaluation()).transpose() {
        let before = p
            .map(|p| p.prediction_vs_truth_cumulative)
            .unwrap_or_default();
        ev.prediction_vs_truth_cumulative = before.plus(&ev.prediction_vs_truth);
    }
    it.write_change_evaluation(&ev)
}

/// Makes `evaluated` the best harness (tag `best`, `best.json`) when its visible pass@1 is
/// strictly higher than the best so far; returns that pass@1 when it did.
pub fn update_best(
    dir: &RunDir,
    repo: &HarnessRepo,
    it: &IterationDir,
    evaluated: &str,
) -> anyhow::Result<Option<f64>> {
    let vp = it.scores()?.visible_pass_at_1();
    if !dir.best().is_none_or(|b| vp > b.pass_at_1) {
        return Ok(None);
    }
    repo.set_tag("best", evaluated)?;
    dir.write_best(&Best {
        iteration: it.number(),
        commit: evaluated.to_string(),
        pass_at_1: vp,
    })?;
    Ok(Some(vp))
}
