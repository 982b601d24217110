//! The final re-evaluation (docs/attribution.md#an-honest-best): `best` was picked as the maximum of noisy figures, so
//! its own figure is biased upward (the winner's curse). After the last iteration, best, the
//! seed and the runner-up (the highest-scoring other iteration) each run `[evolve]
//! final_trials` fresh trials per task, visible and held-out, as extra trial sets of the
//! final iteration (journaled: a resumed phase runs none twice). The runner-up replaces best
//! when it scores higher on the fresh visible trials; `final.json` states best − seed with a
//! paired interval on fresh trials and how much best's own figure overstated it.

use std::collections::{BTreeMap, BTreeSet};

use ahe_bench::TrialResult;
use ahe_rundir::final_eval::{Delta, Figure, FinalEval, Reevaluated};
use tokio_util::sync::CancellationToken;

use crate::attribute_phase::{held_harm, set_best};
use crate::config::AttributionConfig;
use crate::run::Split;
use crate::trials::{SetCost, Trials};
use ahe_rundir::run_dir::{IterationDir, RunDir};

/// What the final re-evaluation reads besides the trials interface.
pub struct FinalInputs<'a> {
    /// The run directory (best, each iteration's scores, manifest and verdicts).
    pub dir: &'a RunDir,
    /// The run's tasks: every one is re-run; figures are given for visible and held-out.
    pub split: Split<'a>,
    /// Fresh trials per task and harness (`[evolve] final_trials`, else 2k).
    pub trials_per_task: u32,
    /// `[attribution]`: which verdicts make a harness no runner-up.
    pub policy: &'a AttributionConfig,
}

/// The trial-set prefix of the final re-evaluation (`final/iter-NNN`).
pub const SET_PREFIX: &str = "final/";

/// One harness to re-run: which roles it plays and where it was first evaluated.
struct Pick {
    roles: Vec<&'static str>,
    iteration: u32,
    commit: String,
    selected: f64,
}

/// Runs the final re-evaluation into `it` (the final iteration) and writes `final.json`.
pub async fn final_eval(
    i: &FinalInputs<'_>,
    trials: &Trials<'_>,
    it: &IterationDir,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let (n, visible, holdout) = (i.trials_per_task, i.split.visible, i.split.holdout);
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
    if n == 0 {
        return Ok(());
    }
    let picks = picks(i, it.number(), &best)?;
    let tasks: Vec<String> = i.split.tasks.iter().map(|t| t.name.clone()).collect();
    let mut cost = SetCost::default();
    let mut fresh: Vec<BTreeMap<String, f64>> = Vec::new();
    for p in &picks {
        let set = format!("{SET_PREFIX}{}", crate::commit::iter_tag(p.iteration));
        let (res, c) = trials
            .run_set(it, &set, &p.commit, &tasks, n, cancel.clone())
            .await?;
        cost.add(&c);
        fresh.push(rates(n, res));
    }
    let figure = |r: &BTreeMap<String, f64>, keep: &BTreeSet<String>| figure_of(r, keep);
    let mut out = FinalEval {
        trials_per_task: n,
        ..Default::default()
    };
    for (p, r) in picks.iter().zip(&fresh) {
        out.harnesses.push(Reevaluated {
            role: p.roles.join(", "),
            iteration: p.iteration,
            commit: p.commit.clone(),
            selected_pass_at_1: p.selected,
            visible: figure(r, visible),
            held_out: (!holdout.is_empty()).then(|| figure(r, holdout)),
        });
    }
    out.best_tainted_by =
        tainted_by(&reverted_changes(i.dir, it.number()), picks[0].iteration).map(String::from);
    runner_up_may_win(i.dir, trials, &picks, &mut out, &mut fresh)?;
    let seed = out.harnesses.iter().position(|h| h.role.contains("seed"));
    let runner = out
        .harnesses
        .iter()
        .position(|h| h.role.contains("runner-up"));
    if let (Some(0), Some(r)) = (seed, runner) {
        out.runner_up_vs_seed = paired(&fresh[r], &fresh[0], visible);
    }
    if let Some(s) = seed.filter(|s| *s != 0) {
        out.best_vs_seed = paired(&fresh[0], &fresh[s], visible);
        if !holdout.is_empty() {
            out.best_vs_seed_held_out = paired(&fresh[0], &fresh[s], holdout);
        }
    }
    out.selection_bias = out.harnesses[0].selected_pass_at_1 - out.harnesses[0].visible.pass_at_1;
    out.cost = cost;
    trials.ledger.say(format!("[final] {}", out.verdict()));
    i.dir.write_final_eval(&out)
}

