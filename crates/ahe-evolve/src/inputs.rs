//! The algorithm's inputs: the run being executed (`run`), starting and resuming it (`start`,
//! `lock`), the narrow views of it the phases take instead of the whole run (`ledger`,
//! `trials`), and what earlier iterations left on disk (`history`, `spend`). It imports no
//! phase (the phases import it); each phase's typed inputs are built from the run in
//! `algorithm::phase_inputs`.

pub mod history;
pub mod ledger;
pub mod lock;
pub mod run;
pub mod spend;
pub mod start;
pub mod trials;
