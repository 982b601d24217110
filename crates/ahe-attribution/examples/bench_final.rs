//! The final answer's cost and agreement, simulated (docs/final-answer.md): ten-iteration runs
//! of per-task Bernoulli outcomes where best moves only when a harness beats the current best
//! beyond noise (the paired rule of `update_best`), then two final phases on the same run: the
//! sequential rule (`ahe_attribution::sequential::look`, the function the product calls) and
//! the re-evaluation it replaces (best, seed and runner-up on 2k fresh trials per task, the
//! runner-up switching in when it scores higher). The sequential rule's rounds are the first
//! trials of the very trials the 2k answer runs ("same trials": does stopping early change
//! the answer?); the 2k answer is also drawn again on independent trials ("independent", with
//! the ceiling no rule can pass: per run, the share of the 2k answer's most likely outcome),
//! and both are compared with the simulation's truth (the sign of best's true gain).
//! Scenarios: best truly beats the seed (clearly, beats), changes that net to about nothing,
//! no change at all (a best that left the seed is lucky), and equal (best's truth is the
//! seed's and the final phase always runs: the rule's false-claim rate).
//!
//! Usage: bench_final [--runs 200] [--tasks 89] [--k 2] [--iterations 10] [--holdout 0.0]
//!        [--seed 1] [--futility 0.1] [--spending obf|RHO] [--cap ROUNDS] [--ceiling 40]
//!        [--equal-runs 10×runs]   (runs of the equal scenario: the false-claim rate)
//!        [--bootstrap]   (the product's bootstrap for best's moves and the 2k answer: slow)
//!        [--reuse-seed]  (the biased variant: the seed's own visible trials, not fresh ones)
//!        [--previous]    (the rule before: Bonferroni spending, half at the first look)

use ahe_attribution::boundary::Spending;
use ahe_attribution::normal;
use ahe_attribution::sequential::{look, Plan};
use ahe_attribution::stats::paired_delta_ci;
use ahe_rundir::final_eval::{Look, Stopped};

/// best − seed's paired interval over tasks as the product computed it (`paired_delta_ci`, a
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
    /// As lucky, but the final phase always runs (best is iteration 1's harness, the seed's
    /// equal): how often the rule claims a difference that is not there.
    Equal,
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

fn truth_of(gain: f64) -> Answer {
    match gain {
        g if g > 1e-12 => Answer::Better,
        g if g < -1e-12 => Answer::Worse,
        _ => Answer::Covers,
    }
}

struct Cfg {
    tasks: usize,
    k: u32,
    iterations: u32,
    visible: usize,
    reuse_seed: bool,
    plan: Plan,
    bootstrap: bool,
    /// Independent 2k answers drawn per run to estimate the ceiling.
    ceiling: u32,
    /// The rule before this measurement (`--previous`): see [`previous_rule`].
    old: bool,
}

/// The rule as it was before (for a before/after on the same runs): α = 0.05, half at the
/// first look and the rest evenly over the later ones, each look's t interval at its own
/// share (the union bound), futile below 0.2 conditional power at the last look's bound.
fn previous_rule(rounds: u32, r: u32, pairs: &[(f64, f64)]) -> (Look, Option<Stopped>) {
    let share = |j: u32| match (rounds, j) {
        (1, _) => 0.05,
        (_, 1) => 0.025,
        (big, _) => 0.025 / (big - 1) as f64,
    };
    let n = pairs.len();
    let t = |j: u32| normal::t_quantile(1.0 - share(j) / 2.0, (n - 1) as f64);
    let d: Vec<f64> = pairs.iter().map(|(b, s)| b - s).collect();
    let mean = d.iter().sum::<f64>() / n as f64;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let se = (var / n as f64).sqrt();
    let (c, big, rf) = (t(r), rounds as f64, r as f64);
    let look = Look {
        round: r,
        trials_per_task: r,
        delta: mean,
        ci: [mean - c * se, mean + c * se],
        tasks: n,
        ..Default::default()
    };
    let threshold = t(rounds) * se * (rf / big).sqrt();
    let spread = se * (rf * (big - rf)).sqrt() / big;
    let power = match spread > 0.0 {
        true => {
            1.0 - normal::cdf((threshold - mean) / spread)
                + normal::cdf((-threshold - mean) / spread)
        }
        false => (mean.abs() > threshold) as u8 as f64,
    };
    let stop = match () {
        _ if look.ci[0] > 0.0 => Some(Stopped::Better),
        _ if look.ci[1] < 0.0 => Some(Stopped::Worse),
        _ if r >= rounds => Some(Stopped::Cap),
        _ if power < 0.2 => Some(Stopped::Futile),
        _ => None,
    };
    (look, stop)
}