/// The runner-up takes best's place when the fresh visible trials rank it higher; a best
/// that holds a change rolled back later (`out.best_tainted_by`) loses ties to it. On a
/// switch, best.json is rewritten and `out` and `fresh` put the new best first.
fn runner_up_may_win(
    dir: &RunDir,
    trials: &Trials,
    picks: &[Pick],
    out: &mut FinalEval,
    fresh: &mut [BTreeMap<String, f64>],
) -> anyhow::Result<()> {
    let n = out.trials_per_task;
    let Some(r) = picks.iter().position(|p| p.roles.contains(&"runner-up")) else {
        return Ok(());
    };
    let (rv, bv) = (
        out.harnesses[r].visible.pass_at_1,
        out.harnesses[0].visible.pass_at_1,
    );
    if !(rv > bv || (out.best_tainted_by.is_some() && rv >= bv)) {
        return Ok(());
    }
    let (from, to) = (picks[0].iteration, picks[r].iteration);
    let why = format!(
        "won the final re-evaluation against iteration {from}: {rv:.3} vs {bv:.3} on {n} \
         fresh trials per visible task"
    );
    let selected = picks[r].selected;
    set_best(dir, trials.repo, to, &picks[r].commit, selected, why, None)?;
    out.switched = Some([from, to]);
    out.harnesses.swap(0, r);
    fresh.swap(0, r);
    let swap_roles = |h: &mut Reevaluated, a: &str, b: &str| {
        h.role = h.role.replace(a, "\u{0}").replace(b, a).replace('\u{0}', b);
    };
    swap_roles(&mut out.harnesses[0], "runner-up", "best");
    swap_roles(&mut out.harnesses[r], "best", "runner-up");
    Ok(())
}

/// best, the seed and the runner-up (the highest visible pass@1 among the other evaluated
/// iterations), one entry per distinct commit, best first.
fn picks(
    i: &FinalInputs,
    last: u32,
    best: &ahe_rundir::run_dir::Best,
) -> anyhow::Result<Vec<Pick>> {
    let mut scored: Vec<(u32, String, f64)> = Vec::new();
    for t in 1..=last {
        let it = i.dir.iteration(t);
        if let (Some(c), Ok(s)) = (it.evaluated(), it.scores()) {
            scored.push((t, c, s.visible_pass_at_1()));
        }
    }
    let mut out = vec![Pick {
        roles: vec!["best"],
        iteration: best.iteration,
        commit: best.commit.clone(),
        selected: best.pass_at_1,
    }];
    let mut add = |role: &'static str, (t, c, p): (u32, String, f64)| match out
        .iter_mut()
        .find(|x| x.commit == c)
    {
        Some(x) => x.roles.push(role),
        None => out.push(Pick {
            roles: vec![role],
            iteration: t,
            commit: c,
            selected: p,
        }),
    };
    if let Some(seed) = scored.first().cloned() {
        add("seed", seed);
    }
    // A harness that holds a change the run later rolled back, or judged HARMFUL or
    // UNJUDGED, is no runner-up: its figure includes the harm.
    let reverted = reverted_changes(i.dir, last);
    let runner = scored
        .iter()
        .filter(|x| x.1 != best.commit && tainted_by(&reverted, x.0).is_none())
        .filter(|x| held_harm(i.policy, &i.dir.iteration(x.0)).is_empty())
        .max_by(|a, b| a.2.total_cmp(&b.2).then(b.0.cmp(&a.0)))
        .cloned();
    if let Some(r) = runner {
        add("runner-up", r);
    }
    Ok(out)
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

/// Clean pass rate per task of a set's fresh trials (infra errors and suspect passes fail).
fn rates(n: u32, res: BTreeMap<String, Vec<TrialResult>>) -> BTreeMap<String, f64> {
    let all: Vec<TrialResult> = res.into_values().flatten().collect();
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
