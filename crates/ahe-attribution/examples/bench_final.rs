//! The final answer's cost and agreement, simulated (docs/final-answer.md): ten-iteration runs
//! of per-task Bernoulli outcomes where best moves only when a harness beats the current best
//! beyond noise (the paired bootstrap rule of `update_best`), then two final phases on the
//! same run: the sequential rule (`ahe_attribution::sequential::look`, the function the
//! product calls) and the re-evaluation it replaces (best, seed and runner-up on 2k fresh
//! trials per task, the runner-up switching in when it scores higher). Scenarios: best truly
//! beats the seed, changes that net to nothing, and no change at all (a best is only lucky).
//! Prints, per scenario, the final phase's trials (median, mean, max) of both, and how often
//! their answers agree (better / covers 0 / worse beyond noise).
//!
//! Usage: bench_final [--runs 200] [--tasks 89] [--k 2] [--iterations 10] [--holdout 0.0]
//!        [--seed 1] [--reuse-seed]   (the biased variant: the seed's own visible trials)

use ahe_attribution::sequential::{look, Plan};
use ahe_attribution::stats::paired_delta_ci;
use ahe_rundir::final_eval::Stopped;

/// splitmix64: a benchmark's dice without a dependency.
struct Dice(u64);

impl Dice {
    fn u(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn pick(&mut self, n: usize) -> usize {
        ((self.u() * n as f64) as usize).min(n - 1)
    }
    /// Mean pass rate of `trials` Bernoulli(p) trials.
    fn rate(&mut self, p: f64, trials: u32) -> f64 {
        (0..trials).filter(|_| self.u() < p).count() as f64 / trials.max(1) as f64
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Scenario {
    /// Every iteration fixes two tasks a little for good (+0.5 on each): best truly beats the seed.
    Beats,
    /// Every iteration raises two tasks and lowers two (+/−0.5): best nets to about the seed.
    Nets,
    /// No change does anything: any best that left the seed is lucky.
    Lucky,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Answer {
    Better,
    Covers,
    Worse,
}

fn answer_of(ci: [f64; 2]) -> Answer {
    if ci[0] > 0.0 {
        Answer::Better
    } else if ci[1] < 0.0 {
        Answer::Worse
    } else {
        Answer::Covers
    }
}

struct Cfg {
    tasks: usize,
    k: u32,
    iterations: u32,
    visible: usize,
    reuse_seed: bool,
}

/// One run: the true rates of each iteration's harness, the rollouts, best's moves; then both
/// final phases. Returns (new trials, new answer, old trials, old answer, best ≠ seed, truth).
fn one_run(d: &mut Dice, c: &Cfg, sc: Scenario) -> (u32, Answer, u32, Answer, bool, f64) {
    // Seed rates, TB2-like: a third never solved, a fifth always, the rest in between.
    let seed: Vec<f64> = (0..c.tasks)
        .map(|_| match d.u() {
            x if x < 0.33 => 0.0,
            x if x < 0.53 => 1.0,
            _ => 0.1 + 0.8 * d.u(),
        })
        .collect();
    let mut truth = vec![seed.clone()];
    for _ in 1..=c.iterations {
        let mut p = truth.last().unwrap().clone();
        let moves: &[f64] = match sc {
            Scenario::Beats => &[0.5, 0.5],
            Scenario::Nets => &[0.5, 0.5, -0.5, -0.5],
            Scenario::Lucky => &[],
        };
        for m in moves {
            let t = d.pick(c.tasks);
            p[t] = (p[t] + m).clamp(0.0, 1.0);
        }
        truth.push(p);
    }
    // Rollouts of iterations 1..=N+1 (the last evaluates H_N), visible tasks first.
    let v = c.visible;
    let scores: Vec<Vec<f64>> = truth.iter().map(|p| p.iter().map(|x| d.rate(*x, c.k)).collect()).collect();
    let mean = |x: &[f64]| x[..v].iter().sum::<f64>() / v as f64;
    let mut best = 0;
    for t in 1..scores.len() {
        if let Some((_, ci)) = paired_delta_ci(&scores[best][..v], &scores[t][..v]) {
            if ci[0] > 0.0 {
                best = t;
            }
        }
    }
    let real = mean(&truth[best]) - mean(&truth[0]);
    let (new_trials, new_answer) = sequential(d, c, &truth[best], &truth[0], &scores[0], best);
    let runner = (1..scores.len())
        .filter(|&t| t != best)
        .max_by(|&a, &b| mean(&scores[a]).total_cmp(&mean(&scores[b])).then(b.cmp(&a)));
    let (old_trials, old_answer) = reevaluation(d, c, &truth, best, runner);
    (new_trials, new_answer, old_trials, old_answer, best != 0, real)
}

/// The product's rule: fresh paired rounds on the visible tasks (or, with `--reuse-seed`,
/// fresh best against the seed's own iteration-1 trials).
fn sequential(d: &mut Dice, c: &Cfg, best: &[f64], seed: &[f64], seed1: &[f64], b: usize) -> (u32, Answer) {
    if b == 0 {
        return (0, Answer::Covers);
    }
    let plan = Plan::new(2 * c.k, 1);
    let (mut bp, mut sp) = (vec![0.0; c.visible], vec![0.0; c.visible]);
    for r in 1..=plan.rounds {
        for i in 0..c.visible {
            bp[i] += d.rate(best[i], 1);
            sp[i] += d.rate(seed[i], 1);
        }
        let pairs: Vec<(f64, f64)> = (0..c.visible)
            .map(|i| match c.reuse_seed {
                true => (bp[i] / r as f64, seed1[i]),
                false => (bp[i] / r as f64, sp[i] / r as f64),
            })
            .collect();
        let (l, stop) = look(&plan, r, r, &pairs);
        if let Some(s) = stop {
            let per = if c.reuse_seed { 1 } else { 2 };
            let ans = match s {
                Stopped::Better => Answer::Better,
                Stopped::Worse => Answer::Worse,
                _ => answer_of(l.ci),
            };
            return (per * r * c.visible as u32, ans);
        }
    }
    unreachable!("the last look stops")
}

/// The re-evaluation it replaces: best, seed and runner-up (one per distinct harness) on 2k
/// fresh trials of every task; the runner-up becomes best when it scores higher.
fn reevaluation(d: &mut Dice, c: &Cfg, truth: &[Vec<f64>], best: usize, runner: Option<usize>) -> (u32, Answer) {
    let n = 2 * c.k;
    let v = c.visible;
    let mut fresh = |t: usize| -> Vec<f64> { truth[t].iter().map(|p| d.rate(*p, n)).collect() };
    let mut picks = vec![best];
    if best != 0 {
        picks.push(0);
    }
    picks.extend(runner);
    let rates: Vec<Vec<f64>> = picks.iter().map(|&t| fresh(t)).collect();
    let trials = (picks.len() * c.tasks) as u32 * n;
    let m = |x: &[f64]| x[..v].iter().sum::<f64>();
    let mut b = 0;
    if let Some(r) = runner.map(|_| picks.len() - 1) {
        if m(&rates[r]) > m(&rates[0]) {
            b = r;
        }
    }
    if picks[b] == 0 {
        return (trials, Answer::Covers);
    }
    let s = picks.iter().position(|&t| t == 0).unwrap();
    let (_, ci) = paired_delta_ci(&rates[s][..v], &rates[b][..v]).unwrap();
    (trials, answer_of(ci))
}

fn arg(args: &[String], name: &str, default: f64) -> f64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut x: Vec<u32>) -> u32 {
    x.sort_unstable();
    x.get(x.len() / 2).copied().unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs = arg(&args, "--runs", 200.0) as usize;
    let tasks = arg(&args, "--tasks", 89.0) as usize;
    let holdout = arg(&args, "--holdout", 0.0);
    let c = Cfg {
        tasks,
        k: arg(&args, "--k", 2.0) as u32,
        iterations: arg(&args, "--iterations", 10.0) as u32,
        visible: ((tasks as f64 * (1.0 - holdout)).round() as usize).clamp(2, tasks),
        reuse_seed: args.iter().any(|a| a == "--reuse-seed"),
    };
    let mut d = Dice(arg(&args, "--seed", 1.0) as u64);
    let t0 = std::time::Instant::now();
    let (mut all_new, mut all_agree, mut all) = (Vec::new(), 0, 0);
    println!(
        "{tasks} tasks ({} visible), k = {}, {} iterations, {runs} runs per scenario{}",
        c.visible,
        c.k,
        c.iterations,
        if c.reuse_seed { ", seed's own trials reused (biased)" } else { "" }
    );
    for sc in [Scenario::Beats, Scenario::Nets, Scenario::Lucky] {
        let res: Vec<_> = (0..runs).map(|_| one_run(&mut d, &c, sc)).collect();
        let moved: Vec<_> = res.iter().filter(|r| r.4).collect();
        let agree = res.iter().filter(|r| r.1 == r.3).count();
        let better = |f: fn(&(u32, Answer, u32, Answer, bool, f64)) -> bool| res.iter().filter(|r| f(r)).count();
        let false_better = better(|r| r.1 == Answer::Better && r.5 <= 0.0);
        let old_false = better(|r| r.3 == Answer::Better && r.5 <= 0.0);
        let new: Vec<u32> = res.iter().map(|r| r.0).collect();
        let old: Vec<u32> = res.iter().map(|r| r.2).collect();
        let moved_new: Vec<u32> = moved.iter().map(|r| r.0).collect();
        let pct = |a: usize, b: usize| if b == 0 { 100.0 } else { 100.0 * a as f64 / b as f64 };
        println!(
            "{sc:?}: best left the seed in {}/{runs}; final trials median {} (when best left: {}), mean {:.0}, max {} \
             | re-evaluation median {}, mean {:.0} | agree {agree}/{runs} = {:.1}% (when best left: {:.1}%) \
             | 'better' new {} old {} | 'better' with no true gain: new {false_better}, old {old_false}",
            moved.len(),
            median(new.clone()),
            median(moved_new),
            new.iter().sum::<u32>() as f64 / runs as f64,
            new.iter().max().unwrap_or(&0),
            median(old.clone()),
            old.iter().sum::<u32>() as f64 / runs as f64,
            pct(agree, runs),
            pct(moved.iter().filter(|r| r.1 == r.3).count(), moved.len()),
            better(|r| r.1 == Answer::Better),
            better(|r| r.3 == Answer::Better),
        );
        all_new.extend(new);
        all_agree += agree;
        all += runs;
    }
    let med = median(all_new);
    let one_iteration = tasks as u32 * c.k;
    println!(
        "SUMMARY tasks={tasks} k={} final_median={med} (target <= {one_iteration}) agreement={:.1}% (target >= 95%) {:.1} s",
        c.k,
        100.0 * all_agree as f64 / all as f64,
        t0.elapsed().as_secs_f64()
    );
}
