//! The loop of Algorithm 1 (docs/loop.md): for t = 1..N, rollout → clean → attribute (best) →
//! debug → evolve (rollback, edits, pre-flight) → commit; then a final evaluation of H_N and
//! the sequential final answer, best against the seed on fresh paired trials (final_eval.rs).
//! Each task's debugger starts during the rollout, once the task's trials are done.
//! Every phase is journaled; a resumed run skips finished phases and trials.

pub mod phase_inputs;

use tokio_util::sync::CancellationToken;

use crate::attribute::canary;
use crate::attribute::confirm;
use crate::attribute::counterfactual;
use crate::attribute::{judge, update_best, BestUpdate};
use crate::commit;
use crate::debug;
use crate::debug::overlap::DebugOverlap;
use crate::evolve;
use crate::final_eval;
use crate::final_eval::baseline;
use crate::inputs::run::Run;
use crate::rollout;
use ahe_rundir::clean;
use ahe_rundir::journal::{now, Entry, Phase};
use ahe_rundir::run_dir::IterationDir;
use ahe_runner::repo::caps::WriteCaps;
use phase_inputs::{attribute_inputs, debug_inputs, evolve_inputs, final_inputs, rollout_inputs};

/// Why the loop stopped.
enum Stop {
    /// Every iteration and the final evaluation ran.
    Completed,
    /// `budget_usd` was reached.
    Budget,
}

/// Executes (or resumes) the whole loop, then journals the end of the run.
pub async fn execute(run: &Run, cancel: CancellationToken) -> anyhow::Result<()> {
    if run.journal.ended() {
        eprintln!("{}: the run already finished", run.dir.path().display());
        return Ok(());
    }
    let reason = match iterate(run, &cancel).await? {
        Stop::Completed => "completed",
        Stop::Budget => "budget",
    };
    run.journal.append(Entry::RunEnd {
        ts: now(),
        reason: reason.into(),
    })
}

/// Algorithm 1: N evolve iterations, then the evaluation of H_N as iteration N+1.
async fn iterate(run: &Run, cancel: &CancellationToken) -> anyhow::Result<Stop> {
    let (n, ledger, trials) = (run.cfg.iterations, run.ledger(), run.trials());
    for t in 1..=n {
        let it = run.dir.iteration(t);
        let evaluated = canary_first(run, &it, cancel).await?;
        // A task's debugger starts as soon as its k trials are done (debug/overlap.rs).
        let debug = debug_inputs(run, &it);
        let ahead = debug::debugger_ahead(&debug)?;
        let ahead = ahead.as_ref();
        evaluate(run, &it, &evaluated, ahead, cancel).await?;
        if over_budget(run, t, "", "stopping after this iteration's bookkeeping")? {
            debug::settle_debuggers(&it, ahead).await?;
            return Ok(Stop::Budget);
        }
        ledger
            .phase(t, Phase::Debug, || debug::debug_phase(&debug, ahead))
            .await?;
        if over_budget(run, t, " during the debug phase", "no evolve step")? {
            return Ok(Stop::Budget);
        }
        let evolve = evolve_inputs(run, &it, &evaluated);
        ledger
            .phase(t, Phase::Evolve, || {
                evolve::evolve_phase(&evolve, &trials, cancel)
            })
            .await?;
        ledger
            .phase(t, Phase::Commit, || async {
                let caps = WriteCaps::of(&run.cfg.evolve);
                let note = |m: String| ledger.note(t, m);
                commit::commit(&run.repo, &it, &evaluated, &caps, &run.journal, &note)
            })
            .await?;
        let msg = format!("iteration {t}'s harness is committed but not evaluated");
        if over_budget(run, t, " during the evolve phase", &msg)? {
            return Ok(Stop::Budget);
        }
    }
    let it = run.dir.iteration(n + 1);
    let evaluated = canary_first(run, &it, cancel).await?;
    evaluate(run, &it, &evaluated, None, cancel).await?;
    if over_budget(run, n + 1, "", "no final re-evaluation")? {
        return Ok(Stop::Budget);
    }
    let fin = final_inputs(run);
    ledger
        .phase(n + 1, Phase::Final, || {
            final_eval::final_eval(&fin, &trials, &it, cancel.clone())
        })
        .await?;
    if run.cfg.evolve.baseline {
        if over_budget(run, n + 1, "", "no baseline")? {
            return Ok(Stop::Budget);
        }
        let cap = run.cfg.evolve.baseline_trials;
        ledger
            .phase(n + 1, Phase::Baseline, || {
                baseline::baseline_phase(&run.dir, &trials, cap, cancel.clone())
            })
            .await?;
    }
    Ok(Stop::Completed)
}

