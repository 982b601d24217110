//! Unit tests of `attribute.rs`.
use super::*;
use ahe_bench::TrialResult;
use ahe_rundir::manifest::{Change, ChangeKind, Component};

/// Scores from `name=passed/k ...`; `x` for passed marks an all-infra task.
fn scores(spec: &str) -> Scores {
    let mut rs = Vec::new();
    for item in spec.split_whitespace() {
        let (task, rest) = item.split_once('=').unwrap();
        let (passed, k) = rest.split_once('/').unwrap();
        for a in 1..=k.parse::<u32>().unwrap() {
            let mut r = TrialResult::new(task, a);
            r.status = match passed.parse::<u32>() {
                Err(_) => TrialStatus::InfraError,
                Ok(p) if a <= p => TrialStatus::Pass,
                Ok(_) => TrialStatus::Fail,
            };
            rs.push(r);
        }
    }
    ahe_bench::scores::compute(2, &rs, 1.0)
}

fn change(id: &str, files: &[&str], fixes: &[&str], risks: &[&str]) -> Change {
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
    Change {
        id: id.into(),
        kind: ChangeKind::Improvement,
        description: format!("change {id}"),
        files: v(files),
        failure_pattern: String::new(),
        root_cause: String::new(),
        predicted_fixes: v(fixes),
        risk_tasks: v(risks),
        component: Component::ToolImpl,
        why_this_component: String::new(),
        commit: None,
    }
}

fn set(xs: &str) -> BTreeSet<String> {
    xs.split_whitespace().map(String::from).collect()
}

fn all_visible(s: &Scores) -> BTreeSet<String> {
    s.tasks.keys().cloned().collect()
}

