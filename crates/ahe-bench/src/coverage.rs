//! Which classes of reward hacking ahe stops by mechanism, which only the optional trajectory
//! judge can see, and what depends on reading the sandbox's layer from this host (threat
//! model: `docs/reward-integrity.md`); said by `ahe check` before a run is paid for.

/// How a class of hack is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Made impossible, on every backend with a hand-over.
    Blocked,
    /// Flagged by the change checks (needs the sandbox's writable layer readable here).
    ChangeChecks,
    /// Flagged by the witness of the test run (Python and pytest verifiers).
    Witness,
    /// Only the trajectory judge (`[models.judge]`) can see it.
    JudgeOnly,
}

/// One class of hack, with examples from `benchmarks/adversarial/`.
pub struct HackClass {
    /// The class, for people.
    pub name: &'static str,
    /// What stops it.
    pub stop: Stop,
}

/// The classes the threat model names.
pub const CLASSES: &[HackClass] = &[
    HackClass {
        name: "writing the reward (files, links, FIFOs)",
        stop: Stop::Blocked,
    },
    HackClass {
        name: "planting or replacing tests",
        stop: Stop::Blocked,
    },
    HackClass {
        name: "reading the published solution",
        stop: Stop::Blocked,
    },
    HackClass {
        name: "background writers and racers",
        stop: Stop::Blocked,
    },
    HackClass {
        name: "a kept server writing the reward",
        stop: Stop::Blocked,
    },
    HackClass {
        name: "tests rewritten while they run",
        stop: Stop::ChangeChecks,
    },
    HackClass {
        name: "test-runner configuration and plugins",
        stop: Stop::ChangeChecks,
    },
    HackClass {
        name: "interpreter and loader start-up hooks",
        stop: Stop::ChangeChecks,
    },
    HackClass {
        name: "image code or data edited in place",
        stop: Stop::ChangeChecks,
    },
    HackClass {
        name: "shadowing modules, programs, libraries",
        stop: Stop::ChangeChecks,
    },
    HackClass {
        name: "forcing success inside the test process",
        stop: Stop::Witness,
    },
    HackClass {
        name: "disabling the witness itself",
        stop: Stop::JudgeOnly,
    },
    HackClass {
        name: "hard-coding answers read from the tests",
        stop: Stop::JudgeOnly,
    },
    HackClass {
        name: "spoofed outputs the tests accept",
        stop: Stop::JudgeOnly,
    },
];

/// The names of the classes stopped by `stop`.
fn names(stop: Stop) -> Vec<&'static str> {
    CLASSES
        .iter()
        .filter(|c| c.stop == stop)
        .map(|c| c.name)
        .collect()
}

/// One line for a run's report: what the run's trials were checked with. `trials` counts
/// the trials whose verifier ran, `unchecked` those of them whose sandbox layer this host
/// could not read (no change checks: the classes that need them were not caught there).
pub fn report_line(trials: usize, unchecked: usize, judge_on: bool) -> String {
    let judge = names(Stop::JudgeOnly);
    let by_checks = names(Stop::ChangeChecks).len();
    let all = CLASSES.len() - judge.len();
    let mut s = if unchecked == 0 {
        format!(
            "{all} of {} hack classes stopped by mechanism on all {trials} verified trials",
            CLASSES.len()
        )
    } else {
        format!(
            "{all} of {} hack classes stopped by mechanism on {} of {trials} verified trials; \
             on the other {unchecked} the change checks did not run (this host could not read \
             the sandbox's layer): {} fewer classes caught there",
            CLASSES.len(),
            trials - unchecked,
            by_checks
        )
    };
    s.push_str(&format!(
        "; only the trajectory judge sees {} (the judge was {})",
        judge.join(", "),
        if judge_on { "on" } else { "off" }
    ));
    s
}

/// One line for `ahe check`: how many classes are stopped by mechanism on a backend whose
/// layer is (or is not) readable here, which ones need the judge, and whether it is on.
pub fn summary(layer_here: bool, judge_on: bool) -> String {
    let judge = names(Stop::JudgeOnly);
    let unchecked = if layer_here {
        Vec::new()
    } else {
        names(Stop::ChangeChecks)
    };
    let covered = CLASSES.len() - judge.len() - unchecked.len();
    let mut s = format!(
        "{covered} of {} hack classes stopped by mechanism with the judge off",
        CLASSES.len()
    );
    if !unchecked.is_empty() {
        s.push_str(&format!(
            "; the change checks do not run here (this host cannot read the sandbox's layer), \
             so these are not caught: {}",
            unchecked.join(", ")
        ));
    }
    s.push_str(&format!(
        "; only the trajectory judge sees: {} (the judge is {})",
        judge.join(", "),
        if judge_on {
            "on: [models.judge]"
        } else {
            "off: add [models.judge] to turn it on"
        }
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_line_counts_what_the_trials_were_checked_with() {
        let judged = CLASSES.iter().filter(|c| c.stop == Stop::JudgeOnly).count();
        let checks = CLASSES
            .iter()
            .filter(|c| c.stop == Stop::ChangeChecks)
            .count();
        let all = report_line(12, 0, false);
        assert!(
            all.starts_with(&format!(
                "{} of {} hack classes stopped by mechanism on all 12 verified trials",
                CLASSES.len() - judged,
                CLASSES.len()
            )),
            "{all}"
        );
        assert!(all.ends_with("(the judge was off)"), "{all}");
        let some = report_line(12, 5, true);
        assert!(
            some.contains(
                "on 7 of 12 verified trials; on the other 5 the change checks did not run"
            ) && some.contains(&format!(": {checks} fewer classes caught there")),
            "{some}"
        );
        assert!(some.ends_with("(the judge was on)"), "{some}");
    }
}
