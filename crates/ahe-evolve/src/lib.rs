//! The AHE loop (Algorithm 1): rollout, clean, attribute, debug, evolve, commit.

pub mod agent;
pub mod algorithm;
pub mod attribute;
pub mod baseline;
pub mod commit;
pub mod debug;
pub mod evolve;
pub mod final_eval;
pub mod history;
pub mod inputs;
pub mod ledger;
pub mod lock;
pub mod rollback;
pub mod rollout;
pub mod run;
pub mod spend;
pub mod start;
pub mod text;
pub mod trials;

pub use run::Run;
