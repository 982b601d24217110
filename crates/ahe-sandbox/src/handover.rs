//! The verifier hand-over: ending what the agent left running before the verifier starts.

use serde::{Deserialize, Serialize};

use crate::{ExecOpts, Result, Sandbox, SandboxError};

/// The hand-over script (POSIX sh, so it runs in images without bash).
pub(crate) const SCRIPT: &str = include_str!("handover.sh");

/// What happens to processes still running when the agent phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftoverPolicy {
    /// Every process is killed.
    Kill,
    /// Every process is killed except those holding a listening TCP or bound UDP socket:
    /// Terminal-Bench tasks ask for servers left running (`kv-store-grpc`, `qemu-startup`,
    /// `pypi-server`, ...), which the tests then query.
    #[default]
    KeepServers,
}

/// A process the hand-over kept alive (it serves a socket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptProcess {
    /// Pid inside the sandbox.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
    /// The ports it listens on.
    pub ports: Vec<u16>,
}

/// What the hand-over did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOver {
    /// Processes killed.
    pub killed: u32,
    /// Processes kept (servers, under [`LeftoverPolicy::KeepServers`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<KeptProcess>,
    /// Servers killed although they listen: they held the ptrace guard's capability, which
    /// no process of the agent's shell holds (see `ptrace_guard`); counted in `killed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unguarded: Vec<KeptProcess>,
    /// The ptrace guard's capability bits the hand-over checked kept servers for (0: the
    /// guard is off in this sandbox).
    #[serde(default)]
    pub guard: u64,
}

impl HandOver {
    /// The trial's note on the ptrace guard as this hand-over found it (see `ptrace_guard`).
    pub fn guard_note(&self) -> String {
        let mut note = match self.guard {
            0 => "ptrace guard: off (the agent's shell held what ahe's commands hold: no setpriv \
                  in the image, or a non-root user): a server kept for the tests could trace \
                  the verifier"
                .to_string(),
            bits => format!(
                "ptrace guard: on (the hand-over and the verifier held capabilities {bits:#x} \
                 that no process of the agent's shell holds: a kept server cannot trace them)"
            ),
        };
        if !self.unguarded.is_empty() {
            let who: Vec<String> = (self.unguarded.iter())
                .map(|k| format!("{} (pid {}, ports {:?})", k.comm, k.pid, k.ports))
                .collect();
            note.push_str(&format!(
                "; killed as not started by the agent's shell although listening: {}",
                who.join(", ")
            ));
        }
        note
    }
}

/// The default start window: how long the hand-over waits at most for a leftover that is
/// still starting (busy, not listening yet) to bind its port, under
/// [`LeftoverPolicy::KeepServers`].
pub const START_WINDOW_SECS: u32 = 30;

/// The hand-over command: [`SCRIPT`] sparing `depth` generations of the backend's own
/// processes, waiting at most `start_secs` (capped at an hour) for servers still starting.
/// Other commands may follow it in the same exec (they run once it succeeded).
pub fn command(policy: LeftoverPolicy, depth: u32, start_secs: u32) -> String {
    guarded_command(policy, depth, start_secs, None)
}

/// [`command`] whose ptrace guard rule uses the capability bits `mask` (see `ptrace_guard`)
/// instead of those PID 1 holds and the oldest child of PID 1 lacks.
pub fn guarded_command(
    policy: LeftoverPolicy,
    depth: u32,
    start_secs: u32,
    mask: Option<u64>,
) -> String {
    let keep = u8::from(policy == LeftoverPolicy::KeepServers);
    let ticks = start_secs.min(3600) * 4;
    let mask = mask.map(|m| format!(" {m}")).unwrap_or_default();
    format!("set -- {depth} {keep} {ticks}{mask}\n{SCRIPT}\n")
}

/// Runs `command` (a hand-over command, see [`Sandbox::handover_command`]) in `sb`.
pub(crate) async fn run<S: Sandbox + ?Sized>(sb: &S, command: &str) -> Result<HandOver> {
    let opts = ExecOpts {
        cwd: Some("/".into()),
        timeout: Some(std::time::Duration::from_secs(90)),
        ..Default::default()
    };
    let out = sb.exec(command, opts).await?;
    let parsed = parse(&out.stdout);
    match (out.exit_code, parsed) {
        (Some(0), Some(h)) => Ok(h),
        _ => Err(SandboxError::Backend(format!(
            "the verifier hand-over could not end the agent's processes (exit {:?}): {}{}",
            out.exit_code,
            tail(&out.stdout),
            tail(&out.stderr)
        ))),
    }
}

