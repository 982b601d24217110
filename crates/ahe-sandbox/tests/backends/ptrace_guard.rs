//! The ptrace guard (`ptrace_guard`) on the docker and local backends: the agent's commands
//! lack the capability ahe's commands hold after the seal, so a server the hand-over keeps
//! cannot attach to the verifier's processes (EPERM) while it can attach to another server
//! of the agent's (the control: the same code attaches there); on docker a listening process
//! that holds the capability (started outside the agent's shell) is not kept.

use std::time::Duration;

use ahe_sandbox::{Backend, KeptProcess, LeftoverPolicy, Sandbox};

use crate::docker_support::{self, backend};
use crate::local_support;

/// A server the agent leaves (kept: it listens) that, once `/tmp/target` names a pid, tries
/// `PTRACE_ATTACH` on it and writes the errno to `/tmp/result` (0: attached).
const TRACER: &str = r#"nohup python3 -c '
import ctypes, os, socket, time
libc = ctypes.CDLL(None, use_errno=True)
s = socket.socket(); s.bind(("127.0.0.1", 5329)); s.listen()
while not os.path.exists("/tmp/target"):
    time.sleep(0.01)
time.sleep(0.1)
pid = int(open("/tmp/target").read())
r = libc.ptrace(16, pid, None, None)
open("/tmp/result.new", "w").write(str(0 if r == 0 else ctypes.get_errno()))
os.rename("/tmp/result.new", "/tmp/result")
time.sleep(1000)' >/dev/null 2>&1 &
for i in $(seq 50); do (echo > /dev/tcp/127.0.0.1/5329) 2>/dev/null && break; sleep 0.1; done; echo started"#;

/// Bit 35 (`CAP_WAKE_ALARM`) of the calling process's bounding set.
const HAS_CAP: &str = "while read -r k v; do [ \"$k\" = CapBnd: ] && echo $(( (0x$v >> 35) & 1 )); done < /proc/self/status";

/// One sandbox: the tracer, (on docker) a listener holding the capability, the seal, the
/// hand-over, then the tracer's attach on a verifier process (`attack_verifier`) or on a
/// server of the agent's. Returns the errno the tracer got.
async fn attack(sb: &dyn Sandbox, attack_verifier: bool, direct_listener: bool) -> String {
    let sh = |c: &'static str| async move { sb.exec(c, Default::default()).await.unwrap() };
    assert_eq!(
        sh(HAS_CAP).await.stdout,
        "0\n",
        "the agent's shell holds the capability"
    );
    assert_eq!(sh(TRACER).await.stdout, "started\n");
    if direct_listener {
        let listener = "setsid nohup python3 -c 'import socket,time; s=socket.socket(); \
             s.bind((\"127.0.0.1\", 5330)); s.listen(); time.sleep(1000)' >/dev/null 2>&1 & \
             sleep 0.5";
        let argv = ["/bin/sh", "-c", listener].map(String::from);
        let direct = sb.exec_argv(&argv, Default::default()).await.unwrap();
        assert_eq!(direct.exit_code, Some(0), "{direct:?}");
    }
    if !attack_verifier {
        sh("nohup python3 -c 'import socket,time; s=socket.socket(); \
            s.bind((\"127.0.0.1\", 5331)); s.listen(); time.sleep(1000)' >/dev/null 2>&1 & \
            echo $! > /tmp/target.agent; sleep 0.5")
        .await;
    }
    sb.seal();
    assert_eq!(
        sh(HAS_CAP).await.stdout,
        "1\n",
        "after the seal ahe's commands hold it"
    );
    let h = sb
        .end_leftovers(LeftoverPolicy::KeepServers, 2)
        .await
        .unwrap();
    let ports = |v: &[KeptProcess]| {
        let mut p: Vec<u16> = v.iter().map(|k| k.ports[0]).collect();
        p.sort();
        p
    };
    let kept: &[u16] = if attack_verifier {
        &[5329]
    } else {
        &[5329, 5331]
    };
    assert_eq!(ports(&h.kept), kept, "{h:?}");
    let unguarded: &[u16] = if direct_listener { &[5330] } else { &[] };
    assert_eq!(ports(&h.unguarded), unguarded, "{h:?}");
    let target = match attack_verifier {
        true => "sleep 300 >/dev/null 2>&1 & echo $! > /tmp/target",
        false => "mv /tmp/target.agent /tmp/target",
    };
    let wait =
        "for i in $(seq 100); do [ -f /tmp/result ] && break; sleep 0.05; done; cat /tmp/result";
    let out = sb
        .exec(&format!("{target}; {wait}"), Default::default())
        .await
        .unwrap();
    out.stdout
}

#[tokio::test]
async fn a_kept_server_cannot_ptrace_the_verifier_on_docker() {
    let Some(b) = backend() else { return };
    let ctx = docker_support::base_context();
    for (attack_verifier, errno) in [(true, "1"), (false, "0")] {
        let sb = b
            .create(&docker_support::spec("ptrace-guard", ctx.path()))
            .await
            .unwrap();
        let got = attack(sb.as_ref(), attack_verifier, true).await;
        assert_eq!(
            got, errno,
            "PTRACE_ATTACH's errno (on the verifier: {attack_verifier})"
        );
        sb.destroy().await.unwrap();
    }
}

#[tokio::test]
async fn a_kept_server_cannot_ptrace_the_verifier_on_local() {
    let Some(b) = local_support::bwrap() else {
        return;
    };
    for (attack_verifier, errno) in [(true, "1"), (false, "0")] {
        let sb = b
            .create_local(&local_support::spec("ptrace-guard"))
            .await
            .unwrap();
        let got =
            tokio::time::timeout(Duration::from_secs(60), attack(&sb, attack_verifier, false));
        let got = got.await.expect("in time");
        assert_eq!(
            got, errno,
            "PTRACE_ATTACH's errno (on the verifier: {attack_verifier})"
        );
        sb.destroy().await.unwrap();
    }
}
