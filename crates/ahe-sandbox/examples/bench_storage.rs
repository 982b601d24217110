//! Benchmark of storage-limit enforcement (`ahe_sandbox::storage::Meter`) on docker (when an
//! engine answers and `ahe-base:bookworm` exists) and local.
//!
//! 1. Watcher cost: a sandbox holding 10,000 small files in 100 dirs is watched
//!    for 10 s: walks, mean walk time, and the process's CPU time (getrusage) per second.
//! 2. Runaways under a 64 MiB limit: `yes > /app/big` (one file) and a loop writing 4 MiB
//!    files (many files): time from the command's start until the meter trips, the bytes
//!    seen then, and what the sandbox held when it was torn down.
//!
//! Run: `cargo run --release -p ahe-sandbox --example bench_storage`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ahe_sandbox::storage::Meter;
use ahe_sandbox::{Backend, ExecOpts, SandboxSpec};

fn cpu_secs() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn spec(ctx: &std::path::Path, storage_mb: u64) -> SandboxSpec {
    SandboxSpec {
        task: "bench-storage".into(),
        trial_id: "bench-storage".into(),
        run: "bench-storage".into(),
        context_dir: Some(ctx.to_path_buf()),
        storage_mb: Some(storage_mb),
        ..Default::default()
    }
}

async fn watcher_cost(name: &str, backend: &dyn Backend, ctx: &std::path::Path) {
    let sb = backend.create(&spec(ctx, 4096)).await.unwrap();
    let o = sb
        .exec(
            "for d in $(seq 100); do mkdir -p /app/t/$d; for f in $(seq 100); do echo x > /app/t/$d/$f; done; done; find /app | wc -l",
            ExecOpts::default(),
        )
        .await
        .unwrap();
    let entries = o.stdout.trim().to_string();
    let dirs = sb.storage_dirs().await;
    for n in [1usize, 8] {
        let c0 = cpu_secs();
        let t0 = Instant::now();
        let meters: Vec<Arc<Meter>> = (0..n)
            .map(|_| Meter::start(dirs.clone(), Some(4096)))
            .collect();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let secs = t0.elapsed().as_secs_f64();
        let cpu = cpu_secs() - c0;
        let st: Vec<_> = meters.iter().map(|m| m.stats()).collect();
        let walks: u64 = st.iter().map(|s| s.walks).sum();
        let walk_ms: f64 = st.iter().map(|s| s.walk_ms).sum();
        println!(
            "{name}: {n} watcher(s) of a tree of {entries} entries ({:.0} MiB): {} walks in {secs:.1} s, mean walk {:.1} ms, process CPU {:.1}% of one core ({:.2}% per watcher)",
            mib(st[0].peak_bytes),
            walks,
            walk_ms / walks.max(1) as f64,
            cpu / secs * 100.0,
            cpu / secs * 100.0 / n as f64
        );
        drop(meters);
    }
    sb.destroy().await.unwrap();
}

async fn runaway(name: &str, backend: &dyn Backend, ctx: &std::path::Path, what: &str, cmd: &str) {
    let sb = backend.create(&spec(ctx, 64)).await.unwrap();
    let m = Meter::start(sb.storage_dirs().await, Some(64));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = Instant::now();
    let run = sb.exec(
        cmd,
        ExecOpts {
            timeout: Some(Duration::from_secs(30)),
            ..Default::default()
        },
    );
    let stopped = tokio::select! {
        _ = run => None,
        s = m.wait_stop() => Some(s),
    };
    let tripped = t0.elapsed();
    let seen = m.bytes();
    // What the sandbox holds once the writer is stopped (the trial destroys it now).
    let after = ahe_sandbox::storage::usage(m.dirs()).0;
    sb.destroy().await.unwrap();
    backend.drain().await;
    println!(
        "{name} {what}: {} after {:.0} ms, {:.1} MiB seen by the meter, {:.1} MiB in the sandbox at teardown (limit 64 MiB)",
        if stopped.is_some() { "stopped" } else { "NOT stopped" },
        tripped.as_secs_f64() * 1000.0,
        mib(seen),
        mib(after)
    );
}

#[tokio::main]
async fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = tmp.path().join("env");
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        "FROM ahe-base:bookworm\nWORKDIR /app\n",
    )
    .unwrap();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "cores {}, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.trim()
    );
    let mut backends: Vec<(&str, Box<dyn Backend>)> = vec![(
        "local",
        Box::new(ahe_sandbox::local::LocalBackend::detect()),
    )];
    if ahe_sandbox::docker::DockerBackend::available() {
        backends.push((
            "docker",
            Box::new(ahe_sandbox::docker::DockerBackend::connect().unwrap()),
        ));
    }
    for (name, b) in &backends {
        watcher_cost(name, b.as_ref(), &ctx).await;
        for (what, cmd) in [
            ("one file (yes > /app/big)", "yes ahe > /app/big; sleep 20"),
            (
                "many 4 MiB files",
                "i=0; while :; do i=$((i+1)); head -c 4M /dev/zero > /app/f$i; done",
            ),
            (
                "8 parallel 32 MiB writers",
                "for i in 1 2 3 4 5 6 7 8; do head -c 32M /dev/zero > /app/p$i & done; wait; sleep 20",
            ),
        ] {
            runaway(name, b.as_ref(), &ctx, what, cmd).await;
        }
    }
}
