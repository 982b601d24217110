//! The integration tests of `ahe-evolve`, one test binary: one module per former
//! `tests/<name>.rs` (a test is `<module>::<test>`); `fixture` and `synth_run` are their shared
//! set-up (`synth_run` is also the `bench_report` example's).

mod fixture;
mod synth_run;

mod chain;
mod history;
mod leak;
mod overview;
mod report;
mod rollback;
mod suspect;
