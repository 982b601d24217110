//! The final answer (docs/final-answer.md): `best` was picked as the maximum of noisy
//! figures, against the seed's own trials as the bar, so neither its figure nor the seed's
//! visible trials are an unbiased answer to "is best better than the seed?". After the last
//! iteration, best and the seed run fresh paired trials on the visible tasks in rounds (one
//! trial per task and harness a round, extra trial sets of the final iteration, journaled:
//! a resumed phase runs none twice); after each round the sequential rule of
//! `ahe_attribution::sequential` looks at best − seed and stops when its interval clears 0
//! either way, when more rounds could not plausibly clear it, or at `[evolve] final_trials`.
//! Held-out tasks never took part in any selection: their comparison reuses best's and the
//! seed's own iteration trials and runs none. The runner-up is not re-evaluated: picking it
//! would be a second selection on point estimates, and an honest switch would need it to
//! beat best beyond noise on fresh trials of both (more rounds than the whole answer).

pub mod baseline;

use std::collections::{BTreeMap, BTreeSet};

use ahe_attribution::sequential::{self, Plan};
use ahe_bench::TrialResult;
use ahe_rundir::final_eval::{Delta, Figure, FinalEval, Reevaluated, Reused, Sequential, Stopped};
use tokio_util::sync::CancellationToken;

use crate::inputs::run::Split;
use crate::inputs::trials::Trials;
use ahe_rundir::evidence::SetCost;
use ahe_rundir::run_dir::{IterationDir, RunDir};
use ahe_runner::config::AttributionConfig;

/// What the final answer reads besides the trials interface.
pub struct FinalInputs<'a> {
    /// The run directory (best, each iteration's scores and manifest).
    pub dir: &'a RunDir,
    /// The run's tasks: visible ones get fresh trials, held-out ones reuse their rollouts.
    pub split: Split<'a>,
    /// The cap on fresh trials per visible task and harness (`[evolve] final_trials`, else
    /// 2k; 0: no final answer).
    pub trials_per_task: u32,
    /// `[attribution]` (kept for the phases' uniform inputs).
    pub policy: &'a AttributionConfig,
}

/// The trial-set prefix of the final answer (`final/iter-NNN`).
pub const SET_PREFIX: &str = "final/";

/// Fresh trials per visible task and harness that one round adds.
pub const PER_ROUND: u32 = 1;

/// Why the runner-up is not re-evaluated, as `final.json` records it.
const RUNNER_UP: &str = "not re-evaluated: choosing it would be a second selection on point \
     estimates, and an honest switch needs it to beat best beyond noise on fresh trials of both";

/// A harness of the final answer: where it was first evaluated and what selection saw.
struct Pick {
    iteration: u32,
    commit: String,
    selected: f64,
}

/// Per-task clean pass rates (visible tasks) of best and the seed at the last look.
type Rates = (BTreeMap<String, f64>, BTreeMap<String, f64>);

/// Runs the final answer into `it` (the final iteration) and writes `final.json`.
pub async fn final_eval(
    i: &FinalInputs<'_>,
    trials: &Trials<'_>,
    it: &IterationDir,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let Some(best) = i
        .dir
        .best()
        .filter(|b| trials.repo.resolve(&b.commit).is_ok())
    else {
        trials.ledger.note(
            it.number(),
            "no final re-evaluation: best.json names no harness of this run",
        )?;
        return Ok(());
    };
    let Some(seed) = seed_of(i.dir, it.number()) else {
        return Ok(());
    };
    if i.trials_per_task == 0 {
        return Ok(());
    }
    let best = Pick {
        iteration: best.iteration,
        commit: best.commit,
        selected: best.pass_at_1,
    };
    let plan = Plan::new(i.trials_per_task, PER_ROUND);
    let mut seq = Sequential {
        alpha: plan.alpha,
        spending: plan.spending.describe(),
        per_round: PER_ROUND,
        max_rounds: plan.rounds,
        futility: plan.futility,
        looks: Vec::new(),
        stopped: Stopped::BestIsSeed,
        reused: Vec::new(),
        fresh_trials: 0,
        runner_up: RUNNER_UP.into(),
    };
    let mut out = FinalEval {
        trials_per_task: i.trials_per_task,
        ..Default::default()
    };
    out.best_tainted_by =
        tainted_by(&reverted_changes(i.dir, it.number()), best.iteration).map(String::from);
    if best.commit == seed.commit {
        out.harnesses.push(own_figures(i, &best, "best, seed"));
    } else {
        let (rates, cost) = rounds(i, trials, it, &plan, [&best, &seed], &mut seq, cancel).await?;
        answer(i, [&best, &seed], &rates, &mut seq, &mut out);
        out.cost = cost;
    }
    out.sequential = Some(seq);
    trials.ledger.say(format!("[final] {}", out.verdict()));
    i.dir.write_final_eval(&out)
}