/// Fresh trials of one harness: per task, the passes among the first r trials (r = 0..=n).
fn fresh(d: &mut Dice, rates: &[f64], n: u32) -> Vec<Vec<u32>> {
    rates
        .iter()
        .map(|p| {
            let mut acc = vec![0];
            for _ in 0..n {
                acc.push(acc.last().unwrap() + (d.u() < *p) as u32);
            }
            acc
        })
        .collect()
}

/// The true rates of each iteration's harness (index 0: the seed) and best's index after the
/// run's rollouts.
fn evolve(d: &mut Dice, c: &Cfg, sc: Scenario) -> (Vec<Vec<f64>>, Vec<Vec<f64>>, usize) {
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
            Scenario::Lucky | Scenario::Equal => &[],
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
    let mut best = 0;
    for t in 1..scores.len() {
        if let Some(ci) = paired_ci(&scores[best][..v], &scores[t][..v], c.bootstrap) {
            if ci[0] > 0.0 {
                best = t;
            }
        }
    }
    if sc == Scenario::Equal {
        best = 1;
    }
    (truth, scores, best)
}

/// One run: the rollouts and best's moves, then the sequential rule and the 2k re-evaluation
/// on the same fresh trials, the 2k answer again on independent ones (`1 + ceiling` times).
fn one_run(d: &mut Dice, c: &Cfg, sc: Scenario) -> Outcome {
    let (truth, scores, best) = evolve(d, c, sc);
    let v = c.visible;
    let mean = |x: &[f64]| x[..v].iter().sum::<f64>() / v as f64;
    let real = |t: usize| mean(&truth[t]) - mean(&truth[0]);
    let runner = (1..scores.len()).filter(|&t| t != best).max_by(|&a, &b| {
        mean(&scores[a])
            .total_cmp(&mean(&scores[b]))
            .then(b.cmp(&a))
    });
    let n = (2 * c.k).max(c.plan.rounds);
    let (fb, fs) = (fresh(d, &truth[best], n), fresh(d, &truth[0], n));
    let (new_trials, new, stop) = sequential(c, &fb, &fs, &scores[0], best);
    let same = reevaluation(d, c, &truth, best, runner, (&fb, &fs));
    let same_bs = reevaluation(d, c, &truth, best, None, (&fb, &fs)).1;
    // The 2k answer on independent trials: as it was (runner-up switching), best vs seed.
    let again = |d: &mut Dice| {
        let (fb, fs) = (
            fresh(d, &truth[best], 2 * c.k),
            fresh(d, &truth[0], 2 * c.k),
        );
        let was = reevaluation(d, c, &truth, best, runner, (&fb, &fs)).1;
        (was, reevaluation(d, c, &truth, best, None, (&fb, &fs)).1)
    };
    let other = again(d);
    let (mut seen, mut seen_bs) = ([0u32; 3], [0u32; 3]);
    for _ in 0..c.ceiling {
        let (was, bs) = again(d);
        seen[was as usize] += 1;
        seen_bs[bs as usize] += 1;
    }
    let top = |x: [u32; 3]| *x.iter().max().unwrap() as f64 / c.ceiling.max(1) as f64;
    Outcome {
        new_trials,
        new,
        stop,
        old_trials: same.0,
        same: same.1,
        same_bs,
        again: other.0,
        again_bs: other.1,
        ceiling: top(seen),
        ceiling_bs: top(seen_bs),
        moved: best != 0,
        new_gain: real(best),
        old_gain: real(same.2),
    }
}

/// One simulated run's final phases.
struct Outcome {
    new_trials: u32,
    new: Answer,
    stop: Option<Stopped>,
    old_trials: u32,
    /// The 2k re-evaluation (runner-up switching) on the sequential rule's trials and more.
    same: Answer,
    /// The 2k answer of best against the seed alone on the same trials (no runner-up).
    same_bs: Answer,
    /// The 2k re-evaluation on independent fresh trials.
    again: Answer,
    /// The 2k answer of best against the seed alone on independent fresh trials.
    again_bs: Answer,
    /// The share of the 2k answer's most likely outcome on independent trials.
    ceiling: f64,
    /// The same for the 2k answer of best against the seed alone.
    ceiling_bs: f64,
    /// best left the seed.
    moved: bool,
    /// True best − seed of the harness each answered about.
    new_gain: f64,
    old_gain: f64,
}

