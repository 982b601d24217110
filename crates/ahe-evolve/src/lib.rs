//! The AHE loop (Algorithm 1): rollout, clean, attribute, debug, evolve, commit.
//!
//! One module per phase (`rollout`, `attribute`, `debug`, `evolve`, `commit`; the cleaning is
//! `ahe_rundir::clean`'s, run inside the rollout), the final answer after the last iteration
//! (`final_eval`, with the matched-budget baseline), the algorithm itself (`algorithm`), and
//! `inputs`: the run being executed and the narrow views of it each phase takes.

pub mod algorithm;
pub mod attribute;
pub mod commit;
pub mod debug;
pub mod evolve;
pub mod final_eval;
pub mod inputs;
pub mod rollout;

pub use inputs::run::Run;
