//! Group-sequential boundaries by alpha spending (Lan–DeMets): for K equally spaced looks at
//! a standardised statistic Z_k = S_k/√k, where S is a sum of independent N(0, 1) increments
//! (one per round: the final answer's rounds are independent fresh trials), the two-sided
//! bounds c_1..c_K such that Z first leaves (−c_k, c_k) at look k with probability
//! `spent(k/K) − spent((k−1)/K)` when the mean is 0. The crossing probabilities are exact up
//! to numerical integration (Simpson on a grid, the recursion of Armitage, McPherson and
//! Rowe), not a union bound: a spending function that keeps α for the last look keeps that
//! look almost as strict as a fixed test's.

use crate::normal;

/// How α is spent over the information fraction t ∈ (0, 1]: `spent(1) = α`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spending {
    /// Lan–DeMets' O'Brien–Fleming type, α/2 a side: 2·(2 − 2Φ(z_{1−α/4}/√t)) (almost
    /// nothing early; the convention of `ldbounds` and `gsDesign`).
    OBrienFleming,
    /// Kim–DeMets' power family α·t^ρ (ρ = 1 near Pocock's, ρ = 3 near O'Brien–Fleming's).
    Power(f64),
}

impl Spending {
    /// The α spent by information fraction `t` (clamped to [0, 1]).
    pub fn spent(&self, alpha: f64, t: f64) -> f64 {
        let t = t.clamp(0.0, 1.0);
        if t <= 0.0 {
            return 0.0;
        }
        if t >= 1.0 {
            return alpha;
        }
        match self {
            Spending::OBrienFleming => {
                4.0 - 4.0 * normal::cdf(normal::quantile(1.0 - alpha / 4.0) / t.sqrt())
            }
            Spending::Power(rho) => alpha * t.powf(*rho),
        }
    }

    /// One line naming the function, for records and reports.
    pub fn describe(&self) -> String {
        match self {
            Spending::OBrienFleming => "O'Brien–Fleming-type (Lan–DeMets)".into(),
            Spending::Power(rho) => format!("α·t^{rho} (Kim–DeMets power family)"),
        }
    }
}

/// Grid points per look (odd: Simpson's rule).
const GRID: usize = 401;

/// Half-width, in standard deviations of S_k, beyond which a look's density is dropped.
const REACH: f64 = 9.0;

/// The z bounds of `looks` equally spaced looks spending `alpha` by `spending` (two-sided,
/// symmetric). A look that spends nothing has an infinite bound.
pub fn bounds(alpha: f64, spending: Spending, looks: u32) -> Vec<f64> {
    let k = looks.max(1);
    let spent = |j: u32| spending.spent(alpha, j as f64 / k as f64);
    // Mass of S_j on a grid of the continuation region: (point, density × Simpson weight).
    let c1 = normal::quantile(1.0 - spent(1) / 2.0);
    let mut mass = grid(c1, 1.0, pdf);
    let mut out = vec![c1];
    for j in 2..=k {
        let target = spent(j) - spent(j - 1);
        let b = solve(&mass, target, j as f64);
        out.push(b / (j as f64).sqrt());
        mass = grid(b, j as f64, |y| {
            mass.iter().map(|(x, w)| w * pdf(y - x)).sum::<f64>()
        });
    }
    out
}

/// Points and weights (density × Simpson weight) over (−b, b) ∩ ±REACH·√info.
fn grid(b: f64, info: f64, density: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
    let half = b.min(REACH * info.sqrt());
    let h = 2.0 * half / (GRID - 1) as f64;
    (0..GRID)
        .map(|i| {
            let x = -half + i as f64 * h;
            let simpson = match i {
                0 => 1.0,
                i if i == GRID - 1 => 1.0,
                i if i % 2 == 1 => 4.0,
                _ => 2.0,
            };
            (x, density(x) * simpson * h / 3.0)
        })
        .collect()
}

/// The bound `b` on S_j (one more N(0, 1) increment after `mass`) that S_j crosses with
/// probability `target` (bisection: the crossing chance falls as b grows).
fn solve(mass: &[(f64, f64)], target: f64, info: f64) -> f64 {
    let cross = |b: f64| -> f64 {
        mass.iter()
            .map(|(x, w)| w * (normal::cdf(-b - x) + normal::cdf(x - b)))
            .sum()
    };
    let (mut lo, mut hi) = (0.0, (REACH + 3.0) * info.sqrt());
    if target <= 0.0 || cross(hi) >= target {
        return if target <= 0.0 { f64::INFINITY } else { hi };
    }
    for _ in 0..80 {
        let mid = 0.5 * (lo + hi);
        if cross(mid) > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The standard normal density.
fn pdf(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

#[cfg(test)]
#[path = "boundary_tests.rs"]
mod tests;
