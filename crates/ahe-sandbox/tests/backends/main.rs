//! The integration tests of the `docker` and `local` backends, one test binary: one module
//! per former `tests/<name>.rs` (a test is `<module>::<test>`); `docker_support` and
//! `local_support` are their shared set-ups.

mod docker_support;
mod local_support;

/// The hand-over tests' start window: their writer loop keeps a leftover busy, so the
/// hand-over waits the whole window before it kills it (30 s by default; short here).
pub const START_WINDOW: u32 = 3;

mod docker;
mod docker_handover;
mod docker_lifecycle;
mod local;
mod local_containment;
mod local_exec;
