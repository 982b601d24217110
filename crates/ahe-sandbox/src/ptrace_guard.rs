//! The ptrace guard: processes ahe starts after the agent phase (the hand-over, the verifier,
//! its checks) hold a capability no process of the agent can hold, so the kernel refuses the
//! agent's processes `ptrace`, `/proc/PID/mem`, `process_vm_writev` and `/proc/PID/fd` on
//! them. A server the hand-over keeps for the tests runs as root beside the verifier; without
//! this it could attach to `bash /tests/test.sh` and turn every exit status it waits for into
//! 0 (the `ptrace-verifier-status` hack), touching no file.
//!
//! The kernel lets a process trace another of the same user only when the tracer's permitted
//! capabilities include the tracee's, or it holds `CAP_SYS_PTRACE`. So the sandbox gives its
//! root [`CAP`] (docker: `cap_add`; Harbor's docker environment: ahe's compose overlay; the
//! local backend's exec server: bubblewrap's `--cap-add`), and the agent's shell starts under
//! `setpriv --bounding-set` without it and without `CAP_SYS_PTRACE`: it and every process it
//! starts lack both for good (a bounding set only shrinks; a setuid program cannot bring them
//! back). `CAP_WAKE_ALARM` grants nothing in a container (wake alarms need it in the host's
//! user namespace): the verifier holding it changes nothing it can do.
//!
//! The hand-over (`handover.sh`) enforces the other half: a server it would keep for the tests
//! that holds the guard's capability did not come from the agent's shell (the image's
//! `setpriv` replaced, a command run past the shell) and is killed, reported as `unguarded`.
//! Where the agent's shell could not drop it (no `setpriv` in the image, a non-root `USER`),
//! the guard is off and the hand-over says so (`guard 0`).

/// The capability the agent's processes lack and ahe's later processes hold (Docker's name).
pub const CAP: &str = "CAP_WAKE_ALARM";

/// Its bit in a capability set.
pub const BIT: u64 = 1 << 35;

/// `CAP_SYS_PTRACE`'s bit: an agent's shell that holds it could trace anything.
const PTRACE_BIT: u64 = 1 << 19;

/// What `setpriv --bounding-set` drops from the agent's shell.
const DROP: &str = "-wake_alarm,-sys_ptrace";

/// A POSIX sh prelude that runs `"$@"` without the guard's capabilities when the image's
/// `setpriv` can drop them, else as is (`sh -c PRELUDE sh PROGRAM ARGS...`).
pub fn drop_prelude() -> String {
    format!(
        "if command -v setpriv >/dev/null 2>&1 && \
         setpriv --bounding-set {DROP} true >/dev/null 2>&1; then \
         exec setpriv --bounding-set {DROP} \"$@\"; fi; exec \"$@\""
    )
}

/// `argv` started through [`drop_prelude`].
pub fn dropped(argv: &[String]) -> Vec<String> {
    let mut v = vec!["sh".to_string(), "-c".into(), drop_prelude(), "sh".into()];
    v.extend(argv.iter().cloned());
    v
}

/// `argv` run by the image's `setpriv` without the guard's capabilities (where [`probe`]
/// said it can).
pub fn setpriv(argv: &[String]) -> Vec<String> {
    let mut v: Vec<String> = ["setpriv", "--bounding-set", DROP]
        .map(String::from)
        .to_vec();
    v.extend(argv.iter().cloned());
    v
}

/// Whether the image's `setpriv` can drop the guard's capabilities: [`setpriv`] of this
/// exits 0.
pub fn probe() -> Vec<String> {
    setpriv(&["true".to_string()])
}

/// A POSIX sh script printing `WHO HEX`: the bounding set of the `sh` it starts (`$1` = WHO).
const BOUNDING: &str =
    "while read -r k v; do [ \"$k\" = CapBnd: ] && echo \"$1 $v\"; done </proc/self/status";

/// A POSIX sh script printing `ahe HEX` (its own bounding set: what ahe's commands hold) and
/// `agent HEX` (a process started as the agent's commands are); see [`mask_of`].
pub fn probe_script() -> String {
    format!(
        "sh -c '{BOUNDING}' sh ahe; command -v setpriv >/dev/null 2>&1 && \
         setpriv --bounding-set {DROP} sh -c '{BOUNDING}' sh agent"
    )
}

/// A POSIX sh script printing `agent HEX`, to run in the agent's shell (see [`mask_of`]).
pub fn shell_probe_script() -> String {
    format!("sh -c '{BOUNDING}' sh agent")
}

/// The guard's mask from [`probe_script`]'s output, or why the guard is off.
pub fn mask_of(probe: &str) -> Result<u64, String> {
    let set = |who: &str| {
        probe.lines().find_map(|l| {
            let hex = l.strip_prefix(who)?.trim();
            u64::from_str_radix(hex, 16).ok()
        })
    };
    let ahe = set("ahe ").ok_or("the sandbox's capability set could not be read")?;
    let agent = set("agent ").ok_or("the image has no setpriv that can drop capabilities")?;
    mask(ahe, agent)
}

/// The guard's mask when ahe's commands hold `ahe` and the agent's `agent` (bounding sets).
pub fn mask(ahe: u64, agent: u64) -> Result<u64, String> {
    if ahe & BIT == 0 {
        return Err(format!("the sandbox's root lacks {CAP}"));
    }
    if agent & (BIT | PTRACE_BIT) != 0 {
        return Err("the agent's shell could not drop the guard's capabilities".into());
    }
    Ok(BIT)
}

/// What `setpriv` prints when the program it should run is missing.
pub fn missing(program: &str) -> String {
    format!("setpriv: failed to execute {program}: No such file or directory\n")
}

/// The local backend's exec server holds [`CAP`] and `CAP_SETPCAP` (which dropping needs);
/// the agent's commands start under the host's `setpriv` with these arguments.
pub const LOCAL_DROP: &[&str] = &[
    "--bounding-set",
    "-wake_alarm,-setpcap",
    "--inh-caps",
    "-wake_alarm,-setpcap",
    "--ambient-caps",
    "-wake_alarm,-setpcap",
];

/// The capability bits the local backend's hand-over checks kept servers for.
pub const LOCAL_MASK: u64 = BIT | 1 << 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_needs_the_cap_on_ahes_side_and_neither_on_the_agents() {
        let docker = 0xa80425fb_u64;
        assert_eq!(mask(docker | BIT, docker), Ok(BIT));
        assert!(mask(docker, docker).is_err(), "no cap_add");
        assert!(mask(docker | BIT, docker | BIT).is_err(), "not dropped");
        assert!(mask(!0, !BIT).is_err(), "CAP_SYS_PTRACE kept");
        let out = "ahe 00000008a80425fb\nagent 00000000a80425fb\n";
        assert_eq!(mask_of(out), Ok(BIT));
        assert!(mask_of("ahe 00000008a80425fb\n")
            .unwrap_err()
            .contains("setpriv"));
    }
}
