//! One commit per manifest change, with the real evolve phase (scripted mock evolve model)
//! and a real git repository: `commit_change` chains, plain manifests split by files, edits
//! the orchestrator reverted kept out of every change's commit, and resume after a kill at
//! any point of the commit phase. The chain's last tree is always what one `commit_all`
//! of the working tree commits.

use crate::fixture;

use ahe_evolve::commit::chain;
use ahe_runner::repo::iter_tag;
use ahe_runner::repo::revert::Revert;
use fixture::{commit_change, leak_guard, write, Fixture, SEED_MEMORY, SUBMIT};

const ONE: &str = "- GOOD-ONE: read the log format first.\n\n";
const TWO: &str = "\n- GOOD-TWO: run the tests before finishing.\n";

/// The two-change script: c1 adds a line above the seed notes, c2 one below; in between,
/// three calls commit_change refuses.
fn two_changes_script() -> String {
    let mut s = write("memory/MEMORY.md", &format!("{ONE}{SEED_MEMORY}"));
    s += &commit_change("c1", &["memory/MEMORY.md"], &["count-errors"], &[]);
    // Refused: the id is taken; `commit` is the orchestrator's; nothing changed since c1.
    s += &commit_change("c1", &["memory/MEMORY.md"], &[], &[]);
    s += "[[evolve]]\ntool = \"commit_change\"\nargs = { id = \"c8\", type = \"new\", \
          description = \"d\", files = [\"memory/MEMORY.md\"], component = \"memory\", \
          commit = \"abc\" }\n\n";
    s += &commit_change("c9", &["memory/MEMORY.md"], &[], &[]);
    s += &write("memory/MEMORY.md", &format!("{ONE}{SEED_MEMORY}{TWO}"));
    s += &commit_change("c2", &["memory/MEMORY.md"], &["fix-sum"], &["hello-file"]);
    s + SUBMIT
}

#[tokio::test]
async fn two_commit_change_calls_make_two_commits_tagged_at_the_last() {
    let f = Fixture::new();
    let c0 = f.repo.head().unwrap();
    let it = f.iteration(1);
    it.write_evaluated(&c0).unwrap();
    let out = f.evolve(&it, &c0, &two_changes_script(), &[], None).await;
    assert!(out.notes.is_empty(), "{:?}", out.notes);
    let answers = f.tool_answers(&it);
    for refusal in [
        "id c1 is already used",
        "`commit` is set by the orchestrator",
        "nothing changed in harness/ since the last commit_change",
        "committed change c2 (2 so far): memory/MEMORY.md",
    ] {
        assert!(answers.contains(refusal), "{refusal} not in {answers}");
    }
    let expected = f.commit_all_tree();
    let snaps = it.change_snapshots().unwrap();
    let ids: Vec<&str> = snaps.agent.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2"], "one snapshot per accepted commit_change");

    let done = chain::commit_iteration(&f.repo, &it, &c0).unwrap();
    let ids: Vec<&str> = done
        .manifest
        .changes
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    assert_eq!(ids, ["c1", "c2"]);
    let c1 = done.manifest.changes[0]
        .commit
        .clone()
        .expect("c1 has a commit");
    let c2 = done.manifest.changes[1]
        .commit
        .clone()
        .expect("c2 has a commit");
    // The chain: seed ← c1 ← c2 = iter-001 = HEAD; the manifest on disk names both.
    assert_eq!(f.repo.resolve(&iter_tag(1)).unwrap(), c2);
    assert_eq!(f.repo.head().unwrap(), c2);
    assert_eq!(f.history(), vec![c2.clone(), c1.clone(), c0.clone()]);
    assert_eq!(it.manifest().unwrap(), done.manifest);
    assert_eq!(
        f.repo.tree_of(&c2).unwrap(),
        expected,
        "same tree as commit_all"
    );
    // Each commit holds its change only.
    let at_c1 = f.read_at(&c1, "memory/MEMORY.md").unwrap();
    assert_eq!(at_c1, format!("{ONE}{SEED_MEMORY}"));
    assert!(f.repo.changed_files(&c2).unwrap().is_empty());
    // So either change can be reverted alone, the other one's lines staying.
    let Revert::Clean { tree } = f.repo.revert(&c2, &c1).unwrap() else {
        panic!("c1 reverts cleanly")
    };
    let minus_c1 = f.repo.commit_tree(&tree, &c2, "minus c1").unwrap();
    let text = f.read_at(&minus_c1, "memory/MEMORY.md").unwrap();
    assert_eq!(text, format!("{SEED_MEMORY}{TWO}"));
    // The commit messages: the last starts with the tag, the other names tag and change.
    let msg = |c: &str| {
        let repo = git2::Repository::open(f.repo.dir()).unwrap();
        let c = repo.find_commit(git2::Oid::from_str(c).unwrap()).unwrap();
        c.message().unwrap().to_string()
    };
    assert!(
        msg(&c1).starts_with("iter-001 c1: change c1"),
        "{}",
        msg(&c1)
    );
    assert!(
        msg(&c2).starts_with("iter-001: c2: change c2"),
        "{}",
        msg(&c2)
    );
}

