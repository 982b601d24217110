//! The variants part of an iteration's view (`[evolve] variants > 1`): each variant's
//! focus, changes, screen figures, fate and costs, and the screen that picked one.

use super::super::format::tokens;
use super::super::model::{IterationReport, RunReport};
use serde::Serialize;

/// One variant of an iteration's evolve step.
#[derive(Debug, Clone, Serialize)]
pub struct VariantRow {
    /// `v1`, `v2`, …
    pub variant: String,
    /// Its steering (`–`: none).
    pub focus: String,
    /// The agent's changes (automatic rollbacks not counted).
    pub changes: usize,
    /// Clean screen passes over screen trials (`2/3`; `–` when the screen was skipped).
    pub screen: String,
    /// `chosen`, or `tag iter-NNN-v<i>`: where the unchosen change set stays.
    pub outcome: String,
    /// Whether the screen chose it.
    pub chosen: bool,
    /// Its evolve agent's tokens and dollars (`1.2k in / 300 out · $0.01`).
    pub evolve_cost: String,
    /// Its screen trials' tokens and dollars.
    pub screen_cost: String,
}

/// The variants of an evolve step and the screen that picked one.
#[derive(Debug, Clone, Serialize)]
pub struct VariantsView {
    /// The screen in a line: its tasks, trials and cost.
    pub screen: String,
    /// Why the screen ran fewer tasks than asked, or none (the extra-trial share).
    pub note: Option<String>,
    /// One row per variant, in number order.
    pub rows: Vec<VariantRow>,
}

/// The variants view of an iteration with `evolve/variants.json`.
pub(super) fn variants_view(run: &RunReport, it: &IterationReport) -> Option<VariantsView> {
    let rec = it.variants.as_ref()?;
    let cost = |input: u64, output: u64, usd: f64| {
        format!(
            "{} in / {} out · {}",
            tokens(input),
            tokens(output),
            run.usd(usd)
        )
    };
    let rows = rec
        .variants
        .iter()
        .map(|s| VariantRow {
            variant: format!("v{}", s.result.variant),
            focus: match s.result.focus.as_str() {
                "" => "–".into(),
                f => f.into(),
            },
            changes: s.result.changes(),
            screen: match s.trials {
                0 => "–".into(),
                n => format!("{}/{n}", s.passed),
            },
            outcome: match s.chosen {
                true => "chosen".into(),
                false => format!("tag {}", s.result.tag),
            },
            chosen: s.chosen,
            evolve_cost: cost(
                s.result.usage.input_tokens,
                s.result.usage.output_tokens,
                s.result.cost_usd,
            ),
            screen_cost: cost(
                s.screen_cost.usage.input_tokens,
                s.screen_cost.usage.output_tokens,
                s.screen_cost.cost_usd,
            ),
        })
        .collect();
    let c = &rec.screen_cost;
    let screen = match rec.screen_tasks.is_empty() {
        true => "no screen trials".to_string(),
        false => format!(
            "screen on {} (one trial per task and variant): {} trials, {}",
            rec.screen_tasks.join(", "),
            c.trials,
            cost(c.usage.input_tokens, c.usage.output_tokens, c.cost_usd)
        ),
    };
    Some(VariantsView {
        screen,
        note: rec.screen_note.clone(),
        rows,
    })
}
