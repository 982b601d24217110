//! The Harbor backend through the library, on Harbor's docker environment: the trials of a
//! task share one image build however many start at once (and the image is kept, as on the
//! docker backend); execs with small (inline) and large (uploaded) stdin, `put` of a file
//! into a directory and under a new name, `get` back; a timed-out exec leaves nothing of
//! itself running. Both ways a command reaches the environment: the Engine API on its
//! container (`exec = "engine"`, the default) and Harbor's own `docker compose exec`.

use std::path::Path;

use base64::Engine as _;
use std::time::Duration;

use ahe_sandbox::harbor::{HarborBackend, HarborConfig, HarborExec};
use ahe_sandbox::{Backend, ExecOpts, Sandbox, SandboxSpec};

fn spec(ctx: &Path, trial: &str) -> SandboxSpec {
    SandboxSpec {
        task: "harbor-once".into(),
        trial_id: trial.into(),
        run: "harbor-library-test".into(),
        context_dir: Some(ctx.to_path_buf()),
        cpus: Some(1.0),
        memory_mb: Some(512),
        env: [("AHE_ENV_A", "environment"), ("AHE_ENV_B", "environment")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
        ..Default::default()
    }
}

async fn sh(sb: &dyn Sandbox, command: &str, stdin: Option<Vec<u8>>) -> String {
    let opts = ExecOpts {
        stdin,
        timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let out = sb.exec(command, opts).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{command}: {out:?}");
    out.stdout.trim().to_string()
}

/// Whether image `tag` exists on the engine.
fn image_exists(tag: &str) -> bool {
    std::process::Command::new("docker")
        .args(["image", "inspect", tag])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub(super) fn trials_of_a_task_share_one_build_and_files_round_trip() {
    if !super::harbor_ready() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let ctx = d.path().join("environment");
    std::fs::create_dir_all(&ctx).unwrap();
    // Content no other test or run has built: the build happens here.
    let unique = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    std::fs::write(
        ctx.join("Dockerfile"),
        format!("FROM ahe-base:bookworm\nRUN echo {unique} > /unique\nWORKDIR /work\n"),
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tag = rt.block_on(async {
        let b = HarborBackend::connect(HarborConfig::default()).unwrap();
        // Two trials of the task start at once: one build.
        let (s1, s2) = (spec(&ctx, "t1"), spec(&ctx, "t2"));
        let (one, two) = tokio::join!(b.create(&s1), b.create(&s2));
        let (one, two) = (one.unwrap(), two.unwrap());
        assert_eq!(b.builds(), 1, "one build for both trials");
        let image = |sb: &dyn Sandbox| {
            let notes = sb.notes().join("\n");
            let at = notes.find("image ahe-task:").expect(&notes);
            notes[at + 6..]
                .split(':')
                .take(2)
                .collect::<Vec<_>>()
                .join(":")
        };
        let tag = image(one.as_ref());
        assert_eq!(tag, image(two.as_ref()));
        for sb in [&one, &two] {
            assert_eq!(sh(sb.as_ref(), "cat /unique", None).await, unique);
            assert_eq!(sb.workdir(), "/work");
            assert_eq!(sh(sb.as_ref(), "pwd", None).await, "/work");
        }
        // A third trial later: no build at all.
        let three = b.create(&spec(&ctx, "t3")).await.unwrap();
        assert_eq!(b.builds(), 1);
        three.destroy().await.unwrap();

        round_trip(one.as_ref(), d.path(), "engine").await;
        container_removed_under_the_keeper(two.as_ref()).await;
        // The same through Harbor's own exec and copies.
        let cfg = HarborConfig {
            exec: HarborExec::Harbor,
            ..Default::default()
        };
        let via_harbor = HarborBackend::connect(cfg).unwrap();
        let four = via_harbor.create(&spec(&ctx, "t4")).await.unwrap();
        assert_eq!(via_harbor.builds(), 0, "the image is kept and reused");
        round_trip(four.as_ref(), d.path(), "harbor").await;
        four.destroy().await.unwrap();
        via_harbor.drain().await;

        one.destroy().await.unwrap();
        two.destroy().await.unwrap();
        b.drain().await;
        tag
    });
    // Kept for later runs (the docker backend's policy); this test's own image goes now.
    assert!(
        image_exists(&tag),
        "{tag} was removed with the environments"
    );
    let _ = std::process::Command::new("docker")
        .args(["rmi", &tag])
        .output();
}

/// Commands and copies on `sb`, reached the `way` its notes name: the environment's variables
/// under the exec's own, stdin small and large, put and get, a timed-out exec.
async fn round_trip(sb: &dyn Sandbox, dir: &Path, way: &str) {
    let notes = sb.notes().join("\n");
    assert_eq!(
        notes.contains("the Engine API on Harbor's container"),
        way == "engine",
        "{notes}"
    );
    let opts = ExecOpts {
        env: [("AHE_ENV_B".to_string(), "exec".to_string())].into(),
        ..Default::default()
    };
    let out = sb.exec("echo $AHE_ENV_A $AHE_ENV_B", opts).await.unwrap();
    assert_eq!(out.stdout.trim(), "environment exec", "{way}: {out:?}");
    let dir = &dir.join(way);
    std::fs::create_dir_all(dir).unwrap();
    // stdin: small (inline in the command) and large (uploaded), bytes intact.
    let small = b"line one\n\0two".to_vec();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&small);
    assert_eq!(sh(sb, "base64 -w0", Some(small)).await, b64);
    let big = vec![b'x'; 300_000];
    assert_eq!(sh(sb, "wc -c", Some(big)).await, "300000");

    // put: a file into an existing directory, and under a new name in a new one.
    let src = dir.join("note.txt");
    std::fs::write(&src, "hello\n").unwrap();
    sb.put(&src, "/tmp").await.unwrap();
    sb.put(&src, "/opt/new/dir/renamed.txt").await.unwrap();
    assert_eq!(
        sh(sb, "cat /tmp/note.txt /opt/new/dir/renamed.txt", None).await,
        "hello\nhello"
    );
    // get: a directory back.
    let back = dir.join("back");
    sb.get("/opt/new", &back).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(back.join("dir/renamed.txt")).unwrap(),
        "hello\n"
    );

    // get: a large file (a walk's listing of a big tree is several MB) comes back whole.
    let made = sh(
        sb,
        "head -c 3000000 /dev/urandom | base64 > /tmp/big && md5sum < /tmp/big",
        None,
    )
    .await;
    let big = dir.join("big");
    sb.get("/tmp/big", &big).await.unwrap();
    let bytes = std::fs::read(&big).unwrap();
    let md5 = std::process::Command::new("md5sum")
        .arg(&big)
        .output()
        .unwrap();
    let md5 = String::from_utf8_lossy(&md5.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        made.split_whitespace().next(),
        Some(md5.as_str()),
        "{way}: {} bytes back",
        bytes.len()
    );

    // A timed-out exec: nothing of it keeps running.
    let nap = format!("sleep 30.{}", std::process::id());
    let opts = ExecOpts {
        timeout: Some(Duration::from_secs(2)),
        ..Default::default()
    };
    let out = sb.exec(&format!("{nap} & {nap}"), opts).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    let left = sh(
        sb,
        &format!("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^{nap} $' || true"),
        None,
    )
    .await;
    assert_eq!(left, "0", "processes of the timed-out exec still run");
    if way == "engine" {
        keeper(sb).await;
    }
}

/// What the command's shell runs under: `keeper` when the grandparent of the command's bash
/// is ahe's keeper (`sh -c … ahe-keeper`), else `exec`.
const UNDER: &str = "gp=$(awk '{print $4}' /proc/$PPID/stat); \
    if tr '\\0' ' ' < /proc/$gp/cmdline | grep -q ahe-keeper; then echo keeper; else echo exec; fi";

/// Through the Engine API, commands run in ahe's keeper (a bash in the container fed over
/// one exec's streams, as on the docker backend): the hand-over spares it; a command that
/// kills it gets no status and a note, and the next ones run as `docker exec`s.
async fn keeper(sb: &dyn Sandbox) {
    assert_eq!(sh(sb, UNDER, None).await, "keeper");
    // A leftover is ended by the hand-over, which runs through the keeper and spares it.
    sh(sb, "sleep 300 >/dev/null 2>&1 &", None).await;
    let h = sb
        .end_leftovers(ahe_sandbox::LeftoverPolicy::Kill, 5)
        .await
        .unwrap();
    assert!(h.killed >= 1, "{h:?}");
    assert_eq!(
        sh(sb, UNDER, None).await,
        "keeper",
        "the hand-over ended the keeper"
    );
    let left = sh(
        sb,
        "grep -l '^sleep' /proc/[0-9]*/comm 2>/dev/null | wc -l",
        None,
    )
    .await;
    // Harbor's own `sleep infinity` (the compose service's) is all that is left.
    assert_eq!(left, "1", "the leftover survived the hand-over");
    // A command that kills the keeper (its `sh`, then its bash): no status, a note; the
    // container lives on.
    let kill = "kill -9 $(grep -l 'ahe-kee[p]er' /proc/[0-9]*/cmdline | cut -d/ -f3) $PPID";
    let out = sb.exec(kill, ExecOpts::default()).await.unwrap();
    assert_eq!(out.exit_code, None, "{out:?}");
    assert!(
        out.stderr.contains("killed the sandbox's command shell"),
        "{out:?}"
    );
    assert_eq!(sh(sb, UNDER, None).await, "exec");
    assert_eq!(sh(sb, "echo $AHE_ENV_A", None).await, "environment");
}

/// A container removed under a command run by the keeper: an error (infra), not the note of
/// a command that killed its shell.
async fn container_removed_under_the_keeper(sb: &dyn Sandbox) {
    assert_eq!(sh(sb, UNDER, None).await, "keeper");
    let notes = sb.notes().join("\n");
    let at = notes.find("Harbor's container ").expect(&notes) + "Harbor's container ".len();
    let id = notes[at..].split_whitespace().next().unwrap().to_string();
    let remove = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rm = tokio::process::Command::new("docker")
            .args(["rm", "-f", &id])
            .output();
        assert!(rm.await.unwrap().status.success());
    };
    let (out, ()) = tokio::join!(sb.exec("sleep 30", ExecOpts::default()), remove);
    assert!(out.is_err(), "{out:?}");
}
