//! What the run spent, by phase (the same in `report.md`, `report.html` and `ahe show`): the
//! rollouts, the extra trials of attribution (confirmation, counterfactual, canary), the
//! final answer, the matched-budget baseline, and the model roles of the loop (judge,
//! debugger, overview, evolve, screen); and the loop's machinery — everything but the
//! rollouts and the baseline — as a share of the run's spend, per iteration and in total.
//! Dollars when any were priced, else tokens.

use ahe_rundir::evidence::SetCost;

use crate::model::{IterationReport, RoleUsage, RunReport};
use crate::numbers::{tokens, usd};

/// The phases, in display order.
pub const PHASES: [&str; 9] = [
    "rollouts",
    "attribution extras",
    "final",
    "baseline",
    "judge",
    "debugger",
    "overview",
    "evolve",
    "screen",
];

/// Whether a phase (by index in [`PHASES`]) is the loop's machinery: not the rollouts (the
/// evaluation every harness needs) and not the baseline (a comparison run after the loop).
pub fn machinery(phase: usize) -> bool {
    !matches!(PHASES[phase], "rollouts" | "baseline")
}

/// One phase's spend.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseSpend {
    /// Dollars.
    pub usd: f64,
    /// Prompt + completion tokens.
    pub tokens: u64,
    /// Of those, completion tokens.
    pub output_tokens: u64,
    /// Trials (phases that run trials).
    pub trials: u32,
}

impl PhaseSpend {
    fn of_set(c: &SetCost) -> PhaseSpend {
        PhaseSpend {
            usd: c.cost_usd,
            tokens: c.usage.input_tokens + c.usage.output_tokens,
            output_tokens: c.usage.output_tokens,
            trials: c.trials,
        }
    }
    fn of_role(r: Option<&RoleUsage>) -> PhaseSpend {
        r.map(|r| PhaseSpend {
            usd: r.cost_usd,
            tokens: r.input_tokens + r.output_tokens,
            output_tokens: r.output_tokens,
            trials: 0,
        })
        .unwrap_or_default()
    }
    fn add(&mut self, o: &PhaseSpend) {
        self.usd += o.usd;
        self.tokens += o.tokens;
        self.output_tokens += o.output_tokens;
        self.trials += o.trials;
    }
}

/// Spend per phase: one row per iteration (label, spend per phase of [`PHASES`]), and the
/// totals.
#[derive(Debug, Clone, Default)]
pub struct Spend {
    /// Dollars (some call was priced), else tokens.
    pub usd: bool,
    /// Per iteration.
    pub rows: Vec<(String, [PhaseSpend; 9])>,
    /// Over the run.
    pub total: [PhaseSpend; 9],
}

/// The run's spend per phase and iteration (the final answer and the baseline count in the
/// final iteration's row).
pub fn spend(run: &RunReport) -> Spend {
    let mut out = Spend::default();
    for it in &run.iterations {
        let mut row = iteration_spend(it);
        if it.is_final {
            if let Some(f) = &run.final_eval {
                row[2] = PhaseSpend::of_set(&f.cost);
            }
            if let Some(b) = &run.baseline {
                let trials = b.n.saturating_sub(run.info.k) * b.tasks as u32;
                let cost = trials as f64 * b.per_seed_trial;
                row[3] = match b.basis.as_str() {
                    "usd" => PhaseSpend {
                        usd: cost,
                        trials,
                        ..Default::default()
                    },
                    _ => PhaseSpend {
                        tokens: cost as u64,
                        trials,
                        ..Default::default()
                    },
                };
            }
        }
        for (t, r) in out.total.iter_mut().zip(&row) {
            t.add(r);
        }
        out.rows.push((crate::format::iter_label(it), row));
    }
    out.usd = out.total.iter().any(|p| p.usd > 0.0);
    out
}

fn iteration_spend(it: &IterationReport) -> [PhaseSpend; 9] {
    let mut row = [PhaseSpend::default(); 9];
    row[0] = PhaseSpend::of_role(it.roles.get("code_agent"));
    row[0].trials = it
        .scores
        .as_ref()
        .map_or(0, |s| s.tasks.values().map(|t| t.k).sum());
    row[1] = PhaseSpend::of_set(&it.extra);
    for (i, role) in PHASES.iter().enumerate().skip(4) {
        row[i] = PhaseSpend::of_role(it.roles.get(*role));
    }
    row
}

impl Spend {
    /// A phase's spend as a cell: `$1.20 · 178 trials`, `12.3k tok`, or `–`.
    pub fn cell(&self, p: &PhaseSpend) -> String {
        let amount = match self.usd {
            true if p.usd > 0.0 => usd(p.usd),
            false if p.tokens > 0 => format!("{} tok", tokens(p.tokens)),
            _ if p.trials == 0 => return "–".into(),
            _ => "0".into(),
        };
        match p.trials {
            0 => amount,
            n => format!("{amount} · {n} trials"),
        }
    }

    /// The machinery's share of a row's spend (baseline excluded), None when nothing was spent.
    pub fn share(&self, row: &[PhaseSpend; 9]) -> Option<f64> {
        let v = |p: &PhaseSpend| if self.usd { p.usd } else { p.tokens as f64 };
        let all: f64 = (0..9)
            .filter(|i| PHASES[*i] != "baseline")
            .map(|i| v(&row[i]))
            .sum();
        let mach: f64 = (0..9).filter(|i| machinery(*i)).map(|i| v(&row[i])).sum();
        (all > 0.0).then(|| mach / all)
    }

    /// The share as a cell (`23.4%` or `–`).
    pub fn share_cell(&self, row: &[PhaseSpend; 9]) -> String {
        self.share(row)
            .map_or("–".into(), |s| format!("{:.1}%", 100.0 * s))
    }

    /// One line: the total per phase that spent anything, and the machinery's share.
    pub fn total_line(&self) -> String {
        let parts: Vec<String> = PHASES
            .iter()
            .zip(&self.total)
            .filter(|(_, p)| p.usd > 0.0 || p.tokens > 0 || p.trials > 0)
            .map(|(n, p)| format!("{n} {}", self.cell(p)))
            .collect();
        format!(
            "spend by phase: {} — the loop's machinery (attribution extras, final, judge, debugger, overview, evolve, screen) took {} of the run's {} (baseline apart)",
            if parts.is_empty() { "nothing recorded".into() } else { parts.join(" · ") },
            self.share_cell(&self.total),
            if self.usd { "dollars" } else { "tokens" }
        )
    }
}

#[cfg(test)]
#[path = "spend_tests.rs"]
mod tests;
