//! The integration tests of `ahe-runner`, one test binary: one module per subject (a test is
//! `<module>::<test>`).

mod commit_guard;
mod model_presets;
mod rollout;
mod trial_judge;
