//! The AHE loop (Algorithm 1): rollout, clean, attribute, debug, evolve, commit.

pub mod agent;
pub mod algorithm;
pub mod attribute_phase;
pub mod baseline;
pub mod canary;
pub mod chain;
pub mod commit_phase;
pub mod confirm;
pub mod counterfactual;
pub mod debug;
pub mod debug_eval;
pub mod debug_phase;
pub mod evolve;
pub mod evolve_phase;
pub mod final_eval;
pub mod history;
pub mod inputs;
pub mod jail;
pub mod leak;
pub mod ledger;
pub mod lineage;
pub mod lock;
pub mod overlap;
pub mod overview;
pub mod preflight;
pub mod rollback;
pub mod rollout_phase;
pub mod run;
pub mod screen;
pub mod spend;
pub mod start;
pub mod text;
pub mod trials;
pub mod variants;

pub use run::Run;