/// The harness iteration `it` evaluates, after its canary (`[attribution] canary`, from
/// iteration 2 on), which may revert a culprit first.
async fn canary_first(
    run: &Run,
    it: &IterationDir,
    cancel: &CancellationToken,
) -> anyhow::Result<String> {
    let t = it.number();
    evaluated_commit(run, it)?;
    if t > 1 && run.cfg.attribution.canary {
        let (inputs, trials) = (attribute_inputs(run), run.trials());
        let canary = || canary::canary(&inputs, &trials, it, cancel.clone());
        run.ledger().phase(t, Phase::Canary, canary).await?;
    }
    evaluated_commit(run, it)
}

/// The harness iteration `it` evaluates: recorded once (the repository's head when the
/// iteration starts), so that a resumed iteration evaluates the same commit.
fn evaluated_commit(run: &Run, it: &IterationDir) -> anyhow::Result<String> {
    it.create()?;
    match it.evaluated() {
        Some(c) => Ok(c),
        None => {
            let c = run.repo.head()?;
            it.write_evaluated(&c)?;
            Ok(c)
        }
    }
}

/// Rollout, Clean and Attribute of one iteration (all an evaluation needs), then the
/// evidence beyond the rollout, harm first (counterfactual, then confirm), each followed by
/// the verdicts it changes; `ahead` starts each task's debugger as soon as its trials are done.
async fn evaluate(
    run: &Run,
    it: &IterationDir,
    evaluated: &str,
    ahead: Option<&DebugOverlap>,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    let (t, ledger, trials) = (it.number(), run.ledger(), run.trials());
    let inputs = attribute_inputs(run);
    let rollout = rollout_inputs(run, it, evaluated, ahead);
    ledger
        .phase(t, Phase::Rollout, || {
            rollout::rollout_iteration(&rollout, &trials, cancel.clone())
        })
        .await?;
    ledger
        .phase(t, Phase::Clean, || async {
            let s = clean::clean_all(&it.trials())?;
            for (p, e) in &s.failed {
                ledger.note(t, format!("could not clean {}: {e}", p.display()))?;
            }
            Ok(())
        })
        .await?;
    ledger
        .phase(t, Phase::Attribute, || async { judge(&inputs, it) })
        .await?;
    ledger
        .phase(t, Phase::Counterfactual, || async {
            counterfactual::counterfactual(&inputs, &trials, it, evaluated, cancel.clone()).await?;
            judge(&inputs, it)
        })
        .await?;
    ledger
        .phase(t, Phase::Confirm, || async {
            confirm::confirm(&inputs, &trials, it, evaluated, cancel.clone()).await?;
            judge(&inputs, it)
        })
        .await?;
    // best, once the verdicts have all their evidence (idempotent: a resumed run repeats it).
    match update_best(&inputs, &run.repo, it, evaluated)? {
        BestUpdate::New(why) => ledger.say(format!("[iter {t}] new best: {why}")),
        BestUpdate::Contender(why) | BestUpdate::Refused(why) => {
            ledger.say(format!("[iter {t}] {why}"))
        }
        BestUpdate::Kept => {}
    }
    Ok(())
}

/// Notes and returns whether the budget is spent (`when`: in which phase; `then`: what the
/// run does about it).
fn over_budget(run: &Run, t: u32, when: &str, then: &str) -> anyhow::Result<bool> {
    let ledger = run.ledger();
    let Some((spent, limit)) = ledger.budget_spent(t) else {
        return Ok(false);
    };
    let msg = format!("budget reached{when}: ${spent:.4} of ${limit:.4}; {then}");
    ledger.note(t, msg)?;
    Ok(true)
}
