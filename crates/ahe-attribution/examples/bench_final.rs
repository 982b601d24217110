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
//!        [--seed 1] [--futility 0.2] [--first-share 0.5] [--bootstrap]   (the product's bootstrap for best's moves
//!        and the 2k answer: exact, slow) [--reuse-seed]   (the biased variant: the seed's own
//!        visible trials instead of fresh ones)

use ahe_attribution::sequential::{look, Plan};
use ahe_attribution::stats::paired_delta_ci;
use ahe_rundir::final_eval::Stopped;

/// best − seed's paired interval over tasks as the product computes it (`paired_delta_ci`, a
/// 2000-rep bootstrap) with `--bootstrap`; else its normal approximation (mean ± 1.96 ·
/// sd/√n: the same to ~0.002 at 89 tasks, and a hundred times faster unoptimised).
fn paired_ci(prev: &[f64], cur: &[f64], bootstrap: bool) -> Option<[f64; 2]> {
    if bootstrap {
        return paired_delta_ci(prev, cur).map(|x| x.1);
    }
    let n = prev.len();
    if n == 0 {
        return None;
    }
    let d: Vec<f64> = cur.iter().zip(prev).map(|(c, p)| c - p).collect();
    let m = d.iter().sum::<f64>() / n as f64;
    let sd = (d.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n as f64).sqrt();
    let h = 1.96 * sd / (n as f64).sqrt();
    Some([m - h, m + h])
}

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
    /// Every iteration solves three tasks for good: best clearly beats the seed.
    Clearly,
    /// Every iteration fixes two tasks a little for good (+0.5 on each): best truly beats the
    /// seed by a moderate margin (+0.05 to +0.1 at 89 tasks).
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
    futility: f64,
    first_share: f64,
    bootstrap: bool,
}

/// One run: the true rates of each iteration's harness, the rollouts, best's moves; then both
/// final phases (the re-evaluation twice, on independent fresh trials: how often it agrees
/// with itself bounds any agreement).
fn one_run(d: &mut Dice, c: &Cfg, sc: Scenario) -> Outcome {
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
            Scenario::Clearly => &[1.0, 1.0, 1.0],
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
    let scores: Vec<Vec<f64>> = truth
        .iter()
        .map(|p| p.iter().map(|x| d.rate(*x, c.k)).collect())
        .collect();
    let mean = |x: &[f64]| x[..v].iter().sum::<f64>() / v as f64;
    let mut best = 0;
    for t in 1..scores.len() {
        if let Some(ci) = paired_ci(&scores[best][..v], &scores[t][..v], c.bootstrap) {
            if ci[0] > 0.0 {
                best = t;
            }
        }
    }
    let real = |t: usize| mean(&truth[t]) - mean(&truth[0]);
    let (new_trials, new) = sequential(d, c, &truth[best], &truth[0], &scores[0], best);
    let runner = (1..scores.len()).filter(|&t| t != best).max_by(|&a, &b| {
        mean(&scores[a])
            .total_cmp(&mean(&scores[b]))
            .then(b.cmp(&a))
    });
    let (old_trials, old, answered) = reevaluation(d, c, &truth, best, runner);
    let (_, again, _) = reevaluation(d, c, &truth, best, runner);
    Outcome {
        new_trials,
        new,
        old_trials,
        old,
        again,
        moved: best != 0,
        new_gain: real(best),
        old_gain: real(answered),
    }
}

/// One simulated run's two final phases.
struct Outcome {
    new_trials: u32,
    new: Answer,
    old_trials: u32,
    old: Answer,
    /// The re-evaluation again, on other fresh trials.
    again: Answer,
    /// best left the seed.
    moved: bool,
    /// True best − seed of the harness each answered about.
    new_gain: f64,
    old_gain: f64,
}

