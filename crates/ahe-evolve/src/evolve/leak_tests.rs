//! Unit tests of the leak guard's matcher, diff and guard.

use super::*;
use ahe_rundir::leak::{LeakPolicy, LeakRecord};
use serde::Deserialize;

fn task(name: &str, held_out: bool, texts: &[&str]) -> TaskText {
    TaskText {
        name: name.into(),
        held_out,
        texts: texts.iter().map(|s| s.to_string()).collect(),
    }
}

fn added(lines: &[&str]) -> Vec<Added> {
    vec![Added {
        line: 1,
        lines: lines.iter().map(|s| s.to_string()).collect(),
    }]
}

fn kinds(hits: &[LeakHit]) -> Vec<(u32, String, LeakKind)> {
    hits.iter()
        .map(|h| (h.line, h.task.clone(), h.kind))
        .collect()
}

#[test]
fn names_match_as_whole_tokens_only() {
    let ix = LeakIndex::build(&[task("regex-log", false, &[]), task("mailman", false, &[])]);
    let none = [
        "use my-regex-logger here",
        "regex_log is a different identifier",
        "regex-logs and --regex-log and regex-log- are other tokens",
        "a mailmanager, not the task",
    ];
    for l in none {
        assert!(ix.scan("m.md", &added(&[l])).is_empty(), "{l}");
    }
    for l in [
        "see `regex-log`.",
        "/tasks/regex-log/x",
        "REGEX-LOG: upper case",
        "(regex-log)",
    ] {
        let h = ix.scan("m.md", &added(&[l]));
        assert_eq!(
            kinds(&h),
            vec![(1, "regex-log".into(), LeakKind::Name)],
            "{l}"
        );
    }
    let h = ix.scan("m.md", &added(&["nothing", "configure Mailman first"]));
    assert_eq!(kinds(&h), vec![(2, "mailman".into(), LeakKind::Name)]);
    assert_eq!(h[0].excerpt, "configure Mailman first");
}

#[test]
fn spans_match_across_whitespace_and_line_breaks() {
    let text = "Count the lines whose level is `ERROR` and write just\n   that number to `/app/count.txt`.";
    let ix = LeakIndex::build(&[task("count-errors", false, &[text])]);
    // Re-wrapped and re-indented, across two added lines: still the same span.
    let h = ix.scan(
        "skills/x/SKILL.md",
        &[Added {
            line: 7,
            lines: vec![
                "intro".into(),
                "  whose level is `ERROR` and write   just that".into(),
                "\tnumber to `/app/count.txt`.".into(),
            ],
        }],
    );
    assert_eq!(kinds(&h), vec![(8, "count-errors".into(), LeakKind::Span)]);
    assert!(h[0].excerpt.chars().count() <= SPAN_EXCERPT);
    assert!(
        h[0].excerpt.starts_with("whose level is"),
        "{}",
        h[0].excerpt
    );
    // 39 characters of it are not a leak; a changed character breaks the span.
    let short: String = "whose level is `ERROR` and write just that number"
        .chars()
        .take(SPAN - 1)
        .collect();
    assert!(ix.scan("f", &added(&[&short])).is_empty());
    assert!(ix
        .scan(
            "f",
            &added(&["whose level is `ERRXR` and write just that number"])
        )
        .is_empty());
    // A span split over two separate runs of added lines is not one span.
    let split = [
        Added {
            line: 1,
            lines: vec!["whose level is `ERROR` and".into()],
        },
        Added {
            line: 5,
            lines: vec!["write just that number to `/app/count.txt`.".into()],
        },
    ];
    assert_eq!(
        ix.scan("f", &split).len(),
        1,
        "the second run alone is 43 chars"
    );
    assert_eq!(ix.scan("f", &split)[0].line, 5);
}

#[test]
fn spans_in_three_tasks_are_boilerplate() {
    let common =
        "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi";
    let specific = "[ \"$(bash /app/sum.sh 10 -4)\" = \"6\" ] || ok=0";
    let ix3 = LeakIndex::build(&[
        task("a", false, &[common, specific]),
        task("b", false, &[common]),
        task("c", false, &[&format!("if x; {common}")]),
    ]);
    assert!(
        ix3.scan("f", &added(&[common])).is_empty(),
        "3 tasks: boilerplate"
    );
    let h = ix3.scan("f", &added(&[&format!("{common}\n{specific}")]));
    assert_eq!(
        kinds(&h),
        vec![(2, "a".into(), LeakKind::Span)],
        "the task-specific line"
    );
    // In two tasks only it is still task text (the first task is named).
    let ix2 = LeakIndex::build(&[task("a", false, &[common]), task("b", false, &[common])]);
    assert_eq!(
        kinds(&ix2.scan("f", &added(&[common]))),
        vec![(1, "a".into(), LeakKind::Span)]
    );
    // Low-information windows (separator lines) are ignored even in one task.
    let sep = "=".repeat(60);
    let ix1 = LeakIndex::build(&[task("a", false, &[&format!("x\n{sep}\ny")])]);
    assert!(ix1.scan("f", &added(&[&sep])).is_empty());
}

