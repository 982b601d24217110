//! `change_evaluation.json` as types (docs/attribution.md): flips, per-change verdicts, file-matched
//! regressions, prediction quality, the statistical layer. The attribution that computes them
//! is `ahe_attribution`.

use ahe_bench::TaskStatus;
use serde::{Deserialize, Serialize};

use crate::manifest::Component;

/// Version of the `change_evaluation.json` format.
pub const ATTRIBUTION_SCHEMA_VERSION: u32 = 1;

/// Verdict on one change (docs/attribution.md#verdicts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// A predicted risk regressed and no predicted fix happened.
    Harmful,
    /// Some predicted fixes happened and some predicted risk regressed.
    Mixed,
    /// Every predicted fix happened (at least one was predicted), no risk regressed.
    Effective,
    /// Some but not all predicted fixes happened, no risk regressed.
    PartiallyEffective,
    /// No predicted fix happened (or none was predicted), no risk regressed.
    Ineffective,
    /// A regression of a task this change's files touched stayed unexplained: the
    /// counterfactual trials that would blame or clear it did not run (budget, conflicting
    /// revert, none configured). `[attribution] unjudged` decides whether it is reverted.
    Unjudged,
}

/// How one task moved between the previous and the current iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskMove {
    /// Task name.
    pub task: String,
    /// Status in the previous iteration.
    pub prev_status: TaskStatus,
    /// Status in the current iteration.
    pub cur_status: TaskStatus,
    /// Trials passed in the previous iteration.
    pub prev_passed: u32,
    /// Trials run in the previous iteration.
    pub prev_k: u32,
    /// Trials passed in the current iteration.
    pub cur_passed: u32,
    /// Trials run in the current iteration.
    pub cur_k: u32,
    /// Two-sided Fisher exact test of prev_passed/prev_k against cur_passed/cur_k.
    pub p_value: f64,
    /// `p_value ≥ 0.05`: the move is consistent with sampling noise.
    pub within_noise: bool,
    /// Confirmation trials of the current harness beyond the first k that passed.
    #[serde(default)]
    pub extra_passed: u32,
    /// Confirmation trials beyond the first k (the p-value uses them too; pass@1 does not).
    #[serde(default)]
    pub extra_trials: u32,
}

/// A task matched to changes (by prediction and by the files it exercised).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileMatch {
    /// Task name.
    pub task: String,
    /// Changes whose files intersect the files the task's trials exercised.
    pub matched_changes: Vec<String>,
    /// Changes that named the task (in risk_tasks for regressions, predicted_fixes for fixes).
    pub predicted_by: Vec<String>,
}

/// The evaluation of one change of the previous manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeVerdict {
    /// Change id.
    pub id: String,
    /// Component it lives in.
    pub component: Component,
    /// What it did.
    pub description: String,
    /// Files it touched.
    pub files: Vec<String>,
    /// P_c: predicted fixes (visible tasks only).
    pub predicted_fixes: Vec<String>,
    /// Q_c: risk tasks (visible tasks only).
    pub risk_tasks: Vec<String>,
    /// P_c ∩ F.
    pub actually_fixed: Vec<String>,
    /// P_c − F.
    pub still_failed: Vec<String>,
    /// Q_c ∩ G.
    pub risk_realized: Vec<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// Predicted fixes that moved up without flipping (e.g. 0/2 → 1/2).
    pub improved: Vec<String>,
    /// Predicted or risk tasks with an infra status on either side (not judgeable).
    pub infra_affected: Vec<String>,
    /// Flips behind the verdict (actually_fixed ∪ risk_realized) that are within noise.
    pub flips_within_noise: Vec<String>,
    /// Regressed tasks whose exercised files match this change's files.
    pub regressions_matched: Vec<String>,
    /// Named tasks that are not visible (held out or unknown), ignored.
    pub ignored_tasks: Vec<String>,
    /// Counterfactual tests of this change (None: it was not reverted for any task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counterfactual: Option<CounterfactualSummary>,
    /// Regressions this change is blamed for: by counterfactual where the task was tested,
    /// else by its risk prediction.
    #[serde(default)]
    pub blamed_regressions: Vec<String>,
    /// Fixes this change is credited with: by counterfactual where the task was tested,
    /// else by its fix prediction.
    #[serde(default)]
    pub credited_fixes: Vec<String>,
    /// Why the change is UNJUDGED: the unexplained regressions and what kept them untested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unjudged_reason: Option<String>,
}

/// What reverting one change did to the tasks it was tested on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterfactualSummary {
    /// Tasks whose previous status came back with the change reverted.
    pub restored: Vec<String>,
    /// Tasks whose status stayed.
    pub not_restored: Vec<String>,
    /// Trials run with the change reverted.
    pub trials: u32,
}

