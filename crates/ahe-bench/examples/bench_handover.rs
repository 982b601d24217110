//! What the verifier hand-over adds to a trial, per backend: fingerprinting the programs
//! `tests/test.sh` runs before the agent, and the one-exec hand-over: ending the agent's
//! leftovers (one background process left, as an agent that started a job would), the reset
//! of `/tests`, `/solution`, `/logs/verifier` and the second fingerprint. Prints `FIGURE` lines for
//! `scripts/bench.sh`. Env: TRIALS (default 30).

use std::time::{Duration, Instant};

use ahe_bench::{tamper, verify};
use ahe_sandbox::docker::DockerBackend;
use ahe_sandbox::local::LocalBackend;
use ahe_sandbox::{Backend, ExecOpts, LeftoverPolicy, SandboxSpec};

/// A Terminal-Bench-like `test.sh` (its programs are what gets fingerprinted).
const TEST_SH: &str = "#!/bin/bash\napt-get update\napt-get install -y curl\n\
    curl -LsSf https://astral.sh/uv/install.sh | sh\nsource $HOME/.local/bin/env\n\
    if python3 -m pytest /tests/test_outputs.py -rA; then echo 1 > /logs/verifier/reward.txt; \
    else echo 0 > /logs/verifier/reward.txt; fi\n";

fn mean_ms(v: &[Duration]) -> f64 {
    v.iter().map(|d| d.as_secs_f64() * 1000.0).sum::<f64>() / v.len().max(1) as f64
}

async fn bench(name: &str, backend: &dyn Backend, trials: usize) -> anyhow::Result<()> {
    let ctx = tempfile::tempdir()?;
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM ahe-base:bookworm\nWORKDIR /app\n",
    )?;
    let spec = SandboxSpec {
        task: "handover".into(),
        trial_id: "bench".into(),
        run: "bench-handover".into(),
        context_dir: Some(ctx.path().to_path_buf()),
        ..Default::default()
    };
    let programs = tamper::runner_programs(TEST_SH);
    let mut phases: [Vec<Duration>; 3] = Default::default();
    for i in 0..trials + 2 {
        let sb = backend.create(&spec).await?;
        let programs = if sb.path_writable() {
            programs.clone()
        } else {
            Vec::new()
        };
        let t0 = Instant::now();
        let before = verify::fingerprint(sb.as_ref(), &programs).await;
        let t1 = Instant::now();
        sb.exec("sleep 1000 >/dev/null 2>&1 &", ExecOpts::default())
            .await?;
        let t2 = Instant::now();
        let (h, after) =
            verify::hand_over(sb.as_ref(), LeftoverPolicy::KeepServers, &programs).await?;
        let t3 = Instant::now();
        let t4 = Instant::now();
        sb.exec("true", ExecOpts::default()).await?;
        phases[2].push(t4.elapsed());
        anyhow::ensure!(h.killed >= 1, "nothing killed: {h:?}");
        anyhow::ensure!(after.changes_since(&before).is_empty(), "false alarm");
        sb.destroy().await?;
        if i >= 2 {
            phases[0].push(t1 - t0);
            phases[1].push(t3 - t2);
        }
    }
    backend.drain().await;
    let [fp, hand, exec] = phases.map(|v| mean_ms(&v));
    println!(
        "{name}: fingerprint before the agent {fp:.2} ms + hand-over (end leftovers, reset, \
         fingerprint again) {hand:.2} ms = {:.2} ms per trial ({trials} trials, {} programs; \
         an exec of `true` takes {exec:.2} ms here)",
        fp + hand,
        programs.len()
    );
    println!("FIGURE {name}_handover_ms {:.2}", fp + hand);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let trials: usize = std::env::var("TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    if LocalBackend::bubblewrap_available() {
        bench("local", &LocalBackend::bubblewrap(), trials).await?;
    } else {
        println!("local: bubblewrap unavailable, skipped");
    }
    if DockerBackend::available() {
        bench("docker", &DockerBackend::connect()?, trials).await?;
    } else {
        println!("docker: no engine answers, skipped");
    }
    Ok(())
}
