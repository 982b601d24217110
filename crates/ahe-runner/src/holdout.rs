//! The holdout split (`[holdout]`): which tasks the debugger and the evolve agent see and
//! which are held out for the final evaluation only.

use std::collections::BTreeSet;

use ahe_bench::Task;
use anyhow::bail;

use crate::config::RunConfig;

/// Splits tasks into visible and held-out by the config.
pub fn split_holdout(
    cfg: &RunConfig,
    tasks: &[Task],
) -> anyhow::Result<(BTreeSet<String>, BTreeSet<String>)> {
    let names: Vec<String> = tasks.iter().map(|t| t.name.clone()).collect();
    let mut hold: BTreeSet<String> = BTreeSet::new();
    for n in &cfg.holdout.tasks {
        if !names.contains(n) {
            bail!("holdout.tasks: unknown task {n:?}");
        }
        hold.insert(n.clone());
    }
    if let Some(f) = cfg.holdout.fraction {
        use rand::{seq::SliceRandom, SeedableRng};
        let mut rest: Vec<&String> = names.iter().filter(|n| !hold.contains(*n)).collect();
        rest.shuffle(&mut rand::rngs::StdRng::seed_from_u64(cfg.holdout.seed));
        let n = (names.len() as f64 * f).round() as usize;
        hold.extend(rest.into_iter().take(n).cloned());
    }
    let visible: BTreeSet<String> = names.into_iter().filter(|n| !hold.contains(n)).collect();
    if visible.is_empty() {
        bail!("holdout: every task is held out; the evolve agent would see nothing");
    }
    Ok((visible, hold))
}
