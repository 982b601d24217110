//! The Attribute phase (V_t = Attribute(C_{t-1}, T_{t-1}, T_t)) and the `best` update: the
//! verdicts of the previous iteration's changes from the records of both iterations, written
//! to `change_evaluation.json` (again after each phase that adds evidence).

pub mod canary;
pub mod confirm;
pub mod counterfactual;

use std::collections::BTreeSet;

use crate::inputs::history;
use ahe_attribution::attribute;
use ahe_rundir::run_dir::Contender;
use ahe_rundir::run_dir::{Best, IterationDir, RunDir};
use ahe_runner::config::AttributionConfig;
use ahe_runner::repo::HarnessRepo;

/// What attribution reads besides the iteration itself.
pub struct AttributeInputs<'a> {
    /// The run directory (the previous iteration's scores, manifest and evaluation).
    pub dir: &'a RunDir,
    /// Trials per task (the empty scores of "iteration 0").
    pub k: u32,
    /// The visible tasks (held-out tasks are never attributed).
    pub visible: &'a BTreeSet<String>,
    /// `[attribution]`: the evidence phases' caps, and what an UNJUDGED change counts as.
    pub policy: &'a AttributionConfig,
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

/// What the `best` update decided for one iteration.
pub enum BestUpdate {
    /// The iteration is the new best (why).
    New(String),
    /// Its figure is higher than best's but within noise: kept as the contender.
    Contender(String),
    /// Nothing changed.
    Kept,
    /// The harness holds a change judged HARMFUL (or UNJUDGED under `unjudged = "revert"`):
    /// it cannot become best or contender.
    Refused(String),
}

/// The changes of the harness `it` evaluated that attribution judged HARMFUL, or UNJUDGED
/// when `[attribution] unjudged = "revert"` (the canary's reverted culprits are gone already).
pub(crate) fn held_harm(policy: &AttributionConfig, it: &IterationDir) -> Vec<String> {
    let Ok(ev) = it.change_evaluation() else {
        return Vec::new();
    };
    let gone = it.evidence().canary_reverted();
    let revert_unjudged = policy.unjudged == "revert";
    ev.changes
        .iter()
        .filter(|c| !gone.contains(&c.id))
        .filter(|c| {
            c.verdict == ahe_attribution::attribute::Verdict::Harmful
                || (revert_unjudged && c.verdict == ahe_attribution::attribute::Verdict::Unjudged)
        })
        .map(|c| c.id.clone())
        .collect()
}

/// Makes `evaluated` the best harness (tag `best`, `best.json`) when it is the first, or when
/// it beats best beyond noise: the paired bootstrap interval of its clean per-task pass rates
/// minus best's, over the visible tasks both ran, lies above 0. A higher figure within
/// noise makes it the contender that the final re-evaluation weighs against best.
pub fn update_best(
    i: &AttributeInputs,
    repo: &HarnessRepo,
    it: &IterationDir,
    evaluated: &str,
) -> anyhow::Result<BestUpdate> {
    let (dir, visible) = (i.dir, i.visible);
    let cur = it.scores()?;
    let vp = cur.visible_pass_at_1();
    // A best.json whose harness this repository does not hold (a run directory rebuilt after
    // a kill before its seed commit) is no best.
    let stored = dir.best().filter(|b| {
        repo.resolve(&b.commit).is_ok()
            && dir.iteration(b.iteration).evaluated().as_deref() == Some(b.commit.as_str())
    });
    let Some(mut best) = stored else {
        let why = "the first evaluated harness".to_string();
        set_best(dir, repo, it.number(), evaluated, vp, why.clone(), None)?;
        return Ok(BestUpdate::New(why));
    };
    if best.iteration == it.number() {
        return Ok(BestUpdate::Kept);
    }
    let harm = held_harm(i.policy, it);
    if !harm.is_empty() {
        return Ok(BestUpdate::Refused(format!(
            "not a candidate for best: it holds {} (judged HARMFUL or UNJUDGED, to be rolled back)",
            harm.join(", ")
        )));
    }
    let prev = dir.iteration(best.iteration).scores()?;
    let (p, c): (Vec<f64>, Vec<f64>) = cur
        .scores
        .tasks
        .iter()
        .filter(|(t, _)| visible.contains(*t))
        .filter_map(|(t, x)| prev.scores.tasks.get(t).map(|y| (y.pass_at_1, x.pass_at_1)))
        .unzip();
    let Some((delta, ci)) = ahe_attribution::stats::paired_delta_ci(&p, &c) else {
        return Ok(BestUpdate::Kept);
    };
    if ci[0] > 0.0 {
        let why = format!(
            "beat iteration {} by {delta:+.3} (paired 95% CI {:+.3} to {:+.3}, {} tasks)",
            best.iteration,
            ci[0],
            ci[1],
            p.len()
        );
        let contender = best.contender.filter(|x| x.pass_at_1 > vp);
        set_best(
            dir,
            repo,
            it.number(),
            evaluated,
            vp,
            why.clone(),
            contender,
        )?;
        return Ok(BestUpdate::New(why));
    }
    let higher = vp > best.pass_at_1 && best.contender.as_ref().is_none_or(|x| vp > x.pass_at_1);
    if !higher {
        return Ok(BestUpdate::Kept);
    }
    best.contender = Some(Contender {
        iteration: it.number(),
        commit: evaluated.to_string(),
        pass_at_1: vp,
        delta,
        delta_ci: ci,
    });
    dir.write_best(&best)?;
    Ok(BestUpdate::Contender(format!(
        "visible pass@1 = {vp:.3} is above best's {:.3} (iteration {}) but within noise \
         (paired {delta:+.3}, 95% CI {:+.3} to {:+.3}): best stays; the final re-evaluation \
         weighs them",
        best.pass_at_1, best.iteration, ci[0], ci[1]
    )))
}

/// Tags `commit` as `best` and writes `best.json`.
pub fn set_best(
    dir: &RunDir,
    repo: &HarnessRepo,
    iteration: u32,
    commit: &str,
    pass_at_1: f64,
    why: String,
    contender: Option<Contender>,
) -> anyhow::Result<()> {
    repo.set_tag("best", commit)?;
    dir.write_best(&Best {
        iteration,
        commit: commit.to_string(),
        pass_at_1,
        why,
        contender,
    })
}
