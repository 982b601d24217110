//! Integration tests of the `local` backend (bubblewrap and plain mode).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ahe_sandbox::local::{LocalBackend, LocalSandbox};
use ahe_sandbox::{Backend, ExecOpts, Sandbox, SandboxError};

use crate::local_support;
use local_support::*;

use std::os::unix::fs::PermissionsExt;

#[tokio::test]
async fn no_network_inside() {
    let Some(b) = bwrap() else { return };
    let sb = b.create(&spec("net")).await.unwrap();
    let out = sh(&*sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await;
    assert_eq!(out.stdout.trim(), "lo", "interfaces: {out:?}");
    let py = "python3 -c \"import socket; s=socket.socket(); s.settimeout(2); \
              s.connect(('1.1.1.1', 53))\"";
    let out = sh(&*sb, py).await;
    assert_ne!(out.exit_code, Some(0), "connect must fail: {out:?}");
    sb.destroy().await.unwrap();

    // allow_internet shares the host's network namespace.
    let mut s = spec("net-on");
    s.allow_internet = true;
    let sb = b.create(&s).await.unwrap();
    let out = sh(&*sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await;
    // (Compared as sets: other processes may add interfaces, e.g. docker veths, meanwhile.)
    let host = std::fs::read_to_string("/proc/net/dev").unwrap();
    let host: Vec<&str> = host
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .collect();
    let inside: Vec<&str> = out.stdout.lines().collect();
    assert!(inside.len() > 1, "{out:?}");
    assert!(
        inside.iter().all(|i| host.iter().any(|h| h.trim() == *i)),
        "{inside:?} vs {host:?}"
    );
}

#[tokio::test]
async fn writes_outside_writable_dirs_fail() {
    let Some(b) = bwrap() else { return };
    let sb = b.create(&spec("ro")).await.unwrap();
    for p in [
        "/etc/ahe-x",
        "/usr/ahe-x",
        "/opt/ahe-x",
        "/var/ahe-x",
        "/ahe-newtop",
    ] {
        let out = sh(&*sb, &format!("touch {p}")).await;
        assert_ne!(out.exit_code, Some(0), "touch {p} must fail: {out:?}");
        assert!(!Path::new(p).exists(), "{p} leaked to the host");
    }
    let out = sh(
        &*sb,
        "echo hi > /app/a.txt && echo 1 > /logs/verifier/reward.txt",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let host = tempfile::tempdir().unwrap();
    sb.get("/app/a.txt", &host.path().join("a.txt"))
        .await
        .unwrap();
    sb.get("/logs/verifier", &host.path().join("v"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(host.path().join("a.txt")).unwrap(),
        "hi\n"
    );
    assert_eq!(
        std::fs::read_to_string(host.path().join("v/reward.txt")).unwrap(),
        "1\n"
    );
    // The host's /root, /home, /work and /run are not visible.
    let out = sh(&*sb, "ls /root; ls -d /home /work /run 2>&1; true").await;
    assert!(
        out.stdout.trim().is_empty() || !out.stdout.contains(".cargo"),
        "{out:?}"
    );
    assert!(out.stdout.contains("No such file"), "{out:?}");
}

async fn check_timeout_kills_tree(b: &LocalBackend, markers: [&str; 3]) {
    let sb = b.create(&spec("timeout")).await.unwrap();
    let [a, c, d] = markers;
    let opts = ExecOpts {
        timeout: Some(Duration::from_secs(1)),
        ..Default::default()
    };
    let start = Instant::now();
    let out = sb
        .exec(&format!("sleep {a} & (sleep {c} &) ; sleep {d}"), opts)
        .await
        .unwrap();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(
        leftovers(&markers).await,
        Vec::<u32>::new(),
        "processes survived the timeout"
    );
    // The sandbox still works after a timeout.
    assert_eq!(sh(&*sb, "echo ok").await.stdout, "ok\n");
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn timeout_kills_every_process_bubblewrap() {
    let Some(b) = bwrap() else { return };
    check_timeout_kills_tree(&b, ["7301", "7302", "7303"]).await;
}

#[tokio::test]
async fn timeout_kills_every_process_plain() {
    check_timeout_kills_tree(&LocalBackend::plain(), ["7311", "7312", "7313"]).await;
}

#[tokio::test]
async fn cancelled_exec_kills_its_processes() {
    let Some(b) = bwrap() else { return };
    for (backend, m) in [(b, "7321"), (LocalBackend::plain(), "7322")] {
        let sb = backend.create(&spec("cancel")).await.unwrap();
        let cmd = format!("sleep {m}");
        let fut = sb.exec(&cmd, ExecOpts::default());
        let r = tokio::time::timeout(Duration::from_millis(500), fut).await;
        assert!(r.is_err(), "exec should still be running");
        assert_eq!(
            leftovers(&[m]).await,
            Vec::<u32>::new(),
            "cancelled exec left processes"
        );
    }
}

#[tokio::test]
async fn dockerfile_setup_workdir_env_copy_run() {
    let Some(b) = bwrap() else { return };
    let ctx = context(&[
        (
            "Dockerfile",
            "FROM ubuntu:24.04\nARG GREETING=hello\nWORKDIR /app\n\
             ENV MYVAR=\"some value\" OTHER=$GREETING\nCOPY data.txt ./\nCOPY dir/ /workspace/dir/\n\
             RUN echo \"$GREETING from run in $(pwd)\" > /app/run.txt && test \"$MYVAR\" = \"some value\"\n\
             WORKDIR /workspace\nCMD [\"bash\"]\nCOPY *.md /workspace/docs/\nADD pack.tar.gz unpacked/\n",
        ),
        ("a.md", "A"),
        ("b.md", "B"),
        ("packed/inner.txt", "inside tar\n"),
        ("data.txt", "DATA\n"),
        ("dir/sub/f.txt", "nested\n"),
        ("dir/run.sh", "#!/bin/sh\necho ran\n"),
    ]);
    let st = std::process::Command::new("tar")
        .args(["-czf", "pack.tar.gz", "-C", "packed", "."])
        .current_dir(ctx.path())
        .status()
        .unwrap();
    assert!(st.success());
    let mode = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(ctx.path().join("dir/run.sh"), mode).unwrap();
    let mut s = spec("setup");
    s.context_dir = Some(ctx.path().to_path_buf());
    s.env = BTreeMap::from([("SPEC_VAR".into(), "spec".into())]);
    let sb = b.create(&s).await.unwrap();
    assert_eq!(sb.workdir(), "/workspace");
    let out = sh(
        &*sb,
        "pwd; echo \"$MYVAR|$OTHER|$SPEC_VAR|${GREETING:-unset}\"",
    )
    .await;
    assert_eq!(
        out.stdout, "/workspace\nsome value|hello|spec|unset\n",
        "{out:?}"
    );
    let out = sh(
        &*sb,
        "cat /app/data.txt /workspace/dir/sub/f.txt /app/run.txt; ./dir/run.sh",
    )
    .await;
    assert_eq!(
        out.stdout, "DATA\nnested\nhello from run in /app\nran\n",
        "{out:?}"
    );
    let out = sh(&*sb, "cat docs/a.md docs/b.md unpacked/inner.txt").await;
    assert_eq!(out.stdout, "ABinside tar\n", "{out:?}");
    // Files persist between execs; opts.env and opts.cwd apply.
    sh(&*sb, "echo kept > /app/state").await;
    let opts = ExecOpts {
        cwd: Some("/app".into()),
        env: BTreeMap::from([("MYVAR".into(), "override".into())]),
        ..Default::default()
    };
    let out = sb.exec("cat state; echo $MYVAR; pwd", opts).await.unwrap();
    assert_eq!(out.stdout, "kept\noverride\n/app\n");
    let bad = ExecOpts {
        cwd: Some("/nonexistent".into()),
        ..Default::default()
    };
    assert!(matches!(
        sb.exec("true", bad).await,
        Err(SandboxError::Backend(_))
    ));
    let bad = ExecOpts {
        env: BTreeMap::from([("A=B".into(), "x".into())]),
        ..Default::default()
    };
    let r = sb.exec("true", bad).await;
    assert!(matches!(r, Err(SandboxError::Backend(_))), "{r:?}");
}

#[tokio::test]
async fn failing_run_step_is_a_setup_error_naming_the_line() {
    let Some(b) = bwrap() else { return };
    let ctx = context(&[(
        "Dockerfile",
        "FROM x\nWORKDIR /app\n# comment\nRUN echo some-output; echo oops >&2; exit 3\n",
    )]);
    let mut s = spec("failing-run-unique");
    s.context_dir = Some(ctx.path().to_path_buf());
    let err = b.create(&s).await.err().expect("setup must fail");
    let msg = err.to_string();
    assert!(matches!(err, SandboxError::Setup(_)), "{msg}");
    assert!(msg.contains("Dockerfile:4: RUN"), "{msg}");
    assert!(
        msg.contains("code 3") && msg.contains("some-output") && msg.contains("oops"),
        "{msg}"
    );
    // The trial dir was cleaned up.
    let left = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("ahe-local-failing-run-unique-")
        });
    assert!(!left, "trial dir left behind");
}

#[tokio::test]
async fn copy_into_host_read_only_dir_is_refused() {
    let ctx = context(&[
        ("Dockerfile", "FROM x\nCOPY tool /usr/local/bin/\n"),
        ("tool", "x"),
    ]);
    let mut s = spec("copy-ro");
    s.context_dir = Some(ctx.path().to_path_buf());
    let msg = LocalBackend::plain()
        .create(&s)
        .await
        .err()
        .expect("must fail")
        .to_string();
    assert!(
        msg.contains("Dockerfile:2: COPY") && msg.contains("docker backend"),
        "{msg}"
    );
}

#[tokio::test]
async fn stdin_and_exit_codes() {
    let Some(b) = bwrap() else { return };
    let sb = b.create(&spec("io")).await.unwrap();
    let opts = ExecOpts {
        stdin: Some(b"from stdin".to_vec()),
        ..Default::default()
    };
    let out = sb.exec("cat; echo err >&2; exit 7", opts).await.unwrap();
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("from stdin", "err\n")
    );
    assert_eq!(out.exit_code, Some(7));
    assert!(!out.timed_out);
    assert_eq!(sh(&*sb, "true").await.exit_code, Some(0));
    // No stdin: reading gets EOF immediately.
    assert_eq!(sh(&*sb, "cat").await.stdout, "");
    // A long command, then a short one (the worker's args file is overwritten in place).
    let long = format!("echo {} two three", "x".repeat(20_000));
    assert_eq!(sh(&*sb, &long).await.stdout.len(), 20_011);
    let out = sh(&*sb, "echo \"$0|$#\"").await;
    assert!(out.stdout.ends_with("bash|0\n"), "{out:?}");
    let r = sb.exec("echo a\0b", ExecOpts::default()).await;
    assert!(matches!(r, Err(SandboxError::Backend(_))), "{r:?}");
}

#[tokio::test]
async fn output_is_capped() {
    let mut backends = vec![LocalBackend::plain()];
    backends.extend(bwrap());
    for b in backends {
        let sb = b.create(&spec("cap")).await.unwrap();
        let out = sh(&*sb, "head -c 9000000 /dev/zero | tr '\\0' a; echo e >&2").await;
        assert!(out.stdout.starts_with("aaaa"));
        assert!(out.stdout.len() < 8_500_000, "{}", out.stdout.len());
        assert!(out
            .stdout
            .contains("ahe: 611392 more bytes of stdout dropped"));
        assert_eq!((out.stderr.as_str(), out.exit_code), ("e\n", Some(0)));
    }
}

#[tokio::test]
async fn put_and_get_files_and_dirs() {
    let Some(b) = bwrap() else { return };
    let sb = b.create_local(&spec("putget")).await.unwrap();
    let src = context(&[
        ("tests/test.sh", "echo t\n"),
        ("tests/sub/x", "X"),
        ("one.txt", "1"),
    ]);
    sb.put(&src.path().join("tests"), "/tests").await.unwrap();
    sb.put(&src.path().join("one.txt"), "/app/").await.unwrap();
    sb.put(&src.path().join("one.txt"), "/app/new/renamed.txt")
        .await
        .unwrap();
    let out = sh(
        &sb,
        "cat /tests/sub/x /app/one.txt /app/new/renamed.txt; bash /tests/test.sh",
    )
    .await;
    assert_eq!(out.stdout, "X11t\n", "{out:?}");

    sh(&sb, "mkdir -p /logs/verifier/d && echo 0.5 > /logs/verifier/reward.txt && echo n > /logs/verifier/d/n").await;
    let host = tempfile::tempdir().unwrap();
    sb.get("/logs/verifier", &host.path().join("out"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(host.path().join("out/reward.txt")).unwrap(),
        "0.5\n"
    );
    assert_eq!(
        std::fs::read_to_string(host.path().join("out/d/n")).unwrap(),
        "n\n"
    );
    sb.get("/app/one.txt", host.path()).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(host.path().join("one.txt")).unwrap(),
        "1"
    );
    // A host read-only path can be read.
    sb.get("/etc/hostname", &host.path().join("hn"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(host.path().join("hn")).unwrap(),
        std::fs::read("/etc/hostname").unwrap()
    );

    // Paths outside the writable dirs, `..` escapes and symlink escapes are refused.
    let f = src.path().join("one.txt");
    assert!(sb.put(&f, "/etc/ahe-evil").await.is_err());
    assert!(sb.put(&f, "/app/../etc/ahe-evil").await.is_err());
    assert!(sb.put(&f, "relative").await.is_err());
    assert!(sb.get("/proc/1/environ", host.path()).await.is_err());
    assert!(sb.get("/app/missing", host.path()).await.is_err());
    sh(
        &sb,
        "ln -s /etc /app/etclink && ln -s /tests/sub/x /app/abs",
    )
    .await;
    assert!(sb.put(&f, "/app/etclink/ahe-evil").await.is_err());
    assert!(!Path::new("/etc/ahe-evil").exists());
    // Links are reported, never followed (inside or on the host).
    let got = sb.get("/app/abs", &host.path().join("abs")).await.unwrap();
    assert_eq!(
        got.skipped,
        ["/app/abs: symlink to /tests/sub/x (not copied)"]
    );
    assert!(std::fs::symlink_metadata(host.path().join("abs")).is_err());
    let got = sb
        .get("/app/etclink/hostname", &host.path().join("h2"))
        .await
        .unwrap();
    assert_eq!(got.skipped, ["/app/etclink: symlink (not followed)"]);
    assert_eq!(
        sb.host_path("/app/one.txt"),
        Some(sb.dir().join("fs/app/one.txt"))
    );
}

#[tokio::test]
async fn destroy_removes_the_temp_dir() {
    let Some(b) = bwrap() else { return };
    let sb = b.create_local(&spec("destroy")).await.unwrap();
    let dir: PathBuf = sb.dir().to_path_buf();
    assert!(dir.join("fs/logs/agent").is_dir() && dir.join("fs/logs/verifier").is_dir());
    sb.destroy().await.unwrap();
    assert!(!dir.exists());
    sb.destroy().await.unwrap(); // idempotent
    assert!(sb.exec("true", ExecOpts::default()).await.is_err());

    let sb = b.create_local(&spec("drop")).await.unwrap();
    let dir = sb.dir().to_path_buf();
    sh(&sb, "mkdir -p /tmp/locked/x && chmod 000 /tmp/locked").await;
    drop(sb);
    assert!(!dir.exists(), "Drop must remove the temp dir");
}

#[tokio::test]
async fn plain_mode_maps_cwd_and_home() {
    let b = LocalBackend::plain();
    assert!(!b.isolated());
    let sb: LocalSandbox = b.create_local(&spec("plain")).await.unwrap();
    let out = sh(&sb, "pwd; echo $HOME; echo hi > f").await;
    let app = sb.host_path("/app").unwrap();
    let root = sb.host_path("/root").unwrap();
    assert_eq!(
        out.stdout,
        format!("{}\n{}\n", app.display(), root.display())
    );
    let host = tempfile::tempdir().unwrap();
    sb.get("/app/f", &host.path().join("f")).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(host.path().join("f")).unwrap(),
        "hi\n"
    );
}

#[tokio::test]
async fn memory_limit_via_cgroup_v1() {
    let Some(b) = bwrap() else { return };
    if std::fs::create_dir_all("/sys/fs/cgroup/memory/ahe").is_err() {
        eprintln!("note: cgroup v1 memory controller not writable; skipping");
        return;
    }
    let mut s = spec("mem");
    s.memory_mb = Some(64);
    let sb = b.create_local(&s).await.unwrap();
    assert!(sb.limits_enforced());
    let py = "python3 -c 'b = bytearray(300 * 1024 * 1024); print(len(b))'";
    let out = sh(&sb, py).await;
    assert_ne!(
        out.exit_code,
        Some(0),
        "300 MB must not fit in 64 MB: {out:?}"
    );
    let out = sh(
        &sb,
        "python3 -c 'b = bytearray(8 * 1024 * 1024); print(len(b))'",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
}

/// The shared TB2 sample dir, or `None` (with a note).
fn sample(task: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/tb2-sample")
        .join(task);
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("note: {} is absent; skipping", dir.display());
        None
    }
}

#[tokio::test]
async fn tb2_sample_environments_set_up() {
    let Some(b) = bwrap() else { return };
    let Some(task) = sample("log-summary-date-ranges") else {
        return;
    };
    let mut s = spec("log-summary-date-ranges");
    s.context_dir = Some(task.join("environment"));
    let sb = b.create(&s).await.unwrap();
    assert_eq!(sb.workdir(), "/app");
    let out = sh(
        &*sb,
        "ls /app/logs | wc -l; test -e /app/log_generator_deterministic.py; echo $?",
    )
    .await;
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].parse::<u32>().unwrap() > 10, "{out:?}");
    assert_eq!(lines[1], "1", "generator was removed by the last RUN");

    let Some(task) = sample("sqlite-db-truncate") else {
        return;
    };
    let mut s = spec("sqlite-db-truncate");
    s.context_dir = Some(task.join("environment"));
    let sb = b.create(&s).await.unwrap();
    let out = sh(&*sb, "stat -c %s /app/trunc.db").await;
    let size = std::fs::metadata(task.join("environment/trunc.db"))
        .unwrap()
        .len();
    assert_eq!(out.stdout.trim(), size.to_string());
}
