//! Harnesses: the directory format, its validation, and the agent runtime that runs one.

pub mod agent_loop;
pub mod format;
pub mod middleware;
pub mod model;
pub mod prompt;
pub mod runtime;
pub mod session;
pub mod text;
pub mod tools;
pub mod trace;
pub mod wire;

pub use format::load;
pub use middleware::builtin_mw;
pub use model::{Harness, Problem};
pub use runtime::Runtime;
pub use session::{End, RunOutcome, Session, Stop};
pub use tools::ToolResult;
pub use trace::TraceWriter;
