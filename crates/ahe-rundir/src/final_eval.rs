//! What a run says about itself at the end, beyond its iterations: the final re-evaluation
//! of best, seed and runner-up on fresh trials (`final.json`), and the matched-budget
//! comparison (`baseline/baseline.json`).

use serde::{Deserialize, Serialize};

use crate::evidence::SetCost;

/// A pass@1 over some tasks, with its 95% bootstrap interval over tasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Mean over tasks of passed/trials (clean: suspect passes and infra count as failures).
    pub pass_at_1: f64,
    /// Its interval.
    pub ci: [f64; 2],
    /// Tasks it averages.
    pub tasks: usize,
}

/// A paired difference (a − b) over the tasks both ran, with its bootstrap interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    /// Mean over paired tasks of a's rate − b's rate.
    pub delta: f64,
    /// Paired bootstrap 95% interval.
    pub ci: [f64; 2],
    /// Paired tasks.
    pub tasks: usize,
}

impl Delta {
    /// Whether the interval holds 0: no difference shown beyond noise.
    pub fn covers_zero(&self) -> bool {
        self.ci[0] <= 0.0 && self.ci[1] >= 0.0
    }
}

/// One harness of the final re-evaluation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reevaluated {
    /// `best`, `seed` or `runner-up` (several when one harness is two of them: `best, seed`).
    pub role: String,
    /// The iteration that evaluated it first.
    pub iteration: u32,
    /// Its commit.
    pub commit: String,
    /// The visible pass@1 its own iteration measured (what selection saw).
    pub selected_pass_at_1: f64,
    /// Fresh trials: visible tasks.
    pub visible: Figure,
    /// Fresh trials: held-out tasks (None: the run holds none out).
    pub held_out: Option<Figure>,
}

/// `final.json`: best, seed and (when it differs) the runner-up re-run on fresh trials.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalEval {
    /// Fresh trials per task and harness (`[evolve] final_trials`).
    pub trials_per_task: u32,
    /// The harnesses, best first.
    pub harnesses: Vec<Reevaluated>,
    /// best − seed on the visible tasks' fresh trials.
    pub best_vs_seed: Option<Delta>,
    /// best − seed on the held-out tasks' fresh trials.
    pub best_vs_seed_held_out: Option<Delta>,
    /// When best is the seed: runner-up − seed on the visible tasks' fresh trials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up_vs_seed: Option<Delta>,
    /// How much best's own iteration overstated it: its selected figure − its fresh visible
    /// pass@1 (the winner's curse; positive = overstated).
    pub selection_bias: f64,
    /// A change the run rolled back (HARMFUL or UNJUDGED) that the chosen best held; such a
    /// best loses ties to the runner-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_tainted_by: Option<String>,
    /// When the runner-up beat best on the fresh trials and became best: from which
    /// iteration to which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switched: Option<[u32; 2]>,
    /// What the fresh trials cost.
    pub cost: SetCost,
    /// The sequential final answer (runs since it exists; None in an older `final.json`,
    /// which re-ran best, seed and runner-up on `trials_per_task` fresh trials each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<Sequential>,
}

/// Why the sequential final answer stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stopped {
    /// The interval for best − seed lies above 0: best is better beyond noise.
    Better,
    /// The interval lies below 0: best is worse beyond noise (harm).
    Worse,
    /// The interval covers 0 and, were the estimate the truth, the cap would exclude 0 with
    /// a chance below the plan's futility threshold: more trials would not decide.
    Futile,
    /// The cap of fresh trials per task was reached with the interval covering 0.
    Cap,
    /// best is the seed: there is nothing to compare, no trial ran.
    BestIsSeed,
    /// The run's budget was reached between rounds.
    Budget,
    /// Fewer than two visible tasks: no interval over tasks exists.
    TooFewTasks,
}

impl Stopped {
    /// One clause on why the final answer stopped, for reports.
    pub fn reason(&self) -> &'static str {
        match self {
            Stopped::Better => "the interval cleared 0 upward (better beyond noise)",
            Stopped::Worse => "the interval cleared 0 downward (worse beyond noise)",
            Stopped::Futile => {
                "more rounds could not plausibly clear 0 (conditional power below the futility threshold)"
            }
            Stopped::Cap => "the cap of fresh trials was reached with the interval covering 0",
            Stopped::BestIsSeed => "best is the seed: nothing to compare",
            Stopped::Budget => "the run's budget was reached",
            Stopped::TooFewTasks => "fewer than two visible tasks: no interval over tasks",
        }
    }
}

/// One look of the sequential final answer: best − seed after `round` rounds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Look {
    /// Rounds run so far (1-based).
    pub round: u32,
    /// Fresh trials per task of each harness so far.
    pub trials_per_task: u32,
    /// Mean over visible tasks of best's rate − the seed's rate.
    pub delta: f64,
    /// The look's interval (Student t over tasks at this look's group-sequential bound).
    pub ci: [f64; 2],
    /// The α spent by the end of this look (all of `alpha` at the last planned look).
    #[serde(default)]
    pub alpha_spent: f64,
    /// The chance that the cap's interval excludes 0 were `delta` the truth.
    pub conditional_power: f64,
    /// Visible tasks paired.
    pub tasks: usize,
}

/// Trials the final answer used without running them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reused {
    /// Whose trials (`best`, `seed`).
    pub role: String,
    /// The iteration whose rollout ran them.
    pub iteration: u32,
    /// Which tasks (`held-out`).
    pub tasks: String,
    /// How many trials.
    pub trials: u32,
}

