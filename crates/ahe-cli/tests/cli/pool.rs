//! Several Docker engines (`[sandbox] hosts`) end to end, on three real extra `dockerd`
//! instances the tests start themselves (see `pool_support`): trials spread by capacity
//! (one engine reached over TLS), an engine SIGKILLed in the middle of `ahe eval` loses no
//! trial and leaves no container on the others, a lost engine is probed again and its
//! leftovers removed, and `ahe check` names every engine.

use crate::common;
use crate::pool_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{json_file, root, run as ahe, text};
use pool_support::{engines, Engine, TLS_ADDR, TLS_DIR};
use serde_json::Value;

/// One test at a time: they share the engines, and one kills an engine. Taken before
/// [`engines`], which starts any engine that is down: taken after, one test's
/// `engines()` restarted the engine another had just killed to see it noticed.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A benchmark of `n` tasks whose solution sleeps `secs` then writes the file the verifier
/// wants (the nop agent fails them: a trial scored `fail` would show). All share one
/// environment, so each engine builds one image.
fn benchmark(dir: &Path, n: usize, secs: f64) {
    for i in 0..n {
        let t = dir.join(format!("t{i}"));
        for sub in ["environment", "solution", "tests"] {
            std::fs::create_dir_all(t.join(sub)).unwrap();
        }
        std::fs::write(
            t.join("task.toml"),
            "[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n\
             [environment]\ncpus = 1\nmemory_mb = 256\n",
        )
        .unwrap();
        std::fs::write(t.join("instruction.md"), "Write done to /app/out.txt.\n").unwrap();
        std::fs::write(
            t.join("environment/Dockerfile"),
            "FROM ahe-base:bookworm\nWORKDIR /app\nRUN echo pool-test > /etc/ahe-pool-test\n",
        )
        .unwrap();
        std::fs::write(
            t.join("solution/solve.sh"),
            format!("#!/bin/bash\nsleep {secs}\necho done > /app/out.txt\n"),
        )
        .unwrap();
        std::fs::write(
            t.join("tests/test.sh"),
            "#!/bin/bash\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = done ]; then echo 1 > \
             /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
        )
        .unwrap();
    }
}

/// A run config over `hosts` (TOML inline tables), `k` trials per task.
fn config(dir: &Path, bench: &Path, hosts: &[String], k: u32) -> PathBuf {
    let p = dir.join("pool.toml");
    let text = format!(
        "k = {k}\n[benchmark]\npath = \"{}\"\n[sandbox]\nbackend = \"docker\"\n\
         infra_retries = 0\nhosts = [\n  {}\n]\n[models.default]\nprovider = \"mock\"\n\
         model = \"oracle\"\n",
        bench.display(),
        hosts.join(",\n  ")
    );
    std::fs::write(&p, text).unwrap();
    p
}

fn host(name: &str, e: Engine, cap: usize) -> String {
    format!(
        "{{name = \"{name}\", url = \"{}\", capacity = {cap}}}",
        e.url()
    )
}

/// Engine 3 over TLS.
fn tls_host(name: &str, cap: usize) -> String {
    format!(
        "{{name = \"{name}\", url = \"tcp://{TLS_ADDR}\", capacity = {cap}, tls = {{ca = \
         \"{TLS_DIR}/ca.pem\", cert = \"{TLS_DIR}/cert.pem\", key = \"{TLS_DIR}/key.pem\"}}}}"
    )
}

fn eval_args<'a>(cfg: &'a Path, bench: &'a Path, out: &'a Path) -> Vec<&'a str> {
    vec![
        "eval",
        "--config",
        cfg.to_str().unwrap(),
        "--harness",
        "harness-seed",
        "--benchmark",
        bench.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]
}

/// Every `result.json` under `out/trials`.
fn results(out: &Path) -> Vec<Value> {
    let mut v = Vec::new();
    for t in std::fs::read_dir(out.join("trials")).unwrap().flatten() {
        for a in std::fs::read_dir(t.path()).unwrap().flatten() {
            v.push(json_file(&a.path().join("result.json")));
        }
    }
    v
}

