//! Attribution where the budget is smallest: 8 and 20 tasks, k = 2, the default
//! `max_extra_share` (2 and 5 extra trials of the share per iteration). Three predicted fixes
//! compete for the extra trials with harm nobody predicted: a harmful line in the same file
//! as a good lesson, one in its own file that breaks two tasks, and one made an iteration
//! later. Each must end HARMFUL (or UNJUDGED) and reverted, out of `best`, with no good
//! lesson lost.

use crate::attribution_sim;
use crate::common;

use attribution_sim::{Effect, Scenario, SimChange, FILES};
use common::{root, text};

fn scenario(tasks: u32) -> Scenario {
    let c = SimChange::new;
    let mut two = c("c5", Effect::Break, 6, false, FILES[2], true);
    two.also = vec![7];
    let mut later = c("c6", Effect::Break, 8, false, FILES[1], false);
    later.iteration = 2;
    Scenario {
        tasks,
        changes: vec![
            c("c1", Effect::Fix, 1, true, FILES[0], false),
            c("c4", Effect::Break, 5, false, FILES[0], true),
            c("c2", Effect::Fix, 2, true, FILES[1], true),
            c("c3", Effect::Fix, 3, true, FILES[0], false),
            two,
            later,
        ],
        // best must be free of harm after the final re-evaluation too.
        evolve: String::new(),
        ..Default::default()
    }
}

fn check(tasks: u32) {
    let d = tempfile::tempdir().unwrap();
    let sc = scenario(tasks);
    let (o, run) = sc.run(d.path(), &root(), env!("CARGO_BIN_EXE_ahe").as_ref());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = sc.outcome(&run);
    assert_eq!(out.harmful, 3);
    assert_eq!(out.harmful_rolled_back, 3, "{out:?}");
    assert_eq!(out.harmful_in_best, 0, "{out:?}");
    assert_eq!(out.collateral_lines_lost, 0, "{out:?}");
    for c in sc.changes.iter().filter(|c| c.effect == Effect::Fix) {
        assert_eq!(out.verdicts[&c.id], "EFFECTIVE", "{out:?}");
    }
    // The harm floor paid for the counterfactuals the share could not.
    let ev = common::json_file(&run.join("iterations/002/change_evaluation.json"));
    assert!(ev["counterfactual_trials"].as_u64().unwrap() > 0, "{ev}");
}

#[test]
fn harm_is_caught_at_8_tasks() {
    check(8);
}

#[test]
fn harm_is_caught_at_20_tasks() {
    check(20);
}

/// The control: without the floor and with unjudged changes kept, the share alone (2 extra
/// trials at 8 tasks) cannot judge the unpredicted harm, which stays in the harness.
#[test]
fn without_the_floor_harm_stays_at_8_tasks() {
    let d = tempfile::tempdir().unwrap();
    let sc = Scenario {
        attribution: "harm_floor_trials = 0\nunjudged = \"keep\"\n".into(),
        ..scenario(8)
    };
    let (o, run) = sc.run(d.path(), &root(), env!("CARGO_BIN_EXE_ahe").as_ref());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = sc.outcome(&run);
    assert!(out.harmful_rolled_back < 3, "{out:?}");
    assert!(out.verdicts.values().any(|v| v == "UNJUDGED"), "{out:?}");
}
