//! Prediction quality against the truth: (change, task) pairs predicted and true, where the
//! truth is the counterfactual for tested tasks and the prediction elsewhere.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{ratio, ChangeVerdict};

/// Change-level prediction quality against the best truth at hand: a (change, task) pair is
/// true when the counterfactual says so where the task was tested, else when the task flipped
/// and the change named it; an untested flip no change named is a true pair of an unknown
/// change (a miss for recall).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TruthQuality {
    /// Predicted (change, fixed task) pairs.
    pub fix_predicted: usize,
    /// True (change, fixed task) pairs.
    pub fix_true: usize,
    /// Pairs both predicted and true.
    pub fix_hits: usize,
    /// fix_hits / fix_predicted.
    pub fix_precision: Option<f64>,
    /// fix_hits / fix_true.
    pub fix_recall: Option<f64>,
    /// Predicted (change, regressed task) pairs.
    pub risk_predicted: usize,
    /// True (change, regressed task) pairs.
    pub risk_true: usize,
    /// Pairs both predicted and true.
    pub risk_hits: usize,
    /// risk_hits / risk_predicted.
    pub risk_precision: Option<f64>,
    /// risk_hits / risk_true.
    pub risk_recall: Option<f64>,
    /// Flips whose truth came from counterfactual trials.
    pub counterfactual_tasks: usize,
}

impl TruthQuality {
    /// Fills the ratios from the counts.
    pub fn with_ratios(mut self) -> TruthQuality {
        self.fix_precision = ratio(self.fix_hits, self.fix_predicted);
        self.fix_recall = ratio(self.fix_hits, self.fix_true);
        self.risk_precision = ratio(self.risk_hits, self.risk_predicted);
        self.risk_recall = ratio(self.risk_hits, self.risk_true);
        self
    }

    /// The sum of two iterations' counts (for the cumulative figures).
    pub fn plus(&self, o: &TruthQuality) -> TruthQuality {
        TruthQuality {
            fix_predicted: self.fix_predicted + o.fix_predicted,
            fix_true: self.fix_true + o.fix_true,
            fix_hits: self.fix_hits + o.fix_hits,
            risk_predicted: self.risk_predicted + o.risk_predicted,
            risk_true: self.risk_true + o.risk_true,
            risk_hits: self.risk_hits + o.risk_hits,
            counterfactual_tasks: self.counterfactual_tasks + o.counterfactual_tasks,
            ..Default::default()
        }
        .with_ratios()
    }
}

/// [`TruthQuality`] of the verdicts' blamed and credited sets over the counted flips.
pub(super) fn truth_quality(
    changes: &[ChangeVerdict],
    f: &BTreeSet<&str>,
    g: &BTreeSet<&str>,
    tested: &dyn Fn(&str) -> bool,
) -> TruthQuality {
    // An untested flip that no change is blamed for or credited with is one true pair of an
    // unknown change: nothing predicted it.
    let truth = |set: &BTreeSet<&str>, of: &dyn Fn(&ChangeVerdict) -> &Vec<String>| -> usize {
        set.iter()
            .map(|t| {
                let n = changes
                    .iter()
                    .filter(|c| of(c).iter().any(|x| x == t))
                    .count();
                n.max(1)
            })
            .sum()
    };
    let hits = |named: &dyn Fn(&ChangeVerdict) -> &Vec<String>,
                truth: &dyn Fn(&ChangeVerdict) -> &Vec<String>| {
        changes
            .iter()
            .map(|c| named(c).iter().filter(|t| truth(c).contains(t)).count())
            .sum()
    };
    TruthQuality {
        fix_predicted: changes.iter().map(|c| c.predicted_fixes.len()).sum(),
        fix_true: truth(f, &|c| &c.credited_fixes),
        fix_hits: hits(&|c| &c.predicted_fixes, &|c| &c.credited_fixes),
        risk_predicted: changes.iter().map(|c| c.risk_tasks.len()).sum(),
        risk_true: truth(g, &|c| &c.blamed_regressions),
        risk_hits: hits(&|c| &c.risk_tasks, &|c| &c.blamed_regressions),
        counterfactual_tasks: f.iter().chain(g).filter(|t| tested(t)).count(),
        ..Default::default()
    }
    .with_ratios()
}
