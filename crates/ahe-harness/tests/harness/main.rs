//! The integration tests of `ahe-harness`, one test binary: one module per former
//! `tests/<name>.rs` (a test is `<module>::<test>`); `support` is their shared set-up.

mod support;

mod hooks;
mod prompt;
mod runtime;
mod validate;
