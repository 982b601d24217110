//! The run's closing evidence as plain sentences (the same in `report.md`, `report.html` and
//! `ahe show`): why best is best, its re-evaluation on fresh trials against the seed with the
//! selection bias, and the matched-budget baseline.

use ahe_rundir::final_eval::{Baseline, Figure, FinalEval, Sequential, Stopped};
use ahe_rundir::run_dir::Best;

use crate::numbers::{ci, f3, usd};

/// The sentences, each one line; empty when the run has no best yet.
pub fn lines(best: Option<&Best>, fin: Option<&FinalEval>, base: Option<&Baseline>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(b) = best {
        if !b.why.is_empty() {
            out.push(format!("best is iteration {}: {}", b.iteration, b.why));
        }
        if let Some(c) = &b.contender {
            out.push(format!(
                "contender: iteration {} scored {} (paired {:+.3}, 95% CI {}) — within noise of best",
                c.iteration,
                f3(c.pass_at_1),
                c.delta,
                ci(c.delta_ci)
            ));
        }
    }
    if let Some(f) = fin {
        out.extend(final_lines(f));
    }
    if let Some(b) = base {
        out.push(baseline_line(b));
    }
    out
}

fn figure(f: &Figure) -> String {
    format!(
        "{} (95% CI {}, {} tasks)",
        f3(f.pass_at_1),
        ci(f.ci),
        f.tasks
    )
}

fn final_lines(f: &FinalEval) -> Vec<String> {
    let cost = match f.cost.cost_usd > 0.0 {
        true => usd(f.cost.cost_usd),
        false => "unknown".into(),
    };
    let mut out = match &f.sequential {
        Some(q) => sequential_lines(f, q, &cost),
        None => vec![format!(
            "final re-evaluation: {} fresh trials per task and harness (cost {cost}, {} trials)",
            f.trials_per_task, f.cost.trials
        )],
    };
    let seed_only = f.sequential.as_ref().map(|q| q.stopped) == Some(Stopped::BestIsSeed);
    for h in &f.harnesses {
        let held = h
            .held_out
            .as_ref()
            .map(|x| format!("; held-out {}", figure(x)))
            .unwrap_or_default();
        let fresh = if seed_only { "its own trials" } else { "fresh" };
        out.push(format!(
            "{} — iteration {}: visible {}{held} ({fresh}); its own iteration measured {}",
            h.role,
            h.iteration,
            figure(&h.visible),
            f3(h.selected_pass_at_1)
        ));
    }
    if let Some(c) = &f.best_tainted_by {
        out.push(format!(
            "best as chosen during the run held {c}, which a later iteration rolled back"
        ));
    }
    if let Some([from, to]) = f.switched {
        out.push(format!(
            "the runner-up (iteration {to}) beat best (iteration {from}) on the fresh trials and is now best"
        ));
    }
    out.push(f.verdict());
    if let Some(d) = &f.best_vs_seed_held_out {
        out.push(format!(
            "on held-out tasks{}: best − seed = {:+.3} (95% CI {}, {} tasks)",
            if f.sequential.is_some() {
                " (reused rollout trials)"
            } else {
                ""
            },
            d.delta,
            ci(d.ci),
            d.tasks
        ));
    }
    if !seed_only {
        out.push(format!(
            "selection bias: best's own iteration overstated it by {:+.3} (the winner's curse of picking the maximum of noisy figures)",
            f.selection_bias
        ));
    }
    out
}

/// What the sequential final answer ran, reused and why it stopped (docs/final-answer.md).
fn sequential_lines(f: &FinalEval, q: &Sequential, cost: &str) -> Vec<String> {
    let mut out = vec![format!(
        "final answer: {} fresh trials ({} round(s) of {} trial per visible task for best and for the seed, cap {}; cost {cost}); stopped: {}",
        q.fresh_trials,
        q.looks.len(),
        q.per_round,
        f.trials_per_task,
        q.stopped.reason()
    )];
    if let Some(l) = q.looks.last() {
        out.push(format!(
            "rule: a look after each of at most {} rounds, α = {:.2} spent {} (at most {:.0}% chance of a false \"beyond noise\" over all looks), futile below {:.0}% conditional power; last look: conditional power {:.0}%",
            q.max_rounds,
            q.alpha,
            match q.spending.as_str() {
                "" => "half at the first look and the rest over the later ones".to_string(),
                s => format!("by {s} bounds"),
            },
            100.0 * q.alpha,
            100.0 * q.futility,
            100.0 * l.conditional_power
        ));
    }
    if !q.reused.is_empty() {
        let r: Vec<String> = (q.reused.iter())
            .map(|r| {
                format!(
                    "{} {} trials of iteration {} ({})",
                    r.role, r.tasks, r.iteration, r.trials
                )
            })
            .collect();
        out.push(format!("reused without running: {}", r.join(", ")));
    }
    if !q.runner_up.is_empty() {
        out.push(format!("runner-up: {}", q.runner_up));
    }
    out
}

fn baseline_line(b: &Baseline) -> String {
    let spend = match b.basis.as_str() {
        "usd" => usd(b.evolve_spend),
        _ => format!("{:.0} tokens", b.evolve_spend),
    };
    let best = b
        .best_pass_at_1
        .map(|p| format!("{} (iteration {})", f3(p), b.best_iteration.unwrap_or(0)))
        .unwrap_or_else(|| "–".into());
    format!(
        "matched budget: the run spent {spend} = {} seed trials per task (ran {}); seed pass@{} = {} (95% CI {}) — {}; seed pass@1 = {}; best pass@1 = {best}",
        b.affordable_per_task,
        b.n,
        b.n,
        f3(b.seed_pass_at_n),
        ci(b.seed_pass_at_n_ci),
        b.label,
        f3(b.seed_pass_at_1),
    )
}
