//! Containment of the `local` backend against a hostile command (issue 16/17 probes): no
//! host-root power, no host file disclosed through a link, no process left for the verifier.

use std::path::Path;
use std::time::Duration;

use ahe_sandbox::local::LocalBackend;
use ahe_sandbox::{ExecOpts, LeftoverPolicy, Sandbox, SandboxSpec};

/// The bubblewrap backend when this test runs as root with bubblewrap (the case the probe
/// broke); `None` with a note otherwise (`CI=true` requires it).
fn rooted_bwrap() -> Option<LocalBackend> {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ok = root && LocalBackend::bubblewrap_available();
    if !ok {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI runs as root with bubblewrap"
        );
        eprintln!("note: not root or no bubblewrap; skipping");
        return None;
    }
    Some(LocalBackend::bubblewrap())
}

fn spec(task: &str) -> SandboxSpec {
    SandboxSpec {
        task: task.into(),
        trial_id: "c1".into(),
        run: "containment".into(),
        ..Default::default()
    }
}

async fn sh(sb: &dyn Sandbox, cmd: &str) -> ahe_sandbox::ExecOutput {
    sb.exec(cmd, ExecOpts::default()).await.expect("exec")
}

/// A host file only root may read, in a host dir the sandbox sees read-only.
struct Canary(std::path::PathBuf);

impl Canary {
    fn new(content: &str) -> Canary {
        use std::os::unix::fs::PermissionsExt;
        let p = std::path::PathBuf::from(format!(
            "/var/tmp/ahe-canary-{}-{:x}",
            std::process::id(),
            rand_u64()
        ));
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        Canary(p)
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn rand_u64() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[tokio::test]
async fn root_inside_is_nobody_on_the_host() {
    let Some(b) = rooted_bwrap() else { return };
    let uid = b
        .sandbox_uid()
        .expect("root runs sandboxes as an unprivileged uid");
    assert_ne!(uid, 0);
    let sb = b.create_local(&spec("rootprobe")).await.unwrap();
    let probe = format!("/var/cache/ahe-probe-{}", std::process::id());
    // A duration no other process on the host uses (a fresh-machine run failed on another
    // process's `sleep 300` owned by root; issue 42).
    let nap = format!("300.{}", std::process::id());
    let out = sh(
        &sb,
        &format!(
            "id -u; grep CapEff /proc/self/status; \
             mount -o remount,rw,bind /var 2>/dev/null && echo remounted; \
             echo x > {probe} 2>/dev/null && echo wrote; \
             cat /etc/shadow >/dev/null 2>&1 && echo shadow; \
             echo ok > /app/mine && cat /app/mine; \
             sleep {nap} & echo bg"
        ),
    )
    .await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "0", "root-looking inside: {out:?}");
    assert_eq!(lines[1].split_whitespace().nth(1), Some("0000000000000000"));
    assert!(!out.stdout.contains("remounted"), "{out:?}");
    assert!(!out.stdout.contains("wrote"), "{out:?}");
    assert!(!out.stdout.contains("shadow"), "{out:?}");
    assert!(
        out.stdout.contains("ok\nbg"),
        "own files stay writable: {out:?}"
    );
    assert!(!Path::new(&probe).exists(), "wrote to the host");
    // The background process is the unprivileged uid on the host.
    let owners: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c == format!("sleep\x00{nap}\x00").as_bytes())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|s| s.lines().find(|l| l.starts_with("Uid:")).map(String::from))
        .collect();
    assert!(!owners.is_empty());
    for o in owners {
        assert_eq!(
            o.split_whitespace().nth(1),
            Some(uid.to_string().as_str()),
            "{o}"
        );
    }
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn copy_out_never_follows_links_nor_blocks_on_fifos() {
    let Some(b) = rooted_bwrap() else { return };
    let canary = Canary::new("host-secret-canary");
    let sb = b.create_local(&spec("linkprobe")).await.unwrap();
    let out = sh(
        &sb,
        &format!(
            "ln -s {} /logs/verifier/reward.txt && mkfifo /logs/verifier/pipe && \
             echo 1 > /logs/verifier/real.txt && ln -s /etc /logs/verifier/etc && echo ok",
            canary.0.display()
        ),
    )
    .await;
    assert_eq!(out.stdout, "ok\n", "{out:?}");
    let host = tempfile::tempdir().unwrap();
    let dest = host.path().join("v");
    let got = tokio::time::timeout(Duration::from_secs(10), sb.get("/logs/verifier", &dest))
        .await
        .expect("get must not block on a FIFO")
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dest.join("real.txt")).unwrap(),
        "1\n"
    );
    for name in ["reward.txt", "pipe", "etc"] {
        assert!(
            std::fs::symlink_metadata(dest.join(name)).is_err(),
            "{name} copied"
        );
    }
    let mut skipped = got.skipped.clone();
    skipped.sort();
    assert_eq!(skipped.len(), 3, "{skipped:?}");
    assert!(skipped[0].starts_with("/logs/verifier/etc: symlink to /etc"));
    assert!(skipped[1].starts_with("/logs/verifier/pipe: FIFO"));
    assert!(skipped[2].starts_with(&format!(
        "/logs/verifier/reward.txt: symlink to {}",
        canary.0.display()
    )));
    // The host file was not read anywhere.
    for entry in walkdir(host.path()) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(!text.contains("host-secret-canary"), "{}", entry.display());
    }
    sb.destroy().await.unwrap();
}