#[test]
fn held_out_tasks_are_never_named_in_a_hit() {
    let secret = "The port the server must listen on is written in the config";
    let ix = LeakIndex::build(&[
        task("config-port", true, &[secret]),
        task("fix-sum", false, &[]),
    ]);
    let h = ix.scan(
        "memory/m.md",
        &added(&["for config-port and fix-sum use 8417"]),
    );
    assert_eq!(
        kinds(&h),
        vec![
            (1, HELD_OUT.into(), LeakKind::Name),
            (1, "fix-sum".into(), LeakKind::Name)
        ]
    );
    for x in &h {
        assert!(!x.excerpt.contains("config-port"), "{}", x.excerpt);
    }
    assert_eq!(h[0].excerpt, "for (held-out task) and fix-sum use 84…");
    let h = ix.scan("memory/m.md", &added(&[secret]));
    assert_eq!(kinds(&h), vec![(1, HELD_OUT.into(), LeakKind::Span)]);
    assert_eq!(h[0].excerpt, "", "no held-out text in the record");
}

#[test]
fn excerpts_stay_short() {
    let ix = LeakIndex::build(&[task("fix-sum", false, &[])]);
    let long = format!("{} fix-sum {}", "a ".repeat(100), "b ".repeat(100));
    let h = ix.scan("f", &added(&[&long]));
    let e = &h[0].excerpt;
    assert!(e.chars().count() <= EXCERPT_MAX, "{e}");
    assert!(
        e.contains("fix-sum") && e.starts_with('…') && e.ends_with('…'),
        "{e}"
    );
}

#[test]
fn added_lines_are_the_runs_a_diff_adds() {
    let old = b"a\nb\nc\n";
    let new = b"a\nX\nY\nb\nc\nZ\n";
    assert_eq!(
        added_lines(Some(old), new),
        vec![
            Added {
                line: 2,
                lines: vec!["X".into(), "Y".into()]
            },
            Added {
                line: 6,
                lines: vec!["Z".into()]
            },
        ]
    );
    assert_eq!(
        added_lines(None, b"p\nq"),
        vec![Added {
            line: 1,
            lines: vec!["p".into(), "q".into()]
        }]
    );
    assert!(
        added_lines(Some(old), b"a\nc\n").is_empty(),
        "deletions add nothing"
    );
}

#[test]
fn the_guard_checks_only_what_the_working_tree_adds_and_reverts_to_the_baseline() {
    let d = tempfile::tempdir().unwrap();
    let seed = d.path().join("seed");
    std::fs::create_dir_all(seed.join("memory")).unwrap();
    std::fs::write(seed.join("memory/MEMORY.md"), "old line names fix-sum\n").unwrap();
    std::fs::write(seed.join("memory/rolled.md"), "kept\n").unwrap();
    std::fs::write(seed.join("notes.txt"), "not a component\n").unwrap();
    let dir = d.path().join("harness");
    let repo = ahe_runner::repo::HarnessRepo::init(&dir, &seed).unwrap();
    let evaluated = repo.head().unwrap();
    // An automatic rollback had rewritten rolled.md before the agent started.
    std::fs::write(dir.join("memory/rolled.md"), "restored by rollback\n").unwrap();
    let settings = LeakSettings {
        policy: LeakPolicy::Reject,
        index: std::sync::Arc::new(LeakIndex::build(&[task("fix-sum", false, &[])])),
    };
    let g = Guard::new(settings, &dir, &evaluated, &["memory/rolled.md".into()]);
    assert!(
        g.check().unwrap().is_empty(),
        "the baseline itself is not a leak"
    );
    std::fs::write(
        dir.join("memory/MEMORY.md"),
        "old line names fix-sum\ngeneral advice\n",
    )
    .unwrap();
    assert!(g.check().unwrap().is_empty(), "only added lines count");
    std::fs::create_dir_all(dir.join("skills/s")).unwrap();
    std::fs::write(dir.join("skills/s/SKILL.md"), "fix-sum\n").unwrap();
    std::fs::write(dir.join("memory/new.md"), "a\nsee fix-sum\n").unwrap();
    std::fs::write(
        dir.join("memory/rolled.md"),
        "restored by rollback\nfix-sum\n",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), "fix-sum\n").unwrap();
    let h = g.check().unwrap();
    let at: Vec<(&str, u32)> = h.iter().map(|x| (x.file.as_str(), x.line)).collect();
    assert_eq!(
        at,
        vec![
            ("memory/new.md", 2),
            ("memory/rolled.md", 2),
            ("skills/s/SKILL.md", 1)
        ]
    );
    g.revert(&[
        "memory/new.md".into(),
        "memory/rolled.md".into(),
        "skills/s/SKILL.md".into(),
    ])
    .unwrap();
    assert!(!dir.join("memory/new.md").exists());
    assert!(
        dir.join("memory").is_dir(),
        "a directory with other files stays"
    );
    assert!(
        !dir.join("skills/s").exists(),
        "the emptied skill directory goes"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("memory/rolled.md")).unwrap(),
        "restored by rollback\n"
    );
    assert!(std::fs::read_to_string(dir.join("memory/MEMORY.md"))
        .unwrap()
        .contains("general advice"));
    assert!(g.check().unwrap().is_empty());
}

