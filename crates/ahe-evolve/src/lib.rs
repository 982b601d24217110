//! The AHE loop (Algorithm 1): rollout, clean, attribute, debug, evolve, commit.

pub mod agent;
pub mod attribute;
pub mod canary;
pub mod chain;
pub mod clean;
pub mod commit;
pub mod config;
pub mod confirm;
pub mod counterfactual;
pub mod debug;
pub mod evidence;
pub mod evolve;
pub mod extra;
pub mod history;
pub mod jail;
pub mod journal;
pub mod leak;
#[path = "loop.rs"]
pub mod r#loop;
pub mod manifest;
pub mod overlap;
pub mod preflight;
pub mod report;
pub mod revert;
pub mod rollback;
pub mod rollout;
pub mod run;
pub mod run_dir;
pub mod start;
pub mod stats;
pub mod text;
pub mod trial_judge;

pub use config::RunConfig;
pub use manifest::{Change, Component, Manifest};
pub use rollout::{rollout, rollout_with, select_backend, HarnessAgent, RolloutSpec};
pub use run::Run;
pub use run_dir::{Best, IterationDir, RunDir};

/// Writes a value as pretty JSON, atomically (temp file, then rename).
pub fn write_json<T: serde::Serialize>(path: &std::path::Path, v: &T) -> anyhow::Result<()> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(v)?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Reads a JSON file, naming it in the error.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
