//! The evolution history the evolve agent reads (`evolve/inputs/history.md`): every change
//! earlier evolve steps proposed, with its component, files, prediction, verdict,
//! counterfactual evidence and fate (kept; reverted by the automatic rollback, the canary or
//! the agent; refused by the leak guard or the harness validation; never committed) — the
//! last iterations in full, older ones one line per change. A new change that repeats a
//! reverted or refused one (same component, same files, same failure pattern or a predicted
//! fix in common) must say why in `why_this_component` ([`repeat_problem`]).

use std::collections::BTreeSet;

use ahe_rundir::attribution::{verdict_name, CounterfactualSummary};
use minijinja::context;
use serde::Serialize;

use ahe_rundir::manifest::{Change, ChangeKind};
use ahe_rundir::run_dir::RunDir;

const HISTORY: &str = include_str!("../../templates/history.md");
const FATE: &str = include_str!("../../templates/history_fate.md");
const REPEAT: &str = include_str!("../../templates/repeat_refused.md");

/// What became of a proposed change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fate {
    /// Committed and still in the harness.
    Kept,
    /// Undone by `rollback = "auto"` in `iteration`.
    RevertedAuto {
        /// The iteration that rolled it back.
        iteration: u32,
    },
    /// Undone by the canary before `iteration`'s rollout.
    RevertedCanary {
        /// The iteration whose canary reverted it.
        iteration: u32,
    },
    /// Undone by the evolve agent's own rollback change in `iteration`.
    RevertedAgent {
        /// The iteration of the agent's rollback.
        iteration: u32,
    },
    /// Its files were reverted by the leak guard (dropped from the manifest).
    RefusedLeak,
    /// The edited harness did not validate, so every edit of the step was reverted.
    RefusedValidation {
        /// The first problem the validation named.
        why: String,
    },
    /// In the manifest but without a commit of its own (or the commit never happened).
    NeverCommitted,
    /// Proposed by a variant the screen did not choose (`[evolve] variants`).
    NotChosen {
        /// The variant's tag, `iter-NNN-v<i>`.
        tag: String,
        /// Its clean passes on the screen.
        passed: u32,
        /// Its screen trials.
        trials: u32,
        /// The chosen variant's clean passes.
        chosen_passed: u32,
    },
}

impl Fate {
    /// Whether the change is out of the harness because it was reverted or refused.
    pub fn undone(&self) -> bool {
        !matches!(
            self,
            Fate::Kept | Fate::NeverCommitted | Fate::NotChosen { .. }
        )
    }
}

/// One change of an earlier evolve step, with its evaluation and fate.
#[derive(Debug, Clone, Serialize)]
pub struct PastChange {
    /// The evolve step that proposed it.
    pub iteration: u32,
    /// `iter-NNN/<id>`: how a later change names it.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The manifest entry.
    #[serde(flatten)]
    pub change: Change,
    /// The next iteration's verdict (None: not judged).
    pub verdict: Option<String>,
    /// Predicted fixes that passed.
    pub actually_fixed: Vec<String>,
    /// Predicted fixes that still failed.
    pub still_failed: Vec<String>,
    /// Risk tasks that broke.
    pub risk_realized: Vec<String>,
    /// The counterfactual trials of the change reverted alone.
    pub counterfactual: Option<CounterfactualSummary>,
    /// What became of it.
    pub fate: Fate,
}

/// Whether `text` names `id` as a whole word.
fn mentions(text: &str, id: &str) -> bool {
    text.split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
        .any(|w| w == id)
}

/// Whether `c` is an automatic rollback (written by the orchestrator, not the agent).
fn is_auto_rollback(c: &Change) -> bool {
    c.kind == ChangeKind::Rollback && c.id.starts_with("rollback-")
}

/// Every change proposed by the evolve steps 1..t-1 with its fate as of iteration `t`,
/// whose automatic rollbacks (`applied`, not yet in a manifest) count too.
pub fn past_changes(run: &RunDir, t: u32, applied: &[Change]) -> Vec<PastChange> {
    let mut out = Vec::new();
    for i in 1..t {
        let it = run.iteration(i);
        let Ok(m) = it.manifest() else { continue };
        let proposed = it.proposed().unwrap_or_default();
        let next = run.iteration(i + 1);
        let ev = next.change_evaluation().ok();
        let canary = next.evidence().canary_reverted();
        let later: Vec<Change> = match i + 1 == t {
            true => applied.to_vec(),
            false => next.manifest().map(|m| m.changes).unwrap_or_default(),
        };
        let dropped = m
            .leak_guard
            .as_ref()
            .map(|l| l.dropped_changes.clone())
            .unwrap_or_default();
        let mut changes: Vec<Change> = m
            .changes
            .iter()
            .filter(|c| !is_auto_rollback(c))
            .cloned()
            .collect();
        let known: BTreeSet<String> = changes.iter().map(|c| c.id.clone()).collect();
        changes.extend(
            proposed
                .changes
                .iter()
                .filter(|c| !known.contains(&c.id))
                .cloned(),
        );
        for c in changes {
            let in_manifest = m.changes.iter().find(|x| x.id == c.id);
            let fate = match in_manifest {
                None if dropped.contains(&c.id) => Fate::RefusedLeak,
                None if !proposed.validation_refused.is_empty() => Fate::RefusedValidation {
                    why: proposed.validation_refused[0].replace('\n', " "),
                },
                None => Fate::NeverCommitted,
                Some(x) if x.commit.is_none() => Fate::NeverCommitted,
                Some(_) if canary.contains(&c.id) => Fate::RevertedCanary { iteration: i + 1 },
                Some(_) if later.iter().any(|r| r.id == format!("rollback-{}", c.id)) => {
                    Fate::RevertedAuto { iteration: i + 1 }
                }
                Some(_)
                    if later.iter().any(|r| {
                        r.kind == ChangeKind::Rollback
                            && !is_auto_rollback(r)
                            && mentions(&r.description, &c.id)
                    }) =>
                {
                    Fate::RevertedAgent { iteration: i + 1 }
                }
                Some(_) => Fate::Kept,
            };
            let v = ev
                .as_ref()
                .and_then(|e| e.changes.iter().find(|v| v.id == c.id));
            out.push(PastChange {
                iteration: i,
                reference: format!("{}/{}", ahe_runner::repo::iter_tag(i), c.id),
                verdict: v.map(|v| verdict_name(v.verdict).to_string()),
                actually_fixed: v.map(|v| v.actually_fixed.clone()).unwrap_or_default(),
                still_failed: v.map(|v| v.still_failed.clone()).unwrap_or_default(),
                risk_realized: v.map(|v| v.risk_realized.clone()).unwrap_or_default(),
                counterfactual: v.and_then(|v| v.counterfactual.clone()),
                change: c,
                fate,
            });
        }
        out.extend(not_chosen(&it, i));
    }
    out
}

