//! The change manifest (`evolve/manifest.json`, docs/run-directory.md#the-change-manifest) and its validation.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Which of the seven harness components a change is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// system_prompt.md
    SystemPrompt,
    /// tools/<name>.toml descriptions
    ToolDescription,
    /// tool implementations (scripts, builtin params)
    ToolImpl,
    /// middleware/
    Middleware,
    /// skills/
    Skill,
    /// subagents/
    Subagent,
    /// memory/
    Memory,
}

/// Kind of change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Something new.
    New,
    /// A change to something that exists.
    Improvement,
    /// Undoing an earlier change.
    Rollback,
}

/// One logical change with its falsifiable predictions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    /// Unique id within the manifest (e.g. `c1`).
    pub id: String,
    /// new | improvement | rollback.
    #[serde(rename = "type")]
    pub kind: ChangeKind,
    /// What the change does.
    pub description: String,
    /// Harness-relative files it touches.
    pub files: Vec<String>,
    /// The failure pattern it addresses.
    #[serde(default)]
    pub failure_pattern: String,
    /// Why the failure happens.
    #[serde(default)]
    pub root_cause: String,
    /// Tasks predicted to go from fail to pass.
    #[serde(default)]
    pub predicted_fixes: Vec<String>,
    /// Tasks at risk of going from pass to fail.
    #[serde(default)]
    pub risk_tasks: Vec<String>,
    /// Component the change lives in.
    pub component: Component,
    /// Why this layer rather than another.
    #[serde(default)]
    pub why_this_component: String,
    /// The harness commit holding exactly this change (set by the orchestrator, never by
    /// the agent): rolling the change back is `git revert` of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// `evolve/manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Iteration that produced it.
    pub iteration: u32,
    /// The changes.
    pub changes: Vec<Change>,
    /// What the leak guard found in this iteration's edits (absent when nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leak_guard: Option<crate::leak::LeakRecord>,
}

/// The top-level paths of the seven editable components (plus the registry).
pub const EDITABLE_ROOTS: &[&str] = &[
    "agent.toml",
    "system_prompt.md",
    "tools",
    "middleware",
    "skills",
    "subagents",
    "memory",
];

/// Whether a harness-relative path is inside the editable component paths.
pub fn is_editable(rel: &str) -> bool {
    let p = std::path::Path::new(rel);
    let plain = p
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    let first = rel.split('/').next().unwrap_or("");
    plain && !rel.is_empty() && EDITABLE_ROOTS.contains(&first)
}

impl Manifest {
    /// Checks ids, task names (must be among `tasks`) and files (inside the editable
    /// component paths); returns every problem.
    pub fn validate(&self, tasks: &BTreeSet<String>) -> Result<(), Vec<String>> {
        let mut errs = Vec::new();
        let mut ids = BTreeSet::new();
        if self.changes.is_empty() {
            errs.push("changes: the manifest lists no change".to_string());
        }
        for (i, c) in self.changes.iter().enumerate() {
            let at = format!("changes[{i}] ({})", c.id);
            if c.id.trim().is_empty() {
                errs.push(format!("{at}: id is empty"));
            } else if !ids.insert(c.id.clone()) {
                errs.push(format!("{at}: duplicate id"));
            }
            if c.description.trim().is_empty() {
                errs.push(format!("{at}: description is empty"));
            }
            if c.files.is_empty() {
                errs.push(format!(
                    "{at}: files is empty; list the harness files the change touches"
                ));
            }
            for f in &c.files {
                if !is_editable(f) {
                    errs.push(format!(
                        "{at}: file {f:?} is not inside the harness's component paths ({})",
                        EDITABLE_ROOTS.join(", ")
                    ));
                }
            }
            for t in c.predicted_fixes.iter().chain(&c.risk_tasks) {
                if !tasks.contains(t) {
                    errs.push(format!("{at}: task {t:?} does not exist (or is held out)"));
                }
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(id: &str, files: &[&str], fixes: &[&str]) -> Change {
        Change {
            id: id.into(),
            kind: ChangeKind::New,
            description: "d".into(),
            files: files.iter().map(|s| s.to_string()).collect(),
            failure_pattern: String::new(),
            root_cause: String::new(),
            predicted_fixes: fixes.iter().map(|s| s.to_string()).collect(),
            risk_tasks: vec![],
            component: Component::Memory,
            why_this_component: String::new(),
            commit: None,
        }
    }

    #[test]
    fn validation_names_every_problem() {
        let tasks: BTreeSet<String> = ["a".to_string()].into();
        let ok = Manifest {
            iteration: 1,
            changes: vec![change("c1", &["memory/MEMORY.md"], &["a"])],
            leak_guard: None,
        };
        assert!(ok.validate(&tasks).is_ok());
        let bad = Manifest {
            iteration: 1,
            changes: vec![
                change("c1", &["../run.toml", "memory/x.md"], &["zz"]),
                change("c1", &[], &[]),
            ],
            leak_guard: None,
        };
        let e = bad.validate(&tasks).unwrap_err();
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e[0].contains("../run.toml"));
        assert!(e[1].contains("\"zz\""));
        assert!(e[2].contains("duplicate"));
        assert!(e[3].contains("files is empty"));
    }

    #[test]
    fn editable_paths() {
        assert!(is_editable("tools/x.py"));
        assert!(is_editable("agent.toml"));
        assert!(!is_editable("run.toml"));
        assert!(!is_editable("tools/../../x"));
        assert!(!is_editable("/etc/passwd"));
    }
}