#[test]
fn policies_parse_and_off_builds_no_guard() {
    #[derive(Deserialize)]
    struct C {
        p: LeakPolicy,
    }
    let p = |s: &str| toml::from_str::<C>(&format!("p = \"{s}\"")).map(|c| c.p);
    assert_eq!(p("reject").unwrap(), LeakPolicy::Reject);
    assert_eq!(p("warn").unwrap(), LeakPolicy::Warn);
    assert_eq!(p("off").unwrap(), LeakPolicy::Off);
    let e = p("block").unwrap_err().to_string();
    assert!(
        e.contains("reject") && e.contains("warn") && e.contains("off"),
        "{e}"
    );
    assert_eq!(LeakPolicy::default(), LeakPolicy::Reject);
    assert!(LeakSettings::build(LeakPolicy::Off, &[], &Default::default()).is_none());
    assert!(LeakSettings::build(LeakPolicy::Warn, &[], &Default::default()).is_some());
}

#[test]
fn the_refusal_names_file_line_task_and_kind() {
    let hits = vec![
        LeakHit {
            file: "memory/tasks.md".into(),
            line: 3,
            task: "fix-sum".into(),
            kind: LeakKind::Name,
            excerpt: "x".into(),
        },
        LeakHit {
            file: "skills/s/SKILL.md".into(),
            line: 9,
            task: "count-errors".into(),
            kind: LeakKind::Span,
            excerpt: "y".into(),
        },
    ];
    let r = refusal(&hits);
    assert!(
        r.contains("memory/tasks.md line 3: names the task fix-sum"),
        "{r}"
    );
    assert!(
        r.contains("skills/s/SKILL.md line 9: copies a 40+ character span verbatim from the instruction, tests or solution of count-errors"),
        "{r}"
    );
    assert!(
        r.contains("reverted to the evaluated harness: memory/tasks.md, skills/s/SKILL.md"),
        "{r}"
    );
}

#[test]
fn manifests_without_a_record_still_load_and_records_round_trip() {
    let old: ahe_rundir::manifest::Manifest =
        serde_json::from_str(r#"{"iteration": 2, "changes": []}"#).unwrap();
    assert_eq!(old.leak_guard, None);
    assert!(!serde_json::to_string(&old).unwrap().contains("leak_guard"));
    let rec = LeakRecord {
        policy: LeakPolicy::Warn,
        refused: vec![LeakHit {
            file: "memory/a.md".into(),
            line: 2,
            task: "fix-sum".into(),
            kind: LeakKind::Name,
            excerpt: "fix-sum".into(),
        }],
        reverted: vec![],
        rejected_submissions: 0,
        dropped_changes: vec![],
    };
    let m = ahe_rundir::manifest::Manifest {
        leak_guard: Some(rec),
        ..old
    };
    let text = serde_json::to_string(&m).unwrap();
    assert!(
        text.contains(r#""kind":"name""#) && text.contains(r#""policy":"warn""#),
        "{text}"
    );
    assert_eq!(
        serde_json::from_str::<ahe_rundir::manifest::Manifest>(&text).unwrap(),
        m
    );
}
