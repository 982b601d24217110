//! Small statistics for attribution: Fisher's exact test and a paired bootstrap.

/// Significance level under which a flip is not called noise.
pub const ALPHA: f64 = 0.05;

/// ln C(n, k) (0 when k > n, so callers must keep k ≤ n for a real coefficient).
pub fn ln_choose(n: u32, k: u32) -> f64 {
    if k > n {
        return f64::NEG_INFINITY;
    }
    let k = k.min(n - k);
    (1..=k)
        .map(|i| ((n - k + i) as f64).ln() - (i as f64).ln())
        .sum()
}

/// Two-sided Fisher exact test p-value of `a` successes out of `n1` against `b` out of `n2`
/// (sum of the probabilities of every table with the same margins that is at most as likely
/// as the observed one). 1.0 when either sample is empty.
pub fn fisher_exact(a: u32, n1: u32, b: u32, n2: u32) -> f64 {
    let (a, b) = (a.min(n1), b.min(n2));
    if n1 == 0 || n2 == 0 {
        return 1.0;
    }
    let n = n1 + n2;
    let s = a + b;
    let denom = ln_choose(n, s);
    let p = |x: u32| (ln_choose(n1, x) + ln_choose(n2, s - x) - denom).exp();
    let lo = s.saturating_sub(n2);
    let hi = s.min(n1);
    let observed = p(a);
    let total: f64 = (lo..=hi)
        .map(p)
        .filter(|&px| px <= observed * (1.0 + 1e-7))
        .sum();
    total.min(1.0)
}

/// Mean of paired differences and its 95% percentile-bootstrap interval (tasks resampled
/// with replacement, 2000 reps, fixed seed: deterministic). `None` for no pairs.
pub fn paired_delta_ci(prev: &[f64], cur: &[f64]) -> Option<(f64, [f64; 2])> {
    if prev.is_empty() || prev.len() != cur.len() {
        return None;
    }
    let diffs: Vec<f64> = cur.iter().zip(prev).map(|(c, p)| c - p).collect();
    // Resampling tasks and averaging their differences is the paired bootstrap.
    Some(ahe_bench::scores::mean_with_ci(&diffs))
}

/// Whether an interval excludes zero.
pub fn excludes_zero(ci: [f64; 2]) -> bool {
    ci[0] > 0.0 || ci[1] < 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomials() {
        assert!((ln_choose(4, 2).exp() - 6.0).abs() < 1e-9);
        assert!((ln_choose(20, 10).exp() - 184_756.0).abs() < 1e-4);
        assert_eq!(ln_choose(5, 0), 0.0);
        assert_eq!(ln_choose(2, 3), f64::NEG_INFINITY);
    }

    #[test]
    fn fisher_values() {
        // 0/2 vs 2/2: tables with column sum 2 have probabilities 1/6, 4/6, 1/6.
        assert!((fisher_exact(0, 2, 2, 2) - 1.0 / 3.0).abs() < 1e-12);
        assert!((fisher_exact(2, 2, 0, 2) - 1.0 / 3.0).abs() < 1e-12);
        // 0/10 vs 10/10: only the two extreme tables, each 1/C(20,10).
        let p = fisher_exact(0, 10, 10, 10);
        assert!((p - 2.0 / 184_756.0).abs() < 1e-12, "{p}");
        assert!(p < ALPHA);
        assert_eq!(fisher_exact(1, 2, 2, 2), 1.0);
        assert_eq!(fisher_exact(1, 2, 1, 2), 1.0);
        assert_eq!(fisher_exact(0, 0, 1, 2), 1.0);
        // 0/5 vs 5/5: 2/C(10,5) = 2/252.
        assert!((fisher_exact(0, 5, 5, 5) - 2.0 / 252.0).abs() < 1e-12);
        // Unequal k: 1/3 vs 4/4 → tables x = 1, 2, 3 have 3/21, 12/21, 6/21.
        assert!((fisher_exact(1, 3, 4, 4) - 3.0 / 21.0).abs() < 1e-12);
    }

    #[test]
    fn paired_interval_brackets_and_repeats() {
        let prev = [0.0, 0.5, 1.0, 0.0, 0.0, 1.0, 0.5, 0.0];
        let cur = [1.0, 0.5, 1.0, 1.0, 0.0, 1.0, 1.0, 0.5];
        let (d, ci) = paired_delta_ci(&prev, &cur).unwrap();
        assert!((d - 0.375).abs() < 1e-12);
        assert!(ci[0] <= d && d <= ci[1], "{ci:?}");
        assert!(ci[0] < ci[1]);
        assert_eq!(paired_delta_ci(&prev, &cur).unwrap().1, ci);
        assert!(paired_delta_ci(&[], &[]).is_none());
        assert!(paired_delta_ci(&[1.0], &[]).is_none());
        assert!(excludes_zero([0.1, 0.4]) && excludes_zero([-0.4, -0.1]));
        assert!(!excludes_zero([0.0, 0.4]) && !excludes_zero([-0.1, 0.1]));
    }
}