/// `meta.hosts` as name → (trials, lost, peak, capacity).
fn host_counts(s: &Value) -> BTreeMap<String, (u64, u64, u64, u64)> {
    let hosts = s["meta"]["hosts"].as_object().expect("meta.hosts");
    hosts
        .iter()
        .map(|(k, v)| {
            let n = |f: &str| v[f].as_u64().unwrap_or_else(|| panic!("{k}.{f}: {v}"));
            (
                k.clone(),
                (n("trials"), n("lost"), n("peak"), n("capacity")),
            )
        })
        .collect()
}

#[test]
fn eval_over_three_engines_spreads_trials_by_capacity() {
    let _serial = serial();
    let Some([e1, e2, e3]) = engines() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let bench = d.path().join("bench");
    benchmark(&bench, 6, 1.5);
    // Capacities 1, 2 and 3; the third engine is reached over TLS.
    let hosts = [host("a", e1, 1), host("b", e2, 2), tls_host("c", 3)];
    let cfg = config(d.path(), &bench, &hosts, 4);
    let out = d.path().join("spread");
    let t0 = Instant::now();
    let o = ahe(&eval_args(&cfg, &bench, &out));
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = json_file(&out.join("scores.json"));
    assert_eq!(s["pass_at_1"], 1.0, "{s:#}");
    assert_eq!(s["statuses"]["pass"], 24, "{:#}", s["statuses"]);
    let c = host_counts(&s);
    eprintln!("24 trials over capacities 1/2/3 in {secs:.1}s: {c:?}");
    let (a, b, cc) = (c["a"], c["b"], c["c"]);
    assert_eq!(a.0 + b.0 + cc.0, 24, "{c:?}");
    // Every engine was filled to its capacity and never past it (the default concurrency
    // is the sum of the capacities, 6) ...
    for (name, (_, lost, peak, cap)) in &c {
        assert_eq!(peak, cap, "{name}: peak {peak} of capacity {cap}: {c:?}");
        assert_eq!(*lost, 0, "{name}");
    }
    // ... so trials spread in proportion: 4, 8 and 12 expected.
    assert!(a.0 < b.0 && b.0 < cc.0, "not spread by capacity: {c:?}");
    for (got, want) in [(a.0, 4.0), (b.0, 8.0), (cc.0, 12.0)] {
        assert!(
            (got as f64 - want).abs() <= want / 2.0,
            "{got} trials where {want} were expected: {c:?}"
        );
    }
    // Each trial names its host, and each engine built the shared environment at most once
    // (its image survives from an earlier run on this machine).
    for r in results(&out) {
        let h = r["host"]
            .as_str()
            .unwrap_or_else(|| panic!("no host: {r:#}"));
        assert!(["a", "b", "c"].contains(&h), "{h}");
        assert!(r.get("lost_hosts").is_none(), "{r:#}");
    }
    for (name, v) in s["meta"]["hosts"].as_object().unwrap() {
        assert!(v["builds"].as_u64().unwrap() <= 1, "{name}: {v}");
        assert_eq!(v["up"], true, "{name}");
    }
    for e in [e1, e2, e3] {
        let images = e.docker(&["images", "-q", "ahe-task"]).unwrap();
        assert!(!images.trim().is_empty(), "{} has no task image", e.name());
        let run = format!("ahe.run={}", out.file_name().unwrap().to_string_lossy());
        assert_eq!(e.containers(&run), Vec::<String>::new(), "{}", e.name());
    }
    // The plain progress lines say where each trial ran.
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("docker on 3 hosts (a ×1, b ×2, c ×3)"),
        "{stderr}"
    );
    for h in ["a", "b", "c"] {
        assert!(stderr.contains(&format!(": pass on {h} (")), "{stderr}");
    }
}