#[test]
fn every_verdict_and_prediction_quality() {
    let prev = scores("f1=0/2 f2=1/2 f3=0/2 u1=0/2 r1=2/2 r2=2/2 r3=2/2 s1=2/2");
    let cur = scores("f1=2/2 f2=2/2 f3=0/2 u1=2/2 r1=0/2 r2=1/2 r3=0/2 s1=2/2");
    let m = Manifest {
        iteration: 3,
        changes: vec![
            change("eff", &["tools/run_shell.py"], &["f1"], &[]),
            change("part", &["skills/git/SKILL.md"], &["f2", "f3"], &[]),
            change("harm", &["system_prompt.md"], &["f3"], &["r1"]),
            change("mixed", &["middleware/loop.toml"], &["f1"], &["r1"]),
            change("inef", &["middleware/loop.toml"], &["f3"], &["s1"]),
            change("empty", &["middleware/loop.toml"], &[], &[]),
            change("harm2", &["middleware/loop.toml"], &[], &["r2"]),
        ],
        leak_guard: None,
    };
    let mut ex = BTreeMap::new();
    ex.insert(
        "r3".to_string(),
        set("agent.toml memory/ system_prompt.md tools/run_shell.toml middleware/other.toml"),
    );
    let ev = attribute(
        4,
        Some(&m),
        &prev,
        &cur,
        &all_visible(&cur),
        &ex,
        &Evidence::default(),
    );
    assert_eq!(ev.manifest_iteration, Some(3));
    assert_eq!(names(&ev.fixed), ["f1", "f2", "u1"].into());
    assert_eq!(names(&ev.regressed), ["r1", "r2", "r3"].into());
    use Verdict::*;
    let want = [
        Effective,
        PartiallyEffective,
        Harmful,
        Mixed,
        Ineffective,
        Ineffective,
        Harmful,
    ];
    let got: Vec<Verdict> = ev.changes.iter().map(|c| c.verdict).collect();
    assert_eq!(got, want);
    assert_eq!(harmful_changes(&ev), vec!["harm", "harm2"]);
    let part = &ev.changes[1];
    assert_eq!(part.actually_fixed, vec!["f2"]);
    assert_eq!(part.still_failed, vec!["f3"]);
    assert_eq!(ev.changes[2].risk_realized, vec!["r1"]);
    // r3 regressed unpredicted; it ran run_shell (stem match with tools/run_shell.py)
    // and every task matches a system_prompt.md change.
    let (u, by_file) = (&ev.unattributed_regressions, &ev.regressions_by_file);
    assert_eq!((u.len(), u[0].task.as_str()), (1, "r3"));
    assert_eq!(u[0].matched_changes, vec!["eff", "harm"]);
    assert_eq!(by_file.len(), 3);
    assert_eq!(by_file[0].predicted_by, vec!["harm", "mixed"]);
    assert_eq!(ev.changes[0].regressions_matched, vec!["r3"]);
    assert_eq!(ev.changes[2].regressions_matched, vec!["r1", "r2", "r3"]);
    assert_eq!(ev.unpredicted_fixes.len(), 1);
    assert_eq!(ev.unpredicted_fixes[0].task, "u1");
    assert_eq!(ev.unpredicted_fixes[0].matched_changes, vec!["harm"]);
    // ∪P = {f1,f2,f3}, F = {f1,f2,u1}; ∪Q = {r1,s1,r2}, G = {r1,r2,r3}.
    let p = &ev.prediction;
    assert_eq!(
        (p.predicted_fixes, p.fixed, p.predicted_risks, p.regressed),
        (3, 3, 3, 3)
    );
    assert!((p.fix_precision.unwrap() - 2.0 / 3.0).abs() < 1e-12);
    assert!((p.fix_recall.unwrap() - 2.0 / 3.0).abs() < 1e-12);
    assert!((p.risk_precision.unwrap() - 2.0 / 3.0).abs() < 1e-12);
    assert!((p.risk_recall.unwrap() - 2.0 / 3.0).abs() < 1e-12);
    // With k = 2 every flip here is within noise (best case p = 1/3).
    assert!(ev.fixed.iter().all(|m| m.within_noise));
    assert!((ev.fixed[0].p_value - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(ev.changes[0].flips_within_noise, vec!["f1"]);
}

#[test]
fn partial_moves_infra_new_and_dropped() {
    let prev = scores("p1=0/2 p2=1/2 i1=2/2 i2=x/2 i3=x/2 d1=0/2 same=1/2 m1=2/2");
    let mut cur = scores("p1=1/2 p2=0/2 i1=x/2 i2=2/2 i3=x/2 n1=2/2 same=1/2 m1=1/2");
    // m1: one pass and one infra error now; a Fail, but not the harness's doing.
    let m1 = cur.tasks.get_mut("m1").unwrap();
    m1.trials[1].status = TrialStatus::InfraError;
    let m = Manifest {
        iteration: 1,
        changes: vec![change("c1", &["tools/x.toml"], &["p1", "i2"], &["i1"])],
        leak_guard: None,
    };
    let vis = set("p1 p2 i1 i2 i3 d1 n1 same m1");
    let ev = attribute(
        2,
        Some(&m),
        &prev,
        &cur,
        &vis,
        &BTreeMap::new(),
        &Evidence::default(),
    );
    assert!(ev.fixed.is_empty() && ev.regressed.is_empty());
    assert_eq!(names(&ev.improved), ["p1"].into());
    assert_eq!(names(&ev.worsened), ["p2"].into());
    assert_eq!(names(&ev.infra_changes), ["i1", "i2", "m1"].into());
    assert_eq!(ev.new_tasks, vec!["n1"]);
    assert_eq!(ev.dropped_tasks, vec!["d1"]);
    let c = &ev.changes[0];
    assert_eq!(c.verdict, Verdict::Ineffective);
    assert_eq!(c.improved, vec!["p1"]);
    assert_eq!(c.infra_affected, vec!["i1", "i2"]);
    assert!(ev.unattributed_regressions.is_empty());
    assert_eq!(ev.prediction.fix_precision, Some(0.0));
    assert_eq!(ev.prediction.fix_recall, None);
    assert_eq!(ev.prediction.risk_recall, None);
    assert_eq!(ev.stats.infra_tasks, 2);
    // p1 (0/2 → 1/2) is a move, and noise: Fisher p = 1.
    assert_eq!(ev.improved[0].p_value, 1.0);
}

#[test]
fn held_out_tasks_are_ignored_everywhere() {
    let prev = scores("a=0/2 h1=0/2 h2=2/2");
    let cur = scores("a=0/2 h1=2/2 h2=0/2");
    let m = Manifest {
        iteration: 1,
        changes: vec![change("c1", &["agent.toml"], &["h1"], &["h2"])],
        leak_guard: None,
    };
    let ev = attribute(
        2,
        Some(&m),
        &prev,
        &cur,
        &set("a"),
        &BTreeMap::new(),
        &Evidence::default(),
    );
    assert!(ev.fixed.is_empty() && ev.regressed.is_empty());
    let c = &ev.changes[0];
    assert!(c.predicted_fixes.is_empty() && c.risk_tasks.is_empty());
    assert_eq!(c.ignored_tasks, vec!["h1", "h2"]);
    assert_eq!(c.verdict, Verdict::Ineffective);
    assert_eq!(
        (ev.stats.n_tasks, ev.stats.prev_n_tasks, ev.stats.n_paired),
        (1, 1, 1)
    );
    assert_eq!(ev.stats.pass_at_1, 0.0);
    assert_eq!(ev.stats.delta, Some(0.0));
}

#[test]
fn first_iteration_without_manifest() {
    let empty = scores("");
    let cur = scores("a=2/2 b=0/2");
    let ev = attribute(
        1,
        None,
        &empty,
        &cur,
        &all_visible(&cur),
        &BTreeMap::new(),
        &Evidence::default(),
    );
    assert_eq!(ev.new_tasks, vec!["a", "b"]);
    assert!(ev.changes.is_empty() && ev.fixed.is_empty());
    assert_eq!(ev.manifest_iteration, None);
    assert_eq!(ev.prediction, PredictionQuality::default());
    assert_eq!(ev.stats.prev_pass_at_1, None);
    assert_eq!((ev.stats.delta, ev.stats.delta_significant), (None, false));
    assert!((ev.stats.pass_at_1 - 0.5).abs() < 1e-12);

    // A previous score without a manifest: flips and stats, no verdicts, and every
    // regression is unattributed.
    let prev = scores("a=0/2 b=2/2");
    let ev = attribute(
        2,
        None,
        &prev,
        &cur,
        &all_visible(&cur),
        &BTreeMap::new(),
        &Evidence::default(),
    );
    assert_eq!((ev.fixed.len(), ev.regressed.len()), (1, 1));
    assert_eq!(ev.unattributed_regressions[0].task, "b");
    assert!(ev.unattributed_regressions[0].matched_changes.is_empty());
    assert_eq!(ev.prediction.fix_precision, None);
    assert_eq!(ev.prediction.fixed, 1);
}

#[test]
fn noise_and_significance() {
    // 0/10 → 10/10 is not noise; 0/2 → 2/2 is.
    let mut p10 = scores("a=0/10");
    let mut c10 = scores("a=10/10");
    p10.k = 10;
    c10.k = 10;
    let ev = attribute(
        2,
        None,
        &p10,
        &c10,
        &all_visible(&c10),
        &BTreeMap::new(),
        &Evidence::default(),
    );
    assert!(ev.fixed[0].p_value < 1e-4, "{}", ev.fixed[0].p_value);
    assert!(!ev.fixed[0].within_noise);

    // 30 tasks all flipping up: a significant delta; the interval brackets it.
    let spec = |passed: u32| -> String {
        let p = |i: u32| if i < 5 { 2 } else { passed };
        (0..30).map(|i| format!("t{i:02}={}/2 ", p(i))).collect()
    };
    let prev = scores(&spec(0));
    let cur = scores(&spec(2));
    let vis = all_visible(&cur);
    let ev = attribute(
        2,
        None,
        &prev,
        &cur,
        &vis,
        &BTreeMap::new(),
        &Evidence::default(),
    );
    let s = &ev.stats;
    let d = s.delta.unwrap();
    assert!((d - 25.0 / 30.0).abs() < 1e-12);
    let ci = s.delta_ci.unwrap();
    assert!(ci[0] <= d && d <= ci[1] && ci[0] > 0.0, "{ci:?}");
    assert!(s.delta_significant);
    assert_eq!(s.prev_pass_at_1, Some(5.0 / 30.0));
    assert!(s.pass_at_1_ci[0] <= s.pass_at_1 && s.pass_at_1 <= s.pass_at_1_ci[1]);
    let again = attribute(
        2,
        None,
        &prev,
        &cur,
        &vis,
        &BTreeMap::new(),
        &Evidence::default(),
    );
    assert_eq!(again.stats, ev.stats);

    // One flip up, one down, rest unchanged: no significant delta.
    let prev = scores("a=0/2 b=2/2 c=1/2 d=2/2");
    let cur = scores("a=2/2 b=0/2 c=1/2 d=2/2");
    let ev = attribute(
        2,
        None,
        &prev,
        &cur,
        &all_visible(&cur),
        &BTreeMap::new(),
        &Evidence::default(),
    );
    assert_eq!(ev.stats.delta, Some(0.0));
    assert!(!ev.stats.delta_significant);
}

#[test]
fn file_matching_rules() {
    // change file, exercised file, whether they match
    let cases = "tools/run_shell.py tools/run_shell.toml 1
            tools/run_shell.toml tools/run_shell.toml 1
            tools/run.py tools/run_shell.toml 0
            tools/lib/run_shell.py tools/run_shell.toml 0
            middleware/guard.py middleware/guard.toml 1
            skills/git/helper.sh skills/git/SKILL.md 1
            skills/gitx/SKILL.md skills/git/SKILL.md 0
            subagents/explorer.toml subagents/explorer.toml 1
            subagents/explorer.toml tools/explorer.toml 0
            memory/notes.md tools/x.toml 1
            ./agent.toml tools/x.toml 1
            tools/ tools/x.toml 1
            skills skills/git/SKILL.md 1
            tool tools/x.toml 0
            middleware/x.toml memory/ 0";
    for line in cases.lines() {
        let v: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(file_matches(v[0], v[1]), v[2] == "1", "{line}");
    }
    let none = BTreeSet::new();
    assert!(change_touches(&["system_prompt.md".into()], &none));
    assert!(!change_touches(
        &["tools/a.py".into()],
        &set("tools/b.toml")
    ));
}

#[test]
fn json_shape_and_round_trip() {
    let prev = scores("a=1/2 b=2/2");
    let cur = scores("a=2/2 b=2/2");
    let m = Manifest {
        iteration: 1,
        changes: vec![change("c1", &["tools/x.py"], &["a", "b"], &[])],
        leak_guard: None,
    };
    let (vis, none) = (all_visible(&cur), BTreeMap::new());
    let ev = attribute(2, Some(&m), &prev, &cur, &vis, &none, &Evidence::default());
    let d = tempfile::tempdir().unwrap();
    write(d.path(), &ev).unwrap();
    assert!(!d.path().join("change_evaluation.json.tmp").exists());
    assert_eq!(read(d.path()).unwrap(), ev);
    let text =
        std::fs::read(ahe_rundir::run_dir::IterationDir::at(d.path()).change_evaluation_path())
            .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(v["changes"][0]["verdict"], "PARTIALLY_EFFECTIVE");
    assert_eq!(v["changes"][0]["component"], "tool_impl");
    assert_eq!(v["fixed"][0]["prev_status"], "fail");
    assert_eq!(v["fixed"][0]["within_noise"], true);
    assert_eq!(v["prediction"]["fix_precision"], 0.5);
    assert!(v["stats"]["delta_ci"].is_array());
    assert_eq!(v["schema_version"], 1);
}

#[test]
fn unexplained_regressions_leave_untested_candidates_unjudged() {
    use ahe_rundir::evidence::{CfKind, CfSkip, CfTest};
    let prev = scores("a=2/2 b=2/2 f=0/2");
    let cur = scores("a=0/2 b=2/2 f=2/2");
    let m = Manifest {
        iteration: 1,
        changes: vec![
            change("fix", &["tools/x.py"], &["f"], &[]),
            change("cand1", &["skills/s/SKILL.md"], &[], &[]),
            change("cand2", &["memory/tips.md"], &[], &[]),
            change("other", &["tools/y.py"], &[], &[]),
        ],
        leak_guard: None,
    };
    let mut ex = BTreeMap::new();
    ex.insert("a".to_string(), set("tools/x.py skills/s/SKILL.md"));
    let test = |change: &str, passed: u32, trials: u32| CfTest {
        task: "a".into(),
        change: change.into(),
        kind: CfKind::Regression,
        commit: "c".into(),
        tally: Tally {
            passed,
            trials,
            infra: 0,
        },
        restored: passed == trials && trials > 0,
    };
    let mut evidence = Evidence {
        counterfactual: vec![test("cand1", 0, 1)],
        counterfactual_skipped: vec![CfSkip {
            task: "a".into(),
            reason: "the extra-trial budget ran out before cand2 was tested".into(),
        }],
        ..Default::default()
    };
    let vis = all_visible(&cur);
    let ev = attribute(2, Some(&m), &prev, &cur, &vis, &ex, &evidence);
    let v: Vec<Verdict> = ev.changes.iter().map(|c| c.verdict).collect();
    use Verdict::*;
    // A credited change is never unjudged; a cleared one and one the task never exercised
    // stay ineffective; the untested global one cannot be cleared.
    assert_eq!(v, [Effective, Ineffective, Unjudged, Ineffective]);
    let why = ev.changes[2].unjudged_reason.as_deref().unwrap();
    assert!(
        why.starts_with("a regressed") && why.contains("budget ran out"),
        "{why}"
    );
    assert_eq!(verdict_name(Unjudged), "UNJUDGED");

    // Once its revert restores the task, the change is blamed: nothing is left unjudged.
    evidence.counterfactual.push(test("cand2", 2, 2));
    let ev = attribute(2, Some(&m), &prev, &cur, &vis, &ex, &evidence);
    let v: Vec<Verdict> = ev.changes.iter().map(|c| c.verdict).collect();
    assert_eq!(v, [Effective, Ineffective, Harmful, Ineffective]);

    // Without counterfactual evidence every candidate is unjudged, said as such.
    let ev = attribute(2, Some(&m), &prev, &cur, &vis, &ex, &Evidence::default());
    let v: Vec<Verdict> = ev.changes.iter().map(|c| c.verdict).collect();
    assert_eq!(v, [Effective, Unjudged, Unjudged, Ineffective]);
    let why = ev.changes[1].unjudged_reason.as_deref().unwrap();
    assert!(why.contains("no counterfactual trial"), "{why}");
}
