//! The integration tests of the `docker` and `local` backends, one test binary: one module
//! per former `tests/<name>.rs` (a test is `<module>::<test>`); `docker_support` and
//! `local_support` are their shared set-ups.

mod docker_support;
mod local_support;

/// The hand-over tests' start window: their writer loop keeps a leftover busy, so the
/// hand-over waits the whole window before it kills it (30 s by default; short here).
pub const START_WINDOW: u32 = 3;

/// `sb.end_leftovers(policy, START_WINDOW)`, checking that a busy leftover held it for the
/// window asked (under `KeepServers`), not the 30 s default.
pub async fn end_leftovers_in_window(
    sb: &dyn ahe_sandbox::Sandbox,
    policy: ahe_sandbox::LeftoverPolicy,
) -> ahe_sandbox::HandOver {
    let t = std::time::Instant::now();
    let h = sb.end_leftovers(policy, START_WINDOW).await.unwrap();
    let took = t.elapsed();
    if policy == ahe_sandbox::LeftoverPolicy::KeepServers {
        assert!(took >= std::time::Duration::from_secs(2), "{took:?}");
    }
    assert!(
        took < std::time::Duration::from_secs(15),
        "{policy:?}: {took:?}"
    );
    h
}

mod docker;
mod docker_handover;
mod docker_lifecycle;
mod docker_tools;
mod local;
mod local_containment;
mod local_exec;
mod ptrace_guard;
