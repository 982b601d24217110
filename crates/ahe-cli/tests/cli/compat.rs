//! Run directories written by an earlier binary still load: `tests/fixtures/compat/
//! runs-main-d27b95d.tar.gz` holds three runs of `configs/smoke-mock.toml` made by the `ahe`
//! of main at d27b95d (before the crate split of issue 27): `full` (complete),
//! `killed-rollout` (kill -9 during iteration 2's rollout) and `killed-confirm` (kill -9 during
//! iteration 2's confirmation trials). `ahe show` (text and `--json`, every view) and
//! `ahe report` print exactly what that binary printed (the `*.show.*` and `*.report.*` files
//! beside it, made by it), and `ahe evolve --resume` finishes both killed runs with the
//! outcome of the complete one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Where the fixture was made; its run.toml names files below this root.
const MADE_AT: &str = "/work/wt-arch";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn fixtures() -> PathBuf {
    root().join("crates/ahe-cli/tests/fixtures/compat")
}

fn ahe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The fixture's runs, unpacked into a temp dir, their run.toml pointed at this checkout.
fn unpack() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let o = Command::new("tar")
        .arg("xzf")
        .arg(fixtures().join("runs-main-d27b95d.tar.gz"))
        .arg("-C")
        .arg(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let here = root().to_string_lossy().into_owned();
    for run in ["full", "killed-rollout", "killed-confirm"] {
        let p = d.path().join(run).join("run.toml");
        let t = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, t.replace(MADE_AT, &here)).unwrap();
    }
    d
}

/// Output with the machine-specific parts replaced: the runs' dir, the checkout, the time
/// a report was generated; and report.html's style sheet left out.
fn normal(s: &str, runs: &Path) -> String {
    let s = s
        .replace(&runs.to_string_lossy().into_owned(), "<RUNS>")
        .replace(&root().to_string_lossy().into_owned(), "<ROOT>")
        .replace(MADE_AT, "<ROOT>")
        // report.html escapes the slashes of the same paths.
        .replace(&root().to_string_lossy().replace('/', "&#x2f;"), "<ROOT>")
        .replace(&MADE_AT.replace('/', "&#x2f;"), "<ROOT>");
    let re = regex::Regex::new(r"generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d").unwrap();
    let s = re.replace_all(&s, "generated <TIME>");
    // The inline style sheet is presentation, not a contract of old runs' content.
    let css = regex::Regex::new(r"(?s)<style>.*?</style>").unwrap();
    css.replace_all(&s, "<style>…</style>").into_owned()
}

fn golden(name: &str, got: &str, runs: &Path, bad: &mut Vec<String>) {
    let want = std::fs::read_to_string(fixtures().join(name)).unwrap();
    let (want, got) = (normal(&want, runs), normal(got, runs));
    if want != got {
        let line = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        bad.push(format!(
            "{name} differs from the old binary's output at line {}:\n  old: {:?}\n  new: {:?}",
            line + 1,
            want.lines().nth(line).unwrap_or("<end>"),
            got.lines().nth(line).unwrap_or("<end>")
        ));
    }
}

#[test]
fn old_runs_show_and_report_as_the_old_binary_printed_them() {
    let d = unpack();
    let runs = d.path();
    let mut bad = Vec::new();
    for r in ["full", "killed-rollout", "killed-confirm"] {
        let run = runs.join(r);
        let run = run.to_str().unwrap();
        let mut views: Vec<(String, Vec<&str>)> = vec![(format!("{r}.show"), vec![])];
        for t in ["1", "2"] {
            views.push((format!("{r}.show.iter{t}"), vec!["--iteration", t]));
        }
        views.push((format!("{r}.show.task"), vec!["--task", "fix-sum"]));
        views.push((
            format!("{r}.show.trial"),
            vec!["--iteration", "1", "--task", "fix-sum", "--trial", "1"],
        ));
        for (name, extra) in views {
            for json in [false, true] {
                let mut args = vec!["show", run];
                args.extend(&extra);
                if json {
                    args.push("--json");
                }
                let o = ahe(&args);
                let ext = if json { "json" } else { "txt" };
                golden(&format!("{name}.{ext}"), &text(&o), runs, &mut bad);
            }
        }
        let o = ahe(&["report", run]);
        assert_eq!(o.status.code(), Some(0), "report {r}: {}", text(&o));
        for f in ["report.md", "report.html"] {
            let got = std::fs::read_to_string(runs.join(r).join(f)).unwrap();
            golden(&format!("{r}.{f}"), &got, runs, &mut bad);
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

fn json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// One iteration's pass@1, each task's trial statuses, and the verdicts of the changes.
type IterOutcome = (f64, Vec<(String, Vec<String>)>, Vec<(String, String)>);

/// Per iteration: pass@1, each task's trial statuses, and the verdicts of the changes.
fn outcome(run: &Path) -> Vec<IterOutcome> {
    (1..=4)
        .map(|t| {
            let it = run.join(format!("iterations/{t:03}"));
            let s = json(&it.join("scores.json"));
            let tasks = s["tasks"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(task, v)| {
                    let st = v["trials"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x["status"].as_str().unwrap().to_string())
                        .collect();
                    (task.clone(), st)
                })
                .collect();
            let ev = json(&it.join("change_evaluation.json"));
            let verdicts = ev["changes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    (
                        c["id"].as_str().unwrap_or("").to_string(),
                        c["verdict"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            (s["pass_at_1"].as_f64().unwrap(), tasks, verdicts)
        })
        .collect()
}

#[test]
fn runs_killed_by_the_old_binary_resume_to_the_same_outcome() {
    let d = unpack();
    let want = outcome(&d.path().join("full"));
    for r in ["killed-rollout", "killed-confirm"] {
        let run = d.path().join(r);
        let o = ahe(&["evolve", "--resume", run.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "resume {r}: {}", text(&o));
        assert_eq!(outcome(&run), want, "{r} resumed to another outcome");
        let o = ahe(&["show", run.to_str().unwrap()]);
        assert!(text(&o).contains("complete (completed)"), "{}", text(&o));
    }
}
