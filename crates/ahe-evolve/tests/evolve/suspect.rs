//! A suspect trial (it touched the verifier's ground) is carried into the cleaned trace and
//! named, with its reasons and turns, in the debugger's pre-analysis.

use ahe_bench::{Suspect, SuspectReason, TrialResult, TrialStatus};
use ahe_evolve::debug::task::pre_analysis;
use ahe_rundir::clean::clean_trial;

#[test]
fn pre_analysis_names_suspect_trials_with_reasons_and_turns() {
    let tmp = tempfile::tempdir().unwrap();
    let mut traces = Vec::new();
    for (attempt, suspect) in [(1, false), (2, true)] {
        let dir = tmp.path().join(attempt.to_string());
        let mut r = TrialResult::new("t1", attempt);
        r.status = TrialStatus::Pass;
        r.reward = Some(1.0);
        if suspect {
            r.suspect = Some(Suspect {
                reasons: vec![SuspectReason {
                    reason: "tool call `shell` names the reward file".into(),
                    turn: Some(4),
                }],
            });
        }
        ahe_bench::trial::write_result(&dir, &r);
        traces.push(clean_trial(&dir).unwrap());
    }
    assert!(traces[0].suspect.is_empty());
    assert_eq!(traces[1].suspect.len(), 1);
    let text = pre_analysis("t1", &traces);
    assert!(text.contains("Trial 2 is SUSPECT"), "{text}");
    assert!(
        text.contains("- tool call `shell` names the reward file (turn 4)"),
        "{text}"
    );
    assert!(!text.contains("Trial 1 is SUSPECT"), "{text}");
    // The cleaned trace of an honest trial has no `suspect` key (the schema is unchanged).
    let json = serde_json::to_value(&traces[0]).unwrap();
    assert!(json.get("suspect").is_none());
}
