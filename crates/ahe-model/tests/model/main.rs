//! Integration tests of `ahe-model`, one test binary: one module per former
//! `tests/<name>.rs` (a test is `<module>::<test>`).
//!
//! Kept in their own binaries: `anthropic`, `http` and `strict_responses` set or remove
//! environment variables (the API key variables a provider reads) while their tests run;
//! `std::env::set_var` races with every `getenv` of other threads of the process (reqwest
//! reads proxy variables, the local model its directory), so the fewer tests beside them
//! the better.

mod cache;
mod local;
mod strict_anthropic;
mod strict_chat;
