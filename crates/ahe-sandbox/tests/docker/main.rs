//! The integration tests of the `docker` backend, one test binary: one module per former
//! `tests/<name>.rs` (a test is `<module>::<test>`); `docker_support` is their shared set-up.

mod docker_support;

mod docker;
mod docker_handover;
mod docker_lifecycle;
