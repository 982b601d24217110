//! Benchmark of the post-rollout pipeline on a synthetic iteration: Clean (every trial's
//! `trace.clean.json`), Scores, exercised files, Attribute, and `ahe report` of the run.
//!
//! `cargo run --release -p ahe-evolve --example bench_pipeline -- [TASKS [TRIALS [TURNS]]]`
//! (defaults 89 × 2 × 300, the size of a Terminal-Bench 2 iteration with long trials).
//! Generating the trials is not timed; the target is a total of at most 2 s on 2 cores.
//! The per-trial report pages are timed apart (not in the total). Prints `FIGURE` lines.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use ahe_attribution::attribute;
use ahe_bench::trial::{write_result, Timings};
use ahe_bench::{AgentEnd, Scores, TrialResult, TrialStatus};
use ahe_report::{generate, ReportOptions};
use ahe_rundir::clean;
use ahe_rundir::manifest::{Change, ChangeKind, Component, Manifest};
use serde_json::json;

/// Deterministic xorshift generator (no dependency, same data every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "error:",
    "warning",
    "src/main.rs",
    "\"quoted\"",
    "line",
    "42",
    "ok",
    "test",
    "passed",
    "failed",
    "FAILED",
    "build",
    "--release",
    "cannot",
    "find",
    "module",
    "\ttab",
    "{json}",
    "path/to/file.py",
    "Traceback",
    "(most",
    "recent",
    "call",
    "last):",
    "assert",
    "==",
];

/// Shell-like output of `len` bytes with newlines, quotes and tabs (JSON escapes).
fn output(rng: &mut Rng, len: usize) -> String {
    let mut s = String::with_capacity(len + 16);
    while s.len() < len {
        s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
        s.push(if rng.below(8) == 0 { '\n' } else { ' ' });
    }
    s
}

fn task_name(i: usize) -> String {
    format!("task-{i:03}")
}

/// Whether a trial passes in an iteration (deterministic, ~45% pass, some flips).
fn passes(task: usize, attempt: u32, iteration: u32) -> bool {
    let h = (task as u64 * 2654435761 + attempt as u64 * 40503 + iteration as u64 * 97) % 100;
    h < 45
}

fn write_trial(dir: &Path, task: usize, attempt: u32, turns: u32, rng: &mut Rng) {
    std::fs::create_dir_all(dir).unwrap();
    let f = std::fs::File::create(dir.join("trace.jsonl")).unwrap();
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let mut t_ms = 0u64;
    let mut line = |w: &mut BufWriter<std::fs::File>, mut v: serde_json::Value| {
        t_ms += 700;
        v["t_ms"] = json!(t_ms);
        v["ts"] = json!("2026-05-01T12:00:00.000Z");
        serde_json::to_writer(&mut *w, &v).unwrap();
        w.write_all(b"\n").unwrap();
    };
    let usage = json!({"input_tokens": 12000, "cached_input_tokens": 9000, "output_tokens": 150});
    line(
        &mut w,
        json!({"event": "run_start", "agent": "main", "model": "bench", "protocol": "native",
        "tools": ["run_shell", "load_skill"], "limits": {"max_turns": 300}}),
    );
    line(
        &mut w,
        json!({"event": "message", "agent": "main", "role": "system",
        "content": "You solve software tasks in a non-interactive setting. ".repeat(60)}),
    );
    line(
        &mut w,
        json!({"event": "message", "agent": "main", "role": "user",
        "content": format!("Fix the failing build of project {task}.\n").repeat(10)}),
    );
    let mut rng2 = Rng(rng.next() | 1);
    for turn in 1..=turns {
        let id = format!("call_{turn}");
        let (name, args) = if turn == 2 {
            ("load_skill", json!({"name": "debugging"}))
        } else {
            (
                "run_shell",
                json!({"command": format!("cd /app && cargo test --lib module_{turn} 2>&1 | tail -50")}),
            )
        };
        if turn % 50 == 0 {
            line(
                &mut w,
                json!({"event": "middleware", "agent": "main", "turn": turn,
                "hook": "before_model", "name": "compact", "decision": {"action": "modify", "messages": "[rewritten conversation]"}}),
            );
        }
        line(
            &mut w,
            json!({"event": "assistant", "agent": "main", "turn": turn,
            "content": (turn % 3 == 0).then_some("Let me look at the failing test output."),
            "tool_calls": [{"id": id, "name": name, "arguments": args}],
            "usage": usage, "cost_usd": 0.004, "duration_ms": 900}),
        );
        let len = 1024 + rng2.below(1024) as usize;
        line(
            &mut w,
            json!({"event": "tool_call", "agent": "main", "turn": turn, "id": id,
            "name": name, "args": args, "output": output(&mut rng2, len),
            "ok": turn % 7 != 0, "exit_code": if turn % 7 == 0 { 1 } else { 0 },
            "truncated": false, "error": null, "duration_ms": 350}),
        );
        if turn % 97 == 0 {
            line(
                &mut w,
                json!({"event": "error", "agent": "main", "turn": turn,
                "kind": "transient", "message": "model call timed out; retrying"}),
            );
        }
    }
    line(
        &mut w,
        json!({"event": "run_end", "agent": "main", "end": "finished", "turns": turns,
        "usage": usage, "cost_usd": 1.2, "final_message": "done"}),
    );
    w.flush().unwrap();

    let pass = passes(task, attempt, 2);
    let mut r = TrialResult::new(&task_name(task), attempt);
    r.status = if pass {
        TrialStatus::Pass
    } else {
        TrialStatus::Fail
    };
    r.reward = Some(if pass { 1.0 } else { 0.0 });
    r.agent_end = Some(AgentEnd::Finished);
    r.turns = turns;
    r.usage.input_tokens = 12000 * turns as u64;
    r.usage.output_tokens = 150 * turns as u64;
    r.cost_usd = 1.2;
    r.timings = Timings {
        setup_ms: 2000,
        agent_ms: 600_000,
        verifier_ms: 5000,
        teardown_ms: 100,
        total_ms: 607_100,
        integrity_ms: 0,
        handover_ms: 0,
        counterfactual_ms: 0,
    };
    write_result(dir, &r);
}

