//! The reward-integrity change checks on a large change set, on the host, step by step: a
//! writable layer holding what a real Terminal-Bench solution leaves (a pip install into a
//! venv: thousands of modules with their RECORD; an apt install: libraries, programs, dpkg
//! records, a rewritten loader cache), over an image with a Python standard library. Times
//! each step the trial's guard takes (snapshots, change set, access-time resets, rules) and
//! prints `FIGURE` lines for `scripts/bench-integrity.sh`. The verifier's run then unpacks as
//! many files again into a new cache directory (as `uvx` does), which the verdict does not
//! walk into. Env: FILES (default 17000), RUNS (default 5).

use std::path::Path;
use std::time::Instant;

use ahe_bench::changes::{self, Changed, Kind, Snapshot};
use ahe_bench::integrity::{self, Ground, Phase};
use ahe_sandbox::Layer;

fn put(root: &Path, p: &str, content: &[u8]) {
    let h = root.join(p.trim_start_matches('/'));
    std::fs::create_dir_all(h.parent().unwrap()).unwrap();
    std::fs::write(h, content).unwrap();
}

/// An image with a standard library of ~`n / 4` modules.
fn image(lower: &Path, n: usize) {
    for i in 0..n / 4 {
        put(
            lower,
            &format!("/usr/local/lib/python3.13/pkg{}/mod{i}.py", i % 50),
            b"x = 1\n",
        );
    }
    for i in 0..50 {
        put(
            lower,
            &format!("/usr/local/lib/python3.13/pkg{i}/__init__.py"),
            b"",
        );
    }
    put(lower, "/usr/local/bin/python3", b"\x7fELF");
    put(lower, "/usr/bin/sha256sum", b"\x7fELF");
    put(lower, "/etc/ld.so.cache", b"");
}

/// What the agent phase leaves: a venv of `n` modules with RECORD, an apt install.
fn agent_phase(upper: &Path, n: usize) {
    let site = "/opt/svc/venv/lib/python3.13/site-packages";
    let mut record = String::new();
    for i in 0..n {
        let rel = format!("lib{}/m{i}.py", i % 200);
        let body = format!("def f{i}(): return {i}\n");
        put(upper, &format!("{site}/{rel}"), body.as_bytes());
        record.push_str(&format!("{rel},,\n"));
    }
    for i in 0..200 {
        put(upper, &format!("{site}/lib{i}/__init__.py"), b"");
    }
    put(
        upper,
        &format!("{site}/svc-1.0.dist-info/RECORD"),
        record.as_bytes(),
    );
    for i in 0..100 {
        put(
            upper,
            &format!("/usr/lib/x86_64-linux-gnu/libnew{i}.so.1"),
            b"\x7fELF",
        );
        put(upper, &format!("/usr/bin/tool{i}"), b"\x7fELF");
    }
    put(upper, "/var/lib/dpkg/info/new.md5sums", b"");
    put(upper, "/app/server.py", b"print('serve')\n");
}

/// How the access-time probe is armed: reset only the files whose next read would not show
/// (the product), or every file of the change set (before 2026-12-05), for a side-by-side.
#[derive(Clone, Copy, PartialEq)]
enum Probe {
    WhereNeeded,
    Every,
}

/// CPU time of this process so far (every thread, user and system), in ms: on shared cores
/// the wall time of a step is mostly waiting for one.
fn cpu_ms() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    ms(u.ru_utime) + ms(u.ru_stime)
}

