//! The sequential final answer (docs/final-answer.md): best − seed on fresh paired trials of
//! both, run in rounds, with a look after each round. Look r's interval over tasks has level
//! 1 − α_r with Σ α_r = α (Bonferroni alpha spending: half of α at the first look, the rest
//! evenly after), so the chance that any look excludes 0 when best and the seed are equal is
//! at most α; a look stops when its interval
//! excludes 0, when the cap is reached, or as futile when even the estimate taken as the
//! truth would leave the cap's interval covering 0 more often than not (non-binding: it can
//! only remove chances to exclude 0, never add them).

use ahe_rundir::final_eval::{Look, Stopped};

use crate::normal;

/// Family-wise error rate of the final answer over all its looks.
pub const ALPHA: f64 = 0.05;

/// Conditional power under which a look stops as futile.
pub const FUTILITY: f64 = 0.2;

/// The share of α the first look spends (the rest is split evenly over the later looks):
/// the first look, one round, is where the final answer should usually decide.
pub const FIRST_LOOK_SHARE: f64 = 0.5;

/// How the final answer spends its trials.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// Family-wise error rate over the looks.
    pub alpha: f64,
    /// Looks at most (the cap divided by the trials a round adds).
    pub rounds: u32,
    /// Conditional power under which a look stops as futile.
    pub futility: f64,
    /// The share of α the first look spends.
    pub first_share: f64,
}

impl Plan {
    /// The plan for a cap of `cap` fresh trials per task and harness, `per_round` a round:
    /// ⌈cap / per_round⌉ looks (at least one), [`ALPHA`], [`FUTILITY`] and
    /// [`FIRST_LOOK_SHARE`].
    pub fn new(cap: u32, per_round: u32) -> Plan {
        Plan {
            alpha: ALPHA,
            rounds: cap.div_ceil(per_round.max(1)).max(1),
            futility: FUTILITY,
            first_share: FIRST_LOOK_SHARE,
        }
    }

    /// The α look `round` spends: `first_share` of α at the first, the rest evenly over the
    /// others (all of it when there is one look); they sum to α.
    pub fn alpha_at(&self, round: u32) -> f64 {
        match (self.rounds, round) {
            (1, _) => self.alpha,
            (_, 1) => self.alpha * self.first_share,
            (r, _) => self.alpha * (1.0 - self.first_share) / (r - 1) as f64,
        }
    }

    /// The two-sided interval multiplier of look `round`: Student t over `tasks − 1`
    /// degrees of freedom at 1 − α_round/2.
    pub fn multiplier(&self, tasks: usize, round: u32) -> f64 {
        let p = 1.0 - self.alpha_at(round) / 2.0;
        normal::t_quantile(p, (tasks.max(2) - 1) as f64)
    }
}

/// The look after `round` rounds at `trials_per_task` fresh trials per task and harness:
/// `pairs` are (best's rate, the seed's rate) per visible task; the look's `Stopped` is
/// None when another round should run.
pub fn look(
    plan: &Plan,
    round: u32,
    trials_per_task: u32,
    pairs: &[(f64, f64)],
) -> (Look, Option<Stopped>) {
    let n = pairs.len();
    let mut out = Look {
        round,
        trials_per_task,
        tasks: n,
        ci: [-1.0, 1.0],
        ..Default::default()
    };
    if n < 2 {
        return (out, Some(Stopped::TooFewTasks));
    }
    let d: Vec<f64> = pairs.iter().map(|(b, s)| b - s).collect();
    let mean = d.iter().sum::<f64>() / n as f64;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let se = (var / n as f64).sqrt();
    let c = plan.multiplier(n, round);
    out.delta = mean;
    out.ci = [(mean - c * se).max(-1.0), (mean + c * se).min(1.0)];
    let last = plan.multiplier(n, plan.rounds);
    out.conditional_power = conditional_power(plan, round, mean, se, last);
    let stop = if mean - c * se > 0.0 {
        Some(Stopped::Better)
    } else if mean + c * se < 0.0 {
        Some(Stopped::Worse)
    } else if round >= plan.rounds {
        Some(Stopped::Cap)
    } else if out.conditional_power < plan.futility {
        Some(Stopped::Futile)
    } else {
        None
    };
    (out, stop)
}

/// The chance that the last look's interval excludes 0 if `mean` were the true difference:
/// after R of r rounds the mean is (r·mean + (R − r)·fresh)/R, the standard error shrinks
/// as 1/√rounds (an optimistic projection when the tasks' effects differ: it stops fewer
/// runs, never more), and `c` is the last look's multiplier.
fn conditional_power(plan: &Plan, round: u32, mean: f64, se: f64, c: f64) -> f64 {
    let (r, big) = (round.max(1) as f64, plan.rounds.max(round) as f64);
    let threshold = c * se * (r / big).sqrt();
    let spread = se * (r * (big - r)).sqrt() / big;
    if spread <= 0.0 {
        return if mean.abs() > threshold { 1.0 } else { 0.0 };
    }
    let up = 1.0 - normal::cdf((threshold - mean) / spread);
    let down = normal::cdf((-threshold - mean) / spread);
    up + down
}

#[cfg(test)]
#[path = "sequential_tests.rs"]
mod tests;