/// Previous iteration's scores (iteration 1's pass pattern).
fn prev_scores(tasks: usize, trials: u32) -> Scores {
    let mut rs = Vec::new();
    for t in 0..tasks {
        for a in 1..=trials {
            let mut r = TrialResult::new(&task_name(t), a);
            r.status = if passes(t, a, 1) {
                TrialStatus::Pass
            } else {
                TrialStatus::Fail
            };
            rs.push(r);
        }
    }
    ahe_bench::scores::compute(trials, &rs, 1.0)
}

fn manifest(tasks: usize) -> Manifest {
    let comps = [
        (Component::SystemPrompt, "system_prompt.md"),
        (Component::ToolImpl, "tools/run_shell.py"),
        (Component::Middleware, "middleware/compact.toml"),
        (Component::Skill, "skills/debugging/SKILL.md"),
        (Component::Memory, "memory/lessons.md"),
        (Component::ToolDescription, "tools/edit_file.toml"),
    ];
    let changes = (0..12)
        .map(|i| {
            let (component, file) = comps[i % comps.len()];
            Change {
                id: format!("c{}", i + 1),
                kind: ChangeKind::Improvement,
                description: format!("change {i}"),
                files: vec![file.to_string()],
                failure_pattern: String::new(),
                root_cause: String::new(),
                predicted_fixes: (0..6).map(|j| task_name((i * 7 + j) % tasks)).collect(),
                risk_tasks: (0..3)
                    .map(|j| task_name((i * 11 + j + 40) % tasks))
                    .collect(),
                component,
                why_this_component: String::new(),
                commit: None,
            }
        })
        .collect();
    Manifest {
        iteration: 1,
        changes,
        leak_guard: None,
    }
}

