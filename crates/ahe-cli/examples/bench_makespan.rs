//! How close an iteration's wall time comes to its floor: a simulated Terminal-Bench-2-like
//! iteration (89 tasks, k trials, agent times with TB2's spread: many short, a long tail,
//! capped at the task timeouts) run through the real scheduler (`ahe_bench::run_eval`) and
//! the real debugger overlap (`ahe_evolve::debug::overlap`), with agents and debuggers that sleep
//! their (scaled) durations in no-op sandboxes. Prints wall time / lower bound, where the
//! bound is max(total trial work / slots, longest trial + its debugger), for the old order
//! (attempt waves in task order, debug phase after the rollout) and the new one.
//!
//! Usage: bench_makespan [--tasks 89] [--k 2] [--slots 16] [--debuggers 4] [--ms-per-sec 1]
//! [--seed 7]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahe_bench::{
    Agent, AgentContext, AgentEnd, AgentOutcome, EvalOptions, Progress, Schedule, Task, TrialEnv,
};
use ahe_evolve::debug::overlap::{DebugJob, DebugOverlap};
use ahe_evolve::debug::task::TaskDebug;
use ahe_sandbox::{Backend, ExecOpts, ExecOutput, Sandbox, SandboxSpec};

/// A sandbox that does nothing; its verifier writes reward 1.
struct Noop;

#[async_trait::async_trait]
impl Sandbox for Noop {
    async fn exec(&self, _: &str, _: ExecOpts) -> ahe_sandbox::Result<ExecOutput> {
        Ok(ExecOutput {
            exit_code: Some(0),
            ..Default::default()
        })
    }
    async fn put(&self, _: &Path, _: &str) -> ahe_sandbox::Result<()> {
        Ok(())
    }
    async fn get(&self, _: &str, dest: &Path) -> ahe_sandbox::Result<ahe_sandbox::CopyOut> {
        std::fs::create_dir_all(dest)?;
        std::fs::write(dest.join("reward.txt"), "1\n")?;
        Ok(Default::default())
    }
    fn handover_command(&self, _: ahe_sandbox::LeftoverPolicy, _: u32) -> Option<String> {
        None
    }
    fn workdir(&self) -> &str {
        "/app"
    }
    async fn destroy(&self) -> ahe_sandbox::Result<()> {
        Ok(())
    }
}

/// Hands out [`Noop`] sandboxes.
struct NoopBackend;

#[async_trait::async_trait]
impl Backend for NoopBackend {
    fn name(&self) -> &'static str {
        "simulated"
    }
    async fn create(&self, _: &SandboxSpec) -> ahe_sandbox::Result<Box<dyn Sandbox>> {
        Ok(Box::new(Noop))
    }
}

/// A code agent whose model "thinks" for the trial's simulated agent time.
struct Sleeper {
    /// Simulated seconds per (task, attempt).
    secs: BTreeMap<(String, u32), f64>,
    scale: Duration,
}

#[async_trait::async_trait]
impl Agent for Sleeper {
    async fn run(&self, ctx: AgentContext<'_>) -> AgentOutcome {
        let attempt: u32 = ctx
            .trial_dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .parse()
            .unwrap();
        let s = self.secs[&(ctx.task.name.clone(), attempt)];
        tokio::time::sleep(self.scale.mul_f64(s)).await;
        AgentOutcome::ended(AgentEnd::Finished, None)
    }
}

/// splitmix64, then a uniform in (0, 1).
fn uniform(i: u64) -> f64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64 + 1e-12
}

/// A standard normal (Box-Muller) from two seeds.
fn normal(a: u64, b: u64) -> f64 {
    (-2.0 * uniform(a).ln()).sqrt() * (std::f64::consts::TAU * uniform(b)).cos()
}

/// One simulated iteration's inputs.
struct World {
    tasks: Vec<Task>,
    /// Agent seconds per trial (this iteration).
    trial: BTreeMap<(String, u32), f64>,
    /// Mean agent seconds per task in the previous iteration (the scheduler's estimate).
    previous: BTreeMap<String, f64>,
    /// Debugger seconds per task (0: passing task, deterministic report only).
    debugger: BTreeMap<String, f64>,
    /// Debugger seconds per task in the previous iteration (tasks that failed then).
    prev_debugger: BTreeMap<String, f64>,
}

