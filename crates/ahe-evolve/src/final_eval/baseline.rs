//! The matched-budget baseline as the last phase of `ahe evolve` (`[evolve] baseline = true`;
//! docs/attribution.md#matched-budget-baseline): the plan and the figures are
//! `ahe_runner::baseline`'s (`ahe baseline` runs the same plan on its own); this phase runs
//! the plan's seed trials through the run's [`Trials`].

use ahe_rundir::run_dir::RunDir;
use ahe_runner::baseline::{plan, record};
use tokio_util::sync::CancellationToken;

use crate::inputs::trials::Trials;

/// The baseline as the last phase of `ahe evolve` (`[evolve] baseline = true`): up to `cap`
/// (`[evolve] baseline_trials`) seed trials per task, as many as the run's spend buys.
pub async fn baseline_phase(
    dir: &RunDir,
    trials: &Trials<'_>,
    cap: u32,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let p = plan(dir, trials.repo, cap)?;
    let out = dir.baseline();
    let checkout = dir.baseline_harness();
    let harness = trials.checkout(&p.seed, &checkout)?;
    let tasks = (trials.tasks.iter())
        .filter(|t| p.tasks.contains(&t.name))
        .cloned()
        .collect();
    trials.ledger.say(format!(
        "[baseline] the run's spend buys {} seed trials per task; running {} (cap {})",
        p.affordable, p.n, p.cap
    ));
    let spec = trials.spec(harness, tasks, p.n, out.path(), p.prior.clone());
    let scores = trials.drive(spec, cancel, |_| Ok(())).await?;
    let _ = std::fs::remove_dir_all(&checkout);
    let b = record(dir, &p, &scores)?;
    trials.ledger.say(format!(
        "[baseline] seed pass@{} = {:.3} (95% CI {:.3}–{:.3}): {}",
        b.n, b.seed_pass_at_n, b.seed_pass_at_n_ci[0], b.seed_pass_at_n_ci[1], b.label
    ));
    Ok(())
}
