//! The sequential final answer (docs/final-answer.md): best − seed on fresh paired trials of
//! both, run in rounds, with a look after each round. Look r's interval over tasks uses a
//! group-sequential bound: α is spent over the looks by an O'Brien–Fleming-type function
//! (almost nothing early, nearly all of it at the cap), and the bounds come from the exact
//! joint law of the looks (`crate::boundary`: each round's trials are independent fresh
//! ones), so the chance that any look excludes 0 when best and the seed are equal is α
//! (up to the normal approximation over tasks) and the last look is nearly as strict as a
//! fixed test of all the trials. A look stops when its interval excludes 0, when the cap is
//! reached, or as futile when even the estimate taken as the truth would leave the cap's
//! interval covering 0 more often than `1 − futility` (non-binding: it can only remove
//! chances to exclude 0, never add them).

use ahe_rundir::final_eval::{Look, Stopped};

use crate::boundary::{self, Spending};
use crate::normal;

/// Family-wise error rate of the final answer over all its looks.
pub const ALPHA: f64 = 0.05;

/// Conditional power under which a look stops as futile (0.2: at 89 tasks, k = 2, a best
/// that left the seed costs two rounds instead of three for 97.0% agreement with the 2k
/// answer instead of 97.8%; docs/final-answer.md, "Futility 0.2").
pub const FUTILITY: f64 = 0.2;

/// How the final answer spends α over its looks.
pub const SPENDING: Spending = Spending::OBrienFleming;

/// How the final answer spends its trials.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Family-wise error rate over the looks.
    pub alpha: f64,
    /// Looks at most (the cap divided by the trials a round adds).
    pub rounds: u32,
    /// Conditional power under which a look stops as futile.
    pub futility: f64,
    /// How α is spent over the looks.
    pub spending: Spending,
    /// Each look's two-sided z bound (from `spending`, exact for the looks' joint law).
    bounds: Vec<f64>,
}

impl Plan {
    /// The plan for a cap of `cap` fresh trials per task and harness, `per_round` a round:
    /// ⌈cap / per_round⌉ looks (at least one), [`ALPHA`], [`SPENDING`] and [`FUTILITY`].
    pub fn new(cap: u32, per_round: u32) -> Plan {
        Plan::with(cap.div_ceil(per_round.max(1)), SPENDING, FUTILITY)
    }

    /// A plan of `rounds` looks (at least one) with the spending and futility given.
    pub fn with(rounds: u32, spending: Spending, futility: f64) -> Plan {
        let rounds = rounds.max(1);
        Plan {
            alpha: ALPHA,
            rounds,
            futility,
            spending,
            bounds: boundary::bounds(ALPHA, spending, rounds),
        }
    }

    /// The α spent by the end of look `round` (all of it at the last look).
    pub fn spent(&self, round: u32) -> f64 {
        let t = round.min(self.rounds) as f64 / self.rounds as f64;
        self.spending.spent(self.alpha, t)
    }

    /// The α look `round` spends: what is spent by it less what was spent before.
    pub fn alpha_at(&self, round: u32) -> f64 {
        self.spent(round) - self.spent(round.saturating_sub(1))
    }

    /// Look `round`'s two-sided bound on the standardised mean (normal scale).
    pub fn bound(&self, round: u32) -> f64 {
        let i = round.clamp(1, self.rounds) as usize - 1;
        self.bounds[i]
    }

    /// The interval multiplier of look `round` over `tasks` tasks: the Student t quantile
    /// (tasks − 1 degrees of freedom) with the same tail as the look's normal bound.
    pub fn multiplier(&self, tasks: usize, round: u32) -> f64 {
        let z = self.bound(round);
        if !z.is_finite() {
            return f64::INFINITY;
        }
        normal::t_quantile(normal::cdf(z), (tasks.max(2) - 1) as f64)
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
    // A look that spends no α has an infinite bound: its interval is all of [−1, 1].
    let c = plan.multiplier(n, round);
    let half = if c.is_finite() { c * se } else { f64::INFINITY };
    out.delta = mean;
    out.ci = [(mean - half).max(-1.0), (mean + half).min(1.0)];
    out.alpha_spent = plan.spent(round);
    let last = plan.multiplier(n, plan.rounds);
    out.conditional_power = conditional_power(plan, round, mean, se, last);
    let stop = if mean - half > 0.0 {
        Some(Stopped::Better)
    } else if mean + half < 0.0 {
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
