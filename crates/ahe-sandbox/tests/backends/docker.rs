//! Integration tests of the `docker` backend against a real engine.
//!
//! Without an engine (or without the base image) the tests print a note and pass, except
//! with `CI=true`, where a missing engine or base image is a failure.

use crate::docker_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahe_sandbox::docker::{self, DockerBackend, DockerSandbox};
use ahe_sandbox::{Backend, ExecOpts, Sandbox, SandboxError, SandboxSpec};
use docker_support::*;

#[tokio::test]
async fn exec_exit_codes_env_cwd_and_stdin() {
    let Some(b) = backend() else { return };
    let ctx = base_context();
    let mut s = spec("exec-basics", ctx.path());
    s.env.insert("FROM_SPEC".into(), "spec value".into());
    let sb = b.create_docker(&s).await.unwrap();
    assert_eq!(sb.workdir(), "/app");

    let o = sh(&sb, "echo out; echo err >&2; exit 3").await;
    assert_eq!(o.exit_code, Some(3));
    assert_eq!(o.stdout, "out\n");
    assert_eq!(o.stderr, "err\n");
    assert!(!o.timed_out);
    assert_eq!(sh(&sb, "true").await.exit_code, Some(0));
    assert_eq!(sh(&sb, "pwd").await.stdout, "/app\n");
    assert_eq!(
        sh(&sb, "echo \"$FROM_SPEC|$0\"").await.stdout,
        "spec value|bash\n"
    );

    let mut env = BTreeMap::new();
    env.insert("MY_VAR".to_string(), "a b".to_string());
    let o = sb
        .exec(
            "mkdir -p sub && cd sub && pwd && echo $MY_VAR",
            ExecOpts {
                cwd: Some("/tmp".into()),
                env,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(o.stdout, "/tmp/sub\na b\n");
    let o = sb
        .exec(
            "pwd",
            ExecOpts {
                cwd: Some("/tmp/sub".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(o.stdout, "/tmp/sub\n");

    // stdin: bytes arrive, then EOF; without stdin a reader sees EOF at once.
    let data: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let o = sb
        .exec(
            "wc -c; echo done",
            ExecOpts {
                stdin: Some(data),
                timeout: Some(Duration::from_secs(20)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(o.stdout, "200000\ndone\n");
    let o = sb
        .exec(
            "cat; echo eof",
            ExecOpts {
                timeout: Some(Duration::from_secs(10)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((o.stdout.as_str(), o.timed_out), ("eof\n", false));
    // A command that ignores a large stdin still finishes.
    let o = sb
        .exec(
            "echo ignored",
            ExecOpts {
                stdin: Some(vec![b'z'; 10 << 20]),
                timeout: Some(Duration::from_secs(20)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((o.exit_code, o.stdout.as_str()), (Some(0), "ignored\n"));

    // Output beyond the cap is dropped with a note; the exit code still arrives.
    let o = sh(&sb, "head -c 9000000 /dev/zero | tr '\\0' x; exit 7").await;
    assert_eq!(o.exit_code, Some(7));
    assert!(o.stdout.starts_with("xxxx"));
    assert!(
        o.stdout.contains("more bytes of stdout dropped"),
        "{}",
        &o.stdout[o.stdout.len() - 200..]
    );

    // The logs dirs exist from the start; files persist between execs.
    assert_eq!(
        sh(&sb, "ls -d /logs/verifier /logs/agent").await.exit_code,
        Some(0)
    );
    sh(&sb, "echo keep > /app/state").await;
    assert_eq!(sh(&sb, "cat /app/state").await.stdout, "keep\n");

    sb.destroy().await.unwrap();
    sb.destroy().await.unwrap();
    assert!(sb.exec("true", ExecOpts::default()).await.is_err());
    b.drain().await;
    assert_eq!(b.removals_in_flight(), 0);
    assert!(inspect(sb.id()).is_none());
}

#[tokio::test]
async fn put_get_round_trip() {
    let Some(b) = backend() else { return };
    let ctx = base_context();
    let sb = b.create_docker(&spec("put-get", ctx.path())).await.unwrap();
    let src = context(&[
        ("test.sh", "#!/bin/bash\necho hi\n"),
        ("data/nested/a.txt", "alpha"),
        ("data/b.bin", "beta"),
    ]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        src.path().join("test.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();

    // A dir's contents go into dest (created); an existing dest keeps its mode.
    sb.put(src.path(), "/tests").await.unwrap();
    assert_eq!(sb.fast_execs(), 1, "a small put goes through the keeper");
    let o = sh(
        &sb,
        "/tests/test.sh && cat /tests/data/nested/a.txt && stat -c %a /tests/test.sh",
    )
    .await;
    assert_eq!(o.stdout, "hi\nalpha755\n", "{o:?}");
    sb.put(src.path(), "/tmp").await.unwrap();
    assert_eq!(
        sh(&sb, "stat -c %a /tmp; cat /tmp/data/b.bin").await.stdout,
        "1777\nbeta"
    );

    // A file: into an existing dir, or to a new path (parents created).
    let file = src.path().join("data/b.bin");
    sb.put(&file, "/app").await.unwrap();
    sb.put(&file, "/deep/new/name.bin").await.unwrap();
    sb.put(&file, "rel.bin").await.unwrap();
    let o = sh(&sb, "cat /app/b.bin /deep/new/name.bin /app/rel.bin").await;
    assert_eq!(o.stdout, "betabetabeta");

    // get: a dir's contents into dest; a file to a path or into an existing dir.
    sh(&sb, "mkdir -p /logs/verifier/sub && echo 1 > /logs/verifier/reward.txt && echo s > /logs/verifier/sub/x && ln -s reward.txt /logs/verifier/link").await;
    let out = tempfile::tempdir().unwrap();
    let got = sb
        .get("/logs/verifier", &out.path().join("verifier"))
        .await
        .unwrap();
    let after_get = sb.fast_execs();
    let v = out.path().join("verifier");
    assert_eq!(
        std::fs::read_to_string(v.join("reward.txt")).unwrap(),
        "1\n"
    );
    assert_eq!(std::fs::read_to_string(v.join("sub/x")).unwrap(), "s\n");
    // Links are left out (and named), never recreated on the host.
    assert!(std::fs::symlink_metadata(v.join("link")).is_err());
    assert_eq!(
        got.skipped,
        ["/logs/verifier/link: symlink to reward.txt (not copied)"]
    );
    sb.get("/logs/verifier/reward.txt", &out.path().join("r.txt"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(out.path().join("r.txt")).unwrap(),
        "1\n"
    );
    sb.get("/tests/test.sh", out.path()).await.unwrap();
    let got = out.path().join("test.sh");
    assert_eq!(
        std::fs::read_to_string(&got).unwrap(),
        "#!/bin/bash\necho hi\n"
    );
    assert_eq!(
        std::fs::metadata(&got).unwrap().permissions().mode() & 0o777,
        0o755
    );
    // Round trip of a whole tree.
    sb.get("/tests", &out.path().join("tests")).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(out.path().join("tests/data/nested/a.txt")).unwrap(),
        "alpha"
    );
    assert!(after_get >= 4, "{after_get}");
    let err = sb.get("/nope", &out.path().join("x")).await.unwrap_err();
    assert!(err.to_string().contains("no such file"), "{err}");
    // Larger trees (through the engine's archive API rather than the keeper) too.
    let big = context(&[("big/blob.txt", &"0123456789abcdef".repeat(8 << 10))]);
    sb.put(big.path(), "/big").await.unwrap();
    sb.get("/big", &out.path().join("big")).await.unwrap();
    assert_eq!(
        std::fs::read(out.path().join("big/big/blob.txt"))
            .unwrap()
            .len(),
        128 << 10
    );
    // An empty dir creates dest.
    let empty = tempfile::tempdir().unwrap();
    sb.put(empty.path(), "/made/by/put").await.unwrap();
    assert_eq!(sh(&sb, "test -d /made/by/put").await.exit_code, Some(0));
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn memory_limit_kills_inside_the_container() {
    let Some(b) = backend() else { return };
    let ctx = base_context();
    let mut s = spec("memory", ctx.path());
    s.memory_mb = Some(64);
    s.cpus = Some(1.0);
    let sb = b.create_docker(&s).await.unwrap();
    let info = inspect(sb.id()).unwrap();
    assert_eq!(info["HostConfig"]["Memory"], 64 << 20);
    assert_eq!(info["HostConfig"]["MemorySwap"], 64 << 20);
    assert_eq!(info["HostConfig"]["NanoCpus"], 1_000_000_000i64);
    assert_eq!(info["HostConfig"]["PidsLimit"], docker::PIDS_LIMIT);
    let o = sb
        .exec(
            "python3 -c 'b = bytearray(500 * 1024 * 1024); print(len(b))'",
            ExecOpts {
                timeout: Some(Duration::from_secs(60)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!o.timed_out);
    assert_ne!(o.exit_code, Some(0), "{o:?}");
    assert!(!o.stdout.contains("524288000"), "{o:?}");
    // The container (and this process) survived; the next exec works.
    let o = sh(&sb, "echo alive").await;
    assert_eq!((o.exit_code, o.stdout.as_str()), (Some(0), "alive\n"));
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn timeout_and_cancel_kill_inside_the_container() {
    let Some(b) = backend() else { return };
    let ctx = base_context();
    let sb = b.create_docker(&spec("timeout", ctx.path())).await.unwrap();
    let t0 = Instant::now();
    let o = sb
        .exec(
            "echo started; sleep 1231 & setsid sleep 1232 & (sleep 1233 >/dev/null 2>&1 &); sleep 1234",
            ExecOpts {
                timeout: Some(Duration::from_millis(1500)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(o.timed_out, "{o:?}");
    assert_eq!(o.exit_code, None);
    assert_eq!(o.stdout, "started\n");
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    let ps = sh(&sb, "ps -eo args").await.stdout;
    assert!(!ps.contains("sleep 123"), "{ps}");

    // Dropping the exec future kills its processes too.
    let fut = sb.exec("sleep 2345", ExecOpts::default());
    assert!(tokio::time::timeout(Duration::from_millis(700), fut)
        .await
        .is_err());
    let mut left = String::new();
    for _ in 0..50 {
        left = sh(&sb, "ps -eo args").await.stdout;
        if !left.contains("sleep 2345") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!left.contains("sleep 2345"), "{left}");
    // A background process that redirects its output survives a normal exec.
    sh(&sb, "nohup sleep 3456 >/dev/null 2>&1 &").await;
    assert!(sh(&sb, "ps -eo args").await.stdout.contains("sleep 3456"));
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn shared_dockerfile_is_built_once_and_reused() {
    let Some(b) = backend() else { return };
    let nonce = format!("{:x}", std::process::id() as u64 * 1_000_003 + rand_nanos());
    let dockerfile = format!(
        "FROM ahe-base:bookworm\nWORKDIR /srv/w\nRUN echo {nonce} > /srv/w/nonce && sleep 1\nCOPY f.txt /srv/w/\n"
    );
    let a = context(&[("Dockerfile", &dockerfile), ("f.txt", "same")]);
    let c = context(&[("Dockerfile", &dockerfile), ("f.txt", "same")]);
    let b = Arc::new(b);
    let mut handles = Vec::new();
    for (i, dir) in [a.path(), c.path(), a.path(), c.path()]
        .into_iter()
        .enumerate()
    {
        let (b, s) = (b.clone(), spec(&format!("shared-{i}"), dir));
        handles.push(tokio::spawn(async move { b.create_docker(&s).await }));
    }
    let mut boxes: Vec<DockerSandbox> = Vec::new();
    for h in handles {
        boxes.push(h.await.unwrap().unwrap());
    }
    assert_eq!(b.builds(), 1);
    assert!(boxes.iter().all(|s| s.image() == boxes[0].image()));
    assert_eq!(boxes[0].workdir(), "/srv/w");
    assert_eq!(
        sh(&boxes[3], "cat nonce").await.stdout,
        format!("{nonce}\n")
    );
    for s in &boxes {
        s.destroy().await.unwrap();
    }
    // A new backend (a new run) finds the image by its content hash.
    let again = DockerBackend::connect().unwrap();
    let (id, _) = again
        .image_for(&spec("shared-again", a.path()))
        .await
        .unwrap();
    assert_eq!(id, boxes[0].image());
    assert_eq!(again.builds(), 0);
    // A changed context is a different image.
    let changed = context(&[("Dockerfile", &dockerfile), ("f.txt", "changed")]);
    let (id2, _) = again
        .image_for(&spec("shared-changed", changed.path()))
        .await
        .unwrap();
    assert_ne!(id2, id);
    assert_eq!(again.builds(), 1);
    for img in [id, id2] {
        let _ = std::process::Command::new("docker")
            .args(["image", "rm", "-f", &img])
            .output();
    }
}

fn rand_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
}

#[tokio::test]
async fn image_errors_are_setup_errors() {
    let Some(b) = backend() else { return };
    let bad = context(&[(
        "Dockerfile",
        "FROM ahe-base:bookworm\nRUN echo build-marker-42 && exit 9\n",
    )]);
    let err = b.create_docker(&spec("bad", bad.path())).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, SandboxError::Setup(_)), "{msg}");
    assert!(
        msg.contains("build-marker-42") && msg.contains("build log"),
        "{msg}"
    );

    // The task's build_timeout_sec applies (the build is cut short and says so).
    let slow = context(&[(
        "Dockerfile",
        "FROM ahe-base:bookworm\nRUN sleep 30 # slow-build-marker\n",
    )]);
    let mut s = spec("slow", slow.path());
    s.build_timeout_sec = Some(2.0);
    let t0 = Instant::now();
    let err = b.create_docker(&s).await.unwrap_err();
    assert!(err.to_string().contains("timed out after"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());

    // Under `pull = "never"` a missing base or image is named as unavailable offline.
    let never = b.clone().with_pull(ahe_sandbox::PullPolicy::Never);
    let missing_base = context(&[("Dockerfile", "FROM ahe-nonexistent:v0\n")]);
    let err = never
        .create_docker(&spec("nobase", missing_base.path()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not available offline"), "{err}");
    let s = SandboxSpec {
        task: "noimage".into(),
        docker_image: Some("example.org/never-pulled:1".into()),
        ..Default::default()
    };
    let err = never.create_docker(&s).await.unwrap_err();
    assert!(matches!(err, SandboxError::Setup(_)));
    let msg = err.to_string();
    assert!(
        msg.contains("example.org/never-pulled:1 is not in the local engine")
            && msg.contains("pull = \"never\"")
            && msg.contains("--pull missing"),
        "{msg}"
    );
    assert_eq!(never.pulls(), 0);
    // The default (`missing`) tries the pull (no registry answers here) and says why it failed.
    let err = b.create_docker(&s).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("pulling it failed") && msg.contains("docker pull example.org/never-pulled:1"),
        "{msg}"
    );
    let err = b
        .create_docker(&spec("nobase", missing_base.path()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "base image ahe-nonexistent:v0 is not in the local engine and pulling it failed"
        ),
        "{err}"
    );

    // A named image that exists locally is used as is (no build, its WORKDIR).
    let s = SandboxSpec {
        task: "named".into(),
        docker_image: Some(BASE.into()),
        ..Default::default()
    };
    let before = b.builds();
    let sb = b.create(&s).await.unwrap();
    assert_eq!(sb.workdir(), "/app");
    assert_eq!(b.builds(), before);
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn non_root_images_and_missing_programs() {
    let Some(b) = backend() else { return };
    let ctx = context(&[(
        "Dockerfile",
        "FROM ahe-base:bookworm\nRUN useradd -m agent\nUSER agent\nWORKDIR /home/agent/work\n",
    )]);
    let sb = b.create_docker(&spec("nonroot", ctx.path())).await.unwrap();
    assert_eq!(sb.workdir(), "/home/agent/work");
    let o = sh(
        &sb,
        "whoami; pwd; touch /logs/agent/a /logs/verifier/b && echo ok",
    )
    .await;
    assert_eq!(o.stdout, "agent\n/home/agent/work\nok\n", "{o:?}");
    let err = sb
        .exec(
            "true",
            ExecOpts {
                cwd: Some("/does/not/exist".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("/does/not/exist does not exist"),
        "{err}"
    );
    sb.destroy().await.unwrap();

    // An image without bash: commands run with sh.
    let ctx = context(&[(
        "Dockerfile",
        "FROM ahe-base:bookworm\nRUN rm -f /usr/bin/bash /bin/bash\n",
    )]);
    let sb = b.create_docker(&spec("nobash", ctx.path())).await.unwrap();
    let o = sh(&sb, "echo \"shell=$0\"").await;
    assert_eq!(o.stdout, "shell=sh\n", "{o:?}");
    assert_eq!(sh(&sb, "exit 4").await.exit_code, Some(4));
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn keeper_fast_path_and_its_fallbacks() {
    let Some(b) = backend() else { return };
    let ctx = base_context();
    let sb = b.create_docker(&spec("keeper", ctx.path())).await.unwrap();
    let o = sh(&sb, "printf 'no newline'; printf 'e\\0rr' >&2; exit 5").await;
    assert_eq!(
        (o.exit_code, o.stdout.as_str(), o.stderr.as_str()),
        (Some(5), "no newline", "e\0rr")
    );
    let quoted = sb
        .exec(
            "printf '%s|' \"$A\" \"$B\"; pwd",
            ExecOpts {
                cwd: Some("/tmp/dir with 'quotes'".into()),
                env: BTreeMap::from([
                    ("A".to_string(), "x'y\"z $HOME \\n é".to_string()),
                    ("B".to_string(), "line1\nline2".to_string()),
                ]),
                ..Default::default()
            },
        )
        .await;
    assert!(quoted.is_err(), "the cwd does not exist yet");
    sh(&sb, "mkdir -p \"/tmp/dir with 'quotes'\"").await;
    let o = sb
        .exec(
            "printf '%s|' \"$A\" \"$B\"; pwd",
            ExecOpts {
                cwd: Some("/tmp/dir with 'quotes'".into()),
                env: BTreeMap::from([
                    ("A".to_string(), "x'y\"z $HOME \\n é".to_string()),
                    ("B".to_string(), "line1\nline2".to_string()),
                ]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        o.stdout,
        "x'y\"z $HOME \\n é|line1\nline2|/tmp/dir with 'quotes'\n"
    );
    let fast = sb.fast_execs();
    assert!(fast >= 4, "{fast}");
    // What bash cannot take as a request goes through docker exec (same results).
    let o = sb
        .exec(
            "env | grep '^A-B='",
            ExecOpts {
                env: BTreeMap::from([("A-B".to_string(), "1".to_string())]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(o.stdout, "A-B=1\n");
    let long = format!("echo ok # {}", "x".repeat(40 << 10));
    assert_eq!(sh(&sb, &long).await.stdout, "ok\n");
    assert_eq!(sb.fast_execs(), fast);
    // Output a background process writes after its exec ended is not another exec's.
    sh(&sb, "(sleep 0.3; echo LATE; echo LATE >&2) &").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let o = sh(&sb, "echo next").await;
    assert_eq!((o.stdout.as_str(), o.stderr.as_str()), ("next\n", ""));
    // ... and a background process writing a lot between execs never blocks on it.
    sh(
        &sb,
        "(head -c 5000000 /dev/zero | tr '\\0' x; echo; echo done > /tmp/bg) &",
    )
    .await;
    // (Output written while an exec runs is mixed into it, as in a terminal.)
    let mut bg = String::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        bg = sh(&sb, "cat /tmp/bg 2>/dev/null").await.stdout;
        if bg.ends_with("done\n") {
            break;
        }
    }
    assert!(
        bg.ends_with("done\n"),
        "{}",
        &bg[bg.len().saturating_sub(100)..]
    );
    assert_eq!(sh(&sb, "echo clean").await.stdout, "clean\n");
    // Two execs at once: one takes the keeper, the other docker exec.
    let (a, c) = tokio::join!(sh(&sb, "sleep 0.5; echo a"), sh(&sb, "sleep 0.5; echo c"));
    assert_eq!((a.stdout.as_str(), c.stdout.as_str()), ("a\n", "c\n"));
    // A command that kills the keeper's shell ends; later execs still work (docker exec).
    let o = sh(&sb, "kill -9 $PPID; sleep 2; echo never").await;
    assert_eq!(o.exit_code, None, "{o:?}");
    assert!(!o.stdout.contains("never"));
    let before = sb.fast_execs();
    let o = sh(&sb, "echo still; ps -eo args | grep -c '[s]leep 2$'").await;
    assert_eq!(o.stdout, "still\n0\n", "{o:?}");
    assert_eq!(sb.fast_execs(), before);
    sb.destroy().await.unwrap();
}
