//! `evidence.json`: what an iteration learned beyond its rollout — confirmation trials of
//! flips within noise, counterfactual trials (H_eval minus one change) — and what they cost.
//! Attribution reads it back to turn flips and predictions into verdicts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::extra::{SetCost, Tally};

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
}

impl Evidence {
    /// The counterfactual tests of one task.
    pub fn tests_of<'a>(&'a self, task: &'a str) -> impl Iterator<Item = &'a CfTest> + 'a {
        self.counterfactual.iter().filter(move |c| c.task == task)
    }

    /// Extra trials of every kind, and their cost.
    pub fn total_cost(&self) -> SetCost {
        let mut c = self.confirm_cost.clone();
        c.add(&self.counterfactual_cost);
        c
    }
}