#[tokio::test]
async fn a_plain_manifest_is_split_by_files_and_unnamed_edits_come_last() {
    let f = Fixture::new();
    let c0 = f.repo.head().unwrap();
    let it = f.iteration(1);
    let mut s = write("memory/MEMORY.md", "- HINT-A\n");
    s += &write("memory/style.md", "- HINT-B\n");
    s += &write("memory/unnamed.md", "- named by no change\n");
    s += r#"[[evolve]]
tool = "submit_manifest"
[evolve.args]
changes = [
  { id = "c1", type = "new", description = "a", files = ["memory/MEMORY.md"], component = "memory" },
  { id = "c2", type = "new", description = "b", files = ["memory/style.md", "memory/MEMORY.md"], component = "memory" },
]
"#;
    let out = f.evolve(&it, &c0, &s, &[], None).await;
    assert_eq!(
        out.notes,
        vec!["edited but named by no change: memory/unnamed.md"]
    );
    let expected = f.commit_all_tree();
    let done = chain::commit_iteration(&f.repo, &it, &c0).unwrap();
    let c1 = done.manifest.changes[0].commit.clone().unwrap();
    let c2 = done.manifest.changes[1].commit.clone().unwrap();
    // A file goes to the first change naming it.
    assert_eq!(f.files_of(&c1), ["memory/MEMORY.md"]);
    assert_eq!(f.files_of(&c2), ["memory/style.md"]);
    let head = f.repo.head().unwrap();
    assert_eq!(f.files_of(&head), ["memory/unnamed.md"]);
    assert_eq!(f.history(), vec![head.clone(), c2, c1, c0]);
    assert_eq!(f.repo.tree_of(&head).unwrap(), expected);
}

#[tokio::test]
async fn a_file_the_leak_guard_reverted_is_in_no_change_commit() {
    let f = Fixture::new();
    let c0 = f.repo.head().unwrap();
    let it = f.iteration(1);
    // c1 edits MEMORY.md and a note naming a task (a leak); c2 edits MEMORY.md again.
    let mut s = write(
        "memory/MEMORY.md",
        &format!("- LESSON-ONE\n\n{SEED_MEMORY}"),
    );
    s += &write(
        "memory/notes.md",
        "- for hello-file, write the file directly\n",
    );
    s += &commit_change("c1", &["memory/MEMORY.md", "memory/notes.md"], &[], &[]);
    s += &write(
        "memory/MEMORY.md",
        &format!("- LESSON-ONE\n\n{SEED_MEMORY}\n- LESSON-TWO\n"),
    );
    s += &commit_change("c2", &["memory/MEMORY.md"], &[], &[]);
    // Refused (the leak), and the agent stops: the guard reverts memory/notes.md.
    s += SUBMIT;
    let out = f.evolve(&it, &c0, &s, &[], Some(leak_guard())).await;
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("leak guard reverted memory/notes.md")),
        "{:?}",
        out.notes
    );
    assert!(!f.repo.dir().join("memory/notes.md").exists());
    // c1's snapshot holds the leaking file; its commit will not.
    let snaps = it.change_snapshots().unwrap();
    let base = f.repo.tree_of(&c0).unwrap();
    let in_snapshot = f.repo.tree_diff_files(&base, &snaps.agent[0].tree).unwrap();
    assert_eq!(in_snapshot, ["memory/MEMORY.md", "memory/notes.md"]);
    let expected = f.commit_all_tree();
    let done = chain::commit_iteration(&f.repo, &it, &c0).unwrap();
    let c1 = done.manifest.changes[0].commit.clone().unwrap();
    let c2 = done.manifest.changes[1].commit.clone().unwrap();
    assert_eq!(
        f.files_of(&c1),
        ["memory/MEMORY.md"],
        "notes.md is in no commit"
    );
    assert_eq!(f.files_of(&c2), ["memory/MEMORY.md"]);
    assert_eq!(f.repo.head().unwrap(), c2, "nothing left over");
    assert_eq!(f.repo.tree_of(&c2).unwrap(), expected);
    assert_eq!(f.read_at(&c1, "memory/notes.md"), None);
}