/// The changes of iteration `i`'s variants that the screen did not choose.
fn not_chosen(it: &ahe_rundir::run_dir::IterationDir, i: u32) -> Vec<PastChange> {
    let Ok(rec) =
        ahe_rundir::read_json::<ahe_rundir::variants::VariantsRecord>(&it.variants_path())
    else {
        return Vec::new();
    };
    let chosen_passed = rec
        .variants
        .iter()
        .find(|v| v.chosen)
        .map_or(0, |v| v.passed);
    let mut out = Vec::new();
    for v in rec.variants.iter().filter(|v| !v.chosen) {
        for c in v
            .result
            .manifest
            .changes
            .iter()
            .filter(|c| !is_auto_rollback(c))
        {
            out.push(PastChange {
                iteration: i,
                reference: format!("{}/{}", v.result.tag, c.id),
                change: c.clone(),
                verdict: None,
                actually_fixed: Vec::new(),
                still_failed: Vec::new(),
                risk_realized: Vec::new(),
                counterfactual: None,
                fate: Fate::NotChosen {
                    tag: v.result.tag.clone(),
                    passed: v.passed,
                    trials: v.trials,
                    chosen_passed,
                },
            });
        }
    }
    out
}

/// `inputs/history.md` for the evolve step of iteration `t`: iterations `t-full..t-1` in
/// full, older ones one line per change.
pub fn history_md(run: &RunDir, past: &[PastChange], t: u32, full: u32) -> String {
    let first_full = t.saturating_sub(full).max(1);
    let iterations: Vec<minijinja::Value> = (first_full..t)
        .filter(|i| run.iteration(*i).manifest().is_ok())
        .map(|i| {
            let changes: Vec<&PastChange> = past.iter().filter(|c| c.iteration == i).collect();
            let rejections = run
                .iteration(i)
                .manifest()
                .ok()
                .and_then(|m| m.leak_guard)
                .map_or(0, |l| l.rejected_submissions);
            context! { iteration => i, changes, leak_rejections => rejections }
        })
        .collect();
    let older: Vec<&PastChange> = past.iter().filter(|c| c.iteration < first_full).collect();
    let mut env = ahe_harness::text::env();
    let rendered = env
        .add_template("fate", FATE)
        .and_then(|_| env.render_str(HISTORY, context! { iteration => t, iterations, older }));
    rendered.unwrap_or_else(|e| format!("{HISTORY}\n[template error: {e}]"))
}

/// The reverted or refused changes (for the evolve prompt).
pub fn undone(past: &[PastChange]) -> Vec<&PastChange> {
    past.iter().filter(|c| c.fate.undone()).collect()
}

fn fate_text(f: &Fate) -> String {
    let mut env = ahe_harness::text::env();
    let _ = env.add_template("fate", FATE);
    let ctx = context! { c => context! { fate => f } };
    env.render_str("{% include \"fate\" %}", ctx)
        .unwrap_or_else(|_| "reverted".into())
}

/// Whether two changes address the same failure pattern: the same `failure_pattern` text
/// (ignoring case), or a predicted fix in common.
fn same_pattern(a: &Change, b: &Change) -> bool {
    let (x, y) = (a.failure_pattern.trim(), b.failure_pattern.trim());
    (!x.is_empty() && x.eq_ignore_ascii_case(y))
        || a.predicted_fixes
            .iter()
            .any(|t| b.predicted_fixes.contains(t))
}

/// The refusal of a change that repeats a reverted or refused one (same component, same
/// files, same failure pattern) without naming it in `why_this_component`; None when it
/// does not repeat one.
pub fn repeat_problem(c: &Change, past: &[PastChange]) -> Option<String> {
    let files: BTreeSet<&String> = c.files.iter().collect();
    let p = past.iter().find(|p| {
        p.fate.undone()
            && p.change.component == c.component
            && p.change.files.iter().collect::<BTreeSet<_>>() == files
            && same_pattern(&p.change, c)
            && !c.why_this_component.contains(&p.reference)
    })?;
    Some(ahe_harness::text::render(
        REPEAT,
        context! {
            id => &c.id, past => &p.reference, component => &p.change.component,
            files => &p.change.files, fate => fate_text(&p.fate),
        },
    ))
}
