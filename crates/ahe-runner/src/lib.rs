//! Running a harness on benchmark tasks: the layer between the harness and benchmark crates
//! below and the loop above. It owns the run configuration (`run.toml` → [`config::RunConfig`]),
//! the choice of sandbox backend ([`rollout::select_backend_on`]), the rollout of one harness
//! with one model on a set of tasks ([`rollout::rollout`], with the trajectory judge of
//! [`trial_judge`]), the harness's git repository ([`repo::HarnessRepo`]: commits, tags,
//! reverts, worktrees and the size and git-metadata rules of a commit), the holdout split and
//! the matched-budget baseline's plan. `ahe eval`, `ahe matrix`, `ahe bench`, `ahe check`,
//! `ahe export` and the loop (`ahe-evolve`) all run harnesses through it.

pub mod baseline;
pub mod config;
pub mod holdout;
pub mod repo;
pub mod rollout;
pub mod trial_judge;
pub mod turns;
