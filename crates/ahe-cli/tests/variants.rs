//! `[evolve] variants = 2` end to end on the smoke benchmark (local sandbox, scripted mock
//! models; two iterations): the structural variant's change set harms (hello-file breaks), the guidance
//! variant's helps (count-errors passes); the screen picks the helpful one, which is
//! committed, and the other stays as a tag. A run killed (-9) during the screen resumes to the
//! same choice without redoing the finished variants.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ahe, json_file as json, root, text};
use serde_json::Value;

fn config(dir: &Path) -> PathBuf {
    let p = dir.join("variants.toml");
    let body = format!(
        "extends = \"{}\"\niterations = 2\n[evolve]\nvariants = 2\n\
         variant_focus = [\"structural\", \"guidance\"]\nscreen_tasks = 3\npreflight = false\n\
         [attribution]\nmax_extra_share = 1.0\n\
         [models.default]\nscript = \"{}\"\n",
        root().join("configs/smoke-mock.toml").display(),
        root()
            .join("crates/ahe-cli/tests/fixtures/variants.script.toml")
            .display()
    );
    std::fs::write(&p, body).unwrap();
    p
}

fn git(run: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(args)
        .current_dir(run.join("harness"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// (variant, passed, trials, chosen) of `evolve/variants.json`.
fn figures(run: &Path) -> Vec<(u64, u64, u64, bool)> {
    let v = json(&run.join("iterations/001/evolve/variants.json"));
    v["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["variant"].as_u64().unwrap(),
                s["passed"].as_u64().unwrap(),
                s["trials"].as_u64().unwrap(),
                s["chosen"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn check_choice(run: &Path) {
    assert_eq!(figures(run), [(1, 0, 3, false), (2, 2, 3, true)]);
    // The chosen change set is iteration 1's commit; the other is a tag of its own.
    let memory = git(run, &["show", "iter-001:memory/MEMORY.md"]);
    assert!(memory.contains("HINT-LEVEL-FIELD"), "{memory}");
    assert_eq!(git(run, &["show", "iter-001:memory/style.md"]), "");
    let other = git(run, &["show", "iter-001-v1:memory/style.md"]);
    assert!(other.contains("NO-ECHO"), "{other}");
    let m = json(&run.join("iterations/001/evolve/manifest.json"));
    assert_eq!(m["changes"][0]["files"][0], "memory/MEMORY.md");
    // The screen trials are extra trials of their own sets and cost (role `screen`).
    let it = run.join("iterations/001");
    assert!(it.join("extra/screen/v1/trials").is_dir());
    let s = json(&it.join("scores.json"));
    assert!(s["meta"]["roles"]["screen"].is_object(), "{s}");
    // The final evaluation of the chosen harness: count-errors passes.
    let s2 = json(&run.join("iterations/002/scores.json"));
    assert_eq!(s2["tasks"]["count-errors"]["status"], "pass", "{s2}");
}

#[test]
fn the_helpful_variant_is_chosen_on_the_screen_and_the_other_kept_as_a_tag() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path());
    let runs = d.path().to_str().unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let o = ahe(
        &[
            "evolve",
            "--config",
            cfg_s,
            "--name",
            "clean",
            "--runs-dir",
            runs,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let run = d.path().join("clean");
    check_choice(&run);
    // The next evolve step's history shows the variant the screen did not choose.
    let h = std::fs::read_to_string(run.join("iterations/002/evolve/inputs/history.md")).unwrap();
    assert!(
        h.contains("**iter-001-v1/c1** (memory; files memory/style.md)")
            && h.contains("NOT CHOSEN: another variant of the iteration passed more of the screen (0/3 against 2); kept as tag iter-001-v1"),
        "{h}"
    );
    let notes = std::fs::read_to_string(run.join("iterations/001/evolve/summary.md")).unwrap();
    assert!(
        notes.contains("v2 [guidance] 2/3 (1 change(s)) chosen"),
        "{notes}"
    );

    // Killed (-9) once the screen's first trial is done, then resumed: the same choice, and
    // neither variant's agent runs again.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args([
            "evolve",
            "--config",
            cfg_s,
            "--name",
            "killed",
            "--runs-dir",
            runs,
        ])
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = d.path().join("killed");
    let t0 = Instant::now();
    let in_screen = |j: &str| {
        j.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|e| {
                e["ev"] == "extra_trial_done"
                    && e["set"].as_str().is_some_and(|s| s.starts_with("screen/"))
            })
    };
    while !in_screen(&std::fs::read_to_string(run.join("journal.jsonl")).unwrap_or_default()) {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the screen never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap();
    assert!(
        !journal.contains("\"phase\":\"commit\""),
        "killed after the screen:\n{journal}"
    );
    let v1 = run.join("iterations/001/evolve/variants/v1/result.json");
    let stamp = std::fs::metadata(&v1).unwrap().modified().unwrap();
    let o = ahe(&["evolve", "--resume", run.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    check_choice(&run);
    assert_eq!(
        std::fs::metadata(&v1).unwrap().modified().unwrap(),
        stamp,
        "v1 ran again"
    );
}