fn walkdir(p: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap().flatten() {
        let path = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(walkdir(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Counts the processes in the sandbox other than the exec server's (`sleep`s and loops).
async fn agent_processes(sb: &dyn Sandbox) -> usize {
    let out = sh(
        sb,
        "n=0; for d in /proc/[0-9]*; do read -r c < $d/comm 2>/dev/null || continue; \
         read -r st < $d/stat 2>/dev/null || continue; case \"${st##*) }\" in Z*) continue;; esac; \
         case $c in sleep|python3|sh) n=$((n+1));; esac; done; echo $n",
    )
    .await;
    out.stdout.trim().parse().unwrap()
}

#[tokio::test]
async fn hand_over_ends_leftovers_but_keeps_servers_when_asked() {
    let Some(b) = rooted_bwrap() else { return };
    let start = "nohup sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' \
         >/dev/null 2>&1 & setsid sleep 1000 >/dev/null 2>&1 & \
         nohup python3 -c 'import socket,time; s=socket.socket(); \
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\", 5328)); \
         s.listen(); time.sleep(1000)' >/dev/null 2>&1 & sleep 0.5; echo started";
    for policy in [LeftoverPolicy::KeepServers, LeftoverPolicy::Kill] {
        let sb = b.create_local(&spec("handover")).await.unwrap();
        assert_eq!(sh(&sb, start).await.stdout, "started\n");
        assert!(agent_processes(&sb).await >= 3);
        let h = crate::end_leftovers_in_window(&sb, policy).await;
        let left = agent_processes(&sb).await;
        // The writer is gone: what the verifier writes stays.
        sh(&sb, "echo 0 > /logs/verifier/reward.txt").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let reward = sh(&sb, "cat /logs/verifier/reward.txt").await.stdout;
        assert_eq!(reward, "0\n", "{policy:?}: a leftover rewrote the reward");
        match policy {
            LeftoverPolicy::KeepServers => {
                assert_eq!(h.kept.len(), 1, "{h:?}");
                assert_eq!(h.kept[0].comm, "python3");
                assert_eq!(h.kept[0].ports, [5328]);
                assert_eq!(left, 1, "only the server is left");
            }
            LeftoverPolicy::Kill => {
                assert!(h.kept.is_empty(), "{h:?}");
                assert_eq!(left, 0);
            }
        }
        assert!(h.killed >= 2, "{h:?}");
        // The exec server still serves.
        assert_eq!(sh(&sb, "echo alive").await.stdout, "alive\n");
        sb.destroy().await.unwrap();
    }
}

#[tokio::test]
async fn dockerfile_workdir_and_copy_are_writable_by_the_unprivileged_uid() {
    let Some(b) = rooted_bwrap() else { return };
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM ahe-base:bookworm\nWORKDIR /app/deep/shop\nCOPY data.txt /work/in/data.txt\n\
         RUN git init -q . && echo made > made.txt && cat /work/in/data.txt >> made.txt\n",
    )
    .unwrap();
    std::fs::write(ctx.path().join("data.txt"), "copied\n").unwrap();
    let mut s = spec("workdir");
    s.context_dir = Some(ctx.path().to_path_buf());
    let sb = b.create_local(&s).await.unwrap();
    let out = sh(
        &sb,
        "cat made.txt; echo more >> /work/in/data.txt && echo ok",
    )
    .await;
    assert_eq!(out.stdout, "made\ncopied\nok\n", "{out:?}");
    sb.destroy().await.unwrap();
}