fn world(root: &Path, n: usize, k: u32, seed: u64) -> World {
    let mut trial = BTreeMap::new();
    let (mut previous, mut debugger) = (BTreeMap::new(), BTreeMap::new());
    let mut prev_debugger = BTreeMap::new();
    let r = |i: u64, j: u64| seed * 1_000_003 + i * 101 + j;
    for i in 0..n as u64 {
        let name = format!("task-{i:02}");
        // TB2 timeouts: mostly 15 min, some 30 min, a few 1-2 h.
        let u = uniform(r(i, 1));
        let timeout = if u < 0.75 {
            900.0
        } else if u < 0.93 {
            1800.0
        } else {
            3600.0
        };
        // Agent times: log-normal, median 3 min, sigma 1.1 (many short, a long tail).
        let base = 180.0 * (1.1 * normal(r(i, 2), r(i, 3))).exp();
        let noisy = |j: u64| (base * (0.25 * normal(r(i, j), r(i, j + 50))).exp()).min(timeout);
        for a in 1..=k {
            trial.insert((name.clone(), a), noisy(10 + a as u64).max(5.0));
        }
        let prev: f64 = (1..=k).map(|a| noisy(30 + a as u64)).sum::<f64>() / k as f64;
        previous.insert(name.clone(), prev);
        // About half the tasks fail and get an LLM debugger of 1-5 min.
        let d = if uniform(r(i, 4)) < 0.5 {
            60.0 + 240.0 * uniform(r(i, 5))
        } else {
            0.0
        };
        debugger.insert(name.clone(), d);
        // The previous iteration's verdict agrees with this one's 85% of the time; its
        // debugger took 1-5 min too.
        if (d > 0.0) != (uniform(r(i, 6)) < 0.15) {
            prev_debugger.insert(name.clone(), 60.0 + 240.0 * uniform(r(i, 7)));
        }
        let dir = root.join(&name);
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::write(dir.join("instruction.md"), "Simulated.\n").unwrap();
        std::fs::write(dir.join("tests/test.sh"), "#!/bin/bash\n").unwrap();
        let toml =
            format!("[agent]\ntimeout_sec = {timeout}\n[environment]\ndocker_image = \"x\"\n");
        std::fs::write(dir.join("task.toml"), toml).unwrap();
    }
    let (tasks, errors) = ahe_bench::load_benchmark(root).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    World {
        tasks,
        trial,
        previous,
        debugger,
        prev_debugger,
    }
}

/// What one simulated iteration measured, in simulated seconds.
#[derive(Clone)]
struct Measured {
    rollout: f64,
    wall: f64,
    /// Debugger seconds spent before the last trial ended, and in all.
    debug_hidden: f64,
    debug_total: f64,
}

struct Args {
    tasks: usize,
    k: u32,
    slots: usize,
    debuggers: usize,
    ms_per_sec: f64,
    seed: u64,
}

async fn iteration(w: &World, a: &Args, schedule: Schedule, overlap: bool) -> Measured {
    let scale = Duration::from_secs_f64(a.ms_per_sec / 1000.0);
    let tmp = tempfile::tempdir().unwrap();
    let sleeps = w.debugger.clone();
    let job: DebugJob = Arc::new(move |task: String, ts: ahe_bench::scores::TaskScore| {
        let secs = sleeps[&task];
        Box::pin(async move {
            tokio::time::sleep(scale.mul_f64(secs)).await;
            TaskDebug {
                task,
                status: ts.status,
                marks: String::new(),
                line: String::new(),
                out: None,
                spent: Default::default(),
            }
        })
    });
    let names: BTreeSet<String> = w.tasks.iter().map(|t| t.name.clone()).collect();
    let dbg = Arc::new(DebugOverlap::new(a.k, names, a.debuggers, None, job));
    let d2 = dbg.clone();
    let progress = Arc::new(move |p: Progress| {
        if let (true, Progress::TrialDone { result }) = (overlap, &p) {
            d2.trial_done(result);
        }
    });
    let env = TrialEnv {
        backend: Arc::new(NoopBackend),
        agent: Arc::new(Sleeper {
            secs: w.trial.clone(),
            scale,
        }),
        run: "bench".into(),
        default_agent_timeout: Duration::from_secs(3600),
        infra_retries: 0,
        verifier: Default::default(),
        judge: None,
        disk: None,
    };
    let opts = EvalOptions {
        k: a.k,
        concurrency: a.slots,
        out_dir: tmp.path().to_path_buf(),
        cancel: Default::default(),
        prior: Vec::new(),
        schedule,
        expected_sec: if schedule == Schedule::LongestFirst {
            expected(w, a)
        } else {
            BTreeMap::new()
        },
    };
    let t0 = Instant::now();
    ahe_bench::run_eval(env, &w.tasks, &opts, progress)
        .await
        .unwrap();
    let rollout_end = Instant::now();
    if !overlap {
        // The old debug phase: every task's debugger after the last trial.
        let all =
            ahe_rundir::clean::load_results(&ahe_bench::EvalDir::new(tmp.path()).trials()).unwrap();
        dbg.prime(&all);
    }
    let (_, spans) = dbg.finish().await;
    let end = spans
        .iter()
        .map(|s| s.end)
        .max()
        .unwrap_or(rollout_end)
        .max(rollout_end);
    let sim = |d: Duration| d.as_secs_f64() / scale.as_secs_f64();
    let busy = |s: &ahe_evolve::debug::overlap::Span| sim(s.end - s.start);
    let hidden: f64 = spans
        .iter()
        .map(|s| sim(s.end.min(rollout_end).saturating_duration_since(s.start)))
        .sum();
    Measured {
        rollout: sim(rollout_end - t0),
        wall: sim(end - t0),
        debug_hidden: hidden,
        debug_total: spans.iter().map(busy).sum(),
    }
}