/// One trial's checks on a fresh layer: (step times in ms, the last their CPU time; files
/// changed, resets).
fn one_run(files: usize, probe: Probe) -> ([f64; 6], usize, usize) {
    let mut cpu = 0.0;
    let dir = tempfile::tempdir().unwrap();
    let (lower, upper) = (dir.path().join("lower"), dir.path().join("upper"));
    image(&lower, files);
    std::fs::create_dir_all(&upper).unwrap();
    let layer = Layer {
        upper: vec![("/".into(), upper.clone())],
        lower: vec![lower],
        lower_tops: None,
        overlay: true,
        path_env: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        image_paths: None,
    };
    let g = Ground {
        layer: &layer,
        workdir: "/app",
        named: vec![],
        code: Vec::new(),
        rewritten: Default::default(),
    };
    let (t, c) = (Instant::now(), cpu_ms());
    let before = Snapshot::take(&layer);
    let t_before = t.elapsed();
    cpu += cpu_ms() - c;
    agent_phase(&upper, files);
    // The solution's own service reads its module after writing it (a reset is needed).
    let _ = std::fs::read(upper.join("app/server.py"));
    let (t, c) = (Instant::now(), cpu_ms());
    let mut handed = Snapshot::take(&layer);
    let agent = handed.changes_since(&before, &layer);
    let _stale = integrity::stale_caches(&agent);
    let t_after = t.elapsed();
    cpu += cpu_ms() - c;
    let (t, c) = (Instant::now(), cpu_ms());
    let now = changes::now();
    let reset: Vec<&Changed> = agent
        .iter()
        .filter(|c| c.kind == Kind::File)
        .filter(|c| probe == Probe::Every || handed.needs_reset(&c.path, now))
        .filter(|c| changes::reset_atime(&c.host).is_ok())
        .collect();
    let resets = reset.len();
    handed.refresh(reset);
    let t_arm = t.elapsed();
    cpu += cpu_ms() - c;
    // The verifier reads a few of the files (the server module, one program).
    let _ = std::fs::read(upper.join("app/server.py"));
    let _ = std::fs::read(upper.join("usr/bin/tool3"));
    verifier_phase(&upper, files);
    let (t, c) = (Instant::now(), cpu_ms());
    let after = Snapshot::take_after(&layer, &handed, &|p| p.starts_with("/app/"));
    let read = |c: &Changed| match probe {
        Probe::WhereNeeded => after.read_since(&handed, &c.path),
        Probe::Every => changes::read_since_reset(&c.host),
    };
    let mut reasons = integrity::judge(&g, &agent, Phase::Agent, &read);
    let during = after.changes_since(&handed, &layer);
    reasons.extend(integrity::judge(
        &g,
        &during,
        Phase::Verifier { kept: false },
        &|_| true,
    ));
    let t_verdict = t.elapsed();
    cpu += cpu_ms() - c;
    assert!(reasons.is_empty(), "{reasons:?}");
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    let steps = [ms(t_before), ms(t_after), ms(t_arm), ms(t_verdict)];
    let total = steps.iter().sum();
    let all = [steps[0], steps[1], steps[2], steps[3], total, cpu];
    (all, agent.len(), resets)
}

/// What the verifier's own run leaves (uvx unpacking its test dependencies into a cache):
/// `n` modules with their RECORD, all created while it ran.
fn verifier_phase(upper: &Path, n: usize) {
    let site = "/root/.cache/uv/archive-v0/abc/lib/python3.13/site-packages";
    let mut record = String::new();
    for i in 0..n {
        let rel = format!("dep{}/m{i}.py", i % 300);
        put(upper, &format!("{site}/{rel}"), b"x = 1\n");
        record.push_str(&format!("{rel},,\n"));
    }
    put(
        upper,
        &format!("{site}/dep-1.0.dist-info/RECORD"),
        record.as_bytes(),
    );
}

fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (files, runs) = (env("FILES", 17_000), env("RUNS", 5));
    let names = [
        "before",
        "after_agent",
        "arm",
        "verdict",
        "total",
        "total_cpu",
    ];
    let probes = [(Probe::WhereNeeded, ""), (Probe::Every, "_reset_every")];
    // Run by run, the two probes in turn: both meet the machine's load alike.
    let mut steps = vec![vec![Vec::new(); names.len()]; probes.len()];
    let mut seen = [(0, 0); 2];
    for _ in 0..runs {
        for (k, (probe, _)) in probes.iter().enumerate() {
            let (ms, c, r) = one_run(files, *probe);
            seen[k] = (c, r);
            for (i, v) in ms.into_iter().enumerate() {
                steps[k][i].push(v);
            }
        }
    }
    for (k, (_, tag)) in probes.iter().enumerate() {
        println!(
            "change set: {} files created by the agent phase ({} access times reset), {runs} runs",
            seen[k].0, seen[k].1
        );
        for (name, v) in names.iter().zip(&mut steps[k]) {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "FIGURE integrity_large{tag}_{name}_ms {:.1}",
                v[v.len() / 2]
            );
        }
    }
}
