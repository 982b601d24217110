//! The evolve agent's change tools: `commit_change` records one logical change (its
//! manifest entry and a snapshot of the working tree: it becomes one commit, so a harmful
//! change can be reverted alone), and `submit_manifest` finishes with the manifest — the
//! committed changes in order, plus submitted ones not committed.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use ahe_model::ToolSpec;
use minijinja::context;
use serde_json::Value;

use super::{say, spec, Tools};
use crate::debug::host_agent::{HostTool, ToolReply};
use ahe_rundir::leak::LeakPolicy;
use ahe_rundir::manifest::{Change, Manifest};
use ahe_runner::repo::HarnessRepo;

/// One `commit_change` call.
#[derive(Debug, Clone)]
pub(super) struct Recorded {
    /// The manifest entry.
    pub change: Change,
    /// Snapshot of the working tree at the call.
    pub tree: String,
    /// Files that differ from the previous snapshot.
    pub files: Vec<String>,
}

/// The fields of one manifest entry (the arguments of `commit_change`).
const CHANGE_FIELDS: &[(&str, &str)] = &[
    ("id", "string"),
    ("type", "string"),
    ("description", "string"),
    ("files", "array"),
    ("failure_pattern", "string"),
    ("root_cause", "string"),
    ("predicted_fixes", "array"),
    ("risk_tasks", "array"),
    ("component", "string"),
    ("why_this_component", "string"),
];

/// Whether any entry sets `commit` (the orchestrator's field, never the agent's).
fn sets_commit(entries: &[&Value]) -> bool {
    entries.iter().any(|e| e.get("commit").is_some())
}

fn harness_prefixed(changes: &[Change]) -> bool {
    changes
        .iter()
        .flat_map(|c| &c.files)
        .any(|f| f.starts_with("harness/"))
}

pub(super) struct CommitChange(pub std::sync::Arc<Tools>);
pub(super) struct Submit(pub std::sync::Arc<Tools>);

#[async_trait::async_trait]
impl HostTool for CommitChange {
    fn spec(&self) -> ToolSpec {
        let optional = [
            "failure_pattern",
            "root_cause",
            "predicted_fixes",
            "risk_tasks",
            "why_this_component",
        ];
        let mut s = spec("commit_change", CHANGE_FIELDS, &optional);
        for k in ["files", "predicted_fixes", "risk_tasks"] {
            s.input_schema["properties"][k]["items"] = serde_json::json!({"type": "string"});
        }
        s
    }
    async fn call(&self, a: &Value) -> ToolReply {
        if sets_commit(&[a]) {
            return ToolReply::Error(say("commit_change", "no_commit", context! {}));
        }
        let c: Change = match serde_json::from_value(a.clone()) {
            Ok(c) => c,
            Err(e) => {
                let ctx = context! { error => e.to_string() };
                return ToolReply::Error(say("commit_change", "bad_change", ctx));
            }
        };
        if harness_prefixed(std::slice::from_ref(&c)) {
            return ToolReply::Error(say("submit_manifest", "harness_prefix", context! {}));
        }
        let t = &self.0;
        let one = Manifest {
            iteration: t.iteration,
            changes: vec![c.clone()],
            leak_guard: None,
        };
        let mut errors = one.validate(&t.visible).err().unwrap_or_default();
        errors.extend(crate::evolve::lineage::repeat_problem(&c, &t.past));
        let mut rec = t.recorded.lock().unwrap_or_else(|p| p.into_inner());
        if t.reserved.contains(&c.id) || rec.iter().any(|r| r.change.id == c.id) {
            errors.push(say("commit_change", "id_taken", context! { id => &c.id }));
        }
        if !errors.is_empty() {
            let ctx = context! { errors => errors };
            return ToolReply::Error(say("commit_change", "rejected", ctx));
        }
        let snap = HarnessRepo::open(&t.harness).and_then(|r| {
            let tree = r.snapshot_worktree()?;
            let prev = rec.last().map_or(t.start.as_str(), |r| r.tree.as_str());
            let files = r.tree_diff_files(prev, &tree)?;
            Ok((tree, files))
        });
        let (tree, files) = match snap {
            Ok(x) => x,
            Err(e) => return ToolReply::Error(format!("commit_change: {e:#}")),
        };
        if files.is_empty() {
            return ToolReply::Error(say("commit_change", "nothing", context! {}));
        }
        let unlisted: Vec<&String> = files.iter().filter(|f| !c.files.contains(f)).collect();
        let reply = say(
            "commit_change",
            "committed",
            context! { id => &c.id, files => &files, unlisted => unlisted, n => rec.len() + 1 },
        );
        rec.push(Recorded {
            change: c,
            tree,
            files,
        });
        ToolReply::Text(reply)
    }
}