/// The product's rule: fresh paired rounds on the visible tasks (or, with `--reuse-seed`,
/// fresh best against the seed's own iteration-1 trials).
fn sequential(
    d: &mut Dice,
    c: &Cfg,
    best: &[f64],
    seed: &[f64],
    seed1: &[f64],
    b: usize,
) -> (u32, Answer) {
    if b == 0 {
        return (0, Answer::Covers);
    }
    let mut plan = Plan::new(2 * c.k, 1);
    plan.futility = c.futility;
    plan.first_share = c.first_share;
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
fn reevaluation(
    d: &mut Dice,
    c: &Cfg,
    truth: &[Vec<f64>],
    best: usize,
    runner: Option<usize>,
) -> (u32, Answer, usize) {
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
        return (trials, Answer::Covers, 0);
    }
    let s = picks.iter().position(|&t| t == 0).unwrap();
    let ci = paired_ci(&rates[s][..v], &rates[b][..v], c.bootstrap).unwrap();
    (trials, answer_of(ci), picks[b])
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
        futility: arg(&args, "--futility", ahe_attribution::sequential::FUTILITY),
        first_share: arg(
            &args,
            "--first-share",
            ahe_attribution::sequential::FIRST_LOOK_SHARE,
        ),
        bootstrap: args.iter().any(|a| a == "--bootstrap"),
    };
    let mut d = Dice(arg(&args, "--seed", 1.0) as u64);
    let t0 = std::time::Instant::now();
    let (mut all_new, mut all_agree, mut all) = (Vec::new(), 0, 0);
    println!(
        "{tasks} tasks ({} visible), k = {}, {} iterations, {runs} runs per scenario{}",
        c.visible,
        c.k,
        c.iterations,
        if c.reuse_seed {
            ", seed's own trials reused (biased)"
        } else {
            ""
        }
    );
    for sc in [
        Scenario::Clearly,
        Scenario::Beats,
        Scenario::Nets,
        Scenario::Lucky,
    ] {
        let res: Vec<Outcome> = (0..runs).map(|_| one_run(&mut d, &c, sc)).collect();
        let count = |f: &dyn Fn(&Outcome) -> bool| res.iter().filter(|r| f(r)).count();
        let pct = |a: usize, b: usize| {
            if b == 0 {
                100.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        let moved = count(&|r| r.moved);
        let agree = count(&|r| r.new == r.old);
        let new: Vec<u32> = res.iter().map(|r| r.new_trials).collect();
        let old: Vec<u32> = res.iter().map(|r| r.old_trials).collect();
        let moved_new: Vec<u32> = res
            .iter()
            .filter(|r| r.moved)
            .map(|r| r.new_trials)
            .collect();
        println!(
            "{sc:?}: best left the seed in {moved}/{runs} runs\n  final trials: sequential median {} (when best left: {}), mean {:.0}, max {} | 2k re-evaluation median {}, mean {:.0}\n  \
             agreement with the 2k answer: {agree}/{runs} = {:.1}% (when best left: {:.1}%); the 2k answer with itself on other fresh trials: {:.1}%\n  \
             'better' said: sequential {}, 2k {} | 'better' where the harness gained nothing: sequential {}, 2k {} | 'worse' said: sequential {}, 2k {}",
            median(new.clone()),
            median(moved_new),
            new.iter().sum::<u32>() as f64 / runs as f64,
            new.iter().max().unwrap_or(&0),
            median(old.clone()),
            old.iter().sum::<u32>() as f64 / runs as f64,
            pct(agree, runs),
            pct(count(&|r| r.moved && r.new == r.old), moved),
            pct(count(&|r| r.old == r.again), runs),
            count(&|r| r.new == Answer::Better),
            count(&|r| r.old == Answer::Better),
            count(&|r| r.new == Answer::Better && r.new_gain <= 0.0),
            count(&|r| r.old == Answer::Better && r.old_gain <= 0.0),
            count(&|r| r.new == Answer::Worse),
            count(&|r| r.old == Answer::Worse),
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
