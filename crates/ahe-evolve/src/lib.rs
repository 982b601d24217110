//! The AHE loop (Algorithm 1): rollout, clean, attribute, debug, evolve, commit.

pub mod agent;
pub mod canary;
pub mod chain;
pub mod commit;
pub mod config;
pub mod confirm;
pub mod counterfactual;
pub mod debug;
pub mod evolve;
pub mod extra;
pub mod history;
pub mod jail;
pub mod leak;
pub mod lock;
#[path = "loop.rs"]
pub mod r#loop;
pub mod overlap;
pub mod preflight;
pub mod revert;
pub mod rollback;
pub mod rollout;
pub mod rollout_phase;
pub mod run;
pub mod start;
pub mod text;
pub mod trial_judge;

pub use ahe_attribution::{attribute, stats};
pub use ahe_rundir::{clean, evidence, journal, manifest, run_dir};
pub use ahe_rundir::{read_json, write_json};
pub use config::RunConfig;
pub use manifest::{Change, Component, Manifest};
pub use rollout::{rollout, rollout_with, select_backend, HarnessAgent, RolloutSpec};
pub use run::Run;
pub use run_dir::{Best, IterationDir, RunDir};