#[tokio::test]
async fn a_commit_phase_killed_at_any_point_resumes_to_the_same_chain() {
    let f = Fixture::new();
    let c0 = f.repo.head().unwrap();
    let it = f.iteration(1);
    f.evolve(&it, &c0, &two_changes_script(), &[], None).await;
    let expected = f.commit_all_tree();
    let written = it.manifest().unwrap();

    // Killed after some chain commits and a manifest naming them, before the tag: they are
    // unreferenced, and the re-run builds the chain again.
    let final_tree = f.repo.snapshot_worktree().unwrap();
    let snaps = it.change_snapshots().unwrap();
    let steps = chain::plan(&f.repo, &c0, &written, &snaps, &final_tree).unwrap();
    assert_eq!(steps.len(), 2);
    let orphan = f
        .repo
        .commit_tree(&steps[0].tree, &c0, "iter-001 c1: killed")
        .unwrap();
    let mut stale = written.clone();
    stale.changes[0].commit = Some(orphan.clone());
    it.write_manifest(&stale).unwrap();
    assert_eq!(f.history(), vec![c0.clone()]);
    let done = chain::commit_iteration(&f.repo, &it, &c0).unwrap();
    let head = done.head.clone();
    assert_eq!(f.history().len(), 3, "seed + two changes, no duplicate");
    assert!(!f.history().contains(&orphan));
    let c1 = done.manifest.changes[0].commit.clone().unwrap();
    assert_eq!(f.repo.parent_of(&head).unwrap(), Some(c1.clone()));
    assert_eq!(it.manifest().unwrap().changes[0].commit, Some(c1));
    assert_eq!(f.repo.tree_of(&head).unwrap(), expected);

    // Killed after the tag, before HEAD moved: the re-run only moves HEAD.
    let repo = git2::Repository::open(f.repo.dir()).unwrap();
    let branch = repo.head().unwrap().name().unwrap().to_string();
    repo.reference(&branch, git2::Oid::from_str(&c0).unwrap(), true, "kill")
        .unwrap();
    assert_eq!(f.repo.head().unwrap(), c0);
    let again = chain::commit_iteration(&f.repo, &it, &c0).unwrap();
    assert_eq!(again.head, head);
    assert_eq!(f.repo.head().unwrap(), head);
    assert_eq!(again.manifest, done.manifest);
    // And run once more after it all finished (killed before the journal said so).
    assert_eq!(
        chain::commit_iteration(&f.repo, &it, &c0).unwrap().head,
        head
    );
    assert_eq!(f.history().len(), 3);
}

#[tokio::test]
async fn an_iteration_without_edits_still_gets_its_tagged_commit() {
    let f = Fixture::new();
    let c0 = f.repo.head().unwrap();
    let it = f.iteration(1);
    // The agent stops without submitting: nothing to commit but the tag's commit.
    f.evolve(
        &it,
        &c0,
        "[[evolve]]\ncontent = \"nothing to do\"\n",
        &[],
        None,
    )
    .await;
    let done = chain::commit_iteration(&f.repo, &it, &c0).unwrap();
    assert!(done.manifest.changes.is_empty());
    assert_eq!(f.history().len(), 2);
    assert_eq!(
        f.repo.tree_of(&done.head).unwrap(),
        f.repo.tree_of(&c0).unwrap()
    );
    assert_eq!(f.repo.resolve(&iter_tag(1)).unwrap(), done.head);
}

#[tokio::test]
async fn committed_changes_survive_an_agent_that_stops_without_submitting() {
    let f = Fixture::new();
    let c0 = f.repo.head().unwrap();
    let it = f.iteration(1);
    let mut s = write("memory/MEMORY.md", &format!("{ONE}{SEED_MEMORY}"));
    s += &commit_change("c1", &["memory/MEMORY.md"], &["count-errors"], &[]);
    s += &write(
        "memory/later.md",
        "- written after the last commit_change\n",
    );
    s += "[[evolve]]\ncontent = \"out of ideas\"\n";
    let out = f.evolve(&it, &c0, &s, &[], None).await;
    assert!(
        out.notes[0].contains("stopped without submit_manifest")
            && out.notes[0].contains("1 committed change(s) are kept"),
        "{:?}",
        out.notes
    );
    // The edit after the last commit_change may be half done: reverted.
    assert!(
        out.notes[0].ends_with("its later edits reverted: memory/later.md"),
        "{:?}",
        out.notes
    );
    assert!(!f.repo.dir().join("memory/later.md").exists());
    let done = chain::commit_iteration(&f.repo, &it, &c0).unwrap();
    let c1 = done.manifest.changes[0].commit.clone().unwrap();
    assert_eq!(f.files_of(&c1), ["memory/MEMORY.md"]);
    assert_eq!(done.head, c1, "the change's commit is the iteration's");
}
