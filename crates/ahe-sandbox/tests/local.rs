//! Integration tests of the `local` backend (bubblewrap and plain mode).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ahe_sandbox::local::{LocalBackend, LocalSandbox};
use ahe_sandbox::{Backend, ExecOpts, Sandbox, SandboxError, SandboxSpec};

/// The bubblewrap backend, or `None` (with a note) when `bwrap` is not installed.
/// With `CI=true` a missing `bwrap` is a failure.
fn bwrap() -> Option<LocalBackend> {
    let installed = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .any(|d| d.join("bwrap").is_file());
    if !installed {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "bwrap is not installed (required when CI=true)"
        );
        eprintln!("note: bwrap is not installed; skipping bubblewrap tests");
        return None;
    }
    assert!(
        LocalBackend::bubblewrap_available(),
        "bwrap is installed but does not work"
    );
    let b = LocalBackend::bubblewrap();
    assert!(b.isolated());
    Some(b)
}

fn spec(task: &str) -> SandboxSpec {
    SandboxSpec {
        task: task.into(),
        trial_id: "t1".into(),
        run: "test".into(),
        ..Default::default()
    }
}

/// Writes `files` (path -> content) into a fresh temp dir.
fn context(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (p, content) in files {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    dir
}

async fn sh(sb: &dyn Sandbox, cmd: &str) -> ahe_sandbox::ExecOutput {
    sb.exec(cmd, ExecOpts::default()).await.expect("exec")
}

/// Host pids whose argv is exactly `argv`.
fn pids_with_argv(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// Waits up to 3 s for every `sleep <marker>` process to be gone; returns the leftovers.
async fn leftovers(markers: &[&str]) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left: Vec<u32> = markers
            .iter()
            .flat_map(|m| pids_with_argv(&["sleep", m]))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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

#[tokio::test]
async fn background_processes_survive_until_destroy() {
    let Some(b) = bwrap() else { return };
    let sb = b.create_local(&spec("bg")).await.unwrap();
    // Redirected: the exec returns at once.
    let start = Instant::now();
    let out = sh(&sb, "sleep 7331 >/dev/null 2>&1 & echo $! > /tmp/bg.pid").await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(start.elapsed() < Duration::from_millis(400), "{out:?}");
    // Not redirected: the exec ends after a short grace; the writer keeps running (its later
    // output is discarded instead of killing it with SIGPIPE).
    let out = sh(&sb, "echo first; (sleep 1; echo late; exec sleep 7332) &").await;
    assert_eq!(out.stdout, "first\n", "{out:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The next exec gets fresh output pipes (the writer still holds the old ones).
    let start = Instant::now();
    let opts = ExecOpts {
        stdin: Some(b"in".to_vec()),
        ..Default::default()
    };
    let out = sb
        .exec("kill -0 $(cat /tmp/bg.pid) && cat", opts)
        .await
        .unwrap();
    assert_eq!(out.stdout, "in", "{out:?}");
    assert!(start.elapsed() < Duration::from_millis(400), "{out:?}");
    assert_eq!(pids_with_argv(&["sleep", "7331"]).len(), 1);
    assert_eq!(
        pids_with_argv(&["sleep", "7332"]).len(),
        1,
        "late writer died"
    );
    // Every exec's files (`<id>.args`, `.out`...) are gone from the exec dir; what is left
    // is the server script and the FIFOs of its worker(s).
    let left: Vec<String> = std::fs::read_dir(sb.dir().join("exec"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "server.sh" && !n.starts_with('w'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    sb.destroy().await.unwrap();
    assert_eq!(leftovers(&["7331", "7332"]).await, Vec::<u32>::new());
}

#[tokio::test]
async fn concurrent_execs_and_exact_environment() {
    let Some(b) = bwrap() else { return };
    let sb = b.create(&spec("conc")).await.unwrap();
    let start = Instant::now();
    let slow = sh(&*sb, "sleep 1; echo slow");
    let fast = async {
        let out = sh(&*sb, "echo fast").await;
        (out, start.elapsed())
    };
    let (slow, (fast, fast_at)) = tokio::join!(slow, fast);
    assert_eq!(
        (slow.stdout.as_str(), fast.stdout.as_str()),
        ("slow\n", "fast\n")
    );
    assert!(
        fast_at < Duration::from_millis(800),
        "fast exec waited: {fast_at:?}"
    );
    assert!(
        start.elapsed() < Duration::from_millis(1800),
        "{:?}",
        start.elapsed()
    );
    // Many at once (one worker each), with stdin, output and exit codes kept apart.
    let sb: std::sync::Arc<dyn Sandbox> = sb.into();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..8 {
        let sb = sb.clone();
        set.spawn(async move {
            let opts = ExecOpts {
                stdin: Some(format!("in{i}").into_bytes()),
                ..Default::default()
            };
            let cmd = format!("sleep 0.{i}; cat; echo {i} >&2; exit {i}");
            (i, sb.exec(&cmd, opts).await.unwrap())
        });
    }
    while let Some(r) = set.join_next().await {
        let (i, out) = r.unwrap();
        let want = (format!("in{i}"), format!("{i}\n"), Some(i));
        assert_eq!((out.stdout, out.stderr, out.exit_code), want);
    }
    // The command sees exactly the base environment plus the exec's variables, whatever
    // their names (plain names are exported by bash, others go through `env -i`).
    let q = "it's \"quoted\" $HOME\nline";
    for (extra, shlvl) in [
        (("X_1", "x"), "1"),
        (("A.B", "dotted"), "1"),
        (("SHLVL", "7"), "8"),
    ] {
        let opts = ExecOpts {
            env: BTreeMap::from([(extra.0.into(), extra.1.into()), ("Q".into(), q.into())]),
            cwd: Some("/tmp".into()),
            ..Default::default()
        };
        let out = sb.exec("env -0; printf '%s' \"$PWD\"", opts).await.unwrap();
        let (env, pwd) = out.stdout.rsplit_once('\0').unwrap();
        let vars: BTreeMap<&str, &str> = env
            .split('\0')
            .map(|kv| kv.split_once('=').unwrap())
            .collect();
        let mut want = vec![
            "HOME", "LANG", "PATH", "PWD", "Q", "SHLVL", "TERM", "_", extra.0,
        ];
        want.sort();
        want.dedup();
        assert_eq!(vars.keys().copied().collect::<Vec<_>>(), want, "{vars:?}");
        assert_eq!((vars["Q"], vars["SHLVL"], pwd), (q, shlvl, "/tmp"));
        if extra.0 != "SHLVL" {
            assert_eq!(vars[extra.0], extra.1);
        }
    }
}

#[tokio::test]
async fn dead_exec_server_is_an_error_not_a_hang() {
    let Some(b) = bwrap() else { return };
    let sb = b.create(&spec("dead")).await.unwrap();
    // The exec's parent is its worker, whose parent is the server. SIGTERM/SIGINT/SIGHUP
    // (`pkill bash`) do not break them, and the command itself gets default dispositions.
    let server = "$(cut -d' ' -f4 /proc/$PPID/stat)";
    let term = format!("kill -TERM $PPID {server}; kill -INT $PPID {server}; kill -HUP {server}");
    assert_eq!(sh(&*sb, &term).await.exit_code, Some(0));
    let out = sh(
        &*sb,
        "grep SigIgn /proc/self/status; kill -TERM $$; echo survived",
    )
    .await;
    let ign = u64::from_str_radix(out.stdout.trim().trim_start_matches("SigIgn:").trim(), 16);
    assert_eq!(
        ign.unwrap() & 0x4007,
        0,
        "HUP, INT, QUIT or TERM ignored: {out:?}"
    );
    assert_eq!(out.exit_code, Some(143), "{out:?}");
    // Two workers (concurrent execs), then SIGKILL the idle one's spare (each worker keeps
    // a forked subshell, in its own process group, waiting for the next exec): later execs
    // on both workers are not confused by the spare's exit report.
    let (a, b) = tokio::join!(sh(&*sb, "sleep 0.3; echo a"), sh(&*sb, "echo b"));
    assert_eq!((a.stdout.as_str(), b.stdout.as_str()), ("a\n", "b\n"));
    let spares =
        "ps -eo pid=,pgid=,args= | awk -v me=$$ '$1 == $2 && $1 > 1 && $1 != me && /server.sh/ {print $1}'";
    let out = sh(
        &*sb,
        &format!("s=$({spares}); echo $s | wc -w; kill -KILL $s"),
    )
    .await;
    assert_eq!(
        (out.stdout.as_str(), out.exit_code),
        ("1\n", Some(0)),
        "{out:?}"
    );
    for i in 0..3 {
        let slow = format!("sleep 0.2; echo {i}; exit {i}");
        let (a, b) = tokio::join!(sh(&*sb, &slow), sh(&*sb, "echo b; exit 7"));
        assert_eq!((a.stdout, a.exit_code), (format!("{i}\n"), Some(i)));
        assert_eq!((b.stdout.as_str(), b.exit_code), ("b\n", Some(7)));
    }
    // A killed worker fails its exec (no hang); the next exec gets a new worker.
    let r = tokio::time::timeout(
        Duration::from_secs(4),
        sb.exec("kill -KILL $PPID; sleep 5", ExecOpts::default()),
    )
    .await
    .expect("exec hung after its worker died");
    let msg = r.expect_err("exec must fail").to_string();
    assert!(msg.contains("vanished"), "{msg}");
    assert_eq!(sh(&*sb, "echo ok").await.stdout, "ok\n");
    let kill = format!("kill -KILL {server}; sleep 5");
    let kill = kill.as_str();
    let limit = Duration::from_secs(4);
    let r = tokio::time::timeout(limit, sb.exec(kill, ExecOpts::default()))
        .await
        .expect("exec hung after the server died");
    let msg = r.expect_err("exec must fail").to_string();
    assert!(
        msg.contains("exec server") && msg.contains("exited"),
        "{msg}"
    );
    let r = tokio::time::timeout(limit, sb.exec("true", ExecOpts::default()))
        .await
        .expect("exec hung after the server died");
    assert!(matches!(r, Err(SandboxError::Backend(_))), "{r:?}");
    sb.destroy().await.unwrap();
}

use std::os::unix::fs::PermissionsExt;
