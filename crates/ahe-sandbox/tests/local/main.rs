//! The integration tests of the `local` backend, one test binary: one module per former
//! `tests/<name>.rs` (a test is `<module>::<test>`); `local_support` is their shared set-up.

mod local_support;

mod local;
mod local_containment;
mod local_exec;