#[test]
fn killing_an_engine_mid_eval_loses_no_trial() {
    let _serial = serial();
    let Some([e1, e2, e3]) = engines() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let bench = d.path().join("bench");
    benchmark(&bench, 6, 4.0);
    let hosts = [host("a", e1, 2), host("b", e2, 2), host("c", e3, 2)];
    let cfg = config(d.path(), &bench, &hosts, 2);
    let out = d.path().join("kill");
    let run = format!("ahe.run={}", out.file_name().unwrap().to_string_lossy());
    let t0 = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(eval_args(&cfg, &bench, &out))
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill engine b once two trials run on it (each runs ~4 s after its start).
    let mut on_b = Vec::new();
    while on_b.len() < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(180),
            "no trials started on b"
        );
        on_b = e2.running(&run);
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let killed_at = t0.elapsed().as_secs_f64();
    e2.kill("KILL");
    let o = child.wait_with_output().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = json_file(&out.join("scores.json"));
    // Every task scored, every trial passed: none `fail` (nor infra) because of the kill.
    assert_eq!(s["pass_at_1"], 1.0, "{s:#}");
    assert_eq!(s["statuses"], serde_json::json!({"pass": 12}), "{s:#}");
    assert_eq!(s["tasks"].as_object().unwrap().len(), 6);
    let c = host_counts(&s);
    eprintln!(
        "12 trials, b killed at {killed_at:.1}s with {} trials on it, eval done in {secs:.1}s: {c:?}",
        on_b.len()
    );
    // The trials b held were lost, re-run on a or c, and not counted as infra retries.
    let lost = c["b"].1;
    assert!(lost >= 2, "{c:?}");
    let rerun: Vec<Value> = results(&out)
        .into_iter()
        .filter(|r| r.get("lost_hosts").is_some())
        .collect();
    assert_eq!(rerun.len() as u64, lost, "{rerun:#?}");
    for r in &rerun {
        assert_eq!(r["lost_hosts"], serde_json::json!(["b"]), "{r:#}");
        assert!(["a", "c"].contains(&r["host"].as_str().unwrap()), "{r:#}");
        assert_eq!(r["infra_retries"], 0, "{r:#}");
        assert!(
            r["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().unwrap().contains("docker host b")),
            "{r:#}"
        );
    }
    assert_eq!(c["a"].0 + c["b"].0 + c["c"].0, 12, "{c:?}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("host b: down"), "{stderr}");
    assert!(stderr.contains("(re-run: lost on b)"), "{stderr}");
    assert_eq!(s["meta"]["hosts"]["b"]["up"], false, "{s:#}");
    // Nothing of the run is left on the engines that lived.
    for e in [e1, e3] {
        assert_eq!(e.containers(&run), Vec::<String>::new(), "{}", e.name());
    }
    // Restarted, b still holds the lost containers; the next connection reaps them (their
    // ahe process is gone).
    e2.start().unwrap();
    assert!(
        !e2.containers(&run).is_empty(),
        "the lost containers vanished"
    );
    let b = ahe_sandbox::docker::DockerBackend::connect_to(&e2.url(), None).unwrap();
    assert!(b.reaped() >= 2, "reaped {}", b.reaped());
    assert_eq!(e2.containers(&run), Vec::<String>::new());
}

#[test]
fn a_lost_engine_is_probed_again_and_its_leftovers_removed() {
    let _serial = serial();
    let Some([e1, e2, _]) = engines() else {
        return;
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(probed_again(e1, e2));
}

/// The body of [`a_lost_engine_is_probed_again_and_its_leftovers_removed`].
async fn probed_again(e1: Engine, e2: Engine) {
    use ahe_sandbox::docker::{HostSpec, PoolBackend};
    use ahe_sandbox::{Backend, ExecOpts, SandboxSpec};
    let spec = |name: &str, e: Engine| HostSpec {
        url: e.url(),
        capacity: 1,
        name: Some(name.into()),
        tls: None,
        remote: false,
    };
    let hosts = [spec("a", e1), spec("b", e2)];
    let pool = tokio::task::spawn_blocking(move || PoolBackend::connect(&hosts))
        .await
        .unwrap()
        .unwrap()
        .with_reprobe(Duration::from_secs(1));
    let sandbox = |trial: &str| SandboxSpec {
        task: "probe".into(),
        trial_id: trial.into(),
        run: "pool-probe".into(),
        docker_image: Some(pool_support::BASE.into()),
        ..Default::default()
    };
    let on_a = pool.create(&sandbox("probe/1")).await.unwrap();
    let on_b = pool.create(&sandbox("probe/2")).await.unwrap();
    assert_eq!(on_a.host().as_deref(), Some("a"));
    assert_eq!(on_b.host().as_deref(), Some("b"));
    let ok = on_b.exec("echo hi", ExecOpts::default()).await.unwrap();
    assert_eq!(ok.stdout, "hi\n");
    let left = e2.containers("ahe.trial=probe/2");
    assert_eq!(left.len(), 1);
    e2.kill("KILL");
    // The monitor notices within a few seconds, without any call to the sandbox.
    let t0 = Instant::now();
    let why = tokio::time::timeout(Duration::from_secs(15), on_b.wait_lost())
        .await
        .expect("the lost engine was not noticed");
    eprintln!("b lost after {:.1}s: {why}", t0.elapsed().as_secs_f64());
    assert!(why.contains("docker host b"), "{why}");
    let e = on_b.exec("echo hi", ExecOpts::default()).await.unwrap_err();
    assert!(e.to_string().contains("the sandbox is lost"), "{e}");
    let loads = pool.hosts();
    assert!(loads[0].up && !loads[1].up, "{loads:?}");
    assert_eq!(loads[1].lost, 1, "{loads:?}");
    // a keeps working.
    let ok = on_a.exec("echo still", ExecOpts::default()).await.unwrap();
    assert_eq!(ok.stdout, "still\n");
    on_b.destroy().await.unwrap();
    drop(on_b);
    // Restarted, b is probed again (every second here) and the lost container removed.
    tokio::task::spawn_blocking(move || e2.start().unwrap())
        .await
        .unwrap();
    let t0 = Instant::now();
    while !pool.hosts()[1].up {
        assert!(t0.elapsed() < Duration::from_secs(30), "b not probed again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(e2.containers("ahe.trial=probe/2"), Vec::<String>::new());
    // New trials go to it again (a is full).
    let again = pool.create(&sandbox("probe/3")).await.unwrap();
    assert_eq!(again.host().as_deref(), Some("b"));
    assert_eq!(
        again
            .exec("echo back", ExecOpts::default())
            .await
            .unwrap()
            .stdout,
        "back\n"
    );
    again.destroy().await.unwrap();
    on_a.destroy().await.unwrap();
    pool.drain().await;
    assert_eq!(e1.containers("ahe.run=pool-probe"), Vec::<String>::new());
    assert_eq!(e2.containers("ahe.run=pool-probe"), Vec::<String>::new());
}

#[test]
fn check_names_every_engine() {
    let _serial = serial();
    let Some([e1, _, _]) = engines() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let bench = d.path().join("bench");
    benchmark(&bench, 1, 0.0);
    let hosts = [
        host("a", e1, 2),
        tls_host("c", 2),
        "{name = \"gone\", url = \"unix:///run/ahe-pool-none.sock\", capacity = 1}".into(),
    ];
    let cfg = config(d.path(), &bench, &hosts, 1);
    let o = ahe(&["check", "--config", cfg.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(
            "ok      docker host a: engine answers at unix:///run/ahe-pool-1.sock (capacity 2)"
        ),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "ok      docker host c: engine answers at tcp://{TLS_ADDR}"
        )),
        "{t}"
    );
    assert!(t.contains("PROBLEM docker host gone:"), "{t}");
    assert!(t.contains("fix sandbox.hosts[2]"), "{t}");
    assert!(t.contains("ok      image 1 tasks on host a:"), "{t}");
    assert!(t.contains("ok      image 1 tasks on host c:"), "{t}");
}
