//! Storage limits and the host reserve, end to end through `ahe eval` (oracle agent, real
//! sandboxes): a trial writing past its task's `storage_mb` is stopped as the agent's failure
//! with the reason, on docker and local, and what the trial holds on disk (its sandbox's
//! writable storage and its out dir, walked by the test itself) never exceeds twice the
//! limit; a run whose disk falls below `[sandbox] min_free_disk` (a small
//! loop-mounted file system made by the test) pauses, stops the largest trial, resumes, and
//! ends with every trial scored once, as an unthrottled run does.
//!
//! Docker tests skip without an engine (they fail under `CI=true`, like tests/docker.rs); the
//! loop-mount test needs root and skips without it (fails under `CI=true`).

mod common;

use common::{ahe, docker_ready, json_file, text};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The tests of this file run one at a time: each measures the host's free space, which the
/// others' writes would blur.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Large enough that the other writers of a shared disk do not blur the free-space drop.
const LIMIT_MB: u64 = 128;

/// A task whose oracle runs `solve` and whose verifier runs `test` (default: reward 1).
fn task(bench: &Path, name: &str, storage_mb: Option<u64>, solve: &str, test: Option<&str>) {
    let d = bench.join(name);
    for sub in ["environment", "solution", "tests"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    let storage = storage_mb.map_or(String::new(), |m| format!("storage_mb = {m}\n"));
    std::fs::write(
        d.join("task.toml"),
        format!(
            "[agent]\ntimeout_sec = 120.0\n\n[verifier]\ntimeout_sec = 60.0\n\n[environment]\ncpus = 1\nmemory_mb = 512\n{storage}"
        ),
    )
    .unwrap();
    std::fs::write(d.join("instruction.md"), format!("Task {name}.\n")).unwrap();
    std::fs::write(
        d.join("environment/Dockerfile"),
        "FROM ahe-base:bookworm\nWORKDIR /app\n",
    )
    .unwrap();
    std::fs::write(
        d.join("solution/solve.sh"),
        format!("#!/bin/bash\n{solve}\n"),
    )
    .unwrap();
    let test = test.unwrap_or("echo 1 > /logs/verifier/reward.txt");
    std::fs::write(d.join("tests/test.sh"), format!("#!/bin/bash\n{test}\n")).unwrap();
}

/// The storage benchmark: two runaways (one file; many files) and one task within its limit.
fn storage_bench(root: &Path) -> PathBuf {
    let bench = root.join("bench");
    // One file: RLIMIT_FSIZE stops `yes` at the limit; the watcher ends the trial.
    task(
        &bench,
        "runaway-file",
        Some(LIMIT_MB),
        "yes ahe-storage-test > /app/big\nsleep 60",
        None,
    );
    // Many files, none over the limit: only the watcher stops this one.
    task(
        &bench,
        "runaway-files",
        Some(LIMIT_MB),
        "i=0\nwhile :; do i=$((i+1)); head -c 4M /dev/zero > /app/f$i; done",
        None,
    );
    task(
        &bench,
        "within-limit",
        Some(LIMIT_MB),
        "head -c 16M /dev/zero > /app/data",
        Some("[ \"$(stat -c %s /app/data)\" = 16777216 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"),
    );
    bench
}

/// Where a trial's writes land, watched by the test itself (not by ahe's meter): the
/// evaluation's out dir, and the sandbox's own storage — for docker the writable layers of the
/// run's containers (found by their `ahe.run` label), for local the sandboxes' dir the test
/// made. Walked every few milliseconds until stopped; the largest total seen, in allocated
/// bytes. Other writers of the same disk (a build, another test binary) do not count, which a
/// watch of the host's free space could not tell apart (issue 42: a 486 MiB drop from
/// unrelated work failed this test).
struct WriteWatch {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl WriteWatch {
    /// Watches `dirs`, and when `docker_run` is set the upper dirs of that run's containers.
    fn start(dirs: Vec<PathBuf>, docker_run: Option<String>) -> WriteWatch {
        let (stop, peak) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, p) = (stop.clone(), peak.clone());
        let handle = std::thread::spawn(move || {
            let mut uppers: Vec<PathBuf> = Vec::new();
            let mut asked = Instant::now() - Duration::from_secs(1);
            while !s.load(Ordering::SeqCst) {
                if let Some(run) = &docker_run {
                    // Asked at once until the first container is seen (it lives ~1 s).
                    if uppers.is_empty() || asked.elapsed() > Duration::from_millis(200) {
                        asked = Instant::now();
                        for u in upper_dirs(run) {
                            if !uppers.contains(&u) {
                                uppers.push(u);
                            }
                        }
                    }
                }
                let total: u64 = dirs.iter().chain(&uppers).map(|d| allocated(d)).sum();
                p.fetch_max(total, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        WriteWatch {
            stop,
            peak,
            handle: Some(handle),
        }
    }

    /// The largest total seen, in bytes.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.take().unwrap().join().unwrap();
        self.peak.load(Ordering::SeqCst)
    }
}

/// The writable-layer dirs of the containers labelled `ahe.run=run` (overlay2).
fn upper_dirs(run: &str) -> Vec<PathBuf> {
    let ids = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=ahe.run={run}")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    ids.split_whitespace()
        .filter_map(|id| {
            let o = Command::new("docker")
                .args(["inspect", "--format", "{{.GraphDriver.Data.UpperDir}}", id])
                .output()
                .ok()?;
            let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
            (!p.is_empty() && p != "<no value>").then(|| PathBuf::from(p))
        })
        .collect()
}

/// Allocated bytes of the files under `dir` (0 for what is gone while walked).
fn allocated(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let mut total = md.blocks() * 512;
    if md.is_dir() {
        if let Ok(rd) = std::fs::read_dir(dir) {
            total += rd.flatten().map(|e| allocated(&e.path())).sum::<u64>();
        }
    }
    total
}

/// Runs each task of the storage benchmark on `sandbox` in an evaluation of its own (so a
/// drop of the host's free space is that one trial's, its teardown included) and checks
/// every trial; returns the evals' dirs.
fn check_storage_limits(
    sandbox: &str,
    sandboxes: Option<&Path>,
    envs: &[(&str, &str)],
    tmp: &Path,
) -> Vec<PathBuf> {
    let bench = storage_bench(tmp);
    let limit = LIMIT_MB << 20;
    let mut outs = Vec::new();
    for name in ["runaway-file", "runaway-files", "within-limit"] {
        let out = tmp.join(format!("storage-{sandbox}-{name}"));
        let mut dirs = vec![out.clone()];
        dirs.extend(sandboxes.map(Path::to_path_buf));
        let docker_run =
            (sandbox == "docker").then(|| out.file_name().unwrap().to_string_lossy().to_string());
        let w = WriteWatch::start(dirs, docker_run);
        let t0 = Instant::now();
        let o = ahe(
            &[
                "eval",
                "--harness",
                "harness-seed",
                "--benchmark",
                bench.to_str().unwrap(),
                "--tasks",
                name,
                "--sandbox",
                sandbox,
                "--model",
                "mock:oracle",
                "--out",
                out.to_str().unwrap(),
            ],
            envs,
        );
        let secs = t0.elapsed().as_secs_f64();
        let written = w.finish();
        assert!(o.status.code().is_some(), "{}", text(&o));
        let r = json_file(&out.join(format!("trials/{name}/1/result.json")));
        eprintln!(
            "{sandbox} {name}: {} after {} ms of agent time ({secs:.1}s in all); peak {:.1} MiB in {} walks ({:.1} ms of walking); the test's own walk saw at most {:.1} MiB written",
            r["status"],
            r["timings"]["agent_ms"],
            r["disk"]["peak_bytes"].as_f64().unwrap_or(0.0) / (1u64 << 20) as f64,
            r["disk"]["walks"],
            r["disk"]["walk_ms"].as_f64().unwrap_or(0.0),
            written as f64 / (1u64 << 20) as f64
        );
        assert!(
            written < 2 * limit,
            "{sandbox} {name}: the trial's sandbox and out dir held {written} bytes at once, over twice the limit"
        );
        if name != "within-limit" {
            assert!(
                written > limit / 2,
                "{sandbox} {name}: the test's walk saw only {written} bytes of a runaway (is it watching the right dirs?)"
            );
        }
        if name == "within-limit" {
            assert_eq!(r["status"], "pass", "{sandbox}: {r:#}");
        } else {
            assert_eq!(r["status"], "fail", "{sandbox} {name}: {r:#}");
            assert_eq!(r["agent_end"], "storage_limit", "{sandbox} {name}: {r:#}");
            assert_eq!(
                r["error"], "exceeded the task's storage limit (128 MiB)",
                "{sandbox} {name}: {r:#}"
            );
            let agent_ms = r["timings"]["agent_ms"].as_u64().unwrap();
            let peak = r["disk"]["peak_bytes"].as_u64().unwrap();
            assert!(
                agent_ms < 10_000,
                "{sandbox} {name}: stopped after {agent_ms} ms"
            );
            assert!(
                peak > limit && peak < 2 * limit,
                "{sandbox} {name}: peak {peak}"
            );
        }
        outs.push(out);
    }
    outs
}

#[test]
fn docker_trials_over_their_storage_limit_are_stopped_as_failures() {
    let _serial = serial();
    if !docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for out in check_storage_limits("docker", None, &[], tmp.path()) {
        // Every container of the evaluation is gone (its run is the out dir's name).
        let run = out.file_name().unwrap().to_str().unwrap();
        let left = Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("label=ahe.run={run}")])
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&left.stdout).trim().is_empty(),
            "containers left: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }
}

#[test]
fn local_trials_over_their_storage_limit_are_stopped_as_failures() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let sandboxes = tmp.path().join("sandboxes");
    std::fs::create_dir(&sandboxes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sandboxes, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let s = sandboxes.to_str().unwrap();
    check_storage_limits("local", Some(&sandboxes), &[("TMPDIR", s)], tmp.path());
    // Every trial dir is removed.
    let left: Vec<_> = std::fs::read_dir(&sandboxes).unwrap().flatten().collect();
    assert!(left.is_empty(), "trial dirs left: {left:?}");
}

/// A small file system the test mounts (root only); unmounted when dropped.
struct LoopFs {
    dir: PathBuf,
}

impl LoopFs {
    fn make(base: &Path, mb: u64) -> Option<LoopFs> {
        let ci = std::env::var("CI").as_deref() == Ok("true");
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        if !root {
            assert!(
                !ci,
                "the loop-mount test needs root (required when CI=true)"
            );
            eprintln!("note: not root; skipping the loop-mount test");
            return None;
        }
        let img = base.join("small.img");
        let dir = base.join("small");
        std::fs::create_dir(&dir).unwrap();
        let sh = |args: &[&str]| {
            let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
            assert!(
                o.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        sh(&["truncate", "-s", &format!("{mb}M"), img.to_str().unwrap()]);
        sh(&["mkfs.ext4", "-q", "-m", "0", img.to_str().unwrap()]);
        sh(&[
            "mount",
            "-o",
            "loop",
            img.to_str().unwrap(),
            dir.to_str().unwrap(),
        ]);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        Some(LoopFs { dir })
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
    }
}

/// Four tasks of 50 MiB each (written at once, then held for a few seconds).
fn reserve_bench(root: &Path) -> PathBuf {
    let bench = root.join("reserve-bench");
    for i in 0..4 {
        task(
            &bench,
            &format!("fill-{i}"),
            None,
            "head -c 50M /dev/zero > /app/data\nsleep 4",
            Some("[ \"$(stat -c %s /app/data)\" = 52428800 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"),
        );
    }
    bench
}

fn eval_local(bench: &Path, out: &Path, config: &Path, tmpdir: &Path) -> std::process::Output {
    ahe(
        &[
            "eval",
            "--harness",
            "harness-seed",
            "--benchmark",
            bench.to_str().unwrap(),
            "--sandbox",
            "local",
            "--model",
            "mock:oracle",
            "--concurrency",
            "4",
            "--config",
            config.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[("TMPDIR", tmpdir.to_str().unwrap())],
    )
}

/// Per task: its trials' statuses.
fn statuses(out: &Path) -> Vec<(String, Vec<String>)> {
    let s = json_file(&out.join("scores.json"));
    s["tasks"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, t)| {
            let st = t["trials"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["status"].as_str().unwrap().to_string())
                .collect();
            (name.clone(), st)
        })
        .collect()
}

#[test]
fn a_run_below_its_disk_reserve_pauses_and_finishes_like_an_unthrottled_one() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    // ~280 MiB usable: three trials (150 MiB) fit above a 100 MiB reserve, four do not.
    let Some(small) = LoopFs::make(tmp.path(), 300) else {
        return;
    };
    let bench = reserve_bench(tmp.path());
    let cfg = |name: &str, reserve: &str| {
        let p = tmp.path().join(name);
        std::fs::write(
            &p,
            format!(
                "[benchmark]\npath = {:?}\n\n[sandbox]\nbackend = \"local\"\nmin_free_disk = {reserve}\n\n[models.default]\nprovider = \"mock\"\nmodel = \"oracle\"\n",
                bench.display().to_string()
            ),
        )
        .unwrap();
        p
    };
    // Unthrottled, on the big disk.
    let free_tmp = tmp.path().join("big-tmp");
    std::fs::create_dir(&free_tmp).unwrap();
    let plain = tmp.path().join("plain");
    let o = eval_local(&bench, &plain, &cfg("off.toml", "0"), &free_tmp);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // On the small file system (run dir and sandboxes), with the reserve.
    let out = small.dir.join("out");
    let sandboxes = small.dir.join("sandboxes");
    std::fs::create_dir(&sandboxes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sandboxes, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let o = eval_local(&bench, &out, &cfg("reserve.toml", "\"100M\""), &sandboxes);
    let log = text(&o);
    eprintln!("{log}");
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains("below [sandbox] min_free_disk"), "{log}");
    assert!(log.contains("stopped the largest running trial"), "{log}");
    assert!(log.contains("trials start again"), "{log}");
    // The events are recorded (`ahe eval`: beside the pulls).
    let events = std::fs::read_to_string(out.join("pulls.jsonl")).unwrap_or_default();
    for state in ["low", "stop", "ok"] {
        assert!(
            events.contains(&format!("\"state\":\"{state}\"")),
            "no {state} event: {events}"
        );
    }
    // Every trial scored once, and the same as without the reserve.
    let (a, b) = (statuses(&plain), statuses(&out));
    assert_eq!(a.len(), 4);
    assert!(a.iter().all(|(_, s)| s == &["pass"]), "{a:?}");
    assert_eq!(a, b);
    let s = json_file(&out.join("scores.json"));
    assert_eq!(s["pass_at_1"], 1.0, "{s:#}");
    // A stopped trial was re-run, and says so.
    let rerun = (0..4).any(|i| {
        let r = json_file(&out.join(format!("trials/fill-{i}/1/result.json")));
        r["notes"].as_array().is_some_and(|n| {
            n.iter()
                .any(|x| x.as_str().unwrap().contains("stopped and re-run"))
        })
    });
    assert!(rerun, "no trial says it was stopped and re-run");
    let left: Vec<_> = std::fs::read_dir(&sandboxes).unwrap().flatten().collect();
    assert!(left.is_empty(), "trial dirs left: {left:?}");
}

/// `ahe check` states the free space and the reserve, and a reserve the disk cannot meet is
/// a problem (exit 2).
#[test]
fn check_reports_free_space_and_the_reserve() {
    let d = tempfile::tempdir().unwrap();
    let run = |reserve: &str| {
        let p = d.path().join("run.toml");
        std::fs::write(
            &p,
            format!(
                "[benchmark]\npath = {:?}\n[sandbox]\nbackend = \"local\"\nmin_free_disk = {reserve}\n[models.default]\nprovider = \"mock\"\nmodel = \"oracle\"\n",
                common::root().join("benchmarks/smoke").display().to_string()
            ),
        )
        .unwrap();
        let o = ahe(&["check", "--config", p.to_str().unwrap(), "--json"], &[]);
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o)));
        (o.status.code(), doc)
    };
    let (code, doc) = run("\"1M\"");
    assert_eq!(code, Some(0), "{doc:#}");
    let disk: Vec<&serde_json::Value> = doc["passed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["area"] == "disk")
        .collect();
    assert_eq!(disk.len(), 2, "run directory and sandboxes: {doc:#}");
    for i in disk {
        let m = i["message"].as_str().unwrap();
        assert!(
            m.contains(" free; reserve [sandbox] min_free_disk = 1.0 MiB"),
            "{m}"
        );
    }
    let (code, doc) = run("\"1000T\"");
    assert_eq!(code, Some(2), "{doc:#}");
    let bad: Vec<&serde_json::Value> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["area"] == "disk")
        .collect();
    assert!(!bad.is_empty(), "{doc:#}");
    let m = bad[0]["message"].as_str().unwrap();
    assert!(m.contains("below [sandbox] min_free_disk"), "{m}");
    let (code, doc) = run("0");
    assert_eq!(code, Some(0), "{doc:#}");
    assert!(
        doc.to_string().contains("min_free_disk = 0 (off)"),
        "{doc:#}"
    );
}