/// The product's rule on the first rounds of `fb` and `fs` (best's and the seed's fresh
/// passes per task; with `--reuse-seed`, fresh best against the seed's own trials `seed1`).
fn sequential(
    c: &Cfg,
    fb: &[Vec<u32>],
    fs: &[Vec<u32>],
    seed1: &[f64],
    b: usize,
) -> (u32, Answer, Option<Stopped>) {
    if b == 0 {
        return (0, Answer::Covers, None);
    }
    let plan = &c.plan;
    for r in 1..=plan.rounds {
        let rate = |x: &Vec<u32>| x[r as usize] as f64 / r as f64;
        let pairs: Vec<(f64, f64)> = (0..c.visible)
            .map(|i| match c.reuse_seed {
                true => (rate(&fb[i]), seed1[i]),
                false => (rate(&fb[i]), rate(&fs[i])),
            })
            .collect();
        let (l, stop) = match c.old {
            true => previous_rule(plan.rounds, r, &pairs),
            false => look(plan, r, r, &pairs),
        };
        if let Some(s) = stop {
            let per = if c.reuse_seed { 1 } else { 2 };
            let ans = match s {
                Stopped::Better => Answer::Better,
                Stopped::Worse => Answer::Worse,
                _ => Answer::Covers,
            };
            debug_assert!(ans != Answer::Covers || answer_of(l.ci) == Answer::Covers);
            return (per * r * c.visible as u32, ans, Some(s));
        }
    }
    unreachable!("the last look stops")
}

/// The re-evaluation it replaces: best, seed and runner-up (one per distinct harness) on 2k
/// fresh trials of every task, best's and the seed's being the first 2k of `fb` and `fs`
/// (visible tasks; held-out ones only count); the runner-up becomes best when it scores
/// higher. Returns the trials, the answer and the harness it answered about.
fn reevaluation(
    d: &mut Dice,
    c: &Cfg,
    truth: &[Vec<f64>],
    best: usize,
    runner: Option<usize>,
    (fb, fs): (&[Vec<u32>], &[Vec<u32>]),
) -> (u32, Answer, usize) {
    let n = 2 * c.k;
    let v = c.visible;
    let of = |x: &[Vec<u32>]| -> Vec<f64> {
        x.iter().map(|p| p[n as usize] as f64 / n as f64).collect()
    };
    let mut picks = vec![(best, of(fb))];
    if best != 0 {
        picks.push((0, of(fs)));
    }
    if let Some(r) = runner {
        picks.push((r, truth[r].iter().map(|p| d.rate(*p, n)).collect()));
    }
    let trials = (picks.len() * c.tasks) as u32 * n;
    let m = |x: &[f64]| x[..v].iter().sum::<f64>();
    let mut b = 0;
    if runner.is_some() && m(&picks[picks.len() - 1].1) > m(&picks[0].1) {
        b = picks.len() - 1;
    }
    if picks[b].0 == 0 {
        return (trials, Answer::Covers, 0);
    }
    let s = picks.iter().position(|p| p.0 == 0).unwrap();
    let ci = paired_ci(&picks[s].1[..v], &picks[b].1[..v], c.bootstrap).unwrap();
    (trials, answer_of(ci), picks[b].0)
}

