//! Benchmark of the `docker` backend's overhead (image already built).
//!
//! Per trial: create the container + put a tests dir + exec a tiny verifier writing
//! `/logs/verifier/reward.txt` + get `/logs/verifier` + destroy (the removal itself runs in
//! the background). Trials run back to back; "per trial, amortized" is the wall time of all
//! of them, including waiting for the last removals, divided by their number: the engine
//! work the trial path does not wait for is in it. Per exec: `true` in a live container,
//! through the keeper and through `docker exec` (forced with an empty stdin).
//! `FRESH_NETNS=1` measures with a fresh network namespace per container.
//! Run with `scripts/bench-docker.sh` (needs an engine and `ahe-base:bookworm`).

use std::path::Path;
use std::time::{Duration, Instant};

use ahe_sandbox::docker::DockerBackend;
use ahe_sandbox::{Backend, ExecOpts, Sandbox, SandboxSpec};

/// Mean, p50, p95 and max of durations, in milliseconds.
fn stats(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mean = v.iter().map(|d| ms(*d)).sum::<f64>() / v.len() as f64;
    let pct = |p: f64| ms(v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]);
    println!(
        "  {name:<22} n={:<4} mean {mean:7.2} ms  p50 {:7.2} ms  p95 {:7.2} ms  max {:7.2} ms",
        v.len(),
        pct(0.50),
        pct(0.95),
        ms(*v.last().unwrap())
    );
}

/// Writes the build context and the tests dir.
fn fixtures(root: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(root.join("env"))?;
    std::fs::write(
        root.join("env/Dockerfile"),
        "FROM ahe-base:bookworm\nWORKDIR /app\nENV GREETING=hello\nCOPY input.txt ./\n\
         RUN echo \"$GREETING\" > /app/built.txt\n",
    )?;
    std::fs::write(root.join("env/input.txt"), "input\n")?;
    std::fs::create_dir_all(root.join("tests"))?;
    std::fs::write(
        root.join("tests/test.sh"),
        "#!/bin/bash\nif [ -f /app/built.txt ]; then echo 1 > /logs/verifier/reward.txt; \
         else echo 0 > /logs/verifier/reward.txt; fi\n",
    )?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (trials, execs) = (env("TRIALS", 30), env("EXECS", 200));
    let root = tempfile::tempdir()?;
    fixtures(root.path())?;
    let mut backend = DockerBackend::connect()?;
    if std::env::var("FRESH_NETNS").as_deref() == Ok("1") {
        backend = backend.with_fresh_netns();
    }
    let spec = SandboxSpec {
        task: "bench".into(),
        trial_id: "bench/1".into(),
        run: "bench-docker".into(),
        context_dir: Some(root.path().join("env")),
        cpus: Some(1.0),
        memory_mb: Some(512),
        ..Default::default()
    };
    let t = Instant::now();
    backend.image_for(&spec).await?;
    println!(
        "image ready in {:.2} s ({} builds); {trials} trials, {execs} execs:",
        t.elapsed().as_secs_f64(),
        backend.builds()
    );
    let mut phases: [Vec<Duration>; 6] = Default::default();
    let mut t_all = Instant::now();
    for i in 0..trials + 3 {
        if i == 3 {
            backend.drain().await;
            t_all = Instant::now();
        }
        let out = root.path().join(format!("out-{i}"));
        let t0 = Instant::now();
        let sb = backend.create(&spec).await?;
        let t1 = Instant::now();
        sb.put(&root.path().join("tests"), "/tests").await?;
        let t2 = Instant::now();
        let r = sb.exec("bash /tests/test.sh", ExecOpts::default()).await?;
        let t3 = Instant::now();
        sb.get("/logs/verifier", &out).await?;
        let t4 = Instant::now();
        sb.destroy().await?;
        let t5 = Instant::now();
        anyhow::ensure!(r.exit_code == Some(0), "verifier failed: {r:?}");
        let reward = std::fs::read_to_string(out.join("reward.txt"))?;
        anyhow::ensure!(reward.trim() == "1", "unexpected reward {reward:?}");
        if i >= 3 {
            for (k, d) in [t5 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4]
                .into_iter()
                .enumerate()
            {
                phases[k].push(d);
            }
        }
    }
    backend.drain().await;
    let amortized = t_all.elapsed() / trials as u32;
    let names = [
        "trial path",
        " create+start",
        " put tests",
        " exec verifier",
        " get verifier",
        " destroy",
    ];
    for (name, v) in names.iter().zip(phases) {
        stats(name, v);
    }
    println!(
        "  per trial, amortized   {:.2} ms ({} network holders)",
        amortized.as_secs_f64() * 1000.0,
        backend.netns_holders()
    );
    println!(
        "FIGURE docker_trial_ms {:.2}",
        amortized.as_secs_f64() * 1000.0
    );

    let sb = backend.create_docker(&spec).await?;
    for (name, stdin) in [
        ("exec `true` (keeper)", None),
        ("exec `true` (docker exec)", Some(vec![])),
    ] {
        let mut v = Vec::new();
        for i in 0..execs + 5 {
            let opts = ExecOpts {
                stdin: stdin.clone(),
                ..Default::default()
            };
            let t = Instant::now();
            let r = sb.exec("true", opts).await?;
            anyhow::ensure!(r.exit_code == Some(0), "{r:?}");
            if i >= 5 {
                v.push(t.elapsed());
            }
        }
        if stdin.is_none() {
            let mean = v.iter().map(Duration::as_secs_f64).sum::<f64>() / v.len() as f64;
            println!("FIGURE docker_exec_ms {:.2}", mean * 1000.0);
        }
        stats(name, v);
    }
    println!("  ({} execs took the keeper path)", sb.fast_execs());
    sb.destroy().await?;
    Ok(())
}
