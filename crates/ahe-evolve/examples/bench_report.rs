//! Benchmark of `ahe report` on a synthetic run: N iterations × TASKS × k trials.
//!
//! `cargo run --release -p ahe-evolve --example bench_report -- [ITER [TASKS [K [TURNS]]]]`
//! (defaults 10 × 89 × 2 × 30: a Terminal-Bench 2 sized run). Writing the run is not timed;
//! the report is generated twice: without the per-trial pages (report.html + report.md +
//! SVGs; target ≤ 1 s), with the trial pages, and again (pages current, kept).
//! `BENCH_REPORT_KEEP=DIR` keeps the synthetic run and its report in DIR;
//! `BENCH_REPORT_SYNTH_ONLY=1` only writes the run (for `scripts/bench-view.sh`).

#[path = "../tests/evolve/synth_run.rs"]
mod synth_run;

use std::time::Instant;

use ahe_report::{generate, ReportOptions, RunReport};
use rayon::prelude::*;

fn main() {
    let a: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let spec = synth_run::Spec {
        iterations: a.first().copied().unwrap_or(10) as u32,
        tasks: a.get(1).copied().unwrap_or(89),
        k: a.get(2).copied().unwrap_or(2) as u32,
        turns: a.get(3).copied().unwrap_or(30) as u32,
        output_len: 1500,
        holdout: 9,
    };
    // BENCH_REPORT_KEEP=DIR writes the run (and its report) there and keeps it, to look at.
    let tmp = tempfile::tempdir().expect("temp dir");
    let keep = std::env::var_os("BENCH_REPORT_KEEP").map(std::path::PathBuf::from);
    let dir = keep.clone().unwrap_or_else(|| tmp.path().join("synth"));
    let _ = std::fs::remove_dir_all(&dir);
    let t0 = Instant::now();
    synth_run::synth_run(&dir, &spec);
    let trials = (spec.iterations as usize + 1) * spec.tasks * spec.k as usize;
    println!(
        "synthesised {} iterations (+ final) × {} tasks × k={} = {trials} trials ({} turns each) in {:.2} s",
        spec.iterations,
        spec.tasks,
        spec.k,
        spec.turns,
        t0.elapsed().as_secs_f64()
    );
    if std::env::var_os("BENCH_REPORT_SYNTH_ONLY").is_some() {
        // scripts/bench-view.sh only wants the run (it times `ahe view` on it).
        return;
    }
    let t = Instant::now();
    let r = RunReport::load(&dir).expect("load");
    println!(
        "load only:                       {:>7.1} ms ({} iterations)",
        t.elapsed().as_secs_f64() * 1e3,
        r.iterations.len()
    );
    let t = Instant::now();
    let n: usize = r
        .iterations
        .par_iter()
        .map(|it| {
            it.trials
                .iter()
                .filter(|t| r.trial(it.iteration, &t.task, t.attempt).is_ok())
                .count()
        })
        .sum();
    println!(
        "reading {n} clean traces only:     {:>7.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let g = generate(&dir, &ReportOptions { trial_pages: false }).expect("report");
    let main_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "report.html + report.md + SVGs:  {main_ms:>7.1} ms (load {:.1} ms, render+write {:.1} ms; html {} KB)",
        g.load_time.as_secs_f64() * 1e3,
        g.render_time.as_secs_f64() * 1e3,
        std::fs::metadata(&g.html).map(|m| m.len() / 1024).unwrap_or(0)
    );
    let t = Instant::now();
    let g = generate(&dir, &ReportOptions { trial_pages: true }).expect("report");
    println!(
        "… plus {} trial pages:         {:>7.1} ms (trial pages alone {:.1} ms)",
        g.trial_pages,
        t.elapsed().as_secs_f64() * 1e3,
        g.trials_time.as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let g = generate(&dir, &ReportOptions { trial_pages: true }).expect("report");
    println!(
        "again, trial pages current:      {:>7.1} ms ({} written, {} kept)",
        t.elapsed().as_secs_f64() * 1e3,
        g.trial_pages,
        g.trial_pages_current
    );
    if let Some(k) = keep {
        println!("kept: {}", k.join("report.html").display());
    }
    println!(
        "target ≤ 1000 ms for the report without trial pages: {}",
        if main_ms <= 1000.0 { "met" } else { "MISSED" }
    );
}