/// The sequential final answer (docs/final-answer.md): fresh paired trials of best and the
/// seed on the visible tasks in rounds, a look after each, stopped by [`Stopped`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sequential {
    /// Family-wise error rate over all looks.
    pub alpha: f64,
    /// How `alpha` is spent over the looks (empty in records written before it was named:
    /// half at the first look, the rest evenly, by the union bound).
    #[serde(default)]
    pub spending: String,
    /// Fresh trials per task and harness each round adds.
    pub per_round: u32,
    /// Planned looks at most (the cap `trials_per_task` / `per_round`).
    pub max_rounds: u32,
    /// Conditional power under which a look stops as futile.
    pub futility: f64,
    /// Every look, in order.
    pub looks: Vec<Look>,
    /// Why it stopped.
    pub stopped: Stopped,
    /// Trials it used without running them (the held-out comparison).
    #[serde(default)]
    pub reused: Vec<Reused>,
    /// Fresh trials it ran (both harnesses, every round).
    pub fresh_trials: u32,
    /// What became of the runner-up (not re-evaluated: why).
    #[serde(default)]
    pub runner_up: String,
}

impl FinalEval {
    /// One sentence on best against the seed, for reports.
    pub fn verdict(&self) -> String {
        let d = |d: &Delta| {
            format!(
                "{:+.3} (95% CI {:+.3} to {:+.3}, {} tasks)",
                d.delta, d.ci[0], d.ci[1], d.tasks
            )
        };
        match &self.best_vs_seed {
            None => match &self.runner_up_vs_seed {
                Some(r) if r.covers_zero() => format!(
                    "best is the seed: no harness beat it beyond noise; runner-up − seed = {}: \
                     the interval covers 0 — no improvement shown beyond noise",
                    d(r)
                ),
                Some(r) => format!(
                    "best is the seed: no harness beat it beyond noise during the run; on fresh \
                     trials runner-up − seed = {}",
                    d(r)
                ),
                None => "best is the seed: the run found no harness better than it; the interval \
                         of an unchanged harness covers 0 — no improvement shown beyond noise"
                    .into(),
            },
            Some(d) if d.covers_zero() => format!(
                "best − seed = {:+.3} (95% CI {:+.3} to {:+.3}, {} tasks): the interval covers 0 — \
                 no improvement shown beyond noise",
                d.delta, d.ci[0], d.ci[1], d.tasks
            ),
            Some(d) => format!(
                "best − seed = {:+.3} (95% CI {:+.3} to {:+.3}, {} tasks): {} beyond noise",
                d.delta,
                d.ci[0],
                d.ci[1],
                d.tasks,
                if d.delta > 0.0 { "better" } else { "worse" }
            ),
        }
    }
}

/// `baseline/baseline.json`: what the evolve run's spend would buy as seed trials.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// `usd`, or `tokens` when the config names no prices.
    pub basis: String,
    /// What the evolve run spent (all roles, all iterations), in the basis' unit.
    pub evolve_spend: f64,
    /// What one seed trial costs (the first iteration's rollout, its mean per trial).
    pub per_seed_trial: f64,
    /// Seed trials per task the spend buys (before the cap).
    pub affordable_per_task: u32,
    /// Seed trials per task run (N).
    pub n: u32,
    /// The cap (`--max-trials` or `[evolve] baseline_trials`).
    pub cap: u32,
    /// Tasks (visible and held-out of the first iteration).
    pub tasks: usize,
    /// The seed's pass@N and its 95% bootstrap interval over tasks.
    pub seed_pass_at_n: f64,
    /// Its interval.
    pub seed_pass_at_n_ci: [f64; 2],
    /// The seed's pass@1 over the same trials, and its interval.
    pub seed_pass_at_1: f64,
    /// Its interval.
    pub seed_pass_at_1_ci: [f64; 2],
    /// best's pass@1 (visible tasks), as the run recorded it.
    pub best_pass_at_1: Option<f64>,
    /// The iteration best comes from.
    pub best_iteration: Option<u32>,
    /// What pass@N means here.
    pub label: String,
}

/// The label every display of pass@N carries.
pub const BASELINE_LABEL: &str =
    "the seed's pass@N: what sampling N times plus a perfect picker would reach (an upper bound, not a deployable harness)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_final_json_reads_and_a_new_one_round_trips() {
        // Written before the sequential answer: no `sequential` key.
        let old = FinalEval {
            trials_per_task: 4,
            selection_bias: 0.1,
            switched: Some([2, 3]),
            ..Default::default()
        };
        let v = serde_json::to_value(&old).unwrap();
        assert!(v.get("sequential").is_none(), "{v}");
        let f: FinalEval = serde_json::from_value(v).unwrap();
        assert_eq!((f.sequential, f.switched), (None, Some([2, 3])));
        let seq = Some(Sequential {
            alpha: 0.05,
            spending: "O'Brien–Fleming-type (Lan–DeMets)".into(),
            per_round: 1,
            max_rounds: 4,
            futility: 0.2,
            looks: vec![Look {
                round: 1,
                trials_per_task: 1,
                delta: 0.25,
                ci: [0.05, 0.45],
                alpha_spent: 0.0001,
                conditional_power: 0.9,
                tasks: 20,
            }],
            stopped: Stopped::Better,
            reused: vec![],
            fresh_trials: 40,
            runner_up: String::new(),
        });
        let f = FinalEval {
            sequential: seq,
            ..Default::default()
        };
        let text = serde_json::to_string(&f).unwrap();
        assert!(text.contains(r#""stopped":"better""#), "{text}");
        assert_eq!(serde_json::from_str::<FinalEval>(&text).unwrap(), f);
    }
}
