//! The screen of an iteration's evolve variants (`[evolve] variants > 1`): one trial per
//! task of a minibatch for each variant's harness, the variants' sets side by side within
//! the sandbox concurrency. Screen trials are extra trials: they take what the iteration's
//! `[attribution] max_extra_share` left after the canary, counterfactual and confirmation
//! trials (harm first); when too little is left the screen shrinks (the same tasks for every
//! variant) or is skipped, and the choice falls back to fewer changes — said in a journal
//! note. Their cost is reported apart (role `screen`, `evidence.json` `screen_cost`).

use std::collections::BTreeSet;

use ahe_bench::{TaskStatus, TrialStatus};
use ahe_rundir::evidence::SetCost;
use ahe_rundir::variants::{Screened, VariantResult};
use tokio_util::sync::CancellationToken;

use crate::inputs::trials::Trials;
use ahe_rundir::run_dir::IterationDir;
use ahe_runner::config::{AttributionConfig, EvolveConfig};

/// What the variants and their screen read: the policies, the rollout's size (the share of
/// extra trials is a share of it) and the trials interface.
pub struct Screen<'a> {
    /// `[evolve]`: variants, their concurrency and focus, screen tasks.
    pub evolve: &'a EvolveConfig,
    /// `[attribution]`: `max_extra_share`.
    pub policy: &'a AttributionConfig,
    /// Trials of the iteration's rollout (tasks × k).
    pub rollout_trials: usize,
    /// Runs the screen's trial sets (and holds the harness repository).
    pub trials: &'a Trials<'a>,
}

/// The screen minibatch of iteration `it`: up to `n` visible tasks, failing ones first (the
/// changes aim at them), then passing ones (they guard against harm), each group in a
/// seeded order (task name and iteration), infrastructure-only tasks left out.
pub fn screen_set(it: &IterationDir, visible: &BTreeSet<String>, n: usize) -> Vec<String> {
    let Ok(s) = it.scores() else {
        return Vec::new();
    };
    let key = |task: &str| {
        let mut h: u64 = 1469598103934665603 ^ u64::from(it.number());
        for b in task.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(1099511628211);
        }
        h
    };
    let group = |st: TaskStatus| {
        let mut v: Vec<&String> = visible
            .iter()
            .filter(|t| s.scores.tasks.get(*t).is_some_and(|x| x.status == st))
            .collect();
        v.sort_by_key(|t| key(t));
        v
    };
    let (fail, pass) = (group(TaskStatus::Fail), group(TaskStatus::Pass));
    let half = n.div_ceil(2).min(fail.len());
    let mut out: Vec<String> = fail[..half].iter().map(|t| t.to_string()).collect();
    out.extend(pass.iter().take(n - half).map(|t| t.to_string()));
    out.extend(
        fail[half..]
            .iter()
            .take(n - out.len())
            .map(|t| t.to_string()),
    );
    out
}

/// Screen tasks per variant: `[evolve] screen_tasks`, or fewer when the iteration's
/// extra-trial share (`[attribution] max_extra_share` of the rollout's trials, minus the
/// canary, counterfactual and confirmation trials) cannot pay one trial per task and
/// variant; with the note saying so (None: the screen runs in full).
pub fn screen_size(s: &Screen, it: &IterationDir, variants: usize) -> (usize, Option<String>) {
    let want = s.evolve.screen_tasks;
    let rollout = s.rollout_trials;
    let cap = s.policy.extra_trial_cap(rollout);
    let used = it.evidence().total_cost().trials as usize;
    let left = cap.saturating_sub(used);
    let per = want.min(left / variants.max(1));
    let why = format!(
        "{left} of the iteration's {cap} extra trials left ([attribution] max_extra_share = {} \
         of {rollout} rollout trials, {used} spent on attribution)",
        s.policy.max_extra_share
    );
    let note = match per {
        _ if per == want => None,
        0 => Some(format!(
            "variants: screen skipped: {why}; the variants are chosen by fewer changes"
        )),
        _ => Some(format!(
            "variants: screen shrunk to {per} of {want} task(s) per variant: {why}"
        )),
    };
    (per, note)
}

/// Runs the screen of `results` on `tasks` (one trial per task and variant, set
/// `screen/v<i>`; finished trials of an earlier attempt kept); returns every variant with
/// its figures and the screen's cost over every kept trial (also those of before a resume).
/// The sets run side by side, their trials at once never more than `[sandbox] concurrency`.
pub async fn screen(
    trials: &Trials<'_>,
    it: &IterationDir,
    results: Vec<VariantResult>,
    tasks: &[String],
    cancel: CancellationToken,
) -> anyhow::Result<(Vec<Screened>, SetCost)> {
    // Sets at once × trials per set stays within the sandbox concurrency.
    let conc = trials.concurrency();
    let at_once = results.len().clamp(1, conc);
    let per_set = (conc / at_once).max(1);
    let sem = tokio::sync::Semaphore::new(at_once);
    let sem = &sem;
    let sets = results.iter().map(|r| {
        let set = format!("screen/v{}", r.variant);
        let cancel = cancel.clone();
        async move {
            if tasks.is_empty() {
                return Ok(Default::default());
            }
            let _permit = sem.acquire().await?;
            trials
                .run_set_with(it, &set, &r.commit, tasks, 1, per_set, cancel)
                .await
                .map(|x| x.0)
        }
    });
    let done = futures::future::join_all(sets).await;
    let mut cost = SetCost::default();
    let mut out = Vec::new();
    for (r, trials) in results.into_iter().zip(done) {
        let trials = trials?;
        let all: Vec<&ahe_bench::TrialResult> = trials.values().flatten().collect();
        let mut own = SetCost::default();
        for t in &all {
            own.trials += 1;
            own.usage.add(&t.usage);
            own.cost_usd += t.cost_usd;
        }
        cost.add(&own);
        let clean =
            |x: &&&ahe_bench::TrialResult| x.status == TrialStatus::Pass && x.suspect.is_none();
        let passed = all.iter().filter(clean).count() as u32;
        out.push(Screened {
            result: r,
            passed,
            trials: all.len() as u32,
            chosen: false,
            screen_cost: own,
        });
    }
    let mut evidence = it.evidence();
    evidence.screen_cost = cost.clone();
    it.write_evidence(&evidence)?;
    Ok((out, cost))
}
