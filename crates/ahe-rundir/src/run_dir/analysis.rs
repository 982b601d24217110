//! What the evolve agent sees beyond the per-task reports: the benchmark overview's failure
//! patterns (`analysis/patterns.json`, read back by the next iteration for trends), the
//! evolve step's proposals before any guard removed one (`evolve/proposed.json`), and the
//! evolution history it reads (`evolve/inputs/history.md`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::manifest::Change;
use crate::run_dir::IterationDir;
use crate::{read_json, write_json};

/// How a failure pattern moved since the previous iteration's overview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Trend {
    /// No pattern of the previous iteration matches it (or there was none).
    New,
    /// More failing trials than the matching previous pattern had.
    Grew {
        /// Failing trials of the previous pattern.
        from: u32,
    },
    /// Fewer failing trials than the matching previous pattern had.
    Shrank {
        /// Failing trials of the previous pattern.
        from: u32,
    },
    /// As many failing trials as the matching previous pattern had.
    Steady,
}

/// One recurring failure mechanism across tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pattern {
    /// Short label (what the trend matches first).
    pub name: String,
    /// The mechanism in a sentence or two.
    pub mechanism: String,
    /// Failing visible tasks it covers.
    pub tasks: Vec<String>,
    /// Failing trials of those tasks (suspect and infra-error trials not counted).
    pub trials: u32,
    /// Harness component it points at (a manifest component name, or `unclear`).
    pub component: String,
    /// A representative piece of evidence: trial/turn links into the detail files.
    pub evidence: String,
    /// Movement since the previous iteration.
    pub trend: Trend,
}

/// `analysis/patterns.json`: the overview's failure patterns, machine-readable.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Patterns {
    /// Iteration of the overview.
    pub iteration: u32,
    /// The patterns (empty when the synthesis failed).
    pub patterns: Vec<Pattern>,
    /// Why there are no patterns (synthesis failed, refused by the budget, off); None when
    /// the synthesis ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Names of the previous iteration's patterns that no pattern matches any more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gone: Vec<String>,
}

/// `evolve/proposed.json`: the evolve agent's changes as submitted (or salvaged), before the
/// leak guard and the harness validation; what history reads for refused changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Proposed {
    /// The agent's changes, rollbacks excluded.
    pub changes: Vec<Change>,
    /// The harness validation's problems when it refused every edit (empty: it passed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_refused: Vec<String>,
}

impl IterationDir {
    /// Path of `analysis/patterns.json`.
    pub fn patterns_path(&self) -> PathBuf {
        self.analysis().join("patterns.json")
    }

    /// `analysis/patterns.json`, when the debug phase wrote it.
    pub fn patterns(&self) -> Option<Patterns> {
        read_json(&self.patterns_path()).ok()
    }

    /// Writes `analysis/patterns.json` atomically.
    pub fn write_patterns(&self, p: &Patterns) -> anyhow::Result<()> {
        write_json(&self.patterns_path(), p)
    }

    /// `analysis/overview/`: the trace (`trace.jsonl`) of the overview's model calls.
    pub fn overview_trace_dir(&self) -> PathBuf {
        self.analysis().join("overview")
    }

    /// `analysis/overview/trace.jsonl`: every model call of the overview's synthesis, appended
    /// across attempts.
    pub fn overview_trace(&self) -> PathBuf {
        self.overview_trace_dir().join(ahe_bench::layout::TRACE)
    }

    /// `analysis/debug.json`: the summary of `ahe debug EVAL_DIR` (counts, tokens, cost).
    pub fn debug_summary_path(&self) -> PathBuf {
        self.analysis().join("debug.json")
    }

    /// `evolve/variants/v<N>/result.json`: variant N once committed (read back on resume).
    pub fn variant_result(&self, n: u32) -> PathBuf {
        self.variant_dir(n).join("result.json")
    }

    /// `evolve/variants/v<N>/trace.jsonl`: variant N's agent trace, appended across attempts.
    pub fn variant_trace(&self, n: u32) -> PathBuf {
        self.variant_dir(n).join(ahe_bench::layout::TRACE)
    }

    /// `evolve/variants/v<N>/harness/`: variant N's working tree while its agent works.
    pub fn variant_harness(&self, n: u32) -> PathBuf {
        self.variant_dir(n).join("harness")
    }

    /// `evolve/variants/v<N>/`: variant N's trace, manifest, snapshots and `result.json`, and
    /// while its agent works its own working tree `harness/` (a linked git worktree).
    pub fn variant_dir(&self, n: u32) -> PathBuf {
        self.evolve().join("variants").join(format!("v{n}"))
    }

    /// Path of `evolve/variants.json`: every variant's screen figures and which was chosen.
    pub fn variants_path(&self) -> PathBuf {
        self.evolve().join("variants.json")
    }

    /// The files one evolve agent writes into `evolve/` (a variant into its own directory;
    /// the chosen variant's are copied here).
    pub fn evolve_agent_files(&self) -> Vec<PathBuf> {
        vec![
            self.evolve_trace(),
            self.evolve().join("agent.log"),
            self.manifest_path(),
            self.change_snapshots_path(),
            self.proposed_path(),
        ]
    }

    /// Path of `evolve/proposed.json`.
    pub fn proposed_path(&self) -> PathBuf {
        self.evolve().join("proposed.json")
    }

    /// `evolve/proposed.json`, when the evolve phase wrote it (older runs: None).
    pub fn proposed(&self) -> Option<Proposed> {
        read_json(&self.proposed_path()).ok()
    }

    /// Writes `evolve/proposed.json` atomically.
    pub fn write_proposed(&self, p: &Proposed) -> anyhow::Result<()> {
        write_json(&self.proposed_path(), p)
    }

    /// Path of `evolve/inputs/history.md`: the evolution history the evolve agent reads.
    pub fn history_input_path(&self) -> PathBuf {
        self.evolve_inputs().join("history.md")
    }

    /// Writes `evolve/inputs/history.md`.
    pub fn write_history_input(&self, md: &str) -> anyhow::Result<()> {
        std::fs::create_dir_all(self.evolve_inputs())?;
        Ok(std::fs::write(self.history_input_path(), md)?)
    }
}
