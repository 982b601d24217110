//! `evolve/variants.json` and `evolve/variants/v<i>/result.json` as types: the variants of one
//! iteration's evolve step (`[evolve] variants`), each with its harness, manifest and screen
//! figures. Run by `ahe_evolve::evolve::variants`; read back by the next iteration's history.

use serde::{Deserialize, Serialize};

use crate::manifest::{ChangeKind, Manifest};

/// One variant's evolve step, as recorded in `evolve/variants/v<i>/result.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VariantResult {
    /// 1-based number.
    pub variant: u32,
    /// Its steering (empty: none).
    pub focus: String,
    /// Commit of its harness (start + its changes).
    pub commit: String,
    /// Its tag, `iter-NNN-v<i>`.
    pub tag: String,
    /// Its manifest (the automatic rollbacks first, then the agent's changes).
    pub manifest: Manifest,
    /// Files it changed relative to the evaluated harness.
    pub changed_files: Vec<String>,
    /// What the orchestrator reverted and why.
    pub notes: Vec<String>,
    /// Its evolve tokens (with those of an attempt killed before it finished).
    pub usage: ahe_model::Usage,
    /// Its evolve cost (with that of an attempt killed before it finished).
    pub cost_usd: f64,
}

impl VariantResult {
    /// The agent's changes (rollbacks not counted).
    pub fn changes(&self) -> usize {
        let agent = |c: &&crate::manifest::Change| {
            c.kind != ChangeKind::Rollback || !c.id.starts_with("rollback-")
        };
        self.manifest.changes.iter().filter(agent).count()
    }
}

/// One variant on the screen.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Screened {
    /// The variant.
    #[serde(flatten)]
    pub result: VariantResult,
    /// Screen trials that passed cleanly (not suspect).
    pub passed: u32,
    /// Screen trials run.
    pub trials: u32,
    /// Whether it became the iteration's evolve step.
    pub chosen: bool,
    /// Its screen trials' tokens and dollars.
    #[serde(default)]
    pub screen_cost: crate::evidence::SetCost,
}

/// `evolve/variants.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VariantsRecord {
    /// The screen minibatch.
    pub screen_tasks: Vec<String>,
    /// Every variant with its screen figures.
    pub variants: Vec<Screened>,
    /// Dollars the screen trials cost (counted apart from the rollout, as role `screen`).
    pub screen_cost_usd: f64,
    /// Screen trials run, and their tokens and dollars (every kept trial, also those run
    /// before a resume).
    #[serde(default)]
    pub screen_cost: crate::evidence::SetCost,
    /// Why the screen ran fewer tasks than `[evolve] screen_tasks`, or none (the
    /// iteration's extra-trial share); None: it ran in full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen_note: Option<String>,
}
