//! What the in-sandbox change checks (`ahe_bench::inside`: ahe's static busybox walking the
//! sandbox where this host cannot read its layer) cost per trial, on real images: for each
//! image, a docker container of it, then the baseline walk, the hand-over with its walk after
//! an agent phase that wrote FILES files, the access-time reset of those files, and the walk
//! after the verifier with the copy-out of the changed files. Prints `FIGURE` lines.
//! Args: images (default `ahe-base:bookworm python:3.13-slim-bookworm ubuntu:24.04`).
//! Env: TRIALS (default 3 per image), FILES (default 50).

use std::time::{Duration, Instant};

use ahe_bench::inside::Inside;
use ahe_sandbox::docker::DockerBackend;
use ahe_sandbox::{
    handover_script, Backend, ExecOpts, LeftoverPolicy, SandboxSpec, START_WINDOW_SECS,
};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn one(backend: &dyn Backend, image: &str, files: usize) -> anyhow::Result<[f64; 5]> {
    let spec = SandboxSpec {
        task: "inside".into(),
        trial_id: "bench".into(),
        run: "bench-inside".into(),
        docker_image: Some(image.into()),
        ..Default::default()
    };
    let sb = backend.create(&spec).await?;
    let mut inside = Inside::new().map_err(anyhow::Error::msg)?;
    let t0 = Instant::now();
    let base = inside
        .walk(sb.as_ref(), None)
        .await
        .map_err(anyhow::Error::msg)?;
    let t1 = Instant::now();
    let write =
        format!("mkdir -p /app/x && for n in $(seq {files}); do echo $n > /app/x/f$n; done");
    sb.exec(&write, ExecOpts::default()).await?;
    let t2 = Instant::now();
    let ho = handover_script(LeftoverPolicy::KeepServers, 1, START_WINDOW_SECS);
    inside
        .walk(sb.as_ref(), Some(ho))
        .await
        .map_err(anyhow::Error::msg)?;
    let t3 = Instant::now();
    let paths: Vec<String> = (1..=files).map(|n| format!("/app/x/f{n}")).collect();
    inside
        .reset(sb.as_ref(), &paths)
        .await
        .map_err(anyhow::Error::msg)?;
    let t4 = Instant::now();
    let kill = handover_script(LeftoverPolicy::Kill, 1, 0);
    inside
        .walk(sb.as_ref(), Some(kill))
        .await
        .map_err(anyhow::Error::msg)?;
    inside
        .copy_out(sb.as_ref(), &paths, &[])
        .await
        .map_err(anyhow::Error::msg)?;
    let t5 = Instant::now();
    sb.destroy().await?;
    Ok([
        ms(t1 - t0),
        ms(t3 - t2),
        ms(t4 - t3),
        ms(t5 - t4),
        base.snapshot.len() as f64,
    ])
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut images: Vec<String> = std::env::args().skip(1).collect();
    if images.is_empty() {
        images = [
            "ahe-base:bookworm",
            "python:3.13-slim-bookworm",
            "ubuntu:24.04",
        ]
        .map(String::from)
        .to_vec();
    }
    let (trials, files) = (env_or("TRIALS", 3), env_or("FILES", 50));
    let backend = DockerBackend::connect()?;
    for image in &images {
        let mut sum = [0.0; 5];
        for _ in 0..trials {
            let r = one(&backend, image, files).await?;
            for (s, v) in sum.iter_mut().zip(r) {
                *s += v / trials as f64;
            }
        }
        let total = sum[0] + sum[1] + sum[2] + sum[3];
        println!(
            "FIGURE inside {image}: {:.0} entries; baseline {:.0} ms, hand-over+walk {:.0} ms, \
             reset {files} files {:.0} ms, walk+copy-out {:.0} ms; total {total:.0} ms per trial",
            sum[4], sum[0], sum[1], sum[2], sum[3]
        );
    }
    backend.drain().await;
    Ok(())
}
