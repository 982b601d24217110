//! Automatic rollback by `git revert` of one change's commit, on a real repository after a
//! real evolve phase and real attribution: the other change in the same file survives; a
//! conflicting revert falls back to a file restore and names the lines of other changes it
//! removed; a rollback is its own commit and can itself be rolled back; a change of an older
//! manifest (no commit) is rolled back by restoring its files.

use crate::fixture;

use std::collections::{BTreeMap, BTreeSet};

use ahe_attribution::attribute::{self, ChangeEvaluation, Verdict};
use ahe_bench::{Scores, TrialResult, TrialStatus};
use ahe_evolve::commit::chain;
use ahe_evolve::commit::rollback::{auto_rollback, LostLines};
use ahe_rundir::{IterationDir, Manifest};
use fixture::{commit_change, write, Fixture, SEED_MEMORY, SUBMIT};

const BAD: &str = "- NO-ECHO: never create files with echo.";
const GOOD: &str = "- HINT-LEVEL-FIELD: count log lines by the level field.";

/// Scores of one trial per task: `passing` pass, the other smoke tasks fail.
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

/// The attribution of `m` when hello-file regressed and count-errors was fixed.
fn judged(t: u32, m: &Manifest) -> ChangeEvaluation {
    let visible: BTreeSet<String> = ["count-errors", "fix-sum", "hello-file"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (before, after) = (scores(&["hello-file"]), scores(&["count-errors"]));
    attribute::attribute(
        t,
        Some(m),
        &before,
        &after,
        &visible,
        &BTreeMap::new(),
        &Default::default(),
    )
}

fn verdict(ev: &ChangeEvaluation, id: &str) -> Verdict {
    ev.changes.iter().find(|c| c.id == id).unwrap().verdict
}

/// Iteration `t` of the fixture: the evolve phase on `evaluated` with `script` (after the
/// given rollbacks), then the commit phase. Returns the iteration dir and its commit.
async fn iterate(
    f: &Fixture,
    t: u32,
    evaluated: &str,
    script: &str,
    rollbacks: &[ahe_evolve::commit::rollback::Rollback],
) -> (IterationDir, String) {
    let it = f.iteration(t);
    it.write_evaluated(evaluated).unwrap();
    f.evolve(&it, evaluated, script, rollbacks, None).await;
    let done = chain::commit_iteration(&f.repo, &it, evaluated).unwrap();
    (it, done.head)
}

/// c1 (harmful: the bad line, risk hello-file) then c2 (good: predicted count-errors), both
/// in memory/MEMORY.md: c1 writes `first`, c2 `second`.
fn bad_then_good(first: &str, second: &str) -> String {
    let mut s = write("memory/MEMORY.md", first);
    s += &commit_change("c1", &["memory/MEMORY.md"], &["fix-sum"], &["hello-file"]);
    s += &write("memory/MEMORY.md", second);
    s += &commit_change("c2", &["memory/MEMORY.md"], &["count-errors"], &[]);
    s + SUBMIT
}

const IDLE: &str = "[[evolve]]\ncontent = \"nothing to add\"\n";

#[tokio::test]
async fn the_harmful_change_is_reverted_and_the_good_one_in_the_same_file_survives() {
    let f = Fixture::new();
    let c0 = f.repo.head().unwrap();
    // c1 puts the bad line above the seed notes, c2 the good line below them.
    let first = format!("{BAD}\n\n{SEED_MEMORY}");
    let second = format!("{first}\n{GOOD}\n");
    let (it1, h1) = iterate(&f, 1, &c0, &bad_then_good(&first, &second), &[]).await;
    let m1 = it1.manifest().unwrap();
    let ev = judged(2, &m1);
    assert_eq!(verdict(&ev, "c1"), Verdict::Harmful);
    assert_eq!(verdict(&ev, "c2"), Verdict::Effective);

    // Iteration 2: auto-rollback of c1 by git revert of its commit, then an idle agent.
    f.repo.reset_worktree(&h1).unwrap();
    let rb = auto_rollback(&it1, &f.repo, &ev, &h1).unwrap();
    assert_eq!(rb.applied.len(), 1);
    let r = &rb.applied[0];
    assert_eq!(r.change.id, "rollback-c1");
    assert_eq!(r.change.files, ["memory/MEMORY.md"]);
    assert!(r.restored.is_empty() && r.lost.is_empty(), "{r:?}");
    assert!(r.change.description.contains("reverting its commit"));
    let text = f.read("memory/MEMORY.md");
    assert_eq!(
        text,
        format!("{SEED_MEMORY}\n{GOOD}\n"),
        "applied to the working tree"
    );
    let (it2, h2) = iterate(&f, 2, &h1, IDLE, &rb.applied).await;
    let m2 = it2.manifest().unwrap();
    assert_eq!(m2.changes.len(), 1);
    let rc = m2.changes[0]
        .commit
        .clone()
        .expect("the rollback is its own commit");
    assert_eq!(rc, h2);
    assert_eq!(f.repo.parent_of(&rc).unwrap(), Some(h1.clone()));
    let next = f.read_at(&h2, "memory/MEMORY.md").unwrap();
    assert!(next.contains(GOOD) && !next.contains(BAD), "{next}");

    // Iteration 3: the rollback itself judged HARMFUL is reverted in turn: the bad line
    // comes back, the good one stays.
    let ev3 = judged(3, &{
        let mut m = m2.clone();
        m.changes[0].risk_tasks = vec!["hello-file".into()];
        m
    });
    assert_eq!(verdict(&ev3, "rollback-c1"), Verdict::Harmful);
    f.repo.reset_worktree(&h2).unwrap();
    let rb3 = auto_rollback(&it2, &f.repo, &ev3, &h2).unwrap();
    assert_eq!(rb3.applied[0].change.id, "rollback-rollback-c1");
    assert_eq!(f.read("memory/MEMORY.md"), second);
}

#[tokio::test]
async fn a_conflicting_revert_restores_the_file_and_names_the_lost_change() {
    let f = Fixture::new();
    let c0 = f.repo.head().unwrap();
    // c2's line right after c1's: reverting c1 alone conflicts. c1 also adds a file of its
    // own, which reverts cleanly.
    let first = format!("{SEED_MEMORY}{BAD}\n");
    let second = format!("{first}{GOOD}\n");
    let mut s = write("memory/MEMORY.md", &first);
    s += &write("memory/echo.md", "- also no printf\n");
    s += &commit_change(
        "c1",
        &["memory/MEMORY.md", "memory/echo.md"],
        &["fix-sum"],
        &["hello-file"],
    );
    s += &write("memory/MEMORY.md", &second);
    s += &commit_change("c2", &["memory/MEMORY.md"], &["count-errors"], &[]);
    s += SUBMIT;
    let (it1, h1) = iterate(&f, 1, &c0, &s, &[]).await;
    let ev = judged(2, &it1.manifest().unwrap());

    f.repo.reset_worktree(&h1).unwrap();
    let rb = auto_rollback(&it1, &f.repo, &ev, &h1).unwrap();
    let r = &rb.applied[0];
    assert_eq!(
        r.restored,
        ["memory/MEMORY.md"],
        "only the conflicting file"
    );
    assert_eq!(
        r.lost,
        vec![LostLines {
            change: Some("c2".into()),
            file: "memory/MEMORY.md".into(),
            lines: vec![GOOD.into()],
        }]
    );
    assert!(
        r.change
            .description
            .contains("which also removed 1 line(s) of c2"),
        "{}",
        r.change.description
    );
    assert!(
        rb.notes[0].contains("rollback-c1") && rb.notes[0].contains("of c2"),
        "{:?}",
        rb.notes
    );
    assert_eq!(f.read("memory/MEMORY.md"), SEED_MEMORY);
    assert!(!f.repo.dir().join("memory/echo.md").exists());
    assert_eq!(r.change.files, ["memory/MEMORY.md", "memory/echo.md"]);
    let (it2, h2) = iterate(&f, 2, &h1, IDLE, &rb.applied).await;
    assert_eq!(it2.manifest().unwrap().changes[0].commit, Some(h2));
}

#[tokio::test]
async fn a_change_of_an_older_manifest_without_commit_is_restored_file_by_file() {
    let f = Fixture::new();
    let c0 = f.repo.head().unwrap();
    let first = format!("{BAD}\n\n{SEED_MEMORY}");
    let second = format!("{first}\n{GOOD}\n");
    let (it1, h1) = iterate(&f, 1, &c0, &bad_then_good(&first, &second), &[]).await;
    // What an older binary wrote: no commit per change.
    let mut m1 = it1.manifest().unwrap();
    for c in &mut m1.changes {
        c.commit = None;
    }
    it1.write_manifest(&m1).unwrap();
    let ev = judged(2, &m1);
    f.repo.reset_worktree(&h1).unwrap();
    let rb = auto_rollback(&it1, &f.repo, &ev, &h1).unwrap();
    assert!(rb.applied[0]
        .change
        .description
        .contains("restoring its files"));
    // The whole file went back to the evaluated seed: the good line went too.
    assert_eq!(f.read("memory/MEMORY.md"), SEED_MEMORY);
}
