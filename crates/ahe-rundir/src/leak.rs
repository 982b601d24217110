//! The leak guard's records (docs/loop.md#leak-guard): the policy of `[evolve] leak_guard`, and what a
//! manifest's `leak_guard` entry says about refused additions. The guard itself (index,
//! scan, revert) is `ahe_evolve::evolve::leak`.

use serde::{Deserialize, Serialize};

/// Length in characters (after whitespace normalisation) of a verbatim span that is a leak.
pub const SPAN: usize = 40;
/// Longest excerpt a record keeps: shorter than [`SPAN`], so no record holds a whole span
/// of task text (spans get less still, see [`LeakHit::excerpt`]).
pub const EXCERPT_MAX: usize = SPAN - 1;
/// Characters of a matched span an excerpt keeps (below [`SPAN`], so a record cannot
/// carry a whole span to the next evolve agent).
pub const SPAN_EXCERPT: usize = 24;
/// What a record says instead of a held-out task's name or text.
pub const HELD_OUT: &str = "(held-out task)";
/// `[evolve] leak_guard`: what happens to an edit that leaks task text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeakPolicy {
    /// Refuse the submission (the agent may fix and resubmit); revert what stays refused.
    #[default]
    Reject,
    /// Record the hits in the manifest; keep the edits.
    Warn,
    /// No check.
    Off,
}

/// Whether a hit is a task name or a verbatim span of a task's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeakKind {
    /// The task's name as a token.
    Name,
    /// A ≥ [`SPAN`]-character verbatim span of the task's instruction, tests or solution.
    Span,
}

/// One refused addition: where it is and which task it leaks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeakHit {
    /// Harness-relative file.
    pub file: String,
    /// 1-based line of the new file where the hit starts.
    pub line: u32,
    /// The task leaked ([`HELD_OUT`] for a held-out task, whose name is never recorded).
    pub task: String,
    /// Name or span.
    pub kind: LeakKind,
    /// Short context: ≤ [`EXCERPT_MAX`] characters around a name (held-out names masked),
    /// the first [`SPAN_EXCERPT`] characters of a span, nothing of held-out text.
    pub excerpt: String,
}

/// The manifest's `leak_guard` record of one evolve phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeakRecord {
    /// The policy in force.
    pub policy: LeakPolicy,
    /// Hits still present when the agent stopped.
    #[serde(default)]
    pub refused: Vec<LeakHit>,
    /// Files reverted to the evaluated harness because of them (reject only).
    #[serde(default)]
    pub reverted: Vec<String>,
    /// Submissions the guard refused before the agent stopped (it may have fixed them).
    #[serde(default)]
    pub rejected_submissions: u32,
    /// Changes dropped from the manifest because every file they named was reverted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_changes: Vec<String>,
}

/// One line per hit for notes and reports, e.g. `memory/x.md:3 names task fix-sum`.
pub fn describe(h: &LeakHit) -> String {
    match h.kind {
        LeakKind::Name => format!("{}:{} names task {}", h.file, h.line, h.task),
        LeakKind::Span => format!(
            "{}:{} copies ≥ {SPAN} characters verbatim from {}",
            h.file, h.line, h.task
        ),
    }
}
