//! The `local` backend's exec server: background processes, concurrent execs with exact
//! environments, and a dead server reported as an error, not a hang.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ahe_sandbox::{Backend, ExecOpts, Sandbox, SandboxError};

use crate::local_support;
use local_support::*;

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
