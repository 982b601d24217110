//! The integration tests of the `docker` and `local` backends, one test binary (their
//! hand-over tests each wait out a start window, so they overlap here): one module per former
//! `tests/<name>.rs` (a test is `<module>::<test>`); `docker_support` and `local_support`
//! are their shared set-ups.

mod docker_support;
mod local_support;

mod docker;
mod docker_handover;
mod docker_lifecycle;
mod local;
mod local_containment;
mod local_exec;
