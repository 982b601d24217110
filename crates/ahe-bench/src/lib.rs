//! Benchmarks in the Terminal-Bench 2 / Harbor task format: loading, trials, verifier, scores.

pub mod changes;
pub mod check;
pub mod counterfactual;
pub mod coverage;
pub mod disk;
pub mod eval;
pub mod fetch;
pub mod guard;
pub mod images;
pub mod inside;
pub mod integrity;
pub mod judge;
pub mod layout;
pub mod oracle;
pub mod record;
pub mod revert;
pub mod scores;
pub mod separate;
pub mod tamper;
pub mod task;
pub mod trial;
pub mod verify;
pub mod witness;

pub use check::{check_benchmark, check_task, FormatCheck, Severity};
pub use disk::{DiskEvent, DiskReserve};
pub use eval::{run_eval, with_shared_slots, EvalOptions, Progress, Schedule};
pub use judge::{JudgeOutcome, JudgeRecord, TrialJudge};
pub use layout::{EvalDir, TrialDir};
pub use oracle::{run_checks, NopAgent, OracleAgent, RunCheck, RunKind, RunOptions};
pub use record::{AgentEnd, AgentOutcome, TrialResult, TrialStatus};
pub use scores::{Scores, ScoresMeta, TaskStatus};
pub use tamper::{OnSuspect, Suspect, SuspectReason};
pub use task::{load_benchmark, select_tasks, Task, TaskError};
pub use trial::{Agent, AgentContext, TrialEnv};
pub use verify::{parse_reward, VerifierPolicy};
