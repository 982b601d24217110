//! The revert plan of a counterfactual run ([`crate::counterfactual`]): which paths to remove
//! and which of the image's files to put back so that a copy of the sandbox as the verifier
//! left it is the hand-over's state without the flagged changes; or why that cannot be had
//! exactly. Made by the guard from its snapshots; nothing here touches a sandbox.

use std::path::PathBuf;

use crate::changes::{Changed, Snapshot};
use crate::tamper::SuspectReason;

/// How to turn the sandbox as the verifier left it back into the hand-over's state without
/// the flagged changes.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The agent-phase changes the pass is flagged for, with their reasons.
    pub suspects: Vec<(String, SuspectReason)>,
    /// Paths to remove: created by a flagged change, or by the first verifier run.
    pub remove: Vec<String>,
    /// The image's files to put back: (sandbox path, host path of the image's copy).
    pub restore: Vec<(String, PathBuf)>,
}

impl Plan {
    /// The plan for `suspects` (changes of the agent phase, judged), given the hand-over's
    /// snapshot, the one after the verifier and what its run changed; `Err` says why the
    /// state before cannot be restored exactly.
    pub fn make(
        suspects: Vec<(&Changed, SuspectReason)>,
        handed: &Snapshot,
        after: &Snapshot,
        during: &[Changed],
        layer: &ahe_sandbox::Layer,
    ) -> Result<Plan, String> {
        if handed.truncated || after.truncated {
            return Err("the change checks saw only part of the sandbox".into());
        }
        let mut plan = Plan::default();
        if let Some(p) = after.gone_since(handed).first() {
            return Err(format!(
                "{p}, left by the agent phase, was removed while the verifier ran"
            ));
        }
        for c in during {
            if handed.contains(&c.path) {
                return Err(format!(
                    "{}, left by the agent phase, was changed while the verifier ran",
                    c.path
                ));
            }
            plan.undo(c, layer)?;
        }
        plan.remove.extend(after.dirs_made_since(handed, layer));
        for (c, why) in suspects {
            plan.undo(c, layer)?;
            plan.suspects.push((c.path.clone(), why));
        }
        Ok(plan)
    }

    /// Adds what reverts `c`: the image's file put back, or the path removed.
    fn undo(&mut self, c: &Changed, layer: &ahe_sandbox::Layer) -> Result<(), String> {
        if !c.existed {
            self.remove.push(c.path.clone());
            return Ok(());
        }
        match layer.image_file(&c.path) {
            Some(h) if h.is_file() => {
                self.restore.push((c.path.clone(), h));
                Ok(())
            }
            _ => Err(format!(
                "{}: the image's original is not a plain file",
                c.path
            )),
        }
    }

    /// The flagged paths, for people.
    pub fn paths(&self) -> String {
        let p: Vec<&str> = self.suspects.iter().map(|(p, _)| p.as_str()).collect();
        p.join(", ")
    }
}

#[cfg(test)]
#[path = "revert_tests.rs"]
mod tests;
