//! `evolve/snapshots.json`: the harness trees an evolve phase recorded after each change,
//! which the commit phase splits the edits by.

use serde::{Deserialize, Serialize};

/// The harness working tree right after one change (an automatic rollback, or the evolve
/// agent's `commit_change` call).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSnapshot {
    /// The change's manifest id.
    pub id: String,
    /// Git tree id of the working tree right after the change.
    pub tree: String,
}

/// `evolve/snapshots.json`: the snapshots of one evolve phase, in the order they were taken;
/// what a (resumed) commit phase splits the edits by.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSnapshots {
    /// Automatic rollbacks, applied one after the other onto the evaluated harness.
    #[serde(default)]
    pub rollbacks: Vec<ChangeSnapshot>,
    /// The agent's `commit_change` calls in order, including changes the manifest dropped
    /// later (their edits then belong to no change).
    #[serde(default)]
    pub agent: Vec<ChangeSnapshot>,
}