#[async_trait::async_trait]
impl HostTool for Submit {
    fn spec(&self) -> ToolSpec {
        let mut s = spec("submit_manifest", &[("changes", "array")], &["changes"]);
        s.input_schema["properties"]["changes"]["items"] = serde_json::json!({"type": "object"});
        s
    }
    async fn call(&self, a: &Value) -> ToolReply {
        let raw = match a.get("changes") {
            None | Some(Value::Null) => Value::Array(Vec::new()),
            Some(v) => v.clone(),
        };
        let entries: Vec<&Value> = raw
            .as_array()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        if sets_commit(&entries) {
            return ToolReply::Error(say("commit_change", "no_commit", context! {}));
        }
        let submitted: Vec<Change> = match serde_json::from_value(raw) {
            Ok(c) => c,
            Err(e) => {
                let ctx = context! { error => e.to_string() };
                return ToolReply::Error(say("submit_manifest", "bad_changes", ctx));
            }
        };
        let t = &self.0;
        let changes = merge(
            &t.recorded.lock().unwrap_or_else(|p| p.into_inner()),
            submitted,
        );
        if harness_prefixed(&changes) {
            return ToolReply::Error(say("submit_manifest", "harness_prefix", context! {}));
        }
        let m = Manifest {
            iteration: t.iteration,
            changes,
            leak_guard: None,
        };
        let repeats = m
            .changes
            .iter()
            .filter_map(|c| crate::evolve::lineage::repeat_problem(c, &t.past));
        let repeats: Vec<String> = repeats.collect();
        match m.validate(&t.visible) {
            Ok(()) if !repeats.is_empty() => ToolReply::Error(say(
                "submit_manifest",
                "rejected",
                context! { errors => repeats },
            )),
            Ok(()) => {
                *t.manifest.lock().unwrap_or_else(|p| p.into_inner()) = Some(m);
                // Kept even when refused: if the agent stops, only the leaking files go.
                if let Some(g) = t.guard.as_ref() {
                    let hits = g.check().unwrap_or_default();
                    if g.settings.policy == LeakPolicy::Reject && !hits.is_empty() {
                        t.refused.fetch_add(1, Ordering::Relaxed);
                        return ToolReply::Error(crate::evolve::leak::refusal(&hits));
                    }
                }
                ToolReply::Stop(say("submit_manifest", "accepted", context! {}))
            }
            Err(errs) => ToolReply::Error(say(
                "submit_manifest",
                "rejected",
                context! { errors => errs },
            )),
        }
    }
}

/// The manifest's changes: the committed ones in order (a submitted entry with the same id
/// replaces the entry's text, the snapshot stays), then the submitted ones not committed.
pub(super) fn merge(recorded: &[Recorded], submitted: Vec<Change>) -> Vec<Change> {
    let committed: BTreeSet<&str> = recorded.iter().map(|r| r.change.id.as_str()).collect();
    let mut out: Vec<Change> = recorded.iter().map(|r| r.change.clone()).collect();
    for c in submitted {
        match out.iter_mut().find(|x| x.id == c.id) {
            Some(x) if committed.contains(c.id.as_str()) => *x = c,
            _ => out.push(c),
        }
    }
    out
}
