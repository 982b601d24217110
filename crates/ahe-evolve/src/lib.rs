//! The AHE loop and its phases; for now the rollout phase and run configs.

pub mod config;
pub mod rollout;

pub use config::RunConfig;
pub use rollout::{rollout, select_backend, HarnessAgent, RolloutSpec};
