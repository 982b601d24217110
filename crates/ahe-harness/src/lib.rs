//! Harnesses: the directory format, its validation, and the agent runtime that runs one.

pub mod format;
pub mod middleware;
pub mod prompt;
pub mod runtime;
pub mod text;
pub mod tools;
pub mod trace;

pub use format::{load, Harness, Problem};
pub use runtime::{End, RunOutcome, Runtime};
pub use tools::ToolResult;
pub use trace::TraceWriter;