/// CPU time (user + system, all threads) of this process in seconds, where `/proc` has it:
/// on a busy machine wall time overstates the pipeline's cost, CPU time does not.
fn cpu_sec() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let f: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn dir_bytes(root: &Path, name: &str) -> u64 {
    let mut n = 0;
    for t in std::fs::read_dir(root).unwrap() {
        for a in std::fs::read_dir(t.unwrap().path()).unwrap() {
            n += std::fs::metadata(a.unwrap().path().join(name))
                .map(|m| m.len())
                .unwrap_or(0);
        }
    }
    n
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let tasks = args.first().copied().unwrap_or(89);
    let trials = args.get(1).copied().unwrap_or(2) as u32;
    let turns = args.get(2).copied().unwrap_or(300) as u32;
    let tmp = tempfile::tempdir().expect("temp dir");
    // A run directory with this one iteration, so that `ahe report` can run on it too.
    let run_dir = tmp.path().join("run");
    let iter_dir = run_dir.join("iterations").join("001");
    let root = iter_dir.join("trials");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());

    let t0 = Instant::now();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    for t in 0..tasks {
        for a in 1..=trials {
            write_trial(
                &root.join(task_name(t)).join(a.to_string()),
                t,
                a,
                turns,
                &mut rng,
            );
        }
    }
    let raw = dir_bytes(&root, "trace.jsonl");
    println!(
        "generated {tasks} tasks × {trials} trials × {turns} turns: {:.1} MB of trace.jsonl in {:.2} s (not timed)",
        raw as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    println!("rayon threads: {}", rayon::current_num_threads());

    let mut phases: Vec<(&str, f64, Option<f64>)> = Vec::new();
    let mut cpu0 = cpu_sec();
    let mut time = |name: &'static str, t: Instant| {
        let c = cpu_sec();
        let cpu = c.zip(cpu0).map(|(a, b)| a - b);
        phases.push((name, t.elapsed().as_secs_f64(), cpu));
        cpu0 = cpu_sec();
    };

    let t = Instant::now();
    let summary = clean::clean_all(&root).expect("clean");
    time("clean_all (trace.clean.json)", t);
    assert!(summary.failed.is_empty(), "{:?}", summary.failed);
    assert_eq!(summary.trials, tasks * trials as usize);

    let t = Instant::now();
    let results = clean::load_results(&root).expect("results");
    let cur = ahe_bench::scores::compute(trials, &results, 0.0);
    ahe_bench::eval::write_scores(&iter_dir, &cur).expect("scores.json");
    time("scores (result.json → scores.json)", t);

    let prev = prev_scores(tasks, trials);
    let visible: BTreeSet<String> = cur.tasks.keys().cloned().collect();
    let t = Instant::now();
    // What a caller without the clean summary does: re-read the regressed tasks' clean traces.
    let mut exercised: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (task, s) in &cur.tasks {
        let was_pass = prev
            .tasks
            .get(task)
            .is_some_and(|p| p.status == ahe_bench::TaskStatus::Pass);
        if was_pass && s.status == ahe_bench::TaskStatus::Fail {
            for a in 1..=trials {
                let ct =
                    clean::read_clean(&root.join(task).join(a.to_string())).expect("read clean");
                exercised
                    .entry(task.clone())
                    .or_default()
                    .extend(clean::exercised_files(&ct));
            }
        }
    }
    time("exercised files (re-read regressed clean traces)", t);
    assert!(exercised.iter().all(|(t, e)| summary.exercised[t] == *e));

    let m = manifest(tasks);
    let t = Instant::now();
    let ev = attribute::attribute(
        2,
        Some(&m),
        &prev,
        &cur,
        &visible,
        &summary.exercised,
        &Default::default(),
    );
    attribute::write(&iter_dir, &ev).expect("write");
    time("attribute (+ change_evaluation.json)", t);

    let t = Instant::now();
    let g = generate(&run_dir, &ReportOptions { trial_pages: false }).expect("report");
    time("report (report.html + report.md + charts)", t);
    let t = Instant::now();
    let pages = generate(&run_dir, &ReportOptions { trial_pages: true }).expect("report");
    let pages_s = t.elapsed().as_secs_f64();

    let clean_bytes = dir_bytes(&root, ahe_bench::TrialDir::CLEAN_FILE);
    let ci = ev.stats.delta_ci.unwrap_or_default();
    println!(
        "clean traces: {:.1} MB; pass@1 {:.3} (prev {:.3}, Δ {:+.3} CI [{:+.3}, {:+.3}]); {} fixed, {} regressed ({} re-read)",
        clean_bytes as f64 / 1e6,
        ev.stats.pass_at_1,
        ev.stats.prev_pass_at_1.unwrap_or(0.0),
        ev.stats.delta.unwrap_or(0.0),
        ci[0],
        ci[1],
        ev.fixed.len(),
        ev.regressed.len(),
        exercised.len()
    );
    let show = |c: Option<f64>| c.map_or("-".to_string(), |c| format!("{c:.2}"));
    println!("{:<52} {:>9} {:>9}", "phase", "wall s", "cpu s");
    let (mut total, mut total_cpu) = (0.0, Some(0.0));
    for (name, s, c) in &phases {
        println!("{name:<52} {s:>9.3} {:>9}", show(*c));
        total += s;
        total_cpu = total_cpu.zip(*c).map(|(a, b)| a + b);
    }
    println!(
        "{:<52} {total:>9.3} {:>9}  (target ≤ 2 s wall on 2 cores)",
        "total",
        show(total_cpu)
    );
    if let Some(c) = total_cpu {
        println!(
            "cpu / {cores} cores = {:.3} s: the wall time on an otherwise idle machine, roughly",
            c / cores as f64
        );
    }
    println!(
        "not in the total: report with {} trial pages {pages_s:.3} s (html {} KB)",
        pages.trial_pages,
        std::fs::metadata(&g.html).map_or(0, |m| m.len() / 1024)
    );
    for (name, s, _) in &phases {
        let key = name.split_whitespace().next().unwrap_or("phase");
        println!("FIGURE pipeline_{key}_s {s:.3}");
    }
    println!("FIGURE pipeline_s {total:.3}");
    if let Some(c) = total_cpu {
        println!("FIGURE pipeline_cpu_s {c:.3}");
    }
    println!("FIGURE pipeline_trial_pages_s {pages_s:.3}");
}