fn arg(args: &[String], name: &str, default: f64) -> f64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `q` quantile (nearest rank below) of `x`; 0 when empty.
fn quantile(mut x: Vec<u32>, q: f64) -> u32 {
    x.sort_unstable();
    let i = ((x.len() as f64 * q) as usize).min(x.len().saturating_sub(1));
    x.get(i).copied().unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs = arg(&args, "--runs", 200.0) as usize;
    let tasks = arg(&args, "--tasks", 89.0) as usize;
    let holdout = arg(&args, "--holdout", 0.0);
    let k = arg(&args, "--k", 2.0) as u32;
    let spending = match args
        .iter()
        .position(|a| a == "--spending")
        .map(|i| args[i + 1].as_str())
    {
        None => ahe_attribution::sequential::SPENDING,
        Some("obf") => Spending::OBrienFleming,
        Some(rho) => Spending::Power(rho.parse().expect("--spending obf|RHO")),
    };
    let futility = arg(&args, "--futility", ahe_attribution::sequential::FUTILITY);
    let c = Cfg {
        tasks,
        k,
        iterations: arg(&args, "--iterations", 10.0) as u32,
        visible: ((tasks as f64 * (1.0 - holdout)).round() as usize).clamp(2, tasks),
        reuse_seed: args.iter().any(|a| a == "--reuse-seed"),
        plan: Plan::with(
            arg(&args, "--cap", (2 * k) as f64) as u32,
            spending,
            futility,
        ),
        bootstrap: args.iter().any(|a| a == "--bootstrap"),
        ceiling: arg(&args, "--ceiling", 40.0) as u32,
        old: args.iter().any(|a| a == "--previous"),
    };
    let equal_runs = arg(&args, "--equal-runs", 10.0 * runs as f64) as usize;
    let equal = Cfg {
        ceiling: 0,
        plan: c.plan.clone(),
        ..c
    };
    let mut d = Dice(arg(&args, "--seed", 1.0) as u64);
    let t0 = std::time::Instant::now();
    let bounds: Vec<String> = (1..=c.plan.rounds)
        .map(|r| format!("{:.3}", c.plan.multiplier(c.visible, r)))
        .collect();
    println!(
        "{tasks} tasks ({} visible), k = {k}, {} iterations, {runs} runs per scenario{}; rule: {} looks, α spent {}, t bounds {}, futile below {}",
        c.visible,
        c.iterations,
        if c.reuse_seed { ", seed's own trials reused (biased)" } else { "" },
        c.plan.rounds,
        spending.describe(),
        bounds.join(" "),
        futility,
    );
    let mut pooled: Vec<Outcome> = Vec::new();
    let mut false_claims = 0.0;
    for sc in [
        Scenario::Clearly,
        Scenario::Beats,
        Scenario::Nets,
        Scenario::Lucky,
        Scenario::Equal,
    ] {
        // The false-claim rate wants more runs than the rest (and no ceiling draws).
        let (n, c) = match sc {
            Scenario::Equal => (equal_runs, &equal),
            _ => (runs, &c),
        };
        let res: Vec<Outcome> = (0..n).map(|_| one_run(&mut d, c, sc)).collect();
        println!("{sc:?}: {}", report(&res));
        println!("{}", row(tasks, k, sc, &res));
        if sc == Scenario::Equal {
            false_claims = share(&res, |r| r.new != Answer::Covers);
        } else {
            pooled.extend(res);
        }
    }
    let t = trials(&pooled);
    let mean = |f: fn(&Outcome) -> f64| pooled.iter().map(f).sum::<f64>() / pooled.len() as f64;
    println!(
        "SUMMARY tasks={tasks} k={k} final_median={} (target <= {}) median_when_moved={} mean={:.0} p90={} \
         agree_2k_same_trials={:.1}% (target >= 95%) independent={:.1}% (ceiling {:.1}%) | \
         as_it_was: same_trials={:.1}% independent={:.1}% (ceiling {:.1}%) | \
         truth={:.1}% (2k: {:.1}%) equal_false_claims={:.1}% (<= 5%) {:.1} s",
        t.0,
        tasks as u32 * k,
        t.1,
        t.2,
        t.3,
        share(&pooled, |r| r.new == r.same_bs),
        share(&pooled, |r| r.new == r.again_bs),
        100.0 * mean(|r| r.ceiling_bs),
        share(&pooled, |r| r.new == r.same),
        share(&pooled, |r| r.new == r.again),
        100.0 * mean(|r| r.ceiling),
        share(&pooled, |r| r.new == truth_of(r.new_gain)),
        share(&pooled, |r| r.same_bs == truth_of(r.new_gain)),
        false_claims,
        t0.elapsed().as_secs_f64()
    );
}

/// The percentage of `res` for which `f` holds.
fn share(res: &[Outcome], f: impl Fn(&Outcome) -> bool) -> f64 {
    100.0 * res.iter().filter(|r| f(r)).count() as f64 / res.len().max(1) as f64
}

/// The sequential rule's trials: median, median where best left the seed, mean, p90.
fn trials(res: &[Outcome]) -> (u32, u32, f64, u32) {
    let all: Vec<u32> = res.iter().map(|r| r.new_trials).collect();
    let moved: Vec<u32> = res
        .iter()
        .filter(|r| r.moved)
        .map(|r| r.new_trials)
        .collect();
    let mean = all.iter().sum::<u32>() as f64 / all.len().max(1) as f64;
    (
        quantile(all.clone(), 0.5),
        quantile(moved, 0.5),
        mean,
        quantile(all, 0.9),
    )
}

