//! The evolution history the evolve agent reads (`inputs/history.md`), after a real evolve
//! phase (scripted evolve model), the real leak guard, real attribution and a real automatic
//! rollback: it shows the reverted change and the leak-refused one with their fates, and a
//! new change repeating the reverted one is refused until it names it.

use crate::fixture;

use std::collections::{BTreeMap, BTreeSet};

use ahe_attribution::attribute::{self, Verdict};
use ahe_bench::{Scores, TrialResult, TrialStatus};
use ahe_evolve::commit::chain;
use ahe_evolve::commit::rollback::auto_rollback;
use ahe_evolve::evolve::lineage::{self, Fate};
use ahe_rundir::RunDir;
use fixture::{commit_change, leak_guard, write, Fixture, SEED_MEMORY, SUBMIT};

/// Scores of one trial per smoke task: `passing` pass, the others fail.
fn scores(passing: &[&str]) -> Scores {
    let results: Vec<TrialResult> = ["count-errors", "fix-sum", "hello-file"]
        .iter()
        .map(|t| {
            let mut r = TrialResult::new(t, 1);
            let pass = passing.contains(t);
            r.status = if pass {
                TrialStatus::Pass
            } else {
                TrialStatus::Fail
            };
            r.reward = Some(if pass { 1.0 } else { 0.0 });
            r
        })
        .collect();
    ahe_bench::scores::compute(1, &results, 1.0)
}

/// A `commit_change` of memory/MEMORY.md with `why` as `why_this_component`.
fn commit_with_why(id: &str, why: &str) -> String {
    format!(
        "[[evolve]]\ntool = \"commit_change\"\nargs = {{ id = \"{id}\", type = \"improvement\", \
         description = \"again\", files = [\"memory/MEMORY.md\"], component = \"memory\", \
         predicted_fixes = [\"fix-sum\"], why_this_component = {why:?} }}\n\n"
    )
}

#[tokio::test]
async fn history_shows_the_reverted_and_the_leak_refused_change_and_guards_repeats() {
    let f = Fixture::new();
    let run = RunDir::new(f.dir.path());
    let c0 = f.repo.head().unwrap();
    // Iteration 1: c1 adds a bad note (risk hello-file); c2 writes a note naming a task.
    let it1 = f.iteration(1);
    it1.write_evaluated(&c0).unwrap();
    let mut s = write("memory/MEMORY.md", &format!("- NO-ECHO\n\n{SEED_MEMORY}"));
    s += &commit_change("c1", &["memory/MEMORY.md"], &["fix-sum"], &["hello-file"]);
    s += &write(
        "memory/notes.md",
        "- for hello-file, write the file directly\n",
    );
    s += &commit_change("c2", &["memory/notes.md"], &[], &[]);
    s += SUBMIT; // refused by the leak guard; the agent then stops
    let out = f.evolve(&it1, &c0, &s, &[], Some(leak_guard())).await;
    assert!(
        out.notes.iter().any(|n| n.contains("dropped change(s) c2")),
        "{:?}",
        out.notes
    );
    let h1 = chain::commit_iteration(&f.repo, &it1, &c0).unwrap().head;
    let proposed = it1.proposed().unwrap();
    assert_eq!(
        proposed.changes.len(),
        2,
        "proposed.json keeps the dropped change"
    );

    // Iteration 2: hello-file regressed, so c1 is HARMFUL and rolled back automatically.
    let it2 = f.iteration(2);
    it2.write_evaluated(&h1).unwrap();
    let visible: BTreeSet<String> = ["count-errors", "fix-sum", "hello-file"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let m1 = it1.manifest().unwrap();
    let (before, after) = (scores(&["hello-file"]), scores(&[]));
    let ev = attribute::attribute(
        2,
        Some(&m1),
        &before,
        &after,
        &visible,
        &BTreeMap::new(),
        &Default::default(),
    );
    assert_eq!(ev.changes[0].verdict, Verdict::Harmful);
    it2.write_change_evaluation(&ev).unwrap();
    f.repo.reset_worktree(&h1).unwrap();
    let rb = auto_rollback(&it1, &f.repo, &ev, &h1).unwrap();
    let past = lineage::past_changes(&run, 2, &rb.changes());
    let fates: Vec<(&str, &Fate)> = past
        .iter()
        .map(|p| (p.change.id.as_str(), &p.fate))
        .collect();
    assert_eq!(
        fates,
        [
            ("c1", &Fate::RevertedAuto { iteration: 2 }),
            ("c2", &Fate::RefusedLeak)
        ]
    );
    let md = lineage::history_md(&run, &past, 2, 3);
    for want in [
        "**iter-001/c1** (memory; files memory/MEMORY.md)",
        "verdict: HARMFUL",
        "risks realized hello-file",
        "fate: REVERTED by the automatic rollback in iteration 2",
        "**iter-001/c2** (memory; files memory/notes.md)",
        "fate: REFUSED by the leak guard",
        "The leak guard refused 1 submission(s)",
    ] {
        assert!(md.contains(want), "{want:?} missing from:\n{md}");
    }
    assert!(!md.contains("template error"), "{md}");
    // Only iteration 1 in full when one iteration is; with none, it is summarised.
    let short = lineage::history_md(&run, &past, 2, 0);
    assert!(short.contains("## Older iterations"), "{short}");
    assert!(
        short.contains("- iter-001/c1 (memory; memory/MEMORY.md): HARMFUL, REVERTED"),
        "{short}"
    );

    // The same file and component for another failure pattern is no repeat.
    let mut other = past[0].change.clone();
    other.predicted_fixes = vec!["count-errors".into()];
    assert!(lineage::repeat_problem(&other, &past).is_none());

    // The evolve agent repeats c1 without naming it: refused; then naming it: committed.
    let mut s = write(
        "memory/MEMORY.md",
        &format!("- NO-ECHO again\n\n{SEED_MEMORY}"),
    );
    s += &commit_with_why("c1", "memory is where notes go");
    s += &commit_with_why("c1", "unlike iter-001/c1 the note is scoped to log files");
    s += SUBMIT;
    let out = f.evolve_with(&it2, &h1, &s, &rb.applied, None, past).await;
    let answers = f.tool_answers(&it2);
    assert!(
        answers.contains("Change c1 repeats iter-001/c1 (same component `memory`, same files memory/MEMORY.md, same failure pattern or predicted fix), which was REVERTED by the automatic rollback in iteration 2"),
        "{answers}"
    );
    let ids: Vec<&str> = out.manifest.changes.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["rollback-c1", "c1"], "{:?}", out.notes);
    assert!(out.manifest.changes[1]
        .why_this_component
        .contains("iter-001/c1"));
}
