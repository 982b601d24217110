//! Prediction quality against the truth: (change, task) pairs predicted and true, where the
//! truth is the counterfactual for tested tasks and the prediction elsewhere.

use std::collections::BTreeSet;

use super::{ChangeVerdict, TruthQuality};

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
