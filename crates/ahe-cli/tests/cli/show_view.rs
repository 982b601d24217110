//! `ahe show` (a run's summary) and `report.md` render one view (`view::run::RunSummary`):
//! on the runs of the compat fixture they print the same best harness, the same pass@1 per
//! iteration and the same cost and wall time.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{ahe, root, text};

/// The fixture's runs (`tests/fixtures/compat`), unpacked into a temp dir.
fn unpack() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let tar = root().join("crates/ahe-cli/tests/fixtures/compat/runs-main-d27b95d.tar.gz");
    let o = Command::new("tar")
        .arg("xzf")
        .arg(tar)
        .arg("-C")
        .arg(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    d
}

/// The text between `start` and the first `end` after it.
fn between<'a>(s: &'a str, start: &str, end: &str) -> &'a str {
    let from = s
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in:\n{s}"))
        + start.len();
    let len = s[from..]
        .find(end)
        .unwrap_or_else(|| panic!("no {end:?} in:\n{s}"));
    &s[from..from + len]
}

/// (iteration, pass@1) per row of `ahe show`'s iterations table.
fn show_passes(show: &str) -> Vec<(String, String)> {
    let table = between(show, "\niter ", "\ntotal: ");
    table
        .lines()
        .skip(1)
        .map(|l| {
            let mut words = l.split_whitespace();
            let iteration = words.next().unwrap().to_string();
            let marks = ["★", "final", "(incomplete)"];
            let pass = words.find(|w| !marks.contains(w)).unwrap().to_string();
            (iteration, pass)
        })
        .collect()
}

/// (iteration, pass@1) per row of `report.md`'s iterations table.
fn report_passes(md: &str) -> Vec<(String, String)> {
    md.lines()
        .filter(|l| l.starts_with("| [") && l.contains("](#iteration-"))
        .map(|l| {
            let iteration = between(l, "](#iteration-", ")").to_string();
            let pass = l.split(" | ").nth(1).unwrap().trim().to_string();
            (iteration, pass)
        })
        .collect()
}

#[test]
fn show_and_report_md_print_the_same_summary_figures() {
    let d = unpack();
    for r in ["full", "killed-rollout"] {
        let run = d.path().join(r);
        let run_s = run.to_str().unwrap();
        let show = ahe(&["show", run_s], &[]);
        assert_eq!(show.status.code(), Some(0), "{}", text(&show));
        let show = String::from_utf8_lossy(&show.stdout).into_owned();
        let o = ahe(&["report", run_s], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let md = std::fs::read_to_string(Path::new(&run).join("report.md")).unwrap();

        let show_best = between(&show, "best: ", "\n");
        let md_best = between(&md, "- best: ", "\n");
        if show_best == "none yet" {
            assert_eq!(md_best, "none yet", "{r}");
        } else {
            // `iteration 3 · visible pass@1 1.000 · commit ffb92db7b168`
            let want = format!(
                "**iteration {}** (visible pass@1 {}, commit `{}`",
                between(&show, "best: iteration ", " · "),
                between(&show, " · visible pass@1 ", " · "),
                between(&show, " · commit ", "\n")
            );
            assert!(md_best.starts_with(&want), "{r}: {md_best:?} vs {want:?}");
        }

        let passes = show_passes(&show);
        assert!(!passes.is_empty(), "{r}: no iterations in\n{show}");
        assert_eq!(passes, report_passes(&md), "{r}: pass@1 per iteration");

        let (cost, wall) = (
            between(&show, "\ntotal: ", " · "),
            between(&show, "\ntotal: ", " wall · "),
        );
        let wall = wall.rsplit(" · ").next().unwrap();
        let md_costs = format!("- cost: {cost} · wall time (phases): {wall}\n");
        assert!(md.contains(&md_costs), "{r}: {md_costs:?} not in report.md");
    }
}
