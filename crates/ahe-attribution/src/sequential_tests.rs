use super::*;
use crate::boundary::Spending;
use rand::{Rng, SeedableRng};

/// `n` tasks: the first `better` have best at 1.0 and the seed at 0.0, the rest are equal
/// at `base`.
fn pairs(n: usize, better: usize, base: f64) -> Vec<(f64, f64)> {
    (0..n)
        .map(|i| if i < better { (1.0, 0.0) } else { (base, base) })
        .collect()
}

#[test]
fn a_plan_has_one_look_per_round_and_keeps_its_alpha_for_the_cap() {
    assert_eq!(Plan::new(4, 1).rounds, 4);
    assert_eq!(Plan::new(4, 3).rounds, 2);
    assert_eq!(Plan::new(0, 1).rounds, 1);
    let plan = Plan::new(4, 1);
    let spent: f64 = (1..=4).map(|r| plan.alpha_at(r)).sum();
    assert!((spent - ALPHA).abs() < 1e-10);
    assert_eq!(plan.spent(4), ALPHA);
    // O'Brien–Fleming type: almost nothing at the first look, most at the last.
    assert!(plan.alpha_at(1) < 1e-4, "{}", plan.alpha_at(1));
    assert!(plan.alpha_at(4) > 0.025, "{}", plan.alpha_at(4));
    // The published bounds (4.33, 2.96, 2.36, 2.01): the last look is nearly a fixed test's
    // 1.96, where the union bound over the same spending would need 2.16.
    assert!((plan.bound(1) - 4.3326).abs() < 0.003, "{plan:?}");
    assert!((plan.bound(4) - 2.0141).abs() < 0.003, "{plan:?}");
    // Over 89 tasks the multiplier is the t quantile of the same tail: a little wider.
    let (z, t) = (plan.bound(4), plan.multiplier(89, 4));
    assert!(t > z && t < z + 0.04, "{z} {t}");
    let one = Plan::new(1, 1);
    assert_eq!(one.alpha_at(1), ALPHA);
    assert!((one.multiplier(89, 1) - 1.9873).abs() < 0.003);
}

#[test]
fn a_clear_improvement_stops_early_and_harm_the_same_way() {
    let plan = Plan::new(4, 1);
    // Half of 40 tasks fixed: t = 6.2 clears even the first look's bound.
    let (l, stop) = look(&plan, 1, 1, &pairs(40, 20, 0.5));
    assert_eq!(stop, Some(Stopped::Better), "{l:?}");
    assert!((l.delta - 0.5).abs() < 1e-12);
    assert!(l.ci[0] > 0.0 && l.ci[1] < 1.0, "{l:?}");
    assert!(l.alpha_spent < 1e-4, "{l:?}");
    let worse: Vec<(f64, f64)> = pairs(40, 20, 0.5).iter().map(|(b, s)| (*s, *b)).collect();
    assert_eq!(look(&plan, 1, 1, &worse).1, Some(Stopped::Worse));
    // 12 of 40 (t = 4.1): not at the first look (bound ~4.9 in t), at the second (~3.1).
    let (l, stop) = look(&plan, 1, 1, &pairs(40, 12, 0.5));
    assert_eq!(stop, None, "{l:?}");
    assert!(l.ci[0] < 0.0, "{l:?}");
    let (l, stop) = look(&plan, 2, 2, &pairs(40, 12, 0.5));
    assert_eq!(stop, Some(Stopped::Better), "{l:?}");
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
    // Futility stops many of them early: well under the cap's four rounds on average.
    assert!((rounds as f64 / runs as f64) < 2.5, "{rounds}");
}

#[test]
fn a_real_improvement_is_found_and_mostly_by_the_second_look() {
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
    let (mut found, mut early) = (0, 0);
    for _ in 0..500 {
        let (stop, r) = simulate(&mut rng, &truth, &plan);
        found += (stop == Stopped::Better) as u32;
        early += (stop == Stopped::Better && r <= 2) as u32;
    }
    assert!(found >= 475, "power {found}/500");
    assert!(early >= 350, "by the second look {early}/500");
}

#[test]
fn a_noisy_small_gain_is_mostly_taken_to_the_cap() {
    // All 60 tasks at 0.5, best +0.5 on a quarter of them (+0.125): the first look rarely
    // decides, the futility stop ends a minority of the runs there (the price of stopping
    // early), and most runs that go on find the gain by the cap.
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let plan = Plan::new(4, 1);
    let truth: Vec<(f64, f64)> = (0..60)
        .map(|i| if i < 15 { (1.0, 0.5) } else { (0.5, 0.5) })
        .collect();
    let (mut futile_first, mut found) = (0, 0);
    for _ in 0..500 {
        let (stop, r) = simulate(&mut rng, &truth, &plan);
        futile_first += (stop == Stopped::Futile && r == 1) as u32;
        found += (stop == Stopped::Better) as u32;
    }
    assert!((25..=150).contains(&futile_first), "{futile_first}/500");
    assert!(found >= 250, "{found}/500");
}

#[test]
fn a_look_that_spends_no_alpha_cannot_stop_for_a_difference() {
    // Twenty looks of O'Brien–Fleming type: the first spends ~1e-18, an infinite bound.
    let plan = Plan::with(20, Spending::OBrienFleming, FUTILITY);
    assert!(plan.bound(1).is_infinite(), "{plan:?}");
    let (l, stop) = look(&plan, 1, 1, &pairs(40, 20, 0.5));
    assert_eq!((l.ci, stop), ([-1.0, 1.0], None), "{l:?}");
    // More looks cost the last one a little: above four looks' last bound, finite.
    assert!(plan.bound(20) > Plan::new(4, 1).bound(4), "{plan:?}");
    assert!(plan.bound(20) < 2.3, "{plan:?}");
}
