//! Attribution against a known ground truth, over many random scenarios (the simulation of
//! `tests/attribution_sim/`): each scenario is a real `ahe evolve` run (local sandbox,
//! scripted mock models) that makes 3–5 changes — helpful or harmful, predicted or not,
//! several in one file, some breaking two tasks, some an iteration later. Prints the share of injected harmful changes
//! detected and rolled back (target ≥ 95%; AHE's regression recall is 11.1%), the lines of
//! helpful changes lost to rollbacks (target 0), and confirmation + counterfactual trials as
//! a share of all trials (target ≤ 25%).
//!
//! Usage: bench_attribution AHE_BINARY [--scenarios 10] [--tasks 89] [--k 2] [--seed 1]
//!        [--no-floor]   (the control: harm_floor_trials = 0, unjudged = "keep")

#[path = "../tests/cli/attribution_sim/mod.rs"]
mod sim;

use std::path::{Path, PathBuf};

use sim::{Effect, Scenario, SimChange, FILES};

/// A small deterministic generator (no dependency for a benchmark's dice).
struct Dice(u64);

impl Dice {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A random scenario: 3–5 changes, each a fix or a break, predicted or not, at the top or
/// bottom of one of the memory files; a third of the breaks break a second task, a third of
/// the changes come in iteration 2 (judged in iteration 3).
fn scenario(d: &mut Dice, tasks: u32, k: u32) -> Scenario {
    let n = 3 + d.next(3) as usize;
    let mut slots: Vec<(usize, bool)> = (0..FILES.len())
        .flat_map(|f| [(f, true), (f, false)])
        .collect();
    let mut used_tasks = Vec::new();
    let mut pick = |d: &mut Dice| loop {
        let t = 1 + d.next(tasks as u64) as u32;
        if !used_tasks.contains(&t) {
            used_tasks.push(t);
            break t;
        }
    };
    let mut changes = Vec::new();
    for i in 0..n {
        let (f, top) = slots.remove(d.next(slots.len() as u64) as usize);
        let effect = if d.next(2) == 0 {
            Effect::Fix
        } else {
            Effect::Break
        };
        let task = pick(d);
        let mut c = SimChange::new(
            &format!("c{}", i + 1),
            effect,
            task,
            d.next(2) == 0,
            FILES[f],
            top,
        );
        if effect == Effect::Break && d.next(3) == 0 && tasks > 2 * n as u32 {
            c.also = vec![pick(d)];
        }
        // A fix made later would find its task already failing for its own reason; keep
        // later changes to breaks, whose task passes until then.
        if effect == Effect::Break && d.next(3) == 0 {
            c.iteration = 2;
        }
        changes.push(c);
    }
    Scenario {
        tasks,
        k,
        changes,
        ..Default::default()
    }
}

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ahe = PathBuf::from(
        args.get(1)
            .expect("usage: bench_attribution AHE_BINARY [...]"),
    );
    let scenarios = arg(&args, "--scenarios", 10);
    let tasks = arg(&args, "--tasks", 89) as u32;
    let k = arg(&args, "--k", 2) as u32;
    let mut dice = Dice(arg(&args, "--seed", 1));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (mut harmful, mut caught, mut lost, mut trials, mut extra, mut wrong) = (0, 0, 0, 0, 0, 0);
    let (mut in_best, mut finals) = (0, 0);
    let t0 = std::time::Instant::now();
    for i in 0..scenarios {
        let mut sc = scenario(&mut dice, tasks, k);
        if args.iter().any(|a| a == "--no-floor") {
            // The control: no harm floor, unjudged changes kept (the share alone decides).
            sc.attribution = "harm_floor_trials = 0\nunjudged = \"keep\"\n".into();
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let (o, run) = sc.run(dir.path(), &root, &ahe);
        if !o.status.success() {
            eprintln!(
                "scenario {i}: ahe evolve failed:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            std::process::exit(1);
        }
        let out = sc.outcome(&run);
        // UNJUDGED-and-reverted counts as caught for a harmful change.
        let right = sc.expected_verdicts().iter().all(|(id, want)| {
            let got = out.verdicts.get(id).map(String::as_str).unwrap_or("");
            got == want || (want == "HARMFUL" && got == "UNJUDGED")
        });
        println!(
            "scenario {i}: {} change(s), {} harmful, {} caught, {} helpful line(s) lost, \
             {} + {} trials, verdicts {}",
            sc.changes.len(),
            out.harmful,
            out.harmful_rolled_back,
            out.collateral_lines_lost,
            out.trials,
            out.extra_trials,
            if right { "right" } else { "WRONG" }
        );
        if !right {
            println!(
                "  expected {:?}\n  got      {:?}",
                sc.expected_verdicts(),
                out.verdicts
            );
            wrong += 1;
        }
        harmful += out.harmful;
        caught += out.harmful_rolled_back;
        lost += out.collateral_lines_lost;
        in_best += out.harmful_in_best;
        trials += out.trials;
        extra += out.extra_trials;
        finals += out.final_trials;
    }
    let pct = |a: u32, b: u32| {
        if b == 0 {
            100.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    println!(
        "--- {scenarios} scenarios, {tasks} tasks, k = {k}, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    println!(
        "harmful changes detected and rolled back: {caught}/{harmful} = {:.1}% (target >= 95%)",
        pct(caught, harmful)
    );
    println!("helpful lines lost to rollbacks: {lost} (target 0)");
    println!("harmful lines in the harness tagged best: {in_best} (target 0)");
    println!(
        "confirmation + counterfactual trials: {extra} of {} = {:.1}% (target <= 25%)",
        trials + extra,
        pct(extra, trials + extra)
    );
    println!("final re-evaluation trials (not attribution's): {finals}");
    println!("scenarios with a verdict off the ground truth: {wrong}");
    println!(
        "SUMMARY tasks={tasks} k={k} scenarios={scenarios} detected={caught}/{harmful} \
         detection={:.1}% lost={lost} in_best={in_best} extra_share={:.1}% wrong={wrong}",
        pct(caught, harmful),
        pct(extra, trials + extra)
    );
}