/// The last 400 bytes of `s` (on a char boundary).
fn tail(s: &str) -> &str {
    let mut i = s.len().saturating_sub(400);
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// Parses the script's `kept ...` and `killed N` lines (`None` when it did not finish).
pub fn parse(stdout: &str) -> Option<HandOver> {
    let mut h = HandOver::default();
    let mut done = false;
    for line in stdout.lines() {
        let mut w = line.split_whitespace();
        match w.next() {
            Some(what @ ("kept" | "unguarded")) => {
                let pid = w.next()?.parse().ok()?;
                let comm = w.next().unwrap_or("?").to_string();
                let ports = w
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .filter_map(|p| p.parse().ok())
                    .collect();
                let to = match what {
                    "kept" => &mut h.kept,
                    _ => &mut h.unguarded,
                };
                to.push(KeptProcess { pid, comm, ports });
            }
            Some("guard") => h.guard = w.next()?.parse().ok()?,
            Some("killed") => {
                h.killed = w.next()?.parse().ok()?;
                done = true;
            }
            _ => {}
        }
    }
    done.then_some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kept_and_killed() {
        let h = parse("kept 12 python3 5328,8080\nkilled 3\n").unwrap();
        assert_eq!(h.killed, 3);
        assert_eq!(
            h.kept,
            vec![KeptProcess {
                pid: 12,
                comm: "python3".into(),
                ports: vec![5328, 8080]
            }]
        );
        assert_eq!(parse("kept 1 x 1\n"), None, "no killed line: incomplete");
    }

    /// Runs the script on the host in a fresh pid namespace (bubblewrap), where a
    /// background loop, a `setsid` escapee and a forking loop must all end, and the
    /// backend's own process (the oldest child of PID 1) must survive.
    #[test]
    fn script_ends_leftovers_in_a_pid_namespace() {
        if !crate::local::LocalBackend::bubblewrap_available() {
            eprintln!("skipped: bubblewrap unavailable");
            return;
        }
        let inner = format!(
            "sleep 1000 & \
             (while :; do sleep 0.01; done) & \
             setsid sh -c 'sleep 1000' & \
             (while :; do sh -c 'sleep 5' & sleep 0.001; done) & \
             sleep 0.2; \
             sh -c '{}'; echo rc=$?; \
             sleep 0.1; n=0; for d in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n",
            command(LeftoverPolicy::Kill, 0, 0).replace('\'', "'\\''")
        );
        let out = std::process::Command::new("bwrap")
            .args(["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"])
            .args(["--unshare-pid", "--die-with-parent", "sh", "-c", &inner])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("rc=0"), "{text} {out:?}");
        let killed: u32 = text
            .lines()
            .find_map(|l| l.strip_prefix("killed "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap();
        assert!(killed >= 4, "{text}");
        // Left: bwrap (1) and the outer sh, which is the oldest child of PID 1 here.
        assert!(text.contains("procs=2"), "{text}");
    }

    /// Runs `setup` then the keep-servers hand-over in a fresh pid and network namespace;
    /// returns its output and how long the hand-over took.
    fn keep_servers_in_namespace(setup: &str) -> (String, std::time::Duration) {
        keep_servers_within(setup, START_WINDOW_SECS)
    }

    /// [`keep_servers_in_namespace`] with a start window of `secs`.
    fn keep_servers_within(setup: &str, secs: u32) -> (String, std::time::Duration) {
        let cmd = command(LeftoverPolicy::KeepServers, 0, secs);
        let inner = format!(
            "{setup} sleep 0.1; t0=$(date +%s%N); sh -c '{}'; echo rc=$?; \
             echo ms=$(( ($(date +%s%N) - t0) / 1000000 ))",
            cmd.replace('\'', "'\\''")
        );
        let out = std::process::Command::new("bwrap")
            .args(["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"])
            .args(["--unshare-pid", "--unshare-net", "--die-with-parent"])
            .args(["sh", "-c", &inner])
            .env(
                "PYSERVER",
                "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1', 4711))\n\
                 s.listen()\ntime.sleep(100)\n",
            )
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let ms: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("ms="))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(u64::MAX);
        (text, std::time::Duration::from_millis(ms))
    }

    /// A server that binds its port a second after the agent ended is kept (it was starting);
    /// an idle leftover beside it is killed; with only idle leftovers the wait is short.
    #[test]
    fn a_server_still_starting_is_kept() {
        if !crate::local::LocalBackend::bubblewrap_available()
            || std::process::Command::new("python3")
                .arg("-V")
                .output()
                .is_err()
        {
            eprintln!("skipped: bubblewrap or python3 unavailable");
            return;
        }
        let server = "setsid sh -c 'sleep 1; exec python3 -c \"$PYSERVER\"' >/dev/null 2>&1 & \
             sleep 1000 & ";
        let (text, took) = keep_servers_in_namespace(server);
        assert!(text.contains("rc=0"), "{text}");
        let h = parse(&text).expect(&text);
        assert_eq!(h.kept.len(), 1, "{text}");
        assert_eq!(h.kept[0].ports, vec![4711], "{text}");
        assert!(h.killed >= 1, "{text}");
        assert!(took < std::time::Duration::from_secs(20), "{took:?}");
        // Only an idle leftover: killed after the short minimum wait, not the cap.
        let (text, took) = keep_servers_in_namespace("sleep 1000 & ");
        let h = parse(&text).expect(&text);
        assert!(h.kept.is_empty() && h.killed == 1, "{text}");
        assert!(took < std::time::Duration::from_secs(6), "{took:?} {text}");
        // Nothing left: no wait at all.
        let (text, took) = keep_servers_in_namespace("");
        assert_eq!(parse(&text), Some(HandOver::default()), "{text}");
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
    }

    /// A leftover that stays busy without listening (a writer loop) is waited for until the
    /// start window ends, then killed: the window is the command's third argument.
    #[test]
    fn a_busy_leftover_is_killed_when_the_start_window_ends() {
        let cmd = command(LeftoverPolicy::KeepServers, 2, 3);
        assert!(cmd.starts_with("set -- 2 1 12\n"), "{cmd}");
        assert!(
            command(LeftoverPolicy::Kill, 1, 99_999).starts_with("set -- 1 0 14400\n"),
            "capped at an hour"
        );
        if !crate::local::LocalBackend::bubblewrap_available() {
            eprintln!("skipped: bubblewrap unavailable");
            return;
        }
        let busy = "(while :; do echo x > /dev/null; done) & ";
        let (text, took) = keep_servers_within(busy, 3);
        let h = parse(&text).expect(&text);
        assert!(h.kept.is_empty() && h.killed >= 1, "{text}");
        assert!(
            took >= std::time::Duration::from_millis(2900),
            "{took:?} {text}"
        );
        assert!(took < std::time::Duration::from_secs(10), "{took:?} {text}");
    }
}
