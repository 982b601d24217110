//! Model servers for tests, a dev-dependency only (no crate names it in `[dependencies]`):
//! the scripted OpenAI/Anthropic-compatible server ([`scripted`]: replies from a queue or a
//! closure, every request recorded) and the strict stand-ins of the frontier APIs
//! ([`standin`]: chat completions, Responses, Messages, checked as the real services check
//! them). Both start through one function, [`server::Server::start`].

#![warn(missing_docs)]

pub mod scripted;
pub mod server;
pub mod standin;

pub use scripted::{ReplyFn, ScriptedReply, TestServer};
pub use server::{RecordedRequest, Server};
pub use standin::{StandIn, StandInOptions};

/// Locks `m`, taking the data of a poisoned lock too (a panicking test thread must not
/// hide what the server recorded).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
