use super::*;
use rand::{Rng, SeedableRng};

/// `n` tasks: the first `better` have best at 1.0 and the seed at 0.0, the rest are equal
/// at `base`.
fn pairs(n: usize, better: usize, base: f64) -> Vec<(f64, f64)> {
    (0..n)
        .map(|i| if i < better { (1.0, 0.0) } else { (base, base) })
        .collect()
}

#[test]
fn a_plan_has_one_look_per_round_up_to_the_cap() {
    assert_eq!(Plan::new(4, 1).rounds, 4);
    assert_eq!(Plan::new(4, 3).rounds, 2);
    assert_eq!(Plan::new(0, 1).rounds, 1);
    // Half of α at the first look, the rest split over looks 2..4; they sum to α.
    let plan = Plan::new(4, 1);
    let spent: f64 = (1..=4).map(|r| plan.alpha_at(r)).sum();
    assert!((spent - ALPHA).abs() < 1e-12);
    assert_eq!(plan.alpha_at(1), 0.025);
    // t(1 − 0.025/2; 88) = 2.2804; t(1 − 0.025/6; 88) = 2.6992 at the later looks.
    assert!((plan.multiplier(89, 1) - 2.2804).abs() < 0.003);
    assert!((plan.multiplier(89, 3) - 2.6992).abs() < 0.004);
    assert_eq!(Plan::new(1, 1).alpha_at(1), ALPHA);
}

#[test]
fn a_clear_improvement_stops_at_the_first_look() {
    let plan = Plan::new(4, 1);
    let (l, stop) = look(&plan, 1, 1, &pairs(40, 12, 0.5));
    assert_eq!(stop, Some(Stopped::Better), "{l:?}");
    assert!((l.delta - 0.3).abs() < 1e-12);
    assert!(l.ci[0] > 0.0 && l.ci[1] < 1.0, "{l:?}");
    let worse: Vec<(f64, f64)> = pairs(40, 12, 0.5).iter().map(|(b, s)| (*s, *b)).collect();
    assert_eq!(look(&plan, 1, 1, &worse).1, Some(Stopped::Worse));
}

#[test]
fn identical_harnesses_stop_as_futile_and_the_cap_stops_the_rest() {
    let plan = Plan::new(4, 1);
    let (l, stop) = look(&plan, 1, 1, &pairs(30, 0, 0.5));
    assert_eq!(stop, Some(Stopped::Futile), "{l:?}");
    assert_eq!((l.delta, l.ci, l.conditional_power), (0.0, [0.0, 0.0], 0.0));
    // Two tasks of 30 better: the interval covers 0, but the cap could still decide.
    let (l, stop) = look(&plan, 1, 1, &pairs(30, 2, 0.5));
    assert!(l.ci[0] < 0.0 && l.ci[1] > 0.0, "{l:?}");
    assert!(l.conditional_power >= FUTILITY, "{l:?}");
    assert_eq!(stop, None);
    assert_eq!(look(&plan, 4, 4, &pairs(30, 2, 0.5)).1, Some(Stopped::Cap));
    assert_eq!(
        look(&plan, 1, 1, &pairs(1, 1, 0.5)).1,
        Some(Stopped::TooFewTasks)
    );
}

#[test]
fn conditional_power_grows_with_the_estimate_and_is_certain_at_the_cap() {
    let plan = Plan::new(4, 1);
    let c = plan.multiplier(50, 4);
    let p = |m: f64| conditional_power(&plan, 1, m, 0.05, c);
    assert!(
        p(0.0) < p(0.05) && p(0.05) < p(0.1),
        "{} {} {}",
        p(0.0),
        p(0.05),
        p(0.1)
    );
    assert!((p(0.1) - p(-0.1)).abs() < 1e-12, "symmetric");
    assert_eq!(conditional_power(&plan, 4, 0.2, 0.05, c), 1.0);
    assert_eq!(conditional_power(&plan, 4, 0.1, 0.05, c), 0.0);
}

/// Runs the rule on `tasks` tasks whose true rates are `truth` (best, seed): each round adds
/// one fresh Bernoulli trial of each per task; returns the stop and the rounds run.
fn simulate(rng: &mut rand::rngs::StdRng, truth: &[(f64, f64)], plan: &Plan) -> (Stopped, u32) {
    let mut passed = vec![(0u32, 0u32); truth.len()];
    for r in 1..=plan.rounds {
        for (p, (b, s)) in passed.iter_mut().zip(truth) {
            p.0 += rng.gen_bool(*b) as u32;
            p.1 += rng.gen_bool(*s) as u32;
        }
        let rates: Vec<(f64, f64)> = passed
            .iter()
            .map(|(b, s)| (*b as f64 / r as f64, *s as f64 / r as f64))
            .collect();
        if let (_, Some(stop)) = look(plan, r, r, &rates) {
            return (stop, r);
        }
    }
    unreachable!("the last look always stops")
}

#[test]
fn equal_harnesses_are_called_different_at_most_alpha_of_the_time() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let plan = Plan::new(4, 1);
    // 60 tasks with rates spread over [0, 1], best and the seed equal on each.
    let truth: Vec<(f64, f64)> = (0..60)
        .map(|i| (i as f64 / 59.0, i as f64 / 59.0))
        .collect();
    let runs = 2000;
    let mut wrong = 0;
    let mut rounds = 0;
    for _ in 0..runs {
        let (stop, r) = simulate(&mut rng, &truth, &plan);
        wrong += matches!(stop, Stopped::Better | Stopped::Worse) as u32;
        rounds += r;
    }
    let rate = wrong as f64 / runs as f64;
    assert!(rate <= 0.05, "false claims: {rate}");
    // Futility stops most of them early: fewer than two rounds on average.
    assert!((rounds as f64 / runs as f64) < 2.0, "{rounds}");
}

#[test]
fn a_real_improvement_is_found_and_usually_at_the_first_look() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let plan = Plan::new(4, 1);
    // 60 tasks, TB2-like: 20 always solved, 25 never; best lifts 15 from 0.2 to 0.9 (+0.175).
    let truth: Vec<(f64, f64)> = (0..60)
        .map(|i| match i {
            0..15 => (0.9, 0.2),
            15..35 => (1.0, 1.0),
            _ => (0.0, 0.0),
        })
        .collect();
    let (mut found, mut first) = (0, 0);
    for _ in 0..500 {
        let (stop, r) = simulate(&mut rng, &truth, &plan);
        found += (stop == Stopped::Better) as u32;
        first += (stop == Stopped::Better && r == 1) as u32;
    }
    assert!(found >= 450, "power {found}/500");
    assert!(first >= 300, "at the first look {first}/500");
}

#[test]
fn a_noisy_small_gain_costs_power_to_futility() {
    // All 60 tasks at 0.5, best +0.125 on a quarter of them: the futility stop ends about a
    // third of the runs at the first look without a claim (the price of stopping early).
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let plan = Plan::new(4, 1);
    let truth: Vec<(f64, f64)> = (0..60)
        .map(|i| if i < 15 { (1.0, 0.5) } else { (0.5, 0.5) })
        .collect();
    let mut futile_first = 0;
    for _ in 0..500 {
        let (stop, r) = simulate(&mut rng, &truth, &plan);
        futile_first += (stop == Stopped::Futile && r == 1) as u32;
    }
    assert!((100..=250).contains(&futile_first), "{futile_first}/500");
}