/// One scenario as a markdown table row (docs/final-answer.md): size, moves, trials (median,
/// when best left, p90), agreement with the 2k answer of best vs seed (same trials;
/// independent, with its ceiling), with the 2k answer as it was (runner-up switching; same
/// trials), with the truth (sequential / 2k best vs seed), claims against the truth.
fn row(tasks: usize, k: u32, sc: Scenario, res: &[Outcome]) -> String {
    let t = trials(res);
    let wrong = |r: &Outcome| r.new != Answer::Covers && r.new != truth_of(r.new_gain);
    let mean = |f: fn(&Outcome) -> f64| res.iter().map(f).sum::<f64>() / res.len().max(1) as f64;
    format!(
        "ROW | {tasks}, k = {k} | {} | {}/{} | {} ({}) | {} | {:.1}% | {:.1}% ({:.1}%) | {:.1}% | {:.1}% / {:.1}% | {} |",
        format!("{sc:?}").to_lowercase(),
        res.iter().filter(|r| r.moved).count(),
        res.len(),
        t.0,
        t.1,
        t.3,
        share(res, |r| r.new == r.same_bs),
        share(res, |r| r.new == r.again_bs),
        100.0 * mean(|r| r.ceiling_bs),
        share(res, |r| r.new == r.same),
        share(res, |r| r.new == truth_of(r.new_gain)),
        share(res, |r| r.same_bs == truth_of(r.new_gain)),
        res.iter().filter(|r| wrong(r)).count(),
    )
}

/// One scenario's lines: trials, agreement of every kind, claims and stops.
fn report(res: &[Outcome]) -> String {
    let count = |f: &dyn Fn(&Outcome) -> bool| res.iter().filter(|r| f(r)).count();
    let mean =
        |f: fn(&Outcome) -> f64| 100.0 * res.iter().map(f).sum::<f64>() / res.len().max(1) as f64;
    let t = trials(res);
    let old: Vec<u32> = res.iter().map(|r| r.old_trials).collect();
    let stops = [
        Stopped::Better,
        Stopped::Worse,
        Stopped::Futile,
        Stopped::Cap,
    ]
    .map(|s| format!("{s:?} {}", count(&|r| r.stop == Some(s))))
    .join(", ");
    format!(
        "best left the seed in {}/{}\n  final trials: sequential median {} (when best left: {}), mean {:.0}, p90 {}, max {} | 2k re-evaluation median {}\n  \
         agreement with the 2k answer of best vs seed: same trials {:.1}%, independent {:.1}% (ceiling {:.1}%, itself {:.1}%)\n  \
         agreement with the 2k answer as it was (runner-up switching): same trials {:.1}%, independent {:.1}% (ceiling {:.1}%, itself {:.1}%)\n  \
         agreement with the truth: sequential {:.1}%, 2k best vs seed {:.1}%, 2k as it was {:.1}%\n  \
         'better' said: sequential {}, 2k {}, as it was {} | with no true gain: {}, {}, {} | 'worse' said: {}, {}, {} | with no true loss: {}, {}, {}\n  \
         sequential stops: {stops}",
        count(&|r| r.moved),
        res.len(),
        t.0,
        t.1,
        t.2,
        t.3,
        res.iter().map(|r| r.new_trials).max().unwrap_or(0),
        quantile(old, 0.5),
        share(res, |r| r.new == r.same_bs),
        share(res, |r| r.new == r.again_bs),
        mean(|r| r.ceiling_bs),
        share(res, |r| r.same_bs == r.again_bs),
        share(res, |r| r.new == r.same),
        share(res, |r| r.new == r.again),
        mean(|r| r.ceiling),
        share(res, |r| r.same == r.again),
        share(res, |r| r.new == truth_of(r.new_gain)),
        share(res, |r| r.same_bs == truth_of(r.new_gain)),
        share(res, |r| r.same == truth_of(r.old_gain)),
        count(&|r| r.new == Answer::Better),
        count(&|r| r.same_bs == Answer::Better),
        count(&|r| r.same == Answer::Better),
        count(&|r| r.new == Answer::Better && r.new_gain <= 1e-12),
        count(&|r| r.same_bs == Answer::Better && r.new_gain <= 1e-12),
        count(&|r| r.same == Answer::Better && r.old_gain <= 1e-12),
        count(&|r| r.new == Answer::Worse),
        count(&|r| r.same_bs == Answer::Worse),
        count(&|r| r.same == Answer::Worse),
        count(&|r| r.new == Answer::Worse && r.new_gain >= -1e-12),
        count(&|r| r.same_bs == Answer::Worse && r.new_gain >= -1e-12),
        count(&|r| r.same == Answer::Worse && r.old_gain >= -1e-12),
    )
}
