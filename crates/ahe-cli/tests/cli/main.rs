//! The integration tests of `ahe` (the binary), one test binary: one module per former
//! `tests/<name>.rs`, so a test is `<module>::<test>` (e.g. `bench::smoke_on_local`).
//! One binary links and starts once; its tests share the test threads (four:
//! `.cargo/config.toml`). `pool` (three extra docker engines, one killed) and
//! `harbor_backend` (Harbor's docker environment) are here too: cargo runs test binaries one
//! after another, and on their own they kept a core idle (pool ~40 s of waiting on engines;
//! Harbor's evals at 1.47 cores for ~110 s); among themselves their tests still run one at
//! a time (`pool::serial`; `harbor_backend::harbor_evals_in_turn` runs its evals in one test).
//!
//! Kept in their own binaries (`tests/<name>.rs`), because they must not run beside other
//! tests of this crate (cargo runs test binaries one after another):
//! - `docker`: its kill test checks which containers of a killed `ahe` are left, and every
//!   other `ahe eval --sandbox docker` reaps the containers of dead processes;
//! - `storage`: it measures the host's free space, which other tests' writes blur.

mod attribution_sim;
#[path = "../common/mod.rs"]
mod common;
#[path = "../pool_support/mod.rs"]
mod pool_support;
mod registry_support;

mod adversarial;
mod adversarial_offhost;
mod architecture;
mod architecture_loop;
mod architecture_testsupport;
mod attribution;
mod attribution_small;
mod baseline;
mod bench;
mod check;
mod cli;
mod compat;
mod containment;
mod docs;
mod eval_debug;
mod evolve;
mod evolve_paths;
mod faults;
mod fetch;
mod frontier;
mod guards;
mod harbor_backend;
mod harbor_export;
mod harbor_run;
mod honest_best;
mod hygiene;
mod inside_sums;
mod judge;
mod judge_bench;
mod leak;
mod local_cost;
mod matrix;
mod overlap;
mod pool;
mod prompts;
mod registry;
mod replay;
mod report;
mod same_file_rollback;
mod separate_verifier;
mod show_eval;
mod show_view;
mod signals;
mod tamper;
mod tb2_real;
mod variants;
mod view;
mod view_browser;
