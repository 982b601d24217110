//! When a flip within noise is decided: the stopping rule of the confirmation trials
//! (the Confirm phase that runs them is `ahe_evolve::confirm`).

use ahe_rundir::attribution::TaskMove;
use ahe_rundir::evidence::Tally;

use crate::stats::{fisher_exact, ALPHA};

/// Whether a flip needs no more confirmation trials: significant with `extra`, or `cap`
/// attempts made, or not significant even if every remaining attempt went its way.
pub fn decided(m: &TaskMove, extra: Tally, cap: u32) -> bool {
    let attempts = extra.trials + extra.infra;
    let p = |passed: u32, n: u32| fisher_exact(m.prev_passed, m.prev_k, passed, n);
    let (cp, ck) = (m.cur_passed + extra.passed, m.cur_k + extra.trials);
    if attempts >= cap || p(cp, ck) < ALPHA {
        return true;
    }
    let left = cap - attempts;
    let improving = m.cur_passed * m.prev_k > m.prev_passed * m.cur_k;
    let best = match improving {
        true => p(cp + left, ck + left),
        false => p(cp, ck + left),
    };
    best >= ALPHA
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahe_bench::TaskStatus;

    fn mv(pp: u32, pk: u32, cp: u32, ck: u32) -> TaskMove {
        TaskMove {
            task: "t".into(),
            prev_status: TaskStatus::Fail,
            cur_status: TaskStatus::Pass,
            prev_passed: pp,
            prev_k: pk,
            cur_passed: cp,
            cur_k: ck,
            p_value: fisher_exact(pp, pk, cp, ck),
            within_noise: true,
            extra_passed: 0,
            extra_trials: 0,
        }
    }

    fn tally(passed: u32, trials: u32) -> Tally {
        Tally {
            passed,
            trials,
            infra: 0,
        }
    }

    #[test]
    fn a_clean_fix_needs_three_more_passes_at_k2() {
        let m = mv(0, 2, 2, 2);
        assert!(!decided(&m, Tally::default(), 4));
        assert!(!decided(&m, tally(2, 2), 4), "0/2 vs 4/4 has p = 0.067");
        assert!(decided(&m, tally(3, 3), 4), "0/2 vs 5/5 has p = 0.048");
        // One failure among the extras: 0/2 vs 4/5 can still reach 5/6 at most (p > α).
        assert!(decided(&m, tally(2, 3), 4));
        assert!(decided(&m, Tally::default(), 0), "no trials allowed");
    }

    #[test]
    fn a_regression_is_confirmed_by_failures() {
        let m = mv(2, 2, 0, 2);
        assert!(!decided(&m, tally(0, 2), 4));
        assert!(decided(&m, tally(0, 3), 4));
        assert!(decided(&m, tally(1, 1), 4), "a pass makes it hopeless");
        let infra = Tally {
            passed: 0,
            trials: 1,
            infra: 3,
        };
        assert!(decided(&m, infra, 4), "infra errors use up attempts");
    }
}
