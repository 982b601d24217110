//! The AHE loop (Algorithm 1): rollout, clean, attribute, debug, evolve, commit.

pub mod config;
pub mod manifest;
pub mod rollout;

pub use config::RunConfig;
pub use manifest::{Change, Component, Manifest};
pub use rollout::{rollout, select_backend, HarnessAgent, RolloutSpec};
