use super::*;
use rand::{Rng, SeedableRng};

#[test]
fn one_look_is_the_fixed_test() {
    let b = bounds(0.05, Spending::OBrienFleming, 1);
    assert_eq!(b.len(), 1);
    assert!((b[0] - 1.959_964).abs() < 1e-5, "{b:?}");
    let b = bounds(0.05, Spending::Power(3.0), 1);
    assert!((b[0] - 1.959_964).abs() < 1e-5, "{b:?}");
}

#[test]
fn obrien_fleming_bounds_match_the_published_ones() {
    // Lan–DeMets O'Brien–Fleming type, four equally spaced looks, two-sided α = 0.05
    // (ldbounds / gsDesign): 4.3326, 2.9631, 2.3590, 2.0141.
    let b = bounds(0.05, Spending::OBrienFleming, 4);
    for (got, want) in b.iter().zip([4.3326, 2.9631, 2.3590, 2.0141]) {
        assert!((got - want).abs() < 0.003, "{b:?}");
    }
    // The union bound would need 2.16 at the last look for the same spending.
    let last = Spending::OBrienFleming.spent(0.05, 1.0) - Spending::OBrienFleming.spent(0.05, 0.75);
    assert!(normal::quantile(1.0 - last / 2.0) > 2.15);
}

#[test]
fn power_family_spends_as_stated() {
    let s = Spending::Power(3.0);
    assert!((s.spent(0.05, 0.5) - 0.05 / 8.0).abs() < 1e-15);
    assert_eq!(s.spent(0.05, 0.0), 0.0);
    assert!((s.spent(0.05, 1.0) - 0.05).abs() < 1e-15);
    let b = bounds(0.05, s, 4);
    // The bounds fall look by look; the first is the one-look bound at α/64.
    assert!(b.windows(2).all(|w| w[0] > w[1]), "{b:?}");
    assert!(
        (b[0] - normal::quantile(1.0 - 0.05 / 128.0)).abs() < 1e-9,
        "{b:?}"
    );
    assert!(b[3] > 1.96 && b[3] < 2.1, "{b:?}");
}

/// Brownian motion observed at 1..=k, crossing checked against the bounds: the share that
/// crosses at each look matches what the spending function spends there.
#[test]
fn simulated_paths_cross_as_often_as_spent() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let (k, runs) = (5u32, 200_000);
    let s = Spending::Power(1.0);
    let b = bounds(0.05, s, k);
    let mut first = vec![0u32; k as usize];
    for _ in 0..runs {
        let mut sum = 0.0;
        for j in 1..=k {
            // Box–Muller.
            let (u, v): (f64, f64) = (rng.gen::<f64>().max(1e-300), rng.gen());
            sum += (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
            if (sum / (j as f64).sqrt()).abs() >= b[j as usize - 1] {
                first[j as usize - 1] += 1;
                break;
            }
        }
    }
    let total = first.iter().sum::<u32>() as f64 / runs as f64;
    assert!((total - 0.05).abs() < 0.0025, "{total} {first:?}");
    for (j, n) in first.iter().enumerate() {
        let want = s.spent(0.05, (j + 1) as f64 / 5.0) - s.spent(0.05, j as f64 / 5.0);
        let got = *n as f64 / runs as f64;
        assert!(
            (got - want).abs() < 0.0015,
            "look {}: {got} vs {want}",
            j + 1
        );
    }
}

#[test]
fn a_look_that_spends_nothing_never_stops() {
    let b = bounds(0.05, Spending::Power(1e6), 3);
    assert!(b[0].is_infinite() && b[1].is_infinite(), "{b:?}");
    assert!((b[2] - 1.959_964).abs() < 1e-3, "{b:?}");
}
