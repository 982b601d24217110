//! A run directory (docs/run-directory.md) and its typed records: [`RunDir`] and [`IterationDir`] own
//! every path of `runs/<name>/`; the journal, the change manifest, `change_evaluation.json`,
//! `evidence.json`, `evolve/snapshots.json`, the leak guard's record and the cleaned traces
//! are types here. This crate is a leaf above `ahe-bench` (whose `TrialDir` owns a trial's
//! files): no other code spells a run's file names.

pub mod attribution;
pub mod clean;
pub mod evidence;
pub mod final_eval;
pub mod journal;
mod json;
pub mod leak;
pub mod manifest;
pub mod records;
pub mod run_dir;
pub mod snapshots;
pub mod variants;

pub use json::{read_json, write_json};
pub use manifest::{Change, Component, Manifest};
pub use run_dir::{Best, IterationDir, RunDir};
