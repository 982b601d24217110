//! What the verifier hand-over adds to a trial, per backend: fingerprinting the programs
//! `tests/test.sh` runs before the agent, and the one-exec hand-over: ending the agent's
//! leftovers, the reset of `/tests`, `/solution`, `/logs/verifier` and the second fingerprint.
//! Trials alternate between an agent that left nothing and one that left an idle background
//! process (`sleep 1000`, as an agent that started a job would): the hand-over waits at least
//! 2 s for such a leftover to bind a port before it kills it (docs/reward-integrity.md,
//! "Services and leftovers"), so the two are reported apart. Prints `FIGURE` lines for
//! `scripts/bench.sh`. Env: TRIALS (default 30, per kind).

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
    // Fingerprint; hand-over with nothing left; hand-over with an idle leftover; exec.
    let mut phases: [Vec<Duration>; 4] = Default::default();
    for i in 0..2 * trials + 4 {
        let idle = i % 2 == 1;
        let sb = backend.create(&spec).await?;
        let programs = if sb.path_writable() {
            programs.clone()
        } else {
            Vec::new()
        };
        let t0 = Instant::now();
        let before = verify::fingerprint(sb.as_ref(), &programs).await;
        let t1 = Instant::now();
        if idle {
            sb.exec("sleep 1000 >/dev/null 2>&1 &", ExecOpts::default())
                .await?;
        }
        let t2 = Instant::now();
        let (h, after) = verify::hand_over(
            sb.as_ref(),
            (LeftoverPolicy::KeepServers, 30),
            &programs,
            None,
        )
        .await?;
        let t3 = Instant::now();
        let t4 = Instant::now();
        sb.exec("true", ExecOpts::default()).await?;
        phases[3].push(t4.elapsed());
        anyhow::ensure!(
            (h.killed >= 1) == idle,
            "killed {} with idle = {idle}: {h:?}",
            h.killed
        );
        anyhow::ensure!(after.changes_since(&before).is_empty(), "false alarm");
        sb.destroy().await?;
        if i >= 4 {
            phases[0].push(t1 - t0);
            phases[if idle { 2 } else { 1 }].push(t3 - t2);
        }
    }
    backend.drain().await;
    let [fp, hand, hand_idle, exec] = phases.map(|v| mean_ms(&v));
    println!(
        "{name}: fingerprint before the agent {fp:.2} ms + hand-over (end leftovers, reset, \
         fingerprint again) {hand:.2} ms with nothing left = {:.2} ms per trial, {:.2} ms with \
         an idle leftover ({trials} trials each, {} programs; an exec of `true` takes {exec:.2} \
         ms here)",
        fp + hand,
        fp + hand_idle,
        programs.len()
    );
    println!("FIGURE {name}_handover_ms {:.2}", fp + hand);
    println!("FIGURE {name}_handover_idle_ms {:.2}", fp + hand_idle);
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
