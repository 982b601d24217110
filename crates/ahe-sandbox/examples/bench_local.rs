//! Benchmark of the `local` backend's overhead (bubblewrap and plain mode).
//!
//! Per trial: create (Dockerfile: WORKDIR, ENV, COPY one file, one RUN) + put a tests dir +
//! exec a tiny verifier writing `/logs/verifier/reward.txt` + get `/logs/verifier` + destroy.
//! Per exec: `true` in a live sandbox. Run with `scripts/bench-local.sh`.

use std::path::Path;
use std::time::{Duration, Instant};

use ahe_sandbox::local::LocalBackend;
use ahe_sandbox::{Backend, ExecOpts, SandboxSpec};

/// Prints mean, p50, p95 and max of durations in milliseconds; returns the mean.
fn stats(name: &str, mut v: Vec<Duration>) -> f64 {
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
    mean
}

/// Writes the build context and the tests dir.
fn fixtures(root: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(root.join("env"))?;
    std::fs::write(
        root.join("env/Dockerfile"),
        "FROM ubuntu:24.04\nWORKDIR /app\nENV GREETING=hello\nCOPY input.txt ./\n\
         RUN echo \"$GREETING\" > ${AHE_SANDBOX_FS:-}/app/built.txt\n",
    )?;
    std::fs::write(root.join("env/input.txt"), "input\n")?;
    std::fs::create_dir_all(root.join("tests"))?;
    std::fs::write(
        root.join("tests/test.sh"),
        "#!/bin/bash\n# AHE_SANDBOX_FS is only set in plain mode (paths are not remapped there).\n\
         R=${AHE_SANDBOX_FS:-}\nif [ -f $R/app/built.txt ]; then echo 1 > $R/logs/verifier/reward.txt; \
         else echo 0 > $R/logs/verifier/reward.txt; fi\n",
    )?;
    Ok(())
}

/// Measures one mode; `figure` prefixes its `FIGURE <figure>_trial_ms|_exec_ms` lines.
async fn bench(
    figure: &str,
    backend: &LocalBackend,
    root: &Path,
    trials: usize,
    execs: usize,
) -> anyhow::Result<()> {
    let spec = SandboxSpec {
        task: "bench".into(),
        trial_id: "trial".into(),
        run: "bench".into(),
        context_dir: Some(root.join("env")),
        ..Default::default()
    };
    let mut phases: [Vec<Duration>; 6] = Default::default();
    for i in 0..trials + 3 {
        let out = root.join(format!("out-{i}"));
        let t0 = Instant::now();
        let sb = backend.create(&spec).await?;
        let t1 = Instant::now();
        sb.put(&root.join("tests"), "/tests").await?;
        let t2 = Instant::now();
        let r = sb
            .exec(
                "bash ${AHE_SANDBOX_FS:-}/tests/test.sh",
                ExecOpts::default(),
            )
            .await?;
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
    let names = [
        "trial total",
        " create+setup",
        " put tests",
        " exec verifier",
        " get verifier",
        " destroy",
    ];
    let mut trial_ms = 0.0;
    for (i, (name, v)) in names.iter().zip(phases).enumerate() {
        let mean = stats(name, v);
        if i == 0 {
            trial_ms = mean;
        }
    }

    let sb = backend.create(&spec).await?;
    let mut v = Vec::new();
    for i in 0..execs + 5 {
        let t = Instant::now();
        let r = sb.exec("true", ExecOpts::default()).await?;
        anyhow::ensure!(r.exit_code == Some(0), "{r:?}");
        if i >= 5 {
            v.push(t.elapsed());
        }
    }
    let exec_ms = stats("exec `true`", v);
    sb.destroy().await?;
    println!("FIGURE {figure}_trial_ms {trial_ms:.2}");
    println!("FIGURE {figure}_exec_ms {exec_ms:.2}");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let trials: usize = std::env::var("TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let execs: usize = std::env::var("EXECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let root = tempfile::tempdir()?;
    fixtures(root.path())?;
    if LocalBackend::bubblewrap_available() {
        println!("bubblewrap ({trials} trials, {execs} execs):");
        bench(
            "local",
            &LocalBackend::bubblewrap(),
            root.path(),
            trials,
            execs,
        )
        .await?;
    } else {
        println!("bubblewrap: not available, skipped");
    }
    println!("plain ({trials} trials, {execs} execs):");
    bench(
        "local_plain",
        &LocalBackend::plain(),
        root.path(),
        trials,
        execs,
    )
    .await?;
    Ok(())
}
