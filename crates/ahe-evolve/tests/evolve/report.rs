//! The report module on synthetic run directories: the read model, completeness from the
//! journal and the files, report.html / report.md / trial pages (escaped), show documents.

use crate::synth_run;

use std::path::Path;

use ahe_report::{self as report, json, ReportOptions, RunReport};
use synth_run::{synth_run, Spec, EVIL};

fn small() -> Spec {
    Spec {
        iterations: 4,
        tasks: 12,
        k: 2,
        turns: 6,
        output_len: 300,
        holdout: 2,
    }
}

fn run_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    synth_run(d.path(), &small());
    d
}

/// Keeps the journal lines before the first one matching `pred`.
fn cut_journal(dir: &Path, mut pred: impl FnMut(&serde_json::Value) -> bool) {
    let p = dir.join("journal.jsonl");
    let text = std::fs::read_to_string(&p).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .take_while(|l| !pred(&serde_json::from_str(l).unwrap()))
        .collect();
    std::fs::write(&p, kept.join("\n") + "\n").unwrap();
}

#[test]
fn loads_a_finished_run() {
    let d = run_dir();
    let r = RunReport::load(d.path()).unwrap();
    assert_eq!(r.iterations.len(), 5);
    assert!(r.iterations[4].is_final && !r.iterations[3].is_final);
    assert_eq!(r.status(), "complete");
    assert!(r.incomplete.is_none(), "{:?}", r.incomplete);
    assert!(r.iterations.iter().all(|i| i.complete));
    assert_eq!(r.tasks.len(), 12);
    assert_eq!(r.holdout.len(), 2);
    assert_eq!(r.info.k, 2);
    assert_eq!(r.info.iterations, 4);
    let best = r.best.as_ref().unwrap();
    let bi = r.iteration(best.iteration).unwrap();
    assert_eq!(bi.visible().unwrap().0, best.pass_at_1);
    // Every task has a cell in every iteration; phase times come from the journal.
    for it in &r.iterations {
        for t in &r.tasks {
            let c = it.cell(t).unwrap();
            assert_eq!(c.k, 2);
        }
        assert!(it.wall_sec() > 600.0);
    }
    // Roles: three in evolve iterations, only the code agent in the final one.
    assert_eq!(r.iterations[0].roles.len(), 3);
    assert_eq!(r.iterations[4].roles.len(), 1);
    assert!(
        (r.iterations[0].cost_usd() - (r.iterations[0].scores.as_ref().unwrap().cost_usd + 2.4))
            .abs()
            < 1e-9
    );
    // The verdict of a change made in iteration 1 is found in iteration 2's evaluation.
    let c = &r.iterations[0].manifest.as_ref().unwrap().changes[0];
    assert_eq!(r.outcome(1, &c.id).unwrap().id, c.id);
    assert!(r.outcome(4, "c4-0").is_some());
    assert!(r.outcome(5, "x").is_none());
    // Notes from the journal.
    assert_eq!(r.iterations[2].notes.len(), 1);
}

#[test]
fn incomplete_phase_from_the_journal() {
    let d = run_dir();
    // Interrupted in iteration 3's evolve phase: later journal lines and files are gone.
    cut_journal(d.path(), |e| {
        e["ev"] == "phase_end" && e["iter"] == 3 && e["phase"] == "evolve"
    });
    std::fs::remove_dir_all(d.path().join("iterations/003/evolve")).unwrap();
    std::fs::remove_dir_all(d.path().join("iterations/004")).unwrap();
    std::fs::remove_dir_all(d.path().join("iterations/005")).unwrap();
    let r = RunReport::load(d.path()).unwrap();
    assert_eq!(r.status(), "incomplete");
    let i = r.incomplete.clone().unwrap();
    assert_eq!(i.iteration, 3);
    assert_eq!(i.phase.as_deref(), Some("evolve"));
    assert!(
        i.message.contains("iteration 3") && i.message.contains("evolve"),
        "{}",
        i.message
    );
    assert_eq!(r.iterations.len(), 3);
    assert!(r.iterations[1].complete && !r.iterations[2].complete);
    let g = report::generate(d.path(), &ReportOptions::default()).unwrap();
    assert_eq!(g.incomplete.unwrap().iteration, 3);
    let html = std::fs::read_to_string(g.html).unwrap();
    assert!(
        html.contains("Incomplete run.")
            && html.contains("iteration 3: phase evolve did not finish")
    );
    let md = std::fs::read_to_string(g.markdown).unwrap();
    assert!(md.contains("**Incomplete run.** iteration 3: phase evolve did not finish"));
}

#[test]
fn incomplete_rollout_uses_journal_trials() {
    let d = run_dir();
    // Killed during iteration 2's rollout after 5 trials: no scores yet.
    let mut n = 0;
    cut_journal(d.path(), |e| {
        if e["ev"] == "trial_done" && e["iter"] == 2 {
            n += 1;
        }
        n > 5
    });
    for f in ["scores.json", "change_evaluation.json"] {
        std::fs::remove_file(d.path().join("iterations/002").join(f)).unwrap();
    }
    for t in ["003", "004", "005"] {
        std::fs::remove_dir_all(d.path().join("iterations").join(t)).unwrap();
    }
    let r = RunReport::load(d.path()).unwrap();
    let i = r.incomplete.clone().unwrap();
    assert_eq!((i.iteration, i.phase.as_deref()), (2, Some("rollout")));
    assert!(i.message.contains("5 trials done"), "{}", i.message);
    let it = r.iteration(2).unwrap();
    let done: u32 = r.tasks.iter().filter_map(|t| it.cell(t)).map(|c| c.k).sum();
    assert_eq!(done, 5);
    assert!(r
        .tasks
        .iter()
        .filter_map(|t| it.cell(t))
        .all(|c| c.status == "running"));
    // The report still renders, with running cells.
    let g = report::generate(d.path(), &ReportOptions { trial_pages: false }).unwrap();
    let html = std::fs::read_to_string(g.html).unwrap();
    assert!(html.contains("cell c-running"));
}

