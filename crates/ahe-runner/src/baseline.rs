//! The matched-budget baseline's plan and figures (docs/attribution.md#matched-budget-baseline;
//! `ahe baseline`, and the last phase of `ahe evolve` under `[evolve] baseline = true`): from the
//! run's total spend (every role, every iteration), the number N of seed-harness trials per task
//! the same money buys (tokens when the config names no prices); N trials of the seed per task (the
//! first iteration's k are reused; capped); and the seed's pass@N by Chen et al.'s unbiased
//! estimator with a bootstrap interval over tasks — what sampling N times plus a perfect picker
//! would reach — beside best's and the seed's pass@1. Trials land in `runs/NAME/baseline/`;
//! finished ones are kept, so a resumed baseline runs none twice.

use ahe_bench::scores::{mean_with_ci, pass_at_n};
use ahe_bench::{Scores, TrialResult, TrialStatus};
use ahe_rundir::final_eval::{Baseline, BASELINE_LABEL};
use anyhow::{bail, Context};

use crate::repo::{iter_tag, HarnessRepo};
use ahe_rundir::run_dir::RunDir;

/// What the baseline will run: N, the spend it matches, the seed and its finished trials.
pub struct Plan {
    /// `usd` or `tokens`.
    pub basis: &'static str,
    /// The run's spend in the basis' unit.
    pub spend: f64,
    /// One seed trial's cost in the basis' unit.
    pub per_trial: f64,
    /// Seed trials per task the spend buys.
    pub affordable: u32,
    /// Trials per task to run (at least k, at most the cap).
    pub n: u32,
    /// The cap.
    pub cap: u32,
    /// Tasks of the first iteration (visible and held-out).
    pub tasks: Vec<String>,
    /// The seed's commit (tag iter-000).
    pub seed: String,
    /// Finished seed trials to keep (the first iteration's, and the baseline's own so far).
    pub prior: Vec<TrialResult>,
}

/// Plans the baseline of the run in `rd` with at most `cap` trials per task.
pub fn plan(rd: &RunDir, repo: &HarnessRepo, cap: u32) -> anyhow::Result<Plan> {
    let first = rd.iteration(1).scores().with_context(|| {
        format!(
            "{}: the first iteration has no scores yet (run `ahe evolve` first)",
            rd.path().display()
        )
    })?;
    let (basis, spend, per_trial) = budget(rd, &first.scores)?;
    let tasks: Vec<String> = first.scores.tasks.keys().cloned().collect();
    let affordable = ((spend / per_trial).floor() as u64 / tasks.len().max(1) as u64)
        .min(u32::MAX as u64) as u32;
    let k = first.scores.k;
    let n = affordable.clamp(k, cap.max(k));
    let seed = repo.resolve(&iter_tag(0))?;
    let mut prior = Vec::new();
    if rd.iteration(1).evaluated().as_deref() == Some(seed.as_str()) {
        prior = ahe_rundir::clean::load_results(&rd.iteration(1).trials())?;
    }
    prior.extend(ahe_rundir::clean::load_results(&rd.baseline().trials()).unwrap_or_default());
    prior.retain(|r| r.status != TrialStatus::InfraError && r.attempt <= n);
    Ok(Plan {
        basis,
        spend,
        per_trial,
        affordable,
        n,
        cap,
        tasks,
        seed,
        prior,
    })
}

/// The spend of the run and the cost of one seed trial, in dollars or (no prices) tokens.
fn budget(rd: &RunDir, first: &Scores) -> anyhow::Result<(&'static str, f64, f64)> {
    let last = rd.last_iteration_on_disk();
    let trials = first
        .tasks
        .values()
        .flat_map(|t| &t.trials)
        .filter(|t| t.status != TrialStatus::InfraError)
        .count()
        .max(1) as f64;
    let usd = rd.spent_usd(last);
    let seed_usd = first.meta.model_cost_usd.unwrap_or(0.0).max(first.cost_usd);
    if usd > 0.0 && seed_usd > 0.0 {
        return Ok(("usd", usd, seed_usd / trials));
    }
    let mut tokens = 0u64;
    for t in 1..=last {
        if let Ok(s) = rd.iteration(t).scores() {
            tokens += s
                .roles()
                .values()
                .map(|r| r.input_tokens + r.output_tokens)
                .sum::<u64>();
        }
    }
    let seed_tokens = (first.tokens.input + first.tokens.output) as f64;
    if tokens == 0 || seed_tokens == 0.0 {
        bail!("the run recorded neither dollars nor tokens: nothing to match a budget to");
    }
    Ok(("tokens", tokens as f64, seed_tokens / trials))
}

/// The baseline's figures from the seed's N trials per task, written to `baseline.json`.
pub fn record(rd: &RunDir, p: &Plan, scores: &Scores) -> anyhow::Result<Baseline> {
    let n = p.n;
    let per_task: Vec<f64> = scores
        .tasks
        .values()
        .filter_map(|t| {
            let ran: Vec<_> = t
                .trials
                .iter()
                .filter(|x| x.status != TrialStatus::InfraError)
                .collect();
            let passed = ran.iter().filter(|x| x.status == TrialStatus::Pass).count() as u32;
            pass_at_n(ran.len() as u32, passed, n.min(ran.len() as u32))
        })
        .collect();
    let (pn, ci) = mean_with_ci(&per_task);
    let best = rd.best();
    let b = Baseline {
        basis: p.basis.into(),
        evolve_spend: p.spend,
        per_seed_trial: p.per_trial,
        affordable_per_task: p.affordable,
        n,
        cap: p.cap,
        tasks: p.tasks.len(),
        seed_pass_at_n: pn,
        seed_pass_at_n_ci: ci,
        seed_pass_at_1: scores.pass_at_1,
        seed_pass_at_1_ci: scores.pass_at_1_ci,
        best_pass_at_1: best.as_ref().map(|b| b.pass_at_1),
        best_iteration: best.as_ref().map(|b| b.iteration),
        label: BASELINE_LABEL.into(),
    };
    rd.write_baseline(&b)?;
    Ok(b)
}
