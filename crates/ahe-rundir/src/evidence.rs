//! `evidence.json`: what an iteration learned beyond its rollout — confirmation trials of
//! flips within noise, counterfactual trials (H_eval minus one change) — and what they cost.
//! Attribution reads it back to turn flips and predictions into verdicts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use ahe_bench::{TrialResult, TrialStatus};

/// Which way a counterfactual test looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CfKind {
    /// A regressed task: does reverting the change make it pass again?
    Regression,
    /// A fixed task claimed by several changes or by none: does reverting the change make it
    /// fail again?
    Fix,
}

/// One task re-run on the evaluated harness minus one change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CfTest {
    /// Task.
    pub task: String,
    /// The reverted change.
    pub change: String,
    /// Regression or fix.
    pub kind: CfKind,
    /// The counterfactual harness commit (moves no ref of the harness repository).
    pub commit: String,
    /// Its trials.
    pub tally: Tally,
    /// The task's previous status came back with the change reverted: a regression passes
    /// every trial again (the change is blamed), a fix fails one (the change is credited).
    pub restored: bool,
}

/// A task the counterfactual phase wanted to test and did not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CfSkip {
    /// Task.
    pub task: String,
    /// Why (budget, no revertible change, conflicting revert...).
    pub reason: String,
}

/// The contents of `evidence.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Confirmation trials of the evaluated harness per flipped task (beyond the first k).
    #[serde(default)]
    pub confirm: BTreeMap<String, Tally>,
    /// What the confirmation trials cost.
    #[serde(default)]
    pub confirm_cost: SetCost,
    /// `[attribution] confirm_trials` when they ran: a flip whose confirmation stopped below
    /// it for the budget is still counted.
    #[serde(default)]
    pub confirm_cap: u32,
    /// Every counterfactual test.
    #[serde(default)]
    pub counterfactual: Vec<CfTest>,
    /// Tasks left untested, and why.
    #[serde(default)]
    pub counterfactual_skipped: Vec<CfSkip>,
    /// What the counterfactual trials cost.
    #[serde(default)]
    pub counterfactual_cost: SetCost,
    /// The canary run before the full rollout (None: no canary this iteration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryRecord>,
    /// The screen trials of the evolve step's variants (`[evolve] variants`): within the
    /// iteration's `[attribution] max_extra_share` after every trial above, but reported
    /// apart (role `screen`), not in [`Evidence::total_cost`].
    #[serde(default, skip_serializing_if = "SetCost::is_empty")]
    pub screen_cost: SetCost,
}

/// What the canary did before the full rollout (`[attribution] canary = true`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CanaryRecord {
    /// The harness the canary ran (the previous iteration's commit).
    pub base_commit: String,
    /// The harness the full rollout evaluates: `base_commit` minus the reverted culprits.
    pub evaluated_commit: String,
    /// The canary set, in the order it was chosen.
    pub tasks: Vec<String>,
    /// Canary tasks that passed before and failed on `base_commit`.
    pub regressions: Vec<String>,
    /// Counterfactual tests of the regressions.
    pub tests: Vec<CfTest>,
    /// Tasks left untested, and why.
    pub skipped: Vec<CfSkip>,
    /// Changes reverted before the full rollout (the culprits), in order.
    pub rolled_back: Vec<String>,
    /// Files a conflicting revert restored whole (lines of other changes lost with them).
    pub restored_files: Vec<String>,
    /// Canary trials of `base_commit`.
    pub canary_trials: u32,
    /// Counterfactual trials of the regressions.
    pub cf_trials: u32,
    /// Canary trials the full rollout reused (nothing was reverted); else 0.
    pub trials_saved: u32,
    /// Dollars of the canary and its counterfactual trials.
    pub cost: SetCost,
}

impl Evidence {
    /// Extra trials spent before the counterfactual phase: confirmation trials (runs that
    /// confirmed first) and the canary's counterfactual trials.
    pub fn extra_trials_used(&self) -> u32 {
        let confirm: u32 = self.confirm.values().map(|x| x.trials + x.infra).sum();
        confirm + self.canary.as_ref().map_or(0, |c| c.cf_trials)
    }

    /// The counterfactual tests of one task.
    pub fn tests_of<'a>(&'a self, task: &'a str) -> impl Iterator<Item = &'a CfTest> + 'a {
        self.counterfactual.iter().filter(move |c| c.task == task)
    }

    /// Ids of the changes the canary reverted before the full rollout.
    pub fn canary_reverted(&self) -> Vec<String> {
        self.canary
            .as_ref()
            .map(|c| c.rolled_back.clone())
            .unwrap_or_default()
    }

    /// Extra trials of every kind, and their cost.
    pub fn total_cost(&self) -> SetCost {
        let mut c = self.confirm_cost.clone();
        c.add(&self.counterfactual_cost);
        if let Some(k) = &self.canary {
            // Canary trials the rollout reused are the rollout's; the rest were extra.
            let mut spent = k.cost.clone();
            if k.trials_saved > 0 {
                spent = SetCost::default();
            }
            spent.trials = k.cf_trials
                + if k.trials_saved > 0 {
                    0
                } else {
                    k.canary_trials
                };
            c.add(&spent);
        }
        c
    }
}

/// Passes and trials of one task in a set (infra errors counted apart, not as trials).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Trials that passed.
    pub passed: u32,
    /// Trials that ran to a verdict (pass or fail).
    pub trials: u32,
    /// Trials lost to infra errors (no evidence either way).
    pub infra: u32,
}

impl Tally {
    /// Counts a set of trial results.
    pub fn of<'a>(results: impl IntoIterator<Item = &'a TrialResult>) -> Tally {
        let mut t = Tally::default();
        for r in results {
            match r.status {
                TrialStatus::Pass if r.clean_pass() => {
                    t.passed += 1;
                    t.trials += 1;
                }
                TrialStatus::InfraError => t.infra += 1,
                _ => t.trials += 1,
            }
        }
        t
    }

    /// Whether every trial that ran passed (the task status `pass` of docs/attribution.md#task-status-pass1-flips), at least one.
    pub fn all_pass(&self) -> bool {
        self.trials > 0 && self.passed == self.trials
    }
}

/// What one set of extra trials cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SetCost {
    /// Trials run (infra errors included).
    pub trials: u32,
    /// Dollars of every model call of the set.
    pub cost_usd: f64,
    /// Tokens of the set's trials.
    pub usage: ahe_model::Usage,
}

impl SetCost {
    /// Whether no trial ran and nothing was spent.
    pub fn is_empty(&self) -> bool {
        self.trials == 0 && self.cost_usd == 0.0 && self.usage == ahe_model::Usage::default()
    }

    /// Adds another set's cost.
    pub fn add(&mut self, o: &SetCost) {
        self.trials += o.trials;
        self.cost_usd += o.cost_usd;
        self.usage.add(&o.usage);
    }
}