/// The scheduler's key per task, as `ahe evolve` computes it from the previous iteration
/// (`ahe_evolve::debug::overlap::expected_with_debugger`): mean trial seconds plus the debugger's
/// seconds weighted by slots / debugger slots.
fn expected(w: &World, a: &Args) -> BTreeMap<String, f64> {
    let weight = a.slots as f64 / a.debuggers as f64;
    w.previous
        .iter()
        .map(|(t, s)| {
            (
                t.clone(),
                s + weight * w.prev_debugger.get(t).copied().unwrap_or(0.0),
            )
        })
        .collect()
}

fn parse() -> Args {
    let mut a = Args {
        tasks: 89,
        k: 2,
        slots: 16,
        debuggers: 4,
        ms_per_sec: 1.0,
        seed: 7,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for p in v.chunks(2) {
        let val = p.get(1).map(String::as_str).unwrap_or("");
        let bad = || -> ! { panic!("{}: expected a number, got {val:?}", p[0]) };
        match p[0].as_str() {
            "--tasks" => a.tasks = val.parse().unwrap_or_else(|_| bad()),
            "--k" => a.k = val.parse().unwrap_or_else(|_| bad()),
            "--slots" => a.slots = val.parse().unwrap_or_else(|_| bad()),
            "--debuggers" => a.debuggers = val.parse().unwrap_or_else(|_| bad()),
            "--ms-per-sec" => a.ms_per_sec = val.parse().unwrap_or_else(|_| bad()),
            "--seed" => a.seed = val.parse().unwrap_or_else(|_| bad()),
            o => panic!("unknown option {o}; see the usage at the top of bench_makespan.rs"),
        }
    }
    a
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = parse();
    let tmp = tempfile::tempdir().unwrap();
    let w = world(&tmp.path().join("bench"), a.tasks, a.k, a.seed);
    let work: f64 = w.trial.values().sum();
    let (longest, _) = w
        .trial
        .iter()
        .map(|((t, _), s)| (*s + w.debugger[t], *s))
        .fold((0.0f64, 0.0f64), |m, x| if x.0 > m.0 { x } else { m });
    let bound = (work / a.slots as f64).max(longest);
    let dbg_total: f64 = w.debugger.values().sum();
    println!(
        "simulated TB2-like iteration: {} tasks x k={} ({} trials), {} slots, {} debuggers, 1 s = {} ms",
        a.tasks, a.k, w.trial.len(), a.slots, a.debuggers, a.ms_per_sec
    );
    let max_trial = w.trial.values().cloned().fold(0.0, f64::max);
    let mut sorted: Vec<f64> = w.trial.values().cloned().collect();
    sorted.sort_by(f64::total_cmp);
    println!(
        "agent time: median {:.0} s, p90 {:.0} s, max {:.0} s; total work {:.0} s; debugger work {:.0} s",
        sorted[sorted.len() / 2], sorted[sorted.len() * 9 / 10], max_trial, work, dbg_total
    );
    println!(
        "lower bound = max(work/slots = {:.0} s, longest trial + its debugger = {:.0} s) = {:.0} s",
        work / a.slots as f64,
        longest,
        bound
    );
    let before = iteration(&w, &a, Schedule::TaskOrder, false).await;
    let seq_debug = before.wall - before.rollout;
    println!(
        "{:<44} {:>9} {:>9} {:>8} {:>8}",
        "", "rollout", "wall", "/bound", "hidden"
    );
    let mut figures = Vec::new();
    let rows = [
        (
            "before: task order, waves; debug after",
            Schedule::TaskOrder,
            false,
        ),
        ("longest first only", Schedule::LongestFirst, false),
        ("overlap only", Schedule::TaskOrder, true),
        (
            "after: longest first + overlapped debugger",
            Schedule::LongestFirst,
            true,
        ),
    ];
    for (i, (label, schedule, overlap)) in rows.into_iter().enumerate() {
        let m = if i == 0 {
            before.clone()
        } else {
            iteration(&w, &a, schedule, overlap).await
        };
        let tail = m.wall - m.rollout;
        let hidden = if overlap { 1.0 - tail / seq_debug } else { 0.0 };
        figures.push(m.wall / bound);
        if i == 3 {
            figures.push(hidden);
        }
        println!(
            "{label:<44} {:>8.0}s {:>8.0}s {:>8.3} {:>7.0}%   (debugger-seconds during the rollout: {:.0}%)",
            m.rollout, m.wall, m.wall / bound, 100.0 * hidden,
            100.0 * m.debug_hidden / m.debug_total.max(1e-9)
        );
    }
    println!("FIGURE makespan_over_bound_before {:.3}", figures[0]);
    println!("FIGURE makespan_over_bound_after {:.3}", figures[3]);
    println!("FIGURE debug_phase_hidden_share {:.3}", figures[4]);
    println!("(hidden = 1 - debug time left after the last trial / the old debug phase)");
}