/// Rounds of fresh paired trials of `[best, seed]` on the visible tasks, a look after each,
/// until the rule stops (or the budget between rounds); returns the rates at the last look
/// and what this call's trials cost.
async fn rounds(
    i: &FinalInputs<'_>,
    trials: &Trials<'_>,
    it: &IterationDir,
    plan: &Plan,
    [best, seed]: [&Pick; 2],
    seq: &mut Sequential,
    cancel: CancellationToken,
) -> anyhow::Result<(Rates, SetCost)> {
    let tasks: Vec<String> = i
        .split
        .tasks
        .iter()
        .filter(|t| i.split.visible.contains(&t.name))
        .map(|t| t.name.clone())
        .collect();
    let set = |p: &Pick| format!("{SET_PREFIX}{}", ahe_runner::repo::iter_tag(p.iteration));
    let half = (trials.concurrency() / 2).max(1);
    let (mut cost, mut last) = (SetCost::default(), Rates::default());
    seq.stopped = Stopped::Cap;
    for r in 1..=plan.rounds {
        if r > 1 {
            if let Some((spent, limit)) = trials.ledger.budget_spent(it.number()) {
                let msg = format!("budget reached: ${spent:.4} of ${limit:.4}; final answer stops after {} round(s)", r - 1);
                trials.ledger.note(it.number(), msg)?;
                seq.stopped = Stopped::Budget;
                break;
            }
        }
        let n = (r * PER_ROUND).min(i.trials_per_task);
        let (bs, ss) = (set(best), set(seed));
        let b = trials.run_set_with(it, &bs, &best.commit, &tasks, n, half, cancel.clone());
        let s = trials.run_set_with(it, &ss, &seed.commit, &tasks, n, half, cancel.clone());
        // Side by side when the sandbox allows two trials at once, else one set after the other.
        let (b, s) = match trials.concurrency() >= 2 {
            true => tokio::try_join!(b, s)?,
            false => (b.await?, s.await?),
        };
        cost.add(&b.1);
        cost.add(&s.1);
        seq.fresh_trials = count_upto(n, &b.0) + count_upto(n, &s.0);
        last = (rates(n, b.0), rates(n, s.0));
        let pairs: Vec<(f64, f64)> = tasks
            .iter()
            .filter_map(|t| Some((*last.0.get(t)?, *last.1.get(t)?)))
            .collect();
        let (look, stop) = sequential::look(plan, r, n, &pairs);
        trials.ledger.say(format!(
            "[final] round {r}: best − seed = {:+.3} (CI {:+.3} to {:+.3}, {} tasks, {n} fresh trial(s) each): {}",
            look.delta,
            look.ci[0],
            look.ci[1],
            look.tasks,
            stop.map_or("another round", |s| s.reason())
        ));
        seq.looks.push(look);
        if let Some(stop) = stop {
            seq.stopped = stop;
            break;
        }
    }
    Ok((last, cost))
}

/// Fills `out` from the last look: both harnesses' fresh visible figures, best − seed on
/// the visible tasks (the sequential interval) and on the held-out tasks (reused trials).
fn answer(
    i: &FinalInputs,
    [best, seed]: [&Pick; 2],
    (br, sr): &Rates,
    seq: &mut Sequential,
    out: &mut FinalEval,
) {
    let (visible, holdout) = (i.split.visible, i.split.holdout);
    for (p, r, role) in [(best, br, "best"), (seed, sr, "seed")] {
        let mut h = own_figures(i, p, role);
        h.visible = figure_of(r, visible);
        out.harnesses.push(h);
    }
    out.best_vs_seed = seq.looks.last().map(|l| Delta {
        delta: l.delta,
        ci: l.ci,
        tasks: l.tasks,
    });
    out.selection_bias = best.selected - out.harnesses[0].visible.pass_at_1;
    if holdout.is_empty() {
        return;
    }
    let (Some(bh), Some(sh)) = (
        own_rates(i.dir, best.iteration),
        own_rates(i.dir, seed.iteration),
    ) else {
        return;
    };
    out.best_vs_seed_held_out = paired(&rate_map(&bh), &rate_map(&sh), holdout);
    for (p, x, role) in [(best, &bh, "best"), (seed, &sh, "seed")] {
        let n: u32 = x
            .iter()
            .filter(|(t, _)| holdout.contains(*t))
            .map(|(_, v)| v.1)
            .sum();
        seq.reused.push(Reused {
            role: role.into(),
            iteration: p.iteration,
            tasks: "held-out".into(),
            trials: n,
        });
    }
}

