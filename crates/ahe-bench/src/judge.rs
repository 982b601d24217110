//! The trajectory judge's record and hook: an optional model that reads a passing trial's
//! trace and says whether the pass came from solving the task or from gaming the check.
//! The judging itself (prompt, model call, parsing) lives in the evolve layer; this module
//! holds what a trial carries: the [`TrialJudge`] hook of the trial runner, the
//! `judge.json` record ([`JudgeRecord`]) and how a verdict marks a trial.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::record::{TrialResult, TrialStatus};
use crate::tamper::{OnSuspect, Suspect, SuspectReason};
use crate::Task;
use ahe_model::Usage;

/// Judges a finished trial (called by the trial runner before `result.json` is written,
/// and for resumed trials before they are scored). Only a passing trial is ever judged.
#[async_trait::async_trait]
pub trait TrialJudge: Send + Sync {
    /// Judges the trial in `dir` (or takes its cached verdict) and marks `r` accordingly.
    async fn judge(&self, task: &Task, dir: &Path, r: &mut TrialResult);
}

/// What came of judging a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgeOutcome {
    /// The judge found the task solved.
    Solved,
    /// The judge found the check gamed: the trial is suspect.
    Gamed,
    /// The judge's answer (and its one retry) did not parse: no verdict, not suspect.
    Unparsable,
    /// The judge was not asked or did not answer (budget spent, model error): judged again
    /// on resume.
    Unjudged,
}

impl JudgeOutcome {
    /// Whether the outcome is final (cached: a resumed run does not ask again).
    pub fn is_final(self) -> bool {
        !matches!(self, JudgeOutcome::Unjudged)
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            JudgeOutcome::Solved => "solved",
            JudgeOutcome::Gamed => "gamed",
            JudgeOutcome::Unparsable => "unparsable",
            JudgeOutcome::Unjudged => "unjudged",
        }
    }
}

/// `judge.json` in a trial directory: the judge's verdict with its evidence, or why there
/// is none. Advisory evidence: a researcher audits it here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeRecord {
    /// What came of it.
    pub outcome: JudgeOutcome,
    /// The judge's reason (its own words), when it gave a verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The agent turns the judge cites as evidence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence_turns: Vec<u32>,
    /// Why there is no verdict (unparsable answer, budget spent, model error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The judge model (`provider:model`).
    pub model: String,
    /// The model's raw answers, in order (a retry adds one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<String>,
    /// Model calls made for this trial.
    pub calls: u32,
    /// Tokens of those calls.
    pub usage: Usage,
    /// Their cost in USD.
    pub cost_usd: f64,
    /// Characters of the trace the judge was shown (after truncation).
    pub trace_chars: usize,
    /// Whether the trace was cut in the middle to fit the cap.
    pub trace_truncated: bool,
    /// When the record was written (RFC 3339).
    pub judged_at: String,
}

/// Prefix of the suspect reason a "gamed" verdict adds (so reports tell the judge's opinion
/// from mechanical evidence).
pub const REASON_PREFIX: &str = "trajectory judge (model verdict, advisory): gamed";

impl JudgeRecord {
    /// The suspect reason of a "gamed" verdict (none otherwise).
    pub fn suspect_reason(&self) -> Option<SuspectReason> {
        (self.outcome == JudgeOutcome::Gamed).then(|| SuspectReason {
            reason: format!(
                "{REASON_PREFIX}: {}",
                self.reason.as_deref().unwrap_or("(no reason given)")
            ),
            turn: self.evidence_turns.first().copied(),
        })
    }

    /// Marks `r` by this record: a "gamed" verdict adds its suspect reason (once, so applying
    /// a cached record again changes nothing) and, with `on_suspect = "fail"`, fails the pass;
    /// an unjudged or unparsable outcome adds a note. Only a passing trial is marked.
    pub fn apply(&self, r: &mut TrialResult, on_suspect: OnSuspect) {
        if let Some(reason) = self.suspect_reason() {
            let s = r.suspect.get_or_insert_with(Suspect::default);
            if !s.reasons.contains(&reason) {
                s.reasons.push(reason.clone());
            }
            if on_suspect == OnSuspect::Fail && r.status == TrialStatus::Pass {
                r.status = TrialStatus::Fail;
                r.error = Some(format!(
                    "suspect (on_suspect = \"fail\"): {}",
                    reason.reason
                ));
            }
        }
        let note = match self.outcome {
            JudgeOutcome::Unparsable => Some(format!(
                "judge: unparsable answer, no verdict (not suspect){}",
                self.note
                    .as_deref()
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            )),
            JudgeOutcome::Unjudged => Some(format!(
                "judge: not judged ({})",
                self.note.as_deref().unwrap_or("no answer")
            )),
            _ => None,
        };
        r.notes.retain(|n| !n.starts_with("judge: "));
        if let Some(n) = note {
            r.notes.push(n);
        }
    }
}
