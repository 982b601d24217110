//! Number, label and class formatting shared by the HTML, Markdown and terminal views.

use super::model::{Cell, IterationReport};

/// One short line per leak-guard refusal of an iteration's manifest, then what it reverted.
pub fn leak_lines(m: Option<&ahe_rundir::Manifest>) -> Vec<String> {
    let Some(r) = m.and_then(|m| m.leak_guard.as_ref()) else {
        return Vec::new();
    };
    let policy = serde_json::to_value(r.policy)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let mut out: Vec<String> = r
        .refused
        .iter()
        .map(|h| format!("{policy}: {}", ahe_rundir::leak::describe(h)))
        .collect();
    if !r.reverted.is_empty() {
        out.push(format!("reverted: {}", r.reverted.join(", ")));
    }
    if r.rejected_submissions > 0 {
        out.push(format!(
            "{} submission(s) refused{}",
            r.rejected_submissions,
            if r.refused.is_empty() {
                ", then fixed by the agent"
            } else {
                ""
            }
        ));
    }
    out
}

pub use crate::numbers::{ci, f3, secs, tokens, usd};

/// Axis label of an iteration (`4 final` for N+1).
pub fn iter_label(it: &IterationReport) -> String {
    if it.is_final {
        format!("{} final", it.iteration)
    } else {
        it.iteration.to_string()
    }
}

/// CSS class of a heatmap cell.
pub fn cell_class(c: &Cell) -> &'static str {
    match c.status.as_str() {
        "infra" => "c-infra",
        "running" => "c-running",
        _ if c.k > 0 && c.passed == c.k => "c-pass",
        _ if c.passed == 0 => "c-fail",
        _ => "c-partial",
    }
}

/// Text of a heatmap cell (`1/2`, `infra`).
pub fn cell_text(c: &Cell) -> String {
    if c.status == "infra" {
        "infra".into()
    } else {
        format!("{}/{}", c.passed, c.k)
    }
}

/// CSS class of a verdict.
pub fn verdict_class(v: &str) -> String {
    format!("v-{}", v.to_ascii_lowercase().replace('_', "-"))
}