/// The harness as its own iteration measured it (no fresh trials).
fn own_figures(i: &FinalInputs, p: &Pick, role: &str) -> Reevaluated {
    let own = own_rates(i.dir, p.iteration).unwrap_or_default();
    let r = rate_map(&own);
    Reevaluated {
        role: role.into(),
        iteration: p.iteration,
        commit: p.commit.clone(),
        selected_pass_at_1: p.selected,
        visible: figure_of(&r, i.split.visible),
        held_out: (!i.split.holdout.is_empty()).then(|| figure_of(&r, i.split.holdout)),
    }
}

/// The seed: the first evaluated iteration's harness and its visible pass@1.
fn seed_of(dir: &RunDir, last: u32) -> Option<Pick> {
    (1..=last).find_map(|t| {
        let it = dir.iteration(t);
        let (c, s) = (it.evaluated()?, it.scores().ok()?);
        Some(Pick {
            iteration: t,
            commit: c,
            selected: s.visible_pass_at_1(),
        })
    })
}

/// Iteration `t`'s rollout per task: (clean pass rate, trials).
fn own_rates(dir: &RunDir, t: u32) -> Option<BTreeMap<String, (f64, u32)>> {
    let s = dir.iteration(t).scores().ok()?;
    Some(
        s.scores
            .tasks
            .into_iter()
            .map(|(t, x)| (t, (x.pass_at_1, x.k)))
            .collect(),
    )
}

fn rate_map(x: &BTreeMap<String, (f64, u32)>) -> BTreeMap<String, f64> {
    x.iter().map(|(t, v)| (t.clone(), v.0)).collect()
}

/// Trials of a set with attempt ≤ `n`.
fn count_upto(n: u32, res: &BTreeMap<String, Vec<TrialResult>>) -> u32 {
    res.values().flatten().filter(|r| r.attempt <= n).count() as u32
}

/// The changes rolled back automatically: (id, iteration that made it, iteration whose evolve
/// step rolled it back). The harnesses evaluated in iterations made+1 ..= rolled held it.
fn reverted_changes(dir: &RunDir, last: u32) -> Vec<(String, u32, u32)> {
    let mut made: BTreeMap<String, u32> = BTreeMap::new();
    let mut out = Vec::new();
    for t in 1..=last {
        let Ok(m) = dir.iteration(t).manifest() else {
            continue;
        };
        for c in &m.changes {
            match c.id.strip_prefix("rollback-") {
                Some(id) if c.kind == ahe_rundir::manifest::ChangeKind::Rollback => {
                    if let Some(i) = made.get(id) {
                        out.push((id.to_string(), *i, t));
                    }
                }
                _ => {
                    made.insert(c.id.clone(), t);
                }
            }
        }
    }
    out
}

/// The rolled-back change the harness evaluated in iteration `t` held, if any.
fn tainted_by(reverted: &[(String, u32, u32)], t: u32) -> Option<&str> {
    reverted
        .iter()
        .find(|(_, made, rolled)| *made < t && t <= *rolled)
        .map(|x| x.0.as_str())
}

/// Clean pass rate per task of a set's fresh trials with attempt ≤ `n` (infra errors and
/// suspect passes fail; a trial beyond `n` finished before a kill belongs to a later look).
fn rates(n: u32, res: BTreeMap<String, Vec<TrialResult>>) -> BTreeMap<String, f64> {
    let all: Vec<TrialResult> = res
        .into_values()
        .flatten()
        .filter(|r| r.attempt <= n)
        .collect();
    let s = ahe_bench::scores::compute(n, &all, 0.0);
    s.tasks.into_iter().map(|(t, x)| (t, x.pass_at_1)).collect()
}

fn figure_of(r: &BTreeMap<String, f64>, keep: &BTreeSet<String>) -> Figure {
    let v: Vec<f64> = r
        .iter()
        .filter(|(t, _)| keep.contains(*t))
        .map(|x| *x.1)
        .collect();
    let (pass_at_1, ci) = ahe_bench::scores::mean_with_ci(&v);
    Figure {
        pass_at_1,
        ci,
        tasks: v.len(),
    }
}

/// a − b over the tasks of `keep` both ran, with the paired bootstrap interval.
fn paired(
    a: &BTreeMap<String, f64>,
    b: &BTreeMap<String, f64>,
    keep: &BTreeSet<String>,
) -> Option<Delta> {
    let (x, y): (Vec<f64>, Vec<f64>) = a
        .iter()
        .filter(|(t, _)| keep.contains(*t))
        .filter_map(|(t, v)| b.get(t).map(|w| (*w, *v)))
        .unzip();
    let (delta, ci) = ahe_attribution::stats::paired_delta_ci(&x, &y)?;
    Some(Delta {
        delta,
        ci,
        tasks: x.len(),
    })
}