#[test]
fn missing_output_of_a_finished_phase_is_incomplete() {
    let d = run_dir();
    std::fs::remove_file(d.path().join("iterations/002/scores.json")).unwrap();
    let r = RunReport::load(d.path()).unwrap();
    let i = r.incomplete.unwrap();
    assert_eq!(i.iteration, 2);
    assert!(
        i.message.contains("scores.json is missing"),
        "{}",
        i.message
    );
}

#[test]
fn a_directory_that_is_not_a_run_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let e = RunReport::load(d.path()).unwrap_err();
    assert!(e.to_string().contains("not a run directory"), "{e}");
}

#[test]
fn report_html_markdown_and_trial_pages_are_complete_and_escaped() {
    let d = run_dir();
    let g = report::generate(d.path(), &ReportOptions::default()).unwrap();
    assert_eq!(g.trial_pages, 5 * 12 * 2);
    assert!(g.trial_page_errors.is_empty(), "{:?}", g.trial_page_errors);
    let html = std::fs::read_to_string(&g.html).unwrap();
    // Self-contained: no scripts, no external resources.
    assert!(!html.contains("<script"), "unescaped script in report.html");
    assert!(!html.contains("<link") && !html.contains("src=\"http"));
    assert!(html.contains("&lt;script&gt;"));
    // Plots: 5 visible + 5 held-out points, a best mark, 12 × 5 heatmap cells.
    assert_eq!(
        html.matches("<g class=\"point visible\" data-iteration")
            .count(),
        5
    );
    assert_eq!(
        html.matches("<g class=\"point holdout\" data-iteration")
            .count(),
        5
    );
    assert_eq!(html.matches("class=\"best-mark\"").count(), 1);
    assert_eq!(html.matches("<rect class=\"cell c-").count(), 60);
    assert!(html.matches("class=\"seg s").count() > 10);
    // Verdict badges, links to diffs, overviews, details and trial pages (minijinja
    // escapes `/` in attributes as `&#x2f;`).
    assert!(html.contains("class=\"verdict v-"));
    let html = html.replace("&#x2f;", "/");
    assert!(html.contains("href=\"iterations/001/evolve/diff.patch\""));
    assert!(html.contains("href=\"iterations/001/analysis/overview.md\""));
    assert!(html.contains("href=\"iterations/001/analysis/detail/task-000.md\""));
    assert!(html.contains("href=\"report/trials/001/task-000/1.html\""));
    let page = std::fs::read_to_string(d.path().join("report/trials/001/task-000/1.html")).unwrap();
    assert!(!page.contains("<script") && !page.contains("<b>bold"));
    assert!(page.contains("&lt;script&gt;"));
    assert_eq!(page.matches("<details class=\"call").count(), 6);
    assert!(
        page.contains("class=\"call failed\" open"),
        "failed calls are open"
    );
    assert!(page.contains("loop_guard"));
    // A second report keeps the current pages and rewrites only the changed trial's page.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let clean = d
        .path()
        .join("iterations/002/trials/task-003/2/trace.clean.json");
    std::fs::write(&clean, std::fs::read(&clean).unwrap()).unwrap();
    let g2 = report::generate(d.path(), &ReportOptions::default()).unwrap();
    assert_eq!((g2.trial_pages, g2.trial_pages_current), (1, 119));
    let md = std::fs::read_to_string(&g.markdown).unwrap();
    assert!(!md.contains("<script") && md.contains("&lt;script&gt;"));
    assert!(md.contains("![pass@1 per iteration](report/pass_at_1.svg)"));
    let rows = md.lines().filter(|l| l.starts_with("| task-0")).count();
    assert_eq!(rows, 12, "one heatmap row per task");
    for f in [
        "pass_at_1.svg",
        "heatmap.svg",
        "tokens.svg",
        "cost.svg",
        "phases.svg",
    ] {
        let s = std::fs::read_to_string(d.path().join("report").join(f)).unwrap();
        assert!(s.starts_with("<svg") && s.contains("<style>"), "{f}");
    }
}

#[test]
fn show_documents_have_the_documented_keys() {
    let d = run_dir();
    let r = RunReport::load(d.path()).unwrap();
    let docs = [
        json::run_doc(&r),
        json::iteration_doc(&r, 2).unwrap(),
        json::task_doc(&r, "task-001", None).unwrap(),
        json::trial_doc(&r, 2, "task-001", 1).unwrap(),
    ];
    for (doc, kind) in docs.iter().zip(json::KINDS) {
        assert_eq!(doc["kind"], kind);
        for k in json::required_keys(kind) {
            assert!(doc.get(k).is_some(), "{kind} document lacks {k}");
        }
    }
    for s in docs[0]["iterations"].as_array().unwrap() {
        for k in json::SUMMARY_KEYS {
            assert!(s.get(k).is_some(), "summary lacks {k}");
        }
    }
    assert_eq!(docs[0]["iterations"].as_array().unwrap().len(), 5);
    assert_eq!(docs[1]["tasks"].as_array().unwrap().len(), 12);
    assert_eq!(docs[2]["history"].as_array().unwrap().len(), 5);
    assert_eq!(docs[3]["turns"].as_array().unwrap().len(), 6);
    assert!(json::iteration_doc(&r, 9).is_none());
    assert!(json::task_doc(&r, "nope", None).is_none());
    assert!(json::trial_doc(&r, 2, "task-001", 7).is_err());
    assert!(EVIL.contains("<script>"));
}