/// How well the manifest predicted what happened (None when a denominator is 0).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PredictionQuality {
    /// |∪P|.
    pub predicted_fixes: usize,
    /// |F|.
    pub fixed: usize,
    /// |∪P ∩ F| / |∪P|.
    pub fix_precision: Option<f64>,
    /// |∪P ∩ F| / |F|.
    pub fix_recall: Option<f64>,
    /// |∪Q|.
    pub predicted_risks: usize,
    /// |G|.
    pub regressed: usize,
    /// |∪Q ∩ G| / |∪Q|.
    pub risk_precision: Option<f64>,
    /// |∪Q ∩ G| / |G|.
    pub risk_recall: Option<f64>,
}

/// Run-level statistics over visible tasks (infra counted as failure).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    /// Visible tasks scored in the current iteration.
    pub n_tasks: usize,
    /// Current pass@1.
    pub pass_at_1: f64,
    /// 95% bootstrap interval of the current pass@1.
    pub pass_at_1_ci: [f64; 2],
    /// Visible tasks whose current status is infra.
    pub infra_tasks: usize,
    /// Visible tasks scored in the previous iteration.
    pub prev_n_tasks: usize,
    /// Previous pass@1 (None when there was no previous score).
    pub prev_pass_at_1: Option<f64>,
    /// Tasks scored in both iterations (the pairs of the delta).
    pub n_paired: usize,
    /// Mean over paired tasks of cur_rate − prev_rate.
    pub delta: Option<f64>,
    /// Paired bootstrap 95% interval of the delta (tasks resampled; seeded).
    pub delta_ci: Option<[f64; 2]>,
    /// The delta interval excludes 0.
    pub delta_significant: bool,
}

/// The contents of `change_evaluation.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChangeEvaluation {
    /// [`ATTRIBUTION_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Iteration whose scores are evaluated.
    pub iteration: u32,
    /// Iteration that wrote the evaluated manifest (None: no manifest).
    pub manifest_iteration: Option<u32>,
    /// pass@1, intervals, delta.
    pub stats: RunStats,
    /// F: fail → pass.
    pub fixed: Vec<TaskMove>,
    /// G: pass → fail.
    pub regressed: Vec<TaskMove>,
    /// Same status, more trials passed (e.g. fail 0/2 → fail 1/2).
    pub improved: Vec<TaskMove>,
    /// Same status, fewer trials passed.
    pub worsened: Vec<TaskMove>,
    /// Status changes with infra on either side (not flips).
    pub infra_changes: Vec<TaskMove>,
    /// Visible tasks scored now but not before.
    pub new_tasks: Vec<String>,
    /// Visible tasks scored before but not now.
    pub dropped_tasks: Vec<String>,
    /// One verdict per change of the manifest, in manifest order.
    pub changes: Vec<ChangeVerdict>,
    /// G − ∪Q, each with the changes whose files it exercised.
    pub unattributed_regressions: Vec<FileMatch>,
    /// Every regression, file-matched to changes.
    pub regressions_by_file: Vec<FileMatch>,
    /// F − ∪P, file-matched to changes (when the caller gave their exercised files).
    pub unpredicted_fixes: Vec<FileMatch>,
    /// Precision and recall of the manifest's predictions.
    pub prediction: PredictionQuality,
    /// Flips that confirmation trials left within noise: not counted in any verdict.
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    /// Change-level prediction quality against counterfactual truth (this iteration).
    #[serde(default)]
    pub prediction_vs_truth: TruthQuality,
    /// The same, summed over every iteration so far.
    #[serde(default)]
    pub prediction_vs_truth_cumulative: TruthQuality,
    /// Confirmation trials run (beyond the rollout's).
    #[serde(default)]
    pub confirm_trials: u32,
    /// Counterfactual trials run.
    #[serde(default)]
    pub counterfactual_trials: u32,
    /// Dollars of the confirmation and counterfactual trials.
    #[serde(default)]
    pub extra_cost_usd: f64,
    /// The canary of this iteration's harness, when one ran: its culprits were reverted
    /// before the rollout, and they are blamed for its regressions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<crate::evidence::CanaryRecord>,
}

/// Ids of the changes judged HARMFUL (what `rollback = "auto"` always reverts).
pub fn harmful_changes(ev: &ChangeEvaluation) -> Vec<String> {
    ev.changes
        .iter()
        .filter(|c| c.verdict == Verdict::Harmful)
        .map(|c| c.id.clone())
        .collect()
}

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

/// SCREAMING_SNAKE_CASE name of a verdict (as in `change_evaluation.json`).
pub fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Harmful => "HARMFUL",
        Verdict::Mixed => "MIXED",
        Verdict::Effective => "EFFECTIVE",
        Verdict::PartiallyEffective => "PARTIALLY_EFFECTIVE",
        Verdict::Ineffective => "INEFFECTIVE",
        Verdict::Unjudged => "UNJUDGED",
    }
}

fn ratio(num: usize, den: usize) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}
